"""A calibrated initial scale, in every family, mode, checkpoint and SavedModel.

The gradients here are float32 and known: a loss `sum(c * var)` has the
gradient `c`, so the calibrated scale is the power of two that puts
`max |c|` in [2**13, 2**14) (`calibration.MARGIN` = 2).
"""

import math

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mplso
from mplso._src.core import calibration
import mplso.contrib
import mplso.keras
from mplso_test.helpers import keras_families
from mplso_test.helpers import strategies
from mplso_test.helpers import testing

NAN, INF = float("nan"), float("inf")
LEARNING_RATE = 0.5
GRADS = [3., -0.5]           # max 3: scale 2**12 (3 * 4096 = 12288).
CALIBRATED = 2.**12
SMALL_GRADS = [1e-3, 2e-3]   # Would calibrate to 2**21: must not.


def expected_scale(max_grad: float) -> float:
  """The calibrated scale, written out in Python."""
  return 2.**(15 - math.floor(math.log2(max_grad)) - calibration.MARGIN)


def tf1_loss_scales():
  """`(name, make)` of the TF1 and contrib loss scales that calibrate."""
  return [
      ("dynamic", lambda: mplso.DynamicLossScale("calibrate")),
      ("contrib", lambda: mplso.contrib.ExponentialUpdateLossScaleManager(
          "calibrate", 2000)),
  ]


def _good_steps(loss_scale):
  return next(v for v in loss_scale.variables if "good_steps" in v.name)


class Tf1FamilyTest(tf.test.TestCase, parameterized.TestCase):
  """The TF1 optimizer, with either loss scale, in every execution mode."""

  @parameterized.product(mode=testing.MODES,
                         loss_scale=[name for name, _ in tf1_loss_scales()])
  def test_first_step_applies_and_picks_the_scale(self, mode, loss_scale):
    make = dict(tf1_loss_scales())[loss_scale]
    with testing.ModeRunner(mode) as runner:
      var = tf.Variable([1., 2.])
      c = tf.Variable(GRADS, trainable=False)
      opt = mplso.MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(LEARNING_RATE), make())
      step = runner.step(lambda: opt.minimize(
          lambda: tf.reduce_sum(c * var), var_list=[var]))
      runner.initialize()
      self.assertEqual(1., runner.read(opt.loss_scale()))
      step()
      # Applied: the first step's gradients were finite at scale 1.
      self.assertAllClose([1. - 0.5 * 3., 2. + 0.5 * 0.5], runner.read(var))
      self.assertEqual(CALIBRATED, runner.read(opt.loss_scale()))
      self.assertEqual(0, runner.read(_good_steps(opt.loss_scale)))
      runner.assign(c, SMALL_GRADS)
      step()
      self.assertEqual(CALIBRATED, runner.read(opt.loss_scale()))

  @parameterized.named_parameters(testing.NAMED_MODES)
  def test_an_overflowing_first_step_halves_as_usual(self, mode):
    with testing.ModeRunner(mode) as runner:
      var = tf.Variable([1., 2.])
      c = tf.Variable([INF, 1.], trainable=False)
      opt = mplso.MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(LEARNING_RATE),
          mplso.DynamicLossScale("calibrate", min_loss_scale=0.25))
      step = runner.step(lambda: opt.minimize(
          lambda: tf.reduce_sum(c * var), var_list=[var]))
      runner.initialize()
      step()
      self.assertAllEqual([1., 2.], runner.read(var))  # Skipped.
      self.assertEqual(0.5, runner.read(opt.loss_scale()))
      runner.assign(c, GRADS)
      step()  # Finite, but calibrated already: ordinary rule.
      self.assertEqual(0.5, runner.read(opt.loss_scale()))

  def test_strategy_replicas_pick_the_largest_replicas_scale(self):
    strategy = strategies.mirrored()
    with strategy.scope():
      loss_scale = mplso.DynamicLossScale("calibrate")
      small = strategy.experimental_distribute_values_from_function(
          lambda context: tf.constant(
              [100.] if context.replica_id_in_sync_group == 1 else [1.]))
      loss_scale.update([small])
    self.assertEqual(expected_scale(100.), float(loss_scale()))


