"""The wrapper's API, the same in every Keras family, tested on all three.

Constructor, scaling, gradients, `minimize` and `apply_gradients`'s
arguments (arguments_test.py has the constructor's dialects). family_contract_test.py holds what the
wrapper does in training (skips, parity with Keras's classes, saving); each
family's own test file what that family alone does.
"""

import logging
import logging.handlers
import re
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mplso
from mplso._src.keras import base
import mplso.keras
from mplso_test.helpers import testing
from mplso_test.keras_families import families

NAN, INF = testing.NAN, testing.INF
FAMILIES = families.keras_families()
NAMED_FAMILIES = families.named_keras_families()


def _sgd(family, learning_rate=0.1):
  return family.optimizers.SGD(learning_rate)


class ConstructorTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_family_class_and_instance_checks(self, family):
    wrapper, own = family.wrapper, family.own
    opt = mplso.keras.LossScaleOptimizer(_sgd(family), "dynamic")
    self.assertIs(type(opt), wrapper)
    self.assertIsInstance(opt, base.LossScaleOptimizerBase)
    self.assertIsInstance(opt, family.optimizers.Optimizer)
    self.assertIsInstance(opt, own)  # So `compile` keeps it as it is.
    self.assertIsInstance(opt, mplso.keras.LossScaleOptimizer)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_tf_2_3_loss_scale_kinds(self, family):
    def make(loss_scale):
      return mplso.keras.LossScaleOptimizer(_sgd(family), loss_scale)

    self.assertIsInstance(make("dynamic").loss_scale, mplso.DynamicLossScale)
    fixed = make(128)
    self.assertIsInstance(fixed.loss_scale, mplso.FixedLossScale)
    self.assertEqual(float(fixed.loss_scale()), 128.)
    scale = mplso.DynamicLossScale(64)
    self.assertIs(make(scale).loss_scale, scale)

  @parameterized.named_parameters(
      (f"{family.name}_{name}", family, value) for family in FAMILIES
      for name, value in (
          ("none", None), ("word", "static"), ("zero", 0), ("below_one", 0.5),
          ("negative", -2.), ("nan", NAN), ("inf", INF), ("list", [2.]),
          ("number_string", "8")))
  def test_bad_loss_scale_is_a_value_error(self, family, value):
    with self.assertRaisesRegex(ValueError, "(?i)loss.scale"):
      mplso.keras.LossScaleOptimizer(_sgd(family), value)
    with self.assertRaises(ValueError):
      family.wrapper(_sgd(family), value)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_wrapping_twice_is_the_same_error_in_every_family(self, family):
    wrapper, own = family.wrapper, family.own
    for already in (mplso.keras.LossScaleOptimizer(_sgd(family)),
                    own(_sgd(family))):
      for wrap in (mplso.keras.LossScaleOptimizer, wrapper):
        with self.assertRaisesRegex(
            TypeError, "^LossScaleOptimizer cannot wrap another "
            "LossScaleOptimizer, but got: .* already a loss-scale optimizer"):
          wrap(already, "dynamic")

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_other_kind_is_a_type_error_naming_the_family(self, family):
    others = [tf.compat.v1.train.GradientDescentOptimizer(0.1), "adam"]
    others += [_sgd(other) for other in FAMILIES if other is not family]
    for other in others:
      with self.assertRaisesRegex(
          TypeError, '^"inner_optimizer" must be an instance of .*, but got: '
          f"{re.escape(repr(other))} .* Accepted here: "
          f"{re.escape(family.kind)}\\. "):
        family.wrapper(other, "dynamic")

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_no_optimizer_is_a_type_error(self, family):
    # None is "no optimizer": the TF 2.4 dialect also names it
    # `inner_optimizer=`, so the error asks for it once.
    with self.assertRaisesRegex(TypeError, "needs the optimizer to wrap"):
      family.wrapper(None, "dynamic")

  @parameterized.named_parameters(
      ("v1_optimizer", lambda: tf.compat.v1.train.AdamOptimizer()),
      ("string", lambda: "adam"), ("none", lambda: None))
  def test_what_no_family_wraps_is_a_type_error_naming_every_family(
      self, make):
    optimizer = make()
    with self.assertRaisesRegex(
        TypeError, f"but got: {re.escape(repr(optimizer))} .* Accepted here: "
        r"a tf_keras\.optimizers\.legacy\.Optimizer \(Keras 2 OptimizerV2\), "
        r"a tf_keras\.optimizers\.Optimizer \(Keras 2\) or a "
        r"keras\.optimizers\.Optimizer \(Keras 3\)\. For a "
        r"tf\.compat\.v1\.train\.Optimizer use "
        r"mplso\.MixedPrecisionLossScaleOptimizer\.$"):
      mplso.keras.LossScaleOptimizer(optimizer, "dynamic")

  @parameterized.named_parameters(
      (f"{name}_by_{by}", family, by == "ours")
      for name, family in families.named_keras_families(
          lambda family: family.checkpoints_as_own)
      for by in ("ours", "own"))
  def test_optimizer_wrapped_already_is_a_value_error(self, family, by_ours):
    # The tf_keras families' wrappers stand in for the wrapped optimizer in
    # checkpoints: a second loss scale would collide with the first.
    inner = _sgd(family)
    if by_ours:
      family.wrapper(inner, "dynamic")
    else:
      family.own(inner)
    for wrap in (mplso.keras.LossScaleOptimizer, family.wrapper):
      with self.assertRaisesRegex(ValueError, "already wrapped .* single"):
        wrap(inner, "dynamic")
    if by_ours:  # And the family's own class refuses it too.
      with self.assertRaisesRegex(ValueError, "already wrapped"):
        family.own(inner)


