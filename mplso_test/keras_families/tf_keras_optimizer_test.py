"""Tests of the tf_keras new-optimizer family of mplso.keras's wrapper."""

import json
import os
import subprocess
import sys
import textwrap

from absl.testing import absltest
from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf
import tf_keras

import mplso
from mplso._src.keras import tf_keras_optimizer
import mplso.keras

LSO = tf_keras_optimizer.LossScaleOptimizer
# tf_keras's own wrapper: gives a LossScaleOptimizerV3 for a new optimizer.
TfKerasLSO = tf_keras.mixed_precision.LossScaleOptimizer

NAN, INF = float("nan"), float("inf")

# Steps whose batch holds a non-finite input, and which. With
# increment_period=3 the scale grows twice and shrinks three times.
POISON = {2: NAN, 3: INF, 7: -INF}
STEPS = 12


def _batch(step, poison=POISON):
  rng = np.random.default_rng(100 + step)
  x = rng.normal(size=(8, 4)).astype("float32")
  ids = rng.integers(0, 5, size=(8, 2)).astype("int32")
  y = rng.normal(size=(8, 1)).astype("float32")
  if step in poison:
    x[1, 2] = poison[step]
  return (x, ids), y


def _model(seed=0):
  """A dense and an embedding path, so gradients are dense and sparse."""
  tf_keras.utils.set_random_seed(seed)
  x = tf_keras.Input((4,))
  ids = tf_keras.Input((2,), dtype="int32")
  emb = tf_keras.layers.Flatten()(tf_keras.layers.Embedding(5, 3)(ids))
  hidden = tf_keras.layers.Dense(6, activation="tanh")(
      tf_keras.layers.Concatenate()([x, emb]))
  out = tf_keras.layers.Dense(1, dtype="float32")(hidden)
  return tf_keras.Model([x, ids], out)


def _adam():
  return tf_keras.optimizers.Adam(0.01)


def _dynamic(initial=2.**6, period=3):
  return mplso.DynamicLossScale(initial_loss_scale=initial,
                                increment_period=period)


def _theirs_dynamic(initial=2.**6, period=3):
  return TfKerasLSO(_adam(), initial_scale=initial,
                    dynamic_growth_steps=period)


def _loss(model, batch):
  (x, ids), y = batch
  return tf.reduce_mean(tf.square(model([x, ids]) - y))


def _tape_step(model, opt):
  """TF 2.3's custom-loop protocol, in a tf.function."""

  @tf.function
  def step(x, ids, y):
    with tf.GradientTape() as tape:
      scaled_loss = opt.get_scaled_loss(_loss(model, ((x, ids), y)))
    grads = opt.get_unscaled_gradients(
        tape.gradient(scaled_loss, model.trainable_variables))
    opt.apply_gradients(zip(grads, model.trainable_variables))

  return lambda batch: step(batch[0][0], batch[0][1], batch[1])


def _fit_step(model, opt):
  model.compile(optimizer=opt, loss="mse")
  return lambda batch: model.train_on_batch(*batch)


def _minimize_step(model, opt):
  return lambda batch: opt.minimize(lambda: _loss(model, batch),
                                    model.trainable_variables)


STEP_BUILDERS = {"fit": _fit_step, "tape_function": _tape_step,
                 "minimize_eager": _minimize_step}


def _use_mixed_float16(test):
  tf_keras.mixed_precision.set_global_policy("mixed_float16")
  test.addCleanup(tf_keras.mixed_precision.set_global_policy, "float32")


def _values(variables):
  return [np.asarray(v) for v in variables]


def _assert_same_values(test, got, want):
  """Asserts that two lists of variables or arrays hold equal values."""
  test.assertEqual(len(got), len(want))
  for g, w in zip(got, want):
    test.assertAllEqual(g, w)


def _state(opt):
  """(scale, good steps, iterations) of ours or tf_keras's wrapper."""
  return (float(opt.loss_scale()) if isinstance(opt, LSO) else
          float(opt.loss_scale), int(opt.dynamic_counter),
          int(opt.iterations))


