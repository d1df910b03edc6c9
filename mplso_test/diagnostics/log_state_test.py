"""The overflow log's state: its stores, and one state per loss scale."""

import gc
import os
import weakref

from absl.testing import absltest
import numpy as np
import tensorflow as tf

import mplso
from mplso._src.diagnostics import log_state
from mplso_test.helpers import testing

# A matrix to write; the stores hold float64.
MATRIX = np.arange(6., dtype=np.float64).reshape(2, 3) + 1.
# A counters row: count 3, stall 1, last step 7, 2 NaN steps, 1 Inf step.
COUNTERS = [[3., 1., 7., 2., 1.]]


class _LossScale:
  """Stands for a loss scale: the state only needs a key it can hold weakly."""


def _collections(graph: tf.Graph) -> dict[str, list]:
  return {key: list(graph.get_collection(key))
          for key in graph.get_all_collection_keys()}


def _checkpoint_keys(path: str) -> list[str]:
  return [name for name, _ in tf.train.list_variables(path)]


class StoreTest(tf.test.TestCase):

  def test_eager_store_is_a_host_variable_of_zeros_until_written(self):
    with tf.device("/cpu:1"):  # Any other device (conftest splits the CPU).
      store = log_state.new_store((2, 3))
    self.assertIsInstance(store, log_state.VariableStore)
    self.assertEndsWith(store.variable.device, "CPU:0")
    self.assertFalse(store.variable.trainable)
    self.assertEqual(tf.float64, store.read().dtype)
    self.assertAllEqual(np.zeros((2, 3)), store.read())
    store.write(tf.constant(MATRIX))
    self.assertAllEqual(MATRIX, store.read())

  def test_a_store_made_in_a_function_is_an_eager_variable(self):
    stores = []

    @tf.function
    def write():
      stores.append(log_state.new_store((2, 3)))
      stores[0].write(tf.constant(MATRIX))

    write()
    store, = stores
    self.assertIsInstance(store, log_state.VariableStore)
    # Read outside the function that made it: it was made eagerly.
    self.assertAllEqual(MATRIX, store.read())

  def test_a_strategy_does_not_mirror_the_store(self):
    strategy = testing.STRATEGIES[testing.MIRRORED_2]()
    with strategy.scope():
      store = log_state.new_store((1, 2))
    self.assertNotIsInstance(store.variable, tf.distribute.DistributedValues)

  def test_graph_store_is_a_table_of_zeros_until_written(self):
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      store = log_state.new_store((2, 3))
      self.assertIsInstance(store, log_state.TableStore)
      read = store.read()
      self.assertEqual([2, 3], read.shape.as_list())
      # No initializer was run.
      self.assertAllEqual(np.zeros((2, 3)), sess.run(read))
      sess.run(store.write(tf.constant(MATRIX)))
      self.assertAllEqual(MATRIX, sess.run(read))
      self.assertAllEqual(MATRIX, sess.run(store.read()))  # A new read op.
      self.assertIs(store.cached_read(), store.cached_read())
      self.assertAllEqual(MATRIX, sess.run(store.cached_read()))

  def test_graph_store_is_written_from_inside_a_cond_branch(self):
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      store = log_state.new_store((2, 3))
      skipped = tf.compat.v1.placeholder(tf.bool, [])

      def write():
        with tf.control_dependencies([store.write(tf.constant(MATRIX))]):
          return tf.constant(True)

      step = tf.cond(skipped, write, lambda: tf.constant(False))
      read = store.read()
      sess.run(step, {skipped: False})
      self.assertAllEqual(np.zeros((2, 3)), sess.run(read))
      sess.run(step, {skipped: True})
      self.assertAllEqual(MATRIX, sess.run(read))

  def test_graph_stores_are_apart_per_store_and_per_session(self):
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      store, other = log_state.new_store((2, 3)), log_state.new_store((2, 3))
      sess.run(store.write(tf.constant(MATRIX)))
      self.assertAllEqual(np.zeros((2, 3)), sess.run(other.read()))
      with tf.compat.v1.Session() as second:
        self.assertAllEqual(np.zeros((2, 3)), second.run(store.read()))
      self.assertAllEqual(MATRIX, sess.run(store.read()))

  def test_graph_state_needs_no_initializer_and_is_not_saved(self):
    with tf.Graph().as_default() as graph, tf.compat.v1.Session() as sess:
      tf.compat.v1.Variable(1., name="w")
      collections = _collections(graph)
      loss_scale = _LossScale()
      _, count_op = log_state.count_step(loss_scale)
      log = log_state.log_for(loss_scale, ["w"], [0])
      read = log_state.counts(loss_scale)["skipped_steps"]
      self.assertEqual(collections, _collections(graph))
      # Only the global variables are initialised, as much TF1 code does.
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(count_op)
      sess.run([read, log.rows.cached_read()])
      path = tf.compat.v1.train.Saver().save(
          sess, os.path.join(self.get_temp_dir(), "graph_state"))
    self.assertEqual(["w"], _checkpoint_keys(path))


