"""`mplso._src.core.checks.check_grads_and_vars`: what a step accepts.

The public classes' errors on bad input are in integration/bad_input_test;
here the check itself, on each kind of entry.
"""

import numpy as np
import tensorflow as tf

from mplso._src.core import checks


class CheckGradsAndVarsTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.var = tf.Variable([[1., 2.], [3., 4.]], name="w")

  def test_returns_a_list_of_the_pairs(self):
    dense = tf.ones([2, 2])
    sparse = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([1]),
                              tf.constant([2, 2]))
    pairs = ((g, self.var) for g in (dense, sparse, None))  # A generator.
    checked = checks.check_grads_and_vars(pairs)
    self.assertIsInstance(checked, list)
    self.assertLen(checked, 3)
    self.assertIs(checked[0][0], dense)
    self.assertIs(checked[1][0], sparse)
    self.assertIsNone(checked[2][0])
    self.assertEqual([], checks.check_grads_and_vars([]))

  def test_not_a_list_of_pairs(self):
    for bad in ("grads", b"grads", 3, None):
      with self.assertRaisesRegex(ValueError, "must be a list of"):
        checks.check_grads_and_vars(bad)
    with self.assertRaisesRegex(ValueError, "Received at index 1"):
      checks.check_grads_and_vars([(None, self.var), (None, self.var, 1)])
    with self.assertRaisesRegex(ValueError, "at index 0"):
      checks.check_grads_and_vars([self.var])

  def test_second_element_must_be_a_variable(self):
    with self.assertRaisesRegex(ValueError,
                                "must be a variable. Received at index 0"):
      checks.check_grads_and_vars([(tf.ones([2, 2]), tf.ones([2, 2]))])
    with self.assertRaisesRegex(ValueError, "must be a variable"):
      checks.check_grads_and_vars([(None, "w")])

  def test_gradient_must_be_numeric(self):
    with self.assertRaisesRegex(ValueError, "numeric tensor.*'w"):
      checks.check_grads_and_vars([(tf.constant(["a", "b"]), self.var)])
    with self.assertRaisesRegex(ValueError, "numeric tensor"):
      checks.check_grads_and_vars([(object(), self.var)])

  def test_dtype_must_match_unless_told_otherwise(self):
    grad = tf.ones([2, 2], tf.float16)
    with self.assertRaisesRegex(ValueError,
                                "dtype float16, not the variable's float32"):
      checks.check_grads_and_vars([(grad, self.var)])
    checked = checks.check_grads_and_vars([(grad, self.var)],
                                          same_dtype=False)
    self.assertIs(checked[0][0], grad)
    # A NumPy or Python gradient of the variable's dtype is fine.
    checks.check_grads_and_vars([(np.ones([2, 2], np.float32), self.var)])

  def test_dense_shape_must_fit_the_variable(self):
    with self.assertRaisesRegex(ValueError,
                                r"shape \(3,\), which does not fit.*\(2, 2\)"):
      checks.check_grads_and_vars([(tf.ones([3]), self.var)])
    # Slices are not checked against the variable's shape (their dense
    # shape is a tensor).
    sparse = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0]))
    checks.check_grads_and_vars([(sparse, self.var)])

  def test_unknown_shape_in_a_graph_fits(self):
    with tf.Graph().as_default():
      var = tf.compat.v1.Variable(tf.ones([2, 2]), name="v")
      grad = tf.compat.v1.placeholder(tf.float32, shape=None)
      self.assertLen(checks.check_grads_and_vars([(grad, var)]), 1)
      bad = tf.compat.v1.placeholder(tf.float32, shape=[None, 3])
      with self.assertRaisesRegex(ValueError, "does not fit"):
        checks.check_grads_and_vars([(bad, var)])


if __name__ == "__main__":
  tf.test.main()