class KerasFamiliesTest(tf.test.TestCase, parameterized.TestCase):
  """Each Keras family, in TF 2.4's dialect and TF 2.3's."""

  def _wrapper(self, family, dialect):
    inner = family.optimizers.SGD(LEARNING_RATE)
    if dialect == "tf_2_4":
      return family.wrapper(inner, initial_scale="calibrate")
    return family.wrapper(inner, mplso.DynamicLossScale("calibrate"))

  def _step(self, family, opt, var, c):
    with tf.GradientTape() as tape:
      loss = opt.get_scaled_loss(tf.reduce_sum(tf.constant(c) * var))
    grads = opt.get_unscaled_gradients(tape.gradient(loss, [var]))
    opt.apply_gradients(zip(grads, [var]))

  @parameterized.product(
      family=[name for name, _ in keras_families.named_keras_families()],
      dialect=["tf_2_4", "tf_2_3"])
  def test_first_step_picks_the_scale(self, family, dialect):
    family = dict(keras_families.named_keras_families())[family]
    opt = self._wrapper(family, dialect)
    var = family.variable(tf.constant([1., 2.]))
    self.assertTrue(opt.dynamic)
    self.assertEqual("calibrate", opt.initial_scale)
    self.assertEqual(1., float(tf.convert_to_tensor(opt.loss_scale)))
    self._step(family, opt, var, GRADS)
    self.assertAllClose([-0.5, 2.25], tf.convert_to_tensor(var))
    self.assertEqual(CALIBRATED, float(tf.convert_to_tensor(opt.loss_scale)))
    # A config round trip calibrates again: it is a new optimizer.
    config = opt.get_config()
    again = type(opt).from_config(config)
    self.assertEqual("calibrate", again.initial_scale)
    self.assertEqual(1., float(tf.convert_to_tensor(again.loss_scale)))

  @parameterized.named_parameters(keras_families.named_keras_families())
  def test_another_string_is_refused_with_the_callers_name(self, family):
    with self.assertRaisesRegex(
        ValueError, r"`initial_scale` must be .* or the string 'calibrate'.*"
        r"Received: initial_scale='auto'"):
      family.wrapper(family.optimizers.SGD(1.), initial_scale="auto")

  def _fit_one_batch(self, strategy):
    family = keras_families.keras_families()[0]  # Keras 3.
    keras = family.keras
    with strategy.scope():
      keras.utils.set_random_seed(0)
      model = keras.Sequential([keras.Input((2,)),
                                keras.layers.Dense(1, use_bias=False)])
      opt = family.wrapper(family.optimizers.SGD(0.),
                           initial_scale="calibrate")
      # loss = sum(y_pred) / 4 over a batch of 4 equal rows: the kernel's
      # gradient is the row, 3 at most.
      model.compile(optimizer=opt, loss=lambda y, p: keras.ops.sum(p) / 4.)
    x = np.array([GRADS] * 4, np.float32)
    model.fit(x, np.zeros((4, 1), np.float32), batch_size=4, verbose=0)
    return float(opt.loss_scale)

  def test_fit_calibrates_on_its_first_batch(self):
    self.assertEqual(CALIBRATED,
                     self._fit_one_batch(tf.distribute.get_strategy()))

  def test_fit_under_a_strategy_reads_each_replicas_gradients(self):
    # Each of the 2 replicas computes its own gradient, half the batch's
    # (max 1.5), before they are summed: float16 holds those, so the scale
    # is picked from them, the same on both replicas.
    self.assertEqual(expected_scale(1.5),
                     self._fit_one_batch(strategies.mirrored()))


  @parameterized.named_parameters(keras_families.named_keras_families())
  def test_to_native_after_calibrating_only(self, family):
    opt = family.wrapper(family.optimizers.SGD(LEARNING_RATE),
                         initial_scale="calibrate")
    var = family.variable(tf.constant([1., 2.]))
    family.build(opt, [var])
    with self.assertRaisesRegex(ValueError, "has not calibrated yet"):
      mplso.keras.to_native(opt)
    self._step(family, opt, var, GRADS)
    native = mplso.keras.to_native(opt)
    self.assertEqual(CALIBRATED, native.initial_scale)
    self.assertEqual(CALIBRATED, float(family.own_scale_and_counter(native)[0]))


class CheckpointTest(tf.test.TestCase, parameterized.TestCase):
  """The calibrated state is saved; a restored scale does not calibrate."""

  @parameterized.named_parameters(*tf1_loss_scales())
  def test_restored_scale_keeps_its_calibration(self, make):
    loss_scale = make()
    loss_scale.update([tf.constant(GRADS)])
    path = tf.train.Checkpoint(loss_scale=loss_scale).save(
        self.create_tempdir().full_path + "/ckpt")
    # TF's keys only: no variable was added for calibrating.
    self.assertEqual(
        sorted(f"loss_scale/{v.name.split(':')[0]}/.ATTRIBUTES/VARIABLE_VALUE"
               for v in loss_scale.variables),
        sorted(name for name, _ in tf.train.list_variables(path)
               if name.startswith("loss_scale/")))
    restored = make()
    tf.train.Checkpoint(loss_scale=restored).restore(path).assert_consumed()
    self.assertEqual(CALIBRATED, float(restored()))
    restored.update([tf.constant(SMALL_GRADS)])
    self.assertEqual(CALIBRATED, float(restored()))

  def test_checkpoint_before_the_first_step_still_calibrates(self):
    path = tf.train.Checkpoint(
        loss_scale=mplso.DynamicLossScale("calibrate")).save(
            self.create_tempdir().full_path + "/ckpt")
    restored = mplso.DynamicLossScale("calibrate")
    tf.train.Checkpoint(loss_scale=restored).restore(path).assert_consumed()
    restored.update([tf.constant(GRADS)])
    self.assertEqual(CALIBRATED, float(restored()))

  def test_a_keras_wrapper_restored_does_not_calibrate(self):
    family = keras_families.keras_families()[0]  # Keras 3.
    opt = family.wrapper(family.optimizers.SGD(LEARNING_RATE),
                         initial_scale="calibrate")
    var = family.variable(tf.constant([1., 2.]))
    KerasFamiliesTest()._step(family, opt, var, GRADS)
    path = tf.train.Checkpoint(optimizer=opt).save(
        self.create_tempdir().full_path + "/ckpt")
    restored = family.wrapper(family.optimizers.SGD(LEARNING_RATE),
                              initial_scale="calibrate")
    tf.train.Checkpoint(optimizer=restored).restore(path).expect_partial()
    var2 = family.variable(tf.constant([1., 2.]))
    KerasFamiliesTest()._step(family, restored, var2, SMALL_GRADS)
    self.assertEqual(CALIBRATED, float(restored.loss_scale))


