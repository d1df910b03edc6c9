"""Tests of the OptimizerV2 family of `mplso.keras.LossScaleOptimizer`."""

import json
import os

from absl.testing import absltest
from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf
import tf_keras

import mplso
from mplso._src.keras import keras3_optimizer
from mplso._src.keras import optimizer_v2
import mplso.keras
from mplso_test import testing

# The tests reach OptimizerV2's hooks, as tf_keras's loaders do.
# pylint: disable=protected-access

NAN, INF = float("nan"), float("inf")
legacy = tf_keras.optimizers.legacy
TfKerasLossScaleOptimizer = tf_keras.mixed_precision.LossScaleOptimizer

# Steps whose gradients are poisoned, and with what. Enough finite steps in a
# row (increment_period=3) to grow the scale again.
POISON = {2: NAN, 3: INF, 7: -INF}
STEPS = 14


def _data(n=32, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, 4)).astype("float32")
  y = (x @ rng.normal(size=(4, 1))).astype("float32")
  return x, y


def _model(seed=0, vocab=None):
  tf_keras.utils.set_random_seed(seed)
  if vocab:
    inputs = tf_keras.Input((3,), dtype="int32")
    hidden = tf_keras.layers.Flatten()(
        tf_keras.layers.Embedding(vocab, 2)(inputs))
  else:
    inputs = tf_keras.Input((4,))
    hidden = inputs
  hidden = tf_keras.layers.Dense(8, activation="tanh")(hidden)
  return tf_keras.Model(inputs, tf_keras.layers.Dense(1)(hidden))


def _wrap(inner=None, loss_scale="dynamic"):
  inner = inner if inner is not None else legacy.Adam(0.01)
  return mplso.keras.LossScaleOptimizer(inner, loss_scale)


def _dynamic(initial=2.0**10, period=3):
  return mplso.DynamicLossScale(initial, increment_period=period)


def _good_steps(opt):
  return int(opt.loss_scale.variables[1])  # current_loss_scale, good_steps


def _optimizer_state(model):
  """`iterations`, slots by model variable, then the loss scale's state.

  Independent of the order in which the optimizer created its variables (a
  restored one creates its slots first).
  """
  opt = model.optimizer
  slots = [opt.get_slot(var, name) for var in model.trainable_variables
           for name in opt.get_slot_names()]
  state = [opt.iterations, *slots, *opt.loss_scale.variables]
  return [v.numpy() for v in state]


def _use_mixed_float16(test):
  tf_keras.mixed_precision.set_global_policy("mixed_float16")
  test.addCleanup(tf_keras.mixed_precision.set_global_policy, "float32")


def _seed_protocol_step(model, optimizer):
  """TF 2.3's protocol: get_scaled_loss, tape, get_unscaled_gradients.

  `poison` is added to every unscaled gradient. tf_keras's own wrapper has
  the same methods, so the same step drives both.
  """

  def step(x, y, poison):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(tf.cast(model(x), tf.float32) - y))
      scaled = optimizer.get_scaled_loss(loss)
    grads = optimizer.get_unscaled_gradients(
        tape.gradient(scaled, model.trainable_variables))
    grads = [g + poison for g in grads]
    optimizer.apply_gradients(zip(grads, model.trainable_variables))

  return step


def _make_inner(kind):
  if kind == "adam":
    return legacy.Adam(0.01)
  return legacy.SGD(0.01, momentum=0.9)


