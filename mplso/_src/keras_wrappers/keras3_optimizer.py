"""The Keras 3 family: loss scaling for a `keras.optimizers.Optimizer`."""

from __future__ import annotations

import keras
import tensorflow as tf

from mplso._src import loss_scale as loss_scale_lib
from mplso._src.core import apply
from mplso._src.core import checks
from mplso._src.core import scaling
from mplso._src.keras_wrappers import config as config_lib

PACKAGE = "keras"

_KerasLossScaleOptimizer = keras.optimizers.LossScaleOptimizer


def wraps(optimizer) -> bool:
  """Returns True for a Keras 3 optimizer."""
  return isinstance(optimizer, keras.optimizers.Optimizer)


def scales_loss(optimizer) -> bool:
  """Returns True for a Keras 3 loss-scale optimizer, ours or Keras's."""
  return isinstance(optimizer, _KerasLossScaleOptimizer)


def reads_config(optimizer_config) -> bool:
  """Returns True for a Keras 3 optimizer's config.

  Keras 3 and tf_keras's optimizers write `use_ema` (tf_keras's legacy ones do
  not); only tf_keras's write `is_legacy_optimizer`.
  """
  return ("use_ema" in optimizer_config and
          "is_legacy_optimizer" not in optimizer_config)


def _slot_prefix(variable) -> str:
  """The name prefix of the state Keras 3 creates for `variable`.

  Keras 3 names per-variable state `{path with '/' as '_'}_{state name}`, see
  `add_variable_from_reference`.
  """
  if hasattr(variable, "path"):
    return variable.path.replace("/", "_") + "_"
  return str(variable.name).replace("/", "_").replace(":", "_") + "_"


@keras.saving.register_keras_serializable(package="mplso",
                                          name="LossScaleOptimizer")