class SavedModelTest(tf.test.TestCase, parameterized.TestCase):
  """A saved training step calibrates where it was left, once."""

  def _module(self):
    module = tf.Module()
    module.var = tf.Variable([1., 2.])
    module.opt = mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(LEARNING_RATE),
        mplso.DynamicLossScale("calibrate"))

    @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
    def train(c):
      module.opt.minimize(lambda: tf.reduce_sum(c * module.var),
                          var_list=[module.var])
      return module.opt.loss_scale()

    module.train = train
    return module

  @parameterized.named_parameters(
      ("after_calibrating", True, CALIBRATED),
      ("before_the_first_step", False, expected_scale(max(SMALL_GRADS))))
  def test_round_trip(self, step_first, expected):
    module = self._module()
    if step_first:
      module.train(tf.constant(GRADS))
    path = self.create_tempdir().full_path
    tf.saved_model.save(module, path)
    loaded = tf.saved_model.load(path)
    self.assertEqual(expected, float(loaded.train(tf.constant(SMALL_GRADS))))
    self.assertEqual(expected, float(loaded.train(tf.constant(GRADS))))


class DefaultUnchangedTest(tf.test.TestCase):
  """Without "calibrate" the update builds no calibrating op."""

  def _op_types(self, make):
    graph = tf.Graph()
    with graph.as_default():
      make().update_from_flag([tf.constant(GRADS)], tf.constant(True))
    graph_def = graph.as_graph_def()
    # The ops of the graph, and of the functions of its conditionals.
    return ({node.op for node in graph_def.node} |
            {node.op for function in graph_def.library.function
             for node in function.node_def})

  def test_no_calibration_ops_unless_asked(self):
    calibrating = {"Bitcast", "Abs", "Max"}
    for make in (mplso.DynamicLossScale,
                 lambda: mplso.contrib.ExponentialUpdateLossScaleManager(
                     2**15, 2000)):
      self.assertEmpty(calibrating & self._op_types(make))
    for _, make in tf1_loss_scales():
      self.assertContainsSubset(calibrating, self._op_types(make))


class AfterCalibratingTest(tf.test.TestCase):
  """What a step after the calibrating one runs, in a TF1 session."""

  def _executed_nodes(self, gradients: int, initial) -> int:
    """Nodes the second step runs (after Grappler), in its step stats."""
    graph = tf.Graph()
    with graph.as_default():
      fed = tf.compat.v1.placeholder(tf.float32, [2])
      variables = [tf.Variable([1., 2.]) for _ in range(gradients)]
      opt = mplso.MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(0.5),
          mplso.DynamicLossScale(initial))
      step = opt.apply_gradients(
          [(fed * (i + 1.), v) for i, v in enumerate(variables)])
      init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as session:
      session.run(init)
      session.run(step, {fed: [0., 1.]})  # Calibrates, if asked.
      metadata = tf.compat.v1.RunMetadata()
      session.run(step, {fed: [0., 1.]}, options=tf.compat.v1.RunOptions(
          trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
                  run_metadata=metadata)
      if initial == "calibrate":  # 2**13 <= max |g| * scale < 2**14.
        self.assertEqual(expected_scale(gradients),
                         session.run(opt.loss_scale()))
    return sum(len(d.node_stats) for d in metadata.step_stats.dev_stats)

  def test_no_node_per_gradient_once_calibrated(self):
    # The calibrating cond is not lowered to a Switch per gradient: a later
    # step runs the same few nodes more, for 2 or 20 gradients.
    added = {n: (self._executed_nodes(n, "calibrate") -
                 self._executed_nodes(n, 1024.)) for n in (2, 20)}
    self.assertEqual(added[2], added[20])
    self.assertBetween(added[2], 1, 20)


if __name__ == "__main__":
  absltest.main()
