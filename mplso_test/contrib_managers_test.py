"""Tests for the TF 1.x contrib loss-scale managers (the rule: update_rule_test)."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mplso
from mplso import contrib
from mplso_test import testing

NAN, INF = testing.NAN, testing.INF
EXPONENTIAL = contrib.ExponentialUpdateLossScaleManager

BAD_ARGUMENTS = [
    ("fixed_below_one", contrib.FixedLossScaleManager, dict(loss_scale=0.5),
     "loss_scale=0.5"),
    ("fixed_nan", contrib.FixedLossScaleManager, dict(loss_scale=NAN),
     "loss_scale=nan"),
    ("fixed_string", contrib.FixedLossScaleManager, dict(loss_scale="5000"),
     "loss_scale='5000'"),
    ("init_zero", EXPONENTIAL, dict(init_loss_scale=0, incr_every_n_steps=2),
     "init_loss_scale=0"),
    ("incr_every_zero", EXPONENTIAL, dict(init_loss_scale=8,
                                          incr_every_n_steps=0),
     "incr_every_n_steps=0"),
    ("incr_every_float", EXPONENTIAL, dict(init_loss_scale=8,
                                           incr_every_n_steps=1.5),
     "incr_every_n_steps=1.5"),
    ("decr_every_zero", EXPONENTIAL, dict(init_loss_scale=8,
                                          incr_every_n_steps=2,
                                          decr_every_n_nan_or_inf=0),
     "decr_every_n_nan_or_inf=0"),
    ("incr_ratio_below_one", EXPONENTIAL, dict(init_loss_scale=8,
                                               incr_every_n_steps=2,
                                               incr_ratio=0.5),
     "incr_ratio=0.5"),
    ("decr_ratio_zero", EXPONENTIAL, dict(init_loss_scale=8,
                                          incr_every_n_steps=2,
                                          decr_ratio=0.),
     "decr_ratio=0.0"),
    ("decr_ratio_above_one", EXPONENTIAL, dict(init_loss_scale=8,
                                               incr_every_n_steps=2,
                                               decr_ratio=2.),
     "decr_ratio=2.0"),
]


class ManagerTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*BAD_ARGUMENTS)
  def test_bad_argument(self, constructor, kwargs, shown):
    with self.assertRaises(ValueError) as raised:
      constructor(**kwargs)
    self.assertIn(shown, str(raised.exception))
    self.assertIn("must be", str(raised.exception))

  def test_fixed(self):
    manager = contrib.FixedLossScaleManager(5000)
    self.assertEqual(5000., float(manager.get_loss_scale()))
    self.assertEqual(tf.float32, manager.get_loss_scale().dtype)
    self.assertIsNone(manager.update_loss_scale(tf.constant(False)))  # Eager.
    self.assertEqual(5000., float(manager.get_loss_scale()))

  def test_abstract(self):
    with self.assertRaises(TypeError):
      contrib.LossScaleManager()  # pylint: disable=abstract-class-instantiated

  @parameterized.named_parameters(*testing.NAMED_MODES)
  def test_exponential_updates(self, mode):
    # The scale is multiplied by decr_ratio in float32, as in TF 1.x.
    with testing.ModeRunner(mode) as runner:
      flag = tf.Variable(True, trainable=False)
      manager = EXPONENTIAL(init_loss_scale=100, incr_every_n_steps=2,
                            decr_every_n_nan_or_inf=2, incr_ratio=3,
                            decr_ratio=0.8)
      step = runner.step(lambda: manager.update_loss_scale(
          tf.convert_to_tensor(flag)))
      runner.initialize()
      got = []
      for finite in [True, True, False, True, False, True, True]:
        runner.assign(flag, finite)
        step()
        got.append(runner.read(list(manager.variables)))
      shrunk = float(np.float32(300.) * np.float32(.8))
      self.assertAllEqual(
          [[100., 1, 0], [300., 0, 0], [300., 0, 1], [300., 1, 1],
           [shrunk, 0, 0], [shrunk, 1, 0], [shrunk * 3, 0, 0]],
          [[float(s), g, b] for s, g, b in got])

  def test_variables_names_and_config(self):
    with tf.Graph().as_default():
      manager = EXPONENTIAL(64, 10, 3, 4., .5)
      self.assertEqual(["loss_scale:0", "good_steps:0", "bad_steps:0"],
                       [v.name for v in manager.variables])
      self.assertEqual([tf.float32, tf.int32, tf.int32],
                       [v.dtype.base_dtype for v in manager.variables])
    config = manager.get_config()
    self.assertEqual(
        dict(init_loss_scale=64., incr_every_n_steps=10,
             decr_every_n_nan_or_inf=3, incr_ratio=4., decr_ratio=.5), config)
    self.assertEqual(config, EXPONENTIAL.from_config(config).get_config())
    self.assertEqual({"loss_scale": 3.},
                     contrib.FixedLossScaleManager(3).get_config())

  def test_manager_is_a_loss_scale_for_the_tf1_optimizer(self):
    manager = EXPONENTIAL(8, 1)
    self.assertIsInstance(manager, mplso.LossScale)
    var = tf.Variable(1.)
    opt = mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(.5), manager)
    opt.minimize(lambda: var * 2., var_list=[var])
    self.assertEqual((0., 16.), (float(var), float(manager())))


if __name__ == "__main__":
  absltest.main()
