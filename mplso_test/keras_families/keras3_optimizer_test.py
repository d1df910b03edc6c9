"""Tests of the Keras 3 family of `mplso.keras.LossScaleOptimizer`."""

import os

from absl.testing import absltest
from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf

import mplso
from mplso._src.keras import keras3_optimizer
import mplso.keras

NAN, INF = float("nan"), float("inf")

# Steps whose gradients are poisoned, and with what. Enough finite steps in a
# row (increment_period=3) to grow the scale twice.
POISON = {2: NAN, 3: INF, 7: -INF}
STEPS = 14


def _data(n=32, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, 4)).astype("float32")
  y = (x @ rng.normal(size=(4, 1))).astype("float32")
  return x, y


def _model(seed=0, vocab=None):
  keras.utils.set_random_seed(seed)
  if vocab:
    inputs = keras.Input((3,), dtype="int32")
    hidden = keras.layers.Flatten()(keras.layers.Embedding(vocab, 2)(inputs))
  else:
    inputs = keras.Input((4,))
    hidden = inputs
  hidden = keras.layers.Dense(8, activation="tanh")(hidden)
  return keras.Model(inputs, keras.layers.Dense(1)(hidden))


def _wrap(inner=None, loss_scale="dynamic"):
  inner = inner if inner is not None else keras.optimizers.Adam(0.01)
  return mplso.keras.LossScaleOptimizer(inner, loss_scale)


def _use_mixed_float16(test):
  keras.mixed_precision.set_global_policy("mixed_float16")
  test.addCleanup(keras.mixed_precision.set_global_policy, "float32")


def _assert_all_finite(test, variables):
  for v in variables:
    test.assertTrue(np.all(np.isfinite(np.asarray(v))), v.name)


class KerasTrainerProtocolStep:
  """One training step as Keras 3's trainer does it, with a poisoned gradient.

  `scale_loss` under the tape, then `apply_gradients` with the scaled
  gradients; `poison` (0 for none) is added to every gradient.
  """

  def __init__(self, model, optimizer, use_function):
    self.model, self.optimizer = model, optimizer
    self.step = tf.function(self._step) if use_function else self._step

  def _step(self, x, y, poison):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(self.model(x) - y))
      scaled = self.optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, self.model.trainable_variables)
    grads = [g + poison for g in grads]
    self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))


def _seed_protocol_step(model, optimizer):
  """TF 2.3's protocol: get_scaled_loss, tape, get_unscaled_gradients."""

  def step(x, y, poison):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(tf.cast(model(x), tf.float32) - y))
      scaled = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(
        tape.gradient(scaled, model.trainable_variables))
    grads = [g + poison for g in grads]
    optimizer.apply_gradients(zip(grads, model.trainable_variables))

  return step