class OtherArgumentsTest(tf.test.TestCase, parameterized.TestCase):
  """Keywords besides the loss scale's, in the constructor and in configs.

  arguments_test.py has the loss-scale arguments' dialects.
  """

  @parameterized.named_parameters(
      (f"{family.name}_{name}", family, kwargs)
      for family in FAMILIES for name, kwargs in (
          ("clipnorm", {"clipnorm": 1.}), ("clipvalue", {"clipvalue": 1.}),
          ("global_clipnorm", {"global_clipnorm": 1.}),
          ("weight_decay", {"weight_decay": 0.1}), ("use_ema", {"use_ema": True}),
          ("loss_scale_factor", {"loss_scale_factor": 128.}),
          ("gradient_accumulation_steps", {"gradient_accumulation_steps": 2}),
          ("unknown", {"foo": 1})))
  def test_other_keywords_refused_as_the_familys_own_class(self, family,
                                                           kwargs):
    (name, value), = kwargs.items()
    if family.name == "keras3":
      # Keras 3's class: ValueError, and what to do instead.
      keras_3 = (f"does not support `{name}`. Instead, set `{name}` on the "
                 "`inner_optimizer`" if name != "foo" else
                 "does not support arguments: `foo`")
      with self.assertRaisesRegex(ValueError, keras_3):
        family.own(_sgd(family), **kwargs)
      expected = ValueError, keras_3
    else:
      # tf_keras's classes take no such keyword: Python's TypeError.
      with self.assertRaisesRegex(TypeError, "unexpected keyword argument"):
        family.own(_sgd(family), **kwargs)
      expected = TypeError, (
          r"^LossScaleOptimizer.__init__\(\) got an unexpected keyword "
          f"argument '{name}'. Accepted: ")
    for wrap in (mplso.keras.LossScaleOptimizer, family.wrapper):
      with self.assertRaisesRegex(*expected):
        wrap(_sgd(family), **kwargs)

  @parameterized.named_parameters(
      (f"{family.name}_{name}", family, extra) for family in FAMILIES
      for name, extra in (("unknown", {"bogus": 1}),
                          ("learning_rate", {"learning_rate": 0.5})))
  def test_from_config_refuses_keys_the_familys_own_class_refuses(
      self, family, extra):
    config = mplso.keras.LossScaleOptimizer(_sgd(family), "dynamic").get_config()
    own = family.own
    own_config = own(_sgd(family)).get_config()
    (key,) = extra
    if family.name == "keras3":
      error = ValueError, f"does not support arguments: `{key}`"
      own_class = own
    else:
      error = TypeError, f"unexpected keyword argument '{key}'"
      own_class = type(own(_sgd(family)))  # tf_keras's V2 or V3 class.
    with self.assertRaisesRegex(*error):
      own_class.from_config({**own_config, **extra})
    for wrap in (mplso.keras.LossScaleOptimizer, family.wrapper):
      with self.assertRaisesRegex(*error):
        wrap.from_config({**config, **extra})
      with self.assertRaisesRegex(*error):
        wrap.from_config({**own_config, **extra})
      wrap.from_config(config)  # Without the extra key it loads.

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_from_config_creates_the_variables_of_one_wrapper(self, family):
    # Finding the family reads the optimizer's config only: no loss scale is
    # built (with its variables) just to be thrown away.
    config = mplso.keras.LossScaleOptimizer(_sgd(family), "dynamic").get_config()

    def created_by(build):
      names = []

      def creator(next_creator, **kwargs):
        names.append(kwargs.get("name"))
        return next_creator(**kwargs)

      with tf.variable_creator_scope(creator):
        build()
      return names

    self.assertEqual(
        created_by(lambda: family.wrapper.from_config(config)),
        created_by(lambda: mplso.keras.LossScaleOptimizer.from_config(config)))
    self.assertEqual(1, created_by(
        lambda: mplso.keras.LossScaleOptimizer.from_config(config)).count(
            "good_steps"))

