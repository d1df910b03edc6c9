"""The Keras 3 family: loss scaling for a `keras.optimizers.Optimizer`."""

from __future__ import annotations

import keras
import tensorflow as tf

from mplso._src.core import checks
from mplso._src.core import scaling
from mplso._src.core import tf_seams
from mplso._src.keras import base
from mplso._src.step import wrapping

_KerasLossScaleOptimizer = keras.optimizers.LossScaleOptimizer


# The base optimizer's arguments Keras 3's class accepts at their defaults
# only (older configs wrote them), each refused otherwise as it refuses it.
_BASE_OPTIMIZER_DEFAULTS = {
    "weight_decay": None, "clipnorm": None, "global_clipnorm": None,
    "clipvalue": None, "use_ema": False, "ema_momentum": 0.99,
    "ema_overwrite_frequency": None, "loss_scale_factor": None,
    "gradient_accumulation_steps": None,
}


def _slot_prefix(variable) -> str:
  """The name prefix of the state Keras 3 creates for `variable`.

  Keras 3 names per-variable state `{path with '/' as '_'}_{state name}`, see
  `add_variable_from_reference`.
  """
  if hasattr(variable, "path"):
    return variable.path.replace("/", "_") + "_"
  return str(variable.name).replace("/", "_").replace(":", "_") + "_"


def _floating(grad, variable):
  """An integer gradient cast to its variable's dtype, as Keras 3 casts it.

  Keras 3's optimizers cast every gradient to its variable's dtype when they
  apply it; an integer one must be cast before the finite check, whose
  `IsFinite` takes floating-point tensors only (an integer is finite).
  """
  if grad is None:
    return None
  values = grad.values if isinstance(grad, tf.IndexedSlices) else grad
  dtype = tf.as_dtype(values.dtype)
  if dtype.is_floating:
    return grad
  target = tf.as_dtype(variable.dtype)
  if isinstance(grad, tf.IndexedSlices):
    return tf.IndexedSlices(tf.cast(values, target), grad.indices,
                            grad.dense_shape)
  return tf.cast(grad, target)


@keras.saving.register_keras_serializable(package="mplso",
                                          name="LossScaleOptimizer")
