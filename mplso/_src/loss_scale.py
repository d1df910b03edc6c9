"""The LossScale classes and their lookup, serialisation and deserialisation."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from mplso._src.arguments import check_number
from mplso._src.core import distribution
from mplso._src.core import tf_seams
from mplso._src.core import update_rule
from mplso._src.core.scaling import Grads

_ACCEPTED = ("None, an mplso.LossScale, a Python int or float >= 1, "
             "or the string 'dynamic'")


class LossScale(tf_seams.Trackable, metaclass=abc.ABCMeta):
  """Base class of the loss scales that mplso's optimizers accept.

  Calling an instance returns the current scale as a scalar float32 tensor;
  `update(grads)` adjusts it from one step's gradients. Subclasses create
  their state with `_add_weight`, which also makes it checkpointable under the
  weight's name.

  Compatibility: mirrors `tf.compat.v1.mixed_precision.LossScale`.
  """

  def __init__(self):
    self._weights: dict[str, tf.Variable] = {}

  @abc.abstractmethod
  def __call__(self) -> tf.Tensor:
    """Returns the current loss scale as a scalar float32 tensor."""

  @abc.abstractmethod
  def update(self, grads) -> tuple[tf.Operation | None, tf.Tensor | bool]:
    """Updates the loss scale from one step's unscaled gradients.

    Args:
      grads: a nest of unscaled gradients; `None` entries are ignored and
        `tf.IndexedSlices` are accepted. Under a `tf.distribute` strategy this
        is called in cross-replica context.

    Returns:
      `(update_op, should_apply_gradients)`. In eager mode the update has
      already happened and `update_op` may be None; in graph mode it is the op
      that performs the update. `should_apply_gradients` is a bool or a scalar
      bool tensor: False means this step's gradients must not be applied.
    """

  def update_from_flag(
      self, grads: Grads, grads_finite: tf.Tensor
  ) -> tuple[tf.Operation | None, tf.Tensor]:
    """Like `update(grads)`, given the all-finite flag already computed.

    Optimizers call this so the finite check runs once per step. The returned
    `should_apply` is False whenever `grads_finite` is False, whatever the
    loss scale. Subclasses that do not override it get `update(grads)` with
    its verdict combined with `grads_finite`.

    Args:
      grads: the gradients passed to `update`.
      grads_finite: scalar bool tensor, True when every gradient is finite
        (on every replica).

    Returns:
      `(update_op, should_apply)`.
    """
    update_op, should_apply = self.update(grads)
    return update_op, tf.logical_and(should_apply, grads_finite)

  @abc.abstractmethod
  def get_config(self) -> dict[str, Any]:
    """Returns the constructor arguments of this loss scale."""

  @classmethod
  def from_config(cls, config: Mapping[str, Any]) -> "LossScale":
    """Creates a loss scale from the output of `get_config`.

    Raises:
      ValueError: if `config` is not a dict of this class's constructor
        arguments, or holds a bad value.
    """
    if not isinstance(config, Mapping):
      raise ValueError(
          f"A {cls.__name__} config must be a dict of its constructor "
          f"arguments. Received: config={config!r}.")
    try:
      return cls(**config)
    except TypeError as e:  # A missing or unknown key.
      raise ValueError(
          f"Invalid config for {cls.__name__}: {dict(config)!r} ({e}).") from e

  @property
  def variables(self) -> tuple[tf.Variable, ...]:
    """The variables holding this loss scale's state, in creation order."""
    return tuple(self._weights.values())

  def _add_weight(self, name: str, initial_value, dtype: tf.DType) -> tf.Variable:
    """Creates a non-trainable state variable, checkpointed as `name`."""
    if name in self._weights:
      raise RuntimeError(f"Duplicate loss scale weight {name!r}.")
    distribution.check_strategy_supported(
        f"Creating the loss scale variable {name!r}")
    variable = tf.compat.v1.Variable(
        initial_value=initial_value,
        name=name,
        dtype=dtype,
        trainable=False,
        use_resource=True,
        synchronization=tf.VariableSynchronization.AUTO,
        aggregation=tf.VariableAggregation.NONE,
    )
    self._weights[name] = variable
    self._track_trackable(variable, name=name)
    return variable


