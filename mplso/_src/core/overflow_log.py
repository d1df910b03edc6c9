"""The overflow log: which variables and replicas made each skipped step skip.

`apply.guarded_step` calls `recorder(...)` while it builds a step and runs
what it returns in the branch that runs only when the step is skipped, before
the family's own `skip_fn`. A finite step runs none of it (but, in a
`tf.function`, the `Switch` that brings it `scale` when that is a tensor
made outside). For each skipped step:

    kinds = finite.kinds(grads) on every replica  # NaN, Inf or finite
    stall = (stall + 1 if right after the last skip else 1) if at the
            minimum scale else 0
    stall_guard.check(stall, ...)  # raises before anything is written
    rows[count % CAPACITY] = [count + 1, step, scale, per-variable kind,
                              per-replica "non-finite" flag]
    count += 1; nan_steps += any NaN; inf_steps += any Inf and no NaN

State, per loss scale (and per TF1 graph): one row of counters, and a
`Log` of CAPACITY rows per list of variables the loss scale's steps were
built for. The counters are the one count of skipped steps that monitors
and summaries show. Checkpoints never hold it, so they keep exactly TF's
keys; a SavedModel does (`saved_variables`), so that a saved training step
records its skips after restore as before saving.

- Eagerly and in `tf.function`: resource variables on the host, made
  eagerly, that the skip branch captures.
- In a TF1 graph: a hash table, whose every op is made where it is used, so
  that it needs no initializer and nothing for `Saver` to find: a
  `tf.Variable` would need `global_variables_initializer` (and `Saver`
  would save it) or `local_variables_initializer`, which older code may
  never run.

`read(loss_scale)` returns the records, oldest first, as dicts; `counts`
the skipped, NaN and Inf step counts, for monitors and summaries.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import dataclasses
import weakref

import numpy as np
import tensorflow as tf

from mplso._src.core import distribution
from mplso._src.core import finite
from mplso._src.core import stall_guard
from mplso._src.core import tf_seams
from mplso._src.core.scaling import Grads

# Skipped steps kept per log; the oldest is overwritten first.
CAPACITY = 32
# The name scope of every op of a record.
NAME_SCOPE = "mplso_overflow_log"

# Columns of a loss scale's counters.
_COUNT, _STALL, _LAST_STEP, _NAN_STEPS, _INF_STEPS = range(5)
_COUNTERS = 5
# Columns of a record row: its ordinal + 1 (0: empty), then the values.
_ORDINAL, _STEP, _SCALE, _FIRST_KIND = range(4)


class _VariableStore:
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


class _TableStore:
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
    _TableStore._count += 1
    self._shared_name = f"mplso_overflow_log_{_TableStore._count}"
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


def _new_store(shape: tuple[int, int]) -> _VariableStore | _TableStore:
  """A zero matrix: a variable eagerly, a table in a TF1 graph."""
  with tf.init_scope(), tf.device("/cpu:0"):
    if tf.executing_eagerly():
      return _VariableStore(shape)
    return _TableStore(shape)


def _context_graph() -> tf.Graph | None:
  """The TF1 graph that a store made now lives in; None eagerly."""
  with tf.init_scope():
    return (None if tf.executing_eagerly() else
            tf.compat.v1.get_default_graph())


@dataclasses.dataclass
class Log:
  """The records of the steps of one loss scale over one list of variables."""

  names: list[str]
  replicas: list[int | str]
  rows: _VariableStore | _TableStore

  @property
  def width(self) -> int:
    return _FIRST_KIND + len(self.names) + len(self.replicas)


@dataclasses.dataclass
class _State:
  """A loss scale's counters and logs, in one graph (or eagerly)."""

  counters: _VariableStore | _TableStore
  logs: list[Log]
  steps: _VariableStore | _TableStore | None = None  # See `count_step`.