class AttributeSurfaceTest(tf.test.TestCase, parameterized.TestCase):
  """What each family's own class exposes works on mplso's wrapper."""

  def test_keras_3_names_after_steps_match_keras_3s_class(self):
    import keras  # pylint: disable=g-import-not-at-top
    seen = {}
    for name, make in (("ours", mplso.keras.LossScaleOptimizer),
                       ("theirs", keras.optimizers.LossScaleOptimizer)):
      opt = make(keras.optimizers.SGD(0.1), initial_scale=8.,
                 dynamic_growth_steps=3)
      var = keras.Variable([1., 2.])
      for grad in ([1., 1.], [NAN, 1.], [1., 1.], [1., 1.]):
        with tf.GradientTape() as tape:
          loss = opt.scale_loss(tf.reduce_sum(var.value * grad))
        opt.apply_gradients(zip(tape.gradient(loss, [var.value]), [var]))
      seen[name] = (float(opt.dynamic_scale), int(opt.step_counter),
                    opt.initial_scale, opt.dynamic_growth_steps,
                    type(opt.inner_optimizer).__name__)
    self.assertEqual((4., 2, 8., 3, "SGD"), seen["theirs"])
    self.assertEqual(seen["theirs"], seen["ours"])

  @parameterized.parameters("scale_loss", "dynamic_scale", "step_counter")
  def test_keras_3_only_name_on_tf_keras_says_where_it_exists(self, name):
    for family in FAMILIES:
      if family.name == "keras3":
        continue
      opt = mplso.keras.LossScaleOptimizer(_sgd(family), "dynamic")
      with self.assertRaises(AttributeError) as raised:
        getattr(opt, name)
      message = str(raised.exception)
      self.assertStartsWith(message, "'LossScaleOptimizer' object ")
      self.assertIn(f"`{name}` is Keras 3's LossScaleOptimizer's", message)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_unknown_name_names_the_loss_scale_optimizer(self, family):
    opt = mplso.keras.LossScaleOptimizer(_sgd(family), "dynamic")
    with self.assertRaisesRegex(AttributeError,
                                "^'LossScaleOptimizer' object .*'no_such'"):
      _ = opt.no_such

  def test_optimizer_v2_family_says_its_wrapped_optimizers_names_stay_there(
      self):
    # tf_keras's OptimizerV2 wrapper forwards none; its wording comes first.
    import tf_keras  # pylint: disable=g-import-not-at-top
    opt = mplso.keras.LossScaleOptimizer(tf_keras.optimizers.legacy.SGD())
    with self.assertRaisesRegex(
        AttributeError, "^'LossScaleOptimizer' object has no attribute "
        "'nesterov'. The wrapped SGD has it, as `inner_optimizer.nesterov`"):
      _ = opt.nesterov

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_loss_scale_arithmetic_survives_a_config_round_trip(self, family):
    opt = mplso.keras.LossScaleOptimizer(_sgd(family), dynamic=True,
                                         initial_scale=16.)
    loaded = mplso.keras.LossScaleOptimizer.from_config(opt.get_config())
    for wrapper in (opt, loaded):
      scale = wrapper.loss_scale
      self.assertEqual(32., float(scale * 2))
      self.assertEqual(32., float(2 * scale))
      self.assertEqual(8., float(scale / 2))
      self.assertEqual(0.125, float(2 / scale))
      self.assertEqual(15., float(scale - 1))
      self.assertTrue(bool(scale > 10))
      self.assertFalse(bool(scale <= 10))
      self.assertEqual(48., float(tf.constant(3.) * scale))


class ScalingTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_get_scaled_loss_and_unscaled_gradients(self, family):
    opt = mplso.keras.LossScaleOptimizer(_sgd(family), 8)
    self.assertEqual(float(opt.get_scaled_loss(tf.constant(3.0))), 24.0)
    scaled = opt.get_scaled_loss(lambda: tf.constant(3.0))
    self.assertTrue(callable(scaled))
    self.assertEqual(float(scaled()), 24.0)
    sparse = tf.IndexedSlices(tf.constant([[8.0, 16.0]]), tf.constant([1]),
                              tf.constant([3, 2]))
    dense, none, unscaled_sparse = opt.get_unscaled_gradients(
        [tf.constant([8.0]), None, sparse])
    self.assertAllEqual(dense, [1.0])
    self.assertIsNone(none)
    self.assertIsInstance(unscaled_sparse, tf.IndexedSlices)
    self.assertAllEqual(unscaled_sparse.values, [[1.0, 2.0]])
    self.assertAllEqual(unscaled_sparse.indices, [1])

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_scaled_callable_loss_reads_the_scale_when_called(self, family):
    opt = mplso.keras.LossScaleOptimizer(_sgd(family),
                                         mplso.DynamicLossScale(8.0))
    scaled = opt.get_scaled_loss(lambda: tf.constant(3.0))
    opt.apply_gradients([(tf.constant(NAN), family.variable(1.))])  # Scale 4.
    self.assertEqual(float(scaled()), 12.0)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_unscaled_gradients_equal_plain_gradients(self, family):
    model = families.keras_model(family.keras)
    opt = mplso.keras.LossScaleOptimizer(family.optimizers.Adam(0.01), 2.**10)
    batch = families.keras_data(8)

    @tf.function
    def grads():
      with tf.GradientTape(persistent=True) as tape:
        loss = families.keras_loss(model, batch)
        scaled_loss = opt.get_scaled_loss(loss)
      unscaled = opt.get_unscaled_gradients(
          tape.gradient(scaled_loss, model.trainable_variables))
      return scaled_loss / loss, unscaled, tape.gradient(
          loss, model.trainable_variables)

    ratio, unscaled, plain = grads()
    self.assertAllClose(ratio, 2.**10)
    for got, want in zip(unscaled, plain):
      self.assertEqual(type(got), type(want))
      self.assertAllClose(tf.convert_to_tensor(got),
                          tf.convert_to_tensor(want), rtol=1e-6)
    self.assertTrue(any(isinstance(g, tf.IndexedSlices) for g in unscaled))


class MinimizeTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_tensor_loss_with_its_tape(self, family):
    opt = mplso.keras.LossScaleOptimizer(_sgd(family, 0.25), 1024)
    var = tf.Variable(1.0)
    with tf.GradientTape() as tape:
      loss = var**2
    opt.minimize(loss, var_list=[var], tape=tape)
    self.assertEqual(float(var), 0.5)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_tensor_loss_needs_tape(self, family):
    opt = mplso.keras.LossScaleOptimizer(_sgd(family), "dynamic")
    var = tf.Variable(1.0)
    with self.assertRaisesRegex(ValueError, "`tape` is required"):
      opt.minimize(var * 2.0, var_list=[var])

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_tf_2_3_examples(self, family):
    # The two examples of the TF 2.3 page.
    opt = mplso.keras.LossScaleOptimizer(_sgd(family, 0.25), "dynamic")
    var = tf.Variable(1.0)

    def loss_fn():
      return var**2

    opt.minimize(loss_fn, var_list=[var])
    self.assertEqual(float(var), 0.5)
    with tf.GradientTape() as tape:
      scaled_loss = opt.get_scaled_loss(loss_fn())
    scaled_grad = tape.gradient(scaled_loss, var)
    (grad,) = opt.get_unscaled_gradients([scaled_grad])
    opt.apply_gradients([(grad, var)])
    self.assertEqual(float(var), 0.25)
    self.assertEqual(float(scaled_grad), 2**15)  # 2 * 0.5 * 2**15.

  @parameterized.named_parameters(
      (f"{name}_{mode}", family, mode == "function")
      for name, family in NAMED_FAMILIES for mode in ("eager", "function"))
  def test_callable_loss_skips_when_not_finite(self, family, in_function):
    var = tf.Variable([1., -2.])
    opt = mplso.keras.LossScaleOptimizer(
        _sgd(family, 0.25), mplso.DynamicLossScale(8., increment_period=1))
    poisoned = tf.Variable(False)

    def loss():
      factor = tf.where(poisoned, NAN, 1.)  # Makes the gradient NaN too.
      return tf.reduce_sum(var ** 2) * factor

    def minimize():
      opt.minimize(loss, [var])

    if in_function:
      minimize = tf.function(minimize)
    minimize()  # Gradient 2 * var, unscaled; var -= 0.25 * 2 * var.
    self.assertAllClose(var, [0.5, -1.])
    self.assertEqual(float(opt.loss_scale()), 16.)
    poisoned.assign(True)
    minimize()
    self.assertAllClose(var, [0.5, -1.])
    self.assertEqual(float(opt.loss_scale()), 8.)
    self.assertEqual(int(opt.iterations), 2)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_compute_gradients_are_unscaled(self, family):
    var = tf.Variable(3.)
    opt = mplso.keras.LossScaleOptimizer(family.optimizers.Adam(), 2.**20)
    ((grad, got_var),) = opt.compute_gradients(lambda: var * var, [var])
    self.assertIs(got_var, var)
    self.assertAllClose(grad, 6.)


class GetGradientsTest(tf.test.TestCase, parameterized.TestCase):
  """TF 2.3-2.10 code calls `get_gradients` in a `tf.function` or a graph."""

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_scales_and_unscales_in_a_tf_function(self, family):
    opt = mplso.keras.LossScaleOptimizer(_sgd(family), 2.**10)
    var = family.variable(1.)
    tiny = tf.constant(2.**-13, tf.float16)

    @tf.function
    def gradients():
      # d loss / d var = 2**-26, zero in float16 unless the loss is scaled.
      loss = tf.cast(tf.convert_to_tensor(var), tf.float16) * tiny * tiny
      return opt.get_gradients(loss, [var])

    (grad,) = gradients()
    self.assertEqual(grad.dtype, tf.float32)
    self.assertEqual(float(grad), 2.**-26)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_dynamic_scale_gradients_equal_plain_gradients(self, family):
    opt = mplso.keras.LossScaleOptimizer(_sgd(family), "dynamic")
    var = family.variable(3.)
    grads = tf.function(
        lambda: opt.get_gradients(tf.convert_to_tensor(var) ** 2, [var]))()
    self.assertEqual(float(grads[0]), 6.)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_parameter_without_gradient_is_a_value_error(self, family):
    opt = mplso.keras.LossScaleOptimizer(_sgd(family), "dynamic")
    used, unused = family.variable(1.), family.variable(1.)
    with self.assertRaisesRegex(ValueError, "gradient"):
      tf.function(lambda: opt.get_gradients(
          tf.convert_to_tensor(used) * 2., [used, unused]))()

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_in_a_tf1_graph(self, family):
    with tf.Graph().as_default():
      var = tf.Variable(3.0)
      opt = mplso.keras.LossScaleOptimizer(family.optimizers.Adam(), 1024)
      (grad,) = opt.get_gradients(var * 2.0, [var])
      other = tf.Variable(1.0)
      # OptimizerV2's own get_gradients, or ours for the others.
      with self.assertRaisesRegex(ValueError,
                                  "has (`None` for|no) gradient"):
        opt.get_gradients(var * 2.0, [other])
      with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        self.assertEqual(2.0, session.run(grad))


