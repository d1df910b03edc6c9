"""Tests for the TF 1.x contrib loss-scale managers (the rule: update_rule_test)."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mplso
from mplso import contrib
from mplso_test.helpers import testing

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
    # Finite in Python, inf in float32: TF would scale by inf.
    ("fixed_beyond_float32", contrib.FixedLossScaleManager,
     dict(loss_scale=2**200), f"loss_scale={2**200}"),
    ("init_beyond_float32", EXPONENTIAL,
     dict(init_loss_scale=1e39, incr_every_n_steps=2), "init_loss_scale=1e+39"),
    ("incr_ratio_beyond_float32", EXPONENTIAL,
     dict(init_loss_scale=8, incr_every_n_steps=2, incr_ratio=1e39),
     "incr_ratio=1e+39"),
]


class ManagerTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*BAD_ARGUMENTS)
  def test_bad_argument(self, constructor, kwargs, shown):
    with self.assertRaises(ValueError) as raised:
      constructor(**kwargs)
    self.assertIn(shown, str(raised.exception))
    self.assertIn("must be", str(raised.exception))

  def test_fixed_below_one_says_tfs_words_first(self):
    with self.assertRaisesRegex(
        ValueError, r"^loss scale must be at least 1\. .*loss_scale=0\.5"):
      contrib.FixedLossScaleManager(.5)

  def test_beyond_float32_names_the_limit(self):
    with self.assertRaisesRegex(ValueError, r"float32 limit 3\.40282e\+38"):
      contrib.FixedLossScaleManager(1e39)

  @parameterized.named_parameters(
      ("numpy_float32", dict(init_loss_scale=np.float32(4.))),
      ("numpy_int", dict(init_loss_scale=np.int64(4),
                         incr_every_n_steps=np.int32(2))),
      ("integral_floats", dict(incr_every_n_steps=2.,
                               decr_every_n_nan_or_inf=np.float64(2.))),
      ("numpy_ratios", dict(incr_ratio=np.float32(2.),
                            decr_ratio=np.float32(.5))),
  )
  def test_numbers_as_tf1_accepted_them(self, kwargs):
    # TF 1.x's tests build managers from NumPy values (np.finfo(...).max / 4)
    # and TF 1.x compared its step counts with any number; the trajectory is
    # the one of plain Python arguments.
    plain = EXPONENTIAL(4, 2, 2, 2, .5)
    manager = EXPONENTIAL(**{"init_loss_scale": 4, "incr_every_n_steps": 2,
                             "decr_ratio": .5,
                             **kwargs})
    self.assertEqual(plain.get_config(), manager.get_config())
    for finite in (True, True, False, False, True, True):
      for m in (plain, manager):
        m.update_loss_scale(tf.constant(finite))
      self.assertAllEqual(plain.variables, manager.variables)
    fixed = contrib.FixedLossScaleManager(np.float32(1e4))
    self.assertEqual(1e4, float(fixed.get_loss_scale()))

  def test_keep_increasing_until_capped(self):
    # TF 1.x's own case: a NumPy initial scale near float32's maximum.
    start = np.finfo(np.float32).max / 4 + 10
    manager = EXPONENTIAL(start, 1)
    got = []
    for _ in range(3):
      manager.update_loss_scale(tf.constant(True))
      got.append(float(manager.get_loss_scale()))
    top = float(np.finfo(np.float32).max)
    self.assertEqual([float(np.float32(start) * 2), top, top], got)

  def test_update_takes_python_number_gradients(self):
    manager = EXPONENTIAL(8, 1, 1, 2, .5)
    manager.update([1.0, None])
    self.assertEqual(16., float(manager()))
    manager.update(float("nan"))
    self.assertEqual(8., float(manager()))

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
