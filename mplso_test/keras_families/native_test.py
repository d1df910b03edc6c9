"""`mplso.keras.to_native` / `from_native`: a run moves between wrappers.

For every Keras family and SGD, SGD with momentum, Adam and RMSprop, a run
trained with one wrapper (an Inf step included, so the scale has shrunk and
the good-step count is not 0) switches to the other: the state is carried
(scale, good steps, `iterations`, slots), and 20 further finite steps give
what a twin run that never switched gives. Only finite steps follow the
switch: there the two classes' rules agree (Keras 3's class does not advance
`iterations` on a skipped step, mplso's does).
"""

import os

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mplso
import mplso.keras
from mplso_test.helpers import keras_families
from mplso_test.helpers import strategies
from mplso_test.helpers import testing

# The tests check the links that Keras's checkpoints follow.
# pylint: disable=protected-access

NAN, INF = testing.NAN, testing.INF
FAMILIES = keras_families.keras_families()
NAMED_FAMILIES = keras_families.named_keras_families()
KERAS_3, *TF_KERAS = FAMILIES
NAMED_TF_KERAS = keras_families.named_keras_families(lambda f: f is not KERAS_3)

# Each optimizer from a family's optimizers module.
OPTIMIZERS = {
    "sgd": lambda optimizers: optimizers.SGD(0.05),
    "momentum": lambda optimizers: optimizers.SGD(0.05, momentum=0.9),
    "adam": lambda optimizers: optimizers.Adam(0.01),
    "rmsprop": lambda optimizers: optimizers.RMSprop(0.01),
}
CASES = [(f"{family.name}_{name}", family, name)
         for family in FAMILIES for name in OPTIMIZERS]

INITIAL_SCALE, GROWTH_STEPS = 2.**10, 3
# Steps before the switch (step POISONED's input holds an Inf), and after.
BEFORE, POISONED, AFTER = 5, 2, 20
# `(scale, good steps, iterations)` at the switch: halved once, two finite
# steps since; the skipped step counted (Keras 3's class leaves it out).
AT_SWITCH = (INITIAL_SCALE / 2, 2, BEFORE)


def _model(family):
  """A small float32 Dense model of the family's Keras, seeded."""
  keras = family.keras
  keras.utils.set_random_seed(0)
  return keras.Sequential([keras.Input((4,)),
                           keras.layers.Dense(3, activation="tanh"),
                           keras.layers.Dense(1)])


def _batch(step: int):
  """The 8 examples of `step`; at step POISONED one input is Inf."""
  rng = np.random.default_rng(step)
  x = rng.normal(size=(8, 4)).astype(np.float32)
  y = x @ np.array([[0.5], [-1.], [0.25], [1.]], np.float32)
  if step == POISONED:
    x[1, 2] = INF
  return x, y


def _mplso(family, name, **kwargs):
  """A model and mplso's wrapper of a fresh optimizer `name`."""
  loss_scale = mplso.DynamicLossScale(INITIAL_SCALE, GROWTH_STEPS, **kwargs)
  return _model(family), mplso.keras.LossScaleOptimizer(
      OPTIMIZERS[name](family.optimizers), loss_scale)


def _native(family, name):
  """A model and Keras's own wrapper of a fresh optimizer `name`."""
  return _model(family), family.own(
      OPTIMIZERS[name](family.optimizers), initial_scale=INITIAL_SCALE,
      dynamic_growth_steps=GROWTH_STEPS)


def _step(family, model, optimizer):
  """One training step as the family's own class takes it (both classes)."""
  return keras_families.keras_step(family.own_protocols[0], model, optimizer)


def _state(optimizer):
  """`(scale, good steps, iterations)` of either class, of any family."""
  if hasattr(optimizer, "step_counter"):  # Keras 3's names.
    scale, good_steps = optimizer.dynamic_scale, optimizer.step_counter
  else:
    scale, good_steps = optimizer.loss_scale, optimizer.dynamic_counter
  return (float(tf.convert_to_tensor(scale)),
          int(tf.convert_to_tensor(good_steps)),
          int(tf.convert_to_tensor(optimizer.iterations)))


def _values(variables):
  return [np.asarray(v) for v in variables]


