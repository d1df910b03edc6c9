"""`mplso.summary.loss_scale_scalars`: TF1 summaries read back from event files."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mplso
from mplso import contrib
import mplso.summary
from mplso_test.helpers.events import read_events

NAN, INF = float("nan"), float("inf")


def _optimizers():
  sgd = tf.compat.v1.train.GradientDescentOptimizer(0.5)
  return {
      "v1": lambda: mplso.MixedPrecisionLossScaleOptimizer(
          sgd, mplso.DynamicLossScale(8, increment_period=2)),
      "contrib": lambda: contrib.LossScaleOptimizer(
          sgd, contrib.ExponentialUpdateLossScaleManager(
              8, incr_every_n_steps=2, decr_every_n_nan_or_inf=1,
              decr_ratio=0.5)),
  }


class LossScaleScalarsTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(("v1", "v1"), ("contrib", "contrib"))
  def test_graph_summaries_written_and_read_back(self, family):
    grads = [1., NAN, 1., 1., NAN, 1., INF]
    log_dir = self.create_tempdir().full_path
    expected_scales, expected_skips = [], []
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
      var = tf.Variable(1.)
      grad = tf.compat.v1.placeholder(tf.float32, [])
      opt = _optimizers()[family]()
      summaries = mplso.summary.loss_scale_scalars(opt)
      self.assertLen(summaries, 4)
      step = tf.compat.v1.train.get_or_create_global_step()
      train_op = opt.minimize(var * grad, global_step=step)
      merged = tf.compat.v1.summary.merge_all()
      writer = tf.compat.v1.summary.FileWriter(log_dir)
      session.run(tf.compat.v1.global_variables_initializer())
      for i, value in enumerate(grads):
        session.run(train_op, {grad: value})
        writer.add_summary(session.run(merged), i)
        expected_scales.append(float(session.run(opt.loss_scale())))
        expected_skips.append(sum(~np.isfinite(grads[:i + 1])))
      writer.close()
      # A skipped step leaves global_step: it counts the applied steps.
      self.assertEqual(len(grads) - expected_skips[-1], session.run(step))
    events = read_events(log_dir)
    self.assertEqual(list(enumerate(expected_scales)), events["loss_scale"])
    self.assertEqual([(i, float(s)) for i, s in enumerate(expected_skips)],
                     events["skipped_steps"])
    self.assertEqual(8., events["loss_scale"][0][1])  # Not yet grown.
    nans = [float(sum(np.isnan(grads[:i + 1]))) for i in range(len(grads))]
    self.assertEqual(list(enumerate(nans)), events["nan_steps"])
    self.assertEqual([(i, 0.) for i in range(6)] + [(6, 1.)],
                     events["inf_steps"])

  def test_family_prefixes_the_tags(self):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
      opt = _optimizers()["v1"]()
      summaries = mplso.summary.loss_scale_scalars(opt, family="mp")
      session.run(tf.compat.v1.global_variables_initializer())
      merged = session.run(tf.compat.v1.summary.merge_all())
    tags = [v.tag for v in tf.compat.v1.Summary.FromString(merged).value]
    self.assertLen(summaries, 4)
    self.assertEqual(["mp/loss_scale", "mp/skipped_steps", "mp/nan_steps",
                      "mp/inf_steps"], tags)

  def test_after_minimize_the_same_summaries(self):
    # Only global variables initialised: the counts need no initializer.
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
      var = tf.Variable(1.)
      grad = tf.compat.v1.placeholder(tf.float32, [])
      opt = _optimizers()["v1"]()
      train_op = opt.minimize(var * grad)
      summaries = mplso.summary.loss_scale_scalars(opt)
      session.run(tf.compat.v1.global_variables_initializer())
      for value in (1., INF, NAN, 1.):
        session.run(train_op, {grad: value})
      merged = session.run(tf.compat.v1.summary.merge_all())
    values = {v.tag: v.simple_value
              for v in tf.compat.v1.Summary.FromString(merged).value}
    self.assertLen(summaries, 4)
    self.assertEqual({"loss_scale": 2., "skipped_steps": 2., "nan_steps": 1.,
                      "inf_steps": 1.}, values)

  def test_accepts_a_loss_scale(self):
    with tf.Graph().as_default():
      self.assertLen(
          mplso.summary.loss_scale_scalars(mplso.FixedLossScale(4)), 4)

  def test_bad_argument(self):
    with self.assertRaisesRegex(ValueError, "optimizer=.*GradientDescent"):
      mplso.summary.loss_scale_scalars(
          tf.compat.v1.train.GradientDescentOptimizer(0.5))


if __name__ == "__main__":
  absltest.main()