# Per loss scale, per TF1 graph (None: eager), its state.
_STATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _state(loss_scale) -> _State:
  """Returns the state of `loss_scale` in the current context, made once."""
  graph = _context_graph()
  states = _STATES.setdefault(loss_scale, {})
  if graph not in states:
    states[graph] = _State(counters=_new_store((1, _COUNTERS)), logs=[])
  return states[graph]


def saved_variables(loss_scale) -> dict[str, tf.Variable]:
  """The eager log variables of `loss_scale`, by name, for a SavedModel.

  A saved `tf.function` step captures them; the loss scale lists them among
  its SavedModel children (never its checkpoint children).
  """
  state = _STATES.get(loss_scale, {}).get(None)
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
  state = _state(loss_scale)
  if state.steps is None:
    state.steps = _new_store((1, 1))
  value = state.steps.read()
  op = state.steps.write(value + 1.)
  if tf_seams.executing_eagerly():
    op = None
  return value[0, 0], op


def _log_for(loss_scale, names: list[str], replicas: list) -> Log:
  """Returns the log of `loss_scale` for these variables, creating it once."""
  state = _state(loss_scale)
  for log in state.logs:
    if (log.names, log.replicas) == (names, replicas):
      return log
  log = Log(names=names, replicas=replicas, rows=_new_store(
      (CAPACITY, _FIRST_KIND + len(names) + len(replicas))))
  if isinstance(log.rows, _TableStore):
    # `read` runs this op later, maybe once the graph is finalized (as
    # `MonitoredTrainingSession` does): it must exist already. A step never
    # runs it; its name scope keeps it out of a step's op counts.
    with tf.init_scope(), tf.name_scope(NAME_SCOPE):
      log.rows.cached_read()
  state.logs.append(log)
  return log


def variable_name(variable) -> str:
  """A variable's name as users see it: Keras 3's path, or TF's without :0."""
  name = getattr(variable, "path", None) or variable.name
  return name[:-2] if name.endswith(":0") else name


def recorder(
    loss_scale,
    grads: Grads,
    scale: Callable[[], tf.Tensor],
    finite_flags: tf.Tensor | None = None,
    variables: Sequence | None = None,
    step: Callable[[], tf.Tensor] | None = None,
    step_counts_skips: bool = True,
) -> Callable[[], tf.Operation | None]:
  """Returns what a skipped step runs to record itself (and check stalls).

  Args:
    loss_scale: the step's `mplso.LossScale`; its `stall_limit` and
      `min_loss_scale` attributes, where it has them, arm the stall guard.
    grads: the step's unscaled gradients (per replica in cross-replica
      context).
    scale: returns the scale the step used; called inside the branch.
    finite_flags: the finite check's verdict per gradient
      (`distribution.check`), if it has one; it spares the record an Inf
      test per gradient.
    variables: the variables of `grads`, for their names; "gradient i"
      where None.
    step: returns the step counter's value when the step ran; called inside
      the branch, before the family's `skip_fn`.
    step_counts_skips: whether `step` advances on a skipped step too (Keras
      `iterations`), so that consecutive skips have consecutive steps; False
      for a TF1 `global_step`, which only an applied step advances.

  Returns:
    A function that builds the record (and raises the stall error in the
    graph); it returns the op that writes the record.
  """
  grads = list(grads)
  if variables is None:
    names = [f"gradient {i}" for i in range(len(grads))]
  else:
    names = [variable_name(v) for v in variables]
  log = _log_for(loss_scale, names, distribution.replica_names())
  counters = _state(loss_scale).counters
  min_scale = float(getattr(loss_scale, "min_loss_scale", None) or 1.0)
  stall_limit = getattr(loss_scale, "stall_limit", None)

  def record():
    # One name scope, so that op counts can tell these ops apart (they run
    # only on a skipped step; see benchmarks/graph_ops.py).
    with tf.name_scope(NAME_SCOPE):
      return _record(log, counters, grads, finite_flags, scale, step,
                     step_counts_skips, min_scale, stall_limit)

  return record


