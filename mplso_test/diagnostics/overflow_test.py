"""`mplso.overflow_log` on every optimizer family, and the stall guard in fit."""

import importlib
import json

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

import mplso
from mplso import contrib
import mplso.keras
from mplso_test.helpers import processes
from mplso_test.helpers import testing

NAN, INF = float("nan"), float("inf")

# Every family: how to make its optimizer and its variables.
KERAS_FAMILIES = {
    "keras_3": lambda: importlib.import_module("keras").optimizers.SGD(0.5),
    "tf_keras": lambda: importlib.import_module(
        "tf_keras").optimizers.SGD(0.5),
    "tf_keras_legacy": lambda: importlib.import_module(
        "tf_keras").optimizers.legacy.SGD(0.5),
}
# A NaN into `a`'s gradient and an Inf into `b`'s, finite steps between.
SCHEDULE = [(1., 1.), (NAN, 1.), (1., 1.), (1., -INF), (NAN, INF), (1., 1.)]
EXPECTED_KINDS = [(["a"], []), ([], ["b"]), (["a"], ["b"])]


# The TF1 families: their optimizers, with a fixed scale of 8.
V1_FAMILIES = {
    "v1": lambda: mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.5), 8),
    "contrib": lambda: contrib.LossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.5),
        contrib.FixedLossScaleManager(8)),
}


def _keras_variables(family):
  if family == "keras_3":
    keras = importlib.import_module("keras")
    return (keras.Variable([1., 2.], name="a"),
            keras.Variable(3., name="b"))
  return tf.Variable([1., 2.], name="a"), tf.Variable(3., name="b")


def _variables_and_optimizer(family):
  """Variables `a` ([1, 2]) and `b` (3), and `family`'s optimizer.

  A Keras family's optimizer is wrapped with a fixed loss scale of 8.
  """
  a, b = _keras_variables(family)  # tf.Variables but for Keras 3.
  if family in V1_FAMILIES:
    return a, b, V1_FAMILIES[family]()
  return a, b, mplso.keras.LossScaleOptimizer(KERAS_FAMILIES[family](), 8)


def _kinds(log):
  return [(e["nan"], e["inf"]) for e in log]


def _names(log):
  """Keras 3 variables' paths are their names outside any layer."""
  return [([n.split("/")[-1] for n in nan], [n.split("/")[-1] for n in inf])
          for nan, inf in _kinds(log)]


class FamiliesTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{family}_{mode}", family, mode)
      for family in [*KERAS_FAMILIES, *V1_FAMILIES]
      for mode in ("eager", "function", "xla"))
  def test_names_kinds_and_steps(self, family, mode):
    a, b, opt = _variables_and_optimizer(family)

    def step(grad_a, grad_b):
      opt.apply_gradients([(tf.fill([2], grad_a), a), (grad_b, b)])

    if mode != "eager":
      step = tf.function(step, jit_compile=mode == "xla")
    for grad_a, grad_b in SCHEDULE:
      step(tf.constant(grad_a), tf.constant(grad_b))
    log = mplso.overflow_log(opt)
    # Keras `iterations`, or the count the TF1 families keep without a
    # global_step: both advance on skipped steps too.
    self.assertEqual([1, 3, 4], [e["step"] for e in log])
    self.assertEqual(EXPECTED_KINDS, _names(log))
    self.assertEqual([8.] * 3, [e["loss_scale"] for e in log])
    self.assertEqual([[0]] * 3, [e["replicas"] for e in log])
    if family in KERAS_FAMILIES:
      self.assertEqual(len(SCHEDULE), int(opt.iterations))

  @parameterized.named_parameters(*testing.NAMED_MODES)
  def test_contrib_names_kinds_and_global_step(self, mode):
    with testing.ModeRunner(mode) as runner:
      a = tf.Variable([1., 2.], name="a")
      b = tf.Variable(3., name="b")
      grad_a, grad_b = tf.Variable(0.), tf.Variable(0.)
      global_step = tf.Variable(0, dtype=tf.int64)
      opt = contrib.LossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(0.5),
          contrib.FixedLossScaleManager(4))
      step = runner.step(lambda: opt.apply_gradients(
          [(tf.fill([2], tf.convert_to_tensor(grad_a)), a),
           (tf.convert_to_tensor(grad_b), b)], global_step=global_step))
      runner.initialize()
      for value_a, value_b in SCHEDULE:
        runner.assign(grad_a, value_a)
        runner.assign(grad_b, value_b)
        step()
      log = mplso.overflow_log(opt, session=runner.session)
    # global_step advances only on applied steps.
    self.assertEqual([1, 2, 2], [e["step"] for e in log])
    self.assertEqual(EXPECTED_KINDS, _kinds(log))
    self.assertEqual([4.] * 3, [e["loss_scale"] for e in log])

  def test_tf_keras_legacy_in_a_tf1_session(self):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
      a, b = _keras_variables("tf_keras_legacy")
      grad_a = tf.compat.v1.placeholder(tf.float32, [])
      grad_b = tf.compat.v1.placeholder(tf.float32, [])
      opt = mplso.keras.LossScaleOptimizer(
          KERAS_FAMILIES["tf_keras_legacy"](), 8)
      train_op = opt.apply_gradients([(tf.fill([2], grad_a), a),
                                      (grad_b, b)])
      session.run(tf.compat.v1.global_variables_initializer())
      for value_a, value_b in SCHEDULE:
        session.run(train_op, {grad_a: value_a, grad_b: value_b})
      log = mplso.overflow_log(opt, session)
      self.assertEqual(len(SCHEDULE), session.run(opt.iterations))
    self.assertEqual([1, 3, 4], [e["step"] for e in log])
    self.assertEqual(EXPECTED_KINDS, _names(log))
    # Once the session's block ended, there is nothing to read it with.
    with self.assertRaisesRegex(ValueError, r"needs a session.*TF1 graph"):
      mplso.overflow_log(opt)
    with self.assertRaisesRegex(ValueError, r"it is closed"):
      mplso.overflow_log(opt, session)

  def test_not_an_mplso_optimizer(self):
    with self.assertRaisesRegex(ValueError, "optimizer=.*GradientDescent"):
      mplso.overflow_log(tf.compat.v1.train.GradientDescentOptimizer(0.5))


class StallGuardTest(tf.test.TestCase, parameterized.TestCase):
  """The stall guard in every Keras family (the TF1 family's: core tests)."""

  @parameterized.named_parameters(
      [(f"{family}_{mode}", family, mode)
       for family in KERAS_FAMILIES for mode in ("eager", "function")] +
      # Only the legacy optimizers build a step in a TF1 graph.
      [("tf_keras_legacy_graph", "tf_keras_legacy", "graph")])
  def test_custom_loop_fails_after_n_steps_at_the_minimum(self, family,
                                                          mode):
    with testing.ModeRunner(mode) as runner:
      a, b = _keras_variables(family)
      loss_scale = mplso.DynamicLossScale(2., increment_period=1000,
                                          stall_limit=3)
      opt = mplso.keras.LossScaleOptimizer(KERAS_FAMILIES[family](),
                                           loss_scale)
      step = runner.step(lambda: opt.apply_gradients(
          [(tf.constant([NAN, 1.]), a), (tf.constant(1.), b)]))
      runner.initialize()
      # 2 (above the minimum), then 1, 1, 1: the fourth step fails.
      for _ in range(3):
        step()
      state = [a, b, opt.iterations, loss_scale.variables[0]]
      before = runner.read(state)
      with self.assertRaisesRegex(
          tf.errors.InvalidArgumentError,
          r"3 consecutive steps .* minimum \(1; min_loss_scale=1, stall_limit=3\).*"
          r"NaN gradients: \[(\S*/)?a\]; with Inf gradients: \[\]"):
        step()
      after = runner.read(state)
      log = mplso.overflow_log(opt, session=runner.session)
    for value_before, value_after in zip(before, after):
      self.assertAllEqual(value_before, value_after)
    self.assertEqual([3, 1.], [int(after[2]), float(after[3])])
    self.assertLen(log, 3)


class StallGuardFitTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ("keras_3", "keras", False), ("tf_keras", "tf_keras", False),
      ("tf_keras_legacy", "tf_keras", True))
  def test_fit_fails_after_n_steps_at_the_minimum(self, package, legacy):
    keras = importlib.import_module(package)
    loss_scale = mplso.DynamicLossScale(2., increment_period=1000,
                                        stall_limit=3)
    optimizers = keras.optimizers.legacy if legacy else keras.optimizers
    opt = mplso.keras.LossScaleOptimizer(optimizers.SGD(0.1), loss_scale)
    model = keras.Sequential([
        keras.Input((2,)), keras.layers.Dense(1, name="dense")])
    model.compile(optimizer=opt, loss="mse", jit_compile=False)
    x = np.ones((8, 2), np.float32)
    y = np.full((8, 1), np.nan, np.float32)  # Every batch: NaN gradients.
    before = [np.asarray(v) for v in model.trainable_variables]
    with self.assertRaisesRegex(
        tf.errors.InvalidArgumentError,
        r"3 consecutive steps .*NaN gradients: \[.*dense/kernel"):
      model.fit(x, y, batch_size=1, epochs=1, verbose=0)
    # 2 (above the minimum), then 1, 1, 1: the fourth step fails.
    self.assertEqual(3, int(opt.iterations))
    for b, v in zip(before, model.trainable_variables):
      self.assertAllEqual(b, np.asarray(v))
    self.assertEqual(1., float(opt.loss_scale()))
    self.assertLen(mplso.overflow_log(opt), 3)


class MirroredTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ("keras_3", "keras_3", [1]), ("tf_keras_legacy", "tf_keras_legacy", [1]),
      # The TF1 family's own test is in mplso_test/diagnostics/record_test.py.
      ("contrib", "contrib", [1]),
      # tf_keras's new optimizers all-reduce before the check: every
      # replica then holds the NaN (docs/why-skipped.md, "Limits").
      ("tf_keras", "tf_keras", [0, 1]))
  def test_nan_on_replica_1_only(self, family, replicas):
    # Every case gathers kinds of one shape (two variables): collective
    # instances of one process must agree on it.
    strategy = testing.STRATEGIES[testing.MIRRORED_2]()
    with strategy.scope():
      a, b, opt = _variables_and_optimizer(family)

    def replica_step(poison):
      replica = tf.distribute.get_replica_context().replica_id_in_sync_group
      bad = tf.logical_and(tf.equal(replica, 1), poison)
      grad_a = tf.where(bad, tf.constant([NAN, 1.]), tf.ones([2]))
      opt.apply_gradients([(grad_a, a), (tf.ones([]), b)])

    @tf.function
    def step(poison):
      strategy.run(replica_step, args=(poison,))

    step(tf.constant(False))
    step(tf.constant(True))
    log = mplso.overflow_log(opt)
    self.assertEqual([1], [e["step"] for e in log])
    self.assertEqual([(["a"], [])], _names(log))
    self.assertEqual([replicas], [e["replicas"] for e in log])


@pytest.mark.multiworker
class MultiWorkerTest(tf.test.TestCase):
  """Two worker processes on 127.0.0.1 under MultiWorkerMirroredStrategy."""

  def test_nan_on_worker_1_is_attributed_to_it(self):
    ports = testing.free_ports(2)
    workers = [processes.start(
        "mplso_test.helpers.workers.overflow_multiworker_worker",
        env=testing.worker_env(ports, index), add_cleanup=self.addCleanup,
        name=f"worker {index}") for index in range(2)]
    logs = [json.loads(processes.last_line(output))
            for output in processes.finish(workers)]
    expected = [{"step": 1, "loss_scale": 8., "nan": ["a"], "inf": [],
                 "replicas": ["1:0"]}]
    for family in ("v1", "keras_3"):
      for worker_logs in logs:  # Both workers record the same step.
        log = worker_logs[family]
        for entry in log:
          entry["nan"] = [n.split("/")[-1] for n in entry["nan"]]
        self.assertEqual(expected, log, family)


if __name__ == "__main__":
  absltest.main()
