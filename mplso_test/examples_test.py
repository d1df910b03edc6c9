"""Runs every example end to end, in a subprocess, as a user would."""

import json
import os
import subprocess
import sys

from absl.testing import absltest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example(name, *args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
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


if __name__ == "__main__":
  absltest.main()
