"""Checkpoints move between TF's own TF1 loss-scale classes and mplso's.

Each direction: train with one implementation (a skipped step included, so the
scale and good-step count are not their initial values), save, restore into
the other, check the scale, the count, the slots and the variables, then take
one more identical step with both and compare again.
"""

import os

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

import mplso
from mplso_test.helpers import testing

TF_MPLSO = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer
TF_DYNAMIC = tf.compat.v1.mixed_precision.DynamicLossScale
CONFIG = dict(initial_loss_scale=2.**10, increment_period=3, multiplier=2.)
SCHEDULE = [None, None, "nan_dense", None, None, None, None]  # ends at scale 1024 (after 512), 1 good step

IMPLEMENTATIONS = {
    "tf": (TF_MPLSO, TF_DYNAMIC),
    "mplso": (mplso.MixedPrecisionLossScaleOptimizer, mplso.DynamicLossScale),
}
DIRECTIONS = [("tf_to_mplso", "tf", "mplso"), ("mplso_to_tf", "mplso", "tf")]


def scale_state(loss_scale):
  if isinstance(loss_scale, mplso.LossScale):
    return loss_scale.variables
  return (loss_scale._current_loss_scale, loss_scale._num_good_steps)  # pylint: disable=protected-access


class Trainer:
  """A TinyModel trained by one implementation, in the runner's mode."""

  def __init__(self, runner, implementation):
    wrapper, dynamic = IMPLEMENTATIONS[implementation]
    self.runner = runner
    self.model = testing.TinyModel()
    self.base = tf.compat.v1.train.AdamOptimizer(0.01)
    self.loss_scale = dynamic(**CONFIG)
    self.opt = wrapper(self.base, self.loss_scale)
    loss = self.model.loss() if runner.graph_mode else self.model.loss
    self.step_fn = runner.step(
        lambda: self.opt.minimize(loss, var_list=self.model.trainable))

  def train(self, schedule, first_step=0):
    for i, poison in enumerate(schedule):
      self.model.feed(self.runner, testing.TinyModel.batch(first_step + i, poison))
      self.step_fn()

  def state(self):
    fetch = {"scale_and_good_steps": scale_state(self.loss_scale)}
    for role, var in zip(("w", "b", "emb"), self.model.trainable):
      fetch[role] = var
      for slot in ("m", "v"):
        fetch[f"{role}/{slot}"] = self.base.get_slot(var, slot)
    return self.runner.read(fetch)


class CheckpointInterchangeTest(tf.test.TestCase, parameterized.TestCase):

  def assert_same_state(self, expected, got):
    self.assertEqual(expected.keys(), got.keys())
    for key in expected:
      self.assertAllEqual(expected[key], got[key], msg=key)

  @parameterized.named_parameters(*DIRECTIONS)
  def test_tf_train_checkpoint_eager(self, source, target):
    prefix = os.path.join(self.create_tempdir().full_path, "ckpt")
    writer = Trainer(testing.ModeRunner(testing.EAGER), source)
    writer.train(SCHEDULE)
    self.assertAllEqual((1024., 1), writer.state()["scale_and_good_steps"])
    path = tf.train.Checkpoint(optimizer=writer.opt,
                               **dict(zip("wbe", writer.model.trainable))).save(prefix)

    reader = Trainer(testing.ModeRunner(testing.EAGER), target)
    status = tf.train.Checkpoint(optimizer=reader.opt,
                                 **dict(zip("wbe", reader.model.trainable))).restore(path)
    self.assertAllEqual((1024., 1), reader.state()["scale_and_good_steps"])
    # Slots are restored when the optimizer creates them, on the next step.
    for trainer in (writer, reader):
      trainer.train([None], first_step=len(SCHEDULE))
    status.assert_consumed()
    self.assert_same_state(writer.state(), reader.state())

  @parameterized.named_parameters(*DIRECTIONS)
  def test_saver_graph(self, source, target):
    prefix = os.path.join(self.create_tempdir().full_path, "model.ckpt")
    with testing.ModeRunner(testing.GRAPH) as runner:
      writer = Trainer(runner, source)
      runner.initialize()
      writer.train(SCHEDULE)
      tf.compat.v1.train.Saver().save(runner.session, prefix)
      written = writer.state()
      writer.train([None], first_step=len(SCHEDULE))
      written_next = writer.state()
    self.assertAllEqual((1024., 1), written["scale_and_good_steps"])

    with testing.ModeRunner(testing.GRAPH) as runner:
      reader = Trainer(runner, target)
      tf.compat.v1.train.Saver().restore(runner.session, prefix)
      self.assert_same_state(written, reader.state())
      reader.train([None], first_step=len(SCHEDULE))
      self.assert_same_state(written_next, reader.state())


if __name__ == "__main__":
  absltest.main()