class ParityWithTfKerasTest(tf.test.TestCase, parameterized.TestCase):
  """Same model, data and poisoned steps as tf_keras's own wrapper."""

  @parameterized.named_parameters(
      (f"{inner}_{mode}", inner, mode == "function")
      for inner in ("sgd_momentum", "adam") for mode in ("eager", "function"))
  def test_dynamic_same_weights_scales_and_iterations(self, inner,
                                                      use_function):
    x, y = _data()
    ours_model, theirs_model = _model(), _model()
    ours = _wrap(_make_inner(inner), _dynamic())
    theirs = TfKerasLossScaleOptimizer(
        _make_inner(inner), initial_scale=2.0**10, dynamic_growth_steps=3)
    steps = [_seed_protocol_step(ours_model, ours),
             _seed_protocol_step(theirs_model, theirs)]
    if use_function:
      steps = [tf.function(step) for step in steps]
    for step in range(STEPS):
      poison = tf.constant(POISON.get(step, 0.0))
      for run in steps:
        run(x, y, poison)
      self.assertEqual(float(ours.loss_scale()), float(theirs.loss_scale))
      self.assertEqual(_good_steps(ours), int(theirs.dynamic_counter))
      # Both advance `iterations` on a skipped step, as TF 2.3 documents.
      self.assertEqual(int(ours.iterations), step + 1)
      self.assertEqual(int(theirs.iterations), step + 1)
      for a, b in zip(ours_model.get_weights(), theirs_model.get_weights()):
        self.assertAllEqual(a, b, msg=f"step {step}")
    # 2**10 halved three times, then grown three times (steps 6, 10, 13).
    self.assertEqual(float(ours.loss_scale()), 2.0**10)
    for v in ours.weights:
      self.assertTrue(np.all(np.isfinite(v.numpy())), v.name)

  def test_fixed_scale_skips_where_tf_keras_applies(self):
    # A deliberate difference: TF 2.3's and tf_keras's wrappers apply a
    # non-finite step under a fixed scale, which poisons the weights for
    # good; ours skips it under any loss scale.
    x, y = _data()
    ours_model, theirs_model = _model(), _model()
    ours = _wrap(legacy.SGD(0.01), 64)
    theirs = TfKerasLossScaleOptimizer(legacy.SGD(0.01), dynamic=False,
                                       initial_scale=64)
    ours_step = _seed_protocol_step(ours_model, ours)
    theirs_step = _seed_protocol_step(theirs_model, theirs)
    for step in (ours_step, theirs_step):
      step(x, y, tf.constant(0.0))
    for a, b in zip(ours_model.get_weights(), theirs_model.get_weights()):
      self.assertAllEqual(a, b)
    before = ours_model.get_weights()
    for step in (ours_step, theirs_step):
      step(x, y, tf.constant(NAN))
    for a, b in zip(before, ours_model.get_weights()):
      self.assertAllEqual(a, b)
    self.assertTrue(np.all(np.isnan(theirs_model.get_weights()[0])))
    self.assertEqual(int(ours.iterations), 2)
    self.assertEqual(int(theirs.iterations), 2)
    self.assertEqual(float(ours.loss_scale()), 64.0)


class CustomAggregationTest(tf.test.TestCase, parameterized.TestCase):
  """What the wrapped optimizer applies is checked, after its aggregation."""

  def _nan_aggregator(self, grads_and_vars):
    return [(g * float("nan"), v) for g, v in grads_and_vars]

  @parameterized.named_parameters(("eager", False), ("function", True))
  def test_nan_made_by_a_gradient_aggregator_is_skipped_as_tf_keras(
      self, use_function):
    results = []
    for make in (lambda o: mplso.keras.LossScaleOptimizer(o, "dynamic"),
                 TfKerasLossScaleOptimizer):
      var = tf.Variable([1., 2.])
      opt = make(tf_keras.optimizers.legacy.SGD(
          0.1, gradient_aggregator=self._nan_aggregator))

      def step(opt=opt, var=var):
        with tf.GradientTape() as tape:
          loss = opt.get_scaled_loss(tf.reduce_sum(var))
        grads = opt.get_unscaled_gradients(tape.gradient(loss, [var]))
        opt.apply_gradients(zip(grads, [var]))

      (tf.function(step) if use_function else step)()
      results.append((var.numpy().tolist(), float(tf.convert_to_tensor(
          opt.loss_scale() if callable(opt.loss_scale) else opt.loss_scale))))
    ours, theirs = results
    self.assertEqual(theirs, ours)
    self.assertEqual([1., 2.], ours[0])  # Skipped.
    self.assertEqual(2.**14, ours[1])  # And the scale halved.

  def test_an_overridden_aggregation_hook_is_checked_too(self):

    class NanSGD(tf_keras.optimizers.legacy.SGD):

      def _aggregate_gradients(self, grads_and_vars):
        return [(g * float("nan"), v) for g, v in grads_and_vars]

    var = tf.Variable([1., 2.])
    opt = mplso.keras.LossScaleOptimizer(NanSGD(0.1), "dynamic")
    opt.minimize(lambda: tf.reduce_sum(var), [var])
    self.assertEqual([1., 2.], var.numpy().tolist())

  def test_default_aggregation_is_left_to_the_wrapped_optimizer(self):
    opt = mplso.keras.LossScaleOptimizer(tf_keras.optimizers.legacy.SGD(0.1),
                                         "dynamic")
    self.assertFalse(opt._aggregates_its_own_way())  # pylint: disable=protected-access


class FitTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(("plain", False), ("jit", True))
  def test_fit_mixed_float16_keeps_our_wrapper(self, jit_compile):
    _use_mixed_float16(self)
    x, y = _data(64)
    model = _model()
    opt = _wrap(legacy.Adam(0.01), _dynamic(2.0**8, period=4))
    model.compile(optimizer=opt, loss="mse", jit_compile=jit_compile)
    if jit_compile and not model.jit_compile:
      self.skipTest("tf_keras switched jit_compile off for this model on this "
                    "platform (no XLA); the jit_compile=False case still runs.")
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
    opt = _wrap(legacy.SGD(0.01), _dynamic(2.0**8))
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
    ours_model.compile(_wrap(legacy.SGD(0.05), 64), loss="mse")
    plain_model.compile(legacy.SGD(0.05), loss="mse")
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

  def test_seed_examples(self):
    # The two examples of the TF 2.3 page.
    opt = _wrap(legacy.SGD(0.25), "dynamic")
    var = tf.Variable(1.0)

    def loss_fn():
      return var**2

    opt.minimize(loss_fn, var_list=var)
    self.assertEqual(float(var), 0.5)
    with tf.GradientTape() as tape:
      scaled_loss = opt.get_scaled_loss(loss_fn())
    scaled_grad = tape.gradient(scaled_loss, var)
    (grad,) = opt.get_unscaled_gradients([scaled_grad])
    opt.apply_gradients([(grad, var)])
    self.assertEqual(float(var), 0.25)
    self.assertEqual(float(scaled_grad), 2**15)  # 2 * 0.5 * 2**15.

  @parameterized.named_parameters(("fixed", 16), ("dynamic", "dynamic"))
  def test_sparse_nan_skips_every_variable(self, loss_scale):
    model = _model(vocab=5)
    opt = _wrap(legacy.Adam(0.01), loss_scale)
    x = np.array([[0, 1, 2], [3, 4, 0]], "int32")
    y = np.ones((2, 1), "float32")

    def grads(poison):
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y)) * poison
        scaled = opt.get_scaled_loss(loss)
      return opt.get_unscaled_gradients(
          tape.gradient(scaled, model.trainable_variables))

    def state():  # All but `iterations` and the loss scale.
      return [v.numpy() for v in model.weights + opt.weights[1:-2]]

    opt.apply_gradients(zip(grads(1.0), model.trainable_variables))
    before = state()
    nan_grads = grads(NAN)
    self.assertIsInstance(nan_grads[0], tf.IndexedSlices)
    opt.apply_gradients(zip(nan_grads, model.trainable_variables))
    for a, b in zip(before, state()):
      self.assertAllEqual(a, b)
    self.assertEqual(int(opt.iterations), 2)

  def test_get_gradients_and_get_updates_in_a_v1_graph(self):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
      var = tf.Variable(2.0)
      x = tf.compat.v1.placeholder(tf.float32, [])
      opt = _wrap(legacy.SGD(0.5), mplso.DynamicLossScale(2.0**10))
      loss = var * var * x
      (grad,) = opt.get_gradients(loss, [var])
      updates = opt.get_updates(loss, [var])
      session.run(tf.compat.v1.global_variables_initializer())
      self.assertEqual(session.run(grad, {x: 1.0}), 4.0)
      session.run(updates, {x: 1.0})
      self.assertEqual(session.run(var), 0.0)
      session.run(updates, {x: NAN})
      self.assertEqual(session.run(var), 0.0)
      self.assertEqual(session.run(opt.iterations), 2)
      self.assertEqual(session.run(opt.loss_scale()), 2.0**9)

  def test_mirrored_strategy_skips_together(self):
    # Collective all-reduce groups are numbered per process, so a strategy of
    # another size than an earlier test's would clash; reduce to one device.
    strategy = tf.distribute.MirroredStrategy(
        ["/cpu:0"], cross_device_ops=tf.distribute.ReductionToOneDevice())
    with strategy.scope():
      var = tf.Variable(1.0)
      opt = _wrap(legacy.SGD(0.5), mplso.DynamicLossScale(8.0))

    @tf.function
    def step(grad):
      strategy.run(lambda: opt.apply_gradients([(grad, var)]))

    step(tf.constant(1.0))
    self.assertEqual(var.numpy(), 0.5)
    step(tf.constant(NAN))
    self.assertEqual(var.numpy(), 0.5)
    self.assertEqual(opt.iterations.numpy(), 2)
    self.assertEqual(opt.loss_scale().numpy(), 4.0)
    with strategy.scope(), self.assertRaisesRegex(ValueError,
                                                  "replica context"):
      opt.apply_gradients([(tf.constant(1.0), var)])


