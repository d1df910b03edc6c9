"""`mplso.overflow_log`: the recent skipped steps of an optimizer, and why."""

from __future__ import annotations

from mplso._src.core import finite
from mplso._src.diagnostics import host_read
from mplso._src.diagnostics import log_state


def _is_loss_scale(value) -> bool:
  """Whether `value` is an `mplso.LossScale` (what every mplso step takes)."""
  return callable(getattr(value, "update_from_flag", None))


def loss_scale_of(optimizer):
  """Returns the `mplso.LossScale` of an mplso optimizer (or the loss scale).

  Raises:
    ValueError: if `optimizer` has no mplso loss scale.
  """
  if _is_loss_scale(optimizer):
    return optimizer
  # A Keras wrapper built in the TF 2.4+ dialect has a tensor as its public
  # `loss_scale`; every mplso optimizer keeps the object in `_loss_scale`.
  loss_scale = getattr(optimizer, "_loss_scale", None)
  if not _is_loss_scale(loss_scale):
    loss_scale = getattr(optimizer, "loss_scale", None)
  if not _is_loss_scale(loss_scale):
    raise ValueError(
        "`optimizer` must be an mplso optimizer (MixedPrecisionLossScale"
        "Optimizer, mplso.contrib.LossScaleOptimizer or "
        "mplso.keras.LossScaleOptimizer) or an mplso.LossScale. Received: "
        f"optimizer={optimizer!r}.")
  return loss_scale


def overflow_log(optimizer, session=None) -> list[dict]:
  """Returns the optimizer's most recent skipped steps, oldest first.

  Each skipped step (up to the last 32) is a dict:

  - `"step"`: the step counter when the step ran: Keras `iterations`, the
    TF1/contrib `global_step` when `apply_gradients` got one, else a count
    of the optimizer's steps that mplso keeps (from 0);
  - `"loss_scale"`: the loss scale the step used;
  - `"nan"`: the names of the variables whose gradient held a NaN;
  - `"inf"`: the names of the variables whose gradient held +-Inf and no
    NaN;
  - `"replicas"`: the replicas that saw a non-finite gradient (replica ids,
    `"worker:replica"` under multi-worker strategies; `[0]` without a
    strategy). Where the family all-reduces the gradients before the check
    (tf_keras's new optimizers), every replica sees the NaN of one.

  `[]` when no step was skipped. The record is written in the graph, only in
  the branch that a skipped step runs: a finite step runs none of it (in a
  `tf.function` with a dynamic scale, one `Switch` brings the scale to that
  branch; docs/why-skipped.md, "What it costs"). It is
  not checkpointed and starts empty in every process. Steps compiled with
  XLA (`jit_compile=True`) are recorded too.

      log = mplso.overflow_log(opt)
      # [{"step": 41, "loss_scale": 32768.0, "nan": [], "inf": ["dense/kernel"],
      #   "replicas": [0]}]

  Steps built eagerly or in a `tf.function` are read without a session.
  Steps built in a TF1 graph are read through an open session of that
  graph (each session has its own log): call it before the `with
  tf.compat.v1.Session() as sess:` block ends.

  Args:
    optimizer: an mplso optimizer of any family (or its `mplso.LossScale`).
    session: for steps built in a TF1 graph, the `tf.compat.v1.Session` (or
      `InteractiveSession`, `MonitoredSession`) to read with; default: the
      default session. A `MonitoredSession`'s hooks do not run for the read.

  Returns:
    A list of dicts, oldest first.

  Raises:
    ValueError: if `optimizer` is not an mplso optimizer; if `session` is
      not a TF1 session, or runs another graph than the one the steps were
      built in (steps built eagerly take none); or if steps built in a TF1
      graph have no open session to be read with (none given and no
      default one, or a closed one).
  """
  return read(loss_scale_of(optimizer), session=session)


def read(loss_scale, session=None) -> list[dict]:
  """Returns the last skipped steps of `loss_scale` (up to log_state.CAPACITY), oldest first.

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
            log_state.STATES.get(loss_scale, {}).items() if state.logs}
  state, session = host_read.state_to_read(
      states, session, "overflow log", "overflow_log(optimizer)")
  if state is None:
    return []
  matrices = host_read.host_values([log.rows for log in state.logs], session,
                                   "overflow log")
  entries = []
  for log, matrix in zip(state.logs, matrices):
    for row in matrix:
      if row[log_state.ORDINAL] == 0:
        continue
      kinds = row[log_state.FIRST_KIND:log_state.FIRST_KIND + len(log.names)]
      flags = row[log_state.FIRST_KIND + len(log.names):log.width]
      entries.append((int(row[log_state.ORDINAL]), {
          "step": int(row[log_state.STEP]),
          "loss_scale": float(row[log_state.SCALE]),
          "nan": [n for n, k in zip(log.names, kinds) if k == finite.HAS_NAN],
          "inf": [n for n, k in zip(log.names, kinds) if k == finite.HAS_INF],
          "replicas": [r for r, f in zip(log.replicas, flags) if f],
      }))
  # Several logs (one loss scale, two lists of variables) keep CAPACITY
  # rows each: the last CAPACITY of all, in the order they were recorded.
  entries.sort(key=lambda e: e[0])
  return [entry for _, entry in entries[-log_state.CAPACITY:]]
