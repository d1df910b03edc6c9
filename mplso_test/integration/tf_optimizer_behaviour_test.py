"""TF 2.3's own tests of its TF1 loss-scale optimizer, run on mplso's.

TF 2.3 tested the TF1 `MixedPrecisionLossScaleOptimizer` in
tensorflow/python/training/experimental/loss_scale_optimizer_test.py, in
graph and eager mode, most with and without a MirroredStrategy. Its
behaviours are written anew here and run on mplso's class and, in the same
test on the same inputs, on TF's own class that TF 2.21 still ships
(`tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer`): both
must agree, except where mplso deviates on purpose, which the test then
asserts. The loss scales' tests are in tf_loss_scale_behaviour_test.py,
which also says how the MirroredStrategy runs.

TF's test -> the test that covers it ("here" is this file; the others are
mplso_test/FILE::CLASS::TEST, a FILE without a folder being in integration/).
MODE is graph or eager, STRATEGY no_strategy or mirrored.

loss_scale_optimizer_test.py (MixedPrecisionLossScaleOptimizerTest)
  testFixedLossScaleAppliedToLossWithMinimize, testDynamicLossScale -> here
      OptimizerTest::test_loss_scaled_before_differentiation_{fixed,dynamic}_
      MODE_STRATEGY; before: tf1/v1_optimizer_test.py::ComputeGradientsTest
      (unscaled gradients, no strategy).
  testFixedLossScaleAppliedToLossWithGetGradients -> here OptimizerTest::
      test_compute_gradients_of_tensor_loss_{fixed,dynamic} (graph).
  testDynamicUpdate -> here OptimizerTest::
      test_dynamic_update_{dynamic,fixed}_MODE_STRATEGY; before:
      tf1/v1_optimizer_test.py::ApplyGradientsTest (no strategy),
      distribute_test.py::DistributeTest::test_skip_together_v1_* and
      test_v1_graph_session_skip_together_v1_* (tf.function and graph), and
      config_matrix_test.py::Tf1MatrixTest (graph).
  testDynamicLossScaleWithSlots -> here OptimizerTest::
      test_slots_MODE_STRATEGY; before: tf1/v1_optimizer_test.py::
      PassthroughAndTrackingTest (eager, no strategy) and
      tf_parity_test.py::DynamicParityTest (momentum, no strategy).
  testCheckpoint -> here OptimizerTest::test_checkpoint_MODE_STRATEGY;
      before: tf1/v1_optimizer_test.py::PassthroughAndTrackingTest::
      test_checkpoint_saves_slots_once_and_restores_everything (eager) and
      distribute_test.py::DistributeTest::
      test_checkpoint_moves_between_strategy_and_none_v1_* (tf.function).
  testPassingNoneToLossScale -> tf1/v1_optimizer_test.py::BadInputTest::
      test_errors_start_with_tf_wording; here RaisesLikeTfTest::
      test_loss_scale_none, with TF's other errors of these classes.
  Beyond TF's file: sparse gradients, NaN, +Inf
      and -Inf on one replica, global_step, compute_gradients +
      apply_gradients, slots and loss scale state after every step -> here
      OptimizerTest::test_skips_nonfinite_sparse_and_dense_MODE_STRATEGY;
      before: tf1/v1_optimizer_test.py::ApplyGradientsTest and
      tf_parity_test.py::DynamicParityTest (no strategy).
"""

from __future__ import annotations

import os

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mplso_test.helpers import testing
from mplso_test.helpers import tf_behaviour_cases
from mplso_test.helpers.tf_behaviour_cases import EAGER
from mplso_test.helpers.tf_behaviour_cases import GRAPH
from mplso_test.helpers.tf_behaviour_cases import IMPLEMENTATIONS
from mplso_test.helpers.tf_behaviour_cases import INF
from mplso_test.helpers.tf_behaviour_cases import MIRRORED
from mplso_test.helpers.tf_behaviour_cases import NAN
from mplso_test.helpers.tf_behaviour_cases import agreed
from mplso_test.helpers.tf_behaviour_cases import is_last_replica
from mplso_test.helpers.tf_behaviour_cases import make_strategy
from mplso_test.helpers.tf_behaviour_cases import matrix
from mplso_test.helpers.tf_behaviour_cases import not_converted
from mplso_test.helpers.tf_behaviour_cases import running
from mplso_test.helpers.tf_behaviour_cases import scale_variables