class SaveAndLoadTest(tf.test.TestCase, parameterized.TestCase):

  FORMATS = (("savedmodel", "model"), ("h5", "model.h5"),
             ("keras", "model.keras"))

  def _fit(self, model, x, y, epochs=1):
    model.fit(x, y, batch_size=8, epochs=epochs, verbose=0, shuffle=False)

  def _trained_with(self, opt, epochs=1):
    x, y = _data(32)
    y[3] = np.inf  # The first step of each epoch is skipped.
    model = _model()
    model.compile(optimizer=opt, loss="mse")
    self._fit(model, x, y, epochs=epochs)
    return model, x, y

  def _trained(self):
    model, x, y = self._trained_with(
        _wrap(legacy.Adam(0.01), _dynamic(2.0**12, period=4)), epochs=2)
    # 8 steps, the 1st and 5th skipped: 2**12 halved twice, 3 good steps.
    self.assertEqual(float(model.optimizer.loss_scale()), 2.0**10)
    self.assertEqual(_good_steps(model.optimizer), 3)
    return model, x, y

  def _save(self, model, filename):
    path = os.path.join(self.create_tempdir().full_path, filename)
    model.save(path)
    return path

  @parameterized.named_parameters(*FORMATS)
  def test_load_model_restores_our_wrapper(self, filename):
    model, _, _ = self._trained()
    loaded = tf_keras.models.load_model(self._save(model, filename))
    self.assertIsInstance(loaded.optimizer, optimizer_v2.LossScaleOptimizer)
    self.assertEqual(loaded.optimizer.get_config(),
                     model.optimizer.get_config())
    for a, b in zip(model.get_weights(), loaded.get_weights()):
      self.assertAllEqual(a, b)

  @parameterized.named_parameters(*FORMATS)
  def test_load_model_resumes_exactly(self, filename):
    if filename.endswith(".keras"):
      self.skipTest(
          "tf_keras's .keras format saves no OptimizerV2 state at all (its "
          "saving_lib visits only tf_keras.optimizers.Optimizer); the model "
          "and our wrapper's config round-trip, see "
          "test_load_model_restores_our_wrapper.")
    model, x, y = self._trained()
    opt = model.optimizer
    path = self._save(model, filename)
    loaded = tf_keras.models.load_model(path)
    if filename == "model":
      # tf_keras's SavedModel loader starts an OptimizerV2 afresh ("Slots
      # cannot be restored from saved_model"). The state is in the
      # SavedModel's checkpoint, with our wrapper's layout.
      loaded.load_weights(os.path.join(path, "variables", "variables"))
    loaded_opt = loaded.optimizer
    if filename.endswith(".h5"):
      # An .h5 file holds the optimizer's `weights`, which are the wrapped
      # optimizer's alone (as TF 2.3's and tf_keras's): the loss
      # scale restarts from its initial value.
      self.assertEqual(float(loaded_opt.loss_scale()), 2.0**12)
      self.assertEqual(_good_steps(loaded_opt), 0)
    else:
      self.assertEqual(float(loaded_opt.loss_scale()), 2.0**10)
      self.assertEqual(_good_steps(loaded_opt), 3)
    self.assertEqual(int(loaded_opt.iterations), int(opt.iterations))
    self._fit(model, x, y)
    self._fit(loaded, x, y)
    for a, b in zip(model.get_weights(), loaded.get_weights()):
      self.assertAllEqual(a, b)
    # The loss scale's state (the last two) differs after an .h5 restart.
    kept = slice(None, -2 if filename.endswith(".h5") else None)
    for a, b in zip(_optimizer_state(model)[kept],
                    _optimizer_state(loaded)[kept]):
      self.assertAllEqual(a, b)
    # Adam's updates do not depend on the (power of two) scale, so the
    # weights match after an .h5 restart of the scale too.
    self.assertLen(loaded_opt.get_weights(), 9)  # iter, 8 slots.

  def _restored_into(self, path, opt):
    model = _model(seed=1)
    model.compile(optimizer=opt, loss="mse")
    opt._create_all_weights(model.trainable_variables)
    tf.train.Checkpoint(model=model).restore(
        path).assert_existing_objects_matched()
    return model

  def test_checkpoint_round_trip(self):
    model, _, _ = self._trained()
    saved = _optimizer_state(model)
    path = tf.train.Checkpoint(model=model).save(
        os.path.join(self.create_tempdir().full_path, "ckpt"))
    restored = self._restored_into(
        path, _wrap(legacy.Adam(0.01), _dynamic(2.0**12, period=4)))
    self.assertEqual(float(restored.optimizer.loss_scale()), 2.0**10)
    self.assertEqual(_good_steps(restored.optimizer), 3)
    for a, b in zip(saved, _optimizer_state(restored)):
      self.assertAllEqual(a, b)
    for a, b in zip(model.get_weights(), restored.get_weights()):
      self.assertAllEqual(a, b)

  def test_checkpoint_layout_is_tf_keras_wrappers(self):
    ours, _, _ = self._trained_with(_wrap(legacy.Adam(0.01), _dynamic()))
    theirs, _, _ = self._trained_with(TfKerasLossScaleOptimizer(
        legacy.Adam(0.01), initial_scale=2.0**10, dynamic_growth_steps=3))
    keys = []
    for model in (ours, theirs):
      path = tf.train.Checkpoint(model=model).save(
          os.path.join(self.create_tempdir().full_path, "ckpt"))
      keys.append({name for name, _ in tf.train.list_variables(path)})
    self.assertEqual(keys[0], keys[1])
    self.assertIn("model/optimizer/loss_scale/good_steps/.ATTRIBUTES/"
                  "VARIABLE_VALUE", keys[0])

  @parameterized.named_parameters(("ours_to_tf_keras", True),
                                  ("tf_keras_to_ours", False))
  def test_checkpoint_interchange_with_tf_keras(self, from_ours):

    def make(ours):
      if ours:
        return _wrap(legacy.Adam(0.01), _dynamic(period=4))
      return TfKerasLossScaleOptimizer(
          legacy.Adam(0.01), initial_scale=2.0**10, dynamic_growth_steps=4)

    model, _, _ = self._trained_with(make(from_ours))  # 1 skip, 3 good.
    path = tf.train.Checkpoint(model=model).save(
        os.path.join(self.create_tempdir().full_path, "ckpt"))
    restored = self._restored_into(path, make(not from_ours))
    opts = (model.optimizer, restored.optimizer)
    ours, theirs = opts if from_ours else opts[::-1]
    self.assertEqual(float(ours.loss_scale()), 2.0**9)
    self.assertEqual(float(theirs.loss_scale), 2.0**9)
    self.assertEqual(_good_steps(ours), int(theirs.dynamic_counter))
    self.assertEqual(_good_steps(ours), 3)
    # tf_keras's weights lack the loss scale's two variables.
    for a, b in zip(ours.get_weights()[:-2], theirs.get_weights()):
      self.assertAllEqual(a, b)
    self.assertLen(theirs.get_weights(), 9)

  def test_saved_model_with_tf_saved_model_save(self):
    # TF's checkpointer collects slots from every object with
    # `get_slot_names`; ours forwards them without saving them twice.
    model, _, _ = self._trained_with(_wrap(legacy.Adam(0.01), _dynamic()))
    path = self.create_tempdir().full_path
    tf.saved_model.save(model, path)
    names = {name for name, _ in tf.train.list_variables(
        os.path.join(path, "variables", "variables"))}
    self.assertLen([n for n in names if ".OPTIMIZER_SLOT" in n], 8)
    self.assertIn("optimizer/loss_scale/current_loss_scale/.ATTRIBUTES/"
                  "VARIABLE_VALUE", names)


