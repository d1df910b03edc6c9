"""The all-finite check: one flag that says whether every gradient is finite."""

from __future__ import annotations

import collections

import tensorflow as tf

from mplso._src.core import tf_seams
from mplso._src.core.scaling import Grads

# Small gradients of one shape and dtype are added up with one `AddN` before a
# single `Sum`, rather than checked one by one: one kernel for many small ones
# (a model of 200 small variables has two such groups). The `AddN` writes a
# temporary of one gradient's size, so only gradients of up to
# _GROUP_UP_TO_ELEMENTS elements are grouped, and only where a shape has
# _GROUP_FROM of them or more. float16 ones are not: their sums overflow to
# inf sooner, and every overflow costs a step the exact check.
_GROUP_UP_TO_ELEMENTS = 2**16
_GROUP_FROM = 8

# The exact check's `cond` stays one `If` op in a graph; False lowers it to
# a `Switch` per gradient, as before. For measurement only: `python -m
# benchmarks.exact_check` flips it to compare.
EXACT_CHECK_AS_ONE_OP = True


def _group_key(value: tf.Tensor):
  """What gradients added up together share; None for one checked alone."""
  if (value.dtype == tf.float16 or not value.shape.is_fully_defined() or
      value.shape.num_elements() > _GROUP_UP_TO_ELEMENTS):
    return None
  return value.dtype, tuple(value.shape.as_list())


def _columns(value: tf.Tensor) -> int | None:
  """The columns of `value` seen as a matrix; None if it cannot be one here.

  The last dimension, which must be known and non-zero (a reshape to
  `[-1, 0]` is refused); 1 for a scalar.
  """
  rank = value.shape.rank
  if rank is None:
    return None
  if rank == 0:
    return 1
  columns = tf.compat.dimension_value(value.shape[-1])
  return columns if columns else None


def _shared(constants: dict, key, make) -> tf.Tensor:
  """`constants[key]`, made by `make()` the first time."""
  if key not in constants:
    constants[key] = make()
  return constants[key]


def _axes(rank: int | None, constants: dict) -> tf.Tensor | None:
  """The `axis` that reduces a value of `rank` to a scalar (None if unknown).

  `tf.reduce_sum(v)` would add a constant `range(rank)` per gradient; the
  reductions of one check share one per rank, in `constants`.
  """
  if rank is None:
    return None
  return _shared(constants, ("axes", rank),
                 lambda: tf.constant(list(range(rank)), tf.int32))


def _zero_product(value: tf.Tensor, columns: int,
                  constants: dict) -> tf.Tensor:
  """float32 0 if every element of `value` is finite, NaN otherwise.

  `value` as a matrix of `columns` columns times a column of zeros: one
  `MatMul`, which reads it once and writes one value per row, and a `Sum` of
  those. A finite number times zero is zero, an infinity or a NaN times zero
  is NaN, and zeros add up to zero: unlike a sum of the values, this never
  overflows, so it needs no exact check. The column of zeros, the reshape's
  shape and the reduction's axes are shared by the gradients of one check.
  """
  matrix = value
  if value.shape.rank != 2:
    shape = _shared(constants, ("shape", columns),
                    lambda: tf.constant([-1, columns], tf.int32))
    matrix = tf.reshape(value, shape)
  zeros = _shared(constants, (value.dtype, columns),
                  lambda: tf.zeros([columns, 1], value.dtype))
  return tf.cast(tf.reduce_sum(tf.matmul(matrix, zeros),
                               axis=_axes(2, constants)), tf.float32)


def _sums(parts: list[list[tf.Tensor]], constants: dict) -> list[tf.Tensor]:
  """float32 sums, one per part: its values added up with one `AddN`.

  Their total is finite only if every element of the parts is.
  """
  sums = []
  for part in parts:
    added = part[0] if len(part) == 1 else tf.add_n(part)
    sums.append(tf.cast(
        tf.reduce_sum(added, axis=_axes(added.shape.rank, constants)),
        tf.float32))
  return sums


def _values(grad):
  return grad.values if isinstance(grad, tf.IndexedSlices) else grad


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