def identity_expecting_gradient(expected: float):
  """The identity, whose backward pass fails unless its gradient is `expected`.

  Shows the gradient that reaches the loss, that is, the loss scale over the
  number of replicas.
  """

  @tf.custom_gradient
  def identity(x):
    def grad(upstream):
      check = tf.debugging.assert_equal(
          upstream, tf.cast(expected, upstream.dtype),
          message="the gradient reaching the loss")
      with tf.control_dependencies([check]):
        return tf.identity(upstream)
    return tf.identity(x), grad

  return identity


def replica_step(runner, strategy, replica_fn):
  """A callable that runs `replica_fn` once on every replica."""

  def build():
    results = strategy.run(not_converted(replica_fn))
    if runner.graph_mode:
      return tf.group(strategy.experimental_local_results(results))
    return None

  return runner.step(build)


def feeder(runner, variables: dict[str, tf.Variable]):
  """Returns `feed(values)`, which assigns `values[name]` to `variables[name]`.

  Mirrored variables too: in a graph through assign ops built here (a
  mirrored variable has no `load`).
  """
  if not runner.graph_mode:
    return lambda values: [variables[k].assign(v) for k, v in values.items()]
  placeholders = {k: tf.compat.v1.placeholder(v.dtype, v.shape)
                  for k, v in variables.items()}
  assign = tf.group([v.assign(placeholders[k]) for k, v in variables.items()])
  return lambda values: runner.session.run(
      assign, {placeholders[k]: v for k, v in values.items()})


def global_step_variable() -> tf.Variable:
  """A global step as `tf.compat.v1.train.create_global_step` makes it."""
  return tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)


def sgd(learning_rate):
  return tf.compat.v1.train.GradientDescentOptimizer(learning_rate)


def momentum():
  return tf.compat.v1.train.MomentumOptimizer(1., momentum=1.)


# Data of OptimizerTest.test_skips_nonfinite_sparse_and_dense, step by step:
# the poison goes into the last replica's share only.
POISON_SCHEDULE = [None, "nan_dense", None, "inf_sparse", "minus_inf_dense",
                   "nan_sparse"]


class _Twin:
  """A dense and an embedding variable, and one implementation's optimizer.

      loss = (sum(w * x) + sum(gather(emb, [0, 2]) * u)) / replicas

  with `x` and `u` plus, on the last replica, this step's poison.
  """

  def __init__(self, classes, data):
    self.data = data
    self.w = tf.Variable([1., -2., 3.], name="w")
    self.emb = tf.Variable(np.arange(8, dtype=np.float32).reshape(4, 2),
                           name="emb")
    self.base = tf.compat.v1.train.AdamOptimizer(0.1)
    self.loss_scale = classes.dynamic(initial_loss_scale=8., increment_period=2)
    self.opt = classes.optimizer(self.base, self.loss_scale)
    self.global_step = global_step_variable()

  def replica_fn(self):
    poison = is_last_replica()
    x = self.data["x"] + (self.data["x_poison"] if poison else 0.)
    u = self.data["u"] + (self.data["u_poison"] if poison else 0.)
    def loss():
      replicas = tf.distribute.get_replica_context().num_replicas_in_sync
      return (tf.reduce_sum(self.w * x) +
              tf.reduce_sum(tf.gather(self.emb, [0, 2]) * u)) / replicas

    # A tensor in a graph, as TF1 code passes it; a callable eagerly.
    grads_and_vars = self.opt.compute_gradients(
        loss if tf.executing_eagerly() else loss(), [self.w, self.emb])
    return self.opt.apply_gradients(grads_and_vars,
                                    global_step=self.global_step)

  def state(self):
    scale, good_steps = scale_variables(self.loss_scale)
    state = {"w": self.w, "emb": self.emb, "scale": scale,
             "good_steps": good_steps, "global_step": self.global_step}
    for var, name in ((self.w, "w"), (self.emb, "emb")):
      for slot in ("m", "v"):
        state[f"{name}/{slot}"] = self.base.get_slot(var, slot)
    return state


