"""The public classes that stand for per-family classes."""

from absl.testing import absltest
import keras
import tensorflow as tf
import tf_keras

from mplso._src.keras import dispatch
import mplso.compat
import mplso.keras


class _Real:

  def __init__(self, value):
    self.value = value


class _Public(metaclass=dispatch.Dispatch):

  @staticmethod
  def _build(value):
    return _Real(value * 2)

  @staticmethod
  def _family_classes():
    return (_Real,)


class DispatchTest(tf.test.TestCase):

  def test_call_builds_a_family_class_that_counts_as_the_public_one(self):
    built = _Public(3)
    self.assertIs(type(built), _Real)
    self.assertEqual(6, built.value)
    self.assertIsInstance(built, _Public)
    self.assertTrue(issubclass(_Real, _Public))
    self.assertTrue(issubclass(_Public, _Public))
    self.assertNotIsInstance(object(), _Public)
    self.assertFalse(issubclass(object, _Public))

  def test_mplso_public_classes(self):
    cases = [
        (mplso.keras.LossScaleOptimizer(keras.optimizers.SGD()),
         mplso.keras.LossScaleOptimizer, keras.optimizers.Optimizer),
        (mplso.keras.LossScaleOptimizer(tf_keras.optimizers.legacy.SGD()),
         mplso.keras.LossScaleOptimizer, tf_keras.optimizers.legacy.Optimizer),
        (mplso.keras.LossScaleMonitor(optimizer=mplso.keras.LossScaleOptimizer(
            tf_keras.optimizers.SGD())),
         mplso.keras.LossScaleMonitor, tf_keras.callbacks.Callback),
        (mplso.compat.Policy("mixed_float16"), mplso.compat.Policy,
         type(tf.keras.mixed_precision.global_policy())),
    ]
    for built, public, family_base in cases:
      self.assertIsInstance(built, public)
      self.assertIsInstance(built, family_base)
      self.assertIsNot(type(built), public)
    self.assertNotIsInstance(keras.optimizers.SGD(),
                             mplso.keras.LossScaleOptimizer)
    self.assertNotIsInstance(keras.callbacks.Callback(),
                             mplso.keras.LossScaleMonitor)


if __name__ == "__main__":
  absltest.main()