def _split(values: list[tf.Tensor]) -> tuple[list, list]:
  """Returns `(alone, parts)`: `(value, columns)` pairs, and lists of values.

  A part is a group (`_group_key`, `_GROUP_FROM` or more of one shape), or
  one value that cannot be seen as a matrix here (`_columns`): both are
  summed. Every other value is checked alone, by its zero product.
  """
  keys = [_group_key(v) for v in values]
  counts = collections.Counter(k for k in keys if k is not None)
  groups, alone, lone = {}, [], []
  for v, key in zip(values, keys):
    if counts[key] >= _GROUP_FROM:
      groups.setdefault(key, []).append(v)
    elif (columns := _columns(v)) is not None:
      alone.append((v, columns))
    else:
      lone.append([v])
  return alone, list(groups.values()) + lone


def all_finite(grads: Grads) -> tf.Tensor:
  """Returns a scalar bool tensor that is True when every gradient is finite.

  `None` entries are ignored; for `tf.IndexedSlices` only the values count.

  Every gradient is read once, with no temporary of its size:

      total = sum(zero_product(g) for g in alone)  # 0, or NaN
            + sum(float32(reduce_sum(group)) for group in groups)
      return is_finite(total) or exact_check(grads)

  A gradient alone is multiplied by a column of zeros (one `MatMul` and a
  `Sum` of its rows, `_zero_product`): 0 if every element is finite, NaN
  otherwise, never an overflow. Small gradients of one shape are added up
  with one `AddN` first, then summed (`_sums`): one kernel for many small
  ones, but finite values can add up to more than float32 holds. IEEE
  arithmetic keeps a NaN or an Inf non-finite through any sum, so a finite
  total proves every element finite; a non-finite total with a group in it
  is either a real NaN/Inf or an overflow, and only then (a skipped step,
  which is rare) does the exact element-wise check run, so the flag is
  always the same as TF's. Without a group there is no exact check at all.
  The exact check is a `tf.cond` branch kept as one `If` op in a graph
  (`tf_seams.cond_as_one_op`): lowered, it cost a `Switch` per gradient at
  every step, measured slower with many variables (docs/performance.md,
  "The exact check's conditional"). Against a `Sum` per gradient, the zero
  products made 10-variable steps faster in every family without XLA (by
  11 to 209 us, "The zero product").

  >>> bool(all_finite([tf.constant([1., 2.]), None]))
  True
  >>> bool(all_finite([tf.constant([1., float("nan")])]))
  False
  """
  values = [_values(g) for g in grads if g is not None]
  if not values:
    return tf.constant(True)
  alone, summed = _split(values)
  constants = {}
  parts = [_zero_product(v, columns, constants) for v, columns in alone]
  parts += _sums(summed, constants)
  total = parts[0] if len(parts) == 1 else tf.add_n(parts)
  total_finite = tf.math.is_finite(total)
  if not summed:
    return total_finite  # Zero products cannot overflow.
  # Every rank's axes are made here, outside the branch, which takes them.
  axes = [_axes(v.shape.rank, constants) for v in values]
  cond = tf_seams.cond_as_one_op if EXACT_CHECK_AS_ONE_OP else tf.cond
  return cond(total_finite, lambda: total_finite,
              lambda: _exactly_all_finite(values, axes))


# What `kinds` says of one gradient.
FINITE, HAS_NAN, HAS_INF = 0, 1, 2


def kinds(grads: Grads) -> tf.Tensor:
  """Returns, per gradient, FINITE, HAS_NAN, or HAS_INF (Inf and no NaN).

  An int32 vector with one entry per gradient (`None` counts as finite), for
  the overflow log: it reads every element, so it belongs in the branch that
  runs only when a step is skipped. Four ops per gradient (`IsNan`, `IsInf`
  and an `Any` each, the reduction axes shared by rank), a few in all.

  >>> kinds([tf.constant([1., float("nan")]), None,
  ...        tf.constant([float("inf"), float("nan")]),
  ...        tf.constant([-float("inf")])]).numpy().tolist()
  [1, 0, 1, 2]
  """
  present = [i for i, g in enumerate(grads) if g is not None]
  if not present:
    return tf.zeros([len(grads)], tf.int32)
  values = [_values(grads[i]) for i in present]
  constants = {}
  axes = [_axes(v.shape.rank, constants) for v in values]
  has_nan = tf.stack([tf.reduce_any(tf.math.is_nan(v), axis=a)
                      for v, a in zip(values, axes)])
  has_inf = tf.stack([tf.reduce_any(tf.math.is_inf(v), axis=a)
                      for v, a in zip(values, axes)])
  codes = tf.where(has_nan, HAS_NAN, tf.where(has_inf, HAS_INF, FINITE))
  if len(present) == len(grads):
    return codes
  return tf.scatter_nd([[i] for i in present], codes, [len(grads)])
