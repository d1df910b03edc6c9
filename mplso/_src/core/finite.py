"""The all-finite check: one flag that says whether every gradient is finite."""

from __future__ import annotations

import tensorflow as tf

from mplso._src.core import tf_seams
from mplso._src.core.scaling import Grads

# TF lowers a cond in a graph to Switch/Merge: one Switch per gradient, run
# at every step, and (measured on 96 MB of gradients) about 55 MB more at the
# step's peak, as the gradients stay alive longer. Run as one function call,
# the exact check's branch costs neither, but the call costs about 0.1 ms per
# step on 2 CPU cores with TF 2.21, more than the Switches of a few small
# gradients. So the cond is lowered only for fewer than this many gradients
# holding at most this many elements in all (docs/performance.md).
_LOWER_BELOW_GRADIENTS = 32
_LOWER_UP_TO_ELEMENTS = 2**20


def _lowering_is_cheaper(values: list[tf.Tensor]) -> bool:
  sizes = [v.shape.num_elements() for v in values]
  return (len(values) < _LOWER_BELOW_GRADIENTS and None not in sizes and
          sum(sizes) <= _LOWER_UP_TO_ELEMENTS)


def _values(grad):
  return grad.values if isinstance(grad, tf.IndexedSlices) else grad


def _full_reduction_axes(values: list[tf.Tensor]) -> list[tf.Tensor | None]:
  """The `axis` that reduces each value to a scalar, one tensor per rank.

  `tf.reduce_sum(v)` would add a constant `range(rank)` per gradient; the
  gradients of one rank share one here (None for an unknown rank).
  """
  by_rank = {}
  for v in values:
    rank = v.shape.rank
    if rank is not None and rank not in by_rank:
      by_rank[rank] = tf.constant(list(range(rank)), tf.int32)
  return [by_rank.get(v.shape.rank) for v in values]


def _exactly_all_finite(values: list[tf.Tensor],
                        axes: list[tf.Tensor | None]) -> tf.Tensor:
  flags = []
  for v, a in zip(values, axes):
    flag = tf.reduce_all(tf.math.is_finite(v), axis=a)
    # Inside the branch the axes are inputs, not constants, so shape
    # inference cannot see that each flag is a scalar.
    flag.set_shape([])
    flags.append(flag)
  return flags[0] if len(flags) == 1 else tf.reduce_all(tf.stack(flags))


def all_finite(grads: Grads) -> tf.Tensor:
  """Returns a scalar bool tensor that is True when every gradient is finite.

  `None` entries are ignored; for `tf.IndexedSlices` only the values count.

  The fast path reads each gradient once, with no temporary of its size
  (one `Sum` per gradient, the reduction axes shared by rank):

      total = sum(float32(reduce_sum(g)) for g in grads)
      return is_finite(total) or exact_check(grads)

  IEEE arithmetic keeps a NaN or an Inf non-finite through any sum, so a
  finite total proves every element finite. A non-finite total is either a
  real NaN/Inf or an overflow of large finite values; only then (a skipped
  step, which is rare) does the exact element-wise check run, so the flag is
  always the same as TF's.

  >>> bool(all_finite([tf.constant([1., 2.]), None]))
  True
  >>> bool(all_finite([tf.constant([1., float("nan")])]))
  False
  """
  values = [_values(g) for g in grads if g is not None]
  if not values:
    return tf.constant(True)
  axes = _full_reduction_axes(values)
  sums = [tf.cast(tf.reduce_sum(v, axis=a), tf.float32)
          for v, a in zip(values, axes)]
  total = sums[0] if len(sums) == 1 else tf.add_n(sums)
  total_finite = tf.math.is_finite(total)
  # Every gradient is an input of the exact check's branch.
  cond = tf.cond if _lowering_is_cheaper(values) else tf_seams.cond_as_one_call
  return cond(
      total_finite,
      lambda: total_finite,  # True here; passed in rather than a new constant.
      lambda: _exactly_all_finite(values, axes),
  )
