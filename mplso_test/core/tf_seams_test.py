"""A TensorFlow without one of mplso's internals fails loudly, with its version."""

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

from mplso._src.core import tf_seams


class MissingInternalTest(tf.test.TestCase, parameterized.TestCase):

  def test_missing_module_attribute_names_it_and_the_tf_version(self):
    with self.assertRaises(ImportError) as cm:
      tf_seams._internal("tensorflow", "__internal__.tracking.NoSuchClass")
    message = str(cm.exception)
    self.assertIn("`tensorflow.__internal__.tracking.NoSuchClass`", message)
    self.assertIn(f"TensorFlow {tf.__version__} does not have", message)
    self.assertIn("tested with TensorFlow 2.21", message)
    self.assertIsInstance(cm.exception.__cause__, AttributeError)

  def test_missing_module_names_it(self):
    with self.assertRaisesRegex(
        ImportError, r"`tensorflow\.python\.ops\.no_such_module\.f`, which "
        rf"TensorFlow {tf.__version__} does not have"):
      tf_seams._internal("tensorflow.python.ops.no_such_module", "f")

  def test_missing_private_attribute_names_it_and_the_tf_version(self):
    with self.assertRaisesRegex(
        AttributeError, r"`tf\.compat\.v1\.train\.Optimizer\._use_locking`, "
        rf"which TensorFlow {tf.__version__} does not have"):
      tf_seams.v1_optimizer_use_locking(object())

  def test_present_internals_resolve(self):
    self.assertIs(tf_seams.Trackable, tf.__internal__.tracking.Trackable)
    self.assertTrue(callable(tf_seams.smart_cond))
    opt = tf.compat.v1.train.GradientDescentOptimizer(0.1, use_locking=True)
    self.assertTrue(tf_seams.v1_optimizer_use_locking(opt))
    with tf.Graph().as_default():
      self.assertFalse(tf_seams.in_control_flow_v1_context())
      self.assertFalse(tf_seams.in_xla_context())
      first, second = tf.constant(1.), tf.constant(2.)
      tf_seams.add_control_input(second.op, first.op)
      self.assertIn(first.op, second.op.control_inputs)


class CondAsOneOpTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(True, False)
  def test_takes_the_branch_of_the_predicate(self, pred):
    x = tf.constant(3.)

    def run(p, x):
      return tf_seams.cond_as_one_op(p, lambda: x + 1., lambda: x - 1.)

    expected = 4. if pred else 2.
    self.assertEqual(expected, float(run(tf.constant(pred), x)))  # Eager.
    self.assertEqual(expected, float(tf.function(run)(tf.constant(pred), x)))

  def test_in_a_function_the_if_is_not_lowered(self):

    def body(p, x):
      return tf_seams.cond_as_one_op(p, lambda: x * 2., lambda: x)

    graph = tf.function(body).get_concrete_function(
        tf.TensorSpec([], tf.bool), tf.TensorSpec([4], tf.float32)).graph
    (if_op,) = [op for op in graph.get_operations()
                if op.type in ("If", "StatelessIf")]
    self.assertFalse(if_op.get_attr("_lower_using_switch_merge"))


if __name__ == "__main__":
  absltest.main()