class ParityWithKerasTest(tf.test.TestCase, parameterized.TestCase):
  """Same model, data and poisoned steps as Keras 3's own wrapper."""

  @parameterized.product(use_function=[False, True],
                         protocol=["keras_trainer", "tf_2_3"],
                         inner=["sgd_momentum", "adam"])
  def test_same_weights_and_scales(self, use_function, protocol, inner):
    # Adam's bias correction reads `iterations`, which a skipped step
    # advances in ours (as TF 2.3 documents) but not in Keras 3's wrapper:
    # past a skip the two Adams differ by design, so Adam runs finite steps.
    poisoned = POISON if inner == "sgd_momentum" else {}

    def make_inner():
      if inner == "adam":
        return keras.optimizers.Adam(0.01)
      return keras.optimizers.SGD(0.01, momentum=0.9)

    (ours, ours_model), (theirs, theirs_model), both_step = self._twins(
        make_inner, protocol, use_function)
    skipped = 0
    for step in range(STEPS):
      both_step(poisoned.get(step, 0.0))
      skipped += step in poisoned
      self.assertEqual(float(ours.loss_scale()), float(theirs.dynamic_scale))
      self.assertEqual(int(ours.loss_scale.variables[1]),
                       int(theirs.step_counter))
      self._assert_same_weights(ours_model, theirs_model, msg=f"step {step}")
      # Keras 3's wrapper leaves `iterations` on a skipped step; TF 2.3's
      # documented behaviour, which ours keeps, advances it every step.
      self.assertEqual(int(ours.iterations), step + 1)
      self.assertEqual(int(theirs.iterations), step + 1 - skipped)
    _assert_all_finite(self, ours.variables)
    self.assertGreater(float(ours.loss_scale()), 2.0**10 / 2**len(poisoned))

  def _twins(self, make_inner, protocol="keras_trainer", use_function=False):
    """Ours and Keras 3's class around `make_inner()`, each with a model.

    Returns `(ours, theirs, step)`: `step(poison)` steps both, ours in
    `protocol`, Keras 3's in its own.
    """
    x, y = _data()
    ours_model, theirs_model = _model(), _model()
    ours = _wrap(make_inner(),
                 mplso.DynamicLossScale(2.0**10, increment_period=3))
    theirs = keras.optimizers.LossScaleOptimizer(
        make_inner(), initial_scale=2.0**10, dynamic_growth_steps=3)
    if protocol == "keras_trainer":
      ours_step = KerasTrainerProtocolStep(ours_model, ours, use_function).step
    else:
      ours_step = _seed_protocol_step(ours_model, ours)
      if use_function:
        ours_step = tf.function(ours_step)
    theirs_step = KerasTrainerProtocolStep(
        theirs_model, theirs, use_function).step

    def step(poison):
      ours_step(x, y, tf.constant(poison))
      theirs_step(x, y, tf.constant(poison))

    return (ours, ours_model), (theirs, theirs_model), step

  def _assert_same_weights(self, ours_model, theirs_model, msg=None):
    for a, b in zip(ours_model.get_weights(), theirs_model.get_weights()):
      self.assertAllEqual(a, b, msg=msg)

  @parameterized.parameters("keras_trainer", "tf_2_3")
  def test_inner_loss_scale_factor_is_turned_off_as_keras_does(self, protocol):
    # Left on, the wrapped optimizer would divide the unscaled gradients by
    # its own factor again: steps 128 times too small.
    (ours, ours_model), (_, theirs_model), step = self._twins(
        lambda: keras.optimizers.SGD(0.01, loss_scale_factor=128.), protocol)
    self.assertIsNone(ours.inner_optimizer.loss_scale_factor)
    before = [w.copy() for w in ours_model.get_weights()]
    for _ in range(3):
      step(0.0)
    self._assert_same_weights(ours_model, theirs_model)
    self.assertNotAllClose(before[0], ours_model.get_weights()[0])

  @parameterized.parameters(False, True)
  def test_gradient_accumulation_as_keras(self, use_function):
    # A skipped step accumulates nothing and, with accumulation, does not
    # advance the count the accumulation windows follow (Keras 3's class
    # leaves it too): the same weights as Keras 3's class, skips included.
    (ours, ours_model), (theirs, theirs_model), step = self._twins(
        lambda: keras.optimizers.SGD(0.01, gradient_accumulation_steps=2),
        use_function=use_function)
    before = [w.copy() for w in ours_model.get_weights()]
    for i in range(STEPS):
      step(POISON.get(i, 0.0))
      self.assertEqual(float(ours.loss_scale()), float(theirs.dynamic_scale))
      self.assertEqual(int(ours.iterations), int(theirs.iterations))
      self._assert_same_weights(ours_model, theirs_model, msg=f"step {i}")
    self.assertNotAllClose(before[0], ours_model.get_weights()[0])

  def test_fit_with_gradient_accumulation(self):
    x, y = _data()
    model = _model()
    model.compile(optimizer=_wrap(
        keras.optimizers.SGD(0.01, gradient_accumulation_steps=2),
        "dynamic"), loss="mse")
    before = [w.copy() for w in model.get_weights()]
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    self.assertEqual(int(model.optimizer.iterations), len(x) // 8 // 2)
    self.assertNotAllClose(before[0], model.get_weights()[0])

  def test_scale_never_below_one_unlike_keras(self):
    # Keras 3's wrapper halves its scale on every bad step without a floor;
    # TF 2.3's DynamicLossScale, which ours follows, stops at 1.
    var = tf.Variable(1.0)
    ours = _wrap(keras.optimizers.SGD(0.1), mplso.DynamicLossScale(4.0))
    theirs = keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(0.1), initial_scale=4.0)
    for _ in range(5):
      for opt in (ours, theirs):
        opt.apply_gradients([(tf.constant(NAN), var)])
    self.assertEqual(float(ours.loss_scale()), 1.0)
    self.assertEqual(float(theirs.dynamic_scale), 4.0 / 32)
    self.assertEqual(float(var), 1.0)


