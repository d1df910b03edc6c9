"""`mplso.meter_underflow` and `mplso.underflow_log`: how much of a gradient is zero."""

from __future__ import annotations

import numbers

import numpy as np
import tensorflow as tf

from mplso._src.diagnostics import host_read
from mplso._src.diagnostics import log_state
from mplso._src.diagnostics import overflow
from mplso._src.diagnostics import underflow_meter


def meter_underflow(optimizer, every: int = 100) -> None:
  """Meters the underflow in an optimizer's gradients, every `every` steps.

  From now on, each step of `optimizer` whose step counter is a multiple of
  `every` (Keras `iterations`, the TF1/contrib `global_step` when
  `apply_gradients` gets one, else a count of the optimizer's steps that
  mplso keeps, from 0) records, if it is finite (applied), per variable:

  - the fraction of its gradient's elements that are exactly zero (+0 or
    -0; a `tf.IndexedSlices` counts as the dense gradient it stands for, so
    rows it does not name are zeros);
  - for float16 gradients, the fraction that are subnormal (nonzero and
    below float16's smallest normal number, 2**-14).

  The gradients are the unscaled ones the optimizer applies. Under a
  `tf.distribute` strategy each replica counts its own gradients, before
  they are summed across replicas, and the counts are added up: a fraction
  is over the elements of every replica's gradient (the mean of the
  replicas' fractions).

  It happens in the graph, with no host round trip: on every finite step one
  `tf.cond` on `step % every`, whose true branch measures and writes a row;
  a skipped step runs none of it. `mplso.underflow_log(optimizer)` reads the
  samples. Eagerly, in `tf.function`, under XLA (`jit_compile=True`), in TF1
  graphs, and under (MultiWorker)MirroredStrategy.

  Call it before the optimizer's first step is built (traced): a step built
  without the meter has none. Calling it again before then changes `every`.
  The meter is a setting of this Python object: checkpoints, `get_config`
  and `from_config` do not hold it, and its samples are not checkpointed
  (docs/why-skipped.md, "Underflow").

      mplso.meter_underflow(opt, every=100)
      ...  # train
      mplso.underflow_log(opt)[-1]["zero"]  # {"dense/kernel": 0.02, ...}

  Args:
    optimizer: an mplso optimizer of any family (or its `mplso.LossScale`).
    every: the period, in steps: a positive int.

  Raises:
    TypeError: if `every` is not an int.
    ValueError: if `every` is below 1; if `optimizer` is not an mplso
      optimizer; or if a step of `optimizer` was built already.
  """
  if isinstance(every, bool) or not isinstance(every, numbers.Integral):
    raise TypeError(
        "`every` must be an int, the number of steps between two samples "
        f"(1 or more). Received: every={every!r} of type "
        f"{type(every).__name__}.")
  if every < 1:
    raise ValueError(
        "`every` must be 1 or more: the number of steps between two "
        f"samples (every=1 samples every step). Received: every={every!r}.")
  loss_scale = overflow.loss_scale_of(optimizer)
  built = [graph for graph, state in
           log_state.STATES.get(loss_scale, {}).items() if state.logs]
  if built:
    raise ValueError(
        "meter_underflow() must be called before the optimizer's first step "
        "is built: the meter is part of the step's graph, and a step of "
        f"optimizer={optimizer!r} was built already (traced, or run "
        "eagerly). Call mplso.meter_underflow(optimizer, every) right after "
        "making the optimizer (before fit, the first apply_gradients or "
        "minimize).")
  underflow_meter.turn_on(loss_scale, int(every))


