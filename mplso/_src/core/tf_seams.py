"""The one place that touches TensorFlow internals and the eager/graph split.

A TensorFlow upgrade that moves a private name should only need this module
changed.
"""

from __future__ import annotations

import tensorflow as tf

# Base class of everything `tf.train.Checkpoint` and SavedModel can track.
Trackable = tf.__internal__.tracking.Trackable

# Makes a wrapper share the checkpoint layout of the object it wraps.
DelegatingTrackableMixin = tf.__internal__.tracking.DelegatingTrackableMixin

smart_cond = tf.__internal__.smart_cond.smart_cond


def executing_eagerly() -> bool:
  """Returns True when ops run immediately (eager, outside any graph)."""
  return tf.executing_eagerly()


def static_value(tensor):
  """Returns the value of `tensor` if it is known without running anything.

  Eager tensors return None on purpose: reading one would be a host round
  trip, which the per-step path must never do.
  """
  if isinstance(tensor, (int, float)):
    return tensor
  if not tf.is_symbolic_tensor(tensor):
    return None
  return tf.get_static_value(tensor)


def v1_optimizer_use_locking(opt: tf.compat.v1.train.Optimizer) -> bool:
  """Returns the `use_locking` a TF1 optimizer was built with."""
  return opt._use_locking  # pylint: disable=protected-access