def _trained(opt, steps=6, poison=POISON, seed=0):
  """A model trained `steps` steps by `opt` with `fit`; returns it."""
  model = _model(seed)
  step = _fit_step(model, opt)
  for i in range(steps):
    step(_batch(i, poison))
  return model


class ParityTest(tf.test.TestCase, parameterized.TestCase):
  """Ours and tf_keras's wrapper, side by side on the same steps."""

  @parameterized.named_parameters(
      ("fit", "fit", False), ("tape_function", "tape_function", False),
      ("minimize_eager", "minimize_eager", False),
      ("fit_mixed_float16", "fit", True))
  def test_same_weights_scales_and_counters_as_tf_keras(self, protocol,
                                                         mixed):
    if mixed:
      _use_mixed_float16(self)
    ours, theirs = LSO(_adam(), _dynamic()), _theirs_dynamic()
    self.assertEqual(type(theirs).__name__, "LossScaleOptimizerV3")
    our_model, their_model = _model(), _model()
    our_step = STEP_BUILDERS[protocol](our_model, ours)
    their_step = STEP_BUILDERS[protocol](their_model, theirs)
    scales = []
    for i in range(STEPS):
      before = _values(our_model.weights)
      our_step(_batch(i))
      their_step(_batch(i))
      self.assertEqual(_state(ours), _state(theirs), f"step {i}")
      for mine, other in zip(our_model.weights, their_model.weights):
        self.assertAllEqual(mine, other, msg=f"step {i}: {mine.name}")
      moved = any(not np.array_equal(b, a)
                  for b, a in zip(before, _values(our_model.weights)))
      self.assertEqual(moved, i not in POISON, f"step {i}")
      scales.append(_state(ours)[0])
    # tf_keras's wrapper also advances `iterations` on a skipped step, as
    # TF 2.3 documents; both count every step.
    self.assertEqual(int(ours.iterations), STEPS)
    if not mixed:
      self.assertEqual(
          scales, [64, 64, 32, 16, 16, 16, 32, 16, 16, 16, 32, 32])

  def test_fixed_scale_skips_non_finite_steps_which_tf_keras_applies(self):
    ours = LSO(_adam(), 8)
    theirs = TfKerasLSO(_adam(), dynamic=False, initial_scale=8)
    our_model, their_model = _model(), _model()
    our_step = _fit_step(our_model, ours)
    their_step = _fit_step(their_model, theirs)
    for i in range(2):
      our_step(_batch(i))
      their_step(_batch(i))
      for mine, other in zip(our_model.weights, their_model.weights):
        self.assertAllEqual(mine, other)
    before = _values(our_model.weights)
    our_step(_batch(2))
    their_step(_batch(2))
    # Deliberate deviation: under a fixed scale tf_keras applies the NaN
    # gradients and ruins the weights; ours skips the step, as it does under
    # a dynamic scale. Both count the step.
    for old, new in zip(before, our_model.weights):
      self.assertAllEqual(old, new)
    self.assertTrue(any(np.isnan(w).any() for w in their_model.get_weights()))
    self.assertEqual(int(ours.iterations), 3)
    self.assertEqual(int(theirs.iterations), 3)
    our_step(_batch(3, poison={}))
    self.assertTrue(all(np.isfinite(w).all() for w in our_model.get_weights()))
    self.assertEqual(float(ours.loss_scale()), 8.)


class CompileFitTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(("graph", False), ("jit_compile", True))
  def test_fit_under_mixed_float16_keeps_our_wrapper(self, jit_compile):
    _use_mixed_float16(self)
    model = _model()
    opt = mplso.keras.LossScaleOptimizer(_adam(), "dynamic")
    model.compile(optimizer=opt, loss="mse", jit_compile=jit_compile)
    self.assertIs(model.optimizer, opt)
    batches = [_batch(i, poison={}) for i in range(4)]
    x = tuple(np.concatenate([b[0][k] for b in batches]) for k in range(2))
    y = np.concatenate([b[1] for b in batches])
    history = model.fit(x, y, batch_size=8, epochs=4, verbose=0)
    losses = history.history["loss"]
    self.assertTrue(np.all(np.isfinite(losses)), losses)
    self.assertLess(losses[-1], losses[0])
    self.assertEqual(int(opt.iterations), 16)
    # The default scale, 2**15, overflows float16 at first: the scale falls
    # on the skipped steps, and the run still converges.
    self.assertLessEqual(float(opt.loss_scale()), 2.**15)


