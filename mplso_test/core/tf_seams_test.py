"""A TensorFlow without one of mplso's internals fails loudly, with its version."""

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

from mplso._src.core import tf_seams
from mplso_test.helpers import strategies


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
      self.assertFalse(tf_seams.in_xla_context())


def lowering(graph) -> list[bool | None]:
  """Per If op of `graph`: its lowering attribute (None where unset)."""
  return [op.get_attr("_lower_using_switch_merge")
          if "_lower_using_switch_merge" in op.node_def.attr else None
          for op in graph.get_operations() if op.type in ("If", "StatelessIf")]


class CondKeptAsCallTest(tf.test.TestCase):

  def test_the_if_op_is_not_lowered_and_gives_the_same_value(self):
    @tf.function
    def kept(x):
      return tf_seams.cond_kept_as_call(x > 0., lambda: x * 2., lambda: -x)

    graph = kept.get_concrete_function(tf.constant(1.)).graph
    self.assertEqual([False], lowering(graph))
    self.assertEqual(6., float(kept(tf.constant(3.))))
    self.assertEqual(3., float(kept(tf.constant(-3.))))

  def test_an_if_in_a_branch_is_left_as_it_is(self):
    @tf.function
    def nested(x):
      return tf_seams.cond_kept_as_call(
          x > 0., lambda: tf.cond(x > 1., lambda: x, lambda: 2. * x),
          lambda: -x)

    graph = nested.get_concrete_function(tf.constant(1.)).graph
    self.assertEqual([False], lowering(graph))
    self.assertEqual(1., float(nested(tf.constant(0.5))))

  def test_eagerly_and_on_a_known_predicate_it_runs_the_branch(self):
    self.assertEqual(2., float(tf_seams.cond_kept_as_call(
        tf.constant(True), lambda: tf.constant(2.), lambda: tf.constant(0.))))
    with tf.Graph().as_default() as graph:
      tf_seams.cond_kept_as_call(True, lambda: tf.constant(2.),
                                 lambda: tf.constant(0.))
    self.assertEqual([], lowering(graph))


class TrackingSeamsTest(tf.test.TestCase):

  def test_variable_strategy_names_the_scope_that_made_it(self):
    self.assertIsNone(tf_seams.variable_strategy(tf.Variable(1.)))
    self.assertIsNone(tf_seams.variable_strategy(object()))
    strategy = strategies.mirrored(1)
    with strategy.scope():
      variable = tf.Variable(1.)
    self.assertIs(strategy, tf_seams.variable_strategy(variable))

  def _parent(self):
    parent = tf.train.Checkpoint()
    parent.kept = tf.Variable(1.)
    parent.dropped = tf.Variable(2.)
    return parent

  def _child_names(self, trackable):
    return sorted(trackable._trackable_children("checkpoint"))

  def test_dropped_links_stay_dropped(self):
    parent = self._parent()
    with tf_seams.checkpoint_links_dropped(parent, ("dropped", "absent")):
      pass
    self.assertEqual(["kept"], self._child_names(parent))

  def test_links_come_back_when_the_body_raises(self):
    parent = self._parent()
    with self.assertRaises(KeyError):
      with tf_seams.checkpoint_links_dropped(parent, ("dropped",)):
        self.assertEqual(["kept"], self._child_names(parent))
        raise KeyError("no new owner")
    self.assertEqual(["dropped", "kept"], self._child_names(parent))


if __name__ == "__main__":
  absltest.main()
