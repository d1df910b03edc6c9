"""An opt-in, never-checkpointed count of the steps an optimizer skipped.

A monitor (`mplso.keras.LossScaleMonitor`, `mplso.summary.loss_scale_scalars`)
calls `watch(loss_scale)` before the training step is built; from then on
every step that `apply.guarded_step` builds for that loss scale also adds one
to the counter when it skips. The increment is one in-graph `assign_add` next
to the loss-scale update: nothing is read back to the host during the step.

The counter is deliberately kept out of the loss scale's checkpointed state
(its `variables`, `tf.train.Checkpoint` children and `tf.compat.v1.train.Saver`
defaults), so checkpoints stay interchangeable with TF's own classes and a
monitor can be added to, or removed from, a run that resumes. It counts the
skips of this process since `watch` was first called.

>>> import mplso
>>> loss_scale = mplso.FixedLossScale(8)
>>> skipped = watch(loss_scale)
>>> _ = record(loss_scale, tf.constant(False))
>>> _ = record(loss_scale, tf.constant(True))
>>> int(skipped)
1
"""

from __future__ import annotations

import weakref

import tensorflow as tf

from mplso._src.core import tf_seams

# Keyed by loss-scale object; a counter lives as long as its loss scale.
_COUNTERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Loss scales for which a graph step was built while nothing watched them.
_BUILT_UNCOUNTED: weakref.WeakSet = weakref.WeakSet()


def counter(loss_scale) -> tf.Variable | None:
  """Returns the skipped-step counter of `loss_scale`, or None if unwatched."""
  return _COUNTERS.get(loss_scale)


def watch(loss_scale) -> tf.Variable:
  """Returns the int64 skipped-step counter of `loss_scale`, creating it once.

  The variable is created outside any function being traced. In TF1 graph
  mode it is a local variable (`tf.compat.v1.GraphKeys.LOCAL_VARIABLES`):
  `local_variables_initializer()` and `MonitoredTrainingSession` initialise
  it, and the default `Saver` leaves it out.
  """
  existing = _COUNTERS.get(loss_scale)
  if existing is not None:
    return existing
  with tf.init_scope():
    # Eagerly the collections are ignored; this is a plain tf.Variable.
    variable = tf.compat.v1.Variable(
        0, dtype=tf.int64, trainable=False, name="mplso_skipped_steps",
        use_resource=True,
        collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
  _COUNTERS[loss_scale] = variable
  return variable


def built_uncounted(loss_scale) -> bool:
  """Returns True if a graph step of `loss_scale` was built before `watch`."""
  return loss_scale in _BUILT_UNCOUNTED


def record(loss_scale, should_apply: tf.Tensor | bool) -> tf.Operation | None:
  """Adds one to the counter of `loss_scale` when `should_apply` is False.

  Returns the increment op in graph mode, None in eager mode (it has run) or
  when `loss_scale` is not watched.
  """
  variable = _COUNTERS.get(loss_scale)
  if variable is None:
    if not tf_seams.executing_eagerly():
      _BUILT_UNCOUNTED.add(loss_scale)
    return None
  if isinstance(should_apply, bool):
    if should_apply:
      return None
    skipped = tf.constant(1, tf.int64)
  else:
    skipped = tf.cast(tf.logical_not(should_apply), tf.int64)
  op = variable.assign_add(skipped, read_value=False)
  return None if tf_seams.executing_eagerly() else op