def _record(log: Log, counters_store, grads, finite_flags, scale, step,
            step_counts_skips, min_scale, stall_limit):
  kinds = distribution.grad_kinds(grads, finite_flags)  # [replicas, vars]
  nan = tf.reduce_any(tf.equal(kinds, finite.HAS_NAN), axis=0)
  inf = tf.logical_and(tf.reduce_any(tf.equal(kinds, finite.HAS_INF), axis=0),
                       tf.logical_not(nan))
  replica_bad = tf.reduce_any(tf.not_equal(kinds, finite.FINITE), axis=1)
  scale = tf.cast(scale(), tf.float64)
  step = tf.cast(step(), tf.float64)

  counters = counters_store.read()[0]
  count = counters[_COUNT]
  consecutive = tf.logical_and(
      count > 0,
      tf.equal(step, counters[_LAST_STEP] + (1. if step_counts_skips else 0.)))
  at_min = scale <= min_scale
  stall = tf.where(at_min,
                   tf.where(consecutive, counters[_STALL] + 1., 1.), 0.)
  checks = []
  if stall_limit is not None and not tf_seams.in_xla_context():
    with tf.device("/cpu:0"):  # Strings and Assert: host ops.
      guard = stall_guard.check(
          stall, stall_limit, names=log.names, nan=nan, inf=inf, scale=scale,
          min_loss_scale=min_scale)
      if guard is not None:
        checks.append(guard)

  def as_f64(flags):
    return tf.cast(flags, tf.float64)

  any_nan = tf.reduce_any(nan)
  any_inf = tf.logical_and(tf.reduce_any(inf), tf.logical_not(any_nan))
  kind_column = tf.where(nan, float(finite.HAS_NAN),
                         tf.where(inf, float(finite.HAS_INF), 0.))
  row = tf.concat([tf.stack([count + 1., step, scale]), as_f64(kind_column),
                   as_f64(replica_bad)], axis=0)
  new_counters = tf.stack([
      count + 1., stall, step, counters[_NAN_STEPS] + as_f64(any_nan),
      counters[_INF_STEPS] + as_f64(any_inf)])
  index = tf.cast(tf.math.floormod(count, CAPACITY), tf.int32)
  rows = tf.tensor_scatter_nd_update(log.rows.read(), [[index]], row[None])
  with tf.control_dependencies(checks):
    return tf.group(log.rows.write(rows),
                    counters_store.write(new_counters[None]))


# How to read a TF1 graph's log, for the errors that lack a usable session.
_PASS_A_SESSION = (
    "Pass session=sess, an open tf.compat.v1.Session of the graph the "
    "optimizer's step was built in (read it before the `with "
    "tf.compat.v1.Session() as sess:` block ends), or call it inside `with "
    "sess.as_default():`.")


def _host_values(stores, session) -> list[np.ndarray]:
  """Reads the matrices of `stores` to the host (through `session` if any).

  Raises:
    ValueError: if `session` is closed.
  """
  if session is None:
    return [store.read().numpy() for store in stores]
  with session.graph.as_default():
    reads = [store.cached_read() for store in stores]
  try:
    if hasattr(session, "run_step_fn"):
      # A MonitoredSession: read with its raw session, so that its hooks
      # do not take the read for a training step.
      return session.run_step_fn(
          lambda step_context: step_context.session.run(reads))
    return session.run(reads)
  except RuntimeError as e:  # The only one `run` raises here: closed.
    raise _closed(session) from e


def _closed(session) -> ValueError:
  return ValueError(
      "`session` must be open to read the overflow log through it; it is "
      f"closed. Received: session={session!r}. {_PASS_A_SESSION}")


def _graph_of(session) -> tf.Graph:
  """Returns the graph that `session` runs.

  Raises:
    ValueError: if `session` is not a TF1 session, or is a closed
      `MonitoredSession` (whose graph is then None).
  """
  graph = getattr(session, "graph", None)
  if not callable(getattr(session, "run", None)) or not (
      graph is None or isinstance(graph, tf.Graph)):
    raise ValueError(
        "`session` must be a tf.compat.v1.Session (or another TF1 session: "
        "InteractiveSession, MonitoredSession) to read a TF1 graph's "
        f"overflow log with, or None. Received: session={session!r}. "
        f"{_PASS_A_SESSION}")
  if graph is None:
    raise _closed(session)
  return graph


