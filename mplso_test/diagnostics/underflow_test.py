"""`mplso.meter_underflow` and `mplso.underflow_log` on every family and mode."""

import collections
import importlib
import json
import os
import re

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

from benchmarks import graph_ops
import mplso
from mplso import contrib
from mplso._src.diagnostics import underflow_meter
import mplso.keras
import mplso.summary
from mplso_test.helpers import processes
from mplso_test.helpers import strategies
from mplso_test.helpers import testing
from mplso_test.helpers.events import read_events

NAN = float("nan")
TINY16 = float(np.finfo(np.float16).tiny)  # float16's smallest normal.

KERAS_FAMILIES = {
    "keras_3": lambda: importlib.import_module("keras").optimizers.SGD(0.5),
    "tf_keras": lambda: importlib.import_module(
        "tf_keras").optimizers.SGD(0.5),
    "tf_keras_legacy": lambda: importlib.import_module(
        "tf_keras").optimizers.legacy.SGD(0.5),
}
V1_FAMILIES = {
    "v1": lambda: mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.5), 8),
    "contrib": lambda: contrib.LossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.5),
        contrib.FixedLossScaleManager(8)),
}
FAMILIES = [*KERAS_FAMILIES, *V1_FAMILIES]


def _gradients(step: int) -> list[np.ndarray]:
  """The gradients of step `step`: a float32 (4,) and a float16 (6,).

  Their zeros and subnormals change with the step; step 3 holds a NaN.
  """
  a = np.array([0., -0., 1., step], np.float32)
  h = np.array([0., TINY16 / 4, -TINY16 / 1024, TINY16, 1., step],
               np.float16)
  if step == 3:
    a[2] = NAN
  return [a, h]


def _expected(grads):
  """numpy's fractions of the same gradients: zero, and subnormal (float16)."""
  a, h = grads
  subnormal = (h != 0) & (np.abs(h) < np.finfo(np.float16).tiny)
  return ({"a": float(np.mean(a == 0)), "h": float(np.mean(h == 0))},
          {"h": float(np.mean(subnormal))})


def _variables(family):
  if family == "keras_3":
    keras = importlib.import_module("keras")
    return (keras.Variable(np.ones(4, np.float32), name="a"),
            keras.Variable(np.ones(6, np.float16), name="h"))
  return (tf.Variable(np.ones(4, np.float32), name="a"),
          tf.Variable(np.ones(6, np.float16), name="h"))


def _optimizer(family):
  if family in V1_FAMILIES:
    return V1_FAMILIES[family]()
  return mplso.keras.LossScaleOptimizer(KERAS_FAMILIES[family](), 8)


def _short(fractions):
  """Keras 3 variables' paths are their names outside any layer."""
  return {name.split("/")[-1]: value for name, value in fractions.items()}


class FamiliesTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{family}_{mode}", family, mode)
      for family in FAMILIES for mode in ("eager", "function", "xla"))
  def test_fractions_match_numpy(self, family, mode):
    a, h = _variables(family)
    opt = _optimizer(family)
    mplso.meter_underflow(opt, every=3)
    self.assertEqual([], mplso.underflow_log(opt))

    def step(grad_a, grad_h):
      opt.apply_gradients([(grad_a, a), (grad_h, h)])

    if mode != "eager":
      step = tf.function(step, jit_compile=mode == "xla")
    for i in range(8):
      step(*(tf.constant(g) for g in _gradients(i)))
    log = mplso.underflow_log(opt)
    # Steps 0, 3 and 6 are due; step 3 is skipped (its NaN), so unsampled.
    self.assertEqual([0, 6], [e["step"] for e in log])
    self.assertEqual([8., 8.], [e["loss_scale"] for e in log])
    for entry, i in zip(log, (0, 6)):
      zero, subnormal = _expected(_gradients(i))
      self.assertEqual(zero, _short(entry["zero"]))
      self.assertEqual(subnormal, _short(entry["subnormal"]))
    self.assertLen(mplso.overflow_log(opt), 1)  # Step 3's.

  @parameterized.named_parameters(*testing.NAMED_MODES)
  def test_v1_global_step_and_indexed_slices(self, mode):
    with testing.ModeRunner(mode) as runner:
      emb = tf.Variable(np.ones((5, 2), np.float32), name="emb")
      global_step = tf.Variable(0, dtype=tf.int64)
      opt = mplso.MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(0.5), "dynamic")
      mplso.meter_underflow(opt, every=2)
      # Rows 1 and 3 (3 twice, summing to zero) of five: 9 of 10 are 0.
      grad = tf.IndexedSlices(
          tf.constant([[1., 0.], [2., 3.], [-2., -3.]]),
          tf.constant([1, 3, 3]), tf.constant([5, 2]))
      step = runner.step(lambda: opt.apply_gradients(
          [(grad, emb)], global_step=global_step))
      runner.initialize()
      for _ in range(3):
        step()
      log = mplso.underflow_log(opt, session=runner.session)
    self.assertEqual([0, 2], [e["step"] for e in log])
    dense = np.zeros((5, 2))
    dense[1] = [1., 0.]
    self.assertEqual([{"emb": float(np.mean(dense == 0))}] * 2,
                     [e["zero"] for e in log])
    self.assertEqual([{}] * 2, [e["subnormal"] for e in log])
    self.assertEqual([2.**15] * 2, [e["loss_scale"] for e in log])

  @parameterized.named_parameters(*testing.NAMED_MODES)
  def test_v1_without_global_step_counts_its_own_steps(self, mode):
    with testing.ModeRunner(mode) as runner:
      a = tf.Variable([1., 2.], name="a")
      opt = V1_FAMILIES["v1"]()
      mplso.meter_underflow(opt, every=2)
      poison = tf.Variable(0.)
      step = runner.step(lambda: opt.apply_gradients(
          [(tf.stack([tf.convert_to_tensor(poison), 0.]), a)]))
      runner.initialize()
      for value in (0., 0., NAN, 1., 0.):  # Step 2 is due but skipped.
        runner.assign(poison, value)
        step()
      log = mplso.underflow_log(opt, session=runner.session)
      overflow = mplso.overflow_log(opt, session=runner.session)
    self.assertEqual([0, 4], [e["step"] for e in log])
    self.assertEqual([{"a": 1.}, {"a": 1.}], [e["zero"] for e in log])
    self.assertEqual([2], [e["step"] for e in overflow])  # The same count.

  def test_v1_global_step_samples_the_step_after_a_skipped_due_one(self):
    with testing.ModeRunner(testing.GRAPH) as runner:
      a = tf.Variable([1., 2.], name="a")
      global_step = tf.Variable(0, dtype=tf.int64)
      grad = tf.compat.v1.placeholder(tf.float32, [2])
      opt = V1_FAMILIES["v1"]()
      mplso.meter_underflow(opt, every=2)
      train_op = opt.apply_gradients([(grad, a)], global_step=global_step)
      runner.initialize()
      # global_step 0 (sampled), 1, 2 (skipped: it stays 2), 2 (sampled).
      for value in ([0., 1.], [1., 1.], [NAN, 0.], [0., 0.]):
        runner.session.run(train_op, {grad: value})
      log = mplso.underflow_log(opt, runner.session)
    self.assertEqual([(0, {"a": .5}), (2, {"a": 1.})],
                     [(e["step"], e["zero"]) for e in log])

  def test_tf_keras_legacy_in_a_tf1_session(self):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
      a = tf.Variable([1., 2., 3., 4.], name="a")
      grad = tf.compat.v1.placeholder(tf.float32, [4])
      opt = mplso.keras.LossScaleOptimizer(
          KERAS_FAMILIES["tf_keras_legacy"](), 8)
      mplso.meter_underflow(opt, every=1)
      train_op = opt.apply_gradients([(grad, a)])
      session.run(tf.compat.v1.global_variables_initializer())
      for value in ([0., 1., 0., 0.], [1., 1., 1., 0.]):
        session.run(train_op, {grad: value})
      log = mplso.underflow_log(opt, session)
    self.assertEqual([0, 1], [e["step"] for e in log])
    self.assertEqual([{"a": .75}, {"a": .25}], [e["zero"] for e in log])
    with self.assertRaisesRegex(ValueError, r"underflow log of a TF1 graph "
                                r"needs a session"):
      mplso.underflow_log(opt)

  def test_keeps_the_last_samples(self):
    a = tf.Variable([1., 2.], name="a")
    opt = V1_FAMILIES["v1"]()
    mplso.meter_underflow(opt, every=1)
    for _ in range(underflow_meter.SAMPLES + 3):
      opt.apply_gradients([(tf.constant([0., 1.]), a)])
    steps = [e["step"] for e in mplso.underflow_log(opt)]
    self.assertEqual(list(range(3, underflow_meter.SAMPLES + 3)), steps)

  def test_none_gradient_is_left_out(self):
    a, b = tf.Variable([1., 2.], name="a"), tf.Variable(1., name="b")
    opt = mplso.keras.LossScaleOptimizer(
        KERAS_FAMILIES["tf_keras_legacy"](), 8)
    mplso.meter_underflow(opt, every=1)
    opt.apply_gradients([(tf.constant([0., 1.]), a), (None, b)])
    self.assertEqual([{"a": .5}], [e["zero"] for e in
                                   mplso.underflow_log(opt)])


class MirroredTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ("keras_3", "keras_3"), ("tf_keras_legacy", "tf_keras_legacy"),
      ("contrib", "contrib"), ("tf_keras", "tf_keras"))
  def test_fractions_over_every_replica(self, family):
    # Reduced through one device: collective instances are numbered per
    # process, and another test's strategy may have used these numbers for
    # tensors of other shapes.
    strategy = strategies.mirrored(2)
    with strategy.scope():
      a, _ = _variables(family)
      opt = _optimizer(family)
    mplso.meter_underflow(opt, every=1)

    def replica_step():
      replica = tf.distribute.get_replica_context().replica_id_in_sync_group
      # Replica 0: one zero of four; replica 1: three.
      grad = tf.where(tf.equal(replica, 0), tf.constant([0., 1., 1., 1.]),
                      tf.constant([0., 0., 0., 1.]))
      opt.apply_gradients([(grad, a)])

    @tf.function
    def step():
      strategy.run(replica_step)

    step()
    log = mplso.underflow_log(opt)
    # tf_keras's new optimizers sum the gradients before the finite check
    # (docs/why-skipped.md): each replica then holds the sum, one zero.
    expected = .25 if family == "tf_keras" else .5
    self.assertEqual([{"a": expected}], [_short(e["zero"]) for e in log])


@pytest.mark.multiworker
class MultiWorkerTest(tf.test.TestCase):
  """Two worker processes on 127.0.0.1 under MultiWorkerMirroredStrategy."""

  def test_fractions_over_the_replicas_of_every_worker(self):
    ports = testing.free_ports(2)
    workers = [processes.start(
        "mplso_test.helpers.workers.underflow_multiworker_worker",
        env=testing.worker_env(ports, index), add_cleanup=self.addCleanup,
        name=f"worker {index}") for index in range(2)]
    logs = [json.loads(processes.last_line(output))
            for output in processes.finish(workers)]
    # One zero of two on worker 0, two on worker 1: 3 of 4 on both.
    expected = [{"step": 0, "loss_scale": 8., "zero": {"a": .75, "b": 0.},
                 "subnormal": {}}]
    for family in ("v1", "keras_3"):
      for worker_logs in logs:
        log = worker_logs[family]
        for entry in log:
          entry["zero"] = _short(entry["zero"])
        self.assertEqual(expected, log, family)


class OffTest(tf.test.TestCase):

  def test_unmetered_step_has_no_meter_op(self):
    a = tf.Variable([1., 2.], name="a")
    opt = V1_FAMILIES["v1"]()
    step = tf.function(lambda g: [opt.apply_gradients([(g, a)]), None][1])
    graph = step.get_concrete_function(tf.constant([0., 1.])).graph
    names = [op.name for op in graph.get_operations()]
    self.assertNotIn(underflow_meter.NAME_SCOPE, " ".join(names))
    self.assertEqual([], mplso.underflow_log(opt))

  def test_metered_step_adds_only_the_sample_cond_to_the_apply_branch(self):
    graphs = {metered: _traced_step(metered) for metered in (False, True)}
    outer = {metered: collections.Counter(node.op for node in graph.node)
             for metered, graph in graphs.items()}
    # Outside the step's cond, only the captures of the meter's two
    # variables (its rows and its count), inputs of the cond.
    self.assertEqual({"Placeholder": 2}, outer[True] - outer[False])
    self.assertEqual({}, outer[False] - outer[True])
    # Inside: two more functions, the sample cond's branches; no op calls
    # back into Python.
    functions = {metered: {f.signature.name for f in graph.library.function}
                 for metered, graph in graphs.items()}
    self.assertLen(functions[True], len(functions[False]) + 2)
    self.assertEqual(collections.Counter(), graph_ops.count_ops(
        graphs[True]) & collections.Counter(
            dict.fromkeys(graph_ops.HOST_CALLBACK_OPS, 1)))


