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
from mplso._src.compat import policy as compat_policy
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


class MyLossScale(mplso.FixedLossScale):
  """A user's LossScale subclass, which configs name by its class name."""


class FromConfigTest(tf.test.TestCase, parameterized.TestCase):
  """TF 2.3's `Policy.from_config`, the inverse of `get_config`."""

  @parameterized.named_parameters(
      ("auto_mixed_float16", "mixed_float16", "auto"),
      ("auto_float32", "float32", "auto"),
      ("dynamic", "mixed_float16", "dynamic"),
      ("dynamic_non_default", "mixed_float16",
       lambda: mplso.DynamicLossScale(64., increment_period=5, multiplier=3.)),
      ("fixed", "mixed_float16", 128),
      ("none", "mixed_float16", None),
      ("none_mixed_bfloat16", "mixed_bfloat16", None))
  def test_round_trip(self, name, loss_scale):
    if callable(loss_scale):
      loss_scale = loss_scale()
    policy = compat.Policy(name, loss_scale)
    config = policy.get_config()
    restored = compat.Policy.from_config(config)
    self.assertIsInstance(restored, compat.Policy)
    self.assertIsInstance(restored, tf.keras.mixed_precision.Policy)
    self.assertEqual(name, restored.name)
    self.assertEqual(config, restored.get_config())
    self.assertIs(type(policy.loss_scale), type(restored.loss_scale))
    if policy.loss_scale is not None:
      self.assertIsNot(policy.loss_scale, restored.loss_scale)
      self.assertEqual(policy.loss_scale.get_config(),
                       restored.loss_scale.get_config())

  def test_legacy_spelling_has_it(self):
    compat.install()
    self.addCleanup(compat.uninstall)
    legacy = tf.keras.mixed_precision.experimental.Policy
    restored = legacy.from_config(
        legacy("mixed_float16", loss_scale=512).get_config())
    self.assertIsInstance(restored, legacy)
    self.assertEqual(512., float(restored.loss_scale()))

  @parameterized.named_parameters(
      ("number", 8, mplso.FixedLossScale),
      ("dynamic", "dynamic", mplso.DynamicLossScale),
      ("auto", "auto", mplso.DynamicLossScale),
      ("none", None, type(None)))
  def test_loss_scale_not_serialized_goes_to_the_constructor(self, value,
                                                             kind):
    # TF 2.3 deserialized only a dict; anything else went to `Policy(...)`.
    policy = compat.Policy.from_config(
        {"name": "mixed_float16", "loss_scale": value})
    self.assertIsInstance(policy.loss_scale, kind)
    loss_scale = mplso.FixedLossScale(4)
    self.assertIs(loss_scale, compat.Policy.from_config(
        {"name": "mixed_float16", "loss_scale": loss_scale}).loss_scale)

  def test_custom_loss_scale_through_custom_objects_or_scope(self):
    config = compat.Policy("mixed_float16", MyLossScale(4)).get_config()
    self.assertEqual("MyLossScale", config["loss_scale"]["class_name"])
    restored = compat.Policy.from_config(
        config, custom_objects={"MyLossScale": MyLossScale})
    self.assertIsInstance(restored.loss_scale, MyLossScale)
    self.assertEqual(4., float(restored.loss_scale()))
    with tf.keras.utils.custom_object_scope({"MyLossScale": MyLossScale}):
      self.assertIsInstance(compat.Policy.from_config(config).loss_scale,
                            MyLossScale)
    with self.assertRaisesRegex(ValueError,
                                r"^Unknown loss scale: MyLossScale\. .*"
                                r"custom_objects"):
      compat.Policy.from_config(config)
    with self.assertRaisesRegex(ValueError, r"mplso\.LossScale subclass.*'x'"):
      compat.Policy.from_config(config, custom_objects={"MyLossScale": "x"})

  @parameterized.named_parameters(
      # TF 2.3 raised TypeError for these (`cls(**config)`, its name check).
      ("not_a_dict", "mixed_float16", TypeError,
       r"must be a dict.*Received: config='mixed_float16'"),
      ("unknown_key", {"name": "float32", "dtype": "float16"}, TypeError,
       r"^Policy\(\) got an unexpected keyword argument 'dtype'.*"
       r"Received: config=\{'name': 'float32', 'dtype': 'float16'\}"),
      ("no_name", {"loss_scale": None}, TypeError,
       r"^Policy\(\) missing 1 required positional argument: 'name'.*"
       r"Received: config=\{'loss_scale': None\}"),
      ("name_not_a_string", {"name": 16}, TypeError,
       r"^'name' must be a string, but got: 16 \(received name=16;"),
      ("name_a_dtype", {"name": tf.float16}, TypeError,
       r"^'name' must be a string, not a DType\. Instead, pass DType\.name\. "
       r"Got: float16 \(received name=tf\.float16; pass name='float16'\)"),
      # And ValueError for these.
      ("bad_name", {"name": "float17"}, ValueError,
       r"^Cannot convert value float17 to a mixed precision Policy\. .*"
       r"Received: name='float17'\."),
      ("bad_loss_scale", {"name": "mixed_float16", "loss_scale": "dinamic"},
       ValueError,
       r"^Could not interpret loss scale identifier: dinamic.*'dinamic'"),
      ("unknown_loss_scale_class",
       {"name": "mixed_float16",
        "loss_scale": {"class_name": "StaticLossScale", "config": {}}},
       ValueError,
       r"^Unknown loss scale: StaticLossScale\. Received: "
       r"class_name='StaticLossScale'\. Accepted: \['DynamicLossScale', "
       r"'FixedLossScale'\]"),
      ("improper_loss_scale",
       {"name": "mixed_float16", "loss_scale": {"config": {}}}, ValueError,
       r"^Improper config format: .*Received: loss_scale=\{'config': \{\}\}"),
      ("loss_scale_below_1",
       {"name": "mixed_float16",
        "loss_scale": {"class_name": "FixedLossScale",
                       "config": {"loss_scale_value": 0.5}}}, ValueError,
       r"^loss_scale_value must be at least 1\..*loss_scale_value=0\.5"))
  def test_bad_config(self, config, error, message):
    with self.assertRaisesRegex(error, message):
      compat.Policy.from_config(config)
    # The constructor says the same where it takes the value.
    if isinstance(config, dict) and set(config) <= {"name", "loss_scale"} and (
        "name" in config and not isinstance(config.get("loss_scale"), dict)):
      with self.assertRaisesRegex(error, message):
        compat.Policy(**config)


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
        restored = mp.Policy.from_config(policy.get_config())
        assert isinstance(restored, tf.keras.mixed_precision.Policy)
        assert float(restored.loss_scale()) == 512., restored
        mp.set_policy("float32")
        mplso.compat.uninstall()
        print(type(model.optimizer).__module__)
        """)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env=env, timeout=300)
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    self.assertEqual("mplso._src.keras.optimizer_v2",
                     proc.stdout.strip())


if __name__ == "__main__":
  absltest.main()