class CustomLoopTest(tf.test.TestCase, parameterized.TestCase):

  def test_unscaled_gradients_equal_plain_gradients(self):
    model = _model()
    opt = LSO(_adam(), 2.**10)
    batch = _batch(0)

    @tf.function
    def grads():
      with tf.GradientTape(persistent=True) as tape:
        loss = _loss(model, batch)
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

  @parameterized.named_parameters(("eager", False), ("function", True))
  def test_minimize_with_callable_loss(self, in_function):
    var = tf.Variable([1., -2.])
    opt = LSO(tf_keras.optimizers.SGD(0.25), _dynamic(initial=8., period=1))
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

  def test_compute_gradients_are_unscaled(self):
    var = tf.Variable(3.)
    opt = LSO(_adam(), 2.**20)
    ((grad, got_var),) = opt.compute_gradients(lambda: var * var, [var])
    self.assertIs(got_var, var)
    self.assertAllClose(grad, 6.)

  @parameterized.named_parameters(
      ("experimental_aggregate_gradients",
       {"experimental_aggregate_gradients": False}),
      ("skip_gradients_aggregation", {"skip_gradients_aggregation": True}),
      ("name", {"name": "step"}))
  def test_apply_gradients_arguments(self, kwargs):
    var = tf.Variable(1.)
    opt = LSO(tf_keras.optimizers.SGD(1.), 4)
    result = opt.apply_gradients([(tf.constant(0.5), var)], **kwargs)
    self.assertAllClose(var, 0.5)
    self.assertIs(result, opt.iterations)
    opt.apply_gradients([(tf.constant(NAN), var)], **kwargs)
    self.assertAllClose(var, 0.5)
    self.assertEqual(int(opt.iterations), 2)

  def test_none_gradient_is_left_out(self):
    used, unused = tf.Variable(1.), tf.Variable(1.)
    opt = LSO(tf_keras.optimizers.SGD(1.), "dynamic")
    opt.apply_gradients([(tf.constant(0.5), used), (None, unused)])
    self.assertAllClose(used, 0.5)
    self.assertAllClose(unused, 1.)

  def test_one_device_strategy(self):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
      var = tf.Variable([1., 1.])
      opt = LSO(tf_keras.optimizers.SGD(1.), _dynamic(initial=4.))

    @tf.function
    def step(grad):
      strategy.run(lambda g: opt.apply_gradients([(g, var)]), args=(grad,))

    step(tf.constant([0.5, 0.25]))
    step(tf.constant([NAN, 0.25]))
    self.assertAllClose(var, [0.5, 0.75])
    self.assertEqual(float(opt.loss_scale()), 2.)
    self.assertEqual(int(opt.iterations), 2)


class SaveLoadTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(("keras", ".keras"), ("h5", ".h5"),
                                  ("saved_model", ""))
  def test_load_model_continues_where_training_stopped(self, suffix):
    opt = LSO(_adam(), _dynamic(initial=16., period=2))
    model = _trained(opt, steps=5, poison={3: NAN})
    self.assertEqual(_state(opt), (16., 1, 5))
    path = os.path.join(self.create_tempdir().full_path, "model" + suffix)
    model.save(path, **({"save_format": "tf"} if not suffix else {}))
    # No custom_objects: the class is registered.
    loaded = tf_keras.models.load_model(path)
    if not suffix:
      # tf_keras's SavedModel loader compiles a fresh optimizer and restores
      # no optimizer's state, its own included; the state is in the
      # SavedModel's checkpoint, under the usual layout.
      tf.train.Checkpoint(root=loaded).restore(
          os.path.join(path, "variables", "variables")).expect_partial()
    self.assertIsInstance(loaded.optimizer, LSO)
    self.assertEqual(loaded.optimizer.get_config(), opt.get_config())
    next_batch = _batch(5, poison={})
    model.train_on_batch(*next_batch)
    loaded.train_on_batch(*next_batch)
    for mine, other in zip(model.get_weights(), loaded.get_weights()):
      self.assertAllEqual(mine, other)
    self.assertEqual(_state(loaded.optimizer), _state(opt))
    self.assertEqual(_state(opt), (32., 0, 6))

  @parameterized.named_parameters(
      ("bare", _adam), ("tf_keras", lambda: _theirs_dynamic(16., 2)))
  def test_keras_file_without_loss_scale_restores_the_wrapped_optimizer(
      self, make):
    source = make()
    model = _trained(source, steps=3, poison={})
    path = os.path.join(self.create_tempdir().full_path, "model.keras")
    model.save(path)
    target = _model(seed=1)
    ours = LSO(_adam(), _dynamic(initial=16., period=2))
    target.compile(optimizer=ours, loss="mse")
    ours.build(target.trainable_variables)
    target.load_weights(path)
    source_inner = getattr(source, "inner_optimizer", source)
    _assert_same_values(self, ours.inner_optimizer.variables,
                        source_inner.variables)
    self.assertEqual(int(ours.iterations), 3)
    self.assertEqual(_state(ours)[:2], (16., 0))  # Not in the file.


