"""`mplso._src.core.rare_branch`: a rarely taken branch reading every gradient.

The meter's and the calibration's own tests train with it; here, the same
values as `tf.cond` for every kind of gradient, in every place a step is
built, and what a step that does not take the branch runs: one packed value
through the cond, not one Switch per gradient.
"""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context

from mplso._src.core import rare_branch
from mplso_test.helpers import strategies


def _grads():
  """Dense, float16, sparse and None gradients."""
  return [
      tf.constant([[1., -2.], [3., 4.]]),
      None,
      tf.constant([0.5, 0.], tf.float16),
      tf.IndexedSlices(tf.constant([[5., 6.]]), tf.constant([1], tf.int64),
                       tf.constant([3, 2], tf.int64)),
  ]


def _total(grads) -> tf.Tensor:
  """A float32 sum of every gradient's values, sparse ones densified."""
  total = tf.constant(0.)
  for grad in grads:
    if grad is not None:
      total += tf.reduce_sum(tf.cast(tf.convert_to_tensor(grad), tf.float32))
  return total


def _branch(pred):
  """`rare_branch` on `_grads()`: their total when `pred`, else -1."""
  grads = _grads()
  return rare_branch.rare_branch(pred, grads, _total,
                                 lambda: tf.constant(-1.))


# 1 - 2 + 3 + 4 + 0.5 + 0 + 5 + 6.
TOTAL = 17.5


class SameValuesTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(True, False)
  def test_eagerly(self, pred):
    self.assertEqual(TOTAL if pred else -1., float(_branch(tf.constant(pred))))

  def test_in_a_function(self):
    step = tf.function(_branch)
    self.assertEqual(TOTAL, float(step(tf.constant(True))))
    self.assertEqual(-1., float(step(tf.constant(False))))

  def test_in_a_function_compiled_by_xla(self):
    step = tf.function(_branch, jit_compile=True)
    self.assertEqual(TOTAL, float(step(tf.constant(True))))
    self.assertEqual(-1., float(step(tf.constant(False))))
    # XLA has no kernel for an Optional: nothing is packed there.
    ops = step.get_concrete_function(tf.constant(True)).graph.get_operations()
    self.assertFalse([op for op in ops if op.type.startswith("Optional")])

  def test_in_a_tf1_graph(self):
    with tf.Graph().as_default():
      pred = tf.compat.v1.placeholder(tf.bool, [])
      result = _branch(pred)
      with tf.compat.v1.Session() as session:
        self.assertEqual(TOTAL, session.run(result, {pred: True}))
        self.assertEqual(-1., session.run(result, {pred: False}))

  def test_on_the_single_threaded_executor(self):
    # It refuses Switch: `tf.cond` keeps its If op there, and so does this.
    with context.function_executor_type("SINGLE_THREADED_EXECUTOR"):
      step = tf.function(_branch)
      self.assertEqual(TOTAL, float(step(tf.constant(True))))
      self.assertEqual(-1., float(step(tf.constant(False))))

  def test_without_a_gradient_the_branch_still_runs(self):
    result = tf.function(lambda: rare_branch.rare_branch(
        tf.constant(True), [None, None], lambda g: tf.constant(len(g)),
        lambda: tf.constant(-1)))()
    self.assertEqual(2, int(result))

  def test_a_python_predicate_builds_one_branch(self):
    with tf.Graph().as_default() as graph:
      result = _branch(True)
      self.assertFalse([op for op in graph.get_operations()
                        if op.type in ("If", "StatelessIf")])
      with tf.compat.v1.Session() as session:
        self.assertEqual(TOTAL, session.run(result))

  def test_under_a_strategy_each_replica_reads_its_own(self):
    strategy = strategies.mirrored()
    with strategy.scope():
      per_replica = strategy.experimental_distribute_values_from_function(
          lambda c: tf.constant([1., 2.]) * (c.replica_id_in_sync_group + 1.))

      @tf.function
      def step(pred):
        return rare_branch.rare_branch(
            pred, [per_replica],
            lambda g: tf.add_n([tf.reduce_sum(v) for v in
                                strategy.experimental_local_results(g[0])]),
            lambda: tf.constant(-1.))

      # [1, 2] on replica 0, [2, 4] on replica 1.
      self.assertEqual(9., float(step(tf.constant(True))))
      self.assertEqual(-1., float(step(tf.constant(False))))


class OneValueThroughTheCondTest(tf.test.TestCase):

  def test_the_cond_reads_one_value_whatever_the_gradients(self):
    for count in (2, 50):
      grads = [tf.TensorSpec([3], tf.float32)] * count

      @tf.function(input_signature=[tf.TensorSpec([], tf.bool), grads])
      def step(pred, grads):
        return rare_branch.rare_branch(
            pred, grads, lambda g: tf.add_n([tf.reduce_sum(x) for x in g]),
            lambda: tf.constant(0.))

      graph = step.get_concrete_function().graph
      conds = [op for op in graph.get_operations()
               if op.type in ("If", "StatelessIf")]
      self.assertLen(conds, 1)
      # The predicate and the packed gradients, for 2 or 50 of them.
      self.assertLen(conds[0].inputs, 2)
      self.assertEqual(tf.variant, conds[0].inputs[1].dtype)
      # Lowered as any `tf.cond` (a call with every gradient would not be).
      self.assertTrue(conds[0].get_attr("_lower_using_switch_merge"))
      values = [np.full([3], i, np.float32) for i in range(count)]
      self.assertEqual(3. * sum(range(count)),
                       float(step(tf.constant(True), values)))


if __name__ == "__main__":
  absltest.main()
