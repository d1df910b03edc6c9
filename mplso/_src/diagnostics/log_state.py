"""The overflow log's state: per loss scale, its counters and logs.

Per loss scale (and per TF1 graph), one row of counters and a `Log` of
CAPACITY rows per list of variables the loss scale's steps were built for.
The counters are the one count of skipped steps that monitors and summaries
show (`counts`). Checkpoints never hold any of it, so they keep exactly TF's
keys; a SavedModel does (`saved_variables`), so that a saved training step
records its skips after restore as before saving.

- Eagerly and in `tf.function`: resource variables on the host, made
  eagerly, that the skip branch captures.
- In a TF1 graph: a hash table, whose every op is made where it is used, so
  that it needs no initializer and nothing for `Saver` to find: a
  `tf.Variable` would need `global_variables_initializer` (and `Saver`
  would save it) or `local_variables_initializer`, which older code may
  never run.
"""

from __future__ import annotations

import dataclasses
import weakref

import tensorflow as tf

from mplso._src.core import tf_seams

# Skipped steps kept per log; the oldest is overwritten first.
CAPACITY = 32
# The name scope of every op of a record.
NAME_SCOPE = "mplso_overflow_log"

# Columns of a loss scale's counters.
COUNT, STALL, LAST_STEP, NAN_STEPS, INF_STEPS = range(5)
COUNTERS = 5
# Columns of a record row: its ordinal + 1 (0: empty), then the values.
ORDINAL, STEP, SCALE, FIRST_KIND = range(4)


class VariableStore:
  """The log's matrix in a resource variable (eager, `tf.function`, XLA).

  Made eagerly, on the host, as zeros, so that a branch may read it before
  anything was written; a step captures it as it captures any variable. It
  is made outside any strategy's variable creator (each worker keeps its
  own log), and only a SavedModel tracks it (`saved_variables`), so that a
  saved training step brings it back while checkpoints keep TF's keys.
  """

  def __init__(self, shape: tuple[int, int]):
    with tf.device("/cpu:0"):
      self.variable = tf_seams.local_variable(
          tf.zeros(shape, tf.float64), name="mplso_overflow_log")

  def read(self) -> tf.Tensor:
    with tf.device("/cpu:0"):
      return self.variable.read_value()

  def write(self, matrix: tf.Tensor):
    with tf.device("/cpu:0"):
      return self.variable.assign(matrix, read_value=False)


class TableStore:
  """The log's matrix in a hash table of rows (TF1 graphs).

  Every op, the table's handle included, is made where it is used (raw ops
  on a shared name), so that inside the skip branch all of them are dead on
  a finite step, and nothing is added to the graph's collections (a
  `tf.lookup` table would put itself in `SAVEABLE_OBJECTS`, where `Saver`
  looks). A missing row reads as zeros, so it works before anything was
  written, with no initializer.
  """

  _count = 0

  def __init__(self, shape: tuple[int, int]):
    self._shape = shape
    TableStore._count += 1
    self._shared_name = f"mplso_overflow_log_{TableStore._count}"
    self._read = None

  def _handle(self) -> tf.Tensor:
    with tf.device("/cpu:0"):  # Hash tables live on the host.
      return tf.raw_ops.MutableHashTableOfTensorsV2(
          key_dtype=tf.int64, value_dtype=tf.float64,
          shared_name=self._shared_name, value_shape=self._shape[1:])

  def _rows(self) -> tf.Tensor:
    return tf.range(self._shape[0], dtype=tf.int64)

  def read(self) -> tf.Tensor:
    with tf.device("/cpu:0"):
      values = tf.raw_ops.LookupTableFindV2(
          table_handle=self._handle(),
          keys=self._rows(),
          default_value=tf.zeros(self._shape[1:], tf.float64))
    values.set_shape(self._shape)
    return values

  def cached_read(self) -> tf.Tensor:
    """One read op for `read(...)` calls from the host."""
    if self._read is None:
      self._read = self.read()
    return self._read

  def write(self, matrix: tf.Tensor):
    with tf.device("/cpu:0"):
      return tf.raw_ops.LookupTableInsertV2(
          table_handle=self._handle(),
          keys=self._rows(), values=matrix)


