"""Tests for mplso.enable/disable_mixed_precision_graph_rewrite."""

import doctest
import math

from absl.testing import absltest
from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf
import tf_keras

import mplso
from mplso._src.compat import graph_rewrite
import mplso.keras

ON = type(tf.compat.v1.ConfigProto().graph_options.rewrite_options).ON
# TF 2.21's own functions, to compare error messages with.
TF_ENABLE = tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite


def rewrite_option():
  return tf.config.optimizer.get_experimental_options().get(
      "auto_mixed_precision", False)


def session_rewrite(graph):
  """The auto_mixed_precision setting a new Session of `graph` runs with."""
  with tf.compat.v1.Session(graph=graph) as sess:
    # TF keeps the config it built the session with here.
    return sess._config.graph_options.rewrite_options.auto_mixed_precision  # pylint: disable=protected-access


class GraphRewriteTest(tf.test.TestCase, parameterized.TestCase):

  def test_docstring_examples(self):
    result = doctest.testmod(graph_rewrite, extraglobs={"tf": tf})
    self.assertGreater(result.attempted, 0)
    self.assertEqual(0, result.failed)

  def setUp(self):
    super().setUp()
    options = tf.config.optimizer.get_experimental_options()
    self.addCleanup(tf.config.optimizer.set_experimental_options,
                    {"auto_mixed_precision":
                     options.get("auto_mixed_precision", False)})
    # Leave TF's rewrite flag off, as every other test expects it.
    self.addCleanup(self._reset_flag)

  def _reset_flag(self):
    if self._flag():
      mplso.disable_mixed_precision_graph_rewrite()

  @staticmethod
  def _flag():
    from mplso._src.compat import graph_rewrite  # pylint: disable=g-import-not-at-top
    return graph_rewrite.graph_rewrite_enabled()

  @parameterized.named_parameters(
      ("dynamic", "dynamic", mplso.DynamicLossScale, 2.**15),
      ("number", 128, mplso.FixedLossScale, 128.),
      ("loss_scale", mplso.DynamicLossScale(initial_loss_scale=4.),
       mplso.DynamicLossScale, 4.))
  def test_wraps_v1_optimizer_and_turns_rewrite_on(self, loss_scale, kind,
                                                   value):
    self.assertFalse(rewrite_option())
    opt = mplso.enable_mixed_precision_graph_rewrite(
        tf.compat.v1.train.AdamOptimizer(0.1), loss_scale)
    self.assertIsInstance(opt, mplso.MixedPrecisionLossScaleOptimizer)
    self.assertIsInstance(opt.loss_scale, kind)
    if isinstance(loss_scale, mplso.LossScale):
      self.assertIs(loss_scale, opt.loss_scale)
    self.assertEqual(value, float(opt.loss_scale()))
    self.assertTrue(rewrite_option())
    self.assertTrue(self._flag())
    mplso.disable_mixed_precision_graph_rewrite()
    self.assertFalse(rewrite_option())
    self.assertFalse(self._flag())

  @parameterized.named_parameters(
      ("keras_3", keras.optimizers.SGD, keras.optimizers.Optimizer),
      ("tf_keras", tf_keras.optimizers.SGD, tf_keras.optimizers.Optimizer),
      ("tf_keras_legacy", tf_keras.optimizers.legacy.SGD,
       tf_keras.optimizers.legacy.Optimizer))
  def test_wraps_keras_optimizer_of_every_family(self, make, base):
    opt = mplso.enable_mixed_precision_graph_rewrite(make(0.5), 8)
    self.assertIsInstance(opt, mplso.keras.LossScaleOptimizer)
    self.assertIsInstance(opt, base)
    self.assertEqual(8., float(opt.loss_scale()))
    self.assertTrue(rewrite_option())

  def test_new_sessions_get_the_rewrite_until_disabled(self):
    graph = tf.Graph()
    mplso.enable_mixed_precision_graph_rewrite(
        tf.compat.v1.train.GradientDescentOptimizer(1.))
    self.assertEqual(ON, session_rewrite(graph))
    mplso.disable_mixed_precision_graph_rewrite()
    self.assertNotEqual(ON, session_rewrite(graph))

  def test_wrong_type_raises_tf_error(self):
    with self.assertRaises(ValueError) as theirs:
      TF_ENABLE(1)
    with self.assertRaises(ValueError) as ours:
      mplso.enable_mixed_precision_graph_rewrite(1)
    self.assertStartsWith(str(ours.exception), str(theirs.exception))
    self.assertIn("Pass a tf.compat.v1.train.Optimizer", str(ours.exception))
    self.assertFalse(rewrite_option())

  def test_enabling_twice_on_the_wrapped_optimizer_raises_tf_error(self):
    inner = tf.compat.v1.train.GradientDescentOptimizer(1.)
    theirs_wrapped = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
        inner, 1)
    with self.assertRaises(ValueError) as theirs:
      TF_ENABLE(theirs_wrapped)
    expected = str(theirs.exception)
    opt = mplso.enable_mixed_precision_graph_rewrite(inner)
    for wrapped in (opt, theirs_wrapped):
      with self.assertRaises(ValueError) as ours:
        mplso.enable_mixed_precision_graph_rewrite(wrapped)
      self.assertStartsWith(str(ours.exception), expected)
    keras_opt = mplso.enable_mixed_precision_graph_rewrite(
        keras.optimizers.SGD())
    for wrapped in (keras_opt, keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD())):
      with self.assertRaisesRegex(
          ValueError, '"opt" must not already be an instance of a '
          "LossScaleOptimizer"):
        mplso.enable_mixed_precision_graph_rewrite(wrapped)

  def test_none_loss_scale_is_refused(self):
    with self.assertRaises(ValueError):
      mplso.enable_mixed_precision_graph_rewrite(
          tf.compat.v1.train.GradientDescentOptimizer(1.), None)

  @parameterized.named_parameters(("keras_3", keras), ("tf_keras", tf_keras))
  def test_mixed_keras_policy_refuses_the_rewrite(self, package):
    package.mixed_precision.set_global_policy("mixed_float16")
    self.addCleanup(package.mixed_precision.set_global_policy, "float32")
    with self.assertRaisesRegex(
        ValueError, "The mixed precision graph rewrite cannot be enabled, "
        "because the global Keras dtype Policy has been set to a mixed "
        "precision policy"):
      mplso.enable_mixed_precision_graph_rewrite(
          tf.compat.v1.train.GradientDescentOptimizer(1.))
    self.assertFalse(rewrite_option())

  def test_disable_when_off_warns(self):
    with self.assertLogs("mplso", "WARNING") as logs:
      mplso.disable_mixed_precision_graph_rewrite()
    self.assertIn("already disabled", logs.output[0])
    self.assertFalse(rewrite_option())