class SplitProtocolTest(tf.test.TestCase, parameterized.TestCase):
  """Keras 3's protocol split between eager code, tf.functions and replicas.

  Whether `apply_gradients` unscales is decided where the step runs, not
  while a function is traced: every split gives Keras 3's class's weights.
  """

  def _run(self, optimizer, variable, split, steps=4):
    """`steps` of loss v**2/2 (gradient v), split as `split` names."""

    def scaled_gradients():
      with tf.GradientTape() as tape:
        loss = optimizer.scale_loss(0.5 * tf.square(variable))
      return tape.gradient(loss, [variable])

    def apply(grads):
      optimizer.apply_gradients(zip(grads, [variable]))

    if split == "gradients_in_function":
      grads_fn, apply_fn = tf.function(scaled_gradients), apply
    elif split == "apply_in_function":
      grads_fn, apply_fn = scaled_gradients, tf.function(apply)
    elif split == "both_in_functions":
      grads_fn, apply_fn = tf.function(scaled_gradients), tf.function(apply)
    else:  # "gradients_in_xla"
      grads_fn = tf.function(scaled_gradients, jit_compile=True)
      apply_fn = apply
    values = []
    for _ in range(steps):
      apply_fn(grads_fn())
      values.append(float(variable.numpy()))
    return values

  @parameterized.parameters("gradients_in_function", "apply_in_function",
                            "both_in_functions", "gradients_in_xla")
  def test_same_weights_as_keras(self, split):
    ours_variable, theirs_variable = tf.Variable(1.0), tf.Variable(1.0)
    ours = mplso.keras.LossScaleOptimizer(keras.optimizers.SGD(0.2))
    theirs = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.2))
    theirs_values = self._run(theirs, theirs_variable, split)
    self.assertAllClose(theirs_values, [0.8, 0.64, 0.512, 0.4096])
    self.assertEqual(self._run(ours, ours_variable, split), theirs_values)

  def test_protocols_alternate_between_steps(self):
    # A traced Keras 3 step, then TF 2.3's protocol eagerly, then Keras 3's
    # again through the same trace: each step unscales exactly once.
    variable = tf.Variable(1.0)
    optimizer = mplso.keras.LossScaleOptimizer(keras.optimizers.SGD(0.2))

    @tf.function
    def keras_step():
      with tf.GradientTape() as tape:
        loss = optimizer.scale_loss(0.5 * tf.square(variable))
      grads = tape.gradient(loss, [variable])
      optimizer.apply_gradients(zip(grads, [variable]))

    def tf_2_3_step():
      with tf.GradientTape() as tape:
        loss = optimizer.get_scaled_loss(0.5 * tf.square(variable))
      grads = optimizer.get_unscaled_gradients(tape.gradient(loss, [variable]))
      optimizer.apply_gradients(zip(grads, [variable]))

    for step in (keras_step, tf_2_3_step, keras_step, tf_2_3_step):
      step()
    self.assertAllClose(variable.numpy(), 0.8**4)

  def test_each_replica_in_strategy_run(self):
    strategy = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"],
        cross_device_ops=tf.distribute.ReductionToOneDevice())
    with strategy.scope():
      variable = tf.Variable(1.0)
      optimizer = mplso.keras.LossScaleOptimizer(keras.optimizers.SGD(0.1))

    @tf.function
    def gradients():
      with tf.GradientTape() as tape:
        loss = optimizer.scale_loss(0.5 * tf.square(variable))
      return tape.gradient(loss, [variable])

    @tf.function
    def apply(grads):
      optimizer.apply_gradients(zip(grads, [variable]))

    for _ in range(3):
      strategy.run(apply, args=(strategy.run(gradients),))
    # Two replicas' gradients summed: v *= 1 - 2 * 0.1 each step.
    self.assertAllClose(variable.numpy(), 0.8**3)


class FitTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(("plain", False), ("jit", True))
  def test_fit_mixed_float16_keeps_our_wrapper(self, jit_compile):
    _use_mixed_float16(self)
    x, y = _data(64)
    model = _model()
    opt = _wrap(keras.optimizers.Adam(0.01),
                mplso.DynamicLossScale(2.0**8, increment_period=4))
    model.compile(optimizer=opt, loss="mse", jit_compile=jit_compile)
    self.assertIs(model.optimizer, opt)
    history = model.fit(x, y, batch_size=16, epochs=4, verbose=0,
                        shuffle=False)
    losses = history.history["loss"]
    self.assertTrue(np.all(np.isfinite(losses)))
    self.assertLess(losses[-1], losses[0])
    self.assertEqual(int(opt.iterations), 16)
    # 16 finite steps with increment_period=4 grow the scale 4 times.
    self.assertEqual(float(opt.loss_scale()), 2.0**12)
    self.assertEqual(model.layers[-1].compute_dtype, "float16")
    self.assertEqual(model.layers[-1].kernel.dtype, "float32")

  def test_fit_skips_a_non_finite_batch(self):
    x, y = _data(32)
    y[20] = np.inf  # The second batch of 16 has an infinite loss.
    model = _model()
    opt = _wrap(keras.optimizers.SGD(0.01), mplso.DynamicLossScale(2.0**8))
    model.compile(optimizer=opt, loss="mse")
    model.fit(x[:16], y[:16], batch_size=16, epochs=1, verbose=0)
    before = model.get_weights()
    model.fit(x[16:], y[16:], batch_size=16, epochs=1, verbose=0)
    for a, b in zip(before, model.get_weights()):
      self.assertAllEqual(a, b)
    self.assertEqual(int(opt.iterations), 2)
    self.assertEqual(float(opt.loss_scale()), 2.0**7)

  def test_fit_with_fixed_scale_matches_unscaled_sgd(self):
    x, y = _data(32)
    ours_model, plain_model = _model(), _model()
    ours_model.compile(_wrap(keras.optimizers.SGD(0.05), 64), loss="mse")
    plain_model.compile(keras.optimizers.SGD(0.05), loss="mse")
    for model in (ours_model, plain_model):
      model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
    for a, b in zip(ours_model.get_weights(), plain_model.get_weights()):
      self.assertAllClose(a, b, rtol=1e-6, atol=1e-6)


class CustomLoopTest(tf.test.TestCase, parameterized.TestCase):

  def test_tf_function_loop_mixed_float16(self):
    _use_mixed_float16(self)
    x, y = _data(64)
    model = _model()
    opt = _wrap()
    step = tf.function(_seed_protocol_step(model, opt))
    losses = []
    for _ in range(30):
      step(x, y, tf.constant(0.0))
      losses.append(float(tf.reduce_mean(tf.square(
          tf.cast(model(x), tf.float32) - y))))
    self.assertLess(losses[-1], losses[0] / 2)
    self.assertEqual(int(opt.iterations), 30)

  def test_minimize_callable_loss(self):
    # The TF 2.3 page's example.
    opt = _wrap(keras.optimizers.SGD(0.25), "dynamic")
    var = tf.Variable(1.0)
    opt.minimize(lambda: var**2, var_list=[var])
    self.assertEqual(float(var), 0.5)

  def test_minimize_keras_variables(self):
    opt = _wrap(keras.optimizers.SGD(0.25), "dynamic")
    var = keras.Variable(1.0)
    opt.minimize(lambda: var**2, var_list=[var])
    self.assertEqual(float(var.numpy()), 0.5)

  @parameterized.named_parameters(("fixed", 16), ("dynamic", "dynamic"))
  def test_sparse_nan_skips_every_variable(self, loss_scale):
    model = _model(vocab=5)
    opt = _wrap(keras.optimizers.Adam(0.01), loss_scale)
    x = np.array([[0, 1, 2], [3, 4, 0]], "int32")
    y = np.ones((2, 1), "float32")

    def grads(poison):
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y)) * poison
        scaled = opt.get_scaled_loss(loss)
      return opt.get_unscaled_gradients(
          tape.gradient(scaled, model.trainable_variables))

    opt.apply_gradients(zip(grads(1.0), model.trainable_variables))
    # Everything but the step counter and the loss scale stays.
    kept = [v for v in model.trainable_variables + opt.variables
            if v is not opt.iterations and
            not any(v is s for s in opt.loss_scale.variables)]
    before = [v.numpy() for v in kept]
    nan_grads = grads(NAN)
    self.assertIsInstance(nan_grads[0], tf.IndexedSlices)
    opt.apply_gradients(zip(nan_grads, model.trainable_variables))
    # The variables, then learning rate and two Adam slots per variable.
    self.assertLen(kept, 3 * len(model.trainable_variables) + 1)
    for a, v in zip(before, kept):
      self.assertAllEqual(a, v)
    self.assertEqual(int(opt.iterations), 2)


