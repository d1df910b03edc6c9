"""`mplso._src.keras.factory`: which family's wrapper an optimizer gets.

What each family's wrapper does is in base_test and family_contract_test;
here the choice of family (and the error where none wraps the optimizer),
the factory's arguments and the shared API the public class shows.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

from absl.testing import parameterized
import keras
import pytest
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


class _Counting(mplso.keras.LossScaleOptimizer):
  """A user's subclass: counts its applies, as an all-reducing one would."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.applies = 0

  def apply_gradients(self, grads_and_vars, *args, **kwargs):
    self.applies += 1
    return super().apply_gradients(grads_and_vars, *args, **kwargs)


class _Tf23Signature(_Counting):
  """A subclass of a subclass, with TF 2.3's signature."""

  def __init__(self, optimizer, loss_scale):
    super().__init__(optimizer=optimizer, loss_scale=loss_scale)
    self.tf_2_3 = True


@keras.saving.register_keras_serializable(package="mplso_test")
class _RegisteredKeras3(_Counting):
  """A subclass registered with Keras 3."""


@tf_keras.saving.register_keras_serializable(package="mplso_test")
class _RegisteredTfKeras(_Counting):
  """A subclass registered with tf_keras."""


class _MakesItsOwn(mplso.keras.LossScaleOptimizer):
  """A subclass whose arguments hold no optimizer."""

  def __init__(self, learning_rate):
    super().__init__(tf.keras.optimizers.SGD(learning_rate), "dynamic")


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


class SubclassTest(tf.test.TestCase, parameterized.TestCase):
  """A user's subclass of the public class is one of the family's wrapper."""

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_overrides_run_and_super_reaches_the_wrapper(self, family):
    opt = _Counting(family.sgd(1.), "dynamic")  # TF 2.3's dialect.
    self.assertEqual(
        (_Counting, mplso.keras.LossScaleOptimizer, family.wrapper),
        type(opt).__mro__[1:4])
    self.assertEqual(0, opt.applies)  # The subclass's __init__ ran.
    self.assertIsInstance(opt.loss_scale, mplso.DynamicLossScale)
    var = family.variable(1.)
    opt.apply_gradients([(tf.constant(float("nan")), var)])
    self.assertEqual((1., 2.**14, 1), (float(tf.convert_to_tensor(var)),
                                        float(opt.loss_scale()),
                                        opt.applies))
    opt.apply_gradients([(tf.constant(1.), var)])
    self.assertEqual((0., 2), (float(tf.convert_to_tensor(var)),
                               opt.applies))

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_counts_as_each_class_it_derives_from(self, family):
    opt = _Counting(family.sgd())
    for cls in (_Counting, mplso.keras.LossScaleOptimizer, family.wrapper,
                family.own):
      self.assertIsInstance(opt, cls)
    self.assertTrue(issubclass(_Counting, mplso.keras.LossScaleOptimizer))
    self.assertNotIsInstance(mplso.keras.LossScaleOptimizer(family.sgd()),
                             _Counting)
    self.assertEqual(("_Counting", "factory_test"),
                     (type(opt).__name__, type(opt).__module__[-12:]))
    self.assertIs(type(opt), type(_Counting(family.sgd())))

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_tf_2_4_dialect_by_keyword(self, family):
    opt = _Counting(inner_optimizer=family.sgd(), dynamic=True,
                    initial_scale=8., dynamic_growth_steps=3)
    self.assertIsInstance(opt, family.wrapper)
    self.assertEqual((8., 3, 0), (float(opt.loss_scale),
                                  opt.dynamic_growth_steps, opt.applies))

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_subclass_of_a_subclass_with_tf_2_3_keywords(self, family):
    optimizer = family.sgd()
    opt = _Tf23Signature(optimizer=optimizer, loss_scale=4)
    self.assertEqual((_Tf23Signature, _Counting,
                      mplso.keras.LossScaleOptimizer, family.wrapper),
                     type(opt).__mro__[1:5])
    self.assertTrue(opt.tf_2_3)
    self.assertIs(optimizer, opt.inner_optimizer)
    self.assertEqual(4., float(opt.loss_scale()))

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_from_config_builds_the_subclass(self, family):
    opt = _Tf23Signature(family.sgd(), 8)
    restored = _Tf23Signature.from_config(opt.get_config())
    self.assertIs(type(opt), type(restored))
    self.assertTrue(restored.tf_2_3)
    self.assertEqual(8., float(restored.loss_scale()))
    self.assertIs(type(opt), type(type(opt).from_config(opt.get_config())))
    self.assertIs(family.wrapper, type(
        mplso.keras.LossScaleOptimizer.from_config(opt.get_config())))

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_saved_under_the_subclass_registered_name(self, family):
    registered = (_RegisteredKeras3 if family.keras is keras
                  else _RegisteredTfKeras)
    opt = registered(family.sgd(), 8)
    saved = family.keras.saving.serialize_keras_object(opt)
    self.assertEqual(f"mplso_test>{registered.__name__}",
                     saved["registered_name"])
    restored = family.keras.saving.deserialize_keras_object(saved)
    self.assertIs(type(opt), type(restored))
    self.assertEqual(8., float(restored.loss_scale()))

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_class_derived_from_an_objects_class(self, family):
    # Horovod's DistributedOptimizer(opt): a class derived from
    # `type(opt)`, built by `from_config(opt.get_config())`.
    for opt in (mplso.keras.LossScaleOptimizer(family.sgd(), 8),
                _Tf23Signature(family.sgd(), 8)):
      derived = type(type(opt).__name__, (type(opt),), {"derived": True})
      restored = derived.from_config(opt.get_config())
      self.assertIs(derived, type(restored))
      self.assertEqual(8., float(restored.loss_scale()))
      self.assertIs(derived, type(derived(family.sgd(), 2)))
    other = next(f for f in FAMILIES if f.keras is not family.keras)
    restored = type(opt).from_config(
        _Tf23Signature(other.sgd(), 8).get_config())
    self.assertEqual((_Tf23Signature, other.wrapper),
                     (type(restored).__mro__[1], type(restored).__mro__[4]))

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_checkpoint_keeps_the_loss_scale(self, family):
    opt = _Counting(family.sgd(), "dynamic")
    opt.apply_gradients([(tf.constant(float("inf")), family.variable(1.))])
    path = tf.train.Checkpoint(optimizer=opt).save(
        os.path.join(self.get_temp_dir(), "ckpt"))
    restored = _Counting(family.sgd(), "dynamic")
    tf.train.Checkpoint(optimizer=restored).restore(path)
    self.assertEqual(2.**14, float(restored.loss_scale()))

  def test_without_an_optimizer_argument_the_family_of_tf_keras(self):
    opt = _MakesItsOwn(0.5)
    self.assertIsInstance(opt, factory._default_family())
    self.assertIsInstance(opt, _MakesItsOwn)

  def test_what_the_family_refuses_is_refused(self):
    with self.assertRaisesRegex(TypeError, "'sgd'"):
      _Counting("sgd")
    with self.assertRaisesRegex(TypeError, "already"):
      _Counting(mplso.keras.LossScaleOptimizer(keras.optimizers.SGD()))


