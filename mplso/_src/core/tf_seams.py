"""The one place that touches TensorFlow internals and the eager/graph split.

A TensorFlow upgrade that moves a private name should only need this module
changed. Every private name is looked up through `_internal` (at import) or
`_private` (at call time): where a TensorFlow release no longer has it, mplso
fails loudly, naming the internal and the TensorFlow version, instead of with
a bare AttributeError somewhere inside a training step.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import sys

import tensorflow as tf

# The TensorFlow versions mplso is tested with (setup.py pins them).
TESTED_TF = "TensorFlow 2.21 (and the tf-nightly of .ci/nightly)"


def _missing(name: str) -> str:
  return (f"mplso needs the TensorFlow internal `{name}`, which TensorFlow "
          f"{tf.__version__} does not have. mplso is tested with {TESTED_TF}: "
          "install a tested TensorFlow (pip install "
          "'tensorflow>=2.21,<2.24'), or report this TensorFlow version to "
          "mplso.")


# The lookups below run while a user's `tf.function` traces a step too; left
# to AutoGraph, it would try to convert `importlib` and warn about it.
_not_converted = tf.autograph.experimental.do_not_convert


def not_converted(cls: type) -> type:
  """Makes AutoGraph call the public methods `cls` defines as they are written.

  Inside a `tf.function`, AutoGraph rewrites the Python of every function the
  user's code calls, but TensorFlow's and Keras's own. mplso's code is
  written for graph mode already (`smart_cond`, no `if` on a tensor), so
  rewriting it only adds to the time a step takes to trace; like TensorFlow's
  optimizers, mplso's are called as written. What they call back (a loss
  callable) is then called as written too, as TensorFlow's optimizers call it.
  """
  for name, value in list(vars(cls).items()):
    if (not name.startswith("_") or name == "__call__") and (
        inspect.isfunction(value)):
      setattr(cls, name, _not_converted(value))
  return cls


@_not_converted
def _internal(module: str, attribute: str):
  """Returns `module.attribute` of TensorFlow; ImportError if it is gone."""
  try:
    value = importlib.import_module(module)
    for part in attribute.split("."):
      value = getattr(value, part)
  except (ImportError, AttributeError) as e:
    raise ImportError(_missing(f"{module}.{attribute}")) from e
  return value


@_not_converted
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

smart_cond = _internal("tensorflow", "__internal__.smart_cond.smart_cond")

_AttrValue = _internal("tensorflow.core.framework.attr_value_pb2", "AttrValue")
# The attribute of an If op that asks TensorFlow to lower it to Switch/Merge
# before it runs a graph (control_flow_util_v2.maybe_set_lowering_attr).
_LOWERING_ATTR = "_lower_using_switch_merge"
_IF_OPS = ("If", "StatelessIf")


def cond_kept_as_call(pred, true_fn, false_fn):
  """`smart_cond`, its If op left a function call when the graph runs.

  Before a graph runs, TensorFlow lowers each `tf.cond` to Switch and Merge
  nodes: one Switch per tensor a branch reads runs at every step, and the
  untaken branch's nodes are passed along as dead. An If op that is not
  lowered runs one kernel, which calls the taken branch's function. For a
  branch that runs rarely and reads many tensors (every gradient), that is
  one op per step instead of one per gradient. The values are the same;
  under XLA, and eagerly, nothing changes (neither lowers).
  """
  if tf.executing_eagerly():
    return smart_cond(pred, true_fn, false_fn)
  graph = tf.compat.v1.get_default_graph()
  first = len(graph.get_operations())
  result = smart_cond(pred, true_fn, false_fn)
  # The If op is in this graph; an If in a branch is in the branch's graph.
  for op in graph.get_operations()[first:]:
    if op.type in _IF_OPS:
      _private(op, "_set_attr", "tf.Operation")(_LOWERING_ATTR,
                                                _AttrValue(b=False))
  return result

_graph_or_parents_in_xla_context = _internal(
    "tensorflow.python.ops.control_flow_util", "GraphOrParentsInXlaContext")


def in_xla_context() -> bool:
  """Returns True while tracing code that XLA will compile (`jit_compile`)."""
  if tf.executing_eagerly():
    return False
  return _graph_or_parents_in_xla_context(tf.compat.v1.get_default_graph())


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


_ResourceVariable = _internal("tensorflow.python.ops.resource_variable_ops",
                              "ResourceVariable")


def local_variable(initial_value, name: str) -> tf.Variable:
  """Returns a new resource variable of this process alone, made eagerly.

  Made directly as a `ResourceVariable`, it bypasses the variable creators
  of `tf.distribute` strategies (no mirrored copies) and Keras; nothing
  tracks it unless told to.
  """
  with tf.init_scope():
    return _ResourceVariable(initial_value, trainable=False, name=name)


def tf_logging():
  """TF's logging module, which tf_keras's loss-scale optimizers warn through.

  Looked up at each call, so that code capturing TF's log (a test patching
  its `warning`) sees mplso's warnings as it sees tf_keras's.
  """
  return _internal("tensorflow.python.platform", "tf_logging")


def v1_optimizer_use_locking(opt: tf.compat.v1.train.Optimizer) -> bool:
  """Returns the `use_locking` a TF1 optimizer was built with."""
  return _private(opt, "_use_locking", "tf.compat.v1.train.Optimizer")


@_not_converted
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


@functools.cache
def tf_keras_default_gradient_aggregator():
  """Returns tf_keras's `OptimizerV2` default `gradient_aggregator`.

  Looked up once: `apply_gradients` asks at every eager step.
  """
  return _internal("tf_keras.src.optimizers.utils", "all_reduce_sum_gradients")


def tf_keras_filter_empty_gradients(grads_and_vars) -> tuple:
  """Drops pairs without a gradient as tf_keras does (logs, or raises if all)."""
  return _internal("tf_keras.src.optimizers.utils",
                   "filter_empty_gradients")(grads_and_vars)


def teach_tf_keras_convert_to_legacy_optimizer(convert_wrapper) -> None:
  """Makes tf_keras's `convert_to_legacy_optimizer` call `convert_wrapper`.

  `convert_wrapper(optimizer, convert)` returns the legacy counterpart of
  `optimizer` when it is one of mplso's wrappers, else None (then tf_keras's
  own `convert` runs). tf_keras calls the function itself (`optimizers.get`
  with TF2 behaviour off), so both its names are replaced, once.
  """
  module = importlib.import_module("tf_keras.src.optimizers")
  convert = module.convert_to_legacy_optimizer
  if getattr(convert, "_mplso", False):
    return

  @functools.wraps(convert)
  def convert_to_legacy_optimizer(optimizer):
    converted = convert_wrapper(optimizer, convert)
    return convert(optimizer) if converted is None else converted

  convert_to_legacy_optimizer._mplso = True  # pylint: disable=protected-access
  module.convert_to_legacy_optimizer = convert_to_legacy_optimizer
  internal = _internal("tf_keras", "__internal__.optimizers")
  internal.convert_to_legacy_optimizer = convert_to_legacy_optimizer


def tf_keras_track_variable(variable) -> None:
  """Makes tf_keras's TF1-mode session initialize `variable` (eager: no-op).

  tf_keras's graph-mode `fit` initializes only the variables it was told of.
  """
  _internal("tf_keras.src.backend", "track_variable")(variable)


# Each Keras package's table of the names it saves registered classes under.
_REGISTERED_NAMES = (
    ("keras", "keras.src.saving.object_registration", "GLOBAL_CUSTOM_NAMES"),
    ("tf_keras", "tf_keras.src.saving.object_registration",
     "_GLOBAL_CUSTOM_NAMES"),
)


def keras_save_as(cls: type, like: type) -> None:
  """Makes Keras save objects of `cls` under the name `like` is registered as.

  Keras looks a class's registered name up by the class itself, so a class
  made from a registered class is saved under its bare `__name__`, which
  loading does not find. Only packages already imported are changed.
  """
  for package, module, attribute in _REGISTERED_NAMES:
    if package in sys.modules:
      names = _internal(module, attribute)
      if like in names:
        names[cls] = names[like]


def variable_strategy(variable):
  """The `tf.distribute` strategy whose scope made `variable` (None: none).

  A variable made outside any strategy's scope, or an object that is not a
  TensorFlow variable, has none.
  """
  return getattr(variable, "_distribute_strategy", None)


@contextlib.contextmanager
def checkpoint_links_dropped(trackable, names):
  """Drops `trackable`'s checkpoint children named `names` for the body.

  The links stay dropped when the body returns (a new owner links them
  anew); if it raises, they are put back as they were.

  Args:
    trackable: a `Trackable`.
    names: the names of the checkpoint children to drop (absent ones are
      ignored).
  """
  trackable._maybe_initialize_trackable()  # pylint: disable=protected-access
  links = _private(trackable, "_self_unconditional_checkpoint_dependencies",
                   "Trackable")
  by_name = _private(trackable, "_self_unconditional_dependency_names",
                     "Trackable")
  saved_links, saved_names = list(links), dict(by_name)
  links[:] = [link for link in links if link.name not in names]
  for name in names:
    by_name.pop(name, None)
  try:
    yield
  except BaseException:
    links[:] = saved_links
    by_name.clear()
    by_name.update(saved_names)
    raise
