"""Runs an optimizer's apply step only when told to, grouped with the scale update."""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from mplso._src.core import tf_seams


def apply_or_skip(
    should_apply: tf.Tensor | bool,
    apply_fn: Callable[[], tf.Operation | None],
    update_op: tf.Operation | None = None,
    name: str | None = None,
) -> tf.Operation | None:
  """Returns one op that runs `apply_fn` if `should_apply`, plus `update_op`.

  The decision stays in the graph: a single `tf.cond` on `should_apply` (none
  when it is a Python bool). In eager mode everything has already run and the
  result is None, as for TF's own optimizers.
  """
  maybe_apply = tf_seams.smart_cond(should_apply, apply_fn, tf.no_op)
  if tf_seams.executing_eagerly():
    return None
  ops = [op for op in (maybe_apply, update_op) if op is not None]
  return tf.group(*ops, name=name)