class NotDueStepTest(tf.test.TestCase):
  """What a step that is not due runs, in a TF1 session after Grappler."""

  def _executed_nodes(self, gradients: int, metered: bool) -> int:
    """Nodes the second step (step 1: not due) runs, in its step stats."""
    graph = tf.Graph()
    with graph.as_default():
      fed = tf.compat.v1.placeholder(tf.float32, [2])
      variables = [tf.Variable([1., 2.]) for _ in range(gradients)]
      opt = V1_FAMILIES["v1"]()
      if metered:
        mplso.meter_underflow(opt, every=100)
      step = opt.apply_gradients(
          [(fed * (i + 1.), v) for i, v in enumerate(variables)],
          global_step=tf.compat.v1.train.get_or_create_global_step())
      init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as session:
      session.run(init)
      session.run(step, {fed: [0., 1.]})  # Step 0: due, samples.
      metadata = tf.compat.v1.RunMetadata()
      session.run(step, {fed: [0., 1.]}, options=tf.compat.v1.RunOptions(
          trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
                  run_metadata=metadata)
      self.assertLen(mplso.underflow_log(opt, session) if metered else [1],
                     1)
    return sum(len(d.node_stats) for d in metadata.step_stats.dev_stats)

  def test_a_step_not_due_runs_no_node_per_gradient(self):
    # The sample's cond is not lowered to a Switch per gradient: a step that
    # is not due runs the same few nodes more, for 2 or 20 gradients.
    added = {n: self._executed_nodes(n, True) - self._executed_nodes(n, False)
             for n in (2, 20)}
    self.assertEqual(added[2], added[20])
    self.assertBetween(added[2], 1, 20)


class BesideTheUpdateTest(tf.test.TestCase):
  """The sample runs beside the wrapped update, which waits for its read."""

  def test_the_update_waits_for_the_counter_read_not_the_sample(self):
    graph = tf.Graph()
    with graph.as_default():
      variable = tf.Variable([1., 2.])
      opt = V1_FAMILIES["v1"]()
      mplso.meter_underflow(opt, every=2)
      step = opt.apply_gradients(
          [(tf.constant([0., 1.]), variable)],
          global_step=tf.compat.v1.train.get_or_create_global_step())
    # The graph or function that holds the meter's cond (the apply branch).
    definition = graph.as_graph_def()
    nodes, = [nodes for nodes in [definition.node] + [
        f.node_def for f in definition.library.function]
              if any(_is_meter(n.name, "cond") for n in nodes)]
    inputs = {n.name: [i.lstrip("^").split(":")[0] for i in n.input]
              for n in nodes}
    kinds = {n.name: n.op for n in nodes}

    def after(name):
      """Whether `name` runs after (depends on) the node of each name."""
      seen, todo = set(), [name]
      while todo:
        for upstream in inputs.get(todo.pop(), []):
          if upstream not in seen:
            seen.add(upstream)
            todo.append(upstream)
      return seen

    updates = [name for name, kind in kinds.items()
               if kind.startswith(("ResourceApply", "AssignAdd"))]
    self.assertNotEmpty(updates)
    for update in updates:
      before = after(update)
      self.assertFalse([n for n in before if _is_meter(n, "cond")], update)
      self.assertTrue([n for n in before if _is_meter(n, "ReadVariableOp")],
                      update)
    with tf.compat.v1.Session(graph=graph) as session:
      session.run(tf.compat.v1.global_variables_initializer())
      for _ in range(3):
        session.run(step)
      # Steps 0 and 2 sampled, with the count before each update.
      self.assertEqual([0, 2], [row["step"] for row in
                                mplso.underflow_log(opt, session)])


def _is_meter(name: str, op_name: str) -> bool:
  """Whether node `name` is the meter's op of `op_name` (any scope suffix)."""
  scope, _, rest = name.rpartition("/")
  return rest == op_name and re.fullmatch(
      rf"(.*/)?{underflow_meter.NAME_SCOPE}(_\d+)?", scope) is not None


def _traced_step(metered: bool) -> tf.compat.v1.GraphDef:
  """The graph of a TF1 optimizer's step in a `tf.function`."""
  a = tf.Variable([1., 2.], name="a")
  opt = V1_FAMILIES["v1"]()
  if metered:
    mplso.meter_underflow(opt)
  step = tf.function(lambda g: [opt.apply_gradients([(g, a)]), None][1])
  return step.get_concrete_function(
      tf.constant([0., 1.])).graph.as_graph_def()


class ErrorsTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ("zero", 0, ValueError, r"1 or more.*every=0"),
      ("negative", -5, ValueError, r"every=-5"),
      ("float", 2.0, TypeError, r"must be an int.*every=2.0 of type float"),
      ("string", "10", TypeError, r"every='10' of type str"),
      ("bool", True, TypeError, r"every=True of type bool"))
  def test_bad_every(self, every, error, message):
    with self.assertRaisesRegex(error, message):
      mplso.meter_underflow(V1_FAMILIES["v1"](), every=every)

  def test_numpy_int_is_an_int(self):
    mplso.meter_underflow(V1_FAMILIES["v1"](), every=np.int64(5))

  def test_not_an_mplso_optimizer(self):
    with self.assertRaisesRegex(ValueError, r"mplso optimizer.*"
                                r"optimizer=.*GradientDescent"):
      mplso.meter_underflow(tf.compat.v1.train.GradientDescentOptimizer(1.))
    with self.assertRaisesRegex(ValueError, r"optimizer=.*GradientDescent"):
      mplso.underflow_log(tf.compat.v1.train.GradientDescentOptimizer(1.))

  def test_after_the_first_step(self):
    a = tf.Variable([1., 2.], name="a")
    opt = V1_FAMILIES["v1"]()
    opt.apply_gradients([(tf.constant([0., 1.]), a)])
    with self.assertRaisesRegex(ValueError, r"before the optimizer's first "
                                r"step is built.*optimizer=<.*v1_optimizer"):
      mplso.meter_underflow(opt)
    self.assertEqual([], mplso.underflow_log(opt))


class MonitorTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{package}_{dialect}", package, dialect)
      for package in ("keras", "tf_keras") for dialect in ("tf23", "tf24"))
  def test_history_and_tensorboard(self, package, dialect):
    keras = importlib.import_module(package)
    if dialect == "tf23":
      opt = mplso.keras.LossScaleOptimizer(keras.optimizers.SGD(0.01), 64)
    else:  # TF 2.4's arguments: its `loss_scale` is a tensor.
      opt = mplso.keras.LossScaleOptimizer(keras.optimizers.SGD(0.01),
                                           initial_scale=64.)
    mplso.meter_underflow(opt, every=2)
    model = keras.Sequential([keras.Input((3,)),
                              keras.layers.Dense(2, name="dense")])
    model.compile(optimizer=opt, loss="mse")
    # Input column 0 is always zero: so is row 0 of the kernel's gradient,
    # 2 of its 6 elements; the bias's gradient has none.
    x = np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)
    x[:, 0] = 0.
    y = np.ones((16, 2), np.float32)
    log_dir = self.create_tempdir().full_path
    monitor = mplso.keras.LossScaleMonitor(log_dir=log_dir, optimizer=opt)
    history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False,
                        verbose=0, callbacks=[monitor])
    log = mplso.underflow_log(opt)
    self.assertEqual([0, 2, 4, 6], [e["step"] for e in log])
    kernel = next(n for n in log[-1]["zero"] if "kernel" in n)
    self.assertEqual({kernel: 1 / 3}, {
        n: v for n, v in log[-1]["zero"].items() if v})
    self.assertEqual([1 / 3, 1 / 3], history.history["max_zero_fraction"])
    self.assertNotIn("max_subnormal_fraction", history.history)
    events = read_events(log_dir)
    self.assertAllClose([(0, 1 / 3), (1, 1 / 3)],
                        events[f"epoch_zero_fraction/{kernel}"])
    self.assertIn("epoch_max_zero_fraction", events)

  def test_unmetered_monitor_adds_nothing(self):
    keras = importlib.import_module("keras")
    opt = mplso.keras.LossScaleOptimizer(keras.optimizers.SGD(0.01), 64)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=opt, loss="mse")
    history = model.fit(np.ones((4, 3)), np.ones((4, 1)), verbose=0,
                        callbacks=[mplso.keras.LossScaleMonitor()])
    self.assertNotIn("max_zero_fraction", history.history)


