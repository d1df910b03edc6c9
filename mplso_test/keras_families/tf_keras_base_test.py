"""What the two tf_keras families share: tf_keras's loss-scale base class.

And what they alone do, as tf_keras's own class does (Keras 3's family does
otherwise): an optimizer is wrapped once, attributes set on the wrapper are
set on the wrapped optimizer, never-scaled gradients warn through TF's
logging module, and an error names Keras 3's names.
"""

from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import keras
import tensorflow as tf
import tf_keras

import mplso
from mplso._src.keras import optimizer_v2
from mplso._src.keras import tf_keras_base
from mplso._src.keras import tf_keras_optimizer
import mplso.keras
from mplso_test.helpers import keras_families

FAMILIES = keras_families.keras_families()
# The tf_keras families, whose wrappers stand in for the wrapped optimizer
# in checkpoints, and forward attribute writes to it.
NAMED_CHECKPOINTS_AS_OWN = keras_families.named_keras_families(
    lambda family: family.checkpoints_as_own)
NAMED_FORWARDING_WRITES = keras_families.named_keras_families(
    lambda family: family.forwards_attribute_writes)



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


class ConstructorTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{name}_by_{by}", family, by == "ours")
      for name, family in NAMED_CHECKPOINTS_AS_OWN
      for by in ("ours", "own"))
  def test_optimizer_wrapped_already_is_a_value_error(self, family, by_ours):
    # The tf_keras families' wrappers stand in for the wrapped optimizer in
    # checkpoints: a second loss scale would collide with the first.
    inner = family.sgd()
    if by_ours:
      family.wrapper(inner, "dynamic")
    else:
      family.own(inner)
    for wrap in (mplso.keras.LossScaleOptimizer, family.wrapper):
      with self.assertRaisesRegex(ValueError, "already wrapped .* single"):
        wrap(inner, "dynamic")
    if by_ours:  # And the family's own class refuses it too.
      with self.assertRaisesRegex(ValueError, "already wrapped"):
        family.own(inner)


class AttributeSurfaceTest(tf.test.TestCase, parameterized.TestCase):
  """What tf_keras's classes expose, and where Keras 3's names are."""

  @parameterized.parameters("scale_loss", "dynamic_scale", "step_counter")
  def test_keras_3_only_name_on_tf_keras_says_where_it_exists(self, name):
    for family in FAMILIES:
      if family.name == "keras3":
        continue
      opt = mplso.keras.LossScaleOptimizer(family.sgd(), "dynamic")
      with self.assertRaises(AttributeError) as raised:
        getattr(opt, name)
      message = str(raised.exception)
      self.assertStartsWith(message, "'LossScaleOptimizer' object ")
      self.assertIn(f"`{name}` is Keras 3's LossScaleOptimizer's", message)


class PassthroughTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*NAMED_FORWARDING_WRITES)
  def test_attributes_set_on_the_wrapper_are_set_on_the_wrapped_optimizer(
      self, family):
    model = keras_families.keras_model(family.keras)
    opt = family.wrapper(family.optimizers.Adam(0.01, beta_1=0.8, clipnorm=2.),
                         mplso.DynamicLossScale(2.**10))
    family.build(opt, model.trainable_variables)
    inner = opt.inner_optimizer
    self.assertEqual(opt.clipnorm, 2.)
    opt.beta_1 = 0.7
    self.assertAllClose(inner.beta_1, 0.7)
    self.assertNotIn("beta_1", vars(opt))
    opt.clipnorm = 3.
    self.assertEqual(inner.clipnorm, 3.)
    fresh = family.wrapper(family.optimizers.Adam(0.01), "dynamic")
    counter = tf.Variable(7, dtype=tf.int64)
    fresh.iterations = counter
    self.assertIs(fresh.inner_optimizer.iterations, counter)


class ApplyGradientsTest(tf.test.TestCase):

  def test_warning_goes_through_tfs_logging_module(self):
    # tf_keras's test captures its warning by patching TF's logging module.
    # (Keras 3's class does not warn: base_test's
    # test_warns_as_tf_keras_when_never_scaled.)
    from tensorflow.python.platform import tf_logging  # pylint: disable=g-import-not-at-top
    tf_keras_families = [f for f in FAMILIES if f.name != "keras3"]
    self.assertLen(tf_keras_families, 2)
    for family in tf_keras_families:
      for make in (family.own, lambda opt: mplso.keras.LossScaleOptimizer(
          opt, "dynamic")):
        with mock.patch.object(tf_logging, "warning") as warning:
          make(family.sgd()).apply_gradients(
              [(tf.constant(1.), tf.Variable(1.))])
        (call,) = warning.call_args_list
        self.assertIn(
            "You forgot to call LossScaleOptimizer.get_scaled_loss()",
            call.args[0])


if __name__ == "__main__":
  absltest.main()
