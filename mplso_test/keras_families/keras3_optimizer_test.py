"""What the Keras 3 family alone does; family_contract_test.py has the rest.

Keras 3's trainer protocol (`scale_loss`, then scaled gradients to
`apply_gradients`), split in any way between eager code, functions and
replicas; the wrapped optimizer's `loss_scale_factor` and gradient
accumulation; Keras 3's own arguments, attributes and variables.
"""

import os

from absl.testing import absltest
from absl.testing import parameterized
import keras
import tensorflow as tf

import mplso
import mplso.keras
from mplso_test.helpers import keras_families
from mplso_test.helpers import testing

NAN, INF = testing.NAN, testing.INF

# Steps whose batch holds a non-finite input, and which. Enough finite steps
# in a row (increment_period=3) to grow the scale twice.
POISON = {2: NAN, 3: INF, 7: -INF}
STEPS = 14


def _twins(make_inner, protocol=keras_families.KERAS_TRAINER,
           use_function=False):
  """Ours and Keras 3's class around `make_inner()`, each with a model.

  Returns `(ours, ours_model), (theirs, theirs_model), step`: `step(batch)`
  steps both, ours in `protocol`, Keras 3's in its trainer's.
  """
  ours_model = keras_families.keras_model(keras)
  theirs_model = keras_families.keras_model(keras)
  ours = mplso.keras.LossScaleOptimizer(
      make_inner(), mplso.DynamicLossScale(2.**10, increment_period=3))
  theirs = keras.optimizers.LossScaleOptimizer(
      make_inner(), initial_scale=2.**10, dynamic_growth_steps=3)
  ours_step = keras_families.keras_step(protocol, ours_model, ours,
                                        use_function)
  theirs_step = keras_families.keras_step(
      keras_families.KERAS_TRAINER, theirs_model, theirs, use_function)

  def step(batch):
    ours_step(batch)
    theirs_step(batch)

  return (ours, ours_model), (theirs, theirs_model), step