class ConfigTest(tf.test.TestCase):

  def _opt(self):
    return _wrap(legacy.SGD(0.3, momentum=0.5),
                 mplso.DynamicLossScale(128, increment_period=7,
                                        multiplier=4))

  def test_config_round_trip(self):
    opt = self._opt()
    config = opt.get_config()
    self.assertEqual(set(config), {"how_to_load", "optimizer", "loss_scale"})
    for restored in (optimizer_v2.LossScaleOptimizer.from_config(config),
                     tf_keras.optimizers.deserialize(
                         tf_keras.optimizers.serialize(opt))):
      self.assertIsInstance(restored, optimizer_v2.LossScaleOptimizer)
      self.assertEqual(restored.get_config(), config)
      self.assertAllClose(restored.learning_rate, 0.3)
      self.assertAllClose(restored.momentum, 0.5)

  def test_mplso_keras_from_config_picks_this_family(self):
    config = self._opt().get_config()
    restored = mplso.keras.LossScaleOptimizer.from_config(config)
    self.assertIsInstance(restored, optimizer_v2.LossScaleOptimizer)
    self.assertEqual(restored.get_config(), config)

  def test_reads_tf_2_3_and_tf_keras_configs(self):
    sgd = {"class_name": "SGD", "config": {"name": "SGD",
                                           "learning_rate": 0.1}}
    tf_2_3 = {"optimizer": sgd, "loss_scale": {
        "class_name": "FixedLossScale", "config": {"loss_scale_value": 64.0}}}
    opt = optimizer_v2.LossScaleOptimizer.from_config(tf_2_3)
    self.assertIsInstance(opt.inner_optimizer, legacy.SGD)
    self.assertIsInstance(opt.loss_scale, mplso.FixedLossScale)
    self.assertEqual(float(opt.loss_scale()), 64.0)
    tf_keras_config = TfKerasLossScaleOptimizer(
        legacy.SGD(0.1), initial_scale=256.0,
        dynamic_growth_steps=9).get_config()
    opt = optimizer_v2.LossScaleOptimizer.from_config(tf_keras_config)
    self.assertEqual(opt.loss_scale.initial_loss_scale, 256.0)
    self.assertEqual(opt.loss_scale.increment_period, 9)

  def test_reads_config(self):
    configs = {
        "legacy": legacy.Adam().get_config(),
        "tf_keras": tf_keras.optimizers.Adam().get_config(),
        "keras_3": keras.optimizers.Adam().get_config(),
    }
    self.assertEqual(
        {name: optimizer_v2.LossScaleOptimizer._reads_config(config)
         for name, config in configs.items()},
        {"legacy": True, "tf_keras": False, "keras_3": False})