class TrainingTest(tf.test.TestCase):
  """What a CPU shows: scaling, skipping, Adam in a TF1 graph."""

  def tearDown(self):
    mplso.disable_mixed_precision_graph_rewrite()
    super().tearDown()

  def test_adam_trains_in_a_tf1_graph_and_skips_nonfinite_steps(self):
    with tf.Graph().as_default():
      opt = mplso.enable_mixed_precision_graph_rewrite(
          tf.compat.v1.train.AdamOptimizer(0.1), "dynamic")
      x = tf.compat.v1.placeholder(tf.float32, [])
      var = tf.compat.v1.get_variable("w", initializer=3.)
      step = tf.compat.v1.train.get_or_create_global_step()
      loss = tf.square(var * x)
      train_op = opt.minimize(loss, global_step=step)
      with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        losses = [sess.run([loss, train_op], {x: 1.})[0] for _ in range(20)]
        self.assertLess(losses[-1], 0.5 * losses[0])
        before = sess.run([var, step, opt.loss_scale()])
        sess.run(train_op, {x: math.inf})
        after = sess.run([var, step, opt.loss_scale()])
    self.assertEqual(before[:2], after[:2])  # Skipped: nothing moved.
    self.assertEqual(20, before[1])
    self.assertEqual(before[2] / 2, after[2])

  def test_fixed_scale_skips_nonfinite_step_eagerly(self):
    opt = mplso.enable_mixed_precision_graph_rewrite(
        tf.compat.v1.train.GradientDescentOptimizer(1.), 1024)
    var = tf.Variable([1., 2.])
    grads = opt.compute_gradients(lambda: tf.reduce_sum(var * [3., 4.]),
                                  var_list=[var])
    self.assertAllClose([3., 4.], grads[0][0])  # Unscaled.
    opt.apply_gradients([(tf.constant([np.nan, 1.]), var)])
    self.assertAllEqual([1., 2.], var)


if __name__ == "__main__":
  absltest.main()
