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

import functools
import logging

import tensorflow as tf

from mplso._src import loss_scale as loss_scale_lib
from mplso._src.keras_wrappers import factory

# TF 2.3's default: a dynamic loss scale for 'mixed_float16', else none.
AUTO = "auto"


class _LossScaleMixin:
  """TF 2.3's `loss_scale` on top of a Keras policy class."""

  def __init__(self, name, loss_scale=AUTO):
    super().__init__(name)
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
    del custom_objects  # TF 2.3's signature; loss scales need none.
    config = dict(config)
    if config.get("loss_scale") is not None:
      config["loss_scale"] = loss_scale_lib.deserialize(config["loss_scale"])
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


class _PolicyDispatch(type):
  """Builds the policy of the Keras `tf.keras` is; isinstance sees them all."""

  def __call__(cls, name, loss_scale=AUTO):
    return policy_class()(name, loss_scale=loss_scale)

  def __instancecheck__(cls, instance):
    return isinstance(instance, _LossScaleMixin)

  def __subclasscheck__(cls, subclass):
    return cls is subclass or issubclass(subclass, _LossScaleMixin)


class Policy(metaclass=_PolicyDispatch):
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

  Compatibility: TF 2.3's class, with its `get_config` (the loss scale only
  when not `'auto'`) and `repr`. Keras 3 still wraps a `'mixed_float16'`
  model's optimizer in its own `LossScaleOptimizer` when the policy's loss
  scale is None (TF 2.3 then left it unwrapped).
  """


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
  if any(family.scales_loss(optimizer) for family in factory.families()):
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