class PassthroughTest(tf.test.TestCase):

  def _built(self):
    model = _model()
    opt = _wrap(legacy.Adam(0.01, beta_1=0.8), _dynamic())
    opt._create_all_weights(model.trainable_variables)
    return model, opt

  def test_slots_are_the_wrapped_optimizers(self):
    model, opt = self._built()
    inner = opt.inner_optimizer
    self.assertEqual(opt.get_slot_names(), ["m", "v"])
    kernel = model.trainable_variables[0]
    self.assertIs(opt.get_slot(kernel, "m"), inner.get_slot(kernel, "m"))
    extra = opt.add_slot(kernel, "trace", initializer="ones")
    self.assertIs(inner.get_slot(kernel, "trace"), extra)
    self.assertIn("trace", opt.get_slot_names())

  def test_hyperparameters_learning_rate_and_iterations(self):
    _, opt = self._built()
    inner = opt.inner_optimizer
    self.assertAllClose(opt.beta_1, 0.8)
    opt.beta_1 = 0.7
    self.assertAllClose(inner._get_hyper("beta_1"), 0.7)
    opt._set_hyper("beta_2", 0.9)
    self.assertAllClose(inner.beta_2, 0.9)
    self.assertAllClose(opt._get_hyper("beta_2"), 0.9)
    self.assertIn("beta_1", dir(opt))
    self.assertIs(opt.iterations, inner.iterations)
    opt.learning_rate = 0.5
    self.assertAllClose(inner.learning_rate, 0.5)
    opt.lr = 0.25
    self.assertAllClose(opt.lr, 0.25)
    self.assertAllClose(inner.learning_rate, 0.25)
    opt.clipnorm = 2.0
    self.assertEqual(inner.clipnorm, 2.0)

  def test_learning_rate_schedule(self):
    schedule = tf_keras.optimizers.schedules.ExponentialDecay(1.0, 1, 0.5)
    opt = _wrap(legacy.SGD(schedule), 4)
    self.assertIs(opt.learning_rate, schedule)
    var = tf.Variable(0.0)
    opt.apply_gradients([(tf.constant(-1.0), var)])  # lr 1.
    opt.apply_gradients([(tf.constant(-1.0), var)])  # lr 0.5.
    self.assertEqual(float(var), 1.5)
    opt.learning_rate = tf_keras.optimizers.schedules.ExponentialDecay(
        4.0, 1, 0.5)
    opt.apply_gradients([(tf.constant(-1.0), var)])  # lr 4 * 0.5**2.
    self.assertEqual(float(var), 2.5)
    self.assertIsNot(opt.inner_optimizer.learning_rate, schedule)

  def test_weights_are_the_wrapped_optimizers(self):
    # As TF 2.3's and tf_keras's wrappers, so code that copies
    # optimizer weights between a wrapper and a bare optimizer keeps working.
    model, opt = self._built()
    inner = opt.inner_optimizer

    def ids(variables):
      return [id(v) for v in variables]

    self.assertEqual(ids(opt.weights), ids(inner.weights))
    self.assertEqual(ids(opt.variables()), ids(inner.variables()))
    values = opt.get_weights()
    self.assertLen(values, len(inner.weights))
    values[0] = np.array(7, np.int64)
    opt.set_weights(values)
    self.assertEqual(int(opt.iterations), 7)
    self.assertEqual(float(opt.loss_scale()), 2.0**10)  # Untouched.
    bare = legacy.Adam()
    bare._create_all_weights(model.trainable_variables)
    bare.set_weights(opt.get_weights())
    self.assertEqual(int(bare.iterations), 7)
    with self.assertRaisesRegex(ValueError, "length"):
      opt.set_weights(values[:3])