class FixedLossScale(LossScale):
  """A loss scale that never changes.

  Compatibility: mirrors `tf.compat.v1.mixed_precision.FixedLossScale`; it has
  no variables, so nothing of it is checkpointed. Unlike TF's class it refuses
  `bool`, NaN and infinity as values.
  """

  def __init__(self, loss_scale_value: int | float):
    """Creates the fixed loss scale.

    Args:
      loss_scale_value: a Python int or float >= 1.

    Raises:
      ValueError: if `loss_scale_value` is not a finite Python int or float
        >= 1.
    """
    super().__init__()
    check_number("loss_scale_value", loss_scale_value, minimum=1)
    self._loss_scale_value = float(loss_scale_value)

  @property
  def loss_scale_value(self) -> float:
    return self._loss_scale_value

  def __call__(self) -> tf.Tensor:
    return tf.constant(self._loss_scale_value, tf.float32)

  def update(self, grads):
    del grads  # A fixed scale has nothing to learn from them.
    return tf.no_op(), True

  def update_from_flag(self, grads, grads_finite):
    del grads
    return None, grads_finite

  def __repr__(self) -> str:
    return f"FixedLossScale({self._loss_scale_value})"

  def get_config(self) -> dict[str, Any]:
    return {"loss_scale_value": self._loss_scale_value}


class DynamicLossScale(LossScale):
  """A loss scale that grows after a run of finite steps and shrinks on overflow.

  The scale starts at `initial_loss_scale`. After `increment_period`
  consecutive steps with finite gradients it is multiplied by `multiplier`
  (only if the product is finite) and the count restarts; a step with a NaN or
  Inf gradient divides it by `multiplier`, never below 1, and restarts the
  count.

  >>> loss_scale = DynamicLossScale(initial_loss_scale=4., increment_period=1)
  >>> _ = loss_scale.update([tf.constant(1.)])
  >>> float(loss_scale())
  8.0

  Compatibility: mirrors `tf.compat.v1.mixed_precision.DynamicLossScale`. Its
  variables are checkpointed as `current_loss_scale` (float32) and
  `good_steps` (int64), TF's names, so checkpoints move between the two
  classes. Unlike TF's class the arguments are validated.
  """

  def __init__(self, initial_loss_scale: int | float = 2**15,
               increment_period: int = 2000, multiplier: int | float = 2.0):
    """Creates the dynamic loss scale.

    Args:
      initial_loss_scale: a Python int or float >= 1, the first scale. Start
        high: a scale that is too high falls quickly, one too low rises
        slowly. The default, 2**15, is about half of float16's largest value.
      increment_period: a Python int >= 1, the finite steps between growths.
      multiplier: a Python int or float > 1, the growth and shrink factor.

    Raises:
      ValueError: if an argument is out of range or of the wrong type.
    """
    super().__init__()
    check_number("initial_loss_scale", initial_loss_scale, minimum=1)
    check_number("increment_period", increment_period, minimum=1,
                 integer=True)
    check_number("multiplier", multiplier, minimum=1, inclusive=False)
    self._initial_loss_scale = float(initial_loss_scale)
    self._increment_period = int(increment_period)
    self._multiplier = float(multiplier)
    self._current_loss_scale = self._add_weight(
        "current_loss_scale", self._initial_loss_scale, tf.float32)
    self._good_steps = self._add_weight("good_steps", 0, tf.int64)

  @property
  def initial_loss_scale(self) -> float:
    return self._initial_loss_scale

  @property
  def increment_period(self) -> int:
    return self._increment_period

  @property
  def multiplier(self) -> float:
    return self._multiplier

  def __call__(self) -> tf.Tensor:
    return tf.convert_to_tensor(self._current_loss_scale)

  def update(self, grads):
    grads = tf.nest.flatten(grads)
    return self.update_from_flag(grads, distribution.grads_finite(grads))

  def update_from_flag(self, grads, grads_finite):
    del grads  # Only their finiteness matters.
    multiplier = tf.constant(self._multiplier, tf.float32)
    new_scale, new_good_steps, _ = update_rule.next_state(
        self._current_loss_scale, self._good_steps, grads_finite,
        increment_period=self._increment_period, grow_ratio=self._multiplier,
        shrink=lambda scale: scale / multiplier)
    update_op = tf.group(
        self._current_loss_scale.assign(new_scale, read_value=False),
        self._good_steps.assign(new_good_steps, read_value=False))
    return update_op, grads_finite

  def __repr__(self) -> str:
    args = (f"initial_loss_scale={self._initial_loss_scale}, "
            f"increment_period={self._increment_period}, "
            f"multiplier={self._multiplier}")
    if tf_seams.executing_eagerly():
      return (f"DynamicLossScale(current_loss_scale="
              f"{self._current_loss_scale.numpy()}, "
              f"num_good_steps={self._good_steps.numpy()}, {args})")
    return f"DynamicLossScale({args})"

  def get_config(self) -> dict[str, Any]:
    return {
        "initial_loss_scale": self._initial_loss_scale,
        "increment_period": self._increment_period,
        "multiplier": self._multiplier,
    }


