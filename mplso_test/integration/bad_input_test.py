"""Bad input everywhere a user can hand mplso something, as one table.

Each case is `(id, fn, error type, regex)`. `fn(env)` gets a fresh `Env`
holding a `tf.Variable` and a `keras.Variable`. Cases that attempt a step
first build the wrapper and take one good step (`prepare`); the test then
checks the error's type, that its message matches the regex (which names the
bad value), and that no variable (model, slot, loss scale or step counter)
changed.
"""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf
import tf_keras

import mplso
from mplso import loss_scale as loss_scale_lib
import mplso.contrib
import mplso.keras

contrib = mplso.contrib
LSO = mplso.keras.LossScaleOptimizer


class Env:
  """The variables a case may touch, and the optimizers it builds."""

  def __init__(self):
    self.v = tf.Variable([1., 2.], name="v")
    self.kv = keras.Variable([1., 2.], name="kv")
    self._optimizers = []

  def var(self, family):
    return self.kv if family == "keras3" else self.v

  def opt(self, family, loss_scale="dynamic"):
    """A wrapper of `family` (tf1, contrib, keras3, optimizer_v2, tf_keras)."""
    if family == "tf1":
      opt = mplso.MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.AdamOptimizer(0.1), loss_scale)
    elif family == "contrib":
      opt = contrib.LossScaleOptimizer(
          tf.compat.v1.train.AdamOptimizer(0.1),
          contrib.ExponentialUpdateLossScaleManager(8, 1))
    else:
      inner = {"keras3": keras.optimizers.Adam,
               "optimizer_v2": tf_keras.optimizers.legacy.Adam,
               "tf_keras": tf_keras.optimizers.Adam}[family](0.1)
      opt = LSO(inner, loss_scale)
    self._optimizers.append(opt)
    return opt

  def state(self) -> list[np.ndarray]:
    values = [self.v.numpy(), np.asarray(self.kv)]
    for opt in self._optimizers:
      variables = opt.variables
      values += [np.asarray(v) for v in
                 (variables() if callable(variables) else variables)]
      if hasattr(opt, "iterations"):
        values.append(np.asarray(opt.iterations))
    return values


def _apply(family, grads_and_vars_fn):
  """A case that applies `grads_and_vars_fn(env)` with `family`'s wrapper.

  `prepare` builds the wrapper and takes one good step before the snapshot,
  so that its slots, loss scale and step counter exist and are compared.
  """

  def prepare(env):
    env.prepared = env.opt(family)
    env.prepared.apply_gradients([(tf.ones([2]), env.var(family))])

  def fn(env):
    return env.prepared.apply_gradients(grads_and_vars_fn(env))

  fn.prepare = prepare
  return fn


F64 = tf.constant([1., 1.], tf.float64)
KERAS_FAMILIES = ("keras3", "optimizer_v2", "tf_keras")
ALL_FAMILIES = ("tf1", "contrib") + KERAS_FAMILIES