class ConstructorTest(tf.test.TestCase, parameterized.TestCase):

  def test_is_an_optimizer_v2_and_a_tf_keras_loss_scale_optimizer(self):
    opt = _wrap(legacy.SGD(), 2)
    self.assertIsInstance(opt, optimizer_v2.LossScaleOptimizer)
    self.assertIsInstance(opt, legacy.Optimizer)
    self.assertIsInstance(opt, tf_keras.mixed_precision.LossScaleOptimizer)
    self.assertIsInstance(opt, mplso.keras.LossScaleOptimizer)
    self.assertIsInstance(opt.loss_scale, mplso.FixedLossScale)
    self.assertIsInstance(_wrap(legacy.SGD()).loss_scale,
                          mplso.DynamicLossScale)

  def test_keras_3_optimizer_goes_to_its_family(self):
    opt = _wrap(keras.optimizers.SGD())
    self.assertIsInstance(opt, keras3_optimizer.LossScaleOptimizer)

  @parameterized.named_parameters(
      ("v1_optimizer", lambda: tf.compat.v1.train.GradientDescentOptimizer(
          0.1), "MixedPrecisionLossScaleOptimizer"),
      ("not_an_optimizer", lambda: "sgd", "Keras 2 OptimizerV2"),
  )
  def test_wrong_kind_is_a_type_error(self, make, message):
    with self.assertRaisesRegex(TypeError, message):
      _wrap(make())
    with self.assertRaisesRegex(TypeError, "Keras 2 OptimizerV2"):
      optimizer_v2.LossScaleOptimizer(make(), "dynamic")

  def test_keras_3_optimizer_is_refused_by_this_family(self):
    with self.assertRaisesRegex(TypeError, "OptimizerV2"):
      optimizer_v2.LossScaleOptimizer(keras.optimizers.SGD(), "dynamic")

  @parameterized.named_parameters(
      ("ours", lambda: _wrap(legacy.SGD())),
      ("tf_keras", lambda: TfKerasLossScaleOptimizer(legacy.SGD())),
  )
  def test_wrapping_a_loss_scale_optimizer_is_a_type_error(self, make):
    with self.assertRaisesRegex(TypeError, "already a loss-scale optimizer"):
      _wrap(make())
    with self.assertRaisesRegex(TypeError, "already a loss-scale optimizer"):
      optimizer_v2.LossScaleOptimizer(make(), "dynamic")

  @parameterized.named_parameters(
      ("by_ours", lambda inner: _wrap(inner)),
      ("by_tf_keras", TfKerasLossScaleOptimizer),
  )
  def test_already_wrapped_optimizer_is_a_value_error(self, wrap):
    inner = legacy.SGD()
    wrap(inner)
    with self.assertRaisesRegex(ValueError, "wrapped by a single"):
      _wrap(inner)