# A TF 2.3 program subclassing Keras's loss-scale optimizer.
_LEGACY_SUBCLASS = """
    import json
    import tensorflow as tf

    class AllReduceLSO(tf.keras.mixed_precision.experimental.LossScaleOptimizer):

      def __init__(self, optimizer, loss_scale):
        super().__init__(optimizer, loss_scale)
        self.applies = 0

      def apply_gradients(self, grads_and_vars, name=None, **kwargs):
        self.applies += 1  # Stands for hvd.allreduce(...).
        return super().apply_gradients(grads_and_vars, name, **kwargs)

    class Tf24LSO(tf.keras.mixed_precision.LossScaleOptimizer):
      pass

    opt = AllReduceLSO(tf.keras.optimizers.SGD(1.), "dynamic")
    var = tf.Variable(1.)
    opt.apply_gradients([(tf.constant(float("nan")), var)])
    skipped = [float(var), float(opt.loss_scale())]
    opt.apply_gradients([(tf.constant(1.), var)])
    tf_2_4 = Tf24LSO(tf.keras.optimizers.SGD(), dynamic=False,
                     initial_scale=4.)
    print(json.dumps({
        "applies": opt.applies, "skipped": skipped, "applied": float(var),
        "isinstance": [isinstance(opt, cls) for cls in (
            AllReduceLSO, tf.keras.mixed_precision.LossScaleOptimizer,
            tf.keras.mixed_precision.experimental.LossScaleOptimizer,
            tf.keras.optimizers.Optimizer)],
        "tf_2_4": [type(tf_2_4).__name__, float(tf_2_4.loss_scale),
                   tf_2_4.dynamic]}))
"""


@pytest.mark.slow  # Two fresh processes under the runner, ~8 s each.
class RunnerSubclassTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(("keras_3", "0"), ("tf_keras", "1"))
  def test_subclass_of_a_legacy_spelling(self, legacy_keras):
    path = os.path.join(self.create_tempdir().full_path, "legacy.py")
    with open(path, "w", encoding="utf-8") as f:
      f.write(textwrap.dedent(_LEGACY_SUBCLASS))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               TF_USE_LEGACY_KERAS=legacy_keras)
    proc = subprocess.run([sys.executable, "-m", "mplso.compat", path],
                          capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    self.assertEqual(
        {"applies": 2, "skipped": [1., 2.**14], "applied": 0.,
         "isinstance": [True] * 4, "tf_2_4": ["Tf24LSO", 4., False]},
        json.loads(proc.stdout.strip().splitlines()[-1]))


if __name__ == "__main__":
  tf.test.main()
