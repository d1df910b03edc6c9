"""TF 1.x contrib's LossScaleManagers, as LossScales every mplso optimizer accepts."""

from __future__ import annotations

import abc
from typing import Any

import tensorflow as tf

from mplso._src.core import calibration
from mplso._src.core import distribution
from mplso._src.core import tf_seams
from mplso._src.core import update_rule
from mplso._src.loss_scales import loss_scale as loss_scale_lib
from mplso._src.loss_scales.arguments import check_number


@tf_seams.not_converted
class LossScaleManager(loss_scale_lib.LossScale):
  """Abstract base of the TF 1.x loss-scale managers.

  Subclasses implement `get_loss_scale()` and `update_loss_scale(finite_grads)`
  as in TF 1.x. A manager is also an `mplso.LossScale`, so
  `mplso.MixedPrecisionLossScaleOptimizer` accepts it as well.

  Compatibility: mirrors `tf.contrib.mixed_precision.LossScaleManager`.
  """

  @abc.abstractmethod
  def get_loss_scale(self) -> tf.Tensor:
    """Returns the loss scale as a scalar float32 tensor."""

  @abc.abstractmethod
  def update_loss_scale(self, finite_grads: tf.Tensor) -> tf.Operation | None:
    """Updates the loss scale from whether this step's gradients are finite.

    Args:
      finite_grads: scalar bool tensor, True when all gradients are finite.

    Returns:
      The op that updates the loss scale; None in eager mode.
    """

  def __call__(self) -> tf.Tensor:
    return tf.convert_to_tensor(self.get_loss_scale())

  def update(self, grads):
    grads = loss_scale_lib.flat_grads(grads)
    return self.update_from_flag(grads, distribution.grads_finite(grads))

  def update_from_flag(self, grads, grads_finite):
    del grads  # Only their finiteness matters.
    return self.update_loss_scale(grads_finite), grads_finite

  def get_config(self) -> dict[str, Any]:
    raise NotImplementedError(
        f"{type(self).__name__} does not define get_config(); define it to "
        "serialize this manager.")


@tf_seams.not_converted
class FixedLossScaleManager(LossScaleManager):
  """A loss-scale manager whose scale never changes.

  Compatibility: mirrors `tf.contrib.mixed_precision.FixedLossScaleManager`,
  with TF's error "loss scale must be at least 1." as the first clause of
  ours. Like TF it accepts Python and NumPy numbers; unlike TF it refuses
  NaN, infinity, bools and values beyond float32's range (about 3.4e38),
  which TF turned into a scale of NaN or inf.
  """

  def __init__(self, loss_scale: int | float):
    """Creates the manager.

    Args:
      loss_scale: a Python or NumPy int or float >= 1, finite in float32.

    Raises:
      ValueError: if `loss_scale` is not a real number, is < 1, or is not
        finite in float32.
    """
    super().__init__()
    self._loss_scale = check_number(
        "loss_scale", loss_scale, minimum=1, float32=True,
        range_clause="loss scale must be at least 1.")

  def get_loss_scale(self) -> tf.Tensor:
    return tf.constant(self._loss_scale, tf.float32)

  def update_loss_scale(self, finite_grads):
    del finite_grads
    return tf.no_op()

  def __repr__(self) -> str:
    return f"FixedLossScaleManager({self._loss_scale})"

  def get_config(self) -> dict[str, Any]:
    return {"loss_scale": self._loss_scale}


