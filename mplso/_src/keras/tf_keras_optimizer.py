"""The tf_keras new-optimizer family: loss scaling for tf_keras.optimizers.*."""

from __future__ import annotations

import functools
import inspect

import tensorflow as tf
import tf_keras

from mplso._src.core import checks
from mplso._src.core import tf_seams
from mplso._src.keras import base
from mplso._src.keras import tf_keras_base
from mplso._src.step import wrapping

_Optimizer = tf_keras.optimizers.Optimizer


def _base_name(variable) -> str:
  """The variable's name without the `:0` output suffix."""
  return variable.name.split(":")[0]


def _per_variable_state(optimizer):
  """Yields `(slot name, variable name, state)` for `optimizer`'s state.

  `add_variable_from_reference(var, name)` names the state variable
  `{name}/{var name}` (Adam's `m/dense/kernel`); the optimizer's own
  variables (`iteration`, `learning_rate`) have no `/`.
  """
  for state in optimizer.variables:
    if "/" in _base_name(state):
      slot_name, variable_name = _base_name(state).split("/", 1)
      yield slot_name, variable_name, state


@functools.cache
def _summed_already(optimizer_class: type) -> dict[str, bool]:
  """The keyword that tells `optimizer_class.apply_gradients` not to sum.

  tf_keras's own optimizers take both its `skip_gradients_aggregation` and
  TF 2.3's `experimental_aggregate_gradients` (by `**kwargs`). An override
  written for TF 2.3, `apply_gradients(grads_and_vars, name=None,
  experimental_aggregate_gradients=True)`, takes only the second (TF 2.3's
  wrapper passed it); one written for tf_keras names the first.
  """
  parameters = inspect.signature(optimizer_class.apply_gradients).parameters
  if "skip_gradients_aggregation" in parameters:
    return {"skip_gradients_aggregation": True}
  if "experimental_aggregate_gradients" in parameters or any(
      p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
    return {"experimental_aggregate_gradients": False}
  return {}


@tf_keras.saving.register_keras_serializable(package="mplso",
                                             name="LossScaleOptimizerV3")
@tf_seams.not_converted
class LossScaleOptimizer(wrapping.HidesSlotNames, base.LossScaleOptimizerBase,
                         base.DelegatesTracking, _Optimizer,
                         tf_keras_base.TfKerasLossScaleOptimizer):
  """Loss scaling for a tf_keras new optimizer (`tf_keras.optimizers.*`).

  What differs from the other families: `apply_gradients` has tf_keras's
  signature (`skip_gradients_aggregation` third; TF 2.3's
  `experimental_aggregate_gradients` by keyword only) and sums gradients
  across replicas before the finite check. The base class has no slots, so
  `get_slot` / `get_slot_names` report per-variable state under its own
  names (Adam's `m`, `v`) and public attributes (`beta_1`) are read and set
  on the wrapped optimizer.

  Compatibility: registered as `mplso>LossScaleOptimizerV3`; checkpoints as
  tf_keras's `LossScaleOptimizerV3` (`base.DelegatesTracking`); `.keras` and
  `.h5` files keep the state and the loss scale (tf_keras's own class loses
  the scale); tf_keras's SavedModel loader restores no optimizer state, read
  it with `tf.train.Checkpoint(root=model).restore(path +
  "/variables/variables")`.
  """

  # The family (see `base`).
  _FAMILY = "a tf_keras.optimizers.Optimizer (Keras 2 new optimizer)"
  # One loss-scale base class for both tf_keras families.
  _scales_loss = staticmethod(tf_keras_base.scales_loss)

  @staticmethod
  def _wraps(optimizer) -> bool:
    return isinstance(optimizer, _Optimizer)

  @staticmethod
  def _reads_config(optimizer_config) -> bool:
    return optimizer_config.get("is_legacy_optimizer") is False

  _OPTIMIZERS = tf_keras.optimizers
  _DESERIALIZE_KWARGS = {"use_legacy_optimizer": False}

  def _gradients_of(self, scaled_loss, var_list, tape, grad_loss=None):
    del grad_loss  # tf_keras's new optimizers have none.
    return self._optimizer.compute_gradients(scaled_loss, var_list, tape=tape)

  # Applying.

  def apply_gradients(self, grads_and_vars, name=None,
                      skip_gradients_aggregation=False, **kwargs):
    """Applies the gradients if all are finite; returns `iterations`.

    tf_keras's signature: `skip_gradients_aggregation=True` when the caller
    has summed the gradients across replicas; TF 2.3's
    `experimental_aggregate_gradients` (its opposite, default True) comes by
    keyword, any other keyword is a TypeError. ValueError in cross-replica
    context, when no variable has a gradient, or for an entry that is not a
    (gradient, variable) pair of one dtype and shape.
    """
    aggregate = kwargs.pop("experimental_aggregate_gradients", True)
    if kwargs:
      raise TypeError(
          "apply_gradients() got unexpected keyword arguments "
          f"{sorted(kwargs)}. Accepted: name, skip_gradients_aggregation, "
          "experimental_aggregate_gradients.")
    grads_and_vars = checks.check_grads_and_vars(grads_and_vars)
    self._warn_if_never_scaled()
    if not grads_and_vars:
      return self.iterations
    with tf.init_scope():
      # The wrapped optimizer creates its state outside any tf.function and
      # before the tf.cond below, whose branches must not create variables.
      self.build([v for _, v in grads_and_vars])
    wrapping.check_replica_context()
    grads_and_vars = tf_seams.tf_keras_filter_empty_gradients(grads_and_vars)
    if aggregate and not skip_gradients_aggregation:
      # Summed here, not by the wrapped optimizer, so that every replica
      # sees the same gradients and makes the same finite/non-finite call.
      grads_and_vars = self._optimizer.aggregate_gradients(grads_and_vars)
    variables = [v for _, v in grads_and_vars]
    # `name` goes on positionally, and only when given: an optimizer whose
    # second argument is another (a `clip_norm`) gets the caller's value,
    # and one without a `name` is not handed one.
    name_arg = () if name is None else (name,)
    summed = _summed_already(type(self._optimizer))
    self._apply_if_finite(
        [g for g, _ in grads_and_vars], variables,
        lambda grads: self._optimizer.apply_gradients(
            list(zip(grads, variables)), *name_arg, **summed))
    return self.iterations

  def build(self, var_list):
    """Creates the wrapped optimizer's state for `var_list`."""
    # At the top name scope, so that it is named `{slot}/{variable}` (what
    # `get_slot` looks for) even when a first eager step is in a name scope.
    with tf.name_scope(""):
      return self._optimizer.build(var_list)

  aggregate_gradients = base.delegated(_Optimizer.aggregate_gradients)
  _var_key = base.delegated(_Optimizer._var_key)  # pylint: disable=protected-access

  # Passthrough to the wrapped optimizer.

  @property
  def variables(self):
    """The wrapped optimizer's variables, then the loss scale's (callable)."""
    return tf_seams.tf_keras_callable_list(super().variables)

  def _set_inner_weights(self, arrays):
    self._optimizer.set_weights(arrays)  # Raises if it is not built yet.

  # tf_keras's `save_own_variables` writes `variables`, the loss scale's last.

  def load_own_variables(self, store):
    """Reads `variables` from a `.keras` store, as tf_keras's does.

    A store of tf_keras's class or of the bare optimizer, which lacks the
    loss scale, restores the wrapped optimizer alone.
    """
    if len(store.keys()) == len(self._optimizer.variables):
      self._optimizer.load_own_variables(store)
    else:
      super().load_own_variables(store)

  def add_slot(self, var, slot_name, initializer="zeros"):
    """Returns `var`'s state `slot_name`, created in the wrapped optimizer.

    Named `{slot_name}/{var name}` and checkpointed with the wrapped
    optimizer's; an existing state of that name is returned as it is.
    """
    existing = self._slots_of(var).get(slot_name)
    if existing is not None:
      return existing
    initial_value = None
    if initializer != "zeros":
      dtype = getattr(var, "true_dtype", var.dtype)
      with tf.init_scope():
        initial_value = tf_keras.initializers.get(initializer)(
            shape=var.shape, dtype=dtype)
    with tf.init_scope(), tf.name_scope(""):  # As in `build`.
      return self._optimizer.add_variable_from_reference(
          var, slot_name, initial_value=initial_value)

  add_variable_from_reference = base.delegated(
      _Optimizer.add_variable_from_reference,
      "Creates per-variable state in the wrapped optimizer.")
  add_variable = base.delegated(_Optimizer.add_variable,
                                "Creates a variable in the wrapped optimizer.")

  def get_slot_names(self):
    """Returns the names of the wrapped optimizer's per-variable state."""
    state = _per_variable_state(self._optimizer)
    return list(dict.fromkeys(slot_name for slot_name, _, _ in state))

  def _slots_of(self, var) -> dict:
    slots = {}
    for slot_name, variable_name, state in _per_variable_state(
        self._optimizer):
      if variable_name != _base_name(var):
        continue
      if slot_name in slots:
        raise KeyError(
            f"Several variables are named {variable_name!r}, so their "
            f"slot {slot_name!r} is ambiguous. Give the model's "
            "variables distinct names.")
      slots[slot_name] = state
    return slots

  def __getattr__(self, name):
    # Called only when normal lookup fails: public attributes such as
    # `beta_1`, `epsilon`, `clipnorm` or `name` are the wrapped optimizer's.
    if name.startswith("_"):
      raise AttributeError(name)
    try:
      optimizer = self.__dict__["_optimizer"]
    except KeyError:
      raise AttributeError(name) from None
    try:
      return getattr(optimizer, name)
    except AttributeError:
      raise base.missing_attribute(name, optimizer) from None

  def __setattr__(self, name, value):
    # Setting a hyperparameter on the wrapper must change the wrapped
    # optimizer, which uses it; a copy on the wrapper would be ignored.
    optimizer = self.__dict__.get("_optimizer")
    if (optimizer is not None and not name.startswith("_") and
        not hasattr(type(self), name) and hasattr(optimizer, name)):
      setattr(optimizer, name, value)
    else:
      super().__setattr__(name, value)

