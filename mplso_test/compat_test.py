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
import mplso.keras

V1 = tf.compat.v1
# Every legacy name install() provides: (namespace getter, name, mplso object).
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
] + [
    (lambda: tf.keras.mixed_precision.experimental, "LossScaleOptimizer",
     mplso.keras.LossScaleOptimizer),
    (lambda: tf.keras.mixed_precision.experimental, "set_policy",
     tf.keras.mixed_precision.set_global_policy),
] + [
    (lambda: tf.mixed_precision.experimental, cls.__name__, cls)
    for cls in (mplso.LossScale, mplso.FixedLossScale, mplso.DynamicLossScale)
]


def snapshot():
  """What each legacy name resolves to now (None where it does not exist)."""
  result = {"tf.contrib": getattr(tf, "contrib", None),
            "tf.mixed_precision": getattr(tf, "mixed_precision", None),
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

  def test_keras_spelling_wraps_what_tf_keras_is(self):
    compat.install()
    opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
        tf.keras.optimizers.SGD(0.25), "dynamic")
    self.assertIsInstance(opt, tf.keras.optimizers.Optimizer)
    self.assertIsInstance(opt, mplso.keras.LossScaleOptimizer)
    var = tf.Variable(1.)
    opt.minimize(lambda: var**2, var_list=[var])
    self.assertEqual(0.5, float(var))

  def test_legacy_spelling_trains(self):
    compat.install()
    var = tf.Variable(1.)
    opt = tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(.5),
        tf.compat.v1.mixed_precision.DynamicLossScale(initial_loss_scale=8.))
    opt.minimize(lambda: var * 2., var_list=[var])
    self.assertEqual(0., float(var))


def run_compat(*args, cwd=None, **env_vars):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **env_vars)
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


class LegacyKerasTest(tf.test.TestCase, parameterized.TestCase):
  """install() for each Keras that `tf.keras` can be, in a fresh process."""

  @parameterized.named_parameters(("keras_3", "0"), ("tf_keras", "1"))
  def test_install_uninstall_names(self, legacy_keras):
    code = textwrap.dedent("""
        import tensorflow as tf
        import mplso.compat, mplso.keras
        assert not hasattr(tf.keras.mixed_precision, "experimental")
        mplso.compat.install()
        mp = tf.keras.mixed_precision.experimental
        opt = mp.LossScaleOptimizer(tf.keras.optimizers.Adam(), "dynamic")
        assert isinstance(opt, tf.keras.optimizers.Optimizer), type(opt)
        assert isinstance(opt, mplso.keras.LossScaleOptimizer), type(opt)
        assert mp.set_policy is tf.keras.mixed_precision.set_global_policy
        mplso.compat.uninstall()
        assert not hasattr(tf.keras.mixed_precision, "experimental")
        print(type(opt).__module__, tf.keras.optimizers.Optimizer.__module__)
        """)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               TF_USE_LEGACY_KERAS=legacy_keras)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env=env, timeout=300)
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    wrapper_module, optimizer_module = proc.stdout.split()
    if legacy_keras == "1":
      self.assertTrue(optimizer_module.startswith("tf_keras"))
      self.assertTrue(wrapper_module.endswith("tf_keras_optimizer"))
    else:
      self.assertTrue(optimizer_module.startswith("keras"))
      self.assertTrue(wrapper_module.endswith("keras3_optimizer"))


class LegacyExamplesTest(tf.test.TestCase, parameterized.TestCase):

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


  def _losses(self, proc, pattern=r"loss (\d+\.\d+)"):
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    self.assertRegex(proc.stdout, r"optimizer mplso\._src\.")
    return [float(v) for v in re.findall(pattern, proc.stdout)]

  def test_train_experimental_script_trains_and_resumes(self):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = run_compat(
        os.path.join(root, "examples", "legacy",
                     "train_experimental_loss_scale.py"),
        "--steps", "200", "--model_dir", self.create_tempdir().full_path)
    losses = self._losses(proc)
    self.assertGreater(len(losses), 3)
    self.assertLess(losses[-1], 0.5 * losses[0])
    self.assertIn("restored at step 100", proc.stdout)

  @parameterized.named_parameters(("keras_3", "0"), ("tf_keras", "1"))
  def test_keras_script_trains(self, legacy_keras):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = run_compat(
        os.path.join(root, "examples", "legacy",
                     "keras_experimental_loss_scale.py"),
        "--epochs", "3", TF_USE_LEGACY_KERAS=legacy_keras)
    losses = self._losses(proc, r"epoch \d+  loss (\d+\.\d+)")
    self.assertLen(losses, 3)
    self.assertLess(losses[-1], losses[0])
    family = "tf_keras_optimizer" if legacy_keras == "1" else "keras3_optimizer"
    self.assertIn(family, proc.stdout)
    self.assertRegex(proc.stdout, r"custom loop  loss \d")


if __name__ == "__main__":
  absltest.main()
