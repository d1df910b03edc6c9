"""Supported `tf.distribute` strategies; one finite flag for all replicas."""

from __future__ import annotations

import tensorflow as tf

from mplso._src.core import finite
from mplso._src.core import stacking
from mplso._src.core import tf_seams
from mplso._src.core.scaling import Grads

# Strategies whose replicas run in lockstep, so that one all-finite flag
# can be agreed and every replica skips or applies together.
SUPPORTED_STRATEGIES = (
    "no strategy (the default), OneDeviceStrategy, MirroredStrategy, "
    "MultiWorkerMirroredStrategy and CentralStorageStrategy")

# Workers of these train asynchronously: there is no step that all of them
# share, and the loss scale, a variable on a parameter server, would be read
# and rewritten by each of them concurrently.
_ASYNC_STRATEGIES = (
    tf.distribute.experimental.ParameterServerStrategy,
    tf.compat.v1.distribute.experimental.ParameterServerStrategy,
)


def check_strategy_supported(what: str) -> None:
  """Raises ValueError if the current `tf.distribute` strategy is not supported.

  Args:
    what: what is being done, for the message ("Creating a loss scale").

  Raises:
    ValueError: under `ParameterServerStrategy`, naming the supported ones.
  """
  strategy = tf.distribute.get_strategy()
  if isinstance(strategy, _ASYNC_STRATEGIES):
    raise ValueError(
        f"{what} is not supported under {type(strategy).__name__}: its "
        "workers train asynchronously, so they cannot all skip a step with "
        "a NaN or Inf gradient together, and they would race on the loss "
        f"scale. Supported: {SUPPORTED_STRATEGIES}.")


def grads_finite(grads: Grads) -> tf.Tensor:
  """Returns one flag, True only when every gradient on every replica is finite.

  Outside a strategy, or in a replica's own context, this is the plain check.
  In cross-replica context under a strategy, `grads` hold per-replica values:
  each replica checks its own and the flags are summed, so a NaN on any one
  replica makes every replica skip.
  """
  return check(grads)[0]


def check(grads: Grads) -> tuple[tf.Tensor, tf.Tensor | None]:
  """`grads_finite(grads)`, and `finite.check`'s verdict per gradient.

  The second is None under a strategy in cross-replica context (each
  replica has its own), and where no gradient is present.
  """
  if not (tf.distribute.has_strategy() and
          tf.distribute.in_cross_replica_context()):
    return finite.check(grads)
  strategy = tf.distribute.get_strategy()
  per_replica = strategy.extended.call_for_each_replica(
      lambda g: tf.cast(finite.all_finite(g), tf.float32), args=(list(grads),))
  finite_replicas = strategy.reduce(
      tf.distribute.ReduceOp.SUM, per_replica, axis=None)
  return tf.equal(finite_replicas, strategy.num_replicas_in_sync), None


def _local_max_magnitude(grads: Grads) -> tf.Tensor:
  """The largest magnitude of one replica's gradients, float32 (0: none).

  Built on every trace of a calibrating scale: one axes constant per rank,
  not one per gradient, and small gradients of one shape reduced as one
  stack (`stacking`).
  """
  axes = {}

  def largest(values: tf.Tensor) -> tf.Tensor:
    magnitude = tf.abs(values)
    rank = magnitude.shape.rank
    if rank is None:
      return tf.cast(tf.reduce_max(magnitude), tf.float32)
    if rank not in axes:
      axes[rank] = tf.constant(list(range(rank)), tf.int32)
    return tf.cast(tf.reduce_max(magnitude, axis=axes[rank]), tf.float32)

  values = [g.values if isinstance(g, tf.IndexedSlices) else g
            for g in grads if g is not None]
  # Small gradients of one shape are reduced as one stack.
  stacks, alone = stacking.stacked(values)
  maxima = ([largest(stack.values) for stack in stacks] +
            [largest(values[i]) for i in alone])
  if not maxima:
    return tf.constant(0., tf.float32)
  return tf.reduce_max(tf.stack(maxima))


def rare_branch_cond(pred, true_fn, false_fn):
  """A `tf.cond` whose true branch runs rarely and reads every gradient.

  Without a strategy, its If op stays a function call when the graph runs
  (`tf_seams.cond_kept_as_call`): a step that does not take the branch runs
  one op, not a Switch per gradient (the underflow meter's sample, the
  calibrating step). Under a strategy it is lowered as any `tf.cond`, so
  that each replica's gradients are read on their own device.
  """
  if tf.distribute.has_strategy():
    return tf_seams.smart_cond(pred, true_fn, false_fn)
  return tf_seams.cond_kept_as_call(pred, true_fn, false_fn)


def max_magnitude(grads: Grads) -> tf.Tensor:
  """The largest magnitude of `grads` on every replica, as a float32 scalar.

  0 when there is no gradient (or all are empty or zero). In cross-replica
  context under a strategy, `grads` hold per-replica values: each replica
  reduces its own and the largest of them is taken, the same value for
  every replica (and worker).
  """
  if not (tf.distribute.has_strategy() and
          tf.distribute.in_cross_replica_context()):
    return _local_max_magnitude(grads)
  strategy = tf.distribute.get_strategy()
  per_replica = strategy.extended.call_for_each_replica(
      lambda g: _local_max_magnitude(g)[tf.newaxis], args=(list(grads),))
  # `ReduceOp` has no MAX: every replica's maximum is gathered (across
  # workers too), and the largest taken.
  return tf.reduce_max(strategy.gather(per_replica, axis=0))


def replica_names() -> list[int | str]:
  """The ids of the replicas of the current strategy, in replica-id order.

  `[0]` without a strategy; `"worker:replica"` strings under a strategy with
  several workers (`MultiWorkerMirroredStrategy`), ints otherwise.
  """
  if not tf.distribute.has_strategy():
    return [0]
  strategy = tf.distribute.get_strategy()
  total = strategy.num_replicas_in_sync
  try:
    local = len(strategy.extended.worker_devices) or total
  except RuntimeError:  # A strategy without the notion: one worker.
    local = total
  if local >= total:
    return list(range(total))
  return [f"{i // local}:{i % local}" for i in range(total)]


def grad_kinds(grads: Grads, finite_flags: tf.Tensor | None = None
               ) -> tf.Tensor:
  """Returns `finite.kinds` of `grads` on each replica: int32 [replicas, grads].

  `finite_flags`, `check`'s second result, is passed on to `finite.kinds`
  where there is one replica.

  Outside a strategy, or in a replica's own context, one row. In
  cross-replica context under a strategy, `grads` hold per-replica values:
  each replica classifies its own and the rows are gathered (across workers
  too), in replica-id order.
  """
  if not (tf.distribute.has_strategy() and
          tf.distribute.in_cross_replica_context()):
    return finite.kinds(grads, finite_flags)[tf.newaxis]
  strategy = tf.distribute.get_strategy()
  per_replica = strategy.extended.call_for_each_replica(
      lambda g: finite.kinds(g)[tf.newaxis], args=(list(grads),))
  return strategy.gather(per_replica, axis=0)
