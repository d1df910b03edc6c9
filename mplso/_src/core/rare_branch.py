"""A `tf.cond` whose true branch runs rarely and reads every gradient.

The underflow meter's sample (every N steps) and the calibrating step (the
first) are such branches; the condition is evaluated at every step. As any
`tf.cond` in a graph, it is lowered to Switch and Merge before it runs: one
Switch per tensor a branch reads, and the untaken branch's nodes passed
along as dead. Read directly, every gradient would be one Switch per step.
An If op kept as a function call instead costs a call with every gradient
as an argument, also at every step, and is asynchronous (about 150 us a
step at 200 variables on a CPU).

So the branch reads the gradients through one value: they are packed into
one `Optional` (which refers to the tensors and copies nothing), the cond
reads that, and its true branch unpacks them. A step that does not take
the branch runs the packing, a few Switch nodes and a Merge. The values are
the same. Gradients stay where they are: packing is done on the device of
each replica's tensors, so in cross-replica context under a strategy
(per-replica values) the branch reads them directly, as does XLA (which has
no kernel for `Optional` and compiles a cond into one conditional anyway).
Eagerly the branch runs or not, nothing is packed.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from mplso._src.core import tf_seams


def rare_branch(pred, grads, true_fn: Callable[[list], object],
                false_fn: Callable[[], object]):
  """Returns `tf.cond(pred, lambda: true_fn(grads), false_fn)`.

  Args:
    pred: scalar bool tensor (or a Python bool).
    grads: the gradients the true branch reads: tensors, `tf.IndexedSlices`
      or None (per-replica values in cross-replica context).
    true_fn: takes a list like `grads` (the same values).
    false_fn: takes nothing.
  """
  grads = list(grads)
  if tf_seams.executing_eagerly() or not _packable(grads):
    return tf_seams.smart_cond(pred, lambda: true_fn(grads), false_fn)
  parts = tf.nest.flatten(grads, expand_composites=True)
  tensors = [part for part in parts if part is not None]
  if not tensors:
    return tf_seams.smart_cond(pred, lambda: true_fn(grads), false_fn)
  packed = tf.raw_ops.OptionalFromValue(components=tensors)

  def unpacked():
    values = iter(tf.raw_ops.OptionalGetValue(
        optional=packed, output_types=[t.dtype for t in tensors],
        output_shapes=[t.shape for t in tensors]))
    return true_fn(tf.nest.pack_sequence_as(
        grads, [None if part is None else next(values) for part in parts],
        expand_composites=True))

  return tf_seams.smart_cond(pred, unpacked, false_fn)


def _packable(grads) -> bool:
  """Whether `grads` can be read through one `Optional` here."""
  if tf.distribute.has_strategy() and tf.distribute.in_cross_replica_context():
    return False
  return not tf_seams.in_xla_context()
