"""Tests for compile's `mixed_float16` wrapping in mplso's class (compat)."""

import os
import subprocess
import sys
import textwrap

from absl.testing import absltest
import keras
from keras.src.trainers import trainer as keras_trainer
import numpy as np
import tensorflow as tf

from mplso import compat
import mplso.keras
from mplso_test.helpers import compile_models

# The repository's root, which holds mplso/ and mplso_test/.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def tiny_model():
  return tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])


class CompileWrappingTest(tf.test.TestCase):
  """On Keras 3, in this process."""

  def setUp(self):
    super().setUp()
    self.addCleanup(tf.keras.mixed_precision.set_global_policy, "float32")
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    compat.install()
    self.addCleanup(compat.uninstall)

  def test_wraps_in_mplso_with_keras_defaults(self):
    model = tiny_model()
    model.compile("sgd", "mse")
    opt = model.optimizer
    self.assertIsInstance(opt, tf.keras.mixed_precision.LossScaleOptimizer)
    self.assertIsInstance(opt, mplso.keras.LossScaleOptimizer)
    self.assertIsInstance(opt, keras.optimizers.LossScaleOptimizer)
    self.assertIsInstance(opt.inner_optimizer, keras.optimizers.SGD)
    self.assertEqual("loss_scale_optimizer", opt.name)  # As Keras 3 names it.
    self.assertTrue(opt.dynamic)
    self.assertEqual(2.**15, opt.initial_scale)
    self.assertEqual(2000, opt.dynamic_growth_steps)

  def test_keeps_an_optimizer_that_scales_the_loss(self):
    for wrapped in (
        keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD()),
        tf.keras.mixed_precision.LossScaleOptimizer(
            keras.optimizers.SGD(), dynamic=False, initial_scale=8)):
      model = tiny_model()
      model.compile(wrapped, "mse")
      self.assertIs(wrapped, model.optimizer)

  def test_train_step_that_checks_the_class_trains(self):
    model = compile_models.ScalesIfWrapped()
    model.compile(keras.optimizers.SGD(0.1))
    x = np.ones((32, 4), np.float32)
    before = compile_models.mean_squared_error(model, x)
    model.fit(x, 3 * x[:, :1], epochs=4, batch_size=8, verbose=0)
    # Unscaled gradients applied by a wrapper that unscales them again
    # (32768 times too small) would leave the loss where it was.
    self.assertLess(compile_models.mean_squared_error(model, x),
                    0.01 * before)

  def test_uninstall_restores_keras_own_wrapping(self):
    compat.uninstall()
    self.assertIs(keras.optimizers.LossScaleOptimizer,
                  keras_trainer.LossScaleOptimizer)
    model = tiny_model()
    model.compile("sgd", "mse")
    self.assertIs(keras.optimizers.LossScaleOptimizer, type(model.optimizer))


class LegacyKerasCompileWrappingTest(tf.test.TestCase):
  """On tf_keras (`TF_USE_LEGACY_KERAS=1`), in a fresh process."""

  def _run_on_tf_keras(self, code):
    """Runs `code` in a fresh Python on tf_keras; asserts it exits with 0."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1",
               PYTHONPATH=os.pathsep.join(
                   [ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env=env, timeout=300)
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    return proc

  def test_wraps_in_mplso_and_uninstall_restores(self):
    code = textwrap.dedent("""
        import numpy as np
        import tensorflow as tf
        import tf_keras
        from tf_keras.src.engine import training
        import mplso.compat, mplso.keras
        from mplso_test.helpers.compile_models import ScalesIfWrapped
        from mplso_test.helpers.compile_models import mean_squared_error
        lso = training.lso
        own = tf_keras.mixed_precision.LossScaleOptimizer
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        mplso.compat.install()
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        for optimizer, family in [("adam", "tf_keras_optimizer"),
                                  (tf.keras.optimizers.legacy.SGD(),
                                   "optimizer_v2")]:
          model.compile(optimizer, "mse")
          opt = model.optimizer
          assert isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer)
          assert isinstance(opt, own) and opt.dynamic, opt
          assert type(opt).__module__.endswith(family), type(opt)
          assert (opt.initial_scale, opt.dynamic_growth_steps) == (
              2.**15, 2000)
        kept = own(tf.keras.optimizers.SGD())
        model.compile(kept, "mse")
        assert model.optimizer is kept
        model = ScalesIfWrapped()
        model.compile(tf.keras.optimizers.SGD(0.1))
        x = np.ones((32, 4), np.float32)
        before = mean_squared_error(model, x)
        model.fit(x, 3 * x[:, :1], epochs=4, batch_size=8, verbose=0)
        after = mean_squared_error(model, x)
        assert after < 0.01 * before, (before, after)
        mplso.compat.uninstall()
        assert training.lso is lso
        model.compile("adam", "mse")
        print(type(model.optimizer).__module__)
        """)
    proc = self._run_on_tf_keras(code)
    self.assertEqual("tf_keras.src.mixed_precision.loss_scale_optimizer",
                     proc.stdout.strip())

  def test_tf1_graph_mode_wraps_in_mplso_and_trains(self):
    # tf_keras's TF1-mode `compile` (training_v1) reads its own global.
    code = textwrap.dedent("""
        import numpy as np
        import tensorflow as tf
        tf.compat.v1.disable_eager_execution()
        from tf_keras.src.engine import training_v1
        import mplso.compat, mplso.keras
        own = training_v1.loss_scale_optimizer
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        mplso.compat.install()
        x = np.ones((32, 4), np.float32)
        y = 3 * x[:, :1]
        y[3] = np.inf  # One batch of four overflows.
        for optimizer in (tf.keras.optimizers.legacy.SGD(0.05),
                          tf.keras.mixed_precision.LossScaleOptimizer(
                              tf.keras.optimizers.legacy.SGD(0.05))):
          model = tf.keras.Sequential([
              tf.keras.layers.Dense(1, input_shape=(4,), dtype="float32")])
          model.compile(optimizer, "mse")
          opt = model.optimizer
          assert isinstance(opt, mplso.keras.LossScaleOptimizer), opt
          assert optimizer in (opt, opt.inner_optimizer), opt
          model.fit(x, y, epochs=3, batch_size=4, shuffle=False, verbose=0)
          kernel = model.get_weights()[0]
          assert np.all(np.isfinite(kernel)), kernel
          assert abs(float(model.predict(x[:1], verbose=0)[0, 0]) - 3) < 1.5
        mplso.compat.uninstall()
        assert training_v1.loss_scale_optimizer is own
        print("ok")
        """)
    proc = self._run_on_tf_keras(code)
    self.assertEqual("ok", proc.stdout.strip())


if __name__ == "__main__":
  absltest.main()
