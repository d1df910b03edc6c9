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

  def describe(self):
    return f"real {self.value}"


class _OwnBaseDispatch(type):
  """A family metaclass as tf_keras's: it dispatches calls of one class."""

  def __call__(cls, value, *args, **kwargs):
    if cls is _Metaclassed:
      return _Real(value)
    return super().__call__(value, *args, **kwargs)


class _Metaclassed(_Real, metaclass=_OwnBaseDispatch):
  """A family class with a metaclass of its own."""


class _Public(metaclass=dispatch.Dispatch):

  @staticmethod
  def _build(value):
    return _Real(value * 2)

  @staticmethod
  def _family_for(*args, **kwargs):
    return _Metaclassed if "metaclassed" in (*args, *kwargs.values()) else (
        _Real)

  @staticmethod
  def _family_classes():
    return (_Real,)


class _Sub(_Public):
  """A user's subclass."""

  def __init__(self, value, extra=None):
    super().__init__(value)
    self.extra = extra

  def describe(self):
    return "sub, " + super().describe()


class _SubSub(_Sub):

  def describe(self):
    return "subsub, " + super().describe()


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

  def test_subclass_call_builds_the_subclass_combined_with_the_family(self):
    built = _Sub(3, extra="x")
    combined = type(built)
    self.assertEqual((combined, _Sub, _Public, _Real, object),
                     combined.__mro__)
    self.assertEqual((3, "x"), (built.value, built.extra))
    self.assertEqual("sub, real 3", built.describe())
    self.assertEqual(
        (_Sub.__name__, _Sub.__qualname__, _Sub.__module__, _Sub.__doc__),
        (combined.__name__, combined.__qualname__, combined.__module__,
         combined.__doc__))
    self.assertIs(combined, type(_Sub(4)))  # Made once.
    self.assertIs(combined, _Sub._dispatch_class(_Real))
    self.assertIs(combined, combined._dispatch_class(_Real))
    self.assertIs(_Real, _Public._dispatch_class(_Real))

  def test_subclass_checks_are_pythons_own(self):
    built = _Sub(3)
    for cls in (_Sub, _Public, _Real):
      self.assertIsInstance(built, cls)
    self.assertTrue(issubclass(_Sub, _Public))
    self.assertTrue(issubclass(type(built), _Sub))
    # What the public class builds is no subclass's.
    self.assertNotIsInstance(_Public(3), _Sub)
    self.assertFalse(issubclass(_Real, _Sub))
    self.assertNotIsInstance(_Sub(3), _SubSub)

  def test_subclass_of_a_subclass(self):
    built = _SubSub(5, extra="y")
    self.assertEqual((_SubSub, _Sub, _Public, _Real, object),
                     type(built).__mro__[1:])
    self.assertEqual("subsub, sub, real 5", built.describe())
    self.assertIsInstance(built, _Sub)
    self.assertIsNot(type(built), type(_Sub(5)))

  def test_family_with_a_metaclass_calls_as_type_does(self):
    # The family's metaclass dispatches calls of its own class only, and
    # takes the value positionally; the subclass takes it by keyword too.
    built = _Sub(value=7, extra="metaclassed")
    combined = type(built)
    self.assertEqual((_Sub, _Public, _Metaclassed, _Real, object),
                     combined.__mro__[1:])
    self.assertTrue(issubclass(type(combined), dispatch.Dispatch))
    self.assertTrue(issubclass(type(combined), _OwnBaseDispatch))
    self.assertEqual((7, "metaclassed"), (built.value, built.extra))
    self.assertIsNot(combined, type(_Sub(7)))

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

  def test_subclass_of_policy(self):

    class MyPolicy(mplso.compat.Policy):

      def __init__(self, name, loss_scale="auto"):
        super().__init__(name, loss_scale=loss_scale)
        self.mine = True

    policy = MyPolicy("mixed_float16", loss_scale=8)
    self.assertTrue(policy.mine)
    self.assertEqual(8., float(policy.loss_scale()))
    self.assertEqual("float16", policy.compute_dtype)
    for cls in (MyPolicy, mplso.compat.Policy,
                type(tf.keras.mixed_precision.global_policy())):
      self.assertIsInstance(policy, cls)
    restored = MyPolicy.from_config(policy.get_config())
    self.assertIs(type(policy), type(restored))
    self.assertTrue(restored.mine)
    self.assertIsNot(type(policy), type(mplso.compat.Policy.from_config(
        policy.get_config())))

  def test_subclass_of_monitor_takes_the_optimizers_family(self):

    class MyMonitor(mplso.keras.LossScaleMonitor):

      def __init__(self, optimizer=None):
        super().__init__(optimizer=optimizer)
        self.mine = True

    for optimizer, base in (
        (tf_keras.optimizers.legacy.SGD(), tf_keras.callbacks.Callback),
        (keras.optimizers.SGD(), keras.callbacks.Callback)):
      monitor = MyMonitor(mplso.keras.LossScaleOptimizer(optimizer))
      self.assertTrue(monitor.mine)
      for cls in (MyMonitor, mplso.keras.LossScaleMonitor, base):
        self.assertIsInstance(monitor, cls)


if __name__ == "__main__":
  absltest.main()