class CheckpointTest(tf.test.TestCase, parameterized.TestCase):

  def _save(self, model, opt):
    prefix = os.path.join(self.create_tempdir().full_path, "ckpt")
    return tf.train.Checkpoint(model=model, optimizer=opt).save(prefix)

  def _restore(self, path, opt, seed=1):
    model = _model(seed)
    tf.train.Checkpoint(model=model, optimizer=opt).restore(path)
    opt.build(model.trainable_variables)  # Slots restore when created.
    return model

  def test_round_trip(self):
    opt = LSO(_adam(), _dynamic())
    model = _trained(opt)
    path = self._save(model, opt)
    names = {name for name, _ in tf.train.list_variables(path)}
    self.assertIn(
        "optimizer/loss_scale/current_loss_scale/.ATTRIBUTES/VARIABLE_VALUE",
        names)
    self.assertIn("optimizer/loss_scale/good_steps/.ATTRIBUTES/VARIABLE_VALUE",
                  names)
    restored = LSO(_adam(), _dynamic())
    restored_model = self._restore(path, restored)
    self.assertEqual(_state(restored), _state(opt))
    self.assertEqual(_state(opt), (16., 2, 6))
    _assert_same_values(self, restored.variables, opt.variables)
    for var, other in zip(model.trainable_variables,
                          restored_model.trainable_variables):
      self.assertAllEqual(opt.get_slot(var, "m"), restored.get_slot(other, "m"))

  @parameterized.named_parameters(("ours_to_tf_keras", True),
                                  ("tf_keras_to_ours", False))
  def test_interchangeable_with_tf_keras_wrapper(self, ours_first):
    ours, theirs = LSO(_adam(), _dynamic()), _theirs_dynamic()
    source, target = (ours, theirs) if ours_first else (theirs, ours)
    model = _trained(source)
    self._restore(self._save(model, source), target)
    self.assertEqual(_state(target), _state(source))
    self.assertEqual(_state(source), (16., 2, 6))
    _assert_same_values(self, target.inner_optimizer.variables,
                        source.inner_optimizer.variables)

  def test_bare_optimizer_checkpoint_restores_the_wrapped_optimizer(self):
    adam = _adam()
    model = _trained(adam, poison={})
    opt = LSO(_adam(), _dynamic())
    self._restore(self._save(model, adam), opt)
    _assert_same_values(self, opt.inner_optimizer.variables, adam.variables)
    self.assertEqual(_state(opt), (64., 0, 6))

  def test_optimizer_checkpointed_before_it_was_wrapped(self):
    # tf_keras caches an optimizer's checkpoint children on first use.
    adam = _adam()
    model = _trained(adam, steps=1, poison={})
    self._save(model, adam)
    opt = LSO(adam, _dynamic())
    names = [name for name, _ in tf.train.list_variables(
        self._save(model, opt))]
    self.assertIn(
        "optimizer/loss_scale/current_loss_scale/.ATTRIBUTES/VARIABLE_VALUE",
        names)

  def test_saved_model_of_a_module_holding_the_optimizer(self):
    # The trap: forwarding get_slot_names while the wrapped optimizer's
    # state is a dependency too fails with "A slot variable was re-used as
    # a dependency" (TF's checkpointer looks for get_slot_names in dir()).
    opt = LSO(_adam(), _dynamic())
    model = _trained(opt, steps=2, poison={})
    self.assertNotIn("get_slot_names", dir(opt))
    self.assertEqual(opt.get_slot_names(), ["m", "v"])
    module = tf.Module()
    module.optimizer = opt
    module.variables_ = model.trainable_variables
    path = self.create_tempdir().full_path
    tf.saved_model.save(module, path)
    loaded = tf.saved_model.load(path)
    self.assertEqual(int(loaded.optimizer._iterations), 2)  # pylint: disable=protected-access
    self.assertEqual(
        float(loaded.optimizer.loss_scale.current_loss_scale), 64.)


