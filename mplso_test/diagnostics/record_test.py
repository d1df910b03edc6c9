"""The overflow log: names, kinds, steps and scales of skipped steps; no cost."""

import collections
import json
import os
import re

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context

import mplso
from mplso._src.diagnostics import log_state
import mplso.keras
from mplso_test.helpers import testing

# TinyModel's variables, in the order their gradients come.
W, B, EMB = "w", "b", "emb"
# A node inlined from a `tf.cond` branch once lowered: `<cond>/then/_N/...`
# or `<cond>/else/_N/...` (`Func/<cond>/else/_N/input/...` for the branch's
# inputs; Grappler's rewrites keep the path).
_BRANCH = re.compile(r"(^|/)(then|else)/_\d+/")


def _tf1_step(model, global_step=None):
  opt = mplso.MixedPrecisionLossScaleOptimizer(
      tf.compat.v1.train.GradientDescentOptimizer(0.5),
      mplso.DynamicLossScale(2.**10))
  return opt, lambda: opt.minimize(model.loss, var_list=model.trainable,
                                   global_step=global_step)


def _lowered_ops(function) -> dict[str, collections.Counter]:
  """Op types of the graphs TensorFlow runs for the `tf.function` `function`.

  Traces it first (the eager ops of tracing are not counted), then calls it
  once with graph collection on: the partition graphs after Grappler, each
  `tf.cond` lowered to `Switch` / `Merge` and its branches inlined.

  Returns:
    Counts by where the nodes are: "outer" outside every branch (`Switch`
    and `Merge` included: every step runs these), "then" and "else".
  """
  function.get_concrete_function()
  ctx = context.context()
  ctx.enable_graph_collection()
  try:
    function()
    metadata = ctx.export_run_metadata()
  finally:
    ctx.disable_graph_collection()
  counts = {where: collections.Counter() for where in ("outer", "then", "else")}
  for graphs in metadata.function_graphs:
    for partition in graphs.partition_graphs:
      for node in partition.node:
        found = _BRANCH.search(node.name)
        counts[found.group(2) if found else "outer"][node.op] += 1
  return counts


def _load(model, session, poison=None):
  """Feeds step 0's batch (`poison`ed) to `model` in `session`'s graph."""
  for name, value in model.batch(0, poison).items():
    getattr(model, name).load(value, session)


class OverflowLogTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{mode}_{'global_step' if gs else 'own_count'}", mode, gs)
      for mode in testing.MODES for gs in (True, False))
  def test_records_names_kinds_steps_and_scales(self, mode, use_global_step):
    schedule = [None, "nan_dense", None, "inf_sparse", "minus_inf_dense",
                None, "nan_sparse"]
    with testing.ModeRunner(mode) as runner:
      model = testing.TinyModel()
      global_step = (tf.compat.v1.train.get_or_create_global_step()
                     if use_global_step else None)
      opt, build = _tf1_step(model, global_step)
      step = runner.step(build)
      runner.initialize()
      logs = []
      for i, poison in enumerate(schedule):
        model.feed(runner, model.batch(i, poison))
        step()
        logs.append(mplso.overflow_log(opt, session=runner.session))
    # Finite steps add nothing; the first skip appears at step 1.
    self.assertEqual([], logs[0])
    self.assertEqual(logs[1], logs[2])
    # global_step advances only on applied steps: 0 1 | 1 2 | 2 2 3 | 3.
    steps = [1, 2, 2, 3] if use_global_step else [1, 3, 4, 6]
    self.assertEqual([
        {"step": steps[0], "loss_scale": 1024., "nan": [W], "inf": [],
         "replicas": [0]},
        {"step": steps[1], "loss_scale": 512., "nan": [], "inf": [EMB],
         "replicas": [0]},
        {"step": steps[2], "loss_scale": 256., "nan": [], "inf": [W],
         "replicas": [0]},
        {"step": steps[3], "loss_scale": 128., "nan": [EMB], "inf": [],
         "replicas": [0]},
    ], logs[-1])

  def test_nan_wins_over_inf_and_fixed_scale_is_recorded(self):
    w = tf.Variable([1., 2.], name="w")
    opt = mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(1.), 8)
    opt.apply_gradients([(tf.constant([np.inf, np.nan]), w)])
    self.assertEqual([{"step": 0, "loss_scale": 8., "nan": ["w"], "inf": [],
                       "replicas": [0]}], mplso.overflow_log(opt))

  def test_keeps_the_last_capacity_steps(self):
    w = tf.Variable(1., name="w")
    opt = mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(1.), 8)
    total = log_state.CAPACITY + 5
    for _ in range(total):
      opt.apply_gradients([(tf.constant(np.nan), w)])
    log = mplso.overflow_log(opt)
    self.assertLen(log, log_state.CAPACITY)
    self.assertEqual(list(range(5, total)), [e["step"] for e in log])

  @parameterized.named_parameters(*testing.NAMED_MODES)
  def test_counts_skipped_nan_and_inf_steps(self, mode):
    grads = ([1., 2.], [np.nan, 1.], [np.inf, 1.], [1., 1.], [np.inf, np.nan],
             [-np.inf, 0.])
    with testing.ModeRunner(mode) as runner:
      w = tf.Variable([1., 2.], name="w")
      grad = tf.Variable([0., 0.])
      opt = mplso.MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(1.), "dynamic")
      # In a graph, counts asked for before the step is built count it too.
      before = log_state.counts(opt.loss_scale)
      step = runner.step(lambda: opt.apply_gradients([(grad.value(), w)]))
      runner.initialize()
      seen = []
      for value in grads:
        runner.assign(grad, value)
        step()
        counts = (before if runner.graph_mode else
                  log_state.counts(opt.loss_scale))
        seen.append([int(runner.read(c)) for c in counts.values()])
    self.assertEqual([[0, 0, 0], [1, 1, 0], [2, 1, 1], [2, 1, 1], [3, 2, 1],
                      [4, 2, 2]], seen)

  def test_eager_function_and_xla_steps_share_one_log(self):
    # The branch finds the log by name; XLA captures it: one state.
    w = tf.Variable([1., 2.], name="w")
    opt = mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(1.), 8)

    def step(grad):
      opt.apply_gradients([(grad, w)])

    function = tf.function(step)
    compiled = tf.function(step, jit_compile=True)
    for run, grad in ((step, [np.nan, 1.]), (function, [1., 1.]),
                      (function, [1., np.inf]), (compiled, [np.nan, 1.]),
                      (step, [np.inf, 1.]), (compiled, [1., 1.])):
      run(tf.constant(grad))
    self.assertEqual([(0, ["w"], []), (2, [], ["w"]), (3, ["w"], []),
                      (4, [], ["w"])],
                     [(e["step"], e["nan"], e["inf"])
                      for e in mplso.overflow_log(opt)])

  def test_graph_without_session_is_refused(self):
    with tf.Graph().as_default():
      model = testing.TinyModel()
      opt, build = _tf1_step(model)
      build()
      with self.assertRaisesRegex(ValueError, "needs a session"):
        mplso.overflow_log(opt)

  def test_finite_graph_step_runs_no_record(self):
    """A finite step runs none of the log's ops; a skipped one runs them."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
      model = testing.TinyModel()
      global_step = tf.compat.v1.train.get_or_create_global_step()
      _, build = _tf1_step(model, global_step)
      train_op = build()
      session.run(tf.compat.v1.global_variables_initializer())
      _load(model, session)
      types = testing.executed_op_types(session, train_op, None)
      self.assertEqual(1, session.run(global_step))  # It applied.
      for op_type in ("LookupTableInsertV2", "IsNan", "IsInf"):
        self.assertEqual(0, types[op_type], op_type)

  def test_skipped_graph_step_runs_the_record(self):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
      model = testing.TinyModel()
      opt, build = _tf1_step(model)
      train_op = build()
      session.run(tf.compat.v1.global_variables_initializer())
      _load(model, session, "inf_dense")
      types = testing.executed_op_types(session, train_op, None)
      self.assertIn("LookupTableInsertV2", types)
      self.assertEqual([W], mplso.overflow_log(opt, session)[0]["inf"])

  @parameterized.named_parameters(("dynamic", "dynamic"), ("fixed", 8))
  def test_in_a_function_the_record_is_in_the_skip_branch_only(
      self, loss_scale):
    """Counted in the graphs TensorFlow runs (after Grappler, lowered)."""
    model = testing.TinyModel()
    global_step = tf.Variable(0, dtype=tf.int64)
    opt = mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.5), loss_scale)
    function = tf.function(
        lambda: (opt.minimize(model.loss, var_list=model.trainable,
                              global_step=global_step), None)[1],
        autograph=False)
    for name, value in model.batch(0).items():
      getattr(model, name).assign(value)
    counts = _lowered_ops(function)
    self.assertEqual(1, int(global_step))  # A finite step: it applied.
    # `finite.kinds`: one NaN test per gradient, in the skip branch only;
    # Infs are what the check found not finite and holds no NaN.
    self.assertEqual(0, counts["outer"]["IsNan"])
    self.assertEqual(0, counts["then"]["IsNan"])
    self.assertEqual(len(model.trainable), counts["else"]["IsNan"])
    self.assertEqual(0, sum(counts[where]["IsInf"] for where in counts))

  def test_op_counts_tell_the_log_apart(self):
    """benchmarks/graph_ops counts the log's ops apart, by its name scope."""
    from benchmarks import graph_ops  # pylint: disable=g-import-not-at-top

    model = testing.TinyModel()
    _, build = _tf1_step(model, tf.Variable(0, dtype=tf.int64))
    function = tf.function(lambda: (build(), None)[1], autograph=False)
    graph_def = function.get_concrete_function().graph.as_graph_def()
    self.assertEqual(graph_ops.SKIP_ONLY_SCOPE, log_state.NAME_SCOPE)
    step_ops = graph_ops.count_ops(graph_def)
    log_ops = graph_ops.count_ops(graph_def, skip_only=True)
    # One IsNan per gradient, all in the log; no IsInf (the check's
    # verdict tells an Inf where there is no NaN).
    self.assertEqual((0, 3), (step_ops["IsNan"], log_ops["IsNan"]))
    self.assertEqual((0, 0), (step_ops["IsInf"], log_ops["IsInf"]))
    self.assertGreater(step_ops["IsFinite"], 0)  # The finite check's.


