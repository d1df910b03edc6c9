"""The wrappers' constructor arguments: the dialects and their errors.

TF 2.3's `loss_scale`, and TF 2.4-2.15's and Keras 3's `dynamic` /
`initial_scale` / `dynamic_growth_steps`, read by
`arguments.loss_scale_from_args`, on every Keras family; and the errors for
an optimizer that is missing, of another family or already loss scaling.
"""

import re

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

import mplso
from mplso._src.keras import arguments
import mplso.keras
from mplso_test.helpers import keras_families
from mplso_test.helpers import testing

NAN, INF = testing.NAN, testing.INF
FAMILIES = keras_families.keras_families()
NAMED_FAMILIES = keras_families.named_keras_families()



class LossScaleFromArgsTest(tf.test.TestCase):
  """`loss_scale_from_args` itself, without a wrapper."""

  def test_tf_2_3_dialect_is_the_loss_scale_argument(self):
    self.assertIsInstance(arguments.loss_scale_from_args("dynamic"),
                          mplso.DynamicLossScale)
    fixed = arguments.loss_scale_from_args(128)
    self.assertIsInstance(fixed, mplso.FixedLossScale)
    self.assertEqual(float(fixed()), 128.)

  def test_nothing_given_is_tf_keras_dynamic_scale(self):
    scale = arguments.loss_scale_from_args()
    self.assertIsInstance(scale, mplso.DynamicLossScale)
    self.assertEqual((scale.initial_loss_scale, scale.increment_period,
                      scale.multiplier), (2.**15, 2000, 2.))

  def test_unset_is_not_none(self):
    self.assertIsNot(arguments.UNSET, None)
    self.assertEqual(repr(arguments.UNSET), "UNSET")
    with self.assertRaisesRegex(ValueError, "cannot be None"):
      arguments.loss_scale_from_args(None)


class DialectTest(tf.test.TestCase, parameterized.TestCase):
  """TF 2.4-2.15's and Keras 3's constructor arguments, on every family."""

  def _assert_dynamic(self, opt, initial, period):
    # In these dialects `loss_scale` is the current scale, a tensor.
    self.assertIsInstance(opt.loss_scale, tf.Tensor)
    self.assertEqual(float(opt.loss_scale), initial)
    self.assertTrue(opt.dynamic)
    self.assertEqual(opt.initial_scale, initial)
    self.assertEqual(opt.dynamic_growth_steps, period)
    self.assertEqual(
        opt.get_config()["loss_scale"],
        {"class_name": "DynamicLossScale",
         "config": {"initial_loss_scale": initial, "increment_period": period,
                    "multiplier": 2.}})
    self.assertEqual(opt.dynamic_counter.name.split(":")[0].split("/")[-1],
                     "good_steps")

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_defaults_are_tf_keras_dynamic_scale(self, family):
    for args in ((), (True,)):
      inner = family.sgd()
      opt = mplso.keras.LossScaleOptimizer(inner, *args)
      self.assertIs(opt.inner_optimizer, inner)
      self._assert_dynamic(opt, 2.**15, 2000)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_tf_2_4_positional_and_keyword_forms(self, family):
    self._assert_dynamic(
        mplso.keras.LossScaleOptimizer(family.sgd(), True, 64, 10), 64, 10)
    inner = family.sgd()
    opt = mplso.keras.LossScaleOptimizer(
        inner_optimizer=inner, dynamic=True, initial_scale=8,
        dynamic_growth_steps=3)
    self.assertIs(opt.inner_optimizer, inner)
    self._assert_dynamic(opt, 8, 3)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_keras_3_keywords(self, family):
    opt = family.wrapper(family.sgd(), initial_scale=32.,
                              dynamic_growth_steps=5)
    self._assert_dynamic(opt, 32., 5)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_fixed_scale(self, family):
    for opt in (mplso.keras.LossScaleOptimizer(family.sgd(), False, 128),
                mplso.keras.LossScaleOptimizer(family.sgd(), dynamic=False,
                                               initial_scale=128)):
      self.assertIsInstance(opt.loss_scale, tf.Tensor)
      self.assertEqual(float(opt.loss_scale), 128.)
      self.assertFalse(opt.dynamic)
      self.assertEqual(opt.initial_scale, 128.)
      self.assertIsNone(opt.dynamic_growth_steps)
      self.assertIsNone(opt.dynamic_counter)
    tf_2_3 = mplso.keras.LossScaleOptimizer(family.sgd(), 128)
    self.assertEqual(
        (tf_2_3.dynamic, tf_2_3.initial_scale, tf_2_3.dynamic_counter),
        (False, 128., None))

  @parameterized.named_parameters(
      (f"{family.name}_{name}", family, kwargs, error, message)
      for family in FAMILIES for name, kwargs, error, message in (
          # TF's type and wording first.
          ("fixed_without_scale", {"dynamic": False}, ValueError,
           '^"initial_scale" must be specified if "dynamic" is False'),
          ("false_second_argument", {"loss_scale": False}, ValueError,
           '^"initial_scale" must be specified if "dynamic" is False'),
          ("fixed_with_growth_steps",
           {"dynamic": False, "initial_scale": 2, "dynamic_growth_steps": 3},
           ValueError, '^"dynamic_growth_steps" must be None if "dynamic" is '
           "False, but got: 3"),
          ("dynamic_not_bool", {"dynamic": "yes"}, TypeError,
           '^"dynamic" argument to LossScaleOptimizer.__init__ must be a '
           "bool, but got: 'yes'"),
          # Ours: both dialects at once, `dynamic` twice, a bad scale.
          ("both_dialects", {"loss_scale": "dynamic", "initial_scale": 4},
           ValueError, "not both.*loss_scale='dynamic'"),
          ("dynamic_twice", {"loss_scale": True, "dynamic": False}, TypeError,
           "multiple values for argument 'dynamic'"),
          # Named as the caller wrote them, not as the TF1 loss scale does.
          ("initial_scale_below_one", {"initial_scale": 0.5}, ValueError,
           r"^`initial_scale` must be .* Received: initial_scale=0.5"),
          ("fixed_scale_below_one", {"dynamic": False, "initial_scale": 0.5},
           ValueError, r"Received: initial_scale=0.5"),
          ("no_growth_steps", {"dynamic_growth_steps": 0}, ValueError,
           r"^`dynamic_growth_steps` must be an integer >= 1. Received: "
           r"dynamic_growth_steps=0"),
      ))
  def test_refused_arguments(self, family, kwargs, error, message):
    for wrap in (mplso.keras.LossScaleOptimizer, family.wrapper):
      with self.assertRaisesRegex(error, message):
        wrap(family.sgd(), **kwargs)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_optimizer_by_either_keyword_once(self, family):
    for keyword in ("optimizer", "inner_optimizer"):
      inner = family.sgd()
      opt = mplso.keras.LossScaleOptimizer(**{keyword: inner})
      self.assertIs(opt.inner_optimizer, inner)
    with self.assertRaisesRegex(TypeError, "inner_optimizer"):
      mplso.keras.LossScaleOptimizer(family.sgd(),
                                     inner_optimizer=family.sgd())
    # Both keywords: both named.
    with self.assertRaisesRegex(
        TypeError, r"once.*Received: optimizer=<.*>, inner_optimizer=<"):
      mplso.keras.LossScaleOptimizer(optimizer=family.sgd(),
                                     inner_optimizer=family.sgd())


