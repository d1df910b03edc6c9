"""TF 2.1-2.3's Keras `Policy(name, loss_scale='auto')`, on today's Keras.

TF 2.1-2.3 kept the loss scale in the dtype policy: `Policy('mixed_float16')`
carried a dynamic loss scale, and `Model.compile` wrapped the optimizer in a
`LossScaleOptimizer` with the loss scale of the model's policy. Today's
policies (Keras 3's `DTypePolicy`, tf_keras's `Policy`) hold no loss scale.
`Policy` here builds a subclass of the policy class of the Keras `tf.keras`
is, with TF 2.3's `loss_scale` argument and property, and `compile_patches()`
gives the `compile` that `mplso.compat.install()` puts on that Keras's
`Model` so that such a policy wraps the optimizer in
`mplso.keras.LossScaleOptimizer`.
"""

from __future__ import annotations

from collections.abc import Mapping
import functools
import logging

import tensorflow as tf

from mplso._src.keras import dispatch
from mplso._src.keras import factory
from mplso._src.loss_scales import loss_scale as loss_scale_lib

# TF 2.3's default: a dynamic loss scale for 'mixed_float16', else none.
AUTO = "auto"

# The keys of a policy config: `Policy`'s constructor arguments.
_CONFIG_KEYS = ("name", "loss_scale")

def _check_name(name) -> None:
  """Raises TF 2.3's `TypeError` for a policy name that is not a string."""
  if isinstance(name, tf.dtypes.DType):
    raise TypeError(
        "'name' must be a string, not a DType. Instead, pass DType.name. "
        f"Got: {name.name} (received name={name!r}; pass name={name.name!r}).")
  if not isinstance(name, str):
    raise TypeError(
        f"'name' must be a string, but got: {name} (received name={name!r}; "
        "pass a policy name such as 'mixed_float16' or 'float32').")


def _deserialize_loss_scale(config, custom_objects):
  """Returns the loss scale of a policy config, as TF 2.3's Keras found it.

  Args:
    config: `{"class_name": ..., "config": ...}`, as `get_config` writes it.
    custom_objects: optional mapping of class names to `LossScale` classes;
      Keras's custom-object scope is searched too, first, as TF 2.3 did.

  Raises:
    ValueError: for a malformed config or an unknown class name, with TF's
      wording first.
  """
  if "class_name" not in config or "config" not in config:
    raise ValueError(
        f"Improper config format: {dict(config)}. A serialized loss scale is "
        "a dict with the keys 'class_name' and 'config', as get_config() "
        f"writes it. Received: loss_scale={config!r}.")
  class_name = config["class_name"]
  # The built-in classes by name (as TF 2.3's Keras `deserialize`), then
  # `custom_objects` or Keras's custom-object scope.
  classes = dict(loss_scale_lib.BY_NAME)
  custom = tf.keras.utils.get_registered_object(class_name, custom_objects)
  if custom is not None:
    if not (isinstance(custom, type) and
            issubclass(custom, loss_scale_lib.LossScale)):
      raise ValueError(
          f"The custom object for the loss scale {class_name!r} must be an "
          f"mplso.LossScale subclass. Received: {custom!r}.")
    classes[class_name] = custom
  if class_name not in classes:
    raise ValueError(
        f"Unknown loss scale: {class_name}. Received: class_name="
        f"{class_name!r}. Accepted: {sorted(classes)}, or a LossScale "
        "subclass passed through custom_objects.")
  return loss_scale_lib.deserialize(
      config, custom_objects={class_name: classes[class_name]})