class StateTest(tf.test.TestCase):

  def test_context_graph_is_none_eagerly_and_in_functions(self):
    self.assertIsNone(log_state.context_graph())
    seen = []
    tf.function(lambda: seen.append(log_state.context_graph()))()
    self.assertEqual([None], seen)
    with tf.Graph().as_default() as graph:
      self.assertIs(graph, log_state.context_graph())
      # A function built in a TF1 graph keeps its state in that graph.
      tf.function(lambda: seen.append(log_state.context_graph()))()
    self.assertIs(graph, seen[-1])

  def test_one_state_per_loss_scale_and_graph(self):
    loss_scale = _LossScale()
    eager = log_state.state_of(loss_scale)
    self.assertIs(eager, log_state.state_of(loss_scale))
    self.assertIsInstance(eager.counters, log_state.VariableStore)
    self.assertAllEqual(np.zeros((1, log_state.COUNTERS)),
                        eager.counters.read())
    self.assertEqual(([], None), (eager.logs, eager.steps))
    in_function = []
    tf.function(lambda: in_function.append(log_state.state_of(loss_scale)))()
    self.assertIs(eager, in_function[0])
    self.assertIsNot(eager, log_state.state_of(_LossScale()))
    graphs = []
    for _ in range(2):
      with tf.Graph().as_default() as graph:
        state = log_state.state_of(loss_scale)
        self.assertIs(state, log_state.state_of(loss_scale))
        self.assertIsInstance(state.counters, log_state.TableStore)
        graphs.append(graph)
    self.assertCountEqual([None, *graphs], log_state.STATES[loss_scale])
    self.assertLen({id(s) for s in log_state.STATES[loss_scale].values()}, 3)

  def test_state_is_dropped_with_its_loss_scale(self):
    loss_scale = mplso.DynamicLossScale()
    log_state.log_for(loss_scale, ["w"], [0])
    log_state.count_step(loss_scale)
    with tf.Graph().as_default():
      log_state.log_for(loss_scale, ["w"], [0])
    self.assertIn(loss_scale, log_state.STATES)
    gc.collect()  # The loss scales earlier tests dropped go first.
    states = len(log_state.STATES)
    dropped = weakref.ref(loss_scale)
    del loss_scale
    gc.collect()
    self.assertIsNone(dropped())
    self.assertLen(log_state.STATES, states - 1)

  def test_saved_variables_are_the_eager_stores_only(self):
    loss_scale = _LossScale()
    self.assertEqual({}, log_state.saved_variables(loss_scale))
    with tf.Graph().as_default():
      log_state.log_for(loss_scale, ["w"], [0])
      log_state.count_step(loss_scale)
    self.assertEqual({}, log_state.saved_variables(loss_scale))
    state = log_state.state_of(loss_scale)
    stores = {"overflow_log_counters": state.counters}
    self.assertEqual(stores.keys(),
                     log_state.saved_variables(loss_scale).keys())
    log_state.count_step(loss_scale)
    stores["overflow_log_steps"] = state.steps
    for i, names in enumerate((["w"], ["w", "b"])):
      stores[f"overflow_log_{i}"] = log_state.log_for(loss_scale, names,
                                                      [0]).rows
    saved = log_state.saved_variables(loss_scale)
    self.assertEqual(stores.keys(), saved.keys())
    for name, store in stores.items():
      self.assertIs(store.variable, saved[name], name)

  def test_a_checkpoint_keeps_tf_keys(self):
    loss_scale = mplso.DynamicLossScale()
    directory = self.get_temp_dir()
    checkpoint = tf.train.Checkpoint(loss_scale=loss_scale)
    before = checkpoint.write(os.path.join(directory, "before"))
    log_state.log_for(loss_scale, ["w"], [0])
    log_state.count_step(loss_scale)
    after = checkpoint.write(os.path.join(directory, "after"))
    self.assertEqual(_checkpoint_keys(before), _checkpoint_keys(after))

  def test_a_saved_model_holds_the_eager_state(self):
    loss_scale = mplso.DynamicLossScale()
    log_state.log_for(loss_scale, ["w"], [0])
    log_state.count_step(loss_scale)
    log_state.state_of(loss_scale).counters.write(tf.constant(COUNTERS,
                                                              tf.float64))
    module = tf.Module()
    module.loss_scale = loss_scale
    path = os.path.join(self.get_temp_dir(), "saved_model")
    tf.saved_model.save(module, path)
    loaded = tf.saved_model.load(path).loss_scale
    self.assertAllEqual(COUNTERS, loaded.overflow_log_counters)
    self.assertAllEqual([[1.]], loaded.overflow_log_steps)
    self.assertEqual([log_state.CAPACITY, log_state.FIRST_KIND + 2],
                     loaded.overflow_log_0.shape.as_list())