# The classes `deserialize` knows by name.
_BY_NAME = {cls.__name__: cls for cls in (FixedLossScale, DynamicLossScale)}


def get(identifier) -> LossScale | None:
  """Returns the loss scale that `identifier` names.

  Args:
    identifier: None (returns None), a `LossScale` (returned as is), a
      Python int or float >= 1 (a `FixedLossScale`), or the string
      `"dynamic"` (a `DynamicLossScale()` with its defaults).

  Raises:
    ValueError: for anything else, naming the value.
  """
  if identifier is None or isinstance(identifier, LossScale):
    return identifier
  if isinstance(identifier, str) and identifier == "dynamic":
    return DynamicLossScale()
  if isinstance(identifier, (int, float)) and not isinstance(identifier, bool):
    return FixedLossScale(identifier)  # Validates the value.
  raise ValueError(
      f"Could not interpret loss scale identifier: {identifier!r}. "
      f"Accepted: {_ACCEPTED}.")


def serialize(loss_scale: LossScale) -> dict[str, Any]:
  """Returns `{"class_name": ..., "config": ...}` for `loss_scale`.

  Raises:
    ValueError: if `loss_scale` is not a `LossScale`.
  """
  if not isinstance(loss_scale, LossScale):
    raise ValueError(
        f"`loss_scale` must be an mplso.LossScale. Received: "
        f"loss_scale={loss_scale!r}.")
  return {"class_name": type(loss_scale).__name__,
          "config": loss_scale.get_config()}


def deserialize(config: Mapping[str, Any],
                custom_objects: Mapping[str, type] | None = None) -> LossScale:
  """Creates a loss scale from the output of `serialize`.

  Args:
    config: a dict with `"class_name"` (`"FixedLossScale"`,
      `"DynamicLossScale"`, or a key of `custom_objects`) and `"config"`.
    custom_objects: optional mapping of further class names to `LossScale`
      subclasses.

  Raises:
    ValueError: if `config` is malformed or names an unknown class.
  """
  if (not isinstance(config, Mapping) or "class_name" not in config or
      not isinstance(config.get("config", {}), Mapping)):
    raise ValueError(
        "A loss scale config must be a dict with keys 'class_name' and "
        f"'config'. Received: config={config!r}.")
  known = {**_BY_NAME, **(custom_objects or {})}
  cls = known.get(config["class_name"])
  if cls is None:
    raise ValueError(
        f"Unknown loss scale class_name {config['class_name']!r}. Accepted: "
        f"{sorted(known)} (pass others through custom_objects).")
  try:
    return cls.from_config(dict(config.get("config", {})))
  except TypeError as e:
    raise ValueError(
        f"Invalid config for {config['class_name']}: "
        f"{dict(config.get('config', {}))!r} ({e}).") from e
