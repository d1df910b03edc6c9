"""The opt-in skipped-step counter: counts skips, stays out of checkpoints."""

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

import mplso
from mplso._src.core import skip_count
from mplso_test import testing


def _minimize(opt, var, grad):
  """A step whose gradient with respect to `var` is `grad`."""
  return opt.minimize(lambda: tf.reduce_sum(var * grad), var_list=[var])


class SkipCountTest(tf.test.TestCase, parameterized.TestCase):

  def test_unwatched_records_nothing(self):
    loss_scale = mplso.FixedLossScale(2)
    self.assertIsNone(skip_count.record(loss_scale, tf.constant(False)))
    self.assertIsNone(skip_count.counter(loss_scale))

  def test_watch_returns_one_counter(self):
    loss_scale = mplso.DynamicLossScale()
    self.assertIs(skip_count.watch(loss_scale), skip_count.watch(loss_scale))
    self.assertIs(skip_count.counter(loss_scale), skip_count.watch(loss_scale))

  @parameterized.named_parameters(
      ("tensor", [tf.constant(False), tf.constant(True), tf.constant(False)]),
      ("python_bool", [False, True, False]))
  def test_counts_only_skips(self, flags):
    loss_scale = mplso.FixedLossScale(2)
    skipped = skip_count.watch(loss_scale)
    for flag in flags:
      skip_count.record(loss_scale, flag)
    self.assertEqual(2, int(skipped))

  @parameterized.named_parameters(*testing.NAMED_MODES)
  def test_v1_optimizer_counts_its_skips(self, mode):
    grads = [1., testing.NAN, 1., testing.INF, 1.]
    with testing.ModeRunner(mode) as runner:
      var = tf.Variable(1.)
      grad = tf.Variable(1.)
      opt = mplso.MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(0.5), "dynamic")
      skipped = skip_count.watch(opt.loss_scale)
      step = runner.step(lambda: _minimize(opt, var, grad))
      runner.initialize()
      if runner.graph_mode:
        runner.session.run(tf.compat.v1.local_variables_initializer())
      counts = []
      for value in grads:
        runner.assign(grad, value)
        step()
        counts.append(int(runner.read(skipped)))
    self.assertEqual([0, 1, 1, 2, 2], counts)

  def test_graph_counter_is_local_and_not_saved(self):
    with tf.Graph().as_default():
      opt = mplso.MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(0.5), "dynamic")
      skipped = skip_count.watch(opt.loss_scale)
      self.assertIn(skipped, tf.compat.v1.local_variables())
      self.assertNotIn(skipped, tf.compat.v1.global_variables())

  def test_eager_counter_is_not_checkpointed(self):
    opt = mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.5), "dynamic")
    skip_count.watch(opt.loss_scale)
    path = tf.train.Checkpoint(optimizer=opt).save(
        self.create_tempdir().full_path + "/ckpt")
    names = [name for name, _ in tf.train.list_variables(path)]
    self.assertNotEmpty([n for n in names if "current_loss_scale" in n])
    self.assertEmpty([n for n in names if "skipped" in n])

  def test_built_uncounted_is_flagged_in_graph(self):
    with tf.Graph().as_default():
      var = tf.Variable(1.)
      opt = mplso.MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(0.5), 4)
      self.assertFalse(skip_count.built_uncounted(opt.loss_scale))
      _minimize(opt, var, 1.)
      self.assertTrue(skip_count.built_uncounted(opt.loss_scale))


if __name__ == "__main__":
  absltest.main()
