"""Tests for the one-`Switch` gate."""


import json

from absl.testing import absltest
import numpy as np
import tensorflow as tf

from mplso._src.core import gates
from mplso_test import testing
from mplso_test.testing import NAN
from mplso_test.testing import executed_op_types


class RunEitherInAGraphTest(tf.test.TestCase):

  def test_runs_only_the_taken_branch(self):
    with tf.Graph().as_default():
      pred = tf.compat.v1.placeholder(tf.bool, [])
      taken = tf.Variable(0)
      skipped = tf.Variable(0)
      step = gates.run_either(pred, lambda: taken.assign_add(1),
                              lambda: skipped.assign_add(1))
      # The op is live either way: a value that depends on it can be fetched.
      with tf.control_dependencies([step]):
        after = tf.constant(7) + 0
      with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        for p in (True, True, False, True, False):
          self.assertEqual(7, session.run(after, {pred: p}))
        self.assertEqual((3, 2), tuple(session.run([taken, skipped])))

  def test_a_branch_that_returns_nothing_is_gated_too(self):
    with tf.Graph().as_default():
      pred = tf.compat.v1.placeholder(tf.bool, [])
      var = tf.Variable(0)

      def increment():
        var.assign_add(1)

      step = gates.run_either(pred, increment, tf.no_op)
      with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        for p in (True, False, False, True):
          session.run(step, {pred: p})
        self.assertEqual(2, session.run(var))

  def test_slots_created_in_a_branch_initialize_without_the_predicate(self):
    # The optimizer creates its slots (and their initializers) while the
    # branch is built; only the update ops may be gated.
    with tf.Graph().as_default():
      pred = tf.compat.v1.placeholder(tf.bool, [])
      grad = tf.compat.v1.placeholder(tf.float32, [2])
      var = tf.Variable([1., 2.])
      gated_opt = tf.compat.v1.train.MomentumOptimizer(0.5, 0.9)
      global_step = tf.compat.v1.train.get_or_create_global_step()
      step = gates.run_either(
          pred, lambda: gated_opt.apply_gradients([(grad, var)], global_step),
          tf.no_op)
      ref = tf.Variable([1., 2.])
      ref_step = tf.compat.v1.train.MomentumOptimizer(0.5, 0.9).apply_gradients(
          [(grad, ref)])
      with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())  # No feed.
        for p, g in ((True, [1., 1.]), (False, [NAN, 1.]), (True, [2., -1.]),
                     (False, [1., 1.])):
          session.run(step, {pred: p, grad: g})
          if p:
            session.run(ref_step, {grad: g})
        self.assertAllEqual(session.run(ref), session.run(var))
        self.assertAllEqual(
            session.run(ref_step.graph.get_collection("variables")[-1]),
            session.run(gated_opt.get_slot(var, "momentum")))
        self.assertEqual(2, session.run(global_step))

  def test_one_switch_however_many_tensors(self):
    with tf.Graph().as_default():
      pred = tf.compat.v1.placeholder(tf.bool, [])
      grads = [tf.compat.v1.placeholder(tf.float32, [3]) for _ in range(20)]
      variables = [tf.Variable(tf.zeros([3])) for _ in grads]
      opt = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9)
      gated = gates.run_either(
          pred, lambda: opt.apply_gradients(zip(grads, variables)), tf.no_op)
      lowered = tf.cond(
          pred, lambda: tf.group(opt.apply_gradients(zip(grads, variables))),
          tf.no_op)
      feed = {g: np.ones(3, np.float32) for g in grads}
      with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        for p in (True, False):
          feed[pred] = p
          self.assertEqual(1, executed_op_types(session, gated, feed)["Switch"])
          # TF lowers its cond to a Switch per gradient, variable and slot.
          self.assertGreaterEqual(
              executed_op_types(session, lowered, feed)["Switch"], 60)
        feed[pred] = False
        self.assertNotIn("ResourceApplyMomentum",
                         executed_op_types(session, gated, feed))


def _xla_marked(graph) -> set[str]:
  """Types of the ops of `graph` that auto-clustering must leave out."""
  marked = set()
  for op in graph.get_operations():
    try:
      if not op.get_attr("_XlaCompile"):
        marked.add(op.type)
    except ValueError:  # No such attribute.
      pass
  return marked