class _SwitchTestCase(tf.test.TestCase, parameterized.TestCase):
  """Compares a run that switched wrappers with its twin."""

  def _assert_same_run(self, model, optimizer, twin_model, twin):
    self.assertEqual(_state(optimizer), _state(twin))
    for a, b in zip(model.get_weights(), twin_model.get_weights()):
      self.assertAllEqual(a, b)
    ours = keras_families.optimizer_variables(optimizer.inner_optimizer)
    theirs = keras_families.optimizer_variables(twin.inner_optimizer)
    self.assertLen(ours, len(theirs))
    for a, b in zip(_values(ours), _values(theirs)):
      self.assertAllEqual(a, b)


class ToNativeTest(_SwitchTestCase):

  @parameterized.named_parameters(*CASES)
  def test_carries_the_state_and_trains_on_as_mplso(self, family, name):
    model, opt = _mplso(family, name)
    twin_model, twin = _mplso(family, name)
    step, twin_step = _step(family, model, opt), _step(family, twin_model,
                                                       twin)
    for i in range(BEFORE):
      step(_batch(i))
      twin_step(_batch(i))
    inner = opt.inner_optimizer
    before = _values(keras_families.optimizer_variables(inner))
    self.assertEqual(_state(opt), AT_SWITCH)

    native = mplso.keras.to_native(opt)

    self.assertIsInstance(native, family.own)
    self.assertNotIsInstance(native, family.wrapper)
    self.assertIs(native.inner_optimizer, inner)
    self.assertEqual(native.dynamic_growth_steps, GROWTH_STEPS)
    self.assertEqual(native.initial_scale, INITIAL_SCALE)
    self.assertEqual(_state(native), AT_SWITCH)
    for a, b in zip(before, _values(keras_families.optimizer_variables(inner))):
      self.assertAllEqual(a, b)
    # Every slot the optimizer has, unchanged.
    self.assertLen(keras_families.optimizer_variables(inner), len(before))
    self._assert_same_run(model, native, twin_model, twin)

    step = _step(family, model, native)
    for i in range(BEFORE, BEFORE + AFTER):
      step(_batch(i))
      twin_step(_batch(i))
    self._assert_same_run(model, native, twin_model, twin)
    self.assertGreater(_state(native)[0], AT_SWITCH[0])  # It grew.

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_before_the_first_step(self, family):
    model, opt = _mplso(family, "adam")
    twin_model, twin = _mplso(family, "adam")
    native = mplso.keras.to_native(opt)
    if family is KERAS_3:  # Its first step builds it.
      self.assertFalse(native.built)
      self.assertEqual(native.initial_scale, INITIAL_SCALE)
    else:
      self.assertEqual(_state(native), (INITIAL_SCALE, 0, 0))
    step, twin_step = _step(family, model, native), _step(family, twin_model,
                                                          twin)
    for i in range(AFTER):
      if i != POISONED:
        step(_batch(i))
        twin_step(_batch(i))
    self._assert_same_run(model, native, twin_model, twin)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_changed_state_before_the_first_step(self, family):
    # Restored from a checkpoint before any step, say.
    model, opt = _mplso(family, "momentum")
    twin_model, twin = _mplso(family, "momentum")
    for o in (opt, twin):
      o._loss_scale._current_loss_scale.assign(64.)
      o.dynamic_counter.assign(1)
    if family is KERAS_3:
      # Keras 3's class makes its counter when it is built, at 0.
      with self.assertRaisesRegex(ValueError, "good-step count is 1.*not "
                                  r"built.*optimizer\.build"):
        mplso.keras.to_native(opt)
      self.assertEqual(_state(opt), (64., 1, 0))  # Left as it was.
      opt.build(model.trainable_variables)
    native = mplso.keras.to_native(opt)
    self.assertEqual(_state(native), (64., 1, 0))
    step, twin_step = _step(family, model, native), _step(family, twin_model,
                                                          twin)
    for i in range(AFTER):
      if i != POISONED:
        step(_batch(i))
        twin_step(_batch(i))
    self._assert_same_run(model, native, twin_model, twin)

  def test_keras_3_scale_before_the_first_step_is_its_initial_scale(self):
    _, opt = _mplso(KERAS_3, "sgd")
    opt.dynamic_scale.assign(64.)
    native = mplso.keras.to_native(opt)
    self.assertFalse(native.built)
    self.assertEqual(native.initial_scale, 64.)
    self.assertEqual(native.dynamic_growth_steps, GROWTH_STEPS)

  @parameterized.named_parameters(*NAMED_TF_KERAS)
  def test_checkpoint_holds_the_native_scale(self, family):
    model, opt = _mplso(family, "momentum")
    step = _step(family, model, opt)
    for i in range(BEFORE):
      step(_batch(i))
    native = mplso.keras.to_native(opt)
    step = _step(family, model, native)
    for i in range(BEFORE, BEFORE + 2):  # Grows: mplso's own scale did not.
      step(_batch(i))
    self.assertEqual(float(native.loss_scale), INITIAL_SCALE)
    path = tf.train.Checkpoint(model=model, optimizer=native).save(
        os.path.join(self.create_tempdir().full_path, "ckpt"))

    restored_model, restored = _native(family, "momentum")
    restored_step = _step(family, restored_model, restored)
    restored_step(_batch(BEFORE))  # Creates the slots to restore into.
    tf.train.Checkpoint(model=restored_model, optimizer=restored).restore(
        path).assert_consumed()
    self.assertEqual(_state(restored), _state(native))

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_round_trip(self, family):
    model, opt = _mplso(family, "adam")
    twin_model, twin = _mplso(family, "adam")
    step, twin_step = _step(family, model, opt), _step(family, twin_model,
                                                       twin)
    for i in range(BEFORE):
      step(_batch(i))
      twin_step(_batch(i))
    back = mplso.keras.from_native(mplso.keras.to_native(opt))
    self.assertIsInstance(back, family.wrapper)
    self.assertEqual(_state(back), AT_SWITCH)
    # Again the other way, as after a second switch.
    back = mplso.keras.from_native(mplso.keras.to_native(back))
    step = _step(family, model, back)
    for i in range(BEFORE, BEFORE + AFTER):  # A skip too: both are mplso's.
      batch = _batch(i if i != BEFORE + 3 else POISONED)
      step(batch)
      twin_step(batch)
    self._assert_same_run(model, back, twin_model, twin)

  @parameterized.named_parameters(*NAMED_TF_KERAS)
  def test_fixed_scale_on_tf_keras(self, family):
    opt = mplso.keras.LossScaleOptimizer(family.optimizers.SGD(0.1), 128)
    native = mplso.keras.to_native(opt)
    self.assertFalse(native.dynamic)
    self.assertEqual(float(native.loss_scale), 128.)
    back = mplso.keras.from_native(native)
    self.assertFalse(back.dynamic)
    self.assertEqual(float(back.loss_scale), 128.)