class SummaryTest(tf.test.TestCase):

  def test_tf1_summaries_of_the_newest_sample(self):
    log_dir = self.create_tempdir().full_path
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
      a, h = _variables("v1")
      grad_a = tf.compat.v1.placeholder(tf.float32, [4])
      grad_h = tf.compat.v1.placeholder(tf.float16, [6])
      opt = V1_FAMILIES["v1"]()
      mplso.meter_underflow(opt, every=2)
      with self.assertRaisesRegex(ValueError, r"after minimize\(\)"):
        mplso.summary.loss_scale_scalars(opt)
      train_op = opt.apply_gradients([(grad_a, a), (grad_h, h)])
      summaries = mplso.summary.loss_scale_scalars(opt)
      self.assertLen(summaries, 4 + 3)  # zero: a, h; subnormal: h.
      merged = tf.compat.v1.summary.merge_all()
      writer = tf.compat.v1.summary.FileWriter(log_dir)
      session.run(tf.compat.v1.global_variables_initializer())
      for i in range(4):
        grads = _gradients(i + 4)  # No NaN: every step applies.
        session.run(train_op, {grad_a: grads[0], grad_h: grads[1]})
        writer.add_summary(session.run(merged), i)
      writer.close()
    events = read_events(log_dir)
    # Steps 0 and 2 are sampled: the newest is step 0's, then step 2's.
    zero = [_expected(_gradients(i))[0] for i in (4, 4, 6, 6)]
    subnormal = [_expected(_gradients(i))[1] for i in (4, 4, 6, 6)]
    for name in ("a", "h"):
      self.assertAllClose([z[name] for z in zero],
                          [v for _, v in events[f"zero_fraction/{name}"]])
    self.assertAllClose([s["h"] for s in subnormal],
                        [v for _, v in events["subnormal_fraction/h"]])
    self.assertNotIn("subnormal_fraction/a", events)


class SavingTest(tf.test.TestCase):

  def test_checkpoint_keys_unchanged_and_saved_model_meters(self):
    directory = self.create_tempdir().full_path
    keys = {}
    for metered in (False, True):
      module = _Module(metered)
      module.step(tf.constant([0., 1., 0., 1.]))
      path = tf.train.Checkpoint(module=module).save(
          os.path.join(directory, f"ckpt_{metered}"))
      keys[metered] = [name for name, _ in tf.train.list_variables(path)]
    self.assertEqual(keys[False], keys[True])
    # A new metered optimizer restores the checkpoint as any other.
    restored = _Module(True)
    tf.train.Checkpoint(module=restored).restore(
        path).assert_existing_objects_matched()
    self.assertAllEqual([1., 1.5, 3., 3.5], restored.a)
    self.assertEqual([], mplso.underflow_log(restored.opt))
    # The SavedModel's step keeps metering into its own restored rows.
    tf.saved_model.save(module, os.path.join(directory, "saved"))
    loaded = tf.saved_model.load(os.path.join(directory, "saved"))
    loaded.step(tf.constant([0., 0., 0., 1.]))
    rows = loaded.opt.loss_scale.underflow_log_0.numpy()
    ordinal, zero = underflow_meter.ORDINAL, underflow_meter.FIRST_FRACTION
    self.assertEqual([(1., .5), (2., .75)],
                     [(r[ordinal], r[zero]) for r in rows[:2]])


class SavedModelFamiliesTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters((family, family) for family in FAMILIES)
  def test_metered_step_saves_and_runs_after_loading(self, family):
    module = tf.Module()
    module.a, _ = _variables(family)
    module.opt = _optimizer(family)
    mplso.meter_underflow(module.opt, every=1)
    module.step = tf.function(
        lambda g: [module.opt.apply_gradients([(g, module.a)]), None][1],
        input_signature=[tf.TensorSpec([4])])
    module.step(tf.constant([0., 1., 0., 1.]))
    path = os.path.join(self.create_tempdir().full_path, "saved")
    tf.saved_model.save(module, path)
    loaded = tf.saved_model.load(path)
    loaded.step(tf.constant([0., 1., 1., 1.]))
    # From ones, SGD(0.5) applied both steps' gradients.
    self.assertAllEqual([1., 0., .5, 0.], loaded.a.numpy())


class _Module(tf.Module):
  """A TF1 optimizer's step in a `tf.function` that a SavedModel keeps."""

  def __init__(self, metered):
    super().__init__()
    self.a = tf.Variable([1., 2., 3., 4.])
    self.opt = mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.5), "dynamic")
    if metered:
      mplso.meter_underflow(self.opt, every=1)

  @tf.function(input_signature=[tf.TensorSpec([4])])
  def step(self, grad):
    self.opt.apply_gradients([(grad, self.a)])


if __name__ == "__main__":
  absltest.main()
