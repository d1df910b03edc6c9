"""Tests for TF 2.1-2.3's Keras Policy(name, loss_scale) under mplso.compat."""

import doctest
import os
import subprocess
import sys
import textwrap

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mplso
from mplso import compat
from mplso._src import compat_policy
import mplso.keras


def tiny_model():
  return tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])


class PolicyTest(tf.test.TestCase, parameterized.TestCase):

  def test_docstring_examples(self):
    result = doctest.testmod(compat_policy, extraglobs={"tf": tf})
    self.assertGreater(result.attempted, 0)
    self.assertEqual(0, result.failed)

  @parameterized.named_parameters(
      ("auto_mixed_float16", "mixed_float16", "auto", mplso.DynamicLossScale),
      ("auto_float32", "float32", "auto", type(None)),
      ("auto_mixed_bfloat16", "mixed_bfloat16", "auto", type(None)),
      ("dynamic", "mixed_float16", "dynamic", mplso.DynamicLossScale),
      ("number", "mixed_float16", 128, mplso.FixedLossScale),
      ("none", "mixed_float16", None, type(None)))
  def test_loss_scale_argument(self, name, loss_scale, kind):
    policy = compat.Policy(name, loss_scale=loss_scale)
    self.assertIsInstance(policy.loss_scale, kind)
    self.assertEqual(name, policy.name)
    self.assertIsInstance(policy, tf.keras.mixed_precision.Policy)
    self.assertIsInstance(policy, compat.Policy)
    self.assertNotIsInstance(tf.keras.mixed_precision.Policy(name),
                             compat.Policy)

  def test_loss_scale_object_is_kept_and_bad_ones_refused(self):
    loss_scale = mplso.DynamicLossScale(initial_loss_scale=16.)
    self.assertIs(loss_scale,
                  compat.Policy("mixed_float16", loss_scale).loss_scale)
    with self.assertRaisesRegex(ValueError, "'dinamic'"):
      compat.Policy("mixed_float16", loss_scale="dinamic")

  def test_loss_scale_on_a_float32_policy_warns(self):
    with self.assertLogs("mplso", "WARNING") as logs:
      policy = compat.Policy("float32", loss_scale=8)
    self.assertIn("only useful for float16 policies", logs.output[0])
    self.assertEqual(8., float(policy.loss_scale()))

  def test_config_round_trip_and_repr(self):
    default = compat.Policy("mixed_float16")
    self.assertEqual({"name": "mixed_float16"}, default.get_config())
    policy = compat.Policy("mixed_float16", mplso.DynamicLossScale(
        initial_loss_scale=64., increment_period=5))
    restored = type(policy).from_config(policy.get_config())
    self.assertEqual(policy.loss_scale.get_config(),
                     restored.loss_scale.get_config())
    self.assertEqual("mixed_float16", restored.name)
    fixed = compat.Policy("float32", None)
    self.assertIsNone(type(fixed).from_config(fixed.get_config()).loss_scale)
    self.assertStartsWith(repr(policy),
                          '<Policy "mixed_float16", loss_scale=DynamicLossScale(')