class SaveAndLoadTest(tf.test.TestCase):

  def _train(self, model, opt, x, y, epochs):
    model.fit(x, y, batch_size=8, epochs=epochs, verbose=0, shuffle=False)

  def test_saved_training_function_keeps_the_protocol(self):
    # A SavedModel holds what a saved training step reads (the scale and
    # the scaled-gradients mark); a checkpoint holds only what Keras 3's
    # class has, so the two classes still read each other's checkpoints.

    class Trainer(tf.Module):

      def __init__(self, optimizer):
        super().__init__()
        self.variable = tf.Variable(1.0)
        self.optimizer = optimizer

      @tf.function(input_signature=[])
      def train(self):
        with tf.GradientTape() as tape:
          loss = self.optimizer.scale_loss(0.5 * tf.square(self.variable))
        grads = tape.gradient(loss, [self.variable])
        self.optimizer.apply_gradients(zip(grads, [self.variable]))
        return self.variable.read_value()

    # Gradients through the step's own cond are not saved (Keras 3's class
    # needs this option too).
    options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
    values = {}
    for name, make in (("ours", mplso.keras.LossScaleOptimizer),
                       ("theirs", keras.optimizers.LossScaleOptimizer)):
      trainer = Trainer(make(keras.optimizers.SGD(0.2)))
      trainer.train()
      path = os.path.join(self.get_temp_dir(), name)
      tf.saved_model.save(trainer, path, options=options)
      loaded = tf.saved_model.load(path)
      values[name] = [float(loaded.train()), float(loaded.train())]
      if name == "ours":
        keys = [k for k, _ in tf.train.list_variables(tf.train.Checkpoint(
            optimizer=trainer.optimizer).save(path + "/checkpoint"))]
        self.assertNotIn("scaled", " ".join(keys))
    self.assertAllClose(values["theirs"], [0.64, 0.512])
    self.assertEqual(values["ours"], values["theirs"])

  def test_keras_format_resumes_exactly(self):
    x, y = _data(32)
    y[3] = np.inf  # One skipped step per epoch keeps the counters moving.
    model = _model()
    opt = _wrap(keras.optimizers.Adam(0.01),
                mplso.DynamicLossScale(2.0**10, increment_period=3))
    model.compile(optimizer=opt, loss="mse")
    self._train(model, opt, x, y, 2)
    path = os.path.join(self.create_tempdir().full_path, "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)  # No custom_objects needed.
    loaded_opt = loaded.optimizer
    self.assertIsInstance(loaded_opt, keras3_optimizer.LossScaleOptimizer)
    self.assertEqual(loaded_opt.loss_scale.get_config(),
                     opt.loss_scale.get_config())
    for a, b in zip(opt.variables, loaded_opt.variables):
      self.assertAllEqual(a, b)
    self.assertEqual(float(loaded_opt.loss_scale()), float(opt.loss_scale()))
    self.assertEqual(int(loaded_opt.loss_scale.variables[1]),
                     int(opt.loss_scale.variables[1]))
    self._train(model, opt, x, y, 1)
    self._train(loaded, loaded_opt, x, y, 1)
    for a, b in zip(model.get_weights(), loaded.get_weights()):
      self.assertAllEqual(a, b)
    self.assertEqual(float(loaded_opt.loss_scale()), float(opt.loss_scale()))
    self.assertEqual(int(loaded_opt.iterations), int(opt.iterations))

  def test_checkpoint_restores_scale_good_steps_and_slots(self):
    x, y = _data(32)
    model = _model()
    opt = _wrap(keras.optimizers.Adam(0.01),
                mplso.DynamicLossScale(2.0**10, increment_period=3))
    model.compile(optimizer=opt, loss="mse")
    self._train(model, opt, x, y, 1)  # 4 steps: scale grew once, 1 good step.
    saved = [v.numpy() for v in opt.variables]
    path = tf.train.Checkpoint(model=model, optimizer=opt).save(
        os.path.join(self.create_tempdir().full_path, "ckpt"))
    self._train(model, opt, x, y, 1)
    restored_model = _model(seed=1)
    restored_opt = _wrap(keras.optimizers.Adam(0.01),
                         mplso.DynamicLossScale(2.0**10, increment_period=3))
    restored_model.compile(optimizer=restored_opt, loss="mse")
    restored_opt.build(restored_model.trainable_variables)
    tf.train.Checkpoint(model=restored_model, optimizer=restored_opt).restore(
        path).assert_existing_objects_matched()
    self.assertEqual(float(restored_opt.loss_scale()), 2.0**11)
    self.assertEqual(int(restored_opt.loss_scale.variables[1]), 1)
    for a, b in zip(saved, restored_opt.variables):
      self.assertAllEqual(a, b)

  def test_config_round_trip(self):
    opt = _wrap(keras.optimizers.SGD(0.3, momentum=0.5),
                mplso.DynamicLossScale(128, increment_period=7, multiplier=4))
    config = opt.get_config()
    self.assertEqual(set(config),
                     {"how_to_load", "optimizer", "loss_scale", "name"})
    for restored in (type(opt).from_config(config),
                     mplso.keras.LossScaleOptimizer.from_config(config),
                     keras.optimizers.deserialize(
                         keras.optimizers.serialize(opt))):
      self.assertIsInstance(restored, keras3_optimizer.LossScaleOptimizer)
      self.assertEqual(restored.get_config(), config)
      self.assertAllClose(restored.learning_rate, 0.3)
      self.assertEqual(restored.inner_optimizer.momentum, 0.5)

  def test_reads_tf_2_3_and_keras_3_configs(self):
    sgd = keras.optimizers.serialize(keras.optimizers.SGD(0.1))
    tf_2_3 = {"optimizer": sgd, "loss_scale": {
        "class_name": "FixedLossScale", "config": {"loss_scale_value": 64.0}}}
    opt = keras3_optimizer.LossScaleOptimizer.from_config(tf_2_3)
    self.assertIsInstance(opt.loss_scale, mplso.FixedLossScale)
    self.assertEqual(float(opt.loss_scale()), 64.0)
    keras_3 = keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(0.1), initial_scale=256.0,
        dynamic_growth_steps=9).get_config()
    opt = keras3_optimizer.LossScaleOptimizer.from_config(keras_3)
    self.assertEqual(opt.loss_scale.initial_loss_scale, 256.0)
    self.assertEqual(opt.loss_scale.increment_period, 9)
    with self.assertRaisesRegex(ValueError, "Received keys: .'bogus'."):
      keras3_optimizer.LossScaleOptimizer.from_config({"bogus": 1})


