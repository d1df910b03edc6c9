"""One optimizer step that applies only when every gradient is finite."""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from mplso._src.core import distribution
from mplso._src.core import gates
from mplso._src.core import skip_count
from mplso._src.core import tf_seams
from mplso._src.core.scaling import Grads

Action = Callable[[], object]


def _as_op(action: Action) -> Callable[[], tf.Operation]:
  """Makes `action`'s result an op, so both `tf.cond` branches match."""

  def run():
    result = action()
    if tf_seams.executing_eagerly():
      return tf.constant(True)  # Nothing to group; any matching output.
    return tf.group(result) if result is not None else tf.no_op()

  return run


def apply_or_skip(
    should_apply: tf.Tensor | bool,
    apply_fn: Action,
    update_op: tf.Operation | None = None,
    name: str | None = None,
    skip_fn: Action | None = None,
) -> tf.Operation | None:
  """Returns one op that runs `apply_fn` if `should_apply`, else `skip_fn`.

  The decision stays in the graph. In a TF1 graph it is a gate with one
  `Switch` on `should_apply` (`gates.run_either`); in a `tf.function` a
  `tf.cond` (its stateful branch cannot be gated there); with a Python bool,
  no conditional at all. `update_op`, the loss-scale update, is grouped with
  it. In eager mode everything has already run and the result is None, as
  for TF's own optimizers.

  Args:
    should_apply: scalar bool tensor, or a Python bool.
    apply_fn: runs the wrapped optimizer's update.
    update_op: the loss-scale update op, if any.
    name: optional name of the returned op.
    skip_fn: what a skipped step still does (Keras advances `iterations`);
      nothing when None.
  """
  skip_fn = skip_fn or tf.no_op
  maybe_apply = None
  if tf_seams.static_value(should_apply) is None:
    maybe_apply = gates.run_either(should_apply, apply_fn, skip_fn)
  if maybe_apply is None:  # Not a TF1 graph, or a known `should_apply`.
    maybe_apply = tf_seams.smart_cond(
        should_apply, _as_op(apply_fn), _as_op(skip_fn))
  if tf_seams.executing_eagerly():
    return None
  ops = [op for op in (maybe_apply, update_op) if op is not None]
  return tf.group(*ops, name=name)


def guarded_step(
    loss_scale,
    grads: Grads,
    apply_fn: Action,
    skip_fn: Action | None = None,
    name: str | None = None,
) -> tf.Operation | None:
  """Checks `grads`, updates `loss_scale`, then applies or skips the step.

  This is the step of every mplso optimizer family:

      finite = all gradients finite (on every replica)
      update_op, should_apply = loss_scale.update_from_flag(grads, finite)
      skipped_steps += not should_apply  # only if a monitor watches it
      if should_apply: apply_fn() else: skip_fn()

  Args:
    loss_scale: an `mplso.LossScale` (anything with `update_from_flag`).
    grads: the step's unscaled gradients; per-replica values when called in
      cross-replica context under a strategy.
    apply_fn: applies the gradients (on every replica).
    skip_fn: what a skipped step still does; nothing when None.
    name: optional name of the returned op.

  Returns:
    One op doing all of it (None in eager mode, where it has run).

  Raises:
    ValueError: under a strategy that mplso does not support
      (`ParameterServerStrategy`).
  """
  distribution.check_strategy_supported("A loss-scaled optimizer step")
  grads = list(grads)
  update_op, should_apply = loss_scale.update_from_flag(
      grads, distribution.grads_finite(grads))
  # Counts skips only for a watched loss scale (a monitor asked for it).
  count_op = skip_count.record(loss_scale, should_apply)
  if count_op is not None:
    update_op = tf.group(*[op for op in (update_op, count_op) if op is not None])
  return apply_or_skip(should_apply, apply_fn, update_op, name=name,
                       skip_fn=skip_fn)