NAN_IN_W = [{"step": 0, "loss_scale": 8., "nan": ["w"], "inf": [],
             "replicas": [0]}]


def _graph_step():
  """In the current (TF1) graph: an optimizer and a step that NaN skips."""
  w = tf.compat.v1.Variable([1., 2.], name="w")
  opt = mplso.MixedPrecisionLossScaleOptimizer(
      tf.compat.v1.train.GradientDescentOptimizer(1.), 8)
  return opt, opt.apply_gradients([(tf.constant([np.nan, 1.]), w)])


class SessionTest(tf.test.TestCase, parameterized.TestCase):
  """What `session` a TF1 graph's log is read with; eager needs none."""

  def _closed_session_and_optimizer(self):
    """A TF1 step skipped in a `with Session()` block that has ended."""
    with tf.Graph().as_default() as graph:
      opt, train_op = _graph_step()
      with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(train_op)
        self.assertEqual(NAN_IN_W, mplso.overflow_log(opt))  # The default.
    return graph, session, opt

  def test_after_the_session_block_no_session_is_refused(self):
    graph, _, opt = self._closed_session_and_optimizer()
    needs = (r"^Reading the overflow log of a TF1 graph needs a session: none "
             r"was given .*built in the TF1 graph .*Pass session=sess")
    with self.assertRaisesRegex(ValueError, needs):
      mplso.overflow_log(opt)  # Eagerly, outside the graph.
    with graph.as_default(), self.assertRaisesRegex(ValueError, needs):
      mplso.overflow_log(opt)

  def test_a_closed_session_is_refused(self):
    _, session, opt = self._closed_session_and_optimizer()
    with self.assertRaisesRegex(
        ValueError, r"^`session` must be open .*it is closed\. Received: "
        r"session=<.*Session object.*Pass session=sess, an open"):
      mplso.overflow_log(opt, session)
    with session.as_default(), self.assertRaisesRegex(ValueError,
                                                      "it is closed"):
      mplso.overflow_log(opt)

  def test_a_session_of_another_graph_is_refused(self):
    with tf.Graph().as_default():
      opt, _ = _graph_step()
    with tf.Graph().as_default(), tf.compat.v1.Session() as other:
      tf.constant(1.)
      regex = (r"^`session` must run the graph the optimizer's steps were "
               r"built in; they were built in the TF1 graph .*, and session="
               r".* runs the graph .*Pass session=sess")
      with self.assertRaisesRegex(ValueError, regex):
        mplso.overflow_log(opt, other)
      with self.assertRaisesRegex(ValueError, regex):
        mplso.overflow_log(opt)  # `other` is the default session.

  @parameterized.named_parameters(("string", "sess"), ("number", 5),
                                  ("graph", tf.Graph()))
  def test_not_a_session_is_refused(self, session):
    expected = (r"^`session` must be a tf\.compat\.v1\.Session .*Received: "
                rf"session={re.escape(repr(session))}\.")
    w = tf.Variable(1., name="w")
    opt = mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(1.), 8)
    opt.apply_gradients([(tf.constant(np.nan), w)])
    with self.assertRaisesRegex(ValueError, expected):
      mplso.overflow_log(opt, session=session)  # Eager steps.
    with tf.Graph().as_default():
      graph_opt, _ = _graph_step()
      with self.assertRaisesRegex(ValueError, expected):
        mplso.overflow_log(graph_opt, session=session)

  def test_eager_steps_need_no_session_and_refuse_one(self):
    w = tf.Variable([1., 2.], name="w")
    opt = mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(1.), 8)
    tf.function(lambda: opt.apply_gradients(
        [(tf.constant([np.nan, 1.]), w)]) and None)()
    self.assertEqual(NAN_IN_W, mplso.overflow_log(opt))
    with tf.Graph().as_default() as graph:
      tf.constant(1.)
    with tf.compat.v1.Session(graph=graph) as session:
      regex = (r"built eagerly or in a tf\.function, and session=.*"
               r"Call overflow_log\(optimizer\) without a session")
      with self.assertRaisesRegex(ValueError, regex):
        mplso.overflow_log(opt, session)
      with session.as_default(), self.assertRaisesRegex(ValueError, regex):
        mplso.overflow_log(opt)  # In `session`'s graph, not eagerly.

  def test_nothing_built_reads_empty(self):
    opt = mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(1.), 8)
    self.assertEqual([], mplso.overflow_log(opt))
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
      tf.constant(1.)
      self.assertEqual([], mplso.overflow_log(opt, session))

  def test_monitored_training_session_reads_without_its_hooks(self):
    runs = []

    class CountRuns(tf.compat.v1.train.SessionRunHook):

      def before_run(self, run_context):
        runs.append(run_context)

    with tf.Graph().as_default():
      opt, train_op = _graph_step()
      # It finalizes the graph: the read op must exist already.
      with tf.compat.v1.train.MonitoredTrainingSession(
          hooks=[CountRuns()]) as session:
        session.run(train_op)
        self.assertEqual(NAN_IN_W, mplso.overflow_log(opt, session))
        self.assertEqual(NAN_IN_W, mplso.overflow_log(opt, session))
      self.assertLen(runs, 1)  # Only the training step.
      with self.assertRaisesRegex(ValueError, r"it is closed.*"
                                  r"MonitoredSession"):
        mplso.overflow_log(opt, session)

  def test_finalized_graph(self):
    with tf.Graph().as_default() as graph, tf.compat.v1.Session() as session:
      opt, train_op = _graph_step()
      session.run(tf.compat.v1.global_variables_initializer())
      graph.finalize()
      session.run(train_op)
      self.assertEqual(NAN_IN_W, mplso.overflow_log(opt, session))


class StallGuardTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*testing.NAMED_MODES)
  def test_raises_after_exactly_n_steps_at_the_minimum(self, mode):
    limit = 3
    with testing.ModeRunner(mode) as runner:
      model = testing.TinyModel()
      loss_scale = mplso.DynamicLossScale(4., increment_period=1000,
                                          stall_limit=limit)
      opt = mplso.MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(0.5), loss_scale)
      step = runner.step(lambda: opt.minimize(model.loss,
                                              var_list=model.trainable))
      runner.initialize()
      model.feed(runner, model.batch(0, "nan_dense"))
      # 4 and 2 are above the minimum; then 1, 1, 1: the third fails.
      for _ in range(2 + limit - 1):
        step()
      before = runner.read(model.trainable + list(loss_scale.variables))
      with self.assertRaisesRegex(
          tf.errors.InvalidArgumentError,
          r"3 consecutive steps .* minimum \(1; min_loss_scale=1, stall_limit=3\).*"
          r"NaN gradients: \[w\].*forward pass"):
        step()
      after = runner.read(model.trainable + list(loss_scale.variables))
    for b, a in zip(before, after):
      self.assertAllEqual(b, a)

  def test_a_finite_step_resets_the_stall(self):
    w = tf.Variable(1., name="w")
    loss_scale = mplso.DynamicLossScale(1., increment_period=1000,
                                        stall_limit=2)
    opt = mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(1.), loss_scale)
    for grad in (np.nan, 1., np.nan, 1., np.inf):
      opt.apply_gradients([(tf.constant(grad), w)])
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                r"Inf gradients: \[w\]"):
      opt.apply_gradients([(tf.constant(np.inf), w)])

  def test_counts_at_min_loss_scale_with_hysteresis(self):
    w = tf.Variable(1., name="w")
    # 1 -> 0.5 after two skips (hysteresis); then at the minimum 0.5.
    loss_scale = mplso.DynamicLossScale(1., increment_period=1000,
                                        min_loss_scale=0.5, hysteresis=2,
                                        stall_limit=3)
    opt = mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(1.), loss_scale)
    for _ in range(4):
      opt.apply_gradients([(tf.constant(np.nan), w)])
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                r"minimum \(0.5; min_loss_scale=0.5, stall_limit=3\)"):
      opt.apply_gradients([(tf.constant(np.nan), w)])
    self.assertEqual([1., 1., 0.5, 0.5],
                     [e["loss_scale"] for e in mplso.overflow_log(opt)])
    self.assertEqual(1., float(w))

  def test_off_by_default(self):
    w = tf.Variable(1., name="w")
    opt = mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(1.),
        mplso.DynamicLossScale(1.))
    for _ in range(20):
      opt.apply_gradients([(tf.constant(np.nan), w)])
    self.assertLen(mplso.overflow_log(opt), 20)


