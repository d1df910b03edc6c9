"""The loss-scale optimizer behaviour that every Keras family shares.

A family's wrapper class derives from `LossScaleOptimizerBase` (first, so its
methods win) and from its family's optimizer base class, and fills in hooks:

  _wraps(optimizer), _scales_loss(optimizer): whether `optimizer` is of the
    family, and whether it is a loss-scale optimizer of the family (mplso's
    or Keras's own), which the wrapper refuses.
  _reads_config(optimizer_config): whether a wrapped optimizer's config
    (the inner `"config"` dict) is one this family deserialises, so that
    `mplso.keras.LossScaleOptimizer.from_config` picks the family.
  _FAMILY: the kind of optimizer it wraps, for errors.
  _OPTIMIZERS, _DESERIALIZE_KWARGS: the family's `optimizers` module, whose
    `serialize` / `deserialize` (with these arguments) read and write the
    wrapped optimizer's config.
  _wrap(optimizer, loss_scale, **kwargs): stores both (and sets up tracking).
  _gradients_of(scaled_loss, var_list, tape, grad_loss): `(grad, var)` pairs.
  Optional: _slots_of(var) for `get_slot`, _advance_iterations() for a
  skipped step, _set_inner_weights(arrays), _CONFIG_KEYS (constructor
  arguments that `get_config` writes besides TF 2.3's two keys).

The step itself (`_apply_if_finite`) is the same in every family:

    merge_call:                                # once, in cross-replica context
      guarded_step(loss_scale, grads,
                   apply=each replica applies with the wrapped optimizer,
                   skip=iterations += 1)       # TF 2.3: a skip still counts
"""

from __future__ import annotations

import copy
import inspect

import tensorflow as tf

from mplso._src.core import scaling
from mplso._src.core import tf_seams
from mplso._src.diagnostics import record
from mplso._src.keras import arguments
from mplso._src.keras import config as config_lib
from mplso._src.loss_scales import loss_scale as loss_scale_lib
from mplso._src.step import apply
from mplso._src.step import wrapping

# The wrapper's optimizer state is the wrapped optimizer's, whose hooks
# (`_compute_gradients`, `_trackable_children`) are private by name only:
# each family's own loss-scale optimizer calls the same ones.
# pylint: disable=protected-access


def forwarded(name: str, doc: str | None = None) -> property:
  """A property that reads and sets `name` on the wrapped optimizer."""
  return property(lambda self: getattr(self._optimizer, name),
                  lambda self, value: setattr(self._optimizer, name, value),
                  doc=doc or f"The wrapped optimizer's `{name}`.")


def delegated(base_method, doc: str | None = None):
  """A method, with `base_method`'s signature, calling the wrapped optimizer's.

  Args:
    base_method: the family base class's method of the same name.
    doc: the docstring; `base_method`'s when None.
  """
  name = base_method.__name__

  def method(self, *args, **kwargs):
    return getattr(self._optimizer, name)(*args, **kwargs)

  # Not functools.wraps: autograph would convert `base_method`'s source,
  # which `__wrapped__` points to, in place of this one.
  method.__name__ = name
  method.__qualname__ = base_method.__qualname__
  method.__signature__ = inspect.signature(base_method)
  method.__doc__ = doc or base_method.__doc__
  return method


def tf_variables(variables) -> list:
  """`variables` flattened, each Keras 3 Variable as the tf.Variable it holds.

  Tapes and `tf.gradients` know the tf.Variable, not Keras 3's wrapper.
  """
  return [v if isinstance(v, tf.Variable) else getattr(v, "value", v)
          for v in tf.nest.flatten(variables)]


# Keras 3's LossScaleOptimizer's names that tf_keras's has not, with what a
# tf_keras wrapper offers instead.
_KERAS_3_ONLY = {
    "scale_loss": "get_scaled_loss(loss), then get_unscaled_gradients(grads)",
    "dynamic_scale": "loss_scale (the current scale)",
    "step_counter": "dynamic_counter",
}