class _LossScaleMixin:
  """TF 2.3's `loss_scale` on top of a Keras policy class."""

  def __init__(self, name, loss_scale=AUTO):
    _check_name(name)
    try:
      super().__init__(name)
    except ValueError as e:
      raise ValueError(
          f"Cannot convert value {name} to a mixed precision Policy. Valid "
          "policies include 'mixed_float16', 'mixed_bfloat16', and the name "
          f"of any dtype such as 'float32'. Received: name={name!r}.") from e
    self._using_default_loss_scale = isinstance(loss_scale, str) and (
        loss_scale == AUTO)
    if self._using_default_loss_scale:
      loss_scale = "dynamic" if name == "mixed_float16" else None
    self._loss_scale = loss_scale_lib.get(loss_scale)
    if self._loss_scale is not None and self.compute_dtype != "float16":
      # TF 2.3 warned and kept the loss scale.
      logging.getLogger("mplso").warning(
          "Creating a Policy with a loss scale is only useful for float16 "
          "policies. You passed loss_scale=%r for policy %s. Consider not "
          "passing any loss_scale instead.", loss_scale, name)

  @property
  def loss_scale(self) -> loss_scale_lib.LossScale | None:
    """The `mplso.LossScale` that `compile` wraps the optimizer with, or None."""
    return self._loss_scale

  def get_config(self):
    config = super().get_config()
    if not self._using_default_loss_scale:
      config["loss_scale"] = (
          None if self._loss_scale is None
          else loss_scale_lib.serialize(self._loss_scale))
    return config

  @classmethod
  def from_config(cls, config, custom_objects=None):
    """TF 2.3's `from_config`; see `Policy.from_config`."""
    if not isinstance(config, Mapping):
      raise TypeError(
          "A Policy config must be a dict, as get_config() returns it. "
          f"Received: config={config!r}.")
    unknown = [key for key in config if key not in _CONFIG_KEYS]
    if unknown:
      raise TypeError(
          f"Policy() got an unexpected keyword argument {unknown[0]!r}: a "
          "Policy config has the keys 'name' and, optionally, 'loss_scale'. "
          f"Received: config={config!r}.")
    if "name" not in config:
      raise TypeError(
          "Policy() missing 1 required positional argument: 'name': a "
          "Policy config needs the policy's name, e.g. {'name': "
          f"'mixed_float16'}}. Received: config={config!r}.")
    config = dict(config)
    # As TF 2.3: only a serialized loss scale is deserialized; anything else
    # goes to the constructor, which takes what `loss_scale.get` takes.
    if isinstance(config.get("loss_scale"), Mapping):
      config["loss_scale"] = _deserialize_loss_scale(config["loss_scale"],
                                                     custom_objects)
    return cls(**config)

  def __repr__(self):
    return f'<Policy "{self.name}", loss_scale={self._loss_scale}>'


@functools.cache
def _family_policy_class(base: type) -> type:
  """Returns the `Policy` subclass of `base`, registered for `load_model`."""
  cls = type("Policy", (_LossScaleMixin, base),
             {"__module__": __name__, "__doc__": Policy.__doc__})
  return tf.keras.utils.register_keras_serializable(
      package="mplso", name="Policy")(cls)


def policy_class() -> type:
  """Returns the `Policy` class of the Keras `tf.keras` is."""
  return _family_policy_class(tf.keras.mixed_precision.Policy)


