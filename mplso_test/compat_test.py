"""Tests for mplso.compat: install()/uninstall() and `python -m mplso.compat`."""

import os
import re
import subprocess
import sys
import textwrap

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

import mplso
from mplso import compat
from mplso import contrib

V1 = tf.compat.v1
# Every legacy name install() provides now (the Keras one arrives with
# mplso.keras): (namespace getter, name, mplso object).
NAMES = [
    (lambda: V1.train.experimental, "MixedPrecisionLossScaleOptimizer",
     mplso.MixedPrecisionLossScaleOptimizer),
    (lambda: V1.mixed_precision, "MixedPrecisionLossScaleOptimizer",
     mplso.MixedPrecisionLossScaleOptimizer),
] + [
    (namespace, cls.__name__, cls)
    for namespace in (lambda: V1.mixed_precision,
                      lambda: V1.mixed_precision.experimental,
                      lambda: V1.train.experimental)
    for cls in (mplso.LossScale, mplso.FixedLossScale, mplso.DynamicLossScale)
] + [
    (lambda: tf.contrib.mixed_precision, cls.__name__, cls)
    for cls in (contrib.LossScaleOptimizer, contrib.LossScaleManager,
                contrib.FixedLossScaleManager,
                contrib.ExponentialUpdateLossScaleManager)
]


def snapshot():
  """What each legacy name resolves to now (None where it does not exist)."""
  result = {"tf.contrib": getattr(tf, "contrib", None),
            "sys.modules": sys.modules.get("tensorflow.contrib")}
  for i, (namespace, name, _) in enumerate(NAMES):
    try:
      result[i] = getattr(namespace(), name, None)
    except AttributeError:  # tf.contrib itself is absent.
      result[i] = None
  return result


class InstallTest(tf.test.TestCase, parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.addCleanup(compat.uninstall)

  def test_every_name_resolves_to_mplso(self):
    compat.install()
    for namespace, name, expected in NAMES:
      self.assertIs(expected, getattr(namespace(), name), name)

  def test_contrib_is_importable(self):
    compat.install()
    from tensorflow.contrib import mixed_precision  # pylint: disable=g-import-not-at-top
    self.assertIs(contrib.LossScaleOptimizer, mixed_precision.LossScaleOptimizer)

  def test_install_twice_then_uninstall_restores_exactly(self):
    before = snapshot()
    self.assertIsNone(before["tf.contrib"])
    self.assertIsNot(mplso.DynamicLossScale,
                     V1.mixed_precision.DynamicLossScale)
    compat.install()
    installed = snapshot()
    compat.install()
    self.assertEqual(installed, snapshot())  # Idempotent.
    compat.uninstall()
    self.assertEqual(before, snapshot())
    compat.uninstall()  # A no-op now.
    self.assertEqual(before, snapshot())

  def test_legacy_spelling_trains(self):
    compat.install()
    var = tf.Variable(1.)
    opt = tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(.5),
        tf.compat.v1.mixed_precision.DynamicLossScale(initial_loss_scale=8.))
    opt.minimize(lambda: var * 2., var_list=[var])
    self.assertEqual(0., float(var))


def run_compat(*args, cwd=None):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.run([sys.executable, "-m", "mplso.compat", *args],
                        capture_output=True, text=True, env=env, cwd=cwd,
                        timeout=300)


class RunnerTest(tf.test.TestCase):

  def write(self, code):
    path = os.path.join(self.create_tempdir().full_path, "legacy_script.py")
    with open(path, "w", encoding="utf-8") as f:
      f.write(textwrap.dedent(code))
    return path

  def test_runs_script_as_main_with_its_argv(self):
    script = self.write("""
        import sys
        import tensorflow as tf
        manager = tf.contrib.mixed_precision.FixedLossScaleManager(5000)
        print(__name__, sys.argv[1:], type(manager).__module__)
        """)
    proc = run_compat(script, "--steps", "3", "-h")
    self.assertEqual(0, proc.returncode, proc.stderr)
    self.assertIn("__main__ ['--steps', '3', '-h'] mplso.", proc.stdout)

  def test_errors_keep_traceback_and_exit_code(self):
    raises = self.write("""
        def train():
          raise RuntimeError("diverged at step 7")
        train()
        """)
    proc = run_compat(raises)
    self.assertEqual(1, proc.returncode)
    self.assertIn("RuntimeError: diverged at step 7", proc.stderr)
    self.assertIn("legacy_script.py\", line 3, in train", proc.stderr)
    exits = self.write("import sys\nsys.exit(3)\n")
    self.assertEqual(3, run_compat(exits).returncode)

  def test_help_and_usage_errors(self):
    proc = run_compat("-h")
    self.assertEqual(0, proc.returncode)
    self.assertIn("usage: python -m mplso.compat SCRIPT", proc.stdout)
    proc = run_compat()
    self.assertEqual(2, proc.returncode)
    self.assertIn("usage:", proc.stderr)
    proc = run_compat("no_such_script.py")
    self.assertEqual(2, proc.returncode)
    self.assertIn("'no_such_script.py'", proc.stderr)


class LegacyExamplesTest(tf.test.TestCase):

  def test_contrib_script_trains_through_the_runner(self):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = run_compat(
        os.path.join(root, "examples", "legacy", "contrib_loss_scale.py"),
        "--steps", "100", "--model_dir", self.create_tempdir().full_path)
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    losses = [float(v) for v in re.findall(r"loss (\d+\.\d+)", proc.stdout)]
    self.assertGreater(len(losses), 2)
    self.assertLess(losses[-1], 0.2 * losses[0])
    self.assertIn("saved", proc.stdout)


if __name__ == "__main__":
  absltest.main()
