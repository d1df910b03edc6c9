"""The all-finite flag agreed across the replicas of a `tf.distribute` strategy."""

from __future__ import annotations

import tensorflow as tf

from mplso._src.core import finite
from mplso._src.core.scaling import Grads


def grads_finite(grads: Grads) -> tf.Tensor:
  """Returns one flag, True only when every gradient on every replica is finite.

  Outside a strategy, or in a replica's own context, this is the plain check.
  In cross-replica context under a strategy, `grads` hold per-replica values:
  each replica checks its own and the flags are summed, so a NaN on any one
  replica makes every replica skip.
  """
  if not (tf.distribute.has_strategy() and
          tf.distribute.in_cross_replica_context()):
    return finite.all_finite(grads)
  strategy = tf.distribute.get_strategy()
  per_replica = strategy.extended.call_for_each_replica(
      lambda g: tf.cast(finite.all_finite(g), tf.float32), args=(list(grads),))
  finite_replicas = strategy.reduce(
      tf.distribute.ReduceOp.SUM, per_replica, axis=None)
  return tf.equal(finite_replicas, strategy.num_replicas_in_sync)
