"""The overflow log's record: what a skipped step writes, in the graph.

`step.apply.guarded_step` calls `recorder(...)` while it builds a step and
runs what it returns in the branch that runs only when the step is skipped,
before the family's own `skip_fn`. A finite step runs none of it (but, in a
`tf.function`, the `Switch` that brings it `scale` when that is a tensor
made outside). For each skipped step:

    kinds = finite.kinds(grads) on every replica  # NaN, Inf or finite
    stall = (stall + 1 if right after the last skip else 1) if at the
            minimum scale else 0
    stall_guard.check(stall, ...)  # raises before anything is written
    rows[count % CAPACITY] = [count + 1, step, scale, per-variable kind,
                              per-replica "non-finite" flag]
    count += 1; nan_steps += any NaN; inf_steps += any Inf and no NaN
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import dataclasses

import tensorflow as tf

from mplso._src.core import distribution
from mplso._src.core import finite
from mplso._src.core import tf_seams
from mplso._src.core.scaling import Grads
from mplso._src.diagnostics import log_state
from mplso._src.diagnostics import stall_guard


@dataclasses.dataclass(frozen=True)
class StepRecord:
  """What a family tells the overflow log about its steps.

  Attributes:
    variables: the variables of the step's gradients, for their names;
      "gradient i" where None.
    step: the step counter the log records (Keras `iterations`, a TF1
      `global_step`), or a function returning its value; read in the skip
      branch before the family's `skip_fn`. When None the log counts the
      steps itself (one increment per step).
    step_counts_skips: whether `step` advances on a skipped step too (Keras
      `iterations`), so that consecutive skips have consecutive steps; False
      for a TF1 `global_step`, which only an applied step advances.
  """
  variables: Sequence | None = None
  step: Callable[[], tf.Tensor] | tf.Variable | None = None
  step_counts_skips: bool = True


def recorder(
    loss_scale,
    grads: Grads,
    scale: tf.Tensor,
    finite_flags: tf.Tensor | None,
    steps: StepRecord,
) -> tuple[Callable[[], tf.Operation | None], tf.Operation | None]:
  """Returns what a skipped step runs to record itself (and check stalls).

  Args:
    loss_scale: the step's `mplso.LossScale`; its `stall_limit` and
      `min_loss_scale` attributes, where it has them, arm the stall guard.
    grads: the step's unscaled gradients (per replica in cross-replica
      context).
    scale: the scale the step used (read before the update).
    finite_flags: the finite check's verdict per gradient
      (`distribution.check`), if it has one; it spares the record an Inf
      test per gradient.
    steps: the family's variables and step counter.

  Returns:
    `(record, count_op)`: a function that builds the record (and raises the
    stall error in the graph) and returns the op that writes it; and, when
    the family has no step counter, the op that counts every step (None
    otherwise, and eagerly, where it has run).
  """
  grads = list(grads)
  if steps.variables is None:
    names = [f"gradient {i}" for i in range(len(grads))]
  else:
    names = [variable_name(v) for v in steps.variables]
  log = log_state.log_for(loss_scale, names, distribution.replica_names())
  counters = log_state.state_of(loss_scale).counters
  step, count_op = _step_reader(loss_scale, steps.step)
  # The log's own count advances on every step, skipped or not.
  step_counts_skips = steps.step is None or steps.step_counts_skips
  min_scale = float(getattr(loss_scale, "min_loss_scale", None) or 1.0)
  stall_limit = getattr(loss_scale, "stall_limit", None)

  skip = _Skip(log=log, counters=counters, grads=grads,
               finite_flags=finite_flags, scale=scale, step=step,
               step_counts_skips=step_counts_skips, min_scale=min_scale,
               stall_limit=stall_limit)

  def record():
    # One name scope, so that op counts can tell these ops apart (they run
    # only on a skipped step; see benchmarks/graph_ops.py).
    with tf.name_scope(log_state.NAME_SCOPE):
      return _record(skip)

  return record, count_op


def _step_reader(loss_scale, step):
  """Returns `(step_fn, op)`: reads the step; `op` counts steps if needed."""
  if step is None:
    value, op = log_state.count_step(loss_scale)
    return (lambda: value), op
  if callable(step) and not isinstance(step, tf.Variable):
    return step, None
  return (lambda: tf.convert_to_tensor(step)), None


@dataclasses.dataclass(frozen=True)
class _Skip:
  """What the record of a skipped step is built from.

  Attributes:
    log: the loss scale's log (its names and rows).
    counters: the store of the log's counters (`log_state.COUNT`, ...).
    grads: the step's unscaled gradients (per replica in cross-replica
      context).
    finite_flags: the finite check's verdict per gradient, or None.
    scale: the scale the step used.
    step: a function returning the step counter's value.
    step_counts_skips: whether `step` advances on a skipped step too.
    min_scale: the loss scale's floor, where a skip counts towards a stall.
    stall_limit: the stall guard's limit; None for no guard.
  """
  log: log_state.Log
  counters: log_state.VariableStore | log_state.TableStore
  grads: list
  finite_flags: tf.Tensor | None
  scale: tf.Tensor
  step: Callable[[], tf.Tensor]
  step_counts_skips: bool
  min_scale: float
  stall_limit: int | None


def _record(skip: _Skip) -> tf.Operation:
  """Builds the op that writes `skip`'s row and counters (after the guard)."""
  log, counters_store = skip.log, skip.counters
  step_counts_skips, min_scale = skip.step_counts_skips, skip.min_scale
  stall_limit = skip.stall_limit
  # [replicas, variables]
  kinds = distribution.grad_kinds(skip.grads, skip.finite_flags)
  nan = tf.reduce_any(tf.equal(kinds, finite.HAS_NAN), axis=0)
  inf = tf.logical_and(tf.reduce_any(tf.equal(kinds, finite.HAS_INF), axis=0),
                       tf.logical_not(nan))
  replica_bad = tf.reduce_any(tf.not_equal(kinds, finite.FINITE), axis=1)
  scale = tf.cast(skip.scale, tf.float64)
  step = tf.cast(skip.step(), tf.float64)

  counters = counters_store.read()[0]
  count = counters[log_state.COUNT]
  consecutive = tf.logical_and(
      count > 0,
      tf.equal(step, counters[log_state.LAST_STEP] +
               (1. if step_counts_skips else 0.)))
  at_min = scale <= min_scale
  stall = tf.where(
      at_min, tf.where(consecutive, counters[log_state.STALL] + 1., 1.), 0.)
  checks = []
  if stall_limit is not None and not tf_seams.in_xla_context():
    with tf.device("/cpu:0"):  # Strings and Assert: host ops.
      guard = stall_guard.check(
          stall, stall_limit, names=log.names, nan=nan, inf=inf, scale=scale,
          min_loss_scale=min_scale)
      if guard is not None:
        checks.append(guard)

  def as_f64(flags):
    return tf.cast(flags, tf.float64)

  any_nan = tf.reduce_any(nan)
  any_inf = tf.logical_and(tf.reduce_any(inf), tf.logical_not(any_nan))
  kind_column = tf.where(nan, float(finite.HAS_NAN),
                         tf.where(inf, float(finite.HAS_INF), 0.))
  row = tf.concat([tf.stack([count + 1., step, scale]), as_f64(kind_column),
                   as_f64(replica_bad)], axis=0)
  new_counters = tf.stack([
      count + 1., stall, step, counters[log_state.NAN_STEPS] + as_f64(any_nan),
      counters[log_state.INF_STEPS] + as_f64(any_inf)])
  index = tf.cast(tf.math.floormod(count, log_state.CAPACITY), tf.int32)
  rows = tf.tensor_scatter_nd_update(log.rows.read(), [[index]], row[None])
  with tf.control_dependencies(checks):
    return tf.group(log.rows.write(rows),
                    counters_store.write(new_counters[None]))


def variable_name(variable) -> str:
  """A variable's name as users see it: Keras 3's path, or TF's without :0."""
  name = getattr(variable, "path", None) or variable.name
  return name[:-2] if name.endswith(":0") else name