class MirroredTest(tf.test.TestCase):

  def test_nan_on_replica_1_only_is_attributed_to_it(self):
    strategy = testing.STRATEGIES[testing.MIRRORED_2]()
    with strategy.scope():
      w = tf.Variable([1., 2.], name="w")
      b = tf.Variable(0., name="b")
      opt = mplso.MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(1.), 8)

    def replica_step(poison):
      replica = tf.distribute.get_replica_context().replica_id_in_sync_group
      bad = tf.logical_and(tf.equal(replica, 1), poison)
      grad_w = tf.where(bad, tf.constant([np.nan, 1.]), tf.ones([2]))
      return opt.apply_gradients([(grad_w, w), (tf.ones([]), b)])

    @tf.function
    def step(poison):
      strategy.run(replica_step, args=(poison,))

    step(tf.constant(False))
    step(tf.constant(True))
    self.assertEqual([{"step": 1, "loss_scale": 8., "nan": ["w"], "inf": [],
                       "replicas": [1]}], mplso.overflow_log(opt))


def _saved_step_optimizer(family):
  """`(optimizer, loss scale)` of `family`, wrapping SGD (learning rate 0.1)."""
  import keras  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top

  if family == "tf1":
    opt = mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.1), "dynamic")
  elif family == "tf1_reference":
    opt = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.1), "dynamic")
    return opt, opt._loss_scale  # pylint: disable=protected-access
  elif family == "keras_3_reference":
    opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    return opt, lambda: opt.dynamic_scale
  else:
    inner = {"keras_3": keras.optimizers.SGD,
             "tf_keras": tf_keras.optimizers.SGD,
             "optimizer_v2": tf_keras.optimizers.legacy.SGD}[family](0.1)
    opt = mplso.keras.LossScaleOptimizer(inner)
  return opt, opt._loss_scale  # pylint: disable=protected-access