class FromNativeTest(_SwitchTestCase):

  @parameterized.named_parameters(*CASES)
  def test_carries_the_state_and_trains_on_as_keras(self, family, name):
    model, native = _native(family, name)
    twin_model, twin = _native(family, name)
    step, twin_step = _step(family, model, native), _step(family, twin_model,
                                                          twin)
    for i in range(BEFORE):
      step(_batch(i))
      twin_step(_batch(i))
    inner = native.inner_optimizer
    before = _values(keras_families.optimizer_variables(inner))
    # Keras 3's class does not count the skipped step.
    at_switch = AT_SWITCH[:2] + (
        BEFORE - (not family.own_counts_skipped_steps),)
    self.assertEqual(_state(native), at_switch)

    opt = mplso.keras.from_native(native)

    self.assertIsInstance(opt, mplso.keras.LossScaleOptimizer)
    self.assertIsInstance(opt, family.wrapper)
    self.assertIs(opt.inner_optimizer, inner)
    self.assertEqual(opt.dynamic_growth_steps, GROWTH_STEPS)
    self.assertEqual(opt.initial_scale, INITIAL_SCALE)
    self.assertEqual(_state(opt), at_switch)
    self.assertLen(keras_families.optimizer_variables(inner), len(before))
    for a, b in zip(before, _values(keras_families.optimizer_variables(inner))):
      self.assertAllEqual(a, b)

    step = _step(family, model, opt)
    for i in range(BEFORE, BEFORE + AFTER):
      step(_batch(i))
      twin_step(_batch(i))
    self._assert_same_run(model, opt, twin_model, twin)
    self.assertGreater(_state(opt)[0], AT_SWITCH[0])

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_before_the_first_step(self, family):
    model, native = _native(family, "rmsprop")
    twin_model, twin = _native(family, "rmsprop")
    opt = mplso.keras.from_native(native)
    self.assertEqual(_state(opt)[:2], (INITIAL_SCALE, 0))
    step, twin_step = _step(family, model, opt), _step(family, twin_model,
                                                       twin)
    for i in range(AFTER):
      if i != POISONED:
        step(_batch(i))
        twin_step(_batch(i))
    self._assert_same_run(model, opt, twin_model, twin)

  @parameterized.named_parameters(*NAMED_TF_KERAS)
  def test_checkpoint_holds_the_mplso_scale(self, family):
    model, native = _native(family, "sgd")
    step = _step(family, model, native)
    for i in range(BEFORE):
      step(_batch(i))
    opt = mplso.keras.from_native(native)
    inner = opt.inner_optimizer
    self.assertIs(inner._lookup_dependency("loss_scale"), opt._loss_scale)
    self.assertIsNone(inner._lookup_dependency("base_optimizer"))
    step = _step(family, model, opt)
    step(_batch(BEFORE))  # Grows: Keras's own scale did not.
    path = tf.train.Checkpoint(optimizer=opt).save(
        os.path.join(self.create_tempdir().full_path, "ckpt"))
    self.assertEqual(tf.train.load_variable(
        path, "optimizer/loss_scale/current_loss_scale/.ATTRIBUTES/"
        "VARIABLE_VALUE"), INITIAL_SCALE)

  def test_keras_3_scale_below_one_is_refused(self):
    var = tf.Variable(1.)
    native = KERAS_3.own(KERAS_3.optimizers.SGD(0.1), initial_scale=2.)
    for _ in range(3):
      native.apply_gradients([(tf.constant(NAN), var)])
    self.assertEqual(float(native.dynamic_scale), 0.25)
    with self.assertRaisesRegex(ValueError, r"0\.25, below 1.*>= 1"):
      mplso.keras.from_native(native)