def underflow_log(optimizer, session=None) -> list[dict]:
  """Returns the optimizer's most recent underflow samples, oldest first.

  Each sample (up to the last 32) is a dict:

  - `"step"`: the step counter of the sampled step (see `meter_underflow`);
  - `"loss_scale"`: the loss scale the step used;
  - `"zero"`: variable name -> the fraction of its gradient's elements that
    were exactly zero (variables with a None gradient are left out);
  - `"subnormal"`: variable name -> the fraction that were subnormal, for
    the variables whose gradient is float16 only.

  `[]` before the first sample, and for an optimizer that is not metered
  (`mplso.meter_underflow`). Steps built in a TF1 graph are read through a
  session of that graph, as `mplso.overflow_log` reads them.

  Args:
    optimizer: an mplso optimizer of any family (or its `mplso.LossScale`).
    session: for steps built in a TF1 graph, the `tf.compat.v1.Session` (or
      `InteractiveSession`, `MonitoredSession`) to read with; default: the
      default session.

  Returns:
    A list of dicts, oldest first.

  Raises:
    ValueError: if `optimizer` is not an mplso optimizer; if `session` is
      not a TF1 session, or runs another graph than the one the steps were
      built in; or if steps built in a TF1 graph have no open session to be
      read with.
  """
  return read(overflow.loss_scale_of(optimizer), session=session)


def is_metered(optimizer) -> bool:
  """Whether `meter_underflow` was called for `optimizer`'s loss scale."""
  return overflow.loss_scale_of(optimizer) in underflow_meter.METERS


def read(loss_scale, session=None) -> list[dict]:
  """The samples of `loss_scale`'s meter (see `underflow_log`)."""
  meter = underflow_meter.METERS.get(loss_scale)
  states = {} if meter is None else {
      graph: state for graph, state in meter.states.items() if state.logs}
  state, session = host_read.state_to_read(
      states, session, "underflow log", "underflow_log(optimizer)")
  if state is None:
    return []
  matrices = host_read.host_values([log.rows for log in state.logs], session,
                                   "underflow log")
  entries = []
  for log, matrix in zip(state.logs, matrices):
    entries.extend(underflow_meter.samples(matrix, log))
  # Several logs (one loss scale, two lists of variables) keep SAMPLES rows
  # each: the last SAMPLES of all, in the order they were recorded.
  entries.sort(key=lambda e: e[0])
  return [entry for _, entry in entries[-underflow_meter.SAMPLES:]]


def latest(loss_scale) -> dict | None:
  """The newest sample of `loss_scale`'s meter, read eagerly; None if none."""
  samples = read(loss_scale)
  return samples[-1] if samples else None


def latest_tensors(loss_scale) -> dict[str, tf.Tensor]:
  """The newest sample's fractions as tensors of the current graph, by tag.

  Tags `zero_fraction/<variable>` and, for float16 gradients,
  `subnormal_fraction/<variable>`: float64 scalars, NaN before the first
  sample. For the steps built in this graph (or eagerly) so far.

  Raises:
    ValueError: if `loss_scale` is metered but no step of it was built in
      this graph yet (the variables' names are not known before).
  """
  meter = underflow_meter.METERS.get(loss_scale)
  if meter is None:
    return {}
  state = meter.states.get(log_state.context_graph())
  if state is None or not state.logs:
    raise ValueError(
        "The underflow meter's summaries need the optimizer's step built "
        "first: the meter names the variables of the step's gradients. Call "
        "mplso.summary.loss_scale_scalars(optimizer) after minimize() or "
        "apply_gradients().")
  tensors = {}
  for log in state.logs:
    matrix = log.rows.read()
    ordinals = matrix[:, underflow_meter.ORDINAL]
    newest = matrix[tf.argmax(ordinals)]
    empty = tf.equal(tf.reduce_max(ordinals), 0.)
    n = len(log.names)
    first = underflow_meter.FIRST_FRACTION
    for i, name in enumerate(log.names):
      tensors[f"zero_fraction/{name}"] = tf.where(
          empty, tf.constant(np.nan, tf.float64), newest[first + i])
      if log.float16[i]:
        tensors[f"subnormal_fraction/{name}"] = tf.where(
            empty, tf.constant(np.nan, tf.float64), newest[first + n + i])
  return tensors
