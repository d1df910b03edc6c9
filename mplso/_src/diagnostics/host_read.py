"""Reading a log kept in the graph back to the host: eagerly, or via a session.

The overflow log and the underflow meter keep their rows per TF1 graph
(None: eagerly and in `tf.function`). `state_to_read` picks the state that
a read means (the session's graph, or the eager one) and says clearly what
is wrong when there is none to read with; `host_values` reads matrices.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

# How to read a TF1 graph's log, for the errors that lack a usable session.
_PASS_A_SESSION = (
    "Pass session=sess, an open tf.compat.v1.Session of the graph the "
    "optimizer's step was built in (read it before the `with "
    "tf.compat.v1.Session() as sess:` block ends), or call it inside `with "
    "sess.as_default():`.")


def host_values(stores, session, log: str) -> list[np.ndarray]:
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
    raise _closed(session, log) from e


def _closed(session, log: str) -> ValueError:
  return ValueError(
      f"`session` must be open to read the {log} through it; it is "
      f"closed. Received: session={session!r}. {_PASS_A_SESSION}")


def _graph_of(session, log: str) -> tf.Graph:
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
        f"{log} with, or None. Received: session={session!r}. "
        f"{_PASS_A_SESSION}")
  if graph is None:
    raise _closed(session, log)
  return graph


def _where(graph: tf.Graph | None) -> str:
  return ("eagerly or in a tf.function" if graph is None else
          f"in the TF1 graph {graph!r}")


def state_to_read(states: dict, session, log: str, call: str):
  """Returns `(state, session)`: what to read, and the session to read with.

  Eagerly and in `tf.function` no session is needed. The steps built in a
  TF1 graph are read through a session of that graph: `session`, else the
  default session (eagerly too, where nothing was built eagerly).

  Args:
    states: per graph where steps were built (None: eager), its state.
    session: the session the caller was given, or None.
    log: the log's name in messages ("overflow log").
    call: the call that reads it eagerly ("overflow_log(optimizer)").

  Returns:
    The state (None when no step was built) and the session (None eagerly).

  Raises:
    ValueError: if `session` is not a TF1 session, or runs another graph
      than the one the steps were built in; or if steps built in a TF1
      graph have no open session to be read with (none given and no
      default one, or a closed one).
  """
  built_in = " and ".join(_where(graph) for graph in states)
  if session is None:
    session = tf.compat.v1.get_default_session()
    if tf.executing_eagerly() and (None in states or not states):
      session = None  # Built eagerly (or not yet): read eagerly.
    elif session is None:
      raise ValueError(
          f"Reading the {log} of a TF1 graph needs a session: none was "
          "given and there is no default session. "
          + (f"The optimizer's steps were built {built_in}. " if states
             else "") + _PASS_A_SESSION)
  graph = None if session is None else _graph_of(session, log)
  if not states:
    return None, session
  if graph not in states:
    raise ValueError(
        "`session` must run the graph the optimizer's steps were built in; "
        f"they were built {built_in}, and session={session!r} runs the "
        f"graph {graph!r}. "
        + (_PASS_A_SESSION if any(g is not None for g in states) else
           f"Call {call} without a session, outside any TF1 graph."))
  return states[graph], session