# A tf_keras model trained by `fit` in TF1 graph mode (eager execution off,
# which holds for the whole process), with ours and with tf_keras's class.
_TF1_MODE_FIT = """
import json
import numpy as np
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
import tf_keras
import mplso.keras

x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
y[5] = np.inf  # One batch of eight overflows.
result = {}
for name, wrap in (("ours", mplso.keras.LossScaleOptimizer),
                   ("theirs", tf_keras.mixed_precision.LossScaleOptimizer)):
  tf_keras.utils.set_random_seed(0)
  model = tf_keras.Sequential([tf_keras.layers.Dense(1, input_shape=(4,))])
  opt = wrap(tf_keras.optimizers.legacy.SGD(0.05), initial_scale=8.,
             dynamic_growth_steps=2)
  model.compile(opt, "mse")
  model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
  session = tf.compat.v1.keras.backend.get_session()
  result[name] = {"weights": [w.tolist() for w in model.get_weights()],
                  "scale": float(session.run(opt.loss_scale))}
print(json.dumps(result))
"""


class Tf1ModeFitTest(tf.test.TestCase):

  def test_fit_in_graph_mode_as_tf_keras(self):
    # tf_keras's TF1-mode `fit` initializes only the variables it is told
    # of: the loss scale's must be among them.
    result = json.loads(testing.printed_in_fresh_interpreter(
        _TF1_MODE_FIT, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3"))
    self.assertEqual(result["ours"], result["theirs"])
    self.assertTrue(np.all(np.isfinite(result["ours"]["weights"][0])))


if __name__ == "__main__":
  absltest.main()
