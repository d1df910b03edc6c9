"""The stall guard: fails a step, in the graph, once skips at the minimum scale pile up.

A loss scale that already sits at its minimum cannot make a gradient finite
by shrinking further. After `stall_limit` consecutive skipped steps at the
minimum, training is stuck (typically a NaN made in the forward pass, which
no loss scale can fix), so the step fails with `tf.errors.InvalidArgumentError`
instead of skipping silently forever. The check is a `tf.debugging.Assert`
in the branch that only a skipped step runs: no host round trip, nothing on a
finite step. Under XLA it cannot raise and is left out.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf


def check(stall: tf.Tensor, stall_limit: int, *, names: Sequence[str],
          nan: tf.Tensor, inf: tf.Tensor, scale: tf.Tensor,
          min_loss_scale: float = 1.0) -> tf.Operation | None:
  """Returns an op that raises when `stall` reaches `stall_limit`.

  Args:
    stall: float scalar, consecutive skipped steps at the minimum scale,
      this one included.
    stall_limit: the number of such steps that fails the step.
    names: the variables' names, in the order of `nan` and `inf`.
    nan: bool vector, whose gradient held a NaN.
    inf: bool vector, whose gradient held an Inf and no NaN.
    scale: the loss scale of this step.
    min_loss_scale: the loss scale's minimum.

  Returns:
    The `Assert` op (None eagerly, where it has run); running it raises
    `tf.errors.InvalidArgumentError` whose message names the variables, the
    scale, `min_loss_scale`, the count and what may cure it: with a NaN, no
    loss scale; with Infs alone, a lower `min_loss_scale` where it was
    raised above 1.
  """
  message = _message(stall, stall_limit, names, nan, inf, scale,
                     min_loss_scale)
  if tf.executing_eagerly():
    # Eagerly `Assert` would start its message with its own condition.
    if bool(stall >= stall_limit):
      raise tf.errors.InvalidArgumentError(
          None, None, message.numpy().decode("utf-8"))
    return None
  return tf.debugging.Assert(stall < stall_limit, [message], summarize=1)


_NAN_CURE = (
    "A smaller loss scale cannot help: a NaN produced in the forward pass "
    "(log of 0, 0/0, sqrt of a negative, an overflow in float16 "
    "activations) cannot be fixed by loss scaling. Compute that part of the "
    "model in float32 (e.g. dtype='float32' on the layer), or lower the "
    "learning rate if the weights diverged.")
_INF_CURE_RAISED_MINIMUM = (
    "The gradients overflowed, and a smaller loss scale could make them "
    "finite, but min_loss_scale={minimum} keeps the scale from going lower: "
    "lower min_loss_scale (1 scales nothing), or compute the overflowing "
    "part of the model in float32.")
_INF_CURE_AT_ONE = (
    "The gradients overflow without any loss scaling (min_loss_scale=1): "
    "compute the overflowing part of the model in float32 (e.g. "
    "dtype='float32' on the layer), or lower the learning rate if the "
    "weights diverged.")


def _message(stall, stall_limit, names, nan, inf, scale, min_loss_scale):
  names = tf.constant(list(names) or [""], tf.string)[:tf.size(nan)]

  def joined(mask):
    return tf.strings.reduce_join(tf.boolean_mask(names, mask),
                                  separator=", ")

  inf_cure = (_INF_CURE_RAISED_MINIMUM.format(minimum=f"{min_loss_scale:g}")
              if min_loss_scale > 1 else _INF_CURE_AT_ONE)
  return tf.strings.join([
      "mplso: ", tf.strings.as_string(tf.cast(stall, tf.int64)),
      " consecutive steps were skipped with the loss scale at its minimum (",
      tf.strings.as_string(scale, shortest=True),
      f"; min_loss_scale={min_loss_scale:g}, stall_limit={stall_limit}). "
      "Variables with NaN gradients: [", joined(nan),
      "]; with Inf gradients: [", joined(inf), "]. ",
      tf.where(tf.reduce_any(nan), _NAN_CURE, inf_cure)])