class Policy(metaclass=dispatch.Dispatch):
  """TF 2.1-2.3's `tf.keras.mixed_precision.experimental.Policy`.

  `Policy(name, loss_scale='auto')` is a policy of the Keras `tf.keras` is
  (a `keras.DTypePolicy` on Keras 3, a `tf_keras.mixed_precision.Policy`
  with `TF_USE_LEGACY_KERAS=1`), so layers and `set_global_policy` take it,
  plus TF 2.3's `loss_scale`:

  - `'auto'`: a dynamic loss scale for `'mixed_float16'`, None otherwise;
  - `'dynamic'`, a number, or an `mplso.LossScale` (anything
    `mplso.loss_scale.get` accepts), or None.

  Under `mplso.compat.install()`, `model.compile(optimizer)` of a model whose
  policy has a loss scale wraps the optimizer in
  `mplso.keras.LossScaleOptimizer` with that loss scale.

  >>> policy = Policy("mixed_float16")
  >>> policy.loss_scale.initial_loss_scale
  32768.0
  >>> print(Policy("float32").loss_scale)
  None

  `Policy.from_config(config, custom_objects=None)` is the inverse of
  `get_config()`, which returns `{'name': ...}` plus, when the loss scale was
  not `'auto'`, `'loss_scale'`: the serialized loss scale, or None.

  >>> Policy.from_config({"name": "mixed_float16", "loss_scale": {
  ...     "class_name": "FixedLossScale", "config": {"loss_scale_value": 8}}})
  <Policy "mixed_float16", loss_scale=FixedLossScale(8.0)>

  Compatibility: TF 2.3's class, with its `get_config`, `from_config` and
  `repr`, and its errors (`TypeError` for a name that is not a string or a
  config key other than `name` and `loss_scale`, `ValueError` for a bad
  name or loss scale), in TF's words followed by the value received.
  Deliberate differences: a loss scale config with bad arguments raises
  `ValueError` (TF: `TypeError`), as `mplso.loss_scale.deserialize` does;
  a `'mixed_float16'` model's optimizer is still wrapped when the policy's
  loss scale is None, as today's `compile` does (under `install()`, in
  `mplso.keras.LossScaleOptimizer`; TF 2.3 then left it unwrapped).
  """

  @staticmethod
  def _build(name, loss_scale=AUTO):
    """`Policy(...)`: a policy of the Keras `tf.keras` is."""
    return policy_class()(name, loss_scale=loss_scale)

  @staticmethod
  def _family_for(*args, **kwargs) -> type:
    """The class a user's subclass combines with: `tf.keras`'s `Policy`."""
    del args, kwargs  # One family per process.
    return policy_class()

  @staticmethod
  def _family_classes() -> tuple[type, ...]:
    return (_LossScaleMixin,)

  @classmethod
  def from_config(cls, config, custom_objects=None):
    """Returns the policy that `config`, from `get_config()`, describes.

    Args:
      config: `{'name': ...}`, with `'loss_scale'` optionally: a serialized
        loss scale (`{'class_name': ..., 'config': ...}`) or anything the
        constructor's `loss_scale` takes (None included).
      custom_objects: optional mapping of class names to custom
        `mplso.LossScale` subclasses (Keras's custom-object scope is also
        searched, as in TF 2.3).

    Raises:
      TypeError: if `config` is not a dict, lacks `'name'`, has another key,
        or its name is not a string (TF 2.3's `TypeError`s).
      ValueError: for an unknown policy name or a bad loss scale.
    """
    # Before the family's in a subclass's MRO: the family's, called for the
    # class `cls` builds.
    return _LossScaleMixin.from_config.__func__(
        cls._dispatch_class(policy_class()), config,
        custom_objects=custom_objects)


def set_policy(policy) -> None:
  """TF 2.1-2.3's `set_policy`: a string becomes `Policy(string)`, then set.

  Args:
    policy: a `Policy`, any policy of the Keras `tf.keras` is, a policy name
      (with TF 2.3's default loss scale: dynamic for `'mixed_float16'`), or
      None for the default.
  """
  if isinstance(policy, str):
    policy = Policy(policy)
  tf.keras.mixed_precision.set_global_policy(policy)


def global_policy():
  """TF 2.1-2.3's `global_policy`: the global policy of `tf.keras`."""
  return tf.keras.mixed_precision.global_policy()


def _optimizer_for(model, optimizer):
  """Returns `optimizer` wrapped as TF 2.3's `compile` did for `model`'s policy."""
  policy = getattr(model, "dtype_policy", None)
  if not isinstance(policy, Policy) or policy.loss_scale is None:
    return optimizer
  optimizer = tf.keras.optimizers.get(optimizer)
  if factory.scales_loss(optimizer):
    return optimizer
  return factory.LossScaleOptimizer(optimizer, policy.loss_scale)


def compile_patches() -> list[tuple[type, str, object]]:
  """Returns `(class, "compile", policy-aware compile)` for `tf.keras.Model`."""
  policy_class()  # Registered, so that load_model finds saved policies.
  # Patched where it is defined (Keras 3: its Trainer base): Keras 3 skips
  # `compile` on load when a model's `compile` is not the Trainer's own.
  owner = next(cls for cls in tf.keras.Model.__mro__ if "compile" in vars(cls))
  original = vars(owner)["compile"]

  @functools.wraps(original)
  def compile(self, *args, **kwargs):  # pylint: disable=redefined-builtin
    if "optimizer" in kwargs:
      kwargs["optimizer"] = _optimizer_for(self, kwargs["optimizer"])
    elif args:
      args = (_optimizer_for(self, args[0]), *args[1:])
    else:
      kwargs["optimizer"] = _optimizer_for(self, "rmsprop")
    return original(self, *args, **kwargs)

  return [(owner, "compile", compile)]


def policy_base_class() -> type:
  """Returns the class every `Policy` instance is an instance of."""
  return _LossScaleMixin
