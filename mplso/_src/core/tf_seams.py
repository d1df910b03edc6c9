"""The one place that touches TensorFlow internals and the eager/graph split.

A TensorFlow upgrade that moves a private name should only need this module
changed.
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.ops import control_flow_util  # pylint: disable=g-direct-tensorflow-import

# Base class of everything `tf.train.Checkpoint` and SavedModel can track.
Trackable = tf.__internal__.tracking.Trackable

# Makes a wrapper share the checkpoint layout of the object it wraps.
DelegatingTrackableMixin = tf.__internal__.tracking.DelegatingTrackableMixin

smart_cond = tf.__internal__.smart_cond.smart_cond


def in_xla_context() -> bool:
  """Returns True while tracing code that XLA will compile (`jit_compile`)."""
  if tf.executing_eagerly():
    return False
  return control_flow_util.GraphOrParentsInXlaContext(
      tf.compat.v1.get_default_graph())


def in_control_flow_v1_context() -> bool:
  """True inside a control flow v1 `cond` or loop (or a TPU/XLA rewrite)."""
  graph = tf.compat.v1.get_default_graph()
  return graph._get_control_flow_context() is not None  # pylint: disable=protected-access


def add_control_input(op: tf.Operation, control: tf.Operation) -> None:
  """Makes `op`, already built, run after `control` (and die with it)."""
  op._add_control_input(control)  # pylint: disable=protected-access


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


# Keras families. Their private names are imported when first asked for, so
# that `import mplso` never pulls in Keras.

no_automatic_dependency_tracking = (
    tf.__internal__.tracking.no_automatic_dependency_tracking)


def tf_keras_callable_list(items: list) -> list:
  """Returns `items` as tf_keras's list that `optimizer.variables()` calls."""
  from tf_keras.src.optimizers import optimizer  # pylint: disable=g-import-not-at-top
  return optimizer.CallableList(items)


def tf_keras_filter_empty_gradients(grads_and_vars) -> tuple:
  """Drops pairs without a gradient as tf_keras does (logs, or raises if all)."""
  from tf_keras.src.optimizers import utils  # pylint: disable=g-import-not-at-top
  return utils.filter_empty_gradients(grads_and_vars)