class PassthroughTest(tf.test.TestCase):

  def _built(self):
    model = _model()
    opt = _wrap(keras.optimizers.Adam(0.01, beta_1=0.8))
    opt.build(model.trainable_variables)
    return model, opt

  def test_slots_are_the_wrapped_optimizers_state(self):
    model, opt = self._built()
    self.assertEqual(opt.get_slot_names(), ["momentum", "velocity"])
    kernel = model.trainable_variables[0]
    momentum = opt.get_slot(kernel, "momentum")
    self.assertTrue(any(momentum is v for v in opt.inner_optimizer.variables))
    self.assertEqual(momentum.shape, kernel.shape)
    with self.assertRaisesRegex(KeyError, "momentum.*velocity"):
      opt.get_slot(kernel, "m")
    extra = opt.add_slot(kernel, "trace", initializer="ones")
    self.assertAllEqual(opt.get_slot(kernel, "trace"), extra)
    self.assertIn("trace", opt.get_slot_names())

  def test_hyperparameters_learning_rate_and_iterations(self):
    _, opt = self._built()
    self.assertEqual(opt.beta_1, 0.8)
    self.assertIs(opt.iterations, opt.inner_optimizer.iterations)
    opt.learning_rate = 0.5
    self.assertAllClose(opt.inner_optimizer.learning_rate, 0.5)
    opt.lr = 0.25
    self.assertAllClose(opt.lr, 0.25)
    self.assertAllClose(opt.inner_optimizer.learning_rate, 0.25)

  def test_learning_rate_schedule(self):
    schedule = keras.optimizers.schedules.ExponentialDecay(1.0, 1, 0.5)
    opt = _wrap(keras.optimizers.SGD(schedule), 1)
    var = tf.Variable(0.0)
    for _ in range(2):
      opt.apply_gradients([(tf.constant(1.0), var)])
    self.assertAllClose(float(var), -1.5)  # 1.0, then 0.5.
    self.assertAllClose(opt.learning_rate, 0.25)

  def test_weights(self):
    _, opt = self._built()
    self.assertEqual(opt.weights, opt.variables)
    self.assertEqual(opt.variables[-2:], list(opt.loss_scale.variables))
    values = opt.get_weights()
    values[-2] = np.float32(4.0)
    opt.set_weights(values)
    self.assertEqual(float(opt.loss_scale()), 4.0)
    inner_only = [v.numpy() for v in opt.inner_optimizer.variables]
    opt.set_weights(inner_only)  # A file without the scale: kept.
    self.assertEqual(float(opt.loss_scale()), 4.0)
    with self.assertRaisesRegex(ValueError, "Received: 1 weights"):
      opt.set_weights(values[:1])


class BadInputTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ("v1_optimizer", lambda: tf.compat.v1.train.AdamOptimizer(), TypeError,
       "MixedPrecisionLossScaleOptimizer"),
      ("string", lambda: "adam", TypeError, "keras.optimizers.Optimizer"),
      ("none", lambda: None, TypeError, "but got: None"),
      ("keras_wrapper", lambda: keras.optimizers.LossScaleOptimizer(
          keras.optimizers.SGD()), TypeError, "already a loss-scale"),
      ("ours", lambda: _wrap(), TypeError, "already a loss-scale"),
  )
  def test_bad_optimizer(self, make, error, message):
    with self.assertRaisesRegex(error, message):
      mplso.keras.LossScaleOptimizer(make(), "dynamic")

  def test_family_class_refuses_other_families(self):
    with self.assertRaisesRegex(TypeError, "Keras 3"):
      keras3_optimizer.LossScaleOptimizer(
          tf.compat.v1.train.AdamOptimizer(), "dynamic")

  def test_own_aggregation_refused_with_several_replicas(self):
    # Reduced through one device: collective all-reduces run eagerly here
    # would share instance keys with other tests' strategies.
    strategy = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"],
        cross_device_ops=tf.distribute.ReductionToOneDevice())
    with strategy.scope():
      var = tf.Variable(1.0)
      opt = _wrap(keras.optimizers.SGD(0.1))

    def step():
      grad = tf.distribute.get_replica_context().all_reduce(
          "sum", tf.constant(1.0))
      opt.apply_gradients([(grad, var)],
                          experimental_aggregate_gradients=False)

    with self.assertRaisesRegex(ValueError, "2 replicas.*summed twice"):
      strategy.run(step)
    self.assertEqual(float(var.read_value()), 1.0)
    # Without a strategy there is nothing to aggregate: False is accepted.
    plain = tf.Variable(1.0)
    _wrap(keras.optimizers.SGD(0.5)).apply_gradients(
        [(tf.constant(1.0), plain)], experimental_aggregate_gradients=False)
    self.assertEqual(float(plain), 0.5)


if __name__ == "__main__":
  absltest.main()
