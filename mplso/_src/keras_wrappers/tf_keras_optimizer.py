"""The tf_keras new-optimizer family: loss scaling for tf_keras.optimizers.*."""

from __future__ import annotations

import copy
import functools

from absl import logging
import tensorflow as tf
import tf_keras
from tf_keras.src.mixed_precision import loss_scale_optimizer as _tf_keras_lso
from tf_keras.src.optimizers import optimizer as _optimizer_lib
from tf_keras.src.optimizers import utils as _optimizer_utils

from mplso._src import loss_scale as loss_scale_lib
from mplso._src.core import apply
from mplso._src.core import checks
from mplso._src.core import scaling
from mplso._src.keras_wrappers import config as config_lib

PACKAGE = "tf_keras"

_Optimizer = _optimizer_lib.Optimizer  # Is tf_keras.optimizers.Optimizer.
# tf_keras's `Model.compile` under `mixed_float16` wraps any optimizer that
# is not an instance of this class; every tf_keras loss-scale optimizer is.
_BaseLossScaleOptimizer = _tf_keras_lso.BaseLossScaleOptimizer


def wraps(optimizer) -> bool:
  """Returns True for a tf_keras new optimizer (`tf_keras.optimizers.*`)."""
  return isinstance(optimizer, _Optimizer)


def scales_loss(optimizer) -> bool:
  """Returns True for any tf_keras loss-scale optimizer, ours or tf_keras's."""
  return isinstance(optimizer, _BaseLossScaleOptimizer)


def reads_config(optimizer_config) -> bool:
  """Returns True for the config of a tf_keras (non-legacy) optimizer.

  Only tf_keras's new optimizers write `"is_legacy_optimizer": False`; legacy
  (OptimizerV2) configs and Keras 3's have no such key.
  """
  return optimizer_config.get("is_legacy_optimizer") is False


def _base_name(variable) -> str:
  """The variable's name without the `:0` output suffix."""
  return variable.name.split(":")[0]


def _slot_name(state_variable) -> str | None:
  """The name under which tf_keras created per-variable state, or None.

  `add_variable_from_reference(var, name)` names the state variable
  `{name}/{var name}` (Adam's `m/dense/kernel`); the optimizer's own
  variables (`iteration`, `learning_rate`) have no `/`.
  """
  name = _base_name(state_variable)
  return name.split("/", 1)[0] if "/" in name else None


@tf_keras.saving.register_keras_serializable(package="mplso",
                                             name="LossScaleOptimizerV3")
