"""The LossScale classes and their lookup, serialisation and deserialisation."""

from __future__ import annotations

import abc
from collections.abc import Mapping
import inspect
import numbers
from typing import Any

import numpy as np
import tensorflow as tf

from mplso._src.core import calibration
from mplso._src.core import distribution
from mplso._src.core import tf_seams
from mplso._src.core import update_rule
from mplso._src.core.scaling import Grads
from mplso._src.diagnostics import log_state
from mplso._src.diagnostics import underflow_meter
from mplso._src.loss_scales.arguments import check_number

# What a loss-scaled optimizer's `loss_scale` argument accepts; `get`
# accepts None too.
ACCEPTED = ("an mplso.LossScale, a Python or NumPy int or float >= 1, or the "
            "string 'dynamic'")

# `DynamicLossScale`'s default `initial_loss_scale`, TF's. The constructor
# tells the default from a value the user wrote by identity: ints above 256
# are separate objects, so only this very object is the default.
_DEFAULT_INITIAL_LOSS_SCALE = 2**15


def flat_grads(grads) -> list:
  """Flattens a nest of gradients; Python and NumPy numbers become tensors.

  TF's `LossScale.update` accepted `update([1.0])`: its finite check
  converted each gradient. `None` and `tf.IndexedSlices` entries, tensors and
  per-replica values are kept as they are.
  """
  return [tf.convert_to_tensor(g, dtype_hint=tf.float32)
          if isinstance(g, (numbers.Real, np.ndarray, np.generic)) else g
          for g in tf.nest.flatten(grads)]


