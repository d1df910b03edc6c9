"""`mplso._src.keras.factory`: which family's wrapper an optimizer gets.

What each family's wrapper does is in base_test and family_contract_test;
here the choice of family (and the error where none wraps the optimizer),
the factory's arguments and the shared API the public class shows.
"""

import re

from absl.testing import parameterized
import keras
import tensorflow as tf
import tf_keras

from mplso._src.keras import factory
from mplso._src.keras import keras3_optimizer
from mplso._src.keras import optimizer_v2
from mplso._src.keras import tf_keras_optimizer
import mplso.keras
from mplso_test.helpers import keras_families

# The tests call the families' `_reads_config` hook, as the factory does.
# pylint: disable=protected-access

FAMILIES = keras_families.keras_families()
NAMED_FAMILIES = keras_families.named_keras_families()


# Each family's wrapper, and a plain optimizer of its family.
CASES = (
    (keras3_optimizer.LossScaleOptimizer, lambda: keras.optimizers.SGD()),
    (optimizer_v2.LossScaleOptimizer,
     lambda: tf_keras.optimizers.legacy.SGD()),
    (tf_keras_optimizer.LossScaleOptimizer,
     lambda: tf_keras.optimizers.SGD()),
)


class FamilyTest(tf.test.TestCase):

  def test_families_in_dispatch_order_with_their_package(self):
    families = factory.families(import_missing=True)
    self.assertEqual([family for family, _ in CASES], families)
    self.assertEqual(["keras", "tf_keras", "tf_keras"],
                     [factory.package_of(family) for family in families])
    self.assertEqual(tuple(families), factory.wrapper_classes())

  def test_family_of_each_optimizer(self):
    for family, make in CASES:
      self.assertIs(family, factory.family_of(make()))
    self.assertIsNone(factory.family_of(
        tf.compat.v1.train.GradientDescentOptimizer(1.)))
    self.assertIsNone(factory.family_of("sgd"))

  def test_scales_loss(self):
    for _, make in CASES:
      optimizer = make()
      self.assertFalse(factory.scales_loss(optimizer))
      self.assertTrue(factory.scales_loss(
          mplso.keras.LossScaleOptimizer(optimizer, 8)))
    # Keras's own wrappers scale the loss too.
    self.assertTrue(factory.scales_loss(
        keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())))
    self.assertTrue(factory.scales_loss(
        tf_keras.mixed_precision.LossScaleOptimizer(
            tf_keras.optimizers.legacy.SGD())))
    self.assertFalse(factory.scales_loss(None))


class BuildTest(tf.test.TestCase, parameterized.TestCase):

  def test_builds_the_wrapper_of_the_optimizer_family(self):
    for family, make in CASES:
      optimizer = make()
      built = mplso.keras.LossScaleOptimizer(optimizer, 4)
      self.assertIs(family, type(built))
      self.assertIsInstance(built, mplso.keras.LossScaleOptimizer)
      self.assertIs(optimizer, built.inner_optimizer)
      self.assertEqual(4., float(built.loss_scale))

  def test_optimizer_by_either_keyword(self):
    for keyword in ("optimizer", "inner_optimizer"):
      optimizer = keras.optimizers.SGD()
      built = mplso.keras.LossScaleOptimizer(**{keyword: optimizer},
                                             loss_scale=2)
      self.assertIs(optimizer, built.inner_optimizer)
    with self.assertRaisesRegex(TypeError, "inner_optimizer="):
      mplso.keras.LossScaleOptimizer(optimizer=keras.optimizers.SGD(),
                                     inner_optimizer=keras.optimizers.SGD())

  @parameterized.named_parameters(
      ("v1_optimizer", lambda: tf.compat.v1.train.AdamOptimizer()),
      ("string", lambda: "adam"), ("none", lambda: None))
  def test_what_no_family_wraps_is_a_type_error_naming_every_family(
      self, make):
    optimizer = make()
    with self.assertRaisesRegex(
        TypeError, f"but got: {re.escape(repr(optimizer))} .* Accepted here: "
        r"a tf_keras\.optimizers\.legacy\.Optimizer \(Keras 2 OptimizerV2\), "
        r"a tf_keras\.optimizers\.Optimizer \(Keras 2\) or a "
        r"keras\.optimizers\.Optimizer \(Keras 3\)\. For a "
        r"tf\.compat\.v1\.train\.Optimizer use "
        r"mplso\.MixedPrecisionLossScaleOptimizer\.$"):
      mplso.keras.LossScaleOptimizer(optimizer, "dynamic")


class PublicClassTest(tf.test.TestCase, parameterized.TestCase):

  def test_shared_api_reads_as_the_default_family(self):
    public = mplso.keras.LossScaleOptimizer
    default = factory._default_family()
    self.assertIs(default.get_scaled_loss, public.get_scaled_loss)
    self.assertFalse(hasattr(public, "not_a_member"))

  def test_from_config_picks_the_family_that_wrote_it(self):
    for family, make in CASES:
      config = mplso.keras.LossScaleOptimizer(make(), 8).get_config()
      restored = mplso.keras.LossScaleOptimizer.from_config(config)
      self.assertIs(family, type(restored))
      self.assertEqual(8., float(restored.loss_scale))

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_reads_only_its_own_familys_optimizer_configs(self, family):
    self.assertEqual(
        {other.name: family.wrapper._reads_config(
            other.optimizers.Adam().get_config()) for other in FAMILIES},
        {other.name: other is family for other in FAMILIES})

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_from_config_creates_the_variables_of_one_wrapper(self, family):
    # Finding the family reads the optimizer's config only: no loss scale is
    # built (with its variables) just to be thrown away.
    config = mplso.keras.LossScaleOptimizer(family.sgd(),
                                            "dynamic").get_config()

    def created_by(build):
      names = []

      def creator(next_creator, **kwargs):
        names.append(kwargs.get("name"))
        return next_creator(**kwargs)

      with tf.variable_creator_scope(creator):
        build()
      return names

    self.assertEqual(
        created_by(lambda: family.wrapper.from_config(config)),
        created_by(lambda: mplso.keras.LossScaleOptimizer.from_config(config)))
    self.assertEqual(1, created_by(
        lambda: mplso.keras.LossScaleOptimizer.from_config(config)).count(
            "good_steps"))

  def test_from_config_that_no_family_reads_is_refused(self):
    # Keras 3 writes `use_ema` and no legacy mark; tf_keras marks its configs
    # True or False. A mark of None is neither's.
    inner = {"class_name": "SGD",
             "config": {"use_ema": False, "is_legacy_optimizer": None}}
    with self.assertRaisesRegex(ValueError, "No installed Keras can read"):
      mplso.keras.LossScaleOptimizer.from_config(
          {"inner_optimizer": inner, "loss_scale": 8})


if __name__ == "__main__":
  tf.test.main()
