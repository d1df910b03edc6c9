"""The wrapper's API, the same in every Keras family, tested on all three.

Constructor, attributes, scaling, gradients, `minimize`, `apply_gradients`
(its arguments, and steps in `strategy.run`) and the wrapped optimizer's
state and attributes through the wrapper. arguments_test.py has the
constructor's arguments, config_test.py the configs, family_contract_test.py
what the wrapper does in training (skips, parity with Keras's classes,
saving), tf_keras_base_test.py what only the two tf_keras families do,
and each family's own test file what that family alone does.
"""

import functools
import logging
import logging.handlers

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mplso
from mplso._src.keras import base
import mplso.keras
from mplso_test.helpers import keras_families
from mplso_test.helpers import testing

NAN = testing.NAN
FAMILIES = keras_families.keras_families()
NAMED_FAMILIES = keras_families.named_keras_families()
# Collective all-reduce groups are numbered per process, so a strategy of
# another size than an earlier test's would clash: reduce to one device.
STRATEGIES = {
    "one_device": lambda: tf.distribute.OneDeviceStrategy("/cpu:0"),
    "mirrored": lambda: tf.distribute.MirroredStrategy(
        ["/cpu:0"], cross_device_ops=tf.distribute.ReductionToOneDevice()),
}



class ConstructorTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_family_class_and_instance_checks(self, family):
    wrapper, own = family.wrapper, family.own
    opt = mplso.keras.LossScaleOptimizer(family.sgd(), "dynamic")
    self.assertIs(type(opt), wrapper)
    self.assertIsInstance(opt, base.LossScaleOptimizerBase)
    self.assertIsInstance(opt, family.optimizers.Optimizer)
    self.assertIsInstance(opt, own)  # So `compile` keeps it as it is.
    self.assertIsInstance(opt, mplso.keras.LossScaleOptimizer)