class ApplyGradientsTest(tf.test.TestCase, parameterized.TestCase):

  def _warnings(self, fn):
    """What `fn` logs at WARNING through TF's logger."""
    handler = logging.handlers.BufferingHandler(100)
    logger = tf.get_logger()
    logger.addHandler(handler)
    try:
      fn()
    finally:
      logger.removeHandler(handler)
    return [r.getMessage() for r in handler.buffer
            if r.levelno >= logging.WARNING and "forgot" in r.getMessage()]

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_second_argument_reaches_the_wrapped_optimizer_as_tf_2_3(
      self, family):
    # A trainer calls `opt.apply_gradients(pairs, 1.0)`, the 1.0 being its
    # wrapped optimizer's `clip_norm`: TF 2.3's wrapper passed `name` on
    # positionally (and `experimental_aggregate_gradients` by keyword).
    base_class = family.optimizers.SGD

    class ClippingSGD(base_class):

      def apply_gradients(self, grads_and_vars, clip_norm, **kwargs):
        grads, variables = zip(*grads_and_vars)
        grads, _ = tf.clip_by_global_norm(grads, clip_norm)
        return super().apply_gradients(zip(grads, variables), **kwargs)

    var = tf.Variable([0., 0.])
    opt = mplso.keras.LossScaleOptimizer(ClippingSGD(1.0), "dynamic")
    opt.apply_gradients([(tf.constant([30., 40.]), var)], 1.0)
    self.assertAllClose([-0.6, -0.8], var)  # Clipped to norm 1.
    opt.apply_gradients([(tf.constant([NAN, 1.]), var)], 1.0)
    self.assertAllClose([-0.6, -0.8], var)  # Skipped.

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_no_gradients_is_no_step(self, family):
    opt = mplso.keras.LossScaleOptimizer(_sgd(family), dynamic=True,
                                         initial_scale=4.,
                                         dynamic_growth_steps=1)
    opt.get_scaled_loss(tf.constant(1.))  # No tf_keras warning here.
    opt.get_unscaled_gradients([])
    opt.apply_gradients([])
    self.assertEqual(4., float(opt.loss_scale))  # Not one finite step.
    self.assertEqual(0, int(opt.iterations))

  def test_warning_goes_through_tfs_logging_module(self):
    # tf_keras's test captures its warning by patching TF's logging module.
    # (Keras 3's class does not warn: test_warns_as_tf_keras_when_never_scaled.)
    from tensorflow.python.platform import tf_logging  # pylint: disable=g-import-not-at-top
    tf_keras_families = [f for f in FAMILIES if f.name != "keras3"]
    self.assertLen(tf_keras_families, 2)
    for family in tf_keras_families:
      for make in (family.own, lambda opt: mplso.keras.LossScaleOptimizer(
          opt, "dynamic")):
        with mock.patch.object(tf_logging, "warning") as warning:
          make(_sgd(family)).apply_gradients(
              [(tf.constant(1.), tf.Variable(1.))])
        (call,) = warning.call_args_list
        self.assertIn(
            "You forgot to call LossScaleOptimizer.get_scaled_loss()",
            call.args[0])

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_warns_as_tf_keras_when_never_scaled(self, family):
    opt = mplso.keras.LossScaleOptimizer(_sgd(family), "dynamic")
    var = family.variable(1.)

    def apply():
      opt.apply_gradients([(tf.constant(1.), var)])

    if family.name == "keras3":
      # Keras 3's trainer applies scaled gradients without these calls, and
      # Keras 3's class does not warn.
      self.assertEqual([], self._warnings(apply))
      return
    with self.assertLogs(tf.get_logger(), "WARNING"):
      family.own(_sgd(family)).apply_gradients(
          [(tf.constant(1.), tf.Variable(1.))])
    (both,) = self._warnings(apply)
    self.assertIn("get_scaled_loss() and LossScaleOptimizer."
                  "get_unscaled_gradients() before calling", both)
    opt.get_scaled_loss(tf.constant(1.))
    (one,) = self._warnings(apply)
    self.assertIn("forgot to call LossScaleOptimizer.get_unscaled_gradients() "
                  "before", one)
    opt.get_unscaled_gradients([tf.constant(1.)])
    self.assertEqual([], self._warnings(apply))
    # minimize scales and unscales by itself.
    other = mplso.keras.LossScaleOptimizer(_sgd(family), "dynamic")
    self.assertEqual([], self._warnings(
        lambda: (other.minimize(lambda: var * 2., [var]),
                 other.apply_gradients([(tf.constant(1.), var)]))))

  @parameterized.named_parameters(
      (f"{family.name}_{aggregate}_{mode}".lower(), family, aggregate,
       mode == "function") for family in FAMILIES
      for aggregate in (True, False) for mode in ("eager", "function"))
  def test_experimental_aggregate_gradients_keyword(self, family, aggregate,
                                                    in_function):
    opt = mplso.keras.LossScaleOptimizer(_sgd(family, 1.), 4)
    var = family.variable(1.)

    def apply(grad):
      opt.apply_gradients([(grad, var)],
                          experimental_aggregate_gradients=aggregate)

    if in_function:
      apply = tf.function(apply)
    apply(tf.constant(0.5))
    self.assertAllClose(np.asarray(var), 0.5)
    apply(tf.constant(NAN))  # Skipped; `iterations` still advances.
    self.assertAllClose(np.asarray(var), 0.5)
    self.assertEqual(int(np.asarray(opt.iterations)), 2)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_none_gradient_is_left_out(self, family):
    used, unused = tf.Variable(1.), tf.Variable(1.)
    opt = mplso.keras.LossScaleOptimizer(_sgd(family, 1.), "dynamic")
    opt.apply_gradients([(tf.constant(0.5), used), (None, unused)])
    self.assertAllClose(used, 0.5)
    self.assertAllClose(unused, 1.)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_no_gradient_at_all_is_a_value_error(self, family):
    opt = mplso.keras.LossScaleOptimizer(family.optimizers.Adam(), "dynamic")
    with self.assertRaisesRegex(ValueError,
                                "No gradients provided for any variable"):
      opt.apply_gradients([(None, tf.Variable(1.))])

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_tf1_global_step_is_a_type_error(self, family):
    opt = mplso.keras.LossScaleOptimizer(family.optimizers.Adam(), "dynamic")
    with self.assertRaisesRegex(TypeError, "global_step"):
      opt.apply_gradients([(tf.constant(1.), tf.Variable(1.))],
                          global_step=3)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_cross_replica_context_is_refused(self, family):
    # Mirrored through one device: collective all-reduces would share
    # instance keys with other tests' strategies of another size.
    for strategy in (tf.distribute.OneDeviceStrategy("/cpu:0"),
                     tf.distribute.MirroredStrategy(
                         ["/cpu:0"],
                         cross_device_ops=tf.distribute.ReductionToOneDevice())):
      with strategy.scope():
        var = tf.Variable(1.0)
        opt = mplso.keras.LossScaleOptimizer(_sgd(family), "dynamic")
        with self.assertRaisesRegex(
            ValueError, r"^apply_gradients\(\) must be called in a replica "
            r"context\. Call it inside strategy\.run"):
          opt.apply_gradients([(tf.constant(1.0), var)])
      self.assertAllEqual(var, 1.0)


if __name__ == "__main__":
  absltest.main()