@tf_seams.not_converted
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

  # TF 2.4-2.15's Keras wrappers made `optimizer.loss_scale` the current scale
  # as a tensor, where TF 2.3's made it this object. Code of either era reads
  # it: `opt.loss_scale()`, `float(opt.loss_scale)`, `opt.loss_scale.numpy()`,
  # `tf.summary.scalar("loss_scale", opt.loss_scale)`, `loss * opt.loss_scale`
  # (the conversion is registered below the classes).

  def __float__(self) -> float:
    """Returns the current scale as a Python float (eagerly)."""
    return float(self())

  def numpy(self):
    """Returns the current scale as a NumPy float32 (eagerly)."""
    return self().numpy()

  @abc.abstractmethod
  def update(self, grads) -> tuple[tf.Operation | None, tf.Tensor | bool]:
    """Updates the loss scale from one step's unscaled gradients.

    Args:
      grads: a nest of unscaled gradients; `None` entries are ignored and
        `tf.IndexedSlices` are accepted. Under a `tf.distribute` strategy this
        is called in cross-replica context.

    Returns:
      `(update_op, should_apply_gradients)`. In eager mode the update has
      already happened and `update_op` may be None; in graph mode evaluating
      it performs the update (TF's classes return an op or a tensor there,
      and so do these). `should_apply_gradients` is a bool or a scalar bool
      tensor: False means this step's gradients must not be applied.
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
    # A subclass written for TF 1.x contrib may skip `super().__init__()`
    # (TF's LossScaleManager had none): it simply has no listed variables.
    return tuple(getattr(self, "_weights", {}).values())

  def _trackable_children(self, save_type="checkpoint", **kwargs):
    children = super()._trackable_children(save_type, **kwargs)
    if save_type == "savedmodel":
      # A saved training step records its skips there; checkpoints, which
      # TF's classes read, keep TF's keys.
      children.update(log_state.saved_variables(self))
      children.update(underflow_meter.saved_variables(self))
    return children

  def _add_weight(self, name: str, initial_value, dtype: tf.DType) -> tf.Variable:
    """Creates a non-trainable state variable, checkpointed as `name`."""
    if not hasattr(self, "_weights"):
      self._weights = {}
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


@tf_seams.not_converted
class FixedLossScale(LossScale):
  """A loss scale that never changes.

  Compatibility: mirrors `tf.compat.v1.mixed_precision.FixedLossScale`; it has
  no variables, so nothing of it is checkpointed. Its errors start with TF's
  wording ("loss_scale_value must be a Python int or float.", "... must be
  at least 1."). Deliberate differences: it also accepts NumPy scalars
  (`np.float32(8)`, which TF's refused), and it refuses `bool`, NaN,
  infinity and values beyond float32's range (about 3.4e38), which TF's
  accepted (True became a scale of 1, NaN and inf spoiled every step, and a
  value beyond float32 failed when the scale was first read).
  """

  def __init__(self, loss_scale_value: int | float):
    """Creates the fixed loss scale.

    Args:
      loss_scale_value: a Python or NumPy int or float >= 1, finite in
        float32.

    Raises:
      ValueError: if `loss_scale_value` is not a real number, is < 1, or is
        not finite in float32.
    """
    super().__init__()
    self._loss_scale_value = check_number(
        "loss_scale_value", loss_scale_value, minimum=1, float32=True,
        type_clause="loss_scale_value must be a Python int or float.",
        range_clause="loss_scale_value must be at least 1.")

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


@tf_seams.not_converted
class DynamicLossScale(LossScale):
  """A loss scale that grows after a run of finite steps and shrinks on overflow.

  The scale starts at `initial_loss_scale`. After `increment_period`
  consecutive steps with finite gradients it is multiplied by `multiplier`
  (only if the product is finite; never above `max_loss_scale`) and the count
  restarts; a step with a NaN or Inf gradient divides it by `multiplier`,
  never below `min_loss_scale`, and restarts the count. With `hysteresis=N`
  the scale shrinks only on the N-th non-finite step in a row:

      if all grads finite:
        good_steps += 1; nonfinite_steps = 0
        if good_steps == increment_period:
          scale = min(scale * multiplier, max_loss_scale)  # if finite
          good_steps = 0
      else:                                   # the step is skipped
        good_steps = 0; nonfinite_steps += 1
        if nonfinite_steps == hysteresis:
          scale = max(scale / multiplier, min_loss_scale)
          nonfinite_steps = 0

  >>> loss_scale = DynamicLossScale(initial_loss_scale=4., increment_period=1)
  >>> _ = loss_scale.update([tf.constant(1.)])
  >>> float(loss_scale())
  8.0

  Compatibility: mirrors `tf.compat.v1.mixed_precision.DynamicLossScale`.
  With the default keyword-only arguments its trajectory is TF's bit for bit
  and its variables are TF's: `current_loss_scale` (float32) and
  `good_steps` (int64), so checkpoints move between the two classes;
  `hysteresis` > 1 adds a third, `consecutive_nonfinite_steps` (int64).
  `update()` returns what TF's returns: eagerly `(None, flag)`, in a graph
  `(tensor, flag)` where evaluating the bool tensor runs the update (TF's
  value: True when the step completed an increment period). `get_config()`
  lists the keyword-only arguments only when they differ from their
  defaults, so a default config is TF's config. Arguments are accepted as
  TF accepted them (Python or NumPy numbers, `increment_period=2.`), but,
  unlike TF, they are validated: TF truncated `increment_period=2.5` to 2
  and took `initial_loss_scale=2**200` as inf; these raise `ValueError`.

  A calibrated initial scale (mplso's, opt-in): with
  `initial_loss_scale="calibrate"` the first step runs at a scale of 1
  (within `[min_loss_scale, max_loss_scale]`); if its gradients are finite
  it is applied, and the scale becomes the power of two that puts their
  largest magnitude a few powers of two below float16's largest value
  (`mplso._src.core.calibration`), clamped to the bounds. `good_steps`
  starts at -1 until then, so a restored scale never calibrates again.
  """

  def __init__(self,
               initial_loss_scale: int | float | str = (
                   _DEFAULT_INITIAL_LOSS_SCALE),
               increment_period: int = 2000, multiplier: int | float = 2.0,
               *, min_loss_scale: int | float = 1,
               max_loss_scale: int | float | None = None,
               hysteresis: int = 1, stall_limit: int | None = None):
    """Creates the dynamic loss scale.

    Args:
      initial_loss_scale: a number in [`min_loss_scale`, `max_loss_scale`],
        the first scale, or the string `"calibrate"`: the first step's
        gradients pick it (see above). Start high: a scale that is too
        high falls quickly, one too low rises slowly. The default, 2**15,
        is about half of float16's largest value; with a `min_loss_scale`
        or `max_loss_scale` that leaves it out, pass `initial_loss_scale`
        too.
      increment_period: an integer >= 1 (`2.` counts as 2), the consecutive
        finite steps between growths.
      multiplier: a number > 1, the growth and shrink factor.
      min_loss_scale: keyword-only, a number > 0 (it may be below 1, down
        to float32's smallest normal, about 1.2e-38), the floor of the
        scale. TF's floor is 1.
      max_loss_scale: keyword-only, None (no ceiling, as TF) or a number >=
        `min_loss_scale`, the ceiling a growing scale stops at.
      hysteresis: keyword-only, an integer >= 1: the scale shrinks only
        after this many consecutive non-finite steps (each one skipped); a
        finite step restarts the count. TF's is 1.
      stall_limit: keyword-only, None or an integer >= 1: after this many
        consecutive skipped steps at `min_loss_scale`, an mplso optimizer's
        step raises `tf.errors.InvalidArgumentError` instead of skipping
        forever. Stored here; the optimizers' step enforces it.

    All numbers are Python or NumPy ints or floats; the scales and the
    multiplier must be normal float32 numbers (neither inf nor 0 in float32,
    nor subnormal: TF flushes those to 0).

    Raises:
      ValueError: if an argument is of the wrong type or out of range (then
        the message names it, its value, and what is accepted), or if
        `min_loss_scale` or `max_loss_scale` leaves out the default
        `initial_loss_scale` (2**15) and no `initial_loss_scale` was passed.
    """
    super().__init__()
    self._min_loss_scale = check_number(
        "min_loss_scale", min_loss_scale, minimum=0, inclusive=False,
        float32=True)
    self._max_loss_scale = None if max_loss_scale is None else check_number(
        "max_loss_scale", max_loss_scale, minimum=self._min_loss_scale,
        float32=True)
    if initial_loss_scale is _DEFAULT_INITIAL_LOSS_SCALE:
      _check_default_initial(self._min_loss_scale, min_loss_scale,
                             self._max_loss_scale, max_loss_scale)
    self._calibrate = calibration.is_calibrate(initial_loss_scale)
    if self._calibrate:
      self._initial_loss_scale = calibration.CALIBRATE
      first_scale = calibration.placeholder(self._min_loss_scale,
                                            self._max_loss_scale)
    else:
      if isinstance(initial_loss_scale, str):
        calibration.refuse_string(
            "initial_loss_scale", initial_loss_scale,
            "a number in [min_loss_scale, max_loss_scale]")
      self._initial_loss_scale = first_scale = check_number(
          "initial_loss_scale", initial_loss_scale,
          minimum=self._min_loss_scale, maximum=self._max_loss_scale,
          float32=True)
    self._increment_period = check_number(
        "increment_period", increment_period, minimum=1, integer=True)
    self._multiplier = check_number(
        "multiplier", multiplier, minimum=1, inclusive=False, float32=True)
    self._hysteresis = check_number(
        "hysteresis", hysteresis, minimum=1, integer=True)
    self._stall_limit = None if stall_limit is None else check_number(
        "stall_limit", stall_limit, minimum=1, integer=True)
    self._current_loss_scale = self._add_weight(
        "current_loss_scale", first_scale, tf.float32)
    self._num_good_steps = self._add_weight(
        "good_steps", calibration.UNCALIBRATED if self._calibrate else 0,
        tf.int64)
    # Only hysteresis needs a third variable: the default layout stays TF's.
    self._num_nonfinite_steps = (
        self._add_weight("consecutive_nonfinite_steps", 0, tf.int64)
        if self._hysteresis > 1 else None)

  # The keyword-only extensions and their defaults, read off the signature
  # above (one table): `get_config` lists those that differ from these.
  _EXTENSION_DEFAULTS = {
      name: parameter.default
      for name, parameter in inspect.signature(__init__).parameters.items()
      if parameter.kind is inspect.Parameter.KEYWORD_ONLY}

  @property
  def initial_loss_scale(self) -> float | str:
    """The first scale, or `"calibrate"`."""
    return self._initial_loss_scale

  @property
  def increment_period(self) -> int:
    return self._increment_period

  @property
  def multiplier(self) -> float:
    return self._multiplier

  @property
  def min_loss_scale(self) -> float:
    """The floor of the scale (1 unless set)."""
    return self._min_loss_scale

  @property
  def max_loss_scale(self) -> float | None:
    """The ceiling of the scale; None for none."""
    return self._max_loss_scale

  @property
  def hysteresis(self) -> int:
    """Consecutive non-finite steps before the scale shrinks (1 unless set)."""
    return self._hysteresis

  @property
  def stall_limit(self) -> int | None:
    """Consecutive skipped steps at the minimum scale that fail the step."""
    return self._stall_limit

  def __call__(self) -> tf.Tensor:
    return tf.convert_to_tensor(self._current_loss_scale)

  def update(self, grads):
    grads = flat_grads(grads)
    grads_finite = distribution.grads_finite(grads)
    update_op, new_good_steps = self._update(grads_finite, grads)
    if tf_seams.executing_eagerly():
      return None, grads_finite
    # TF returns its `tf.cond`'s output here, a bool tensor that legacy code
    # wraps in `tf.identity`; its value is True when the period completed.
    with tf.control_dependencies([update_op]):
      completed = tf.logical_and(grads_finite, tf.equal(new_good_steps, 0))
    return completed, grads_finite

  def update_from_flag(self, grads, grads_finite):
    # Only their finiteness matters, and, to calibrate, their magnitude.
    update_op, _ = self._update(grads_finite, grads)
    return update_op, grads_finite

  def _update(self, grads_finite, grads
              ) -> tuple[tf.Operation | None, tf.Tensor]:
    """Returns the op assigning the next state, and the next good-step count."""
    multiplier = tf.constant(self._multiplier, tf.float32)
    good_steps = calibration.count_once(self._num_good_steps,
                                        self._calibrate)
    new_scale, new_good_steps, new_nonfinite_steps = update_rule.next_state(
        self._current_loss_scale, good_steps, grads_finite,
        increment_period=self._increment_period, grow_ratio=self._multiplier,
        shrink=lambda scale: scale / multiplier,
        bad_steps=self._num_nonfinite_steps,
        decrement_period=self._hysteresis,
        finite_step_resets_bad_steps=True,
        min_scale=self._min_loss_scale, max_scale=self._max_loss_scale)
    if self._calibrate:
      new_scale = calibration.next_scale(
          new_scale, good_steps, grads_finite, grads,
          min_scale=self._min_loss_scale, max_scale=self._max_loss_scale)
    assigns = [
        self._current_loss_scale.assign(new_scale, read_value=False),
        self._num_good_steps.assign(new_good_steps, read_value=False)]
    if self._num_nonfinite_steps is not None:
      assigns.append(self._num_nonfinite_steps.assign(
          new_nonfinite_steps, read_value=False))
    return tf.group(*assigns), new_good_steps

  def __repr__(self) -> str:
    args = ", ".join(f"{k}={v}" for k, v in self.get_config().items())
    if tf_seams.executing_eagerly():
      return (f"DynamicLossScale(current_loss_scale="
              f"{self._current_loss_scale.numpy()}, "
              f"num_good_steps={self._num_good_steps.numpy()}, {args})")
    return f"DynamicLossScale({args})"

  def get_config(self) -> dict[str, Any]:
    config = {
        "initial_loss_scale": self._initial_loss_scale,  # Or "calibrate".
        "increment_period": self._increment_period,
        "multiplier": self._multiplier,
    }
    # TF's keys only, unless an mplso extension is in use: a default config
    # stays loadable by TF's class.
    config.update({name: getattr(self, name)
                   for name, default in self._EXTENSION_DEFAULTS.items()
                   if getattr(self, name) != default})
    return config


def _check_default_initial(min_scale: float, given_min,
                           max_scale: float | None, given_max) -> None:
  """Refuses bounds that leave out the default `initial_loss_scale`.

  `max_loss_scale` and `min_loss_scale` are mplso's (TF's class has no
  bounds), so there is no TF behaviour to keep: rather than clamp the
  default silently, this asks for an `initial_loss_scale`, naming the bound
  the user passed.

  Args:
    min_scale: the validated `min_loss_scale`.
    given_min: `min_loss_scale` as the user passed it.
    max_scale: the validated `max_loss_scale`, or None.
    given_max: `max_loss_scale` as the user passed it.

  Raises:
    ValueError: if the default is above `max_scale` or below `min_scale`.
  """
  default = _DEFAULT_INITIAL_LOSS_SCALE
  if max_scale is not None and default > max_scale:
    name, given, relation, sign = "max_loss_scale", given_max, "exceeds", "<="
  elif default < min_scale:
    name, given, relation, sign = "min_loss_scale", given_min, "is below", ">="
  else:
    return
  raise ValueError(
      f"The default initial_loss_scale {default} (2**15) {relation} the "
      f"{name}={given!r} given; initial_loss_scale must be {sign} {name}. "
      f"Pass initial_loss_scale too, a value {sign} {name} (for example "
      f"initial_loss_scale={given!r}).")


def _to_tensor(value: LossScale, dtype=None, name=None, as_ref=False):
  del as_ref  # A loss scale converts to a value, never to a reference.
  return tf.convert_to_tensor(value(), dtype=dtype, name=name)


tf.register_tensor_conversion_function(LossScale, _to_tensor)


def _current_scale_operator(name: str):
  def operator(self, *args):
    return getattr(tf.convert_to_tensor(self()), name)(*args)

  operator.__name__ = name
  operator.__doc__ = (f"The current scale's `{name}`, as a tensor's.")
  return operator


# TF 2.4-2.15's Keras wrappers made `loss_scale` a tensor, and a wrapper
# read back from a config (TF 2.3's format) holds this object there: code
# of that era computes with it (`loss * opt.loss_scale`, `opt.loss_scale >
# 1`). Equality stays identity: loss scales are dictionary keys.
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__",
              "__rmul__", "__truediv__", "__rtruediv__", "__pow__",
              "__neg__", "__lt__", "__le__", "__gt__", "__ge__"):
  setattr(LossScale, _name, _current_scale_operator(_name))

# The classes `deserialize` knows by name.
# The built-in classes by name, as serialized configs name them.
BY_NAME = {cls.__name__: cls for cls in (FixedLossScale, DynamicLossScale)}


def get(identifier) -> LossScale | None:
  """Returns the loss scale that `identifier` names.

  Args:
    identifier: None (returns None), a `LossScale` (returned as is), a
      Python or NumPy int or float >= 1 (a `FixedLossScale`), or the string
      `"dynamic"` (a `DynamicLossScale()` with its defaults).

  Raises:
    ValueError: for anything else, starting with TF's wording ("Could not
      interpret loss scale identifier: ...", or `FixedLossScale`'s for a
      number out of range) and naming the value.
  """
  if identifier is None:
    return None
  return from_identifier(identifier, accepted=f"None, {ACCEPTED}")


def from_identifier(identifier, accepted: str = ACCEPTED) -> LossScale:
  """`get` for a value that must name a loss scale: None is refused too.

  Raises:
    ValueError: as `get`, ending with `accepted`.
  """
  if isinstance(identifier, LossScale):
    return identifier
  if isinstance(identifier, str) and identifier == "dynamic":
    return DynamicLossScale()
  if (isinstance(identifier, numbers.Real) and
      not isinstance(identifier, (bool, np.bool_))):
    return FixedLossScale(identifier)  # Validates the value.
  raise ValueError(
      f"Could not interpret loss scale identifier: {identifier} (received "
      f"identifier={identifier!r} of type {type(identifier).__name__}). "
      f"Accepted: {accepted}.")


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
  known = {**BY_NAME, **(custom_objects or {})}
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