class RefusedTest(tf.test.TestCase, parameterized.TestCase):
  """What Keras's classes cannot hold is refused, and nothing changes."""

  def _assert_refused(self, opt, pattern):
    inner = opt.inner_optimizer
    links = list(inner._self_unconditional_checkpoint_dependencies)
    with self.assertRaisesRegex(ValueError, pattern):
      mplso.keras.to_native(opt)
    self.assertEqual(list(inner._self_unconditional_checkpoint_dependencies),
                     links)
    var = tf.Variable(1.)
    opt.minimize(lambda: var ** 2, [var])  # Still mplso's, still working.
    self.assertEqual(int(opt.iterations), 1)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_multiplier_other_than_2(self, family):
    opt = mplso.keras.LossScaleOptimizer(
        family.optimizers.SGD(0.1), mplso.DynamicLossScale(8., 3, 3))
    self._assert_refused(opt, r"doubles and halves.*multiplier=3.*Accepted: "
                         r"multiplier=2")

  @parameterized.named_parameters(
      ("hysteresis", {"hysteresis": 2}, "hysteresis=2"),
      ("min_loss_scale", {"min_loss_scale": 4}, "min_loss_scale=4"),
      ("max_loss_scale", {"max_loss_scale": 2.**20}, "max_loss_scale="),
      ("stall_limit", {"stall_limit": 5}, "stall_limit=5"))
  def test_mplso_extensions(self, kwargs, pattern):
    for family in FAMILIES:
      _, opt = _mplso(family, "sgd", **kwargs)
      self._assert_refused(opt, f"has no {pattern.split('=')[0]}.*{pattern}")

  def test_fixed_scale_on_keras_3(self):
    opt = mplso.keras.LossScaleOptimizer(KERAS_3.optimizers.SGD(0.1), 128)
    self._assert_refused(opt, r"no fixed scale.*FixedLossScale\(128.*"
                         "Accepted on Keras 3: a dynamic scale")

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_custom_loss_scale(self, family):

    class Doubling(mplso.DynamicLossScale):
      pass

    opt = mplso.keras.LossScaleOptimizer(family.optimizers.SGD(0.1),
                                         Doubling(8.))
    self._assert_refused(opt, "custom loss scale.*Doubling.*Accepted: "
                         "mplso.DynamicLossScale")

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_what_is_not_a_loss_scale_optimizer(self, family):
    bare = family.optimizers.SGD(0.1)
    for value in (bare, "dynamic", None):
      with self.assertRaisesRegex(
          TypeError, "to_native.. takes an mplso.keras.LossScaleOptimizer.*"
          "Received: .* of type .*Accepted: an mplso.keras"):
        mplso.keras.to_native(value)
      with self.assertRaisesRegex(
          TypeError, "from_native.. takes Keras's own LossScaleOptimizer.*"
          "Received: .* of type .*Accepted: Keras's own"):
        mplso.keras.from_native(value)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_the_wrong_direction(self, family):
    _, opt = _mplso(family, "sgd")
    with self.assertRaisesRegex(TypeError, "It is mplso's already"):
      mplso.keras.from_native(opt)
    _, native = _native(family, "sgd")
    with self.assertRaisesRegex(TypeError, "It is Keras's own"):
      mplso.keras.to_native(native)

  def test_in_a_function(self):
    _, opt = _mplso(TF_KERAS[0], "sgd")

    @tf.function
    def convert():
      mplso.keras.to_native(opt)

    with self.assertRaisesRegex(RuntimeError, "must run eagerly"):
      convert()

  def test_in_a_replica_context(self):
    strategy = strategies.mirrored(1)
    with strategy.scope():
      _, opt = _mplso(TF_KERAS[0], "sgd")
    with self.assertRaisesRegex(RuntimeError, "replica context"):
      strategy.run(lambda: mplso.keras.to_native(opt))


class DistributionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_made_under_the_strategy_of_the_state(self, family):
    strategy = strategies.mirrored(1)
    with strategy.scope():
      var = tf.Variable([1., 1.])
      opt = family.wrapper(family.optimizers.SGD(0.5, momentum=0.5),
                           mplso.DynamicLossScale(4., 2))
      twin_var = tf.Variable([1., 1.])
      twin = family.wrapper(family.optimizers.SGD(0.5, momentum=0.5),
                            mplso.DynamicLossScale(4., 2))

    def step(optimizer, variable, grad):
      # The gradient of the loss is `grad`, scaled and unscaled as the
      # family's own class takes it (Keras 3's unscales in apply_gradients).

      def replica_step(grad):
        with tf.GradientTape() as tape:
          loss = tf.reduce_sum(variable * grad)
          if family is KERAS_3:
            loss = optimizer.scale_loss(loss)
          else:
            loss = optimizer.get_scaled_loss(loss)
        grads = tape.gradient(loss, [variable])
        if family is not KERAS_3:
          grads = optimizer.get_unscaled_gradients(grads)
        optimizer.apply_gradients(zip(grads, [variable]))

      strategy.run(replica_step, args=(grad,))

    for grad in ([0.5, 0.25], [NAN, 0.25], [0.5, 0.5]):
      step(opt, var, tf.constant(grad))
      step(twin, twin_var, tf.constant(grad))
    with self.assertRaisesRegex(ValueError, "scope of a OneDeviceStrategy.*"
                                "made under another MirroredStrategy"):
      with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        mplso.keras.to_native(opt)

    native = mplso.keras.to_native(opt)  # Outside the scope: enters it.

    if family is KERAS_3:
      made = [native.dynamic_scale._value, native.step_counter._value]
    else:
      made = [native._loss_scale.current_loss_scale, native.dynamic_counter]
    for variable in made:
      self.assertIs(variable._distribute_strategy, strategy)
    self.assertEqual(_state(native), (2., 1, 3))
    for _ in range(3):
      step(native, var, tf.constant([0.5, 0.25]))
      step(twin, twin_var, tf.constant([0.5, 0.25]))
    self.assertAllEqual(var, twin_var)
    self.assertEqual(_state(native), _state(twin))

    with strategy.scope():  # In the scope too.
      back = mplso.keras.from_native(native)
    self.assertIs(back.dynamic_counter._distribute_strategy, strategy)
    self.assertEqual(_state(back), _state(twin))

  def test_state_made_outside_any_strategy(self):
    _, opt = _mplso(TF_KERAS[0], "sgd")
    with self.assertRaisesRegex(ValueError, "outside any tf.distribute"):
      with strategies.mirrored(1).scope():
        mplso.keras.to_native(opt)


if __name__ == "__main__":
  absltest.main()
