"""Tests for scaling losses and unscaling gradients."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mplso._src.core import scaling


class ScaleLossTest(tf.test.TestCase, parameterized.TestCase):

  def test_tensor(self):
    self.assertAllEqual(12., scaling.scale_loss(tf.constant(3.), tf.constant(4.)))

  def test_callable_stays_callable(self):
    calls = []

    def loss():
      calls.append(1)
      return tf.constant(3.)

    scaled = scaling.scale_loss(loss, tf.constant(4.))
    self.assertTrue(callable(scaled))
    self.assertEmpty(calls)  # Not evaluated until called.
    self.assertAllEqual(12., scaled())

  def test_scale_cast_to_loss_dtype(self):
    loss = scaling.scale_loss(tf.constant(2., tf.float16), tf.constant(8.))
    self.assertEqual(tf.float16, loss.dtype)
    self.assertAllEqual(16., loss)

  def test_scale_of_one_adds_no_op(self):
    loss = tf.constant(3.)
    self.assertIs(loss, scaling.scale_loss(loss, 1.))
    with tf.Graph().as_default():
      loss = tf.constant(3.)
      self.assertIs(loss, scaling.scale_loss(loss, tf.constant(1.)))


class UnscaleGradsTest(tf.test.TestCase, parameterized.TestCase):

  def test_dense_sparse_and_none(self):
    sparse = tf.IndexedSlices(tf.constant([[8., 16.]]), tf.constant([3]),
                              tf.constant([5, 2]))
    dense, none, unscaled_sparse = scaling.unscale_grads(
        [tf.constant([8., 4.]), None, sparse], tf.constant(8.))
    self.assertAllEqual([1., .5], dense)
    self.assertIsNone(none)
    self.assertIsInstance(unscaled_sparse, tf.IndexedSlices)
    self.assertAllEqual([[1., 2.]], unscaled_sparse.values)
    self.assertAllEqual([3], unscaled_sparse.indices)
    self.assertAllEqual([5, 2], unscaled_sparse.dense_shape)

  def test_keeps_gradient_dtype(self):
    (grad,) = scaling.unscale_grads([tf.constant([8.], tf.float16)],
                                    tf.constant(4.))
    self.assertEqual(tf.float16, grad.dtype)
    self.assertAllEqual([2.], grad)

  def test_multiplies_by_reciprocal_like_tf(self):
    # TF's optimizers multiply by 1/scale; for a scale that is not a power of
    # two this differs from dividing in the last bit, and we must match TF.
    grads = tf.constant(np.linspace(-3, 3, 1001), tf.float32)
    scale = tf.constant(5000.)
    (ours,) = scaling.unscale_grads([grads], scale)
    self.assertAllEqual(grads * (1. / scale), ours)
    self.assertNotAllEqual(grads / scale, ours)

  def test_scale_of_one_returns_grads_unchanged(self):
    grads = [tf.constant([1.]), None]
    out = scaling.unscale_grads(grads, 1.)
    self.assertIs(grads[0], out[0])
    self.assertIsNone(out[1])


if __name__ == "__main__":
  absltest.main()
