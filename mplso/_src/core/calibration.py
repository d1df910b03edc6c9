"""The calibrated initial scale: a power of two from one step's gradients.

A dynamic loss scale built with `"calibrate"` as its initial scale runs its
first step at a placeholder scale (1, within the scale's bounds), at which
scaled gradients overflow float16 only where the unscaled ones do. Until it
has calibrated, its good-step count is -1 (`UNCALIBRATED`): the count is one
of the scale's checkpointed variables, so a restored scale never calibrates
again, and the checkpoint keys stay TF's. When that first step's gradients
are finite, the step is applied as any finite step, and the update rule's
next scale is replaced by

    max_grad = max |g| over every gradient, on every replica
    scale = 2**(15 - floor(log2(max_grad)) - MARGIN)   # clamped to bounds

which puts the largest scaled gradient in [2**(15 - MARGIN),
2**(16 - MARGIN)): with MARGIN = 2, in [8192, 16384), 4 to 8 times below
float16's largest value (65504, just under 2**16). All gradients zero tell
nothing: then the scale becomes TF's default, 2**15 (clamped).

What it cannot see: values inside the backward pass (the gradients with
respect to activations) can be larger than every variable's gradient and
overflow first; the margin is room for them, and an overflow still halves
the scale as usual. The count becomes 0 whether or not the step was finite
(the update rule counts on from -1), so after a step that overflowed even at
the placeholder, ordinary halving goes on.

All of it is in the graph: a `tf.cond` on the count, so that later steps
read no gradient again (the cost of a calibrated scale after its first step
is that condition; without a strategy its If op is not lowered, so that it
is one op per step, not one Switch per gradient).
"""

from __future__ import annotations

import tensorflow as tf

from mplso._src.core import distribution
from mplso._src.core.scaling import Grads

# What a dynamic loss scale's initial scale may be instead of a number.
CALIBRATE = "calibrate"

# The good-step count of a loss scale that has not calibrated yet.
UNCALIBRATED = -1

# How many powers of two below float16's largest value the largest scaled
# gradient of the calibrating step lands.
MARGIN = 2

# TF's default initial scale, for a step whose gradients are all zero (they
# tell nothing of their magnitude).
_NO_MAGNITUDE_SCALE = 2.**15

# float32's exponent range for normal numbers.
_MIN_EXPONENT, _MAX_EXPONENT = -126, 127


def is_calibrate(value) -> bool:
  """Whether `value` asks for a calibrated initial scale."""
  return isinstance(value, str) and value == CALIBRATE


def refuse_string(name: str, value: str, accepted: str) -> None:
  """Raises the error for a string other than `"calibrate"`.

  Raises:
    ValueError: naming `name`, `value` and `accepted`, always.
  """
  raise ValueError(
      f"`{name}` must be {accepted} or the string {CALIBRATE!r} (a "
      f"calibrated initial scale). Received: {name}={value!r}.")


def placeholder(min_scale: float = 1., max_scale: float | None = None
                ) -> float:
  """The scale of the calibrating step: 1, clamped to the scale's bounds."""
  scale = max(1., min_scale)
  return scale if max_scale is None else min(scale, max_scale)


def count_once(good_steps: tf.Variable, calibrate: bool):
  """The good-step count, read once when the scale calibrates.

  The update rule and `next_scale` must see the same value: in a TF1 graph
  a second read could run after the count's assignment. Without
  calibration the variable itself is returned, so that the rule reads it
  where it always has and the step's graph stays what it was.
  """
  return tf.convert_to_tensor(good_steps) if calibrate else good_steps


def _power_of_two(exponent: tf.Tensor) -> tf.Tensor:
  """2**exponent as float32, exactly (int32 `exponent` in [-126, 127])."""
  return tf.bitcast((exponent + 127) * (1 << 23), tf.float32)


def scale_for(max_grad: tf.Tensor, min_scale: float = 1.,
              max_scale: float | None = None) -> tf.Tensor:
  """The calibrated scale for gradients whose largest magnitude is `max_grad`.

  >>> float(scale_for(tf.constant(3.)))   # 3 * 4096 = 12288, in [2**13, 2**14)
  4096.0
  >>> float(scale_for(tf.constant(0.)))   # nothing measured: TF's default
  32768.0

  Args:
    max_grad: scalar float32 >= 0, the unscaled gradients' largest magnitude.
    min_scale: the scale's floor.
    max_scale: the scale's ceiling; None for none.

  Returns:
    A scalar float32 power of two (unless a bound is not one).
  """
  max_grad = tf.convert_to_tensor(max_grad, tf.float32)
  # floor(log2(x)), exactly, from the float32 exponent bits (-127 for 0 and
  # subnormals, which the clamp below turns into a large scale).
  exponent = tf.bitwise.right_shift(
      tf.bitcast(max_grad, tf.int32), 23) % 256 - 127
  wanted = tf.clip_by_value(15 - exponent - MARGIN, _MIN_EXPONENT,
                            _MAX_EXPONENT)
  scale = tf.where(max_grad > 0., _power_of_two(wanted),
                   tf.constant(_NO_MAGNITUDE_SCALE, tf.float32))
  scale = tf.maximum(scale, min_scale)
  if max_scale is not None:
    scale = tf.minimum(scale, max_scale)
  return scale


def next_scale(next_rule_scale: tf.Tensor, good_steps: tf.Tensor,
               grads_finite: tf.Tensor, grads: Grads, *,
               min_scale: float = 1., max_scale: float | None = None
               ) -> tf.Tensor:
  """The update rule's next scale, calibrated on the step that calibrates.

  Args:
    next_rule_scale: the scale the update rule gives after this step.
    good_steps: the good-step count before this step (`UNCALIBRATED` on the
      step that calibrates).
    grads_finite: whether every gradient is finite (on every replica).
    grads: the step's unscaled gradients (per replica in cross-replica
      context).
    min_scale: the scale's floor.
    max_scale: the scale's ceiling; None for none.

  Returns:
    Scalar float32: `scale_for(max |grads|)` on a finite step that
    calibrates, else `next_rule_scale`.
  """
  good_steps = tf.convert_to_tensor(good_steps)
  calibrating = tf.less(good_steps, tf.zeros_like(good_steps))
  grads = list(grads)

  def calibrated():
    return scale_for(distribution.max_magnitude(grads), min_scale, max_scale)

  def kept():
    return tf.convert_to_tensor(next_rule_scale, tf.float32)

  # Read at every step, taken once: a call, not a Switch per gradient.
  return distribution.rare_branch_cond(
      tf.logical_and(calibrating, grads_finite), calibrated, kept)
