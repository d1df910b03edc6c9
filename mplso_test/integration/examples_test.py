"""Runs every example end to end, in a subprocess, as a user would."""

import json
import os
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized
import pytest
import tensorflow as tf

ROOT = os.path.abspath(os.path.join(__file__, "..", "..", ".."))

# Each example trains for real, in its own process: about a minute in all.
pytestmark = pytest.mark.slow


def run_example(name, *args, **env_vars):
  # As a user runs it: the example picks TensorFlow's log level itself.
  env = dict(os.environ, **env_vars)
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)
  return subprocess.run(
      [sys.executable, os.path.join(ROOT, "examples", name), *args],
      capture_output=True, text=True, env=env, timeout=600)


def assert_quiet_start(test, proc):
  """No TensorFlow C++ start-up logs (tf_keras's Python warnings may stay)."""
  for line in ("absl::InitializeLog", "cuInit", "oneDNN", "cuda"):
    test.assertNotIn(line, proc.stderr)


class MixedPrecisionTf1DemoTest(tf.test.TestCase):

  def test_quick_run(self):
    out = os.path.join(self.create_tempdir().full_path, "results.json")
    proc = run_example("mixed_precision_tf1.py", "--quick", "--json", out)
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    self.assertIn("loss scaling [", proc.stdout)  # The progress display.
    self.assertEqual("", proc.stderr)  # A quiet start.
    with open(out, encoding="utf-8") as f:
      scaled, bare = json.load(f)
    self.assertTrue(scaled["loss_scaling"])
    self.assertFalse(bare["loss_scaling"])
    # With loss scaling the loss falls and the model learns...
    self.assertLess(scaled["final_loss"], 0.5 * scaled["first_loss"])
    self.assertLess(scaled["test_loss"], 0.5 * scaled["first_loss"])
    self.assertGreater(scaled["loss_scale"], 2.**15)  # It grew.
    # The dynamic scale's whole cycle, from the model's own gradients: it
    # grew, the gradients overflowed float16, the step was skipped (counted
    # in `global_step`), the scale fell, and it grew again afterwards.
    scales, skipped_at = scaled["loss_scales"], scaled["skipped_at"]
    self.assertLen(scales, scaled["steps"])
    self.assertNotEmpty(skipped_at)
    self.assertLen(skipped_at, scaled["skipped_steps"])
    first = skipped_at[0]  # Steps count from 1: its scale is scales[first - 1].
    self.assertGreater(scales[first - 2], 2.**15)  # Grown before it.
    self.assertEqual(scales[first - 1], scales[first - 2] / 2)  # Halved.
    self.assertGreater(max(scales[first:]), min(scales[first - 1:]))  # Regrew.
    self.assertRegex(proc.stdout, rf"step +{first}: gradients overflowed "
                     r"float16 at scale 2\^\d+: step skipped, scale halved "
                     r"to 2\^\d+")
    self.assertRegex(proc.stdout, r"finite steps in a row: scale grew to "
                     r"2\^\d+")
    # The summary table: aligned columns, scales as powers of two.
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if "first loss" in line)
    table = lines[header:header + 3]
    self.assertEqual(len(set(len(line) for line in table)), 1, table)
    self.assertRegex(table[1], r"^ loss scaling( +[\d.]+%?){5} +2\^\d+ ")
    self.assertRegex(table[2], r"^   no scaling( +[\d.]+%?){5} +none ")
    # ...and the run without it shows the underflow that scaling prevents.
    # The underflow meter names the frozen encoder (its gradients all zero)
    # from the first sample on; with loss scaling no variable comes close.
    encoder = {"w0", "b0", "w1", "b1"}
    first = bare["underflow"][0]
    self.assertEqual(0, first["step"])
    self.assertContainsSubset({"w0", "b0"}, {
        name for name, zero in first["zero"].items() if zero >= 0.99})
    self.assertEqual(encoder, set(bare["frozen_at"]))
    self.assertEqual({"w0": 1, "b0": 1}, {
        name: at for name, at in bare["frozen_at"].items() if at == 1})
    self.assertRegex(proc.stdout, r"step +1: underflow meter: zero gradient "
                     r"elements w0 100%, b0 100%: frozen")
    # A sample every 10 applied steps (global_step 0, 10, ...), none lost.
    steps = [sample["step"] for sample in scaled["underflow"]]
    self.assertEqual(list(range(0, 10 * len(steps), 10)), steps)
    self.assertGreater(len(steps), 15)
    for sample in scaled["underflow"]:
      self.assertLessEqual(max(sample["zero"].values()), 0.5, sample)
    self.assertEqual({}, scaled["frozen_at"])
    self.assertEqual(0, bare["skipped_steps"])
    self.assertEqual([], bare["skipped_at"])
    # The frozen encoder leaves the unscaled run on a plateau.
    self.assertGreater(bare["final_loss"], 1.5 * scaled["final_loss"])


class MixedPrecisionTf1DemoFullRunTest(tf.test.TestCase):

  def test_the_meter_shows_the_encoder_thaw(self):
    out = os.path.join(self.create_tempdir().full_path, "results.json")
    proc = run_example("mixed_precision_tf1.py", "--json", out)
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    with open(out, encoding="utf-8") as f:
      _, bare = json.load(f)
    # Every encoder variable froze, then thawed, and the loss fell after.
    self.assertEqual({"w0", "b0", "w1", "b1"}, set(bare["thawed_at"]))
    for name, at in bare["thawed_at"].items():
      self.assertGreater(at, bare["frozen_at"][name])
    last = max(bare["thawed_at"].values())
    self.assertLess(bare["final_loss"], 0.95 * bare["losses"][last - 1])
    self.assertRegex(proc.stdout, r"underflow meter: zero gradient elements "
                     r"w0 \d+%, b0 \d+%: thawed")


class MixedPrecisionKerasExampleTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(("keras_3", "0", "keras3_optimizer"),
                                  ("tf_keras", "1", "tf_keras_optimizer"))
  def test_quick_run(self, legacy_keras, family):
    out = os.path.join(self.create_tempdir().full_path, "results.json")
    proc = run_example("mixed_precision_keras.py", "--quick", "--json", out,
                       TF_USE_LEGACY_KERAS=legacy_keras)
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    assert_quiet_start(self, proc)
    self.assertIn(f"policy mixed_float16, optimizer mplso._src.keras."
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
    assert_quiet_start(self, proc)
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
