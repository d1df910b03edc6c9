"""`mplso.keras.LossScaleOptimizer`: picks the wrapper of the optimizer's family.

Each Keras family has its own wrapper module, which imports that family's
Keras package (`_FAMILIES`), and its wrapper class, `LossScaleOptimizer`,
registered for deserialisation, which says what optimizers and configs are
the family's (`_wraps`, `_scales_loss`, `_reads_config`: see `base`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import sys

from mplso._src.keras import arguments
from mplso._src.keras import config as config_lib
from mplso._src.keras import dispatch

# The family's hooks are private to mplso's Keras wrappers, not to a module.
# pylint: disable=protected-access

# Each family's module and the Keras package it imports, in dispatch order.
_FAMILIES = {
    "mplso._src.keras.keras3_optimizer": "keras",
    "mplso._src.keras.optimizer_v2": "tf_keras",
    "mplso._src.keras.tf_keras_optimizer": "tf_keras",
}


def families(import_missing: bool = False) -> list[type]:
  """Returns the wrapper classes of the families whose Keras is available.

  Args:
    import_missing: also import Keras packages that are installed but not
      imported yet (as `mplso.keras` does, so that every family's wrapper is
      registered before a model is loaded). When False, only packages the
      process has already imported count: an optimizer of a package that
      was never imported cannot exist.
  """
  found = []
  for module_name, package in _FAMILIES.items():
    if package not in sys.modules:
      if not import_missing or importlib.util.find_spec(package) is None:
        continue
    found.append(importlib.import_module(module_name).LossScaleOptimizer)
  return found


def package_of(family: type) -> str:
  """Returns the Keras package (`"keras"` or `"tf_keras"`) of a family."""
  return _FAMILIES[family.__module__]


def family_of(optimizer) -> type | None:
  """Returns the wrapper class of `optimizer`'s family; None if none has it."""
  for family in families():
    if family._wraps(optimizer):
      return family
  return None


def scales_loss(optimizer) -> bool:
  """Whether `optimizer` is a Keras loss-scale optimizer, mplso's or Keras's."""
  return any(family._scales_loss(optimizer) for family in families())


def wrapper_classes() -> tuple[type, ...]:
  """Returns the wrapper classes of the families loaded so far."""
  return tuple(sys.modules[name].LossScaleOptimizer
               for name in _FAMILIES if name in sys.modules)


# Members every family's wrapper has, looked up on the class itself too.
_SHARED_API = frozenset([
    "loss_scale", "inner_optimizer", "dynamic", "initial_scale",
    "dynamic_growth_steps", "dynamic_counter", "get_scaled_loss",
    "get_unscaled_gradients", "get_gradients", "minimize",
    "apply_gradients", "get_config", "iterations", "learning_rate", "lr",
    "add_slot", "get_slot", "get_slot_names", "weights", "variables",
    "get_weights", "set_weights"])


@functools.cache
def _default_family() -> type:
  """The family of the optimizers `tf.keras` makes (fixed per process)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  for family in families(import_missing=True):
    if family._wraps(tf.keras.optimizers.SGD()):
      return family
  raise AttributeError("No installed Keras family wraps tf.keras optimizers.")


def _build(*args, **kwargs):
  """`LossScaleOptimizer(...)`: builds the wrapper of the optimizer's family."""
  # TF 2.3 names the optimizer `optimizer`, TF 2.4 and Keras 3
  # `inner_optimizer`; the family's class checks the other arguments.
  # tf_keras's metaclass takes it positionally.
  if not args and "optimizer" in kwargs and "inner_optimizer" in kwargs:
    raise arguments.optimizer_count_error(kwargs["optimizer"],
                                           kwargs["inner_optimizer"])
  if not args and ("optimizer" in kwargs) != ("inner_optimizer" in kwargs):
    args = (kwargs.pop("optimizer", None) or kwargs.pop("inner_optimizer"),)
  optimizer = args[0] if args else None
  if scales_loss(optimizer):
    raise arguments.wrapped_twice_error(optimizer)
  family = family_of(optimizer)
  if family is None:
    raise arguments.not_an_optimizer_error(
        optimizer, hint=" For a tf.compat.v1.train.Optimizer use "
        "mplso.MixedPrecisionLossScaleOptimizer.")
  return family(*args, **kwargs)


def _family_for(*args, **kwargs) -> type:
  """Returns the family of a call of a user's subclass with these arguments.

  The arguments are the subclass's: the optimizer is looked for where TF's
  classes take it (first, or as `optimizer` or `inner_optimizer`), then
  among the other arguments. Where none is an optimizer of a family (the
  subclass makes its own, or passes something else, which the family's
  class then refuses), the family of the optimizers `tf.keras` makes.
  """
  candidates = [*args[:1], kwargs.get("optimizer"),
                kwargs.get("inner_optimizer"), *args[1:], *kwargs.values()]
  for candidate in candidates:
    family = family_of(candidate)
    if family is not None:
      return family
  return _default_family()


