"""The underflow meter in the graph: zero and subnormal shares of sampled steps.

`step.apply.guarded_step` asks `sampler(...)` while it builds a step. With
the meter off (the default) it answers None and the step is built exactly
as without this module. With the meter on it returns a `Sampler` whose
`sample` the step runs in the branch that applies a finite step, beside the
wrapped optimizer's update: the update waits only for the meter's read of
the step counter (which it may advance), not for the sample, so a step
that is not due adds no op to the update's path.

    if step % every == 0:            # one tf.cond; the rest is its branch
      per variable: zeros / size, subnormals / size (float16 gradients)
      rows[count % SAMPLES] = [count + 1, step, scale, zero..., subnormal...]
      count += 1

Skipped steps run none of it (the overflow log records them). Without a
strategy the `tf.cond`'s If op is not lowered to Switch/Merge
(`distribution.rare_branch_cond`): a step that is not due runs it as one
op, not one Switch per gradient. The element
tests read each value's bits, so that no flush-to-zero mode of the device
can count a subnormal as zero. Under a strategy, in cross-replica context,
each replica counts its own gradients (before they are summed) and the
counts are summed: a variable's fraction is over the elements of every
replica's gradient.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import weakref

import numpy as np
import tensorflow as tf

from mplso._src.core import distribution
from mplso._src.core import stacking
from mplso._src.core import tf_seams
from mplso._src.core.scaling import Grads
from mplso._src.diagnostics import log_state
from mplso._src.diagnostics import record

# Samples kept per log; the oldest is overwritten first.
SAMPLES = 32
# The name scope of every op of a sample.
NAME_SCOPE = "mplso_underflow_meter"
# Columns of a sample row: its ordinal + 1 (0: empty), then the values;
# then the zero fractions, one per variable, then the subnormal ones.
ORDINAL, STEP, SCALE, FIRST_FRACTION = range(4)

# Per float dtype: the integer of its width, and the mask of its bits
# without the sign (a value is zero when these bits are).
_BITS = {
    tf.float16: (tf.int16, 0x7FFF),
    tf.bfloat16: (tf.int16, 0x7FFF),
    tf.float32: (tf.int32, 0x7FFFFFFF),
    tf.float64: (tf.int64, 0x7FFFFFFFFFFFFFFF),
}
# float16's exponent bits: a nonzero value without any is subnormal.
_FLOAT16_EXPONENT = 0x7C00


@dataclasses.dataclass
class Log:
  """The samples of one loss scale's steps over one list of variables."""

  names: list[str]
  float16: list[bool]  # Per variable: whether its gradient is float16.
  rows: log_state.VariableStore | log_state.TableStore

  @property
  def width(self) -> int:
    return FIRST_FRACTION + 2 * len(self.names)


@dataclasses.dataclass
class State:
  """A metered loss scale's samples in one graph (or eagerly)."""

  count: log_state.VariableStore | log_state.TableStore
  logs: list[Log]


@dataclasses.dataclass
class Meter:
  """A loss scale's meter: its period and, per TF1 graph (None: eager), state."""

  every: int
  states: dict = dataclasses.field(default_factory=dict)


# Per metered loss scale, its meter.
METERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def turn_on(loss_scale, every: int) -> None:
  """Meters the steps of `loss_scale` built from now on, every `every` steps."""
  meter = METERS.get(loss_scale)
  if meter is None:
    METERS[loss_scale] = Meter(every=every)
  else:
    meter.every = every


def state_of(meter: Meter) -> State:
  """Returns the meter's state in the current context, made once."""
  graph = log_state.context_graph()
  if graph not in meter.states:
    meter.states[graph] = State(count=log_state.new_store((1, 1)), logs=[])
  return meter.states[graph]


def log_for(meter: Meter, names: list[str], float16: list[bool]) -> Log:
  """Returns the meter's log for these variables, creating it once."""
  state = state_of(meter)
  for log in state.logs:
    if (log.names, log.float16) == (names, float16):
      return log
  log = Log(names=names, float16=float16, rows=log_state.new_store(
      (SAMPLES, FIRST_FRACTION + 2 * len(names))))
  if isinstance(log.rows, log_state.TableStore):
    # The host's read op, made now: the graph may be finalized when it is
    # read (see log_state.log_for).
    with tf.init_scope(), tf.name_scope(NAME_SCOPE):
      log.rows.cached_read()
  state.logs.append(log)
  return log


def saved_variables(loss_scale) -> dict[str, tf.Variable]:
  """The eager meter variables of `loss_scale`, by name, for a SavedModel."""
  meter = METERS.get(loss_scale)
  state = None if meter is None else meter.states.get(None)
  if state is None:
    return {}
  stores = {"underflow_log_count": state.count}
  stores.update({f"underflow_log_{i}": log.rows
                 for i, log in enumerate(state.logs)})
  return {name: store.variable for name, store in stores.items()}