def new_store(shape: tuple[int, int]) -> VariableStore | TableStore:
  """A zero matrix: a variable eagerly, a table in a TF1 graph."""
  with tf.init_scope():
    if tf.executing_eagerly():
      return VariableStore(shape)
    return TableStore(shape)


def context_graph() -> tf.Graph | None:
  """The TF1 graph that a store made now lives in; None eagerly."""
  with tf.init_scope():
    return (None if tf.executing_eagerly() else
            tf.compat.v1.get_default_graph())


@dataclasses.dataclass
class Log:
  """The records of the steps of one loss scale over one list of variables."""

  names: list[str]
  replicas: list[int | str]
  rows: VariableStore | TableStore

  @property
  def width(self) -> int:
    return FIRST_KIND + len(self.names) + len(self.replicas)


@dataclasses.dataclass
class State:
  """A loss scale's counters and logs, in one graph (or eagerly)."""

  counters: VariableStore | TableStore
  logs: list[Log]
  steps: VariableStore | TableStore | None = None  # See `count_step`.


# Per loss scale, per TF1 graph (None: eager), its state.
STATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def state_of(loss_scale) -> State:
  """Returns the state of `loss_scale` in the current context, made once."""
  graph = context_graph()
  states = STATES.setdefault(loss_scale, {})
  if graph not in states:
    states[graph] = State(counters=new_store((1, COUNTERS)), logs=[])
  return states[graph]


def saved_variables(loss_scale) -> dict[str, tf.Variable]:
  """The eager log variables of `loss_scale`, by name, for a SavedModel.

  A saved `tf.function` step captures them; the loss scale lists them among
  its SavedModel children (never its checkpoint children).
  """
  state = STATES.get(loss_scale, {}).get(None)
  if state is None:
    return {}
  stores = {"overflow_log_counters": state.counters,
            "overflow_log_steps": state.steps}
  stores.update({f"overflow_log_{i}": log.rows
                 for i, log in enumerate(state.logs)})
  return {name: store.variable for name, store in stores.items()
          if store is not None}


def count_step(loss_scale) -> tuple[tf.Tensor, tf.Operation | None]:
  """Counts a step of `loss_scale` for a family that has no step counter.

  Returns the step's number (from 0, as a float64 tensor) and the op that
  advances the count (None eagerly, where it has run). Unlike recording,
  this runs on every step: only steps without a counter of their own (a
  TF1 `apply_gradients` without `global_step`) pay for it.
  """
  state = state_of(loss_scale)
  if state.steps is None:
    state.steps = new_store((1, 1))
  value = state.steps.read()
  # Eagerly the write has run, and returns None.
  return value[0, 0], state.steps.write(value + 1.)


def log_for(loss_scale, names: list[str], replicas: list) -> Log:
  """Returns the log of `loss_scale` for these variables, creating it once."""
  state = state_of(loss_scale)
  for log in state.logs:
    if (log.names, log.replicas) == (names, replicas):
      return log
  log = Log(names=names, replicas=replicas, rows=new_store(
      (CAPACITY, FIRST_KIND + len(names) + len(replicas))))
  if isinstance(log.rows, TableStore):
    # `read` runs this op later, maybe once the graph is finalized (as
    # `MonitoredTrainingSession` does): it must exist already. A step never
    # runs it; its name scope keeps it out of a step's op counts.
    with tf.init_scope(), tf.name_scope(NAME_SCOPE):
      log.rows.cached_read()
  state.logs.append(log)
  return log


def counts(loss_scale) -> dict[str, tf.Tensor]:
  """Returns the skipped steps, and those with a NaN or with Infs only.

  float64 scalars: `skipped_steps`, `nan_steps` (a gradient held a NaN) and
  `inf_steps` (a gradient held an Inf, none a NaN), counted since the
  process started (state is not checkpointed); every skipped step is one of
  the last two. Call it before or after the step is built; in a TF1 graph
  each call adds one read op.
  """
  counters = state_of(loss_scale).counters.read()[0]
  return {"skipped_steps": counters[COUNT],
          "nan_steps": counters[NAN_STEPS],
          "inf_steps": counters[INF_STEPS]}
