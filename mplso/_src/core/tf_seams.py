"""The one place that touches TensorFlow internals and the eager/graph split.

A TensorFlow upgrade that moves a private name should only need this module
changed. Every private name is looked up through `_internal` (at import) or
`_private` (at call time): where a TensorFlow release no longer has it, mplso
fails loudly, naming the internal and the TensorFlow version, instead of with
a bare AttributeError somewhere inside a training step.
"""

from __future__ import annotations

from collections.abc import Callable
import importlib

import tensorflow as tf

# The TensorFlow versions mplso is tested with (setup.py pins them).
TESTED_TF = "TensorFlow 2.21 (and the tf-nightly of .ci/nightly)"


def _missing(name: str) -> str:
  return (f"mplso needs the TensorFlow internal `{name}`, which TensorFlow "
          f"{tf.__version__} does not have. mplso is tested with {TESTED_TF}: "
          "install a tested TensorFlow (pip install "
          "'tensorflow>=2.21,<2.24'), or report this TensorFlow version to "
          "mplso.")


def _internal(module: str, attribute: str):
  """Returns `module.attribute` of TensorFlow; ImportError if it is gone."""
  try:
    value = importlib.import_module(module)
    for part in attribute.split("."):
      value = getattr(value, part)
  except (ImportError, AttributeError) as e:
    raise ImportError(_missing(f"{module}.{attribute}")) from e
  return value


def _private(obj, attribute: str, owner: str):
  """Returns `obj.attribute`, a private TF attribute of an `owner` object."""
  try:
    return getattr(obj, attribute)
  except AttributeError as e:
    raise AttributeError(_missing(f"{owner}.{attribute}")) from e


# Base class of everything `tf.train.Checkpoint` and SavedModel can track.
Trackable = _internal("tensorflow", "__internal__.tracking.Trackable")

# Makes a wrapper share the checkpoint layout of the object it wraps.
DelegatingTrackableMixin = _internal(
    "tensorflow", "__internal__.tracking.DelegatingTrackableMixin")

_AttrValue = _internal("tensorflow.core.framework.attr_value_pb2",
                       "AttrValue")

smart_cond = _internal("tensorflow", "__internal__.smart_cond.smart_cond")

_graph_or_parents_in_xla_context = _internal(
    "tensorflow.python.ops.control_flow_util", "GraphOrParentsInXlaContext")


def in_xla_context() -> bool:
  """Returns True while tracing code that XLA will compile (`jit_compile`)."""
  if tf.executing_eagerly():
    return False
  return _graph_or_parents_in_xla_context(tf.compat.v1.get_default_graph())


def in_control_flow_v1_context() -> bool:
  """True inside a control flow v1 `cond` or loop (or a TPU/XLA rewrite)."""
  graph = tf.compat.v1.get_default_graph()
  get_context = _private(graph, "_get_control_flow_context", "tf.Graph")
  return get_context() is not None


def add_control_input(op: tf.Operation, control: tf.Operation) -> None:
  """Makes `op`, already built, run after `control` (and die with it)."""
  _private(op, "_add_control_input", "tf.Operation")(control)


def call_as_one_op(fn: Callable[[], tf.Tensor]) -> tf.Tensor:
  """Builds `fn` as a function, and returns its result through one call op.

  TensorFlow inlines function calls before it runs a graph, unless the
  function carries its private `_noinline` attribute. Not inlined, the body
  stays in the function library and runs only when the call op runs: inside
  a branch that a step does not take, the call is one dead node, where the
  inlined body would be many (the executor visits each dead node, about 60
  ns each on a CPU). `fn` returns one tensor, which the call returns.
  """
  return tf.function(fn, autograph=False,
                     experimental_attributes={"_noinline": True})()


def cond_as_one_op(pred: tf.Tensor, true_fn: Callable[[], tf.Tensor],
                   false_fn: Callable[[], tf.Tensor]) -> tf.Tensor:
  """`tf.cond`, kept as one `If` op when a graph runs it.

  Before a graph runs, TensorFlow lowers each `If` to a `Switch` for every
  tensor its branches read, all run at every step, unless the op carries
  its private `_lower_using_switch_merge` attribute set to False. Not
  lowered, the `If` is one op that calls the taken branch as a function.
  Eagerly and inside control flow v1 (where `tf.cond` builds no `If`) this
  is `tf.cond`; XLA compiles the `If` itself, whatever the attribute says.
  """
  if executing_eagerly():
    return tf.cond(pred, true_fn, false_fn)
  graph = tf.compat.v1.get_default_graph()
  built_before = len(graph.get_operations())
  result = tf.cond(pred, true_fn, false_fn)
  for op in graph.get_operations()[built_before:]:
    if op.type in ("If", "StatelessIf"):
      _private(op, "_set_attr", "tf.Operation")(
          "_lower_using_switch_merge", _AttrValue(b=False))
  return result


def keep_out_of_xla_clusters(op: tf.Operation) -> None:
  """Marks `op` so that XLA's auto-clustering leaves it to TensorFlow.

  The private `_XlaCompile` attribute, False: auto-clustering (a TF1
  Session's `global_jit_level`) does not put the op in a cluster. An op
  that already has the attribute keeps it: the user asked for it
  (`tf.xla.experimental.jit_scope` sets it True).
  """
  try:
    op.get_attr("_XlaCompile")
    return
  except ValueError:  # Not set.
    pass
  _private(op, "_set_attr", "tf.Operation")("_XlaCompile", _AttrValue(b=False))


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
  return _private(opt, "_use_locking", "tf.compat.v1.train.Optimizer")


def graph_rewrite_state():
  """Returns TF's module that tells new Sessions to run the AMP rewrite.

  `tf.compat.v1.Session` turns on `auto_mixed_precision` in its config when
  this module says the rewrite is enabled, as TF 1.14-2.3's
  `enable_mixed_precision_graph_rewrite` arranged; tf_keras's
  `set_global_policy` reads it too.
  """
  name = "tensorflow.python.training.experimental.mixed_precision_global_state"
  try:
    return importlib.import_module(name)
  except ImportError as e:
    raise ImportError(_missing(name)) from e


def tf_v1_loss_scale_optimizer_class() -> type:
  """Returns TF's own TF1 `MixedPrecisionLossScaleOptimizer` class.

  Its public spellings point at mplso's class while `mplso.compat` is
  installed; this is TF's class whatever they point at.
  """
  return _internal(
      "tensorflow.python.training.experimental.loss_scale_optimizer",
      "MixedPrecisionLossScaleOptimizer")


# Keras families. Their private names are imported when first asked for, so
# that `import mplso` never pulls in Keras.

no_automatic_dependency_tracking = _internal(
    "tensorflow", "__internal__.tracking.no_automatic_dependency_tracking")


def tf_keras_callable_list(items: list) -> list:
  """Returns `items` as tf_keras's list that `optimizer.variables()` calls."""
  return _internal("tf_keras.src.optimizers.optimizer", "CallableList")(items)


def tf_keras_filter_empty_gradients(grads_and_vars) -> tuple:
  """Drops pairs without a gradient as tf_keras does (logs, or raises if all)."""
  return _internal("tf_keras.src.optimizers.utils",
                   "filter_empty_gradients")(grads_and_vars)