def missing_attribute(name: str, optimizer,
                      forwards: bool = True) -> AttributeError:
  """The error for `name`, which a wrapper of `optimizer` does not have.

  It names mplso's LossScaleOptimizer rather than the wrapped optimizer, and
  where the name exists when another family's class has it. `forwards`:
  whether the wrapper reads the wrapped optimizer's attributes (those of
  tf_keras's OptimizerV2 family, as tf_keras's own, do not).
  """
  inner = type(optimizer).__name__
  if forwards:
    message = (f"'LossScaleOptimizer' object (mplso's, wrapping {inner}) "
               f"has no attribute {name!r}, nor has the {inner} it wraps.")
  else:  # tf_keras's wording first.
    message = f"'LossScaleOptimizer' object has no attribute {name!r}."
    if hasattr(optimizer, name):
      message += (f" The wrapped {inner} has it, as `inner_optimizer.{name}`"
                  "; like tf_keras's, this wrapper does not forward it.")
  if name in _KERAS_3_ONLY:
    message += (
        f" `{name}` is Keras 3's LossScaleOptimizer's, for Keras 3 "
        "optimizers (keras.optimizers.*); this one wraps a tf_keras "
        f"optimizer, whose LossScaleOptimizer offers {_KERAS_3_ONLY[name]}.")
  return AttributeError(message)


def check_tape(loss, tape) -> None:
  """Raises ValueError for a tensor `loss` without the tape that recorded it.

  The wrappers' `minimize` / `compute_gradients` differentiate a tensor loss
  through the `tf.GradientTape` that computed it; a callable needs none.
  """
  if not callable(loss) and tape is None:
    raise ValueError(
        "`tape` is required when a tensor loss is passed. Received: "
        f"loss={loss!r}, tape=None. Pass the tf.GradientTape that computed "
        "it, or pass the loss as a callable.")


def weights_to_set(variables, inner_count: int, weights) -> list[tuple]:
  """Pairs `set_weights`'s arrays with the wrapper's variables, checked.

  `variables` are the wrapped optimizer's `inner_count` variables followed by
  the loss scale's. `weights` holds an array for each of them, or for the
  wrapped optimizer's alone (a file of tf_keras's own wrapper or of the bare
  optimizer), which leaves the loss scale as it is.

  Raises:
    ValueError: if the number of arrays or a shape does not match, naming
      what was expected.
  """
  variables, weights = list(variables), list(weights)
  if len(weights) not in (len(variables), inner_count):
    raise ValueError(
        f"Expected {len(variables)} weights (or {inner_count} for the "
        f"wrapped optimizer alone). Received: {len(weights)} weights.")
  for variable, weight in zip(variables, weights):
    shape = tuple(getattr(weight, "shape", ()))
    if tuple(variable.shape) != shape:
      raise ValueError(
          f"Optimizer variable {variable.name} has shape "
          f"{tuple(variable.shape)}, which does not fit the weight of shape "
          f"{shape}.")
  return list(zip(variables, weights))