class _Trainer(tf.Module):
  """A module whose saved `train(x)` takes one loss-scaled step."""

  def __init__(self, family):
    super().__init__()
    self.family = family
    self.optimizer, loss_scale = _saved_step_optimizer(family)
    self.variable = tf.Variable([1., 2., 3.])
    if family.startswith("keras_3"):
      import keras  # pylint: disable=g-import-not-at-top
      self.variable = keras.Variable([1., 2., 3.])
    if hasattr(self.optimizer, "build"):
      self.optimizer.build([self.variable])
    self.scale = tf.function(
        lambda: tf.cast(loss_scale(), tf.float32), input_signature=[])
    if not family.endswith("_reference"):
      self.skipped = tf.function(
          lambda: log_state.counts(loss_scale)["inf_steps"],
          input_signature=[])

  @tf.function(input_signature=[tf.TensorSpec([3], tf.float32)])
  def train(self, x):
    opt, family = self.optimizer, self.family
    if family.startswith("tf1"):
      opt.minimize(lambda: tf.reduce_sum(self.variable * x),
                   var_list=[self.variable])
    else:
      keras_3 = family.startswith("keras_3")
      value = self.variable.value if keras_3 else self.variable
      with tf.GradientTape() as tape:
        tape.watch(value)
        loss = tf.reduce_sum(value * x)
        loss = opt.scale_loss(loss) if keras_3 else opt.get_scaled_loss(loss)
      grads = tape.gradient(loss, [value])
      if not keras_3:
        grads = opt.get_unscaled_gradients(grads)
      opt.apply_gradients(zip(grads, [self.variable]))
    return tf.convert_to_tensor(self.variable)


# Restores a saved `_Trainer` in a fresh interpreter (no mplso imported), and
# takes an Inf step between two finite ones.
_RESTORE = """
import json
import numpy as np
import tensorflow as tf
trainer = tf.saved_model.load({path!r})
out = {{"steps": []}}
for x in ([1., 1., 1.], [np.inf, 1., 1.], [1., 1., 1.]):
  step = trainer.train(tf.constant(x, tf.float32))
  out["steps"].append(step.numpy().tolist())
out["scale"] = float(trainer.scale())
if hasattr(trainer, "skipped"):
  out["skipped"] = float(trainer.skipped())
print(json.dumps(out))
"""


class SavedTrainingStepTest(tf.test.TestCase, parameterized.TestCase):
  """A saved training step skips after restore, and logs it, on every family.

  Saved with default `SaveOptions` after one finite and one Inf step,
  restored in a fresh process: the next Inf step is skipped, halves the
  scale and is recorded (the restored log holds the skip before saving
  too). Where TF or Keras has its own class, it gives the same weights and
  scales.
  """

  def _saved_and_restored(self, family):
    trainer = _Trainer(family)
    trainer.train(tf.constant([1., 1., 1.]))
    trainer.train(tf.constant([np.inf, 1., 1.]))
    path = os.path.join(self.create_tempdir().full_path, family)
    tf.saved_model.save(trainer, path)
    return json.loads(testing.printed_in_fresh_interpreter(
        _RESTORE.format(path=path), TF_CPP_MIN_LOG_LEVEL="3"))

  @parameterized.parameters(
      ("tf1", "tf1_reference"), ("keras_3", "keras_3_reference"),
      ("tf_keras", None),
      ("optimizer_v2", None))
  def test_skips_and_records_after_restore(self, family, reference):
    ours = self._saved_and_restored(family)
    first, skipped, last = ours["steps"]
    self.assertEqual(first, skipped)  # The Inf step moved nothing.
    self.assertNotEqual(skipped, last)
    self.assertEqual(2., ours.pop("skipped"))  # One before saving, one after.
    if reference is not None:
      self.assertEqual(self._saved_and_restored(reference), ours)
    else:  # Two skips from 2**15, one finite step between.
      self.assertEqual(2.**13, ours["scale"])


if __name__ == "__main__":
  absltest.main()
