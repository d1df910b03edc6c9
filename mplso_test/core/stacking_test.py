"""Tests for `stacking`: small gradients of one shape, stacked."""

from absl.testing import absltest
import tensorflow as tf

from mplso._src.core import distribution
from mplso._src.core import stacking
from mplso._src.diagnostics import underflow_meter


class StackedTest(tf.test.TestCase):

  def test_small_dense_tensors_of_one_dtype_and_shape_are_stacked(self):
    a, b = tf.constant([1., 2.]), tf.constant([3., 4.])
    c = tf.constant([5., 6.], tf.float16)
    d = tf.constant([[7.]])
    e = tf.constant([8., 9.])
    stacks, alone = stacking.stacked([a, None, c, b, d, e])
    self.assertLen(stacks, 1)
    self.assertEqual([0, 3, 5], stacks[0].indices)
    self.assertAllEqual([[1., 2.], [3., 4.], [8., 9.]], stacks[0].values)
    # A shape or dtype of its own, None: each alone, in order.
    self.assertEqual([1, 2, 4], alone)

  def test_large_sparse_and_unknown_shapes_stay_alone(self):
    large = tf.zeros([stacking.SMALL_ELEMENTS + 1])
    sparse = tf.IndexedSlices(tf.constant([[1.]]), tf.constant([0]))
    stacks, alone = stacking.stacked([large, large, sparse, sparse])
    self.assertEqual([], stacks)
    self.assertEqual([0, 1, 2, 3], alone)

    @tf.function(input_signature=[tf.TensorSpec([None])] * 2)
    def unknown(x, y):
      stacks, alone = stacking.stacked([x, y])
      self.assertEqual(([], [0, 1]), (stacks, alone))
      return x

    unknown(tf.constant([1.]), tf.constant([2.]))

  def test_the_largest_small_size_is_stacked(self):
    small = tf.zeros([stacking.SMALL_ELEMENTS])
    stacks, alone = stacking.stacked([small, small])
    self.assertEqual([0, 1], stacks[0].indices)
    self.assertEqual([], alone)


class OpsPerGradientTest(tf.test.TestCase):
  """The rare branches' reductions build no ops per small gradient."""

  def _ops(self, reduce, count: int, shape=(8, 8)) -> int:
    graph = tf.Graph()
    with graph.as_default():
      grads = [tf.compat.v1.placeholder(tf.float32, shape)
               for _ in range(count)]
      first = len(graph.get_operations())
      reduce(grads)
    return len(graph.get_operations()) - first

  def test_the_meter_and_the_calibration(self):
    for reduce in (underflow_meter.element_counts,
                   distribution.max_magnitude):
      with self.subTest(reduce.__name__):
        self.assertEqual(self._ops(reduce, 2), self._ops(reduce, 40))
        # Gradients too large to stack still cost ops each.
        large = (stacking.SMALL_ELEMENTS + 1,)
        self.assertLess(self._ops(reduce, 2, large),
                        self._ops(reduce, 40, large))


if __name__ == "__main__":
  absltest.main()