class CompileTest(tf.test.TestCase, parameterized.TestCase):
  """`compile` wraps the optimizer with the policy's loss scale (Keras 3)."""

  def setUp(self):
    super().setUp()
    self.addCleanup(tf.keras.mixed_precision.set_global_policy, "float32")
    compat.install()
    self.addCleanup(compat.uninstall)

  def test_set_policy_string_wraps_with_a_dynamic_scale(self):
    tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
    policy = tf.keras.mixed_precision.experimental.global_policy()
    self.assertIsInstance(policy.loss_scale, mplso.DynamicLossScale)
    model = tiny_model()
    self.assertIs(policy, model.dtype_policy)
    model.compile(optimizer="sgd", loss="mse")
    self.assertIsInstance(model.optimizer, mplso.keras.LossScaleOptimizer)
    self.assertIs(policy.loss_scale, model.optimizer.loss_scale)

  @parameterized.named_parameters(("positional", True), ("keyword", False))
  def test_policy_loss_scale_is_used_and_fit_trains(self, positional):
    loss_scale = mplso.FixedLossScale(256)
    tf.keras.mixed_precision.set_global_policy(
        tf.keras.mixed_precision.experimental.Policy("mixed_float16",
                                                     loss_scale))
    model = tiny_model()
    sgd = tf.keras.optimizers.SGD(0.05)
    if positional:
      model.compile(sgd, "mse")
    else:
      model.compile(loss="mse", optimizer=sgd)
    self.assertIs(loss_scale, model.optimizer.loss_scale)
    x = np.ones((32, 4), np.float32)
    history = model.fit(x, 3 * x[:, :1], epochs=3, verbose=0)
    self.assertLess(history.history["loss"][-1], history.history["loss"][0])

  def test_policy_without_loss_scale_and_wrapped_optimizers_are_kept(self):
    tf.keras.mixed_precision.set_global_policy(compat.Policy("float32"))
    model = tiny_model()
    sgd = tf.keras.optimizers.SGD()
    model.compile(sgd, "mse")
    self.assertIs(sgd, model.optimizer)
    tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
    model = tiny_model()
    wrapped = mplso.keras.LossScaleOptimizer(tf.keras.optimizers.SGD(), 4)
    model.compile(wrapped, "mse")
    self.assertIs(wrapped, model.optimizer)

  def test_saved_model_loads_compiled_with_its_wrapper(self):
    tf.keras.mixed_precision.experimental.set_policy(
        compat.Policy("mixed_float16", loss_scale=64))
    model = tiny_model()
    model.compile("sgd", "mse")
    x = np.ones((8, 4), np.float32)
    model.fit(x, x[:, :1], verbose=0)
    path = os.path.join(self.create_tempdir().full_path, "model.keras")
    model.save(path)
    loaded = tf.keras.models.load_model(path)
    self.assertIsInstance(loaded.optimizer, mplso.keras.LossScaleOptimizer)
    self.assertEqual(64., float(loaded.optimizer.loss_scale()))
    self.assertEqual("mixed_float16", loaded.layers[0].dtype_policy.name)

  def test_uninstall_restores_keras_compile(self):
    tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
    compat.uninstall()
    model = tiny_model()
    model.compile("sgd", "mse")  # Keras 3 wraps in its own class again.
    self.assertNotIsInstance(model.optimizer, mplso.keras.LossScaleOptimizer)
    self.assertIsInstance(model.optimizer,
                          tf.keras.optimizers.LossScaleOptimizer)


class LegacyKerasCompileTest(tf.test.TestCase):
  """The same on tf_keras (`TF_USE_LEGACY_KERAS=1`), in a fresh process."""

  def test_compile_wraps_with_the_policy_loss_scale(self):
    code = textwrap.dedent("""
        import numpy as np
        import tensorflow as tf
        import mplso, mplso.compat, mplso.keras
        assert tf.keras.optimizers.SGD.__module__.startswith("tf_keras")
        mplso.compat.install()
        mp = tf.keras.mixed_precision.experimental
        policy = mp.Policy("mixed_float16", loss_scale=512)
        assert isinstance(policy, tf.keras.mixed_precision.Policy)
        mp.set_policy(policy)
        assert mp.global_policy() is policy
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        model.compile(tf.keras.optimizers.legacy.SGD(0.05), "mse")
        assert isinstance(model.optimizer, mplso.keras.LossScaleOptimizer)
        assert model.optimizer.loss_scale is policy.loss_scale
        x = np.ones((32, 4), np.float32)
        loss = model.fit(x, 3 * x[:, :1], epochs=3, verbose=0).history["loss"]
        assert loss[-1] < loss[0], loss
        path = __import__("tempfile").mkdtemp() + "/model.keras"
        model.save(path)
        loaded = tf.keras.models.load_model(path)
        assert isinstance(loaded.optimizer, mplso.keras.LossScaleOptimizer)
        assert float(loaded.optimizer.loss_scale()) == 512.
        assert float(loaded.layers[0].dtype_policy.loss_scale()) == 512.
        mp.set_policy("float32")
        mplso.compat.uninstall()
        print(type(model.optimizer).__module__)
        """)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env=env, timeout=300)
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    self.assertEqual("mplso._src.keras_wrappers.optimizer_v2",
                     proc.stdout.strip())


if __name__ == "__main__":
  absltest.main()