class CountStepTest(tf.test.TestCase):

  def test_eagerly_counts_as_it_runs(self):
    loss_scale = _LossScale()
    counted = [log_state.count_step(loss_scale) for _ in range(3)]
    self.assertEqual([(0., None), (1., None), (2., None)],
                     [(float(value), op) for value, op in counted])
    self.assertEqual(tf.float64, counted[0][0].dtype)
    self.assertAllEqual([[3.]], log_state.state_of(loss_scale).steps.read())

  def test_a_function_counts_each_call_with_eager_steps(self):
    loss_scale = _LossScale()
    ops = []

    @tf.function
    def count():
      value, op = log_state.count_step(loss_scale)
      ops.append(op)
      return value

    self.assertEqual([0., 1., 2.], [float(count()) for _ in range(3)])
    self.assertLen(ops, 1)  # Traced once.
    self.assertIsNotNone(ops[0])
    value, _ = log_state.count_step(loss_scale)  # The same count.
    self.assertEqual(3., float(value))

  def test_a_session_counts_each_run_of_the_op(self):
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      loss_scale = _LossScale()
      value, op = log_state.count_step(loss_scale)
      self.assertIsInstance(op, tf.Operation)
      self.assertEqual(tf.float64, value.dtype)
      self.assertEqual([0., 1., 2.],
                       [sess.run([value, op])[0] for _ in range(3)])
      self.assertEqual(3., sess.run(value))  # Reading does not count.
      self.assertEqual(3., sess.run(value))


class LogForTest(tf.test.TestCase):

  def test_the_same_variables_have_the_same_log(self):
    loss_scale = _LossScale()
    log = log_state.log_for(loss_scale, ["a", "b"], [0])
    self.assertIs(log, log_state.log_for(loss_scale, ["a", "b"], [0]))
    self.assertIsInstance(log.rows, log_state.VariableStore)
    self.assertEqual(log_state.FIRST_KIND + 3, log.width)
    self.assertAllEqual(np.zeros((log_state.CAPACITY, log.width)),
                        log.rows.read())
    others = [log_state.log_for(loss_scale, ["a"], [0]),
              log_state.log_for(loss_scale, ["a", "b"], [0, 1])]
    for other in others:
      self.assertIsNot(log, other)
    self.assertEqual(log_state.FIRST_KIND + 4, others[1].width)
    self.assertEqual([id(x) for x in [log, *others]],
                     [id(x) for x in log_state.state_of(loss_scale).logs])
    self.assertIsNot(log, log_state.log_for(_LossScale(), ["a", "b"], [0]))

  def test_graph_log_is_read_outside_the_branch_it_was_made_in(self):
    with tf.Graph().as_default() as graph, tf.compat.v1.Session() as sess:
      loss_scale = _LossScale()
      skipped = tf.compat.v1.placeholder(tf.bool, [])
      logs = []

      def make_log():
        logs.append(log_state.log_for(loss_scale, ["w"], [0]))
        return tf.constant(True)

      tf.cond(skipped, make_log, lambda: tf.constant(False))
      log, = logs
      self.assertIsInstance(log.rows, log_state.TableStore)
      read = log.rows.cached_read()
      self.assertStartsWith(read.op.name, log_state.NAME_SCOPE + "/")
      self.assertIs(graph, read.graph)
      # As `MonitoredTrainingSession` does: no op can be added any more.
      graph.finalize()
      self.assertIs(log, log_state.log_for(loss_scale, ["w"], [0]))
      self.assertIs(read, log.rows.cached_read())
      self.assertAllEqual(np.zeros((log_state.CAPACITY, log.width)),
                          sess.run(read))


class CountsTest(tf.test.TestCase):

  def test_eagerly_reads_the_counters_as_they_are_now(self):
    loss_scale = _LossScale()
    counts = log_state.counts(loss_scale)
    self.assertEqual(["skipped_steps", "nan_steps", "inf_steps"], list(counts))
    self.assertEqual([0., 0., 0.], [float(c) for c in counts.values()])
    self.assertEqual([tf.float64] * 3, [c.dtype for c in counts.values()])
    log_state.state_of(loss_scale).counters.write(
        tf.constant(COUNTERS, tf.float64))
    self.assertEqual({"skipped_steps": 3., "nan_steps": 2., "inf_steps": 1.},
                     {k: float(c) for k, c in
                      log_state.counts(loss_scale).items()})

  def test_in_a_graph_each_call_is_one_read_run_later(self):
    with tf.Graph().as_default() as graph, tf.compat.v1.Session() as sess:
      loss_scale = _LossScale()

      def reads():
        return sum(op.type == "LookupTableFindV2"
                   for op in graph.get_operations())

      counts = log_state.counts(loss_scale)  # Before anything is written.
      self.assertEqual(1, reads())
      self.assertEqual({"skipped_steps": 0., "nan_steps": 0.,
                        "inf_steps": 0.}, sess.run(counts))
      sess.run(log_state.state_of(loss_scale).counters.write(
          tf.constant(COUNTERS, tf.float64)))
      self.assertEqual({"skipped_steps": 3., "nan_steps": 2.,
                        "inf_steps": 1.}, sess.run(counts))
      log_state.counts(loss_scale)
      self.assertEqual(2, reads())


if __name__ == "__main__":
  absltest.main()