def _where(graph: tf.Graph | None) -> str:
  return ("eagerly or in a tf.function" if graph is None else
          f"in the TF1 graph {graph!r}")


def read(loss_scale, session=None) -> list[dict]:
  """Returns the last skipped steps of `loss_scale` (up to CAPACITY), oldest first.

  Eagerly and in `tf.function` no session is needed. The steps built in a
  TF1 graph are read through a session of that graph: `session`, else the
  default session (eagerly too, where nothing was built eagerly).

  Args:
    loss_scale: the loss scale whose steps were recorded.
    session: in a TF1 graph, the session to read with (default: the default
      session).

  Raises:
    ValueError: if `session` is not a TF1 session, or runs another graph
      than the one the steps were built in; or if steps built in a TF1
      graph have no open session to be read with (none given and no
      default one, or a closed one).
  """
  # The graphs (None: eager) where steps of `loss_scale` were built.
  states = {graph: state for graph, state in
            _STATES.get(loss_scale, {}).items() if state.logs}
  built_in = " and ".join(_where(graph) for graph in states)
  if session is None:
    session = tf.compat.v1.get_default_session()
    if tf.executing_eagerly() and (None in states or not states):
      session = None  # Built eagerly (or not yet): read eagerly.
    elif session is None:
      raise ValueError(
          "Reading the overflow log of a TF1 graph needs a session: none was "
          "given and there is no default session. "
          + (f"The optimizer's steps were built {built_in}. " if states
             else "") + _PASS_A_SESSION)
  graph = None if session is None else _graph_of(session)
  if not states:
    return []
  if graph not in states:
    raise ValueError(
        "`session` must run the graph the optimizer's steps were built in; "
        f"they were built {built_in}, and session={session!r} runs the "
        f"graph {graph!r}. "
        + (_PASS_A_SESSION if any(g is not None for g in states) else
           "Call overflow_log(optimizer) without a session, outside any TF1 "
           "graph."))
  state = states[graph]
  matrices = _host_values([log.rows for log in state.logs], session)
  entries = []
  for log, matrix in zip(state.logs, matrices):
    for row in matrix:
      if row[_ORDINAL] == 0:
        continue
      kinds = row[_FIRST_KIND:_FIRST_KIND + len(log.names)]
      flags = row[_FIRST_KIND + len(log.names):log.width]
      entries.append((int(row[_ORDINAL]), {
          "step": int(row[_STEP]),
          "loss_scale": float(row[_SCALE]),
          "nan": [n for n, k in zip(log.names, kinds) if k == finite.HAS_NAN],
          "inf": [n for n, k in zip(log.names, kinds) if k == finite.HAS_INF],
          "replicas": [r for r, f in zip(log.replicas, flags) if f],
      }))
  # Several logs (one loss scale, two lists of variables) keep CAPACITY
  # rows each: the last CAPACITY of all, in the order they were recorded.
  entries.sort(key=lambda e: e[0])
  return [entry for _, entry in entries[-CAPACITY:]]


def counts(loss_scale) -> dict[str, tf.Tensor]:
  """Returns the skipped steps, and those with a NaN or with Infs only.

  float64 scalars: `skipped_steps`, `nan_steps` (a gradient held a NaN) and
  `inf_steps` (a gradient held an Inf, none a NaN), counted since the
  process started (state is not checkpointed); every skipped step is one of
  the last two. Call it before or after the step is built; in a TF1 graph
  each call adds one read op.
  """
  counters = _state(loss_scale).counters.read()[0]
  return {"skipped_steps": counters[_COUNT],
          "nan_steps": counters[_NAN_STEPS],
          "inf_steps": counters[_INF_STEPS]}