CASES = [
    # Loss scale constructors.
    ("fixed_str", lambda e: mplso.FixedLossScale("8"), ValueError,
     r"loss_scale_value='8'"),
    ("fixed_below_one", lambda e: mplso.FixedLossScale(0.5), ValueError,
     r">= 1.*loss_scale_value=0.5"),
    ("fixed_nan", lambda e: mplso.FixedLossScale(float("nan")), ValueError,
     r"loss_scale_value=nan"),
    ("fixed_inf", lambda e: mplso.FixedLossScale(float("inf")), ValueError,
     r"loss_scale_value=inf"),
    ("fixed_bool", lambda e: mplso.FixedLossScale(True), ValueError,
     r"loss_scale_value=True"),
    ("fixed_none", lambda e: mplso.FixedLossScale(None), ValueError,
     r"loss_scale_value=None"),
    ("dynamic_initial_zero",
     lambda e: mplso.DynamicLossScale(initial_loss_scale=0), ValueError,
     r"initial_loss_scale=0"),
    ("dynamic_min_zero_in_float32",
     lambda e: mplso.DynamicLossScale(1e-50, min_loss_scale=1e-60),
     ValueError, r"nonzero in float32.*min_loss_scale=1e-60"),
    ("dynamic_max_below_default_initial",
     lambda e: mplso.DynamicLossScale(max_loss_scale=1024), ValueError,
     r"default initial_loss_scale 32768.*max_loss_scale=1024 given.*"
     r"Pass initial_loss_scale too"),
    ("dynamic_period_zero",
     lambda e: mplso.DynamicLossScale(increment_period=0), ValueError,
     r"increment_period=0"),
    ("dynamic_period_float",
     lambda e: mplso.DynamicLossScale(increment_period=1.5), ValueError,
     r"an integer .*increment_period=1.5.*Pass 1 or 2"),
    ("dynamic_multiplier_one",
     lambda e: mplso.DynamicLossScale(multiplier=1), ValueError,
     r"> 1.*multiplier=1"),
    ("dynamic_multiplier_str",
     lambda e: mplso.DynamicLossScale(multiplier="2"), ValueError,
     r"multiplier='2'"),
    # loss_scale identifiers.
    ("get_unknown_string", lambda e: loss_scale_lib.get("static"),
     ValueError, r"'static'.*'dynamic'"),
    ("get_list", lambda e: loss_scale_lib.get([1]), ValueError, r"\[1\]"),
    ("get_zero", lambda e: loss_scale_lib.get(0), ValueError,
     r"loss_scale_value=0"),
    ("get_bool", lambda e: loss_scale_lib.get(True), ValueError, r"True"),
    ("get_numpy_below_one", lambda e: loss_scale_lib.get(np.float16(.5)),
     ValueError, r"^loss_scale_value must be at least 1\..*0\.5"),
    ("get_beyond_float32", lambda e: loss_scale_lib.get(2**200), ValueError,
     r"float32.*3\.40282e\+38.*loss_scale_value=" + str(2**200)),
    ("get_numpy_bool", lambda e: loss_scale_lib.get(np.bool_(True)),
     ValueError, r"^Could not interpret loss scale identifier: True"),
    ("serialize_number", lambda e: loss_scale_lib.serialize(5), ValueError,
     r"loss_scale=5"),
    # Loss scale configs.
    ("deserialize_unknown_class",
     lambda e: loss_scale_lib.deserialize(
         {"class_name": "StaticLossScale", "config": {}}),
     ValueError, r"'StaticLossScale'"),
    ("deserialize_missing_class_name",
     lambda e: loss_scale_lib.deserialize({"config": {}}), ValueError,
     r"'class_name'.*config=\{'config': \{\}\}"),
    ("deserialize_not_dict",
     lambda e: loss_scale_lib.deserialize("dynamic"), ValueError,
     r"config='dynamic'"),
    ("deserialize_config_not_dict",
     lambda e: loss_scale_lib.deserialize(
         {"class_name": "DynamicLossScale", "config": [1]}),
     ValueError, r"'config': \[1\]"),
    ("deserialize_unknown_key",
     lambda e: loss_scale_lib.deserialize(
         {"class_name": "DynamicLossScale", "config": {"bogus": 1}}),
     ValueError, r"'bogus'"),
    ("deserialize_wrong_type",
     lambda e: loss_scale_lib.deserialize(
         {"class_name": "FixedLossScale",
          "config": {"loss_scale_value": "8"}}),
     ValueError, r"loss_scale_value='8'"),
    ("from_config_missing_key", lambda e: mplso.FixedLossScale.from_config({}),
     ValueError, r"FixedLossScale.*loss_scale_value"),
    ("from_config_unknown_key",
     lambda e: mplso.DynamicLossScale.from_config({"bogus": 1}), ValueError,
     r"'bogus'"),
    ("from_config_not_dict",
     lambda e: mplso.DynamicLossScale.from_config(None), ValueError,
     r"config=None"),
    # contrib managers.
    ("fixed_manager_zero", lambda e: contrib.FixedLossScaleManager(0),
     ValueError, r"loss_scale=0"),
    ("exponential_init_below_one",
     lambda e: contrib.ExponentialUpdateLossScaleManager(0.5, 10),
     ValueError, r"init_loss_scale=0.5"),
    ("exponential_incr_every_zero",
     lambda e: contrib.ExponentialUpdateLossScaleManager(8, 0), ValueError,
     r"incr_every_n_steps=0"),
    ("exponential_decr_every_zero",
     lambda e: contrib.ExponentialUpdateLossScaleManager(
         8, 1, decr_every_n_nan_or_inf=0), ValueError,
     r"decr_every_n_nan_or_inf=0"),
    ("exponential_incr_ratio_below_one",
     lambda e: contrib.ExponentialUpdateLossScaleManager(
         8, 1, incr_ratio=0.5), ValueError, r"incr_ratio=0.5"),
    ("exponential_decr_ratio_above_one",
     lambda e: contrib.ExponentialUpdateLossScaleManager(
         8, 1, decr_ratio=1.5), ValueError, r"decr_ratio=1.5"),
    ("exponential_decr_ratio_zero",
     lambda e: contrib.ExponentialUpdateLossScaleManager(
         8, 1, decr_ratio=0), ValueError, r"decr_ratio=0"),
    ("exponential_from_config_missing_key",
     lambda e: contrib.ExponentialUpdateLossScaleManager.from_config({}),
     ValueError, r"init_loss_scale"),
    # TF1 and contrib optimizer constructors.
    ("tf1_opt_keras",
     lambda e: mplso.MixedPrecisionLossScaleOptimizer(
         keras.optimizers.SGD(), "dynamic"), ValueError, r"SGD"),
    ("tf1_opt_string",
     lambda e: mplso.MixedPrecisionLossScaleOptimizer("sgd", "dynamic"),
     ValueError, r"opt='sgd'"),
    ("tf1_loss_scale_none", lambda e: e.opt("tf1", None), ValueError,
     r"^loss_scale cannot be None\. Pass"),
    ("tf1_loss_scale_string", lambda e: e.opt("tf1", "static"), ValueError,
     r"'static'"),
    ("tf1_loss_scale_below_one", lambda e: e.opt("tf1", 0.5), ValueError,
     r"loss_scale_value=0.5"),
    ("tf1_wrapped_twice",
     lambda e: mplso.MixedPrecisionLossScaleOptimizer(e.opt("tf1"), 8),
     ValueError, r"already a loss-scale optimizer .*twice"),
    ("tf1_wraps_tf_wrapper",
     lambda e: mplso.MixedPrecisionLossScaleOptimizer(
         tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
             tf.compat.v1.train.GradientDescentOptimizer(1.), 8), 8),
     ValueError, r"already a loss-scale optimizer .*stack.*Pass the "
     r"optimizer it wraps"),
    ("contrib_manager_string",
     lambda e: contrib.LossScaleOptimizer(
         tf.compat.v1.train.AdamOptimizer(), "dynamic"), ValueError,
     r"loss_scale_manager='dynamic'"),
    ("contrib_manager_loss_scale",
     lambda e: contrib.LossScaleOptimizer(
         tf.compat.v1.train.AdamOptimizer(), mplso.FixedLossScale(8)),
     ValueError, r"loss_scale_manager=FixedLossScale\(8.0\)"),
    ("contrib_opt_keras",
     lambda e: contrib.LossScaleOptimizer(
         keras.optimizers.SGD(), contrib.FixedLossScaleManager(8)),
     ValueError, r"SGD"),
    # Keras constructors.
    ("keras_optimizer_string", lambda e: LSO("adam", "dynamic"), TypeError,
     r"but got: 'adam'.*Accepted here: .*keras.optimizers.Optimizer"),
    ("keras_optimizer_v1",
     lambda e: LSO(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                   "dynamic"),
     TypeError, r"GradientDescentOptimizer.*MixedPrecisionLossScaleOptimizer"),
    ("keras_wrap_keras3_loss_scale_optimizer",
     lambda e: LSO(keras.optimizers.LossScaleOptimizer(
         keras.optimizers.SGD()), "dynamic"), TypeError,
     r"already a loss-scale optimizer.*LossScaleOptimizer"),
    ("keras_wrap_ours", lambda e: LSO(e.opt("keras3"), "dynamic"), TypeError,
     r"already a loss-scale optimizer"),
    *[(f"{family}_loss_scale_{name}", (lambda f, s: lambda e: e.opt(f, s))(
        family, value), ValueError, regex)
      for family in KERAS_FAMILIES
      for name, value, regex in (
          ("none", None, r"^loss_scale cannot be None\. Pass"),
          ("string", "static", r"'static'"),
          ("below_one", 0.5, r"loss_scale_value=0.5"))],
    # Keras configs.
    ("keras_from_config_not_dict", lambda e: LSO.from_config("abc"),
     ValueError, r"config='abc'"),
    ("keras_from_config_missing_keys", lambda e: LSO.from_config({}),
     ValueError, r"'optimizer' and 'loss_scale'.*Received keys: \[\]"),
    ("keras_from_config_optimizer_string",
     lambda e: LSO.from_config({"optimizer": "adam", "loss_scale": 8}),
     ValueError, r"optimizer='adam'"),
    ("keras_from_config_inner_optimizer_string",
     lambda e: LSO.from_config({"inner_optimizer": "adam"}),
     ValueError, r"inner_optimizer='adam'"),
    ("keras_from_config_unknown_optimizer_class",
     lambda e: LSO.from_config(
         {"optimizer": {"class_name": "NoSuchOpt", "config": {}},
          "loss_scale": 8}), TypeError, r"NoSuchOpt"),
    ("keras_from_config_loss_scale_string",
     lambda e: LSO.from_config(
         {"optimizer": keras.optimizers.serialize(keras.optimizers.SGD()),
          "loss_scale": "static"}), ValueError, r"'static'"),
    ("keras_from_config_loss_scale_unknown_class",
     lambda e: LSO.from_config(
         {"optimizer": keras.optimizers.serialize(keras.optimizers.SGD()),
          "loss_scale": {"class_name": "Foo", "config": {}}}), ValueError,
     r"'Foo'"),
    ("keras_from_config_loss_scale_wrong_type",
     lambda e: LSO.from_config(
         {"optimizer": keras.optimizers.serialize(keras.optimizers.SGD()),
          "loss_scale": [8]}), ValueError, r"\[8\]"),
    # The overflow log's session.
    *[(f"{family}_overflow_log_session_string",
       (lambda f: lambda e: mplso.overflow_log(e.opt(f), session="sess"))(
           family), ValueError,
       r"tf\.compat\.v1\.Session.*Received: session='sess'")
      for family in ALL_FAMILIES],
    # Losses that are not floating-point tensors.
    ("tf1_loss_string",
     lambda e: e.opt("tf1").minimize(lambda: "abc", var_list=[e.v]),
     ValueError, r"loss=.*abc"),
    ("tf1_loss_none", lambda e: e.opt("tf1").minimize(None, var_list=[e.v]),
     ValueError, r"None"),
    ("contrib_loss_int",
     lambda e: e.opt("contrib").minimize(lambda: tf.constant(3),
                                         var_list=[e.v]),
     ValueError, r"loss=.*int32"),
    *[(f"{family}_scaled_loss_string",
       (lambda f: lambda e: e.opt(f).get_scaled_loss("abc"))(family),
       ValueError, r"loss=.*abc") for family in KERAS_FAMILIES],
    *[(f"{family}_minimize_loss_string",
       (lambda f: lambda e: e.opt(f).minimize(lambda: "abc", [e.v]))(family),
       ValueError, r"loss=.*abc") for family in ("optimizer_v2", "tf_keras")],
    # grads_and_vars.
    *[(f"{family}_grad_float64_for_float32",
       _apply(family, lambda e: [(F64, e.v)]), ValueError,
       r"'v:0'.*float64.*float32") for family in
      ("tf1", "contrib", "optimizer_v2", "tf_keras")],
    *[(f"{family}_grad_wrong_shape",
       _apply(family, (lambda f: lambda e: [(tf.ones([3]), e.var(f))])(
           family)), ValueError, r"shape \(3,\).*\(2,\)")
      for family in ALL_FAMILIES],
    *[(f"{family}_pair_of_one",
       _apply(family, lambda e: [(tf.ones([2]),)]),
       ValueError, r"pairs.*index 0") for family in ALL_FAMILIES],
    *[(f"{family}_not_a_variable",
       _apply(family, lambda e: [(tf.ones([2]), "w")]), ValueError,
       r"variable.*'w'") for family in ALL_FAMILIES],
    *[(f"{family}_grad_string",
       _apply(family, (lambda f: lambda e: [("abc", e.var(f))])(family)),
       ValueError, r"numeric tensor.*'abc'") for family in ALL_FAMILIES],
    *[(f"{family}_grads_and_vars_not_a_list", _apply(family, lambda e: 5),
       ValueError, r"grads_and_vars=5") for family in ALL_FAMILIES],
]


class BadInputTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(CASES)
  def test_bad_input_raises_and_changes_nothing(self, fn, error, regex):
    env = Env()
    if hasattr(fn, "prepare"):
      fn.prepare(env)
    before = env.state()
    with self.assertRaisesRegex(error, regex):
      fn(env)
    # Nothing that existed before the call changed (the model's variables,
    # the prepared optimizer's slots, loss scale and step counter).
    after = env.state()
    for old, new in zip(before, after):
      self.assertAllEqual(old, new)
    if not hasattr(fn, "prepare"):
      self.assertAllEqual(env.v.numpy(), [1., 2.])
      self.assertAllEqual(np.asarray(env.kv), [1., 2.])

if __name__ == "__main__":
  absltest.main()
