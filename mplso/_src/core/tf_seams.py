"""The one place that touches TensorFlow internals and the eager/graph split.

A TensorFlow upgrade that moves a private name should only need this module
changed.
"""

from __future__ import annotations

import importlib

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


def graph_rewrite_state():
  """Returns TF's module that tells new Sessions to run the AMP rewrite.

  `tf.compat.v1.Session` turns on `auto_mixed_precision` in its config when
  this module says the rewrite is enabled, as TF 1.14-2.3's
  `enable_mixed_precision_graph_rewrite` arranged; tf_keras's
  `set_global_policy` reads it too.
  """
  return importlib.import_module(
      "tensorflow.python.training.experimental.mixed_precision_global_state")


def tf_v1_loss_scale_optimizer_class() -> type:
  """Returns TF's own TF1 `MixedPrecisionLossScaleOptimizer` class.

  Its public spellings point at mplso's class while `mplso.compat` is
  installed; this is TF's class whatever they point at.
  """
  return importlib.import_module(
      "tensorflow.python.training.experimental.loss_scale_optimizer"
  ).MixedPrecisionLossScaleOptimizer
