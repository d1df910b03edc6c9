"""Tests for the all-finite check."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mplso._src.core import finite
from mplso_test import testing

NAN, INF = testing.NAN, testing.INF


def sparse(values):
  values = tf.constant(values)
  return tf.IndexedSlices(values, tf.range(tf.shape(values)[0]),
                          tf.constant([10] + values.shape.as_list()[1:]))


class AllFiniteTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ("finite", [1., -2.], True),
      ("nan", [1., NAN], False),
      ("inf", [INF, 1.], False),
      ("minus_inf", [1., -INF], False),
      ("inf_and_minus_inf", [INF, -INF], False),
      ("zeros", [0., -0.], True),
  )
  def test_dense(self, values, expected):
    self.assertEqual(expected, bool(finite.all_finite([tf.constant(values)])))

  @parameterized.named_parameters(
      ("float16", tf.float16), ("bfloat16", tf.bfloat16),
      ("float32", tf.float32), ("float64", tf.float64))
  def test_dtypes(self, dtype):
    ok = tf.constant([1., 2.], dtype)
    bad = tf.constant([1., NAN], dtype)
    self.assertTrue(bool(finite.all_finite([ok, ok])))
    self.assertFalse(bool(finite.all_finite([ok, bad])))

  @parameterized.named_parameters(
      ("float16", tf.float16, 60000.), ("float32", tf.float32, 3e38))
  def test_large_finite_values_whose_sum_overflows_are_finite(self, dtype, big):
    # The fast path's sum overflows to inf; the exact check must say finite.
    grads = [tf.constant([big, big, big], dtype), tf.constant([big], dtype)]
    self.assertTrue(bool(finite.all_finite(grads)))

  def test_indexed_slices_values_count(self):
    self.assertTrue(bool(finite.all_finite([sparse([[1., 2.]])])))
    self.assertFalse(bool(finite.all_finite([sparse([[1., INF]])])))

  def test_none_and_empty(self):
    self.assertTrue(bool(finite.all_finite([])))
    self.assertTrue(bool(finite.all_finite([None, None])))
    self.assertFalse(
        bool(finite.all_finite([None, tf.constant([NAN]), None])))
    self.assertTrue(bool(finite.all_finite([tf.zeros([0])])))

  def test_many_gradients_one_bad(self):
    grads = [tf.fill([3, 3], float(i)) for i in range(50)]
    self.assertTrue(bool(finite.all_finite(grads)))
    grads[37] = tf.tensor_scatter_nd_update(grads[37], [[1, 2]], [NAN])
    self.assertFalse(bool(finite.all_finite(grads)))

  def test_in_graph(self):
    with tf.Graph().as_default():
      ph = tf.compat.v1.placeholder(tf.float32, [None])
      flag = finite.all_finite([ph, tf.constant([1.])])
      with tf.compat.v1.Session() as sess:
        self.assertTrue(sess.run(flag, {ph: [1., 2.]}))
        self.assertFalse(sess.run(flag, {ph: [1., NAN]}))
        self.assertTrue(sess.run(flag, {ph: np.full([4], 3e38, np.float32)}))

  def test_one_reduction_per_gradient_and_no_elementwise_copy(self):
    # The fast path: one Sum per gradient; the IsFinite over whole gradients
    # lives only in the branch taken when the total is not finite.
    specs = [tf.TensorSpec([8, 8], tf.float32)] * 5
    graph = tf.function(lambda *g: finite.all_finite(g)).get_concrete_function(
        *specs).graph
    ops = [op.type for op in graph.get_operations()]
    self.assertEqual(5, ops.count("Sum"))
    self.assertEqual(1, ops.count("IsFinite"))  # On the scalar total only.


if __name__ == "__main__":
  absltest.main()