@tf_seams.not_converted
class LossScaleOptimizerBase:
  """Loss scaling for any Keras optimizer: the part no family changes.

  Compatibility, in every family: unlike the family's own loss-scale class,
  a fixed scale skips non-finite steps too, `get_config` writes TF 2.3's
  format, and `loss_scale` follows the dialect the wrapper was built in.
  """

  _DESERIALIZE_KWARGS = {}
  _CONFIG_KEYS = ()

  def __init__(self, optimizer=None, loss_scale=arguments.UNSET,
               initial_scale=None, dynamic_growth_steps=None, *,
               dynamic=arguments.UNSET, inner_optimizer=None, **kwargs):
    """Wraps `optimizer` with the loss scale the other arguments describe.

    Args:
      optimizer: the optimizer to wrap (TF 2.3's name).
      loss_scale: TF 2.3's `"dynamic"`, number or `mplso.LossScale`; a bool
        here is TF 2.4-2.15's `dynamic`.
      initial_scale, dynamic_growth_steps, dynamic: TF 2.4-2.15's dialect
        (Keras 3's has the first two), read as `arguments.loss_scale_from_args`
        says. A dynamic `initial_scale` may be `"calibrate"`: the first
        step's gradients pick it (`mplso.DynamicLossScale`).
      inner_optimizer: the optimizer to wrap (TF 2.4's and Keras 3's name).
      **kwargs: family-specific arguments (Keras 3's `name`).

    Raises:
      TypeError: if the optimizer is missing or given twice, is not of this
        family or already scales the loss, or `dynamic` is not a bool.
      ValueError: if the loss-scale arguments are refused (see
        `arguments.loss_scale_from_args`), or the optimizer is already wrapped.
    """
    if (optimizer is None) == (inner_optimizer is None):
      raise arguments.optimizer_count_error(optimizer, inner_optimizer)
    optimizer = optimizer if optimizer is not None else inner_optimizer
    self._check_keywords(kwargs)
    if self._scales_loss(optimizer):
      raise arguments.wrapped_twice_error(optimizer)
    if not self._wraps(optimizer):
      raise arguments.not_an_optimizer_error(
          optimizer, self._FAMILY,
          " mplso.keras.LossScaleOptimizer accepts "
          f"{arguments.ACCEPTED_OPTIMIZERS}.")
    # TF 2.3's dialect names the loss scale; a bool there is TF 2.4's
    # `dynamic`. It decides what `loss_scale` returns.
    tf_2_3_dialect = not (loss_scale is arguments.UNSET or
                          isinstance(loss_scale, bool))
    loss_scale = arguments.loss_scale_from_args(
        loss_scale, dynamic, initial_scale, dynamic_growth_steps)
    self._wrap(optimizer, loss_scale, **kwargs)
    object.__setattr__(self, "_tf_2_3_dialect", tf_2_3_dialect)

  # The keyword arguments this family's `_wrap` takes besides the loss scale.
  _WRAP_KEYWORDS = ()

  def _check_keywords(self, kwargs) -> None:
    """Refuses keywords this family's wrapper does not take, as its own class.

    tf_keras's classes take no other keyword: Python's `TypeError`, with the
    public name (Keras 3's family overrides this with Keras 3's errors).
    """
    for name in kwargs:
      if name not in self._WRAP_KEYWORDS:
        raise TypeError(
            "LossScaleOptimizer.__init__() got an unexpected keyword argument "
            f"{name!r}. Accepted: optimizer (inner_optimizer), loss_scale, "
            "dynamic, initial_scale, dynamic_growth_steps"
            + "".join(f", {k}" for k in self._WRAP_KEYWORDS) + ".")

  # The loss scale, and the attributes of tf_keras's and Keras 3's classes.

  @property
  def loss_scale(self) -> loss_scale_lib.LossScale | tf.Tensor:
    """The loss scale, as the dialect the wrapper was built in defined it.

    Built with TF 2.3's `loss_scale` argument (or read from a config, which
    is TF 2.3's format), the `mplso.LossScale`; built in the TF 2.4-2.15 or
    Keras 3 dialect, the current scale as a float32 tensor, as those
    returned (fetchable by `Session.run` in graph mode).
    """
    if self._tf_2_3_dialect:
      return self._loss_scale
    return tf.convert_to_tensor(self._loss_scale())

  @property
  def inner_optimizer(self):
    """The wrapped optimizer (the name tf_keras and Keras 3 use)."""
    return self._optimizer

  @property
  def dynamic(self) -> bool:
    """Whether the loss scale is a `mplso.DynamicLossScale`."""
    return isinstance(self._loss_scale, loss_scale_lib.DynamicLossScale)

  @property
  def initial_scale(self) -> float | str | None:
    """The first loss scale, or "calibrate"; None for a custom `LossScale`."""
    if self.dynamic:
      return self._loss_scale.initial_loss_scale
    if isinstance(self._loss_scale, loss_scale_lib.FixedLossScale):
      return self._loss_scale.loss_scale_value
    return None

  @property
  def dynamic_growth_steps(self) -> int | None:
    """Finite steps between growths; None unless the scale is dynamic."""
    return self._loss_scale.increment_period if self.dynamic else None

  @property
  def dynamic_counter(self) -> tf.Variable | None:
    """The `good_steps` variable (tf_keras's name); None unless dynamic."""
    if not self.dynamic:
      return None
    return next(v for v in self._loss_scale.variables
                if v.name.split(":")[0].split("/")[-1] == "good_steps")

  # Scaling.

  def get_scaled_loss(self, loss):
    """Returns `loss` times the loss scale.

    Args:
      loss: a tensor, or a callable with no arguments returning one; the
        callable reads the scale when it is called.

    Returns:
      A tensor, or a callable when `loss` is one.
    """
    object.__setattr__(self, "_loss_has_been_scaled", True)
    return scaling.scale_loss(loss, self._loss_scale)

  def get_unscaled_gradients(self, grads):
    """Returns `grads` divided by the loss scale.

    None stays None; `tf.IndexedSlices` stay `tf.IndexedSlices`.
    """
    object.__setattr__(self, "_gradients_have_been_unscaled", True)
    return scaling.unscale_grads(list(grads), self._loss_scale())

  def _warn_if_never_scaled(self) -> None:
    """Warns, as tf_keras's class does, before applying never-scaled gradients.

    Once `get_scaled_loss` (or `minimize`, `compute_gradients`,
    `get_gradients`) and `get_unscaled_gradients` have each run, no more.
    """
    scaled = getattr(self, "_loss_has_been_scaled", False)
    unscaled = getattr(self, "_gradients_have_been_unscaled", False)
    missing = [name for name, done in (("get_scaled_loss()", scaled),
                                       ("get_unscaled_gradients()", unscaled))
               if not done]
    if missing:
      tf_seams.tf_logging().warning(
          "You forgot to call LossScaleOptimizer."
          + " and LossScaleOptimizer.".join(missing)
          + " before calling LossScaleOptimizer.apply_gradients(). The "
          "gradients are applied unscaled: small float16 gradients underflow "
          "and the loss scale does nothing. Use get_scaled_loss on the loss "
          "under the tape and get_unscaled_gradients on its gradients, or "
          "minimize().")

  def get_gradients(self, loss, params):
    """Returns the unscaled gradients of `loss` for `params` (graph mode).

    TF 2.3's Keras 2 method, called inside a `tf.function` or a TF1 graph.
    The wrapped optimizer's `get_gradients` differentiates where it has one
    (with its clipping); otherwise `tf.gradients` does.

    Raises:
      ValueError: if a parameter has no gradient, naming it.
    """
    scaled_loss = self.get_scaled_loss(loss)
    if hasattr(type(self._optimizer), "get_gradients"):
      grads = self._optimizer.get_gradients(scaled_loss, params)
    else:
      params = list(tf.nest.flatten(params))
      grads = tf.gradients(scaled_loss, tf_variables(params))
      for grad, param in zip(grads, params):
        if grad is None:
          raise ValueError(
              f"Variable {param.name!r} has no gradient. Make sure every "
              "parameter passed to get_gradients() is used to compute the "
              "loss.")
    return self.get_unscaled_gradients(grads)

  def compute_gradients(self, loss, var_list, tape=None):
    """Returns unscaled `(gradient, variable)` pairs of `loss`.

    Args:
      loss: a callable with no arguments returning the loss, or a tensor
        computed under `tape` (what Keras's `fit` passes).
      var_list: variables, or a callable returning them.
      tape: the `tf.GradientTape` that recorded a tensor `loss`.

    Raises:
      ValueError: if `loss` is a tensor and no `tape` is given.
    """
    return self._unscaled_gradients(loss, var_list, tape)

  def _unscaled_gradients(self, loss, var_list, tape, grad_loss=None):
    check_tape(loss, tape)
    object.__setattr__(self, "_loss_has_been_scaled", True)
    object.__setattr__(self, "_gradients_have_been_unscaled", True)
    return wrapping.unscaled_gradients(
        self._loss_scale, loss,
        lambda scaled: self._gradients_of(scaled, var_list, tape, grad_loss),
        tape)

  def minimize(self, loss, var_list, tape=None):
    """`apply_gradients(compute_gradients(loss, var_list, tape))`."""
    return self.apply_gradients(self.compute_gradients(loss, var_list, tape))

  # Applying.

  def _apply_if_finite(self, grads, variables, apply_on_replica, name=None):
    """Runs `apply_on_replica(grads)` on every replica if all are finite.

    The step of the module docstring: returns one op (None eagerly), raises
    ValueError in cross-replica context. `variables` (named by the overflow
    log) reach `apply_on_replica` through its closure: merge_call's
    arguments would be unwrapped to per-replica components.
    """
    wrapping.check_replica_context()

    def step(grads, apply_fn):
      return apply.guarded_step(
          self._loss_scale, grads, apply_fn, skip_fn=self._advance_iterations,
          name=name, steps=record.StepRecord(
              variables=variables, step=self._optimizer.iterations))

    if not tf.distribute.has_strategy():
      # One replica, the default: the step runs here, as Keras's own classes
      # run it. A wrapped optimizer that all-reduces in this replica context
      # records a gradient function that a SavedModel traces later, where
      # only the default replica context exists.
      return step(list(grads), lambda: apply_on_replica(grads))

    def merge_fn(strategy, grads):

      def apply_fn():
        result = strategy.extended.call_for_each_replica(
            apply_on_replica, args=(grads,))
        return None if result is None else strategy.group(result)

      return step(grads, apply_fn)

    return tf.distribute.get_replica_context().merge_call(
        merge_fn, args=(list(grads),))

  def _advance_iterations(self):
    return self._optimizer.iterations.assign_add(1, read_value=False)

  def finalize_variable_values(self, var_list):
    """Lets the wrapped optimizer finish (e.g. write EMA averages).

    Keras 3's and tf_keras's `fit` call it; OptimizerV2 has none.
    """
    self._optimizer.finalize_variable_values(var_list)

  # Passthrough to the wrapped optimizer.

  iterations = forwarded("iterations", "The wrapped optimizer's step counter.")
  learning_rate = forwarded(
      "learning_rate", "The wrapped optimizer's learning rate or schedule.")
  lr = learning_rate

  def get_slot(self, var, slot_name):
    """Returns the wrapped optimizer's state `slot_name` for `var`.

    Raises:
      KeyError: naming the slots `var` has, when it has no `slot_name`.
    """
    slots = self._slots_of(var)  # The family's {name: state} of `var`.
    if slot_name not in slots:
      raise KeyError(
          f"Variable {var.name!r} has no slot {slot_name!r}. Its slots: "
          f"{sorted(slots)}.")
    return slots[slot_name]

  @property
  def variables(self):
    """The wrapped optimizer's variables, then the loss scale's."""
    return list(self._optimizer.variables) + list(self._loss_scale.variables)

  @property
  def weights(self):
    """Same as `variables`."""
    return list(self.variables)

  def get_weights(self):
    """Returns the values of `variables` as NumPy arrays."""
    return [v.numpy() for v in self.variables]

  def set_weights(self, weights):
    """Sets `variables` from arrays, as `get_weights` returns them.

    A list holding only the wrapped optimizer's weights (a file of the
    family's own loss-scale optimizer or of the bare optimizer) is accepted
    too, and leaves the loss scale as it is.

    Raises:
      ValueError: if the number of arrays or a shape does not match.
    """
    inner_count = len(self._optimizer.variables)
    pairs = weights_to_set(self.variables, inner_count, weights)
    self._set_inner_weights([w for _, w in pairs[:inner_count]])
    for variable, weight in pairs[inner_count:]:
      variable.assign(weight)

  def _set_inner_weights(self, arrays):
    for variable, array in zip(self._optimizer.variables, arrays):
      variable.assign(array)

  # Configuration.

  def get_config(self):
    """Returns TF 2.3's config: the wrapped optimizer's and the loss scale's."""
    config = config_lib.make_config(
        self._OPTIMIZERS.serialize(self._optimizer), self._loss_scale)
    config.update({key: getattr(self, key) for key in self._CONFIG_KEYS})
    return config

  @classmethod
  def from_config(cls, config, custom_objects=None):
    """Creates the optimizer from `get_config()` output.

    TF 2.3's, tf_keras's and Keras 3's loss-scale optimizer configs are read;
    `custom_objects` names custom optimizer, schedule or `LossScale` classes.

    Raises:
      ValueError: if `config` is not a loss-scale optimizer config, or (Keras
        3) holds a key Keras 3's class refuses.
      TypeError: if the wrapped optimizer's config is not of this family, or
        (tf_keras) holds a key tf_keras's class does not take.
    """
    optimizer_config, loss_scale = config_lib.split_config(
        config, custom_objects)
    # Any other key goes to the constructor, which refuses what the family's
    # own class refuses (an unknown key, a top-level `learning_rate`).
    return cls(cls._deserialize(optimizer_config, custom_objects), loss_scale,
               **config_lib.other_keys(config))

  @classmethod
  def _deserialize(cls, optimizer_config, custom_objects):
    if cls._wraps(optimizer_config):
      return optimizer_config  # tf_keras's from_config allows an optimizer.
    # A copy: deserializing may change the dict it is given.
    return cls._OPTIMIZERS.deserialize(
        copy.deepcopy(dict(optimizer_config)), custom_objects=custom_objects,
        **cls._DESERIALIZE_KWARGS)


