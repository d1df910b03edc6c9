"""Runs every example end to end, in a subprocess, as a user would."""

import json
import os
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example(name, *args, **env_vars):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **env_vars)
  return subprocess.run(
      [sys.executable, os.path.join(ROOT, "examples", name), *args],
      capture_output=True, text=True, env=env, timeout=600)


class MixedPrecisionTf1DemoTest(tf.test.TestCase):

  def test_quick_run(self):
    out = os.path.join(self.create_tempdir().full_path, "results.json")
    proc = run_example("mixed_precision_tf1.py", "--quick", "--json", out)
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    self.assertIn("loss scaling [", proc.stdout)  # The progress display.
    with open(out, encoding="utf-8") as f:
      scaled, bare = json.load(f)
    self.assertTrue(scaled["loss_scaling"])
    self.assertFalse(bare["loss_scaling"])
    # With loss scaling the loss falls and the model learns...
    self.assertLess(scaled["final_loss"], 0.5 * scaled["first_loss"])
    self.assertLess(scaled["test_loss"], 0.5 * scaled["first_loss"])
    self.assertGreater(scaled["loss_scale"], 2.**15)  # It grew.
    # ...and the run without it shows the underflow that scaling prevents:
    # a large share of its float16 backward-pass gradients are exactly zero.
    self.assertGreater(bare["final_zero_grads"], 0.2)
    self.assertGreater(bare["final_zero_grads"],
                       5 * scaled["final_zero_grads"])
    self.assertEqual(0, bare["skipped_steps"])
    # The frozen encoder leaves the unscaled run on a plateau.
    self.assertGreater(bare["final_loss"], 1.5 * scaled["final_loss"])


class MixedPrecisionKerasExampleTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(("keras_3", "0", "keras3_optimizer"),
                                  ("tf_keras", "1", "tf_keras_optimizer"))
  def test_quick_run(self, legacy_keras, family):
    out = os.path.join(self.create_tempdir().full_path, "results.json")
    proc = run_example("mixed_precision_keras.py", "--quick", "--json", out,
                       TF_USE_LEGACY_KERAS=legacy_keras)
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    self.assertIn(f"policy mixed_float16, optimizer mplso._src.keras_wrappers."
                  f"{family}", proc.stdout)
    self.assertRegex(proc.stdout, r"epoch +4 +loss [\d.]+ .* loss scale +\d+")
    with open(out, encoding="utf-8") as f:
      epochs = json.load(f)
    self.assertLen(epochs, 4)
    self.assertLess(epochs[-1]["loss"], 0.2 * epochs[0]["loss"])
    self.assertGreater(epochs[-1]["val_accuracy"], 0.8)
    # The scale grew past its start, overflowed, and steps were skipped;
    # skipped steps still count in `iterations`.
    self.assertGreater(max(e["loss_scale"] for e in epochs), 2.**15)
    self.assertGreater(epochs[-1]["skipped_steps"], 0)
    self.assertEqual(epochs[-1]["iterations"], 4 * epochs[0]["iterations"])


class MixedPrecisionDistributeExampleTest(tf.test.TestCase):

  def test_quick_run_on_two_replicas(self):
    out = os.path.join(self.create_tempdir().full_path, "results.json")
    proc = run_example("mixed_precision_distribute.py", "--quick", "--json",
                       out)
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    self.assertIn("MirroredStrategy with 2 replicas", proc.stdout)
    self.assertRegex(proc.stdout,
                     r"custom epoch +3 +loss [\d.]+ +loss scale +\d+ +skipped")
    with open(out, encoding="utf-8") as f:
      results = json.load(f)
    self.assertEqual({"fit": True, "custom": True}, results["replicas_agree"])
    for run in ("fit", "custom"):
      epochs = [e for e in results["epochs"] if e["run"] == run]
      self.assertLen(epochs, 3)
      self.assertLess(epochs[-1]["loss"], 0.6 * epochs[0]["loss"])
      self.assertGreater(epochs[-1]["loss_scale"], 2.**15)  # It grew.


if __name__ == "__main__":
  absltest.main()
