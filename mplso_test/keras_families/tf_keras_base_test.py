"""What the two tf_keras families share: tf_keras's loss-scale base class."""

from absl.testing import absltest
import keras
import tf_keras

from mplso._src.keras import optimizer_v2
from mplso._src.keras import tf_keras_base
from mplso._src.keras import tf_keras_optimizer


class TfKerasBaseTest(absltest.TestCase):

  def test_both_tf_keras_families_are_tf_keras_loss_scale_optimizers(self):
    for family, optimizer in (
        (optimizer_v2, tf_keras.optimizers.legacy.SGD()),
        (tf_keras_optimizer, tf_keras.optimizers.SGD())):
      wrapper = family.LossScaleOptimizer(optimizer, "dynamic")
      self.assertIsInstance(wrapper, tf_keras_base.TfKerasLossScaleOptimizer)
      self.assertTrue(tf_keras_base.scales_loss(wrapper))

  def test_tf_keras_own_wrappers_scale_the_loss(self):
    self.assertTrue(tf_keras_base.scales_loss(
        tf_keras.mixed_precision.LossScaleOptimizer(
            tf_keras.optimizers.legacy.SGD())))
    self.assertTrue(tf_keras_base.scales_loss(
        tf_keras.mixed_precision.LossScaleOptimizer(
            tf_keras.optimizers.SGD())))

  def test_bare_optimizers_do_not(self):
    for optimizer in (tf_keras.optimizers.legacy.SGD(),
                      tf_keras.optimizers.SGD(), keras.optimizers.SGD()):
      self.assertFalse(tf_keras_base.scales_loss(optimizer))


if __name__ == "__main__":
  absltest.main()