class ConstructorTest(tf.test.TestCase, parameterized.TestCase):
  """TF 2.3's `loss_scale`, and the optimizer argument, on every family."""

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_tf_2_3_loss_scale_kinds(self, family):
    def make(loss_scale):
      return mplso.keras.LossScaleOptimizer(family.sgd(), loss_scale)

    self.assertIsInstance(make("dynamic").loss_scale, mplso.DynamicLossScale)
    fixed = make(128)
    self.assertIsInstance(fixed.loss_scale, mplso.FixedLossScale)
    self.assertEqual(float(fixed.loss_scale()), 128.)
    scale = mplso.DynamicLossScale(64)
    self.assertIs(make(scale).loss_scale, scale)

  @parameterized.named_parameters(
      (f"{family.name}_{name}", family, value) for family in FAMILIES
      for name, value in (
          ("none", None), ("word", "static"), ("zero", 0), ("below_one", 0.5),
          ("negative", -2.), ("nan", NAN), ("inf", INF), ("list", [2.]),
          ("number_string", "8")))
  def test_bad_loss_scale_is_a_value_error(self, family, value):
    with self.assertRaisesRegex(ValueError, "(?i)loss.scale"):
      mplso.keras.LossScaleOptimizer(family.sgd(), value)
    with self.assertRaises(ValueError):
      family.wrapper(family.sgd(), value)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_wrapping_twice_is_the_same_error_in_every_family(self, family):
    wrapper, own = family.wrapper, family.own
    for already in (mplso.keras.LossScaleOptimizer(family.sgd()),
                    own(family.sgd())):
      for wrap in (mplso.keras.LossScaleOptimizer, wrapper):
        with self.assertRaisesRegex(
            TypeError, "^LossScaleOptimizer cannot wrap another "
            "LossScaleOptimizer, but got: .* already a loss-scale optimizer"):
          wrap(already, "dynamic")

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_other_kind_is_a_type_error_naming_the_family(self, family):
    others = [tf.compat.v1.train.GradientDescentOptimizer(0.1), "adam"]
    others += [other.sgd() for other in FAMILIES if other is not family]
    for other in others:
      with self.assertRaisesRegex(
          TypeError, '^"inner_optimizer" must be an instance of .*, but got: '
          f"{re.escape(repr(other))} .* Accepted here: "
          f"{re.escape(family.kind)}\\. "):
        family.wrapper(other, "dynamic")

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_no_optimizer_is_a_type_error(self, family):
    # None is "no optimizer": the TF 2.4 dialect also names it
    # `inner_optimizer=`, so the error asks for it once.
    with self.assertRaisesRegex(TypeError, "needs the optimizer to wrap"):
      family.wrapper(None, "dynamic")


if __name__ == "__main__":
  absltest.main()
