"""The all-finite check: one flag that says whether every gradient is finite."""

from __future__ import annotations

import tensorflow as tf

from mplso._src.core.scaling import Grads


def _values(grad) -> tf.Tensor:
  """The values of one gradient: an `IndexedSlices`' values, or the gradient.

  Python numbers (TF's `LossScale.update` took them eagerly) become tensors.
  """
  if isinstance(grad, tf.IndexedSlices):
    return grad.values
  return tf.convert_to_tensor(grad)


def check(grads: Grads) -> tuple[tf.Tensor, tf.Tensor | None]:
  """Returns whether every gradient is finite, and the verdict per gradient.

  The first is `all_finite(grads)`, made of the same ops. The second is
  what the check found of each gradient that is not None: a bool scalar
  when there is one, else a bool vector (None when there is none), which
  `kinds` takes instead of testing each gradient for Inf again.
  """
  flags = [tf.reduce_all(tf.math.is_finite(_values(g)))
           for g in grads if g is not None]
  if not flags:
    return tf.constant(True), None
  if len(flags) == 1:
    return flags[0], flags[0]
  stacked = tf.stack(flags)
  return tf.reduce_all(stacked), stacked


def all_finite(grads: Grads) -> tf.Tensor:
  """Returns a scalar bool tensor that is True when every gradient is finite.

  `None` entries are ignored; for `tf.IndexedSlices` only the values count.
  Each gradient is checked element by element with `tf.math.is_finite` and
  reduced with `tf.reduce_all`, in its own dtype. No arithmetic touches the
  values, so no graph rewrite (constant folding, automatic mixed precision)
  can change the verdict: it is exactly TF's.

  >>> bool(all_finite([tf.constant([1., 2.]), None]))
  True
  >>> bool(all_finite([tf.constant([1., float("nan")])]))
  False
  """
  return check(grads)[0]


# What `kinds` says of one gradient.
FINITE, HAS_NAN, HAS_INF = 0, 1, 2


def kinds(grads: Grads, finite: tf.Tensor | None = None) -> tf.Tensor:
  """Returns, per gradient, FINITE, HAS_NAN, or HAS_INF (Inf and no NaN).

  An int32 vector with one entry per gradient (`None` counts as finite), for
  the overflow log: it reads every element, so it belongs in the branch that
  runs only when a step is skipped. `finite`, the second result of `check`
  for the same gradients, spares testing each one for Inf: a gradient that
  is not finite and holds no NaN holds an Inf.

  >>> kinds([tf.constant([1., float("nan")]), None,
  ...        tf.constant([float("inf"), float("nan")]),
  ...        tf.constant([-float("inf")])]).numpy().tolist()
  [1, 0, 1, 2]
  """
  present = [i for i, g in enumerate(grads) if g is not None]
  if not present:
    return tf.zeros([len(grads)], tf.int32)
  values = [_values(grads[i]) for i in present]
  # One axes constant per rank, not one per reduction: the record is built
  # on every trace, also where a step never skips.
  axes = {}

  def any_of(flags):
    rank = flags.shape.rank
    if rank is None:
      return tf.reduce_any(flags)
    if rank not in axes:
      axes[rank] = tf.constant(list(range(rank)), tf.int32)
    return tf.reduce_any(flags, axis=axes[rank])

  has_nan = tf.stack([any_of(tf.math.is_nan(v)) for v in values])
  if finite is None:
    has_inf = tf.stack([any_of(tf.math.is_inf(v)) for v in values])
  else:
    has_inf = tf.logical_not(tf.reshape(finite, [len(present)]))
  codes = tf.where(has_nan, HAS_NAN, tf.where(has_inf, HAS_INF, FINITE))
  if len(present) == len(grads):
    return codes
  return tf.scatter_nd([[i] for i in present], codes, [len(grads)])