@tf_seams.not_converted
class LossScaleOptimizer(wrapping.HidesSlotNames, base.LossScaleOptimizerBase,
                         _KerasLossScaleOptimizer):
  """Loss scaling for a Keras 3 optimizer (`keras.optimizers.*`).

  What differs from the other families: Keras 3's trainer protocol works
  besides TF 2.3's. `fit` calls `scale_loss(loss)` and passes *scaled*
  gradients to `apply_gradients`; TF 2.3's code unscales them first with
  `get_unscaled_gradients`. `scale_loss` sets a mark: from then on every
  `apply_gradients` receives scaled gradients and divides them by the
  current scale, as Keras 3's class does (several applies after one
  `scale_loss` each unscale). `get_unscaled_gradients`, `compute_gradients`,
  `get_gradients` and `minimize` clear it: those gradients are unscaled
  already. The mark is a variable, set and read where the step runs (one
  per replica), so the protocol may be split between eager code,
  `tf.function`s and `strategy.run` in any way.

  Compatibility: an instance of `keras.optimizers.LossScaleOptimizer`, with
  its checkpoint child `inner_optimizer` plus `loss_scale`. Unlike Keras 3's
  class, the scale never goes below 1 and grows only while finite, a skipped
  step advances `iterations`, a fixed scale exists, `stateless_apply` is
  refused, and `get_slot` / `get_slot_names` report per-variable state under
  its own names (Adam's `momentum`).
  """

  # The family (see `base`).
  _FAMILY = "a keras.optimizers.Optimizer (Keras 3)"

  @staticmethod
  def _wraps(optimizer) -> bool:
    return isinstance(optimizer, keras.optimizers.Optimizer)

  @staticmethod
  def _scales_loss(optimizer) -> bool:
    return isinstance(optimizer, _KerasLossScaleOptimizer)

  @staticmethod
  def _reads_config(optimizer_config) -> bool:
    # tf_keras's new optimizers write `use_ema` too, and a legacy mark.
    return ("use_ema" in optimizer_config and
            "is_legacy_optimizer" not in optimizer_config)

  _OPTIMIZERS = keras.optimizers
  _CONFIG_KEYS = ("name",)  # Keras 3's, besides TF 2.3's config.
  # Keras 3's own class keeps the wrapped optimizer in this attribute: its
  # checkpoint child, and what Keras callbacks read.
  inner_optimizer = None

  _WRAP_KEYWORDS = ("name",)

  def _check_keywords(self, kwargs) -> None:
    """Refuses what Keras 3's class refuses, with its `ValueError`s."""
    unknown = []
    for name, value in kwargs.items():
      if name in self._WRAP_KEYWORDS:
        continue
      if name not in _BASE_OPTIMIZER_DEFAULTS:
        unknown.append(name)
      elif value != _BASE_OPTIMIZER_DEFAULTS[name]:
        raise ValueError(
            f"LossScaleOptimizer does not support `{name}`. Instead, set "
            f"`{name}` on the `inner_optimizer`. Received: {name}={value!r}.")
    if unknown:
      raise ValueError(
          "LossScaleOptimizer does not support arguments: "
          f"`{'`, `'.join(unknown)}`.")

  def _wrap(self, optimizer, loss_scale, name=None, **defaults):
    del defaults  # Base optimizer arguments at their defaults (checked).
    # Keras 3's LossScaleOptimizer.__init__ would create its own dynamic
    # scale; only the base optimizer's setup is wanted.
    keras.optimizers.Optimizer.__init__(  # pylint: disable=non-parent-init-called
        self, learning_rate=0.0, name=name)
    self.inner_optimizer = optimizer
    # As Keras 3's class: the wrapped optimizer's own scaling is off, or the
    # gradients would be unscaled twice.
    optimizer.loss_scale_factor = None
    # Tracked under TF's checkpoint name rather than the attribute's.
    object.__setattr__(self, "_loss_scale", loss_scale)
    self._track_trackable(loss_scale, "loss_scale")
    # Whether the gradients that reach `apply` are scaled (see the class
    # docstring): each replica's own, and no part of any checkpoint.
    with tf.init_scope():
      object.__setattr__(self, "_scale_loss_mark", tf.Variable(
          False, trainable=False, name="scale_loss_mark",
          synchronization=tf.VariableSynchronization.ON_READ,
          aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA))

  @property
  def _optimizer(self) -> keras.optimizers.Optimizer:
    return self.inner_optimizer

  @property
  def dynamic_scale(self):
    """The current scale, Keras 3's name: the variable of a dynamic scale.

    A fixed scale (which Keras 3's class lacks) gives its value as a tensor.
    """
    if self.dynamic:
      return self._loss_scale.variables[0]
    return tf.convert_to_tensor(self._loss_scale())

  @property
  def step_counter(self):
    """Finite steps since the scale last changed, Keras 3's name.

    The dynamic scale's good-step variable (tf_keras's `dynamic_counter`);
    None for a fixed scale.
    """
    return self.dynamic_counter

  def get_unscaled_gradients(self, grads):
    self._scale_loss_mark.assign(False)
    return super().get_unscaled_gradients(grads)

  def _unscaled_gradients(self, loss, var_list, tape, grad_loss=None):
    self._scale_loss_mark.assign(False)
    return super()._unscaled_gradients(loss, var_list, tape, grad_loss)

  def scale_loss(self, loss):
    """Keras 3's hook: scales `loss`; `apply_gradients` then unscales."""
    self._scale_loss_mark.assign(True)
    return scaling.scale_loss(loss, self._loss_scale())

  def _gradients_of(self, scaled_loss, var_list, tape, grad_loss=None):
    del grad_loss  # Keras 3 has none.
    tape = tape if tape is not None else tf.GradientTape()
    with tape:
      if callable(scaled_loss):
        if not callable(var_list):
          tape.watch(base.tf_variables(var_list))
        scaled_loss = scaled_loss()
    if callable(var_list):
      var_list = var_list()
    var_list = list(tf.nest.flatten(var_list))
    return list(zip(tape.gradient(scaled_loss, var_list), var_list))

  def minimize(self, loss, var_list, tape=None):
    """`apply_gradients(compute_gradients(loss, var_list, tape))`.

    Raises:
      ValueError: if there is no variable to optimize, as TF1's optimizers
        raise (Keras 3's own optimizers have no `minimize`).
    """
    grads_and_vars = self.compute_gradients(loss, var_list, tape)
    if not grads_and_vars:
      raise ValueError(
          "No gradients provided for any variable, check your graph for ops "
          "that do not support gradients, between variables [] and loss "
          f"{loss!r}. Pass the variables to optimize as `var_list`.")
    return self.apply_gradients(grads_and_vars)

  # Applying.

  @tf_seams.no_automatic_dependency_tracking
  def build(self, var_list):
    """Creates the wrapped optimizer's state for `var_list`."""
    self.inner_optimizer.build(var_list)
    keras.optimizers.Optimizer.build(self, var_list)  # pylint: disable=non-parent-init-called

  def apply_gradients(self, grads_and_vars, name=None,
                      experimental_aggregate_gradients=True):
    """Applies the gradients if all are finite; returns `iterations`.

    The gradients are unscaled when `scale_loss` was called since the last
    `get_unscaled_gradients`, `compute_gradients` or `minimize` (Keras 3's
    `fit`), by the current scale, as Keras 3's class unscales them. The wrapped optimizer's
    `apply_gradients` applies them; where a subclass overrides it, `name`
    (when not None) is its second argument, as TF 2.4-2.15 passed it.

    Keras 3 optimizers always sum gradients across replicas, so
    `experimental_aggregate_gradients=False` is refused (ValueError) under a
    strategy with several replicas; so are a cross-replica context and an
    entry that is not a (numeric gradient, variable) pair of one shape.
    """
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if not experimental_aggregate_gradients and replicas > 1:
      # Keras 3 all-reduces inside its own apply step: gradients the user
      # already all-reduced would be summed twice, silently.
      raise ValueError(
          "experimental_aggregate_gradients=False is not supported with a "
          f"Keras 3 optimizer under a strategy with {replicas} replicas: "
          "Keras 3 optimizers always sum gradients across replicas, so "
          "gradients you all-reduced yourself would be summed twice. Pass "
          "each replica's own gradients with "
          "experimental_aggregate_gradients=True (the default).")
    # Keras 3 casts each gradient to its variable's dtype: only the pairs'
    # structure and kinds are checked.
    grads_and_vars = checks.check_grads_and_vars(grads_and_vars,
                                                 same_dtype=False)
    self._apply([g for g, _ in grads_and_vars], [v for _, v in grads_and_vars],
                name)
    return self.iterations

  def apply(self, grads, trainable_variables=None):
    """Applies `grads` on every replica or on none, then updates the scale.

    No gradient at all is no step, as for Keras 3's optimizers: nothing is
    applied, and neither the scale nor `iterations` moves.
    """
    self._apply(grads, trainable_variables)

  def _apply(self, grads, trainable_variables, name=None):
    grads = list(grads)
    if not grads:
      return
    wrapping.check_replica_context()  # Before reading the per-replica mark.
    variables = list(trainable_variables if trainable_variables is not None
                     else self.inner_optimizer._trainable_variables)  # pylint: disable=protected-access
    if len(variables) != len(grads):
      raise ValueError(
          f"Received {len(grads)} gradients for {len(variables)} variables. "
          "When passing `grads` without `variables`, the optimizer must "
          "already be built on a list of variables, one per gradient: call "
          "`optimizer.build(trainable_variables)` first, or pass them.")
    grads = [_floating(g, v) for g, v in zip(grads, variables)]
    # Divided by 1 when `scale_loss` was not called: exact, NaN and Inf kept.
    divisor = tf.where(self._scale_loss_mark.read_value(),
                       tf.convert_to_tensor(self._loss_scale()), 1.0)
    # As Keras 3's class: a variable that takes its gradient as its new
    # value (`overwrite_with_gradient`, float8 scales) gets it unscaled.
    grads = [g if getattr(v, "overwrite_with_gradient", False) else unscaled
             for g, unscaled, v in zip(
                 grads, scaling.unscale_grads(grads, divisor), variables)]
    if not self.built:
      self.build(variables)

    # As TF 2.4-2.15's wrapper: a caller's second argument goes on
    # positionally to an override (its `clip_norm`); Keras 3's own
    # `apply_gradients` takes none, so there it is dropped.
    overridden = (type(self.inner_optimizer).apply_gradients is not
                  keras.optimizers.Optimizer.apply_gradients)
    args = (name,) if name is not None and overridden else ()

    def apply_on_replica(replica_grads):
      # Through `apply_gradients`, so that an override of it (clipping, a
      # horovod hook) runs, as it runs on the bare optimizer. What it returns
      # (Keras 3's `iterations`) is not an op of the step.
      self.inner_optimizer.apply_gradients(
          list(zip(replica_grads, variables)), *args)

    self._apply_if_finite(grads, variables, apply_on_replica)

  def _advance_iterations(self):
    if self.inner_optimizer.gradient_accumulation_steps:
      # `iterations` then counts updates, from the count of calls that its
      # accumulation windows follow: a skipped call, which accumulated
      # nothing, must not open a window early (Keras 3's class, likewise,
      # leaves them).
      return None
    return self.inner_optimizer.iterations.assign_add(1)

  def stateless_apply(self, optimizer_variables, grads, trainable_variables):
    raise ValueError(
        "stateless_apply is not supported by mplso's LossScaleOptimizer on "
        "the TensorFlow backend; use apply_gradients.")

  def _trackable_children(self, save_type="checkpoint", **kwargs):
    children = super()._trackable_children(save_type, **kwargs)
    if save_type == "savedmodel":
      # A saved training function reads the mark, so the SavedModel holds
      # it; checkpoints, which Keras 3's class must read, do not.
      children["scale_loss_mark"] = self._scale_loss_mark
    return children

  # Per-variable state, under the wrapped optimizer's own names.

  def add_slot(self, var, slot_name, initializer="zeros"):
    """Returns `var`'s state `slot_name`, created in the wrapped optimizer.

    An existing state of that name is returned as it is, as the other
    families' `add_slot` does.
    """
    existing = self._slots_of(var).get(slot_name)
    if existing is not None:
      return existing
    return self.inner_optimizer.add_variable_from_reference(
        var, slot_name, initializer=initializer)

  def get_slot_names(self):
    """Returns the names of the wrapped optimizer's per-variable state."""
    variables = getattr(self.inner_optimizer, "_trainable_variables", [])
    return list(dict.fromkeys(n for v in variables for n in self._slots_of(v)))

  def _slots_of(self, var):
    prefix = _slot_prefix(var)
    return {v.name[len(prefix):]: v for v in self.inner_optimizer.variables
            if v.name.startswith(prefix)}

  def __getattr__(self, name):
    # Called only when normal lookup fails: hyperparameters such as `beta_1`
    # are the wrapped optimizer's.
    if name.startswith("__") or name in ("inner_optimizer", "_tracker"):
      raise AttributeError(name)
    try:
      inner = object.__getattribute__(self, "inner_optimizer")
    except AttributeError:
      raise AttributeError(name) from None
    try:
      return getattr(inner, name)
    except AttributeError:
      raise base.missing_attribute(name, inner) from None