class LossScaleOptimizer(_KerasLossScaleOptimizer):
  """Loss scaling for a Keras 3 optimizer, with TF 2.3's API.

  Made by `mplso.keras.LossScaleOptimizer(optimizer, loss_scale)` when
  `optimizer` is a `keras.optimizers.Optimizer` (what `tf.keras` is by
  default on TF 2.21).

  Two gradient protocols work:

  * TF 2.3's: `get_scaled_loss(loss)` under a tape, then
    `get_unscaled_gradients(grads)`, then `apply_gradients` with *unscaled*
    gradients (and `minimize`, which does all three).
  * Keras 3's trainer's (`fit`): `scale_loss(loss)` under a tape, then
    `apply_gradients` with *scaled* gradients.

  The wrapper tells them apart by which method was called last:
  `scale_loss` marks the next `apply_gradients` as receiving scaled
  gradients, which it then unscales itself; `get_unscaled_gradients` and
  `apply_gradients` clear the mark. (Inside a `tf.function` this happens
  while tracing, so each traced step keeps the protocol it was traced with.)

  Compatibility: mirrors TF 2.3's
  `tf.keras.mixed_precision.experimental.LossScaleOptimizer` and is an
  instance of `keras.optimizers.LossScaleOptimizer`, so `compile` under the
  `mixed_float16` policy keeps it as it is. Deliberate differences from
  Keras 3's own class: the loss scale is an `mplso.LossScale` (fixed or
  dynamic; a dynamic one never goes below 1 and grows only while finite);
  a skipped step advances `iterations`, as TF 2.3 documents; a fixed scale
  skips non-finite steps too; `get_scaled_loss`, `get_unscaled_gradients`,
  `minimize`, `lr`, `get_slot`, `get_slot_names`, `add_slot`, `weights` and
  `get_weights` exist. Checkpoint children: `inner_optimizer` (as in Keras
  3's class) and `loss_scale` (variables `current_loss_scale`, `good_steps`).
  """

  def __init__(self, optimizer, loss_scale, name=None):
    """Wraps `optimizer`.

    Args:
      optimizer: a `keras.optimizers.Optimizer` (Keras 3).
      loss_scale: `"dynamic"`, a Python int or float >= 1, or an
        `mplso.LossScale`.
      name: optional name; defaults to `"loss_scale_optimizer"`.

    Raises:
      TypeError: if `optimizer` is not a Keras 3 optimizer, or already
        scales the loss.
      ValueError: if `loss_scale` is not accepted.
    """
    if scales_loss(optimizer):
      raise config_lib.wrapped_twice_error(optimizer)
    if not wraps(optimizer):
      raise TypeError(
          "`optimizer` must be a keras.optimizers.Optimizer (Keras 3). "
          f"Received: optimizer={optimizer!r}. Accepted by "
          f"mplso.keras.LossScaleOptimizer: {config_lib.ACCEPTED_OPTIMIZERS}.")
    loss_scale = config_lib.loss_scale_arg(loss_scale)
    # Keras 3's LossScaleOptimizer.__init__ would create its own dynamic
    # scale; only the base optimizer's setup is wanted.
    keras.optimizers.Optimizer.__init__(  # pylint: disable=non-parent-init-called
        self, learning_rate=0.0, name=name)
    self.inner_optimizer = optimizer  # Keras's name; callbacks look for it.
    # Tracked under TF's checkpoint name rather than the attribute's.
    object.__setattr__(self, "_loss_scale", loss_scale)
    self._track_trackable(loss_scale, "loss_scale")
    object.__setattr__(self, "_grads_are_scaled", False)

  @property
  def _optimizer(self) -> keras.optimizers.Optimizer:
    return self.inner_optimizer

  @property
  def loss_scale(self) -> loss_scale_lib.LossScale:
    """The `mplso.LossScale` this optimizer scales by."""
    return self._loss_scale

  # Scaling.

  def get_scaled_loss(self, loss):
    """Returns `loss` times the loss scale (a callable if `loss` is one)."""
    return scaling.scale_loss(loss, self._loss_scale)

  def get_unscaled_gradients(self, grads):
    """Returns `grads` divided by the loss scale; None stays None."""
    object.__setattr__(self, "_grads_are_scaled", False)
    return scaling.unscale_grads(list(grads), self._loss_scale())

  def scale_loss(self, loss):
    """Keras 3's hook: scales `loss`; the next `apply_gradients` unscales."""
    object.__setattr__(self, "_grads_are_scaled", True)
    return self.get_scaled_loss(loss)

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
    tape = tape if tape is not None else tf.GradientTape()
    with tape:
      if callable(loss):
        if not callable(var_list):
          # A tape watches tf.Variables; a Keras 3 Variable holds one.
          tape.watch([v.value if isinstance(v, keras.Variable) else v
                      for v in tf.nest.flatten(var_list)])
        loss = loss()
      scaled_loss = self.get_scaled_loss(loss)
    if callable(var_list):
      var_list = var_list()
    var_list = list(tf.nest.flatten(var_list))
    grads = self.get_unscaled_gradients(tape.gradient(scaled_loss, var_list))
    return list(zip(grads, var_list))

  def minimize(self, loss, var_list, tape=None):
    """Scales `loss`, computes and unscales gradients, and applies them."""
    return self.apply_gradients(self.compute_gradients(loss, var_list, tape))

  # Applying.

  @tf.__internal__.tracking.no_automatic_dependency_tracking
  def build(self, var_list):
    """Creates the wrapped optimizer's state for `var_list`."""
    self.inner_optimizer.build(var_list)
    keras.optimizers.Optimizer.build(self, var_list)  # pylint: disable=non-parent-init-called

  def apply_gradients(self, grads_and_vars, name=None,
                      experimental_aggregate_gradients=True):
    """Applies the gradients if all are finite, and updates the loss scale.

    Args:
      grads_and_vars: `(gradient, variable)` pairs. The gradients are
        unscaled, unless `scale_loss` was called since the last
        `get_unscaled_gradients` (Keras 3's `fit`).
      name: ignored; TF 2.3's argument.
      experimental_aggregate_gradients: TF 2.3's argument. Keras 3
        optimizers always sum the gradients across replicas, so False is
        refused under a strategy with several replicas.

    Returns:
      The wrapped optimizer's `iterations`, as Keras 3 does.

    Raises:
      ValueError: for `experimental_aggregate_gradients=False` under a
        strategy with several replicas, in cross-replica context, or if an
        entry of `grads_and_vars` is not a (gradient, variable) pair with a
        numeric gradient of the variable's shape.
    """
    del name
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
    self.apply([g for g, _ in grads_and_vars], [v for _, v in grads_and_vars])
    return self.iterations

  def apply(self, grads, trainable_variables=None):
    """Applies `grads` on every replica or on none, then updates the scale."""
    grads = list(grads)
    if self._grads_are_scaled:
      grads = self.get_unscaled_gradients(grads)
    if not self.built:
      self.build(trainable_variables if trainable_variables is not None
                 else self.inner_optimizer._trainable_variables)  # pylint: disable=protected-access
    if tf.distribute.in_cross_replica_context():
      raise ValueError(
          "apply_gradients() must be called in a replica context. Call it "
          "inside strategy.run(...).")
    tf.distribute.get_replica_context().merge_call(
        self._distributed_apply, args=(grads, trainable_variables))

  def _distributed_apply(self, strategy, grads, trainable_variables):
    inner = self.inner_optimizer

    def apply_fn():
      strategy.extended.call_for_each_replica(
          inner.apply, args=(grads, trainable_variables))

    def skip_fn():
      return inner.iterations.assign_add(1)

    return apply.guarded_step(self._loss_scale, grads, apply_fn, skip_fn,
                              variables=trainable_variables,
                              step=inner.iterations)

  def stateless_apply(self, optimizer_variables, grads, trainable_variables):
    raise ValueError(
        "stateless_apply is not supported by mplso's LossScaleOptimizer on "
        "the TensorFlow backend; use apply_gradients.")

  # Passthrough to the wrapped optimizer.

  @property
  def variables(self):
    """The wrapped optimizer's variables, then the loss scale's."""
    return list(self.inner_optimizer.variables) + list(
        self._loss_scale.variables)

  @property
  def weights(self):
    """Same as `variables`."""
    return self.variables

  def get_weights(self):
    """Returns the values of `variables` as NumPy arrays."""
    return [v.numpy() for v in self.variables]

  def set_weights(self, weights):
    """Sets `variables` from NumPy arrays, as `get_weights` returns them.

    A list holding only the wrapped optimizer's weights is accepted too, and
    leaves the loss scale as it is.

    Raises:
      ValueError: if the number of arrays or a shape does not match.
    """
    for variable, weight in config_lib.weights_to_set(
        self.variables, len(self.inner_optimizer.variables), weights):
      variable.assign(weight)

  @property
  def iterations(self):
    """The wrapped optimizer's step counter."""
    return self.inner_optimizer.iterations

  @property
  def learning_rate(self):
    return self.inner_optimizer.learning_rate

  @learning_rate.setter
  def learning_rate(self, learning_rate):
    self.inner_optimizer.learning_rate = learning_rate

  lr = learning_rate

  def add_slot(self, var, slot_name, initializer="zeros"):
    """Creates per-variable state `slot_name` for `var` in the wrapped optimizer."""
    return self.inner_optimizer.add_variable_from_reference(
        var, slot_name, initializer=initializer)

  def get_slot(self, var, slot_name):
    """Returns the wrapped optimizer's state `slot_name` for `var`.

    Raises:
      KeyError: naming the slots `var` has, when it has no `slot_name`.
    """
    slots = self._slots_of(var)
    if slot_name not in slots:
      raise KeyError(
          f"Variable {var.name!r} has no slot {slot_name!r}. Its slots: "
          f"{sorted(slots)}.")
    return slots[slot_name]

  def get_slot_names(self):
    """Returns the names of the wrapped optimizer's per-variable state.

    Keras 3 optimizers have no slots; their per-variable state (for Adam
    `momentum` and `velocity`) is reported under its own names.
    """
    names = []
    for var in getattr(self.inner_optimizer, "_trainable_variables", []):
      names += [n for n in self._slots_of(var) if n not in names]
    return names

  def _slots_of(self, var):
    prefix = _slot_prefix(var)
    return {v.name[len(prefix):]: v for v in self.inner_optimizer.variables
            if v.name.startswith(prefix)}

  def __dir__(self):
    # TF's checkpointer collects slot variables from every object whose dir()
    # has `get_slot_names`; these already belong to the wrapped optimizer, a
    # child, and reporting them twice fails with "A slot variable was re-used
    # as a dependency". Hiding the name from dir() keeps the method.
    return [n for n in super().__dir__() if n != "get_slot_names"]

  def __getattr__(self, name):
    # Called only when normal lookup fails: hyperparameters such as `beta_1`
    # are the wrapped optimizer's.
    if name.startswith("__") or name in ("inner_optimizer", "_tracker"):
      raise AttributeError(name)
    try:
      inner = object.__getattribute__(self, "inner_optimizer")
    except AttributeError:
      raise AttributeError(name) from None
    return getattr(inner, name)

  def finalize_variable_values(self, var_list):
    self.inner_optimizer.finalize_variable_values(var_list)

  # Configuration.

  def get_config(self):
    """Returns TF 2.3's config: the wrapped optimizer's and the loss scale's."""
    config = config_lib.make_config(
        keras.optimizers.serialize(self.inner_optimizer), self._loss_scale)
    config["name"] = self.name
    return config

  @classmethod
  def from_config(cls, config, custom_objects=None):
    """Creates the optimizer from `get_config()` output.

    TF 2.3's, tf_keras's and Keras 3's loss-scale optimizer configs are read.
    """
    optimizer_config, loss_scale = config_lib.split_config(
        config, custom_objects)
    optimizer = keras.optimizers.deserialize(
        dict(optimizer_config), custom_objects=custom_objects)
    return cls(optimizer, loss_scale, name=config.get("name"))