class OptimizerTest(tf.test.TestCase, parameterized.TestCase):
  """TF's MixedPrecisionLossScaleOptimizer tests, on TF's class and ours."""

  def _make(self, classes, loss_scale, opt):
    """Returns `(optimizer, loss scale)`; "dynamic": 2, doubling each step."""
    if loss_scale == "dynamic":
      loss_scale = classes.dynamic(initial_loss_scale=2, increment_period=1,
                                   multiplier=2)
    else:
      loss_scale = classes.fixed(loss_scale)
    return classes.optimizer(opt, loss_scale), loss_scale

  @parameterized.named_parameters(matrix(
      ("fixed", 10., [10.], [[3.]]),
      ("dynamic", "dynamic", [2., 4.], [[3.], [1.]])))
  def test_loss_scaled_before_differentiation(self, loss_scale, scales,
                                              var_values, mode, strategy_id):
    # The gradient reaching the loss is the scale over the replicas, and
    # the variable moves by the unscaled gradient (1) times the rate (2).
    with running(mode, strategy_id) as (runner, strategy):
      replicas = strategy.num_replicas_in_sync
      for classes in IMPLEMENTATIONS.values():
        var = tf.Variable([5.])
        opt, _ = self._make(classes, loss_scale, sgd(2.))

        def replica_fn(scale, var=var, opt=opt):
          check = identity_expecting_gradient(scale / replicas)
          return opt.minimize(lambda: check(var) / replicas, var_list=[var])

        steps = [replica_step(runner, strategy,
                              lambda s=s, f=replica_fn: f(s)) for s in scales]
        runner.initialize()
        for step, expected in zip(steps, var_values):
          step()
          self.assertAllEqual(expected, agreed(runner, var))

  @parameterized.named_parameters(("fixed", 10.), ("dynamic", 2.**15))
  def test_compute_gradients_of_tensor_loss(self, scale):
    with testing.ModeRunner(GRAPH) as runner:
      for classes in IMPLEMENTATIONS.values():
        var = tf.Variable([2.])
        loss_scale = scale if scale == 10. else classes.dynamic(scale)
        opt = classes.optimizer(sgd(1.), loss_scale)
        loss = identity_expecting_gradient(scale)(var)
        (grad, got_var), = opt.compute_gradients(loss, [var])
        self.assertIs(var, got_var)
        runner.initialize()
        self.assertAllEqual([1.], runner.run(grad))  # Checked, unscaled.

  @parameterized.named_parameters(matrix(("dynamic", "dynamic"),
                                          ("fixed", 2.)))
  def test_dynamic_update(self, loss_scale, mode, strategy_id):
    with running(mode, strategy_id) as (runner, strategy):
      got = {}
      for name, classes in IMPLEMENTATIONS.items():
        var = tf.Variable([1., 2.])
        global_step = global_step_variable()
        opt, scale = self._make(classes, loss_scale, sgd(1.))

        def replica_fn(poison, var=var, opt=opt, global_step=global_step):
          factor = NAN if poison and is_last_replica() else 2.

          def loss():
            replicas = tf.distribute.get_replica_context().num_replicas_in_sync
            return tf.reduce_sum(var * factor) / replicas

          return opt.minimize(loss if runner.mode == EAGER else loss(),
                              var_list=[var], global_step=global_step)

        steps = [replica_step(runner, strategy,
                              lambda p=p, f=replica_fn: f(p))
                 for p in (False, True)]
        runner.initialize()
        got[name] = []
        for step in steps:
          step()
          got[name].append((agreed(runner, var).tolist(),
                            float(runner.run(scale())),
                            int(agreed(runner, global_step))))
      # A finite step (gradient 2) is applied; a NaN on one replica is not,
      # and a dynamic scale halves.
      if loss_scale == "dynamic":
        expected = [([-1., 0.], 4., 1), ([-1., 0.], 2., 1)]
        self.assertEqual([expected] * 2, [got["ours"], got["theirs"]])
      else:
        # Deliberate difference: under a fixed scale mplso skips the step
        # too; TF's class applies the NaN and counts the step.
        self.assertEqual([([-1., 0.], 2., 1), ([-1., 0.], 2., 1)], got["ours"])
        self.assertEqual(got["ours"][0], got["theirs"][0])
        self.assertTrue(np.isnan(got["theirs"][1][0]).all())
        self.assertEqual(2, got["theirs"][1][2])

  @parameterized.named_parameters(matrix(("",)))
  def test_slots(self, mode, strategy_id):
    with running(mode, strategy_id) as (runner, strategy):
      for name, classes in IMPLEMENTATIONS.items():
        var = tf.Variable([1., 2.])
        base = momentum()
        loss_scale = classes.dynamic(initial_loss_scale=2., increment_period=1,
                                     multiplier=4)
        opt = classes.optimizer(base, loss_scale)
        step = replica_step(
            runner, strategy, lambda var=var, opt=opt: opt.minimize(
                lambda: tf.reduce_sum(var) / strategy.num_replicas_in_sync,
                var_list=[var]))
        runner.initialize()
        # The accumulator grows by the gradient (1) each step and the
        # variable falls by the accumulator; the scale grows 4-fold a step.
        for expected_var, expected_scale in (([0., 1.], 8.), ([-2., -1.], 32.)):
          step()
          self.assertAllEqual(expected_var, agreed(runner, var), msg=name)
          self.assertEqual(expected_scale, runner.run(loss_scale()), msg=name)
        slot = base.get_slot(var, "momentum")
        self.assertAllEqual([2., 2.], agreed(runner, slot))
        scale_vars = list(scale_variables(loss_scale))
        self.assertEqual(base.variables() + scale_vars, opt.variables())
        if name == "ours":
          self.assertIs(slot, opt.get_slot(var, "momentum"))
          self.assertEqual(["momentum"], opt.get_slot_names())
        else:  # Deliberate difference: TF's wrapper has no slots of its own.
          self.assertIsNone(opt.get_slot(var, "momentum"))
          self.assertEqual([], opt.get_slot_names())

  @parameterized.named_parameters(matrix(("",)))
  def test_checkpoint(self, mode, strategy_id):
    # Saved and restored outside the strategy's scope: a graph-mode
    # `Checkpoint` made inside a MirroredStrategy's cannot save (its save
    # counter is then mirrored), which is why TF's test skipped that case.
    with testing.ModeRunner(mode) as runner:
      strategy = make_strategy(strategy_id, mode)
      for name, classes in IMPLEMENTATIONS.items():
        with strategy.scope():
          var = tf.Variable([2.])
          loss_scale = classes.dynamic(initial_loss_scale=1.,
                                       increment_period=2., multiplier=2.)
          opt = classes.optimizer(momentum(), loss_scale)
          step = replica_step(
              runner, strategy, lambda var=var, opt=opt: opt.minimize(
                  lambda: var + 1., var_list=[var]))
        checkpoint = tf.train.Checkpoint(optimizer=opt, var=var)
        runner.initialize()
        step()
        state = [var, *scale_variables(loss_scale)]
        saved = [agreed(runner, v, strategy) for v in state]
        self.assertEqual([1., 1], [float(saved[1]), int(saved[2])], name)
        path = checkpoint.save(os.path.join(self.get_temp_dir(), name))
        step()
        self.assertEqual([2., 0], [agreed(runner, v, strategy)
                                   for v in state[1:]], name)
        checkpoint.restore(path).assert_consumed().run_restore_ops()
        for expected, v in zip(saved, state):
          self.assertAllEqual(expected, agreed(runner, v, strategy), msg=name)

  @parameterized.named_parameters(matrix(("",)))
  def test_skips_nonfinite_sparse_and_dense(self, mode, strategy_id):
    with running(mode, strategy_id) as (runner, strategy):
      poisons = {"x_poison": tf.Variable(tf.zeros([3]), trainable=False),
                 "u_poison": tf.Variable(tf.zeros([2, 2]), trainable=False)}
      feed = feeder(runner, poisons)
      data = {"x": tf.constant([1., 2., -1.]),
              "u": tf.constant([[1., -1.], [2., .5]]), **poisons}
      twins = {name: _Twin(classes, data)
               for name, classes in IMPLEMENTATIONS.items()}
      steps = {name: replica_step(runner, strategy, twin.replica_fn)
               for name, twin in twins.items()}
      runner.initialize()
      applied = 0
      for i, poison in enumerate(POISON_SCHEDULE):
        x_poison, u_poison = np.zeros([3], np.float32), np.zeros([2, 2],
                                                                  np.float32)
        value = {"nan": NAN, "inf": INF, "minus_inf": -INF}[
            poison.rsplit("_", 1)[0]] if poison else 0.
        if poison and poison.endswith("dense"):
          x_poison[i % 3] = value
        elif poison:
          u_poison[1, i % 2] = value
        feed({"x_poison": x_poison, "u_poison": u_poison})
        for name in twins:
          steps[name]()
        applied += poison is None
        states = {name: {key: agreed(runner, value)
                         for key, value in twin.state().items()}
                  for name, twin in twins.items()}
        for key, value in states["theirs"].items():
          self.assertAllEqual(value, states["ours"][key],
                              msg=f"step {i} ({poison}): {key}")
          self.assertTrue(np.isfinite(value).all(), f"step {i}: {key}")
        self.assertEqual(applied, states["ours"]["global_step"], f"step {i}")