class ParityWithKerasTest(tf.test.TestCase, parameterized.TestCase):
  """Where the wrapped Keras 3 optimizer does some of the work itself."""

  def _assert_same_weights(self, ours_model, theirs_model, msg=None):
    for a, b in zip(ours_model.get_weights(), theirs_model.get_weights()):
      self.assertAllEqual(a, b, msg=msg)

  @parameterized.parameters(keras_families.KERAS_TRAINER, keras_families.TF_2_3)
  def test_inner_loss_scale_factor_is_turned_off_as_keras_does(self, protocol):
    # Left on, the wrapped optimizer would divide the unscaled gradients by
    # its own factor again: steps 128 times too small.
    (ours, ours_model), (_, theirs_model), step = _twins(
        lambda: keras.optimizers.SGD(0.01, loss_scale_factor=128.), protocol)
    self.assertIsNone(ours.inner_optimizer.loss_scale_factor)
    before = [w.copy() for w in ours_model.get_weights()]
    for i in range(3):
      step(keras_families.keras_batch(i))
    self._assert_same_weights(ours_model, theirs_model)
    self.assertNotAllClose(before[0], ours_model.get_weights()[0])

  @parameterized.parameters(False, True)
  def test_gradient_accumulation_as_keras(self, use_function):
    # A skipped step accumulates nothing and, with accumulation, does not
    # advance the count the accumulation windows follow (Keras 3's class
    # leaves it too): the same weights as Keras 3's class, skips included.
    (ours, ours_model), (theirs, theirs_model), step = _twins(
        lambda: keras.optimizers.SGD(0.01, gradient_accumulation_steps=2),
        use_function=use_function)
    before = [w.copy() for w in ours_model.get_weights()]
    for i in range(STEPS):
      step(keras_families.keras_batch(i, POISON))
      self.assertEqual(float(ours.loss_scale()), float(theirs.dynamic_scale))
      self.assertEqual(int(ours.iterations), int(theirs.iterations))
      self._assert_same_weights(ours_model, theirs_model, msg=f"step {i}")
    self.assertNotAllClose(before[0], ours_model.get_weights()[0])

  def test_fit_with_gradient_accumulation(self):
    inputs, y = keras_families.keras_data(32)
    model = keras_families.keras_model(keras)
    model.compile(optimizer=mplso.keras.LossScaleOptimizer(
        keras.optimizers.SGD(0.01, gradient_accumulation_steps=2),
        "dynamic"), loss="mse")
    before = [w.copy() for w in model.get_weights()]
    model.fit(inputs, y, batch_size=8, epochs=1, verbose=0)
    self.assertEqual(int(model.optimizer.iterations), len(y) // 8 // 2)
    self.assertNotAllClose(before[0], model.get_weights()[0])

  def test_scale_never_below_one_unlike_keras(self):
    # Keras 3's wrapper halves its scale on every bad step without a floor;
    # TF 2.3's DynamicLossScale, which ours follows, stops at 1.
    var = tf.Variable(1.0)
    ours = mplso.keras.LossScaleOptimizer(keras.optimizers.SGD(0.1),
                                          mplso.DynamicLossScale(4.0))
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


class CustomLoopTest(tf.test.TestCase):

  def test_minimize_keras_variables(self):
    opt = mplso.keras.LossScaleOptimizer(keras.optimizers.SGD(0.25),
                                         "dynamic")
    var = keras.Variable(1.0)
    opt.minimize(lambda: var**2, var_list=[var])
    self.assertEqual(float(var.numpy()), 0.5)


class SaveAndLoadTest(tf.test.TestCase):

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


class DialectTest(tf.test.TestCase):

  def test_keras_3_base_arguments_at_their_defaults_are_accepted(self):
    # Keras 3's class accepts them so that older configs load.
    opt = mplso.keras.LossScaleOptimizer(
        keras.optimizers.SGD(0.1), use_ema=False, ema_momentum=0.99,
        clipnorm=None, gradient_accumulation_steps=None)
    self.assertIsInstance(opt, keras.optimizers.LossScaleOptimizer)


class AttributeSurfaceTest(tf.test.TestCase):
  """What Keras 3's class exposes works on mplso's wrapper."""

  def test_keras_3_names_after_steps_match_keras_3s_class(self):
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


def _int_gradient_step(opt, var):

  def step(grad):
    opt.scale_loss(tf.constant(1.))  # Keras 3's protocol: scaled gradients.
    opt.apply_gradients([(grad, var)])

  return step


class GradientDtypeTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(("eager", False), ("function", True))
  def test_integer_gradients_are_cast_as_keras_3_casts_them(self, function):
    # Keras 3's class and a bare optimizer cast an int gradient to the
    # variable's dtype; the finite check must not see it as an int.
    values = {}
    for name, make in (("ours", mplso.keras.LossScaleOptimizer),
                       ("theirs", keras.optimizers.LossScaleOptimizer)):
      opt = make(keras.optimizers.SGD(0.5))
      var = keras.Variable([1., 2.])
      opt.build([var])
      step = _int_gradient_step(opt, var)
      step = tf.function(step) if function else step
      step(tf.constant([2**16, 2**17]))
      step(tf.constant([2**15, 0]))
      values[name] = var.numpy().tolist()
    self.assertEqual([-0.5, 0.], values["theirs"])
    self.assertEqual(values["theirs"], values["ours"])

  def test_integer_gradient_of_sparse_values_is_cast(self):
    opt = mplso.keras.LossScaleOptimizer(keras.optimizers.SGD(1.))
    var = keras.Variable([1., 2., 3.])
    opt.apply_gradients([(tf.IndexedSlices(tf.constant([1, 2]),
                                           tf.constant([0, 2]),
                                           tf.constant([3])), var)])
    self.assertEqual([0., 2., 1.], var.numpy().tolist())


class BadInputTest(tf.test.TestCase):

  def test_minimize_without_variables_raises_as_tf1_optimizers(self):
    var = keras.Variable(1.)
    with self.assertRaisesRegex(ValueError,
                                "No gradients provided for any variable"):
      tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
          lambda: var.value * 2., var_list=[])
    opt = mplso.keras.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    with self.assertRaisesRegex(
        ValueError, "No gradients provided for any variable.*var_list"):
      opt.minimize(lambda: var.value * 2., [])
    self.assertEqual(0, int(opt.iterations))

  def test_own_aggregation_refused_with_several_replicas(self):
    # Reduced through one device: collective all-reduces run eagerly here
    # would share instance keys with other tests' strategies.
    strategy = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"],
        cross_device_ops=tf.distribute.ReductionToOneDevice())
    with strategy.scope():
      var = tf.Variable(1.0)
      opt = mplso.keras.LossScaleOptimizer(keras.optimizers.SGD(0.1))

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
    mplso.keras.LossScaleOptimizer(keras.optimizers.SGD(0.5)).apply_gradients(
        [(tf.constant(1.0), plain)], experimental_aggregate_gradients=False)
    self.assertEqual(float(plain), 0.5)


if __name__ == "__main__":
  absltest.main()
