"""The all-finite check: one flag that says whether every gradient is finite."""

from __future__ import annotations

import tensorflow as tf

from mplso._src.core.scaling import Grads


def _values(grad):
  return grad.values if isinstance(grad, tf.IndexedSlices) else grad


def _exactly_all_finite(values: list[tf.Tensor]) -> tf.Tensor:
  return tf.reduce_all(
      tf.stack([tf.reduce_all(tf.math.is_finite(v)) for v in values])
  )


def all_finite(grads: Grads) -> tf.Tensor:
  """Returns a scalar bool tensor that is True when every gradient is finite.

  `None` entries are ignored; for `tf.IndexedSlices` only the values count.

  The fast path reads each gradient once, with no temporary of its size:

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
  sums = [tf.cast(tf.reduce_sum(v), tf.float32) for v in values]
  total = sums[0] if len(sums) == 1 else tf.add_n(sums)
  return tf.cond(
      tf.math.is_finite(total),
      lambda: tf.constant(True),
      lambda: _exactly_all_finite(values),
  )