class PassthroughTest(tf.test.TestCase, parameterized.TestCase):

  def test_hyperparameters_read_and_set_on_the_wrapped_optimizer(self):
    inner = tf_keras.optimizers.Adam(0.01, beta_1=0.8, clipnorm=2.)
    opt = LSO(inner, "dynamic")
    self.assertEqual(opt.beta_1, 0.8)
    self.assertEqual(opt.clipnorm, 2.)
    self.assertEqual(opt.name, inner.name)
    opt.beta_1 = 0.7
    self.assertEqual(inner.beta_1, 0.7)
    self.assertNotIn("beta_1", vars(opt))
    with self.assertRaises(AttributeError):
      _ = opt.no_such_hyperparameter

  def test_learning_rate_and_lr(self):
    inner = _adam()
    opt = LSO(inner, "dynamic")
    self.assertAllClose(opt.learning_rate, 0.01)
    self.assertAllClose(opt.lr, 0.01)
    opt.learning_rate = 0.5
    self.assertAllClose(inner.learning_rate, 0.5)
    opt.lr = 0.25
    self.assertAllClose(inner.learning_rate, 0.25)
    self.assertAllClose(opt.learning_rate, 0.25)

  def test_learning_rate_schedule(self):
    schedule = tf_keras.optimizers.schedules.ExponentialDecay(
        1., decay_steps=1, decay_rate=0.5)
    var = tf.Variable(0.)
    opt = LSO(tf_keras.optimizers.SGD(schedule), "dynamic")
    for _ in range(3):
      opt.apply_gradients([(tf.constant(-1.), var)])
    self.assertAllClose(var, 1. + 0.5 + 0.25)
    self.assertAllClose(opt.learning_rate, 0.25)
    opt.learning_rate = tf_keras.optimizers.schedules.PiecewiseConstantDecay(
        [100], [3., 1.])
    opt.apply_gradients([(tf.constant(-1.), var)])
    self.assertAllClose(var, 4.75)

  def test_iterations(self):
    opt = LSO(_adam(), "dynamic")
    self.assertIs(opt.iterations, opt.inner_optimizer.iterations)
    fresh = LSO(_adam(), "dynamic")
    counter = tf.Variable(7, dtype=tf.int64)
    fresh.iterations = counter
    self.assertIs(fresh.inner_optimizer.iterations, counter)

  def test_slots_variables_and_weights(self):
    opt = LSO(_adam(), _dynamic())
    model = _trained(opt, steps=2, poison={})
    kernel = model.trainable_variables[0]
    inner = opt.inner_optimizer
    self.assertEqual(opt.get_slot_names(), ["m", "v"])
    index = inner._index_dict[inner._var_key(kernel)]  # pylint: disable=protected-access
    self.assertIs(opt.get_slot(kernel, "m"), inner._momentums[index])  # pylint: disable=protected-access
    self.assertIs(opt.get_slot(kernel, "v"), inner._velocities[index])  # pylint: disable=protected-access
    with self.assertRaisesRegex(KeyError, "no slot 'vhat'.*'m', 'v'"):
      opt.get_slot(kernel, "vhat")
    variables = opt.variables
    self.assertEqual(list(variables()), list(variables))
    self.assertEqual(list(variables), list(inner.variables) +
                     list(opt.loss_scale.variables))
    # The family has no get_weights; ours adds it, as for the other families.
    self.assertEqual([w.tolist() for w in opt.get_weights()],
                     [v.numpy().tolist() for v in opt.variables])

    values = [np.full(v.shape, 3, v.dtype.as_numpy_dtype) for v in variables]
    opt.set_weights(values)
    self.assertEqual(float(opt.loss_scale()), 3.)
    self.assertAllEqual(opt.get_slot(kernel, "m"), values[1])
    opt.set_weights([v * 2 for v in values[:len(inner.variables)]])
    self.assertEqual(float(opt.loss_scale()), 3.)  # Left as it was.
    self.assertEqual(int(opt.iterations), 6)

  def test_slots_found_when_the_first_step_runs_in_a_name_scope(self):
    var = tf.Variable([1.], name="w")
    opt = LSO(_adam(), "dynamic")
    with tf.name_scope("outer"):
      opt.apply_gradients([(tf.constant([1.]), var)])
    self.assertEqual(opt.get_slot_names(), ["m", "v"])
    self.assertEqual(opt.get_slot(var, "m").name, "m/w:0")

  def test_add_slot(self):
    opt = LSO(_adam(), "dynamic")
    var = tf.Variable([1., 2.], name="my_var")
    slot = opt.add_slot(var, "extra", initializer="ones")
    self.assertAllEqual(slot, [1., 1.])
    self.assertIs(opt.add_slot(var, "extra"), slot)
    self.assertIs(opt.get_slot(var, "extra"), slot)
    self.assertTrue(any(v is slot for v in opt.inner_optimizer.variables))
    self.assertIn("extra", opt.get_slot_names())
    zeros = opt.add_slot(var, "zeros")
    self.assertAllEqual(zeros, [0., 0.])

  def test_instances(self):
    opt = mplso.keras.LossScaleOptimizer(_adam(), "dynamic")
    self.assertIs(type(opt), LSO)
    self.assertIsInstance(opt, mplso.keras.LossScaleOptimizer)
    self.assertIsInstance(opt, tf_keras.optimizers.Optimizer)
    self.assertIsInstance(opt, tf_keras.mixed_precision.LossScaleOptimizer)