@dataclasses.dataclass(frozen=True)
class Sampler:
  """What a metered step adds.

  Attributes:
    sample: builds, in the apply branch, the `tf.cond` that records a
      sample on a due step. Returns `(counted, op)`: the read of the step
      counter, which the wrapped update must wait for, and the `tf.cond`'s
      op, which may run beside the update (both None eagerly, where the
      sample has run).
    steps: the family's `StepRecord`, its step counter made explicit where
      the family had none, so that the overflow log and the meter read the
      same count.
    count_op: the op that advances that count (None where the family has a
      counter, and eagerly).
  """
  sample: Callable[[], tuple[tf.Tensor | None, tf.Operation | None]]
  steps: record.StepRecord
  count_op: tf.Operation | None


def sampler(loss_scale, grads: Grads, scale: tf.Tensor,
            steps: record.StepRecord) -> Sampler | None:
  """Returns what a step of `loss_scale` adds for the meter; None when off.

  Args:
    loss_scale: the step's `mplso.LossScale`.
    grads: the step's unscaled gradients (per replica in cross-replica
      context).
    scale: the scale the step used (read before the update).
    steps: the family's variables and step counter.
  """
  meter = METERS.get(loss_scale)
  if meter is None:
    return None
  grads = list(grads)
  count_op = None
  if steps.step is None:
    # The overflow log would count the steps itself; the meter needs the
    # same count, so it is made here and handed to both.
    value, count_op = log_state.count_step(loss_scale)
    steps = dataclasses.replace(steps, step=lambda: value,
                                step_counts_skips=True)
  if steps.variables is None:
    names = [f"gradient {i}" for i in range(len(grads))]
  else:
    names = [record.variable_name(v) for v in steps.variables]
  float16 = [_dtype(g) == tf.float16 for g in grads]
  log = log_for(meter, names, float16)
  count = state_of(meter).count
  step, every = steps.step, meter.every

  def sample():
    with tf.name_scope(NAME_SCOPE):
      value = tf.cast(_read(step), tf.int64)
      due = tf.equal(tf.math.floormod(value, every), 0)
      # On the steps not due, one op (no Switch per gradient) without a
      # strategy.
      op = distribution.rare_branch_cond(
          due, _as_op(lambda: _write(log, count, grads, scale, value)),
          _as_op(lambda: None))
    if tf_seams.executing_eagerly():
      return None, None
    return value, op

  return Sampler(sample=sample, steps=steps, count_op=count_op)


def _dtype(grad) -> tf.DType | None:
  """A gradient's dtype; per-replica values' (their first's); None for None."""
  if grad is None:
    return None
  dtype = getattr(grad, "dtype", None)
  return dtype if dtype is not None else grad.values[0].dtype


def _read(step) -> tf.Tensor:
  """The value of a `StepRecord.step`: a variable, or a function of none."""
  if callable(step) and not isinstance(step, tf.Variable):
    return step()
  return tf.convert_to_tensor(step)


def _as_op(action: Callable[[], object]) -> Callable[[], object]:
  """Makes `action`'s result an op, so both `tf.cond` branches match."""

  def run():
    result = action()
    if tf_seams.executing_eagerly():
      return tf.constant(True)
    return tf.no_op() if result is None else tf.group(result)

  return run


def _write(log: Log, count_store, grads, scale, step):
  """Writes one sample row; returns the op (None eagerly)."""
  counts = _replica_counts(grads)  # float64 [variables, 3]
  size = counts[:, 2]
  # 0/0 for a None gradient: NaN, which the reader leaves out.
  zero = counts[:, 0] / size
  subnormal = counts[:, 1] / size
  count = count_store.read()[0, 0]
  row = tf.concat([tf.stack([count + 1., tf.cast(step, tf.float64),
                             tf.cast(scale, tf.float64)]), zero, subnormal],
                  axis=0)
  index = tf.cast(tf.math.floormod(count, SAMPLES), tf.int32)
  rows = tf.tensor_scatter_nd_update(log.rows.read(), [[index]], row[None])
  writes = [log.rows.write(rows), count_store.write(tf.reshape(count + 1.,
                                                               [1, 1]))]
  if tf_seams.executing_eagerly():
    return None
  return tf.group(*writes)


def _replica_counts(grads: Grads) -> tf.Tensor:
  """Per gradient: zeros, subnormals and elements, summed over replicas."""
  if not (tf.distribute.has_strategy() and
          tf.distribute.in_cross_replica_context()):
    return element_counts(grads)
  strategy = tf.distribute.get_strategy()
  per_replica = strategy.extended.call_for_each_replica(
      element_counts, args=(list(grads),))
  return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