def _keys_taken(cls, config, keys) -> dict:
  """`config` less those of `keys` that `cls.__init__` has no argument for.

  A user's subclass written for TF 2.3 takes TF 2.3's two arguments, as
  TF 2.3's `from_config` passed them; a family's wrapper also writes its own
  (`keys`: Keras 3's `name`).
  """
  parameters = inspect.signature(cls.__init__).parameters
  if any(parameter.kind is inspect.Parameter.VAR_KEYWORD
         for parameter in parameters.values()):
    return config
  return {key: value for key, value in config.items()
          if key not in keys or key in parameters}


class _Dispatch(dispatch.Dispatch):
  """Also shows the API every family shares on the public class."""

  def __getattr__(cls, name):
    # The API every family's wrapper shares reads as the
    # wrapper's of the Keras that `tf.keras` is, for help() and the docs.
    if name not in _SHARED_API:
      raise AttributeError(name)
    return getattr(_default_family(), name)


class LossScaleOptimizer(metaclass=_Dispatch):
  """An optimizer that applies loss scaling to a Keras optimizer.

  Loss scaling multiplies the loss by a loss scale and divides each gradient
  by the same number, so that float16 gradients which would underflow to zero
  keep their value. A step whose gradients hold a NaN or an Inf is skipped
  (no variable or slot moves; `iterations` still advances) and a dynamic
  loss scale shrinks; after a run of finite steps it grows again.

  `minimize` scales and unscales by itself, as TF 2.3's page shows:

  >>> import keras
  >>> opt = LossScaleOptimizer(keras.optimizers.SGD(0.25), "dynamic")
  >>> var = tf.Variable(1.)
  >>> _ = opt.minimize(lambda: var ** 2, var_list=[var])
  >>> float(var)
  0.5

  `model.compile(optimizer=opt)` and `fit` scale the loss too. With a
  `tf.GradientTape`, scale and unscale by hand:

  >>> with tf.GradientTape() as tape:
  ...   loss = var ** 2
  ...   scaled_loss = opt.get_scaled_loss(loss)
  >>> scaled_grad = tape.gradient(scaled_loss, var)
  >>> (grad,) = opt.get_unscaled_gradients([scaled_grad])
  >>> _ = opt.apply_gradients([(grad, var)])  # Updates the loss scale.
  >>> float(var)
  0.25

  Calling this class returns a wrapper whose base class is the wrapped
  optimizer's own: a `tf_keras.optimizers.legacy.Optimizer`, a
  `tf_keras.optimizers.Optimizer` or a `keras.optimizers.Optimizer`, so each
  family's `compile` and `fit` accept it. Every such wrapper is an instance
  of this class. A subclass of this class (as TF 2.3 code subclassed Keras's)
  builds a class deriving from the subclass and then from that wrapper, so
  its methods run and `super()` reaches the wrapper's.

  TF 2.4-2.15's arguments are accepted too, `LossScaleOptimizer(
  inner_optimizer, dynamic=True, initial_scale=None,
  dynamic_growth_steps=None)` (a bool second argument is `dynamic`), and
  Keras 3's `initial_scale` / `dynamic_growth_steps`; every wrapper has
  their attributes `inner_optimizer`, `dynamic`, `initial_scale`,
  `dynamic_growth_steps` and `dynamic_counter`.

  Args:
    optimizer: the Keras optimizer to wrap (also `inner_optimizer=`).
    loss_scale: `"dynamic"` (a `mplso.DynamicLossScale()`), a Python int or
      float >= 1 (a fixed scale), or an `mplso.LossScale`. Without it (and
      without `dynamic` / `initial_scale`), a dynamic scale as tf_keras's:
      2**15, growing after 2000 finite steps.

  Raises:
    TypeError: if `optimizer` is not a Keras optimizer of a known family, or
      already scales the loss.
    ValueError: if the loss-scale arguments are not accepted.

  Compatibility: mirrors TF 2.3's
  `tf.keras.mixed_precision.experimental.LossScaleOptimizer`. Its config is
  TF 2.3's; the configs of tf_keras's and Keras 3's own wrappers are read too.
  """

  _build = staticmethod(_build)
  _family_for = staticmethod(_family_for)
  _family_classes = staticmethod(wrapper_classes)

  @classmethod
  def from_config(cls, config, custom_objects=None):
    """Creates a wrapper from `get_config()` output, in the right family.

    The family is the one that wrote the wrapped optimizer's config (see
    `_reads_config` in `base`). Called on a user's subclass, it builds that
    subclass in the family, as the family's `from_config` builds its class:
    `cls(optimizer, loss_scale, **other_keys)`.
    """
    # Only to pick the family: the family's from_config builds the scale.
    optimizer_config = config_lib.optimizer_config(config)
    inner = optimizer_config.get("config", {})
    for family in families(import_missing=True):
      if family._reads_config(inner):
        built = cls._dispatch_class(family)
        if built is not family:
          config = _keys_taken(built, config, family._CONFIG_KEYS)
        # This method comes before the family's in a subclass's MRO: the
        # family's, called for the class `cls` builds in the family.
        return family.from_config.__func__(built, config, custom_objects)
    raise ValueError(
        "No installed Keras can read this optimizer config: "
        f"{optimizer_config!r}.")