class ConfigTest(tf.test.TestCase, parameterized.TestCase):

  def _assert_same(self, opt, other):
    self.assertIs(type(other), LSO)
    self.assertEqual(other.get_config(), opt.get_config())

  def test_get_config_is_tf_2_3_format_and_round_trips(self):
    inner = tf_keras.optimizers.Adam(0.05, beta_1=0.8, amsgrad=True)
    loss_scale = mplso.DynamicLossScale(initial_loss_scale=64.,
                                        increment_period=7, multiplier=4.)
    opt = LSO(inner, loss_scale)
    config = opt.get_config()
    self.assertEqual(sorted(config),
                     ["how_to_load", "loss_scale", "optimizer"])
    self.assertEqual(config["loss_scale"], {
        "class_name": "DynamicLossScale",
        "config": {"initial_loss_scale": 64., "increment_period": 7,
                   "multiplier": 4.}})
    self.assertIs(config["optimizer"]["config"]["is_legacy_optimizer"],
                  False)
    json.dumps(config)
    restored = LSO.from_config(config)
    self._assert_same(opt, restored)
    self.assertEqual(restored.beta_1, 0.8)
    self.assertTrue(restored.amsgrad)

  def test_fixed_loss_scale_round_trips(self):
    opt = LSO(_adam(), 12)
    self._assert_same(opt, LSO.from_config(opt.get_config()))

  def test_reads_tf_keras_wrapper_config(self):
    theirs = TfKerasLSO(tf_keras.optimizers.SGD(0.3), initial_scale=128.,
                        dynamic_growth_steps=9)
    ours = LSO.from_config(theirs.get_config())
    self.assertIsInstance(ours.inner_optimizer, tf_keras.optimizers.SGD)
    self.assertAllClose(ours.learning_rate, 0.3)
    self.assertEqual(ours.loss_scale.get_config(), {
        "initial_loss_scale": 128., "increment_period": 9, "multiplier": 2.})
    fixed = LSO.from_config(TfKerasLSO(
        _adam(), dynamic=False, initial_scale=32.).get_config())
    self.assertIsInstance(fixed.loss_scale, mplso.FixedLossScale)
    self.assertEqual(fixed.initial_scale, 32.)

  def test_tf_keras_serialize_and_deserialize(self):
    opt = LSO(_adam(), _dynamic())
    config = tf_keras.optimizers.serialize(opt)
    self.assertEqual(config["registered_name"], "mplso>LossScaleOptimizerV3")
    self._assert_same(opt, tf_keras.optimizers.deserialize(config))

  def test_reads_config(self):
    new = _adam().get_config()
    legacy = tf_keras.optimizers.legacy.Adam().get_config()
    keras_3 = keras.optimizers.Adam().get_config()
    reads_config = tf_keras_optimizer.LossScaleOptimizer._reads_config
    self.assertFalse(reads_config(legacy))
    self.assertFalse(reads_config(keras_3))
    self.assertTrue(reads_config(new))

  def test_factory_from_config_picks_this_family(self):
    config = tf_keras_optimizer.LossScaleOptimizer(
        _adam(), mplso.DynamicLossScale(64)).get_config()
    restored = mplso.keras.LossScaleOptimizer.from_config(config)
    self.assertIsInstance(restored, tf_keras_optimizer.LossScaleOptimizer)
    self.assertEqual(restored.get_config(), config)

  def test_get_gradients_in_graph(self):
    with tf.Graph().as_default():
      var = tf.Variable(3.0)
      opt = tf_keras_optimizer.LossScaleOptimizer(_adam(), 1024)
      (grad,) = opt.get_gradients(var * 2.0, [var])
      other = tf.Variable(1.0)
      with self.assertRaisesRegex(ValueError, "has no gradient"):
        opt.get_gradients(var * 2.0, [other])
      with tf.compat.v1.Session() as sess:
        self.assertEqual(2.0, sess.run(grad))


class BadInputTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ("legacy", lambda: tf_keras.optimizers.legacy.Adam()),
      ("tf1", lambda: tf.compat.v1.train.AdamOptimizer()),
      ("string", lambda: "adam"))
  def test_wrong_optimizer_kind(self, make):
    with self.assertRaisesRegex(TypeError, "tf_keras.optimizers.Optimizer"):
      LSO(make(), "dynamic")

  def test_no_optimizer(self):
    # None is "no optimizer": the TF 2.4 dialect also names it
    # `inner_optimizer=`, so the error asks for it once.
    with self.assertRaisesRegex(TypeError, "needs the optimizer to wrap"):
      LSO(None, "dynamic")

  def test_keras_3_optimizer(self):
    import keras  # pylint: disable=g-import-not-at-top
    with self.assertRaisesRegex(TypeError, "keras.optimizers.Optimizer"):
      LSO(keras.optimizers.Adam(), "dynamic")

  @parameterized.named_parameters(
      ("ours", lambda: LSO(_adam(), "dynamic")),
      ("tf_keras", lambda: TfKerasLSO(_adam())))
  def test_loss_scale_optimizer_is_refused(self, make):
    for wrapper in (LSO, mplso.keras.LossScaleOptimizer):
      with self.assertRaisesRegex(TypeError,
                                  "already a loss-scale optimizer"):
        wrapper(make(), "dynamic")

  @parameterized.named_parameters(
      ("ours", lambda inner: LSO(inner, "dynamic")),
      ("tf_keras", TfKerasLSO))
  def test_optimizer_wrapped_twice(self, wrap):
    inner = _adam()
    wrap(inner)
    with self.assertRaisesRegex(ValueError, "already wrapped"):
      LSO(inner, "dynamic")

  def test_tf_keras_refuses_an_optimizer_we_wrap(self):
    inner = _adam()
    LSO(inner, "dynamic")
    with self.assertRaisesRegex(ValueError, "already wrapped"):
      TfKerasLSO(inner)

  def test_bad_apply_gradients_keyword(self):
    opt = LSO(_adam(), "dynamic")
    with self.assertRaisesRegex(TypeError, "global_step"):
      opt.apply_gradients([(tf.constant(1.), tf.Variable(1.))],
                          global_step=3)

  def test_no_gradients(self):
    opt = LSO(_adam(), "dynamic")
    with self.assertRaisesRegex(ValueError, "No gradients"):
      opt.apply_gradients([(None, tf.Variable(1.))])

  def test_set_weights_with_wrong_count(self):
    opt = LSO(_adam(), "dynamic")
    _trained(opt, steps=1, poison={})
    with self.assertRaisesRegex(ValueError, r"Expected 13 weights \(or 11 "):
      opt.set_weights([np.zeros(())])

  def test_bad_config(self):
    with self.assertRaisesRegex(ValueError, "'optimizer'"):
      LSO.from_config({"loss_scale": "dynamic"})