def _eager_tensor_loss(classes):
  classes.optimizer(sgd(1.), 8).compute_gradients(tf.constant(1.),
                                                  [tf.Variable(1.)])


def _apply_in_cross_replica_context(classes):
  with make_strategy(MIRRORED, EAGER).scope():
    var = tf.Variable(1.)
    classes.optimizer(sgd(1.), "dynamic").apply_gradients(
        [(tf.constant(1.), var)])


def _no_gradients(classes):
  classes.optimizer(sgd(1.), "dynamic").apply_gradients(
      [(None, tf.Variable(1.))])


def _apply_dense(classes):
  classes.optimizer(sgd(1.), 8)._apply_dense(None, None)  # pylint: disable=protected-access


def _resource_apply_sparse(classes):
  classes.optimizer(sgd(1.), 8)._resource_apply_sparse(None, None, None)  # pylint: disable=protected-access


class RaisesLikeTfTest(tf.test.TestCase, parameterized.TestCase):
  """Where TF's classes raise, ours raise the same type, TF's words first."""

  @parameterized.named_parameters(
      ("_loss_scale_none", lambda c: c.optimizer(sgd(1.), None), ValueError,
       "loss_scale cannot be None"),
      ("_opt_not_an_optimizer", lambda c: c.optimizer(3, 8), ValueError,
       "\"opt\" must be an instance of Optimizer, but got: <class 'int'>"),
      ("_unknown_identifier", lambda c: c.optimizer(sgd(1.), "static"),
       ValueError, "Could not interpret loss scale identifier: static"),
      ("_fixed_not_a_number", lambda c: c.fixed("8"), ValueError,
       "loss_scale_value must be a Python int or float."),
      ("_fixed_below_one", lambda c: c.fixed(.5), ValueError,
       "loss_scale_value must be at least 1."),
      ("_eager_tensor_loss", _eager_tensor_loss, RuntimeError,
       "`loss` passed to Optimizer.compute_gradients should be a function "
       "when eager execution is enabled."),
      ("_apply_in_cross_replica_context", _apply_in_cross_replica_context,
       ValueError, "apply_gradients() must be called in a replica context."),
      ("_no_gradients", _no_gradients, ValueError,
       "No gradients provided for any variable"),
      ("_apply_dense", _apply_dense, RuntimeError,
       "This function should never be called"),
      ("_resource_apply_sparse", _resource_apply_sparse, RuntimeError,
       "This function should never be called"),
  )
  def test(self, call, error, tf_words):
    for name, classes in IMPLEMENTATIONS.items():
      with self.subTest(name), self.assertRaises(error) as raised:
        call(classes)
      self.assertTrue(str(raised.exception).startswith(tf_words),
                      f"{name}: {raised.exception}")


if __name__ == "__main__":
  tf_behaviour_cases.split_cpu()
  absltest.main()