def element_counts(grads: Grads) -> tf.Tensor:
  """Returns float64 [len(grads), 3]: per gradient, zeros, subnormals, size.

  A `tf.IndexedSlices` counts as the dense gradient it stands for (rows it
  does not name are zeros; repeated rows are summed first). A None or
  non-float gradient counts as empty (0, 0, 0). Subnormals are counted for
  float16 gradients only (0 otherwise).

  Built on every trace of a metered step (its branch runs only when due),
  so ops per gradient are few: small gradients of one dtype and shape are
  counted as one stack (`stacking`), the constants are shared, sizes known
  when tracing are one constant, and a float16 gradient's subnormals are
  its values without exponent bits less its zeros.
  """
  if not grads:
    return tf.zeros([0, 3], tf.float64)
  shared = _SharedConstants()
  values = [None if grad is None else _dense(grad) for grad in grads]
  values = [v if v is not None and v.dtype in _BITS else None
            for v in values]
  zeros = [shared.zero()] * len(values)
  no_exponent = [None] * len(values)
  stacks, alone = stacking.stacked(values)
  for stack in stacks:
    counted = _zeros_and_no_exponent(stack.values, shared, per_row=True)
    rows = [tf.unstack(c) if c is not None else None for c in counted]
    for j, i in enumerate(stack.indices):
      zeros[i] = rows[0][j]
      no_exponent[i] = None if rows[1] is None else rows[1][j]
  for i in alone:
    if values[i] is not None:
      zeros[i], no_exponent[i] = _zeros_and_no_exponent(values[i], shared)
  if any(n is not None for n in no_exponent):
    # Zeros have no exponent bits either: the rest of those are subnormal.
    subnormals = tf.stack([z if n is None else n for z, n in zip(
        zeros, no_exponent)]) - tf.stack(zeros)
  else:
    subnormals = tf.zeros([len(grads)], tf.float64)
  sizes = [0 if v is None else _size(v) for v in values]
  zeros = tf.stack(zeros)
  if all(isinstance(size, int) for size in sizes):
    sizes = tf.constant(sizes, tf.float64)
  else:
    sizes = tf.stack([tf.constant(float(size), tf.float64)
                      if isinstance(size, int) else size for size in sizes])
  return tf.stack([zeros, subnormals, sizes], axis=1)


def _zeros_and_no_exponent(values: tf.Tensor, shared: "_SharedConstants",
                           per_row: bool = False):
  """Counts (float64) of `values`' zeros and of those without exponent bits.

  The second is None unless `values` are float16. With `per_row`, `values`
  are a stack and each count is a vector, one per row.
  """
  int_type, magnitude = _BITS[values.dtype]
  bits = tf.bitwise.bitwise_and(tf.bitcast(values, int_type),
                                shared.get(int_type, magnitude))
  zeros = shared.count(tf.equal(bits, shared.get(int_type, 0)), per_row)
  if values.dtype != tf.float16:
    return zeros, None
  return zeros, shared.count(tf.equal(tf.bitwise.bitwise_and(
      bits, shared.get(int_type, _FLOAT16_EXPONENT)),
                                      shared.get(int_type, 0)), per_row)


def _size(values: tf.Tensor):
  """Elements of `values`: an int when known while tracing, else float64."""
  size = values.shape.num_elements()
  if size is not None:
    return size
  return tf.cast(tf.size(values, out_type=tf.int64), tf.float64)


class _SharedConstants:
  """The constants of `element_counts`, each made once per trace."""

  def __init__(self):
    self._constants = {}
    self._axes = {}

  def get(self, dtype: tf.DType, value: int) -> tf.Tensor:
    key = (dtype, value)
    if key not in self._constants:
      self._constants[key] = tf.constant(value, dtype)
    return self._constants[key]

  def zero(self) -> tf.Tensor:
    return self.get(tf.float64, 0)

  def count(self, flags: tf.Tensor, per_row: bool = False) -> tf.Tensor:
    """How many of `flags` are True, float64; with `per_row`, per row."""
    counted = tf.cast(flags, tf.float64)
    rank = counted.shape.rank
    if rank is None:
      return tf.reduce_sum(counted)
    first = 1 if per_row else 0
    if (rank, first) not in self._axes:
      self._axes[rank, first] = tf.constant(list(range(first, rank)),
                                            tf.int32)
    return tf.reduce_sum(counted, axis=self._axes[rank, first])


def _dense(grad) -> tf.Tensor:
  """A gradient's values as the dense tensor it stands for."""
  if isinstance(grad, tf.IndexedSlices):
    dense_shape = grad.dense_shape
    rows = (tf_seams.static_value(dense_shape[0])
            if dense_shape is not None else None)
    if rows is None:
      rows = (dense_shape[0] if dense_shape is not None else
              tf.reduce_max(grad.indices) + 1)
    return tf.math.unsorted_segment_sum(grad.values, grad.indices, rows)
  return tf.convert_to_tensor(grad)


def samples(matrix: np.ndarray, log: Log) -> list[tuple[int, dict]]:
  """The samples of one log's matrix: `(ordinal, entry)` pairs."""
  n = len(log.names)
  entries = []
  for row in matrix:
    if row[ORDINAL] == 0:
      continue
    zero = row[FIRST_FRACTION:FIRST_FRACTION + n]
    subnormal = row[FIRST_FRACTION + n:FIRST_FRACTION + 2 * n]
    entries.append((int(row[ORDINAL]), {
        "step": int(row[STEP]),
        "loss_scale": float(row[SCALE]),
        "zero": {name: float(z) for name, z in zip(log.names, zero)
                 if not np.isnan(z)},
        "subnormal": {name: float(s) for name, s, f16 in zip(
            log.names, subnormal, log.float16) if f16 and not np.isnan(s)},
    }))
  return entries