def _run_python(code, **env):
  return subprocess.run(
      [sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
      text=True, timeout=120, check=False,
      env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env})


class SubprocessTest(tf.test.TestCase):
  """Tests that need a fresh process: an environment variable, or devices."""

  def _json(self, result):
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])

  def test_mirrored_replicas_skip_together(self):
    # Two CPU replicas; only the first one's gradient is NaN on the second
    # step. Gradients are summed across replicas before the finite check,
    # so both replicas skip, and the scale halves once.
    out = self._json(_run_python("""
        import json
        import tensorflow as tf
        import tf_keras
        import mplso
        from mplso._src.keras import tf_keras_optimizer

        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
          var = tf.Variable([1., 1.])
          opt = tf_keras_optimizer.LossScaleOptimizer(
              tf_keras.optimizers.SGD(1.), mplso.DynamicLossScale(4.))

        @tf.function
        def step(poison_first):
          def replica_fn():
            replica = tf.distribute.get_replica_context()
            first = tf.equal(replica.replica_id_in_sync_group, 0)
            grad = tf.constant([.25, .5]) * tf.cast(
                replica.replica_id_in_sync_group + 1, tf.float32)
            grad = tf.where(tf.logical_and(poison_first, first),
                            float("nan"), grad)
            opt.apply_gradients([(grad, var)])
          strategy.run(replica_fn)

        out = {}
        for poison in (False, True):
          step(tf.constant(poison))
          out[str(poison)] = {
              "var": [v.numpy().tolist()
                      for v in strategy.experimental_local_results(var)],
              "scale": float(opt.loss_scale()),
              "iterations": int(opt.iterations.numpy())}
        print(json.dumps(out))
        """))
    # Summed: 1 - (0.25 + 0.5), 1 - (0.5 + 1.0), on both replicas.
    self.assertEqual(out["False"], {"var": [[0.25, -0.5]] * 2, "scale": 4.,
                                    "iterations": 1})
    self.assertEqual(out["True"], {"var": [[0.25, -0.5]] * 2, "scale": 2.,
                                   "iterations": 2})

  def test_tf_keras_under_tf_use_legacy_keras(self):
    out = self._json(_run_python("""
        import json
        import numpy as np
        import tensorflow as tf
        import mplso.keras
        from mplso._src.keras import tf_keras_optimizer

        opt = mplso.keras.LossScaleOptimizer(tf.keras.optimizers.Adam(0.05),
                                             "dynamic")
        model = tf.keras.Sequential(
            [tf.keras.layers.Dense(1, input_shape=(2,))])
        model.compile(optimizer=opt, loss="mse")
        x = np.random.default_rng(0).normal(size=(32, 2)).astype("float32")
        history = model.fit(x, x.sum(1, keepdims=True), epochs=3,
                            verbose=0)
        again = mplso.keras.LossScaleOptimizer.from_config(opt.get_config())
        print(json.dumps({
            "ours": type(opt) is tf_keras_optimizer.LossScaleOptimizer,
            "kept": model.optimizer is opt,
            "from_config": type(again).__name__ + "/" + type(again).__module__,
            "losses": history.history["loss"],
            "iterations": int(opt.iterations)}))
        """, TF_USE_LEGACY_KERAS="1"))
    self.assertTrue(out["ours"])
    self.assertTrue(out["kept"])
    self.assertEqual(out["from_config"],
                     "LossScaleOptimizer/" + tf_keras_optimizer.__name__)
    self.assertLess(out["losses"][-1], out["losses"][0])
    self.assertEqual(out["iterations"], 3)


if __name__ == "__main__":
  absltest.main()
