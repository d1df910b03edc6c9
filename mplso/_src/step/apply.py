"""One optimizer step that applies only when every gradient is finite."""

from __future__ import annotations

from collections.abc import Callable
import contextlib

import tensorflow as tf

from mplso._src.core import distribution
from mplso._src.core import tf_seams
from mplso._src.core.scaling import Grads
from mplso._src.diagnostics import record
from mplso._src.diagnostics import underflow_meter

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

  The decision stays in the graph: a `tf.cond` (TensorFlow's `If`), or no
  conditional at all when `should_apply` is a Python bool or a constant.
  `update_op`, the loss-scale update, is grouped with it. In eager mode
  everything has already run and the result is None, as for TF's own
  optimizers.

  Args:
    should_apply: scalar bool tensor, or a Python bool.
    apply_fn: runs the wrapped optimizer's update.
    update_op: the loss-scale update op, if any.
    name: optional name of the returned op.
    skip_fn: what a skipped step still does (Keras advances `iterations`);
      nothing when None.
  """
  with _lifts_to_this_graph():
    maybe_apply = tf_seams.smart_cond(
        should_apply, _as_op(apply_fn), _as_op(skip_fn or tf.no_op))
  if tf_seams.executing_eagerly():
    return None
  ops = [op for op in (maybe_apply, update_op) if op is not None]
  return tf.group(*ops, name=name)


def _lifts_to_this_graph():
  """Makes `init_scope` inside the branches lift to this TF1 graph.

  A wrapped optimizer creates its slots under `init_scope` when it first
  applies, here inside a `tf.cond` branch. From a branch, `init_scope` lifts
  to the outermost context that builds no function. When a program entered
  a graph or a function while eager execution was still on, and only then
  called `disable_eager_execution()`, that context is eager, below the
  global graph, and the slots would be made eagerly. Entering the graph
  explicitly puts it above: slots land in the graph, whatever came before.
  Eagerly and in a function (whose variables are made eagerly) nothing
  changes.
  """
  if tf_seams.executing_eagerly():
    return contextlib.nullcontext()
  graph = tf.compat.v1.get_default_graph()
  if graph.building_function:
    return contextlib.nullcontext()
  return graph.as_default()


def _update_and_scale(loss_scale, grads, grads_finite):
  """Builds the loss-scale update; also returns the scale it started from.

  The overflow log records the scale a skipped step used, which the update
  changes: the scale is read first, and the update waits for the read.

  Returns:
    `(update_op, should_apply, scale)`.
  """
  scale = tf.convert_to_tensor(loss_scale())
  deps = [] if tf_seams.executing_eagerly() else [scale]
  with tf.control_dependencies(deps):
    update_op, should_apply = loss_scale.update_from_flag(grads, grads_finite)
  return update_op, should_apply, scale


def _then(first: Action, second: Action) -> Action:
  """Runs `first`, then `second` (after it, also in a graph)."""

  def run():
    done = first()
    deps = [] if done is None or tf_seams.executing_eagerly() else [done]
    with tf.control_dependencies(deps):
      return second()

  return run


def _beside(sample, apply: Action) -> Action:
  """Runs `apply` beside the underflow meter's `sample`, after its read.

  `sample()` returns the step counter's read, which must come before
  `apply` advances the counter, and the sample's own op. `apply` waits for
  the read only: on a step that is not due, the sample's conditional stays
  off the update's path.
  """

  def run():
    counted, sampled = sample()
    deps = [] if counted is None else [counted]
    with tf.control_dependencies(deps):
      applied = apply()
    return _grouped(applied, sampled)

  return run


def _grouped(first: tf.Operation | None, second: tf.Operation | None):
  """One op running both (None when both are)."""
  if second is None:
    return first
  return second if first is None else tf.group(first, second)


def guarded_step(
    loss_scale,
    grads: Grads,
    apply_fn: Action,
    skip_fn: Action | None = None,
    name: str | None = None,
    steps: record.StepRecord | None = None,
) -> tf.Operation | None:
  """Checks `grads`, updates `loss_scale`, then applies or skips the step.

  This is the step of every mplso optimizer family:

      finite = all gradients finite (on every replica)
      update_op, should_apply = loss_scale.update_from_flag(grads, finite)
      if should_apply: [underflow meter's sample, when on, beside] apply_fn()
      else: record the skip (diagnostics); skip_fn()  # may raise: stall guard

  Args:
    loss_scale: an `mplso.LossScale` (anything with `update_from_flag`).
    grads: the step's unscaled gradients; per-replica values when called in
      cross-replica context under a strategy.
    apply_fn: applies the gradients (on every replica).
    skip_fn: what a skipped step still does; nothing when None.
    name: optional name of the returned op.
    steps: what the overflow log records of the family's steps: the
      variables of `grads` and the step counter (None: neither).

  Returns:
    One op doing all of it (None in eager mode, where it has run).

  Raises:
    ValueError: under a strategy that mplso does not support
      (`ParameterServerStrategy`).
    tf.errors.InvalidArgumentError: when the step runs, if the loss scale's
      `stall_limit` consecutive steps were skipped at its minimum scale.
  """
  distribution.check_strategy_supported("A loss-scaled optimizer step")
  grads = list(grads)
  grads_finite, finite_flags = distribution.check(grads)
  update_op, should_apply, scale = _update_and_scale(
      loss_scale, grads, grads_finite)
  steps = steps or record.StepRecord()
  # None unless `mplso.meter_underflow` metered `loss_scale`.
  meter = underflow_meter.sampler(loss_scale, grads, scale, steps)
  if meter is not None:
    steps, update_op = meter.steps, _grouped(update_op, meter.count_op)
    apply_fn = _beside(meter.sample, apply_fn)
  record_fn, count_op = record.recorder(loss_scale, grads, scale,
                                        finite_flags, steps)
  skip_fn = _then(record_fn, skip_fn or tf.no_op)
  update_op = _grouped(update_op, count_op)
  return apply_or_skip(should_apply, apply_fn, update_op, name=name,
                       skip_fn=skip_fn)