@tf_seams.not_converted
class ExponentialUpdateLossScaleManager(LossScaleManager):
  """A loss-scale manager that grows and shrinks the scale exponentially.

  After `incr_every_n_steps` consecutive finite steps the scale is multiplied
  by `incr_ratio` (only if the product is finite); after
  `decr_every_n_nan_or_inf` non-finite steps (not necessarily consecutive:
  finite steps in between do not reset that count) it is multiplied by
  `decr_ratio`, never below 1. Any non-finite step resets the finite-step
  count; any change of the scale resets both counts.

  Compatibility: mirrors
  `tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager`; its
  variables are named `loss_scale` (float32), `good_steps` and `bad_steps`
  (int32), as in TF 1.x. It accepts what TF 1.x accepted (Python or NumPy
  numbers, integral floats such as `incr_every_n_steps=2.` for the step
  counts) but, unlike TF 1.x, validates them: a fractional step count, a
  ratio on the wrong side of 1, NaN, infinity or a scale beyond float32's
  range raise `ValueError`.

  mplso's opt-in extension: `init_loss_scale="calibrate"` starts at 1 and
  lets the first step's gradients pick the scale, as
  `mplso.DynamicLossScale(initial_loss_scale="calibrate")` does; this needs
  the gradients, so it happens in an mplso optimizer's step or in
  `update(grads)`, not in `update_loss_scale(finite_grads)`, which only
  counts the step (from -1) at the scale it has.
  """

  def __init__(self, init_loss_scale: int | float, incr_every_n_steps: int,
               decr_every_n_nan_or_inf: int = 2, incr_ratio: int | float = 2,
               decr_ratio: float = 0.8):
    """Creates the manager.

    Args:
      init_loss_scale: a number >= 1, finite in float32, the first scale;
        or `"calibrate"` (see above).
      incr_every_n_steps: an integer >= 1 (`2.` counts as 2), finite steps
        in a row before the scale grows.
      decr_every_n_nan_or_inf: an integer >= 1, non-finite steps before the
        scale shrinks.
      incr_ratio: a number >= 1, finite in float32, the growth factor.
      decr_ratio: a number in (0, 1], the shrink factor.

    Numbers are Python or NumPy ints or floats.

    Raises:
      ValueError: if an argument is out of range or of the wrong type.
    """
    super().__init__()
    self._calibrate = calibration.is_calibrate(init_loss_scale)
    if isinstance(init_loss_scale, str) and not self._calibrate:
      calibration.refuse_string("init_loss_scale", init_loss_scale,
                                "a number >= 1")
    self._config = {
        "init_loss_scale": (
            calibration.CALIBRATE if self._calibrate else check_number(
                "init_loss_scale", init_loss_scale, minimum=1,
                float32=True)),
        "incr_every_n_steps": check_number(
            "incr_every_n_steps", incr_every_n_steps, minimum=1,
            integer=True),
        "decr_every_n_nan_or_inf": check_number(
            "decr_every_n_nan_or_inf", decr_every_n_nan_or_inf, minimum=1,
            integer=True),
        "incr_ratio": check_number(
            "incr_ratio", incr_ratio, minimum=1, float32=True),
        "decr_ratio": check_number(
            "decr_ratio", decr_ratio, minimum=0, inclusive=False, maximum=1),
    }
    self._loss_scale = self._add_weight(
        "loss_scale", (calibration.placeholder() if self._calibrate
                       else self._config["init_loss_scale"]), tf.float32)
    self._num_good_steps = self._add_weight(
        "good_steps", calibration.UNCALIBRATED if self._calibrate else 0,
        tf.int32)
    self._num_bad_steps = self._add_weight("bad_steps", 0, tf.int32)

  def get_loss_scale(self) -> tf.Variable:
    return self._loss_scale

  def update_loss_scale(self, finite_grads):
    return self._update(finite_grads, grads=None)

  def update_from_flag(self, grads, grads_finite):
    if not self._calibrate:
      return super().update_from_flag(grads, grads_finite)
    return self._update(grads_finite, grads), grads_finite

  def _update(self, finite_grads, grads):
    """The op assigning the next state; calibrates only given `grads`."""
    decr_ratio = tf.constant(self._config["decr_ratio"], tf.float32)
    counted = calibration.count_once(self._num_good_steps, self._calibrate)
    scale, good_steps, bad_steps = update_rule.next_state(
        self._loss_scale, counted, finite_grads,
        increment_period=self._config["incr_every_n_steps"],
        grow_ratio=self._config["incr_ratio"],
        shrink=lambda s: s * decr_ratio,
        bad_steps=self._num_bad_steps,
        decrement_period=self._config["decr_every_n_nan_or_inf"])
    if self._calibrate and grads is not None:
      scale = calibration.next_scale(scale, counted, finite_grads, grads)
    return tf.group(
        self._loss_scale.assign(scale, read_value=False),
        self._num_good_steps.assign(good_steps, read_value=False),
        self._num_bad_steps.assign(bad_steps, read_value=False))

  def __repr__(self) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in self._config.items())
    return f"ExponentialUpdateLossScaleManager({args})"

  def get_config(self) -> dict[str, Any]:
    return dict(self._config)