class DelegatesTracking(tf_seams.DelegatingTrackableMixin):
  """Makes the wrapper stand in for the wrapped optimizer in checkpoints.

  tf_keras's own loss-scale optimizers do this: the wrapper's checkpoint
  dependencies are the wrapped optimizer's, plus the loss scale tracked as
  one more child of it, `loss_scale`. Checkpoints then move between the
  wrapper, tf_keras's wrapper and the bare optimizer, and an optimizer can
  be wrapped only once (a second loss scale would collide with the first).
  The family base class's `__init__` is not called: all optimizer state is
  the wrapped optimizer's.
  """

  def _wrap(self, optimizer, loss_scale):
    if getattr(optimizer, "_is_wrapped_by_loss_scale_optimizer", False):
      raise ValueError(
          '"inner_optimizer" is already wrapped by a LossScaleOptimizer. An '
          "optimizer can only be wrapped by a single LossScaleOptimizer. "
          f"Received: {optimizer!r}. Create a new optimizer to wrap, or use "
          "the existing wrapper.")
    # Nothing set on this object becomes a dependency of its own.
    object.__setattr__(self, "_self_setattr_tracking", False)
    tf_seams.DelegatingTrackableMixin.__init__(self, optimizer)
    self._optimizer = optimizer
    self._loss_scale = loss_scale
    optimizer._is_wrapped_by_loss_scale_optimizer = True
    self._track_trackable(loss_scale, "loss_scale")  # Into `optimizer`.
    for variable in loss_scale.variables:  # For tf_keras's TF1-mode `fit`.
      tf_seams.tf_keras_track_variable(variable)

  def _trackable_children(self, save_type="checkpoint", **kwargs):
    children = dict(self._optimizer._trackable_children(save_type, **kwargs))
    # tf_keras caches an optimizer's children on first use; a list made
    # before it was wrapped lacks the loss scale.
    children.setdefault("loss_scale", self._loss_scale)
    return children
