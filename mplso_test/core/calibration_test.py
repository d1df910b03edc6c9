"""The calibrated scale: the power of two picked, and where it is picked."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mplso._src.core import calibration
from mplso._src.core import distribution
from mplso_test.helpers import strategies

NAN, INF = float("nan"), float("inf")


class ScaleForTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      # The largest scaled gradient lands in [2**13, 2**14).
      ("one", 1., 2.**13),
      ("just_under_two", 1.999, 2.**13),
      ("two", 2., 2.**12),
      ("three", 3., 2.**12),
      ("large", 3000., 4.),  # 2**11 <= 3000 < 2**12.
      ("small", 1e-3, 2.**23),  # 2**-10 <= 1e-3 < 2**-9.
      ("float16_max", 65504., 1. / 4.),
  )
  def test_power_of_two_below_float16_max(self, max_grad, expected):
    scale = float(calibration.scale_for(tf.constant(max_grad),
                                        min_scale=1e-30))
    self.assertEqual(expected, scale)
    self.assertGreaterEqual(max_grad * scale, 2.**13)
    self.assertLess(max_grad * scale, 2.**14)

  def test_clamped_to_the_bounds(self):
    self.assertEqual(1., float(calibration.scale_for(tf.constant(65504.))))
    self.assertEqual(
        2.**10, float(calibration.scale_for(tf.constant(1e-3),
                                            max_scale=2.**10)))
    self.assertEqual(
        3., float(calibration.scale_for(tf.constant(1.), min_scale=1.,
                                        max_scale=3.)))

  def test_tiny_gradients_give_the_largest_float32_power_of_two(self):
    # 2**(15 + 123 - 2) is beyond float32: the largest power of two.
    self.assertEqual(2.**127, float(calibration.scale_for(tf.constant(1e-37))))

  def test_all_zero_gives_tfs_default(self):
    self.assertEqual(2.**15, float(calibration.scale_for(tf.constant(0.))))
    self.assertEqual(
        64., float(calibration.scale_for(tf.constant(0.), max_scale=64.)))


class NextScaleTest(tf.test.TestCase, parameterized.TestCase):

  def _next(self, good_steps, finite, grads):
    return float(calibration.next_scale(
        tf.constant(0.5), tf.constant(good_steps, tf.int64),
        tf.constant(finite), grads))

  def test_calibrates_on_a_finite_uncalibrated_step(self):
    self.assertEqual(
        2.**12, self._next(calibration.UNCALIBRATED, True,
                           [tf.constant([-3., 1.]), None]))

  @parameterized.named_parameters(
      ("calibrated", 0, True), ("overflowed", calibration.UNCALIBRATED, False))
  def test_keeps_the_rule_otherwise(self, good_steps, finite):
    self.assertEqual(0.5, self._next(good_steps, finite, [tf.constant([3.])]))

  def test_placeholder_within_bounds(self):
    self.assertEqual(1., calibration.placeholder())
    self.assertEqual(4., calibration.placeholder(min_scale=4.))
    self.assertEqual(0.5, calibration.placeholder(0.25, max_scale=0.5))

  def test_any_other_string_is_refused_naming_it(self):
    with self.assertRaisesRegex(
        ValueError, r"`init` must be a number or the string 'calibrate' .*"
        r"Received: init='Calibrate'"):
      calibration.refuse_string("init", "Calibrate", "a number")
    self.assertTrue(calibration.is_calibrate("calibrate"))
    self.assertFalse(calibration.is_calibrate("dynamic"))
    self.assertFalse(calibration.is_calibrate(1.))


class MaxMagnitudeTest(tf.test.TestCase):

  def test_every_kind_of_gradient(self):
    grads = [tf.constant([1., -5.], tf.float16), None,
             tf.IndexedSlices(tf.constant([[2.], [-7.]]), tf.constant([0, 3]),
                              tf.constant([4, 1]))]
    self.assertEqual(7., float(distribution.max_magnitude(grads)))
    self.assertEqual(0., float(distribution.max_magnitude([None])))

  def test_the_largest_replica_wins_on_every_replica(self):
    strategy = strategies.mirrored()
    with strategy.scope():
      grad = strategy.experimental_distribute_values_from_function(
          lambda context: tf.constant(
              [1., -9.] if context.replica_id_in_sync_group == 1 else [2.]))
      self.assertEqual(9., float(distribution.max_magnitude([grad, None])))

  def test_non_finite_values_do_not_raise(self):
    # Their step is skipped: the magnitude is not used, only computed.
    value = distribution.max_magnitude([tf.constant([1., NAN, INF])])
    self.assertFalse(np.isfinite(float(value)) and float(value) < 2.)


if __name__ == "__main__":
  absltest.main()