class OtherArgumentsTest(tf.test.TestCase, parameterized.TestCase):
  """Keywords besides the loss scale's, in the constructor.

  arguments_test.py has the loss-scale arguments' dialects; config_test.py
  the keys a config may not hold.
  """

  @parameterized.named_parameters(
      (f"{family.name}_{name}", family, kwargs)
      for family in FAMILIES for name, kwargs in (
          ("clipnorm", {"clipnorm": 1.}), ("clipvalue", {"clipvalue": 1.}),
          ("global_clipnorm", {"global_clipnorm": 1.}),
          ("weight_decay", {"weight_decay": 0.1}),
          ("use_ema", {"use_ema": True}),
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
        family.own(family.sgd(), **kwargs)
      expected = ValueError, keras_3
    else:
      # tf_keras's classes take no such keyword: Python's TypeError.
      with self.assertRaisesRegex(TypeError, "unexpected keyword argument"):
        family.own(family.sgd(), **kwargs)
      expected = TypeError, (
          r"^LossScaleOptimizer.__init__\(\) got an unexpected keyword "
          f"argument '{name}'. Accepted: ")
    for wrap in (mplso.keras.LossScaleOptimizer, family.wrapper):
      with self.assertRaisesRegex(*expected):
        wrap(family.sgd(), **kwargs)


class AttributeSurfaceTest(tf.test.TestCase, parameterized.TestCase):
  """What each family's own class exposes works on mplso's wrapper."""

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_unknown_name_names_the_loss_scale_optimizer(self, family):
    opt = mplso.keras.LossScaleOptimizer(family.sgd(), "dynamic")
    with self.assertRaisesRegex(AttributeError,
                                "^'LossScaleOptimizer' object .*'no_such'"):
      _ = opt.no_such


class ScalingTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_get_scaled_loss_and_unscaled_gradients(self, family):
    opt = mplso.keras.LossScaleOptimizer(family.sgd(), 8)
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
    opt = mplso.keras.LossScaleOptimizer(family.sgd(),
                                         mplso.DynamicLossScale(8.0))
    scaled = opt.get_scaled_loss(lambda: tf.constant(3.0))
    opt.apply_gradients([(tf.constant(NAN), family.variable(1.))])  # Scale 4.
    self.assertEqual(float(scaled()), 12.0)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_unscaled_gradients_equal_plain_gradients(self, family):
    model = keras_families.keras_model(family.keras)
    opt = mplso.keras.LossScaleOptimizer(family.optimizers.Adam(0.01), 2.**10)
    batch = keras_families.keras_data(8)

    @tf.function
    def grads():
      with tf.GradientTape(persistent=True) as tape:
        loss = keras_families.keras_loss(model, batch)
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
    opt = mplso.keras.LossScaleOptimizer(family.sgd(0.25), 1024)
    var = tf.Variable(1.0)
    with tf.GradientTape() as tape:
      loss = var**2
    opt.minimize(loss, var_list=[var], tape=tape)
    self.assertEqual(float(var), 0.5)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_tensor_loss_needs_tape(self, family):
    opt = mplso.keras.LossScaleOptimizer(family.sgd(), "dynamic")
    var = tf.Variable(1.0)
    with self.assertRaisesRegex(ValueError, "`tape` is required"):
      opt.minimize(var * 2.0, var_list=[var])

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_tf_2_3_examples(self, family):
    # The two examples of the TF 2.3 page.
    opt = mplso.keras.LossScaleOptimizer(family.sgd(0.25), "dynamic")
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
        family.sgd(0.25), mplso.DynamicLossScale(8., increment_period=1))
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
    opt = mplso.keras.LossScaleOptimizer(family.sgd(), 2.**10)
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
    opt = mplso.keras.LossScaleOptimizer(family.sgd(), "dynamic")
    var = family.variable(3.)
    grads = tf.function(
        lambda: opt.get_gradients(tf.convert_to_tensor(var) ** 2, [var]))()
    self.assertEqual(float(grads[0]), 6.)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_parameter_without_gradient_is_a_value_error(self, family):
    opt = mplso.keras.LossScaleOptimizer(family.sgd(), "dynamic")
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
    opt = mplso.keras.LossScaleOptimizer(family.sgd(), dynamic=True,
                                         initial_scale=4.,
                                         dynamic_growth_steps=1)
    opt.get_scaled_loss(tf.constant(1.))  # No tf_keras warning here.
    opt.get_unscaled_gradients([])
    opt.apply_gradients([])
    self.assertEqual(4., float(opt.loss_scale))  # Not one finite step.
    self.assertEqual(0, int(opt.iterations))

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_warns_as_tf_keras_when_never_scaled(self, family):
    opt = mplso.keras.LossScaleOptimizer(family.sgd(), "dynamic")
    var = family.variable(1.)

    def apply():
      opt.apply_gradients([(tf.constant(1.), var)])

    if family.name == "keras3":
      # Keras 3's trainer applies scaled gradients without these calls, and
      # Keras 3's class does not warn.
      self.assertEqual([], self._warnings(apply))
      return
    with self.assertLogs(tf.get_logger(), "WARNING"):
      family.own(family.sgd()).apply_gradients(
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
    other = mplso.keras.LossScaleOptimizer(family.sgd(), "dynamic")
    self.assertEqual([], self._warnings(
        lambda: (other.minimize(lambda: var * 2., [var]),
                 other.apply_gradients([(tf.constant(1.), var)]))))

  @parameterized.named_parameters(
      (f"{family.name}_{aggregate}_{mode}".lower(), family, aggregate,
       mode == "function") for family in FAMILIES
      for aggregate in (True, False) for mode in ("eager", "function"))
  def test_experimental_aggregate_gradients_keyword(self, family, aggregate,
                                                    in_function):
    opt = mplso.keras.LossScaleOptimizer(family.sgd(1.), 4)
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
    opt = mplso.keras.LossScaleOptimizer(family.sgd(1.), "dynamic")
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
    for make_strategy in STRATEGIES.values():
      strategy = make_strategy()
      with strategy.scope():
        var = tf.Variable(1.0)
        opt = mplso.keras.LossScaleOptimizer(family.sgd(), "dynamic")
        with self.assertRaisesRegex(
            ValueError, r"^apply_gradients\(\) must be called in a replica "
            r"context\. Call it inside strategy\.run"):
          opt.apply_gradients([(tf.constant(1.0), var)])
      self.assertAllEqual(var, 1.0)


class DistributionTest(tf.test.TestCase, parameterized.TestCase):
  """`apply_gradients` in `strategy.run`: every replica skips together."""

  @parameterized.named_parameters(
      (f"{name}_{strategy}", family, strategy)
      for name, family in NAMED_FAMILIES for strategy in STRATEGIES)
  def test_skips_in_strategy_run(self, family, strategy):
    strategy = STRATEGIES[strategy]()
    with strategy.scope():
      var = tf.Variable([1., 1.])
      opt = family.wrapper(family.optimizers.SGD(1.),
                           mplso.DynamicLossScale(4.))

    @tf.function
    def step(grad):
      strategy.run(lambda g: opt.apply_gradients([(g, var)]), args=(grad,))

    step(tf.constant([0.5, 0.25]))
    step(tf.constant([NAN, 0.25]))
    self.assertAllClose(var, [0.5, 0.75])
    self.assertEqual(float(opt.loss_scale()), 2.)
    self.assertEqual(int(np.asarray(opt.iterations)), 2)


class PassthroughTest(tf.test.TestCase, parameterized.TestCase):
  """The wrapped optimizer's state and attributes, through the wrapper."""

  def _built(self, family, **adam_kwargs):
    model = keras_families.keras_model(family.keras)
    opt = family.wrapper(family.optimizers.Adam(0.01, **adam_kwargs),
                         mplso.DynamicLossScale(2.**10))
    family.build(opt, model.trainable_variables)
    return model.trainable_variables[0], opt

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_hyperparameters_and_iterations_are_the_wrapped_optimizers(
      self, family):
    _, opt = self._built(family, beta_1=0.8)
    self.assertAllClose(opt.beta_1, 0.8)
    self.assertIs(opt.iterations, opt.inner_optimizer.iterations)
    with self.assertRaises(AttributeError):
      _ = opt.no_such_hyperparameter

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_learning_rate_and_lr(self, family):
    _, opt = self._built(family)
    self.assertAllClose(opt.learning_rate, 0.01)
    self.assertAllClose(opt.lr, 0.01)
    opt.learning_rate = 0.5
    self.assertAllClose(opt.inner_optimizer.learning_rate, 0.5)
    opt.lr = 0.25
    self.assertAllClose(opt.lr, 0.25)
    self.assertAllClose(opt.inner_optimizer.learning_rate, 0.25)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_learning_rate_schedule(self, family):
    schedules = family.keras.optimizers.schedules
    schedule = schedules.ExponentialDecay(1.0, 1, 0.5)
    opt = family.wrapper(family.optimizers.SGD(schedule), 4)
    bare = family.optimizers.SGD(schedule)
    var, bare_var = tf.Variable(0.0), tf.Variable(0.0)
    for _ in range(2):
      opt.apply_gradients([(tf.constant(-1.0), var)])
      bare.apply_gradients([(tf.constant(-1.0), bare_var)])
    self.assertAllClose(var, 1.5)  # 1.0, then 0.5.
    # Read as the bare optimizer reads it: OptimizerV2 gives the schedule,
    # the others a current value.
    if isinstance(bare.learning_rate, schedules.LearningRateSchedule):
      self.assertIs(opt.learning_rate, schedule)
    else:
      self.assertAllClose(opt.learning_rate, bare.learning_rate)
    opt.learning_rate = schedules.ExponentialDecay(4.0, 1, 0.5)
    opt.apply_gradients([(tf.constant(-1.0), var)])  # lr 4 * 0.5**2.
    self.assertAllClose(var, 2.5)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_slots_are_the_wrapped_optimizers(self, family):
    kernel, opt = self._built(family)
    self.assertEqual(opt.get_slot_names(), list(family.adam_slots))
    for name, state in zip(family.adam_slots,
                           family.adam_state(opt.inner_optimizer, kernel)):
      self.assertIs(opt.get_slot(kernel, name), state)
      self.assertEqual(state.shape, kernel.shape)
    with self.assertRaisesRegex(KeyError, family.missing_slot_error):
      opt.get_slot(kernel, "vhat")

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_add_slot(self, family):
    kernel, opt = self._built(family)
    extra = opt.add_slot(kernel, "trace", initializer="ones")
    self.assertAllEqual(extra, np.ones(kernel.shape))
    self.assertIs(opt.get_slot(kernel, "trace"), extra)
    self.assertIn("trace", opt.get_slot_names())
    inner_variables = functools.partial(keras_families.optimizer_variables,
                                        opt.inner_optimizer)
    self.assertTrue(any(v is extra for v in inner_variables()))
    count = len(inner_variables())
    self.assertIs(opt.add_slot(kernel, "trace"), extra)  # Not made twice.
    self.assertLen(inner_variables(), count)
    self.assertAllEqual(opt.add_slot(kernel, "zeros"), np.zeros(kernel.shape))

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_weights(self, family):
    kernel, opt = self._built(family)
    inner = keras_families.optimizer_variables(opt.inner_optimizer)
    expected = list(inner)
    if family.weights_hold_loss_scale:
      expected += opt.loss_scale.variables
    for variables in (opt.weights, keras_families.optimizer_variables(opt)):
      self.assertEqual([id(v) for v in variables], [id(v) for v in expected])
    got = opt.get_weights()
    self.assertLen(got, len(expected))
    for g, w in zip(got, expected):
      self.assertAllEqual(g, np.asarray(w))

    values = [np.full(np.shape(v), 3, np.asarray(v).dtype) for v in expected]
    opt.set_weights(values)
    self.assertEqual(int(opt.iterations), 3)
    self.assertAllEqual(opt.get_slot(kernel, family.adam_slots[0]),
                        np.full(kernel.shape, 3.))
    scale = 3. if family.weights_hold_loss_scale else 2.**10
    self.assertEqual(float(opt.loss_scale()), scale)
    # The wrapped optimizer's weights alone (a file of the family's own
    # class or of the bare optimizer) leave the loss scale as it is.
    opt.set_weights([v * 2 for v in values[:len(inner)]])
    self.assertEqual(int(opt.iterations), 6)
    self.assertEqual(float(opt.loss_scale()), scale)
    if family.weights_hold_loss_scale:
      wrong_count = (rf"Expected {len(expected)} weights \(or {len(inner)} "
                     r"for the wrapped optimizer alone\)\. Received: 1 ")
    else:  # OptimizerV2's own set_weights.
      wrong_count = rf"length 1, but the optimizer was expecting {len(inner)}"
    with self.assertRaisesRegex(ValueError, wrong_count):
      opt.set_weights(values[:1])


if __name__ == "__main__":
  absltest.main()