class XlaAutoClusteringTest(tf.test.TestCase):
  """A gate's branches stay out of XLA's auto-clusters (TF1 `global_jit_level`)."""

  def _gated_apply(self):
    pred = tf.compat.v1.placeholder(tf.bool, [])
    grad = tf.compat.v1.placeholder(tf.float32, [2])
    var = tf.Variable([1., 2.])
    opt = tf.compat.v1.train.MomentumOptimizer(0.5, 0.9)
    return gates.run_either(
        pred, lambda: opt.apply_gradients([(grad * 2., var)]),
        lambda: tf.no_op())

  def test_the_ops_of_both_branches_are_marked(self):
    with tf.Graph().as_default() as graph:
      outside = tf.constant([1., 2.]) * 3.
      self._gated_apply()
      marked = _xla_marked(graph)
      self.assertIn("ResourceApplyMomentum", marked)
      self.assertIn("Mul", marked)  # Built in the branch: `grad * 2.`.
      self.assertIn("NoOp", marked)  # The other branch.
      # Nothing outside the branches: not the Switch on the predicate, not
      # what was built before.
      self.assertNotIn("Switch", marked)
      with self.assertRaises(ValueError):
        outside.op.get_attr("_XlaCompile")

  def test_a_users_jit_scope_is_kept(self):
    # `jit_scope` asks for compilation, op by op: the marks leave those ops.
    with tf.Graph().as_default() as graph:
      with tf.xla.experimental.jit_scope():
        self._gated_apply()
      applies = [op for op in graph.get_operations()
                 if op.type == "ResourceApplyMomentum"]
      self.assertLen(applies, 1)
      self.assertTrue(applies[0].get_attr("_XlaCompile"))

  def test_switched_off_nothing_is_marked(self):
    before = gates.KEEP_BRANCHES_OUT_OF_XLA
    gates.KEEP_BRANCHES_OUT_OF_XLA = False
    try:
      with tf.Graph().as_default() as graph:
        self._gated_apply()
        self.assertEqual(set(), _xla_marked(graph))
    finally:
      gates.KEEP_BRANCHES_OUT_OF_XLA = before

  def test_a_clustered_step_skips_and_applies_as_tfs_wrapper(self):
    # TF reads TF_XLA_FLAGS once per process: a fresh interpreter, where a
    # TF1 Session auto-clusters on CPU. The apply runs as TensorFlow's own
    # kernel, not in a second cluster; skipped steps leave every variable
    # and slot as they were; the result is TF's wrapper's.
    printed = testing.printed_in_fresh_interpreter(
        _CLUSTERED_STEP, TF_XLA_FLAGS="--tf_xla_cpu_global_jit",
        TF_CPP_MIN_LOG_LEVEL="3")
    result = json.loads(printed)
    self.assertIn("_XlaRun", result["mplso"]["ran"])
    self.assertIn("ResourceApplyMomentum", result["mplso"]["ran"])
    self.assertNotIn("ResourceApplyMomentum", result["tf"]["ran"])
    for name in ("variables", "slots", "scale", "step"):
      self.assertAllClose(result["tf"][name], result["mplso"][name],
                          rtol=1e-6, msg=name)
    # Two of the four steps were skipped: the scale halved twice.
    self.assertEqual(2., result["mplso"]["scale"])
    self.assertEqual(2, result["mplso"]["step"])


_CLUSTERED_STEP = """
import json
import numpy as np
import tensorflow as tf
import mplso
from mplso_test.testing import executed_op_types

def run(variant):
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [4, 3])
    # Enough variables for XLA to cluster their updates if let.
    weights = [tf.Variable(np.linspace(-1., 1., 9).reshape([3, 3])
                           .astype("float32") * (i + 1)) for i in range(6)]
    h = x
    for w in weights:
      h = tf.tanh(tf.matmul(h, w))
    loss = tf.reduce_sum(tf.square(h))
    inner = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9)
    if variant == "tf":
      opt = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
          inner, tf.compat.v1.mixed_precision.DynamicLossScale(8.))
    else:
      opt = mplso.MixedPrecisionLossScaleOptimizer(
          inner, mplso.DynamicLossScale(8.))
    step = tf.compat.v1.train.get_or_create_global_step()
    train = opt.minimize(loss, global_step=step)
    init = tf.compat.v1.global_variables_initializer()
    slot = inner.get_slot(w, "momentum")
    scale = opt._loss_scale()
  config = tf.compat.v1.ConfigProto()
  config.graph_options.optimizer_options.global_jit_level = (
      tf.compat.v1.OptimizerOptions.ON_1)
  good = np.ones([4, 3], np.float32)
  bad = good.copy()
  bad[0, 0] = np.nan
  ran = set()
  with tf.compat.v1.Session(graph=graph, config=config) as session:
    session.run(init)
    for feed in (good, bad, good, bad):
      ran |= set(executed_op_types(session, train, {x: feed}))
    return {"ran": sorted(ran), "variables": session.run(w).tolist(),
            "slots": session.run(slot).tolist(),
            "scale": float(session.run(scale)), "step": int(session.run(step))}

print(json.dumps({v: run(v) for v in ("tf", "mplso")}))
"""


