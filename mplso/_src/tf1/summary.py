"""TF1 summaries of an optimizer's loss scale and skipped steps."""

from __future__ import annotations

import re

import tensorflow as tf

from mplso._src.diagnostics import log_state
from mplso._src.diagnostics import overflow
from mplso._src.diagnostics import underflow


def _scalar(tag: str, value, collections, family) -> tf.Tensor:
  """A scalar summary whose tag is exactly `family/tag`.

  `tf.compat.v1.summary.scalar` derives the tag from a unique op name, so it
  would read `loss_scale_1` wherever the graph already has a `loss_scale`
  (the contrib managers' variable, for one); the tag here is stable.
  """
  if family:
    tag = f"{family}/{tag}"
  summary = tf.raw_ops.ScalarSummary(
      tags=tf.constant(tag), values=tf.cast(value, tf.float32),
      name=re.sub(r"[^A-Za-z0-9_.-]", "_", tag))
  for key in collections or [tf.compat.v1.GraphKeys.SUMMARIES]:
    tf.compat.v1.add_to_collection(key, summary)
  return summary


def loss_scale_scalars(optimizer, collections=None, family=None):
  """Adds `tf.compat.v1.summary` scalars for the loss scale and skipped steps.

  For TF1 graph code; call it before or after `minimize`. The summaries are
  added to `collections` (default `tf.compat.v1.GraphKeys.SUMMARIES`, so
  `tf.compat.v1.summary.merge_all()` picks them up):

  - `loss_scale`: the current loss scale (float32);
  - `skipped_steps`: steps skipped because a gradient was NaN or Inf;
  - `nan_steps`: of those, the steps with a NaN gradient, and `inf_steps`:
    the steps with an Inf gradient and no NaN;
  - with the underflow meter on (`mplso.meter_underflow`), per variable of
    the steps built so far, its newest sample (NaN before the first):
    `zero_fraction/<variable>` and, for float16 gradients,
    `subnormal_fraction/<variable>`. Call it after `minimize` then.

  The counts come from the overflow log (`mplso.overflow_log(optimizer,
  session)` names the variables), which every step keeps in the graph: it
  needs no initializer, and `tf.compat.v1.train.Saver` does not save it, so
  checkpoints are unchanged.

  In eager mode the summaries are computed at once and nothing is written:
  use `mplso.keras.LossScaleMonitor` with Keras, or `tf.summary` yourself.

  Args:
    optimizer: an mplso optimizer of any family, or an `mplso.LossScale`.
    collections: graph collections for the summaries (TF1's argument).
    family: optional prefix of the tags (`family/loss_scale`), TF1's
      argument.

  Returns:
    The list of the summary ops added.

  Raises:
    ValueError: if `optimizer` has no mplso loss scale; or if it is metered
      and no step of it was built in this graph yet.
  """
  loss_scale = overflow.loss_scale_of(optimizer)
  metered = underflow.latest_tensors(loss_scale)  # Raises before adding any.
  summaries = [_scalar("loss_scale", loss_scale(), collections, family)]
  for tag, value in {**log_state.counts(loss_scale), **metered}.items():
    summaries.append(_scalar(tag, value, collections, family))
  return summaries