class LossScaleOptimizer(tf.__internal__.tracking.DelegatingTrackableMixin,
                         _Optimizer, _BaseLossScaleOptimizer):
  """Loss scaling for a tf_keras new optimizer, with TF 2.3's API.

  Made by `mplso.keras.LossScaleOptimizer(optimizer, loss_scale)` when
  `optimizer` is a `tf_keras.optimizers.Optimizer` (Keras 2's new optimizer,
  also `tf.keras.optimizers.*` when `TF_USE_LEGACY_KERAS=1`).

      opt = mplso.keras.LossScaleOptimizer(tf_keras.optimizers.Adam(),
                                           "dynamic")
      model.compile(optimizer=opt, loss="mse")  # fit calls minimize.

      with tf.GradientTape() as tape:
        scaled_loss = opt.get_scaled_loss(loss_fn())
      grads = opt.get_unscaled_gradients(
          tape.gradient(scaled_loss, model.trainable_variables))
      opt.apply_gradients(zip(grads, model.trainable_variables))

  `apply_gradients` takes *unscaled* gradients (TF 2.3's protocol; tf_keras's
  `fit` calls `minimize`, which scales and unscales by itself). It
  aggregates them across replicas first, then, in cross-replica context,
  checks that every one is finite on every replica, updates the loss scale,
  and applies the step on every replica or on none. A skipped step still
  advances `iterations`, as TF 2.3 documents and tf_keras's class does.

  For a checkpoint this object *is* the wrapped optimizer: like tf_keras's
  own class it delegates tracking to it, and the loss scale is one more
  child of it, `loss_scale` (variables `current_loss_scale`, `good_steps`).
  So `tf.train.Checkpoint` files move both ways between this class,
  tf_keras's `LossScaleOptimizerV3`, and the bare wrapped optimizer (which
  ignores the loss scale). An optimizer can be wrapped only once.

  The class is registered as `mplso>LossScaleOptimizerV3`, so
  `tf_keras.models.load_model` rebuilds it without `custom_objects`;
  `.keras` and `.h5` files also restore its state. tf_keras's SavedModel
  loader restores no optimizer's state; the state is in the SavedModel, and
  `tf.train.Checkpoint(root=model).restore(path + "/variables/variables")`
  reads it.

  Compatibility: mirrors TF 2.3's
  `tf.keras.mixed_precision.experimental.LossScaleOptimizer` on top of
  tf_keras's new optimizer, and is an instance of
  `tf_keras.mixed_precision.LossScaleOptimizer`, so `compile` under
  `mixed_float16` keeps it as it is. Differences from TF 2.3: the base class
  has no slots or hyperparameter API, so `get_slot` / `get_slot_names`
  report the wrapped optimizer's per-variable state under its own names
  (Adam's `m`, `v`), `add_slot` forwards to `add_variable_from_reference`,
  and public attributes (`beta_1`, `clipnorm`) are read and set on the
  wrapped optimizer; `apply_gradients` has tf_keras's signature, with
  `skip_gradients_aggregation` third, and takes TF 2.3's
  `experimental_aggregate_gradients` by keyword only; `get_weights` /
  `weights` do not exist (the family has none). Differences from
  tf_keras's `LossScaleOptimizerV3`: the loss scale is an `mplso.LossScale`
  and `loss_scale` returns it (theirs returns a tensor); a fixed loss scale
  skips non-finite steps too (theirs applies them); `variables`,
  `set_weights` and `.keras` / `.h5` files include the loss scale's two
  variables after the wrapped optimizer's, so `load_model` restores the
  scale and good-step count (theirs restarts them); `get_config` writes TF
  2.3's format (theirs is read too).
  """

  def __init__(self, optimizer, loss_scale):
    """Wraps `optimizer`.

    Args:
      optimizer: a `tf_keras.optimizers.Optimizer`, not wrapped before.
      loss_scale: `"dynamic"`, a Python int or float >= 1, or an
        `mplso.LossScale`.

    Raises:
      TypeError: if `optimizer` is not a tf_keras new optimizer, or already
        scales the loss.
      ValueError: if `loss_scale` is not accepted, or `optimizer` is already
        wrapped by another loss-scale optimizer.
    """
    # Nothing set on this object becomes a checkpoint dependency: its
    # dependencies are the wrapped optimizer's (see the class docstring).
    object.__setattr__(self, "_self_setattr_tracking", False)
    if scales_loss(optimizer):
      raise config_lib.wrapped_twice_error(optimizer)
    if not wraps(optimizer):
      raise TypeError(
          "`optimizer` must be a tf_keras.optimizers.Optimizer (Keras 2 new "
          f"optimizer). Received: optimizer={optimizer!r} of type "
          f"{type(optimizer).__name__}. Accepted by "
          f"mplso.keras.LossScaleOptimizer: {config_lib.ACCEPTED_OPTIMIZERS}.")
    loss_scale = config_lib.loss_scale_arg(loss_scale)
    # tf_keras's class sets this flag too: both track the loss scale as a
    # child of the wrapped optimizer, so a second wrapper would collide.
    if getattr(optimizer, "_is_wrapped_by_loss_scale_optimizer", False):
      raise ValueError(
          "`optimizer` is already wrapped by a LossScaleOptimizer; an "
          f"optimizer can be wrapped only once. Received: {optimizer!r}. "
          "Create a new optimizer, or reuse the existing wrapper.")
    tf.__internal__.tracking.DelegatingTrackableMixin.__init__(self, optimizer)
    self._optimizer = optimizer
    self._loss_scale = loss_scale
    optimizer._is_wrapped_by_loss_scale_optimizer = True  # pylint: disable=protected-access
    self._track_trackable(loss_scale, "loss_scale")  # Into `optimizer`.

  def _trackable_children(self, save_type="checkpoint", **kwargs):
    children = dict(self._optimizer._trackable_children(save_type, **kwargs))  # pylint: disable=protected-access
    # tf_keras caches an optimizer's children on first use; one listed
    # before it was wrapped lacks the loss scale.
    children.setdefault("loss_scale", self._loss_scale)
    return children

  # The loss scale.

  @property
  def loss_scale(self) -> loss_scale_lib.LossScale:
    """The `mplso.LossScale` this optimizer scales by."""
    return self._loss_scale

  @property
  def inner_optimizer(self) -> _Optimizer:
    """The wrapped optimizer (tf_keras's name)."""
    return self._optimizer

  @property
  def dynamic(self) -> bool:
    """Whether the loss scale is a `mplso.DynamicLossScale` (tf_keras's API)."""
    return isinstance(self._loss_scale, loss_scale_lib.DynamicLossScale)

  @property
  def initial_scale(self) -> float | None:
    """The first loss scale (tf_keras's API); None for a custom `LossScale`."""
    if isinstance(self._loss_scale, loss_scale_lib.DynamicLossScale):
      return self._loss_scale.initial_loss_scale
    if isinstance(self._loss_scale, loss_scale_lib.FixedLossScale):
      return self._loss_scale.loss_scale_value
    return None

  @property
  def dynamic_growth_steps(self) -> int | None:
    """Finite steps between growths (tf_keras's API); None unless dynamic."""
    if isinstance(self._loss_scale, loss_scale_lib.DynamicLossScale):
      return self._loss_scale.increment_period
    return None

  @property
  def dynamic_counter(self) -> tf.Variable | None:
    """The `good_steps` variable (tf_keras's API); None unless dynamic."""
    if not self.dynamic:
      return None
    return next(v for v in self._loss_scale.variables
                if _base_name(v).split("/")[-1] == "good_steps")

  def get_scaled_loss(self, loss):
    """Returns `loss` times the loss scale (a callable if `loss` is one)."""
    return scaling.scale_loss(loss, self._loss_scale())

  def get_unscaled_gradients(self, grads):
    """Returns `grads` divided by the loss scale; None stays None.

    `tf.IndexedSlices` stay `tf.IndexedSlices`.
    """
    return scaling.unscale_grads(list(grads), self._loss_scale())

  def compute_gradients(self, loss, var_list, tape=None):
    """Returns unscaled `(gradient, variable)` pairs of `loss`.

    Args:
      loss: a callable with no arguments returning the loss, or a tensor
        computed under `tape`.
      var_list: variables, or a callable returning them.
      tape: the `tf.GradientTape` that recorded a tensor `loss`.

    Raises:
      ValueError: if `loss` is a tensor and no `tape` is given.
    """
    config_lib.check_tape(loss, tape)
    if callable(loss):
      scaled_loss = self.get_scaled_loss(loss)
    else:
      with tape:  # Records the multiplication, so it is differentiated.
        scaled_loss = self.get_scaled_loss(loss)
    grads_and_vars = self._optimizer.compute_gradients(
        scaled_loss, var_list, tape=tape)
    grads = self.get_unscaled_gradients([g for g, _ in grads_and_vars])
    return list(zip(grads, [v for _, v in grads_and_vars]))

  def minimize(self, loss, var_list, tape=None):
    """Scales `loss`, computes and unscales gradients, and applies them.

    Args:
      loss: a callable with no arguments returning the loss, or a tensor
        computed under `tape` (what tf_keras's `fit` passes).
      var_list: variables, or a callable returning them.
      tape: the `tf.GradientTape` that recorded a tensor `loss`.
    """
    self.apply_gradients(self.compute_gradients(loss, var_list, tape))

  def get_gradients(self, loss, params):
    """Returns the unscaled gradients of `loss` for `params` (graph mode).

    TF 2.3's Keras 2 method, with `tf.gradients`; this family has no other.

    Raises:
      ValueError: if a parameter has no gradient, naming it.
    """
    params = list(tf.nest.flatten(params))
    grads = tf.gradients(self.get_scaled_loss(loss), params)
    for grad, param in zip(grads, params):
      if grad is None:
        raise ValueError(
            f"Variable {param.name!r} has no gradient. Make sure every "
            "parameter passed to get_gradients() is used to compute the loss.")
    return self.get_unscaled_gradients(grads)

  # Applying.

  def apply_gradients(self, grads_and_vars, name=None,
                      skip_gradients_aggregation=False, **kwargs):
    """Applies the gradients if all are finite, and updates the loss scale.

    Args:
      grads_and_vars: `(unscaled gradient, variable)` pairs.
      name: optional name scope, passed to the wrapped optimizer.
      skip_gradients_aggregation: tf_keras's argument: True when the caller
        has already summed the gradients across replicas.
      **kwargs: `experimental_aggregate_gradients` (TF 2.3's argument, the
        opposite of `skip_gradients_aggregation`; default True).

    Returns:
      The wrapped optimizer's `iterations` variable, as tf_keras does.

    Raises:
      TypeError: for any other keyword argument.
      ValueError: if called in cross-replica context, no gradient is
        given for any variable, or an entry of `grads_and_vars` is not a
        (gradient, variable) pair whose gradient has the variable's dtype and
        shape.
    """
    aggregate = kwargs.pop("experimental_aggregate_gradients", True)
    if kwargs:
      raise TypeError(
          "apply_gradients() got unexpected keyword arguments "
          f"{sorted(kwargs)}. Accepted: name, skip_gradients_aggregation, "
          "experimental_aggregate_gradients.")
    grads_and_vars = checks.check_grads_and_vars(grads_and_vars)
    if not grads_and_vars:
      return self.iterations
    with tf.init_scope():
      # The wrapped optimizer creates its state outside any tf.function and
      # before the tf.cond below, whose branches must not create variables.
      self.build([v for _, v in grads_and_vars])
    if tf.distribute.in_cross_replica_context():
      raise ValueError(
          "apply_gradients() must be called in a replica context. Call it "
          "inside strategy.run(...).")
    grads_and_vars = _optimizer_utils.filter_empty_gradients(grads_and_vars)
    if aggregate and not skip_gradients_aggregation:
      # Summed here, not by the wrapped optimizer, so that every replica
      # sees the same gradients and makes the same finite/non-finite call.
      grads_and_vars = self._optimizer.aggregate_gradients(grads_and_vars)
    grads = [g for g, _ in grads_and_vars]
    # The variables reach the replicas through the closure, not through
    # merge_call's arguments, which a strategy would unwrap to per-replica
    # components; the wrapped optimizer wants the distributed variables.
    merge_fn = functools.partial(
        self._distributed_apply,
        variables=[v for _, v in grads_and_vars], name=name)
    tf.distribute.get_replica_context().merge_call(merge_fn, args=(grads,))
    return self.iterations

  def _distributed_apply(self, strategy, grads, variables, name=None):
    """Applies on every replica or on none; updates the loss scale once.

    Args:
      strategy: the `tf.distribute.Strategy` in use (the default outside
        any).
      grads: the aggregated, unscaled gradients, per replica.
      variables: the variables, in the order of `grads`.
      name: optional name scope of the wrapped optimizer's update.

    Returns:
      One op (None in eager mode).
    """
    optimizer = self._optimizer

    def apply_on_replica(replica_grads):
      optimizer.apply_gradients(
          list(zip(replica_grads, variables)), name=name,
          skip_gradients_aggregation=True)

    def apply_fn():
      strategy.extended.call_for_each_replica(apply_on_replica, args=(grads,))

    def skip_fn():
      # The seed's contract: a skipped step still counts as a step.
      return optimizer.iterations.assign_add(1, read_value=False)

    return apply.guarded_step(self._loss_scale, grads, apply_fn, skip_fn,
                              variables=variables, step=optimizer.iterations)

  def build(self, var_list):
    """Creates the wrapped optimizer's state for `var_list`.

    The state is created at the top name scope, so that it is named
    `{slot}/{variable}` (what `get_slot` looks for) even when the first step
    runs eagerly inside a `tf.name_scope`.
    """
    with tf.name_scope(""):
      return self._optimizer.build(var_list)

  def update_step(self, gradient, variable):
    raise RuntimeError("Never called: the wrapped optimizer applies updates.")

  def aggregate_gradients(self, grads_and_vars):
    """Sums gradients across replicas, as the wrapped optimizer does."""
    return self._optimizer.aggregate_gradients(grads_and_vars)

  def finalize_variable_values(self, var_list):
    """Lets the wrapped optimizer finish (e.g. write EMA averages)."""
    self._optimizer.finalize_variable_values(var_list)

  def _var_key(self, variable):
    return self._optimizer._var_key(variable)  # pylint: disable=protected-access

  # Passthrough to the wrapped optimizer.

  @property
  def iterations(self):
    """The wrapped optimizer's step counter."""
    return self._optimizer.iterations

  @iterations.setter
  def iterations(self, variable):
    self._optimizer.iterations = variable

  @property
  def learning_rate(self):
    """The wrapped optimizer's learning rate (a schedule's current value)."""
    return self._optimizer.learning_rate

  @learning_rate.setter
  def learning_rate(self, learning_rate):
    self._optimizer.learning_rate = learning_rate

  @property
  def lr(self):
    """Alias of `learning_rate`."""
    return self._optimizer.learning_rate

  @lr.setter
  def lr(self, learning_rate):
    self._optimizer.learning_rate = learning_rate

  @property
  def variables(self):
    """The wrapped optimizer's variables, then the loss scale's.

    Callable too (`variables()`), like tf_keras's.
    """
    return _optimizer_lib.CallableList(
        list(self._optimizer.variables) + list(self._loss_scale.variables))

  @property
  def weights(self):
    """Same as `variables`."""
    return list(self.variables)

  def get_weights(self):
    """Returns the values of `variables` as NumPy arrays."""
    return [v.numpy() for v in self.variables]

  def set_weights(self, weights):
    """Sets `variables` from arrays, in their order.

    A list holding only the wrapped optimizer's weights (a file of tf_keras's
    class or of the bare optimizer) is accepted too, and leaves the loss
    scale as it is.

    Raises:
      ValueError: if the number of arrays, or a shape, does not match, or
        the wrapped optimizer is not built yet.
    """
    inner_count = len(self._optimizer.variables)
    pairs = config_lib.weights_to_set(self.variables, inner_count, weights)
    self._optimizer.set_weights([w for _, w in pairs[:inner_count]])
    for variable, weight in pairs[inner_count:]:
      variable.assign(weight)

  def save_own_variables(self, store):
    """Writes `variables` (the loss scale's last) into a `.keras` store."""
    for i, variable in enumerate(self.variables):
      store[str(i)] = variable.numpy()

  def load_own_variables(self, store):
    """Reads `variables` from a `.keras` store.

    A store of tf_keras's class or of the bare optimizer, which lacks the
    loss scale, restores the wrapped optimizer alone.
    """
    if len(store.keys()) == len(self._optimizer.variables):
      self._optimizer.load_own_variables(store)
      return
    variables = list(self.variables)
    if len(store.keys()) != len(variables):
      logging.warning(
          "Skipping variable loading for optimizer %r: it has %d variables, "
          "the saved one %d.", self.name, len(variables), len(store.keys()))
      return
    for i, variable in enumerate(variables):
      variable.assign(store[str(i)])

  def add_slot(self, var, slot_name, initializer="zeros"):
    """Returns `var`'s state `slot_name`, created in the wrapped optimizer.

    Forwards to `add_variable_from_reference`, so the state is named
    `{slot_name}/{var name}` and checkpointed with the wrapped optimizer's.
    An existing state of that name is returned as it is.

    Args:
      var: the model variable.
      slot_name: the state's name.
      initializer: a tf_keras initializer or its name.
    """
    existing = self._find_slot(var, slot_name)
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

  def add_variable_from_reference(self, model_variable, variable_name,
                                  shape=None, initial_value=None):
    """Creates per-variable state in the wrapped optimizer."""
    return self._optimizer.add_variable_from_reference(
        model_variable, variable_name, shape=shape,
        initial_value=initial_value)

  def add_variable(self, shape, dtype=None, initializer="zeros", name=None):
    """Creates a variable in the wrapped optimizer."""
    return self._optimizer.add_variable(shape, dtype=dtype,
                                        initializer=initializer, name=name)

  def get_slot(self, var, slot_name):
    """Returns the wrapped optimizer's state `slot_name` for `var`.

    Raises:
      KeyError: naming the slots `var` has, when it has no `slot_name`.
    """
    slot = self._find_slot(var, slot_name)
    if slot is None:
      slots = [_slot_name(v) for v in self._optimizer.variables
               if _base_name(v).split("/", 1)[-1] == _base_name(var)]
      raise KeyError(
          f"Variable {var.name!r} has no slot {slot_name!r}. Its slots: "
          f"{[s for s in slots if s]}.")
    return slot

  def get_slot_names(self):
    """Returns the names of the wrapped optimizer's per-variable state.

    tf_keras's new optimizers have no slots; their per-variable state
    (Adam's `m` and `v`, SGD's `m`, EMA's `average`) is reported under its
    own names, in creation order.
    """
    names = []
    for variable in self._optimizer.variables:
      name = _slot_name(variable)
      if name is not None and name not in names:
        names.append(name)
    return names

  def _find_slot(self, var, slot_name):
    wanted = f"{slot_name}/{_base_name(var)}"
    found = [v for v in self._optimizer.variables if _base_name(v) == wanted]
    if len(found) > 1:
      raise KeyError(
          f"Several variables are named {_base_name(var)!r}, so their slot "
          f"{slot_name!r} is ambiguous. Give the model's variables distinct "
          "names.")
    return found[0] if found else None

  def __dir__(self):
    # TF's checkpointer collects slot variables from every object whose dir()
    # has `get_slot_names`. The state reported here is already the wrapped
    # optimizer's own dependency; reporting it as slots too fails with "A
    # slot variable was re-used as a dependency". Hiding the name from dir()
    # keeps the method.
    return [n for n in super().__dir__() if n != "get_slot_names"]

  def __getattr__(self, name):
    # Called only when normal lookup fails: public attributes such as
    # `beta_1`, `epsilon`, `clipnorm` or `name` are the wrapped optimizer's.
    if name.startswith("_"):
      raise AttributeError(name)
    try:
      optimizer = self.__dict__["_optimizer"]
    except KeyError:
      raise AttributeError(name) from None
    return getattr(optimizer, name)

  def __setattr__(self, name, value):
    # Setting a hyperparameter on the wrapper must change the wrapped
    # optimizer, which uses it; a copy on the wrapper would be ignored.
    optimizer = self.__dict__.get("_optimizer")
    if (optimizer is not None and not name.startswith("_") and
        not hasattr(type(self), name) and hasattr(optimizer, name)):
      setattr(optimizer, name, value)
    else:
      super().__setattr__(name, value)

  # Configuration.

  def get_config(self):
    """Returns TF 2.3's config: the wrapped optimizer's and the loss scale's."""
    return config_lib.make_config(
        tf_keras.optimizers.serialize(self._optimizer), self._loss_scale)

  @classmethod
  def from_config(cls, config, custom_objects=None):
    """Creates the optimizer from `get_config()` output.

    TF 2.3's and tf_keras's loss-scale optimizer configs are read.
    """
    optimizer_config, loss_scale = config_lib.split_config(
        config, custom_objects)
    if isinstance(optimizer_config, _Optimizer):
      optimizer = optimizer_config  # tf_keras's from_config allows this.
    else:
      optimizer = tf_keras.optimizers.deserialize(
          copy.deepcopy(dict(optimizer_config)),
          custom_objects=custom_objects, use_legacy_optimizer=False)
    return cls(optimizer, loss_scale)