class WhereGatesCannotBeBuiltTest(tf.test.TestCase):

  def test_eager(self):
    self.assertIsNone(gates.run_either(tf.constant(True), tf.no_op, tf.no_op))

  def test_stateful_branches_in_a_function(self):
    # A dead stateful op would make the function's outputs dead.
    results = []

    @tf.function
    def step(pred):
      results.append(gates.run_either(pred, tf.no_op, tf.no_op))
      return pred

    step(tf.constant(True))
    self.assertEqual([None], results)

  def test_inside_a_control_flow_v1_loop(self):
    # A v1 while loop's frame needs its own Switch per input; TF builds it.
    results = []
    tf.compat.v1.disable_control_flow_v2()
    try:
      with tf.Graph().as_default():

        def body(i):
          results.append(gates.run_either(i < 3, tf.no_op, tf.no_op))
          return i + 1

        tf.compat.v1.while_loop(lambda i: i < 2, body, [tf.constant(0)])
    finally:
      tf.compat.v1.enable_control_flow_v2()
    self.assertEqual([None], results)

  def test_switched_off(self):
    self.addCleanup(setattr, gates, "ENABLED", gates.ENABLED)
    gates.ENABLED = False
    with tf.Graph().as_default():
      self.assertIsNone(gates.run_either(tf.constant(True), tf.no_op, tf.no_op))

  def test_off_by_environment(self):
    # Read once, at import: checked in a fresh interpreter.
    code = "from mplso._src.core import gates; print(gates.ENABLED)"
    for value, expected in (("0", "False"), ("1", "True")):
      self.assertEqual(expected, testing.printed_in_fresh_interpreter(
          code, MPLSO_GATES=value))

  def test_under_a_mirrored_strategy(self):
    # Its replicas' ops are built in threads of their own, out of the
    # pivot's reach.
    with tf.Graph().as_default():
      strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
      with strategy.scope():
        self.assertIsNone(
            gates.run_either(tf.constant(True), tf.no_op, tf.no_op))
      one_device = tf.distribute.OneDeviceStrategy("/cpu:0")
      with one_device.scope():
        self.assertIsNotNone(
            gates.run_either(tf.constant(True), tf.no_op, tf.no_op))


class SingleThreadedExecutorTest(tf.test.TestCase):

  def _run(self, use_gates):
    self.addCleanup(setattr, gates, "ENABLED", gates.ENABLED)
    gates.ENABLED = use_gates
    with tf.Graph().as_default() as graph:
      pred = tf.compat.v1.placeholder(tf.bool, [])
      var = tf.Variable(0)
      step = gates.run_either(pred, lambda: var.assign_add(1), tf.no_op)
      if step is None:
        step = tf.cond(pred, lambda: tf.group(var.assign_add(1)), tf.no_op)
      init = tf.compat.v1.global_variables_initializer()
    config = tf.compat.v1.ConfigProto()
    config.experimental.executor_type = "SINGLE_THREADED_EXECUTOR"
    with tf.compat.v1.Session(graph=graph, config=config) as session:
      session.run(init)
      for p in (True, False, True):
        session.run(step, {pred: p})
      return session.run(var)

  def test_a_gate_needs_the_default_executor(self):
    with self.assertRaisesRegex(tf.errors.FailedPreconditionError,
                                "does not support switch"):
      self._run(use_gates=True)

  def test_switched_off_it_runs_there(self):
    self.assertEqual(2, self._run(use_gates=False))


if __name__ == "__main__":
  absltest.main()
