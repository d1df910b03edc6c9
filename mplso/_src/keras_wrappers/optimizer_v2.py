"""The OptimizerV2 family: loss scaling for `tf_keras.optimizers.legacy`."""

from __future__ import annotations

import tensorflow as tf
import tf_keras
from tf_keras.src.mixed_precision import loss_scale_optimizer as tf_keras_lso
from tf_keras.src.optimizers import utils as tf_keras_optimizer_utils

from mplso._src import loss_scale as loss_scale_lib
from mplso._src.core import apply
from mplso._src.core import checks
from mplso._src.core import scaling
from mplso._src.core import tf_seams
from mplso._src.keras_wrappers import config as config_lib

# The wrapper forwards to the wrapped optimizer's OptimizerV2 hooks, which
# are private by name only: tf_keras's own wrapper calls the same ones.
# pylint: disable=protected-access

PACKAGE = "tf_keras"

_OptimizerV2 = tf_keras.optimizers.legacy.Optimizer


def wraps(optimizer) -> bool:
  """Returns True for a tf_keras OptimizerV2 (`tf_keras.optimizers.legacy`)."""
  return isinstance(optimizer, _OptimizerV2)


def scales_loss(optimizer) -> bool:
  """Returns True for a tf_keras loss-scale optimizer, ours or tf_keras's."""
  return isinstance(optimizer, tf_keras_lso.BaseLossScaleOptimizer)


def reads_config(optimizer_config) -> bool:
  """Returns True for the config of an OptimizerV2.

  tf_keras's new optimizers write `is_legacy_optimizer: False`; they and
  Keras 3's optimizers write `use_ema`. OptimizerV2 configs (tf_keras's
  legacy ones, and TF 2.3's) have neither key, unless tf_keras converted
  them and wrote `is_legacy_optimizer: True`.
  """
  return bool(optimizer_config.get("is_legacy_optimizer",
                                   "use_ema" not in optimizer_config))


def _forwarded(name: str, doc: str) -> property:
  """A property that reads and sets `name` on the wrapped optimizer."""
  return property(lambda self: getattr(self._optimizer, name),
                  lambda self, value: setattr(self._optimizer, name, value),
                  doc=doc)


def _not_provided(name: str) -> property:
  """A property of tf_keras's wrapper that this one leaves out."""

  def fget(self):
    del self
    # An AttributeError, so that hasattr() answers False (tf_keras's base
    # class raises NotImplementedError).
    raise AttributeError(
        f"mplso's LossScaleOptimizer has no `{name}` (tf_keras's API); its "
        "`loss_scale` is the mplso.LossScale, with the loss scale's state.")

  return property(fget)


@tf_keras.saving.register_keras_serializable(package="mplso",
                                             name="LossScaleOptimizer")
class LossScaleOptimizer(tf_seams.DelegatingTrackableMixin, _OptimizerV2,
                         tf_keras_lso.BaseLossScaleOptimizer):
  """Loss scaling for a tf_keras OptimizerV2, with TF 2.3's API.

  Made by `mplso.keras.LossScaleOptimizer(optimizer, loss_scale)` when
  `optimizer` is a `tf_keras.optimizers.legacy.Optimizer`. It is an
  OptimizerV2 itself, so tf_keras's `compile` and `fit` accept it, and an
  instance of tf_keras's `BaseLossScaleOptimizer`, so `compile` under the
  `mixed_float16` policy keeps it instead of wrapping it again.

  `minimize`, `get_gradients` and `fit` scale the loss and unscale the
  gradients themselves. With a `tf.GradientTape`, call `get_scaled_loss`
  and `get_unscaled_gradients` (TF 2.3's protocol):

      with tf.GradientTape() as tape:
        scaled_loss = opt.get_scaled_loss(loss_fn())
      grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, vars))
      opt.apply_gradients(zip(grads, vars))  # Updates the loss scale.

  `apply_gradients` skips the step when a gradient holds a NaN or an Inf:
  no variable or slot moves, `iterations` still advances by one, and a
  dynamic loss scale shrinks. Iterations, learning rate, hyperparameters
  (`opt.beta_1`), slots and clipping settings are the wrapped optimizer's.

  >>> opt = LossScaleOptimizer(tf_keras.optimizers.legacy.SGD(0.25),
  ...                          "dynamic")
  >>> var = tf.Variable(1.)
  >>> opt.minimize(lambda: var ** 2, var_list=[var])
  >>> float(var)
  0.5

  Compatibility: mirrors TF 2.3's
  `tf.keras.mixed_precision.experimental.LossScaleOptimizer(optimizer,
  loss_scale)`, with its config format (`{"optimizer", "loss_scale"}`;
  tf_keras's format is read too). Its checkpoint layout is tf_keras's
  `LossScaleOptimizer`'s: the wrapper stands in for the wrapped optimizer
  (`iter`, hyperparameters, slots) and adds a `loss_scale` child with
  `current_loss_scale` and `good_steps`, so checkpoints move between the
  two (as with theirs, a checkpoint must not also track the wrapped
  optimizer). tf_keras's SavedModel loader starts an OptimizerV2's state
  afresh, and its `.keras` format saves none; `.h5` keeps it, and after
  loading a SavedModel `model.load_weights(f"{path}/variables/variables")`
  restores it. Deliberate differences from TF 2.3 and tf_keras's class: a step
  with non-finite gradients is skipped under a fixed loss scale too (theirs
  applies it); `loss_scale` is the `mplso.LossScale` (tf_keras's is a
  tensor, and its `dynamic`, `initial_scale`, `dynamic_counter` and
  `dynamic_growth_steps` are not provided); `weights`, `variables()`,
  `get_weights()` and `set_weights()` include the loss scale's variables
  after the wrapped optimizer's, so an `.h5` model keeps its loss scale
  (tf_keras's wrapper loses it); and `set_weights` also accepts the
  wrapped optimizer's weights alone.
  """

  def __init__(self, optimizer, loss_scale):
    """Wraps `optimizer`.

    Args:
      optimizer: a `tf_keras.optimizers.legacy.Optimizer` (OptimizerV2).
      loss_scale: `"dynamic"`, a Python int or float >= 1, or an
        `mplso.LossScale`.

    Raises:
      TypeError: if `optimizer` is not an OptimizerV2, or already scales the
        loss.
      ValueError: if `optimizer` is already wrapped by another loss-scale
        optimizer, or `loss_scale` is not accepted.
    """
    if scales_loss(optimizer):
      raise config_lib.wrapped_twice_error(optimizer)
    if not wraps(optimizer):
      raise TypeError(
          "`optimizer` must be a tf_keras.optimizers.legacy.Optimizer "
          f"(Keras 2 OptimizerV2). Received: optimizer={optimizer!r}. "
          "Accepted by mplso.keras.LossScaleOptimizer: "
          f"{config_lib.ACCEPTED_OPTIMIZERS}.")
    # tf_keras's flag: its own wrapper refuses such an optimizer too. Both
    # wrappers add a `loss_scale` child to the optimizer they wrap.
    if getattr(optimizer, "_is_wrapped_by_loss_scale_optimizer", False):
      raise ValueError(
          "`optimizer` is already wrapped by a LossScaleOptimizer; an "
          f"optimizer can be wrapped only once. Received: {optimizer!r}. "
          "Create a new optimizer to wrap, or use the existing wrapper.")
    loss_scale = config_lib.loss_scale_arg(loss_scale)
    # OptimizerV2.__init__ is not called: all optimizer state is the wrapped
    # optimizer's, and the checkpointer sees the wrapped optimizer's
    # dependencies (plus `loss_scale`) when it asks this object for its own.
    self._optimizer = optimizer
    tf_seams.DelegatingTrackableMixin.__init__(self, optimizer)
    optimizer._is_wrapped_by_loss_scale_optimizer = True
    self._loss_scale = loss_scale
    self._track_trackable(loss_scale, "loss_scale")

  @property
  def loss_scale(self) -> loss_scale_lib.LossScale:
    """The `mplso.LossScale` this optimizer scales by."""
    return self._loss_scale

  @property
  def inner_optimizer(self) -> _OptimizerV2:
    """The wrapped optimizer (tf_keras's name for it)."""
    return self._optimizer

  dynamic = _not_provided("dynamic")
  dynamic_counter = _not_provided("dynamic_counter")
  dynamic_growth_steps = _not_provided("dynamic_growth_steps")
  initial_scale = _not_provided("initial_scale")

  # Scaling.

  def get_scaled_loss(self, loss):
    """Returns `loss` times the loss scale.

    Args:
      loss: a tensor, or a callable with no arguments returning one; the
        callable reads the scale when it is called.

    Returns:
      A tensor, or a callable when `loss` is one.
    """
    return scaling.scale_loss(loss, self._loss_scale)

  def get_unscaled_gradients(self, grads):
    """Returns `grads` divided by the loss scale; None stays None."""
    return scaling.unscale_grads(list(grads), self._loss_scale())

  def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
    """Returns unscaled `(gradient, variable)` pairs of `loss`.

    `minimize` and tf_keras's `fit` come here.

    Raises:
      ValueError: if `loss` is a tensor and no `tape` is given.
    """
    config_lib.check_tape(loss, tape)
    tape = tape if tape is not None else tf.GradientTape()
    with tape:
      scaled_loss = self.get_scaled_loss(loss)
    grads_and_vars = self._optimizer._compute_gradients(
        scaled_loss, var_list, grad_loss, tape=tape)
    grads = self.get_unscaled_gradients([g for g, _ in grads_and_vars])
    return list(zip(grads, [v for _, v in grads_and_vars]))

  def get_gradients(self, loss, params):
    """Returns the unscaled gradients of `loss` for `params` (graph mode)."""
    grads = self._optimizer.get_gradients(self.get_scaled_loss(loss), params)
    return self.get_unscaled_gradients(grads)

  # Applying.

  def apply_gradients(self, grads_and_vars, name=None,
                      experimental_aggregate_gradients=True):
    """Applies the gradients if all are finite, and updates the loss scale.

    Args:
      grads_and_vars: `(gradient, variable)` pairs of unscaled gradients.
      name: optional name of the returned op.
      experimental_aggregate_gradients: whether the wrapped optimizer sums
        the gradients across replicas. Every replica skips or applies
        alike either way.

    Returns:
      One op that applies the gradients only when every gradient is finite,
      advances `iterations` and updates the loss scale (None in eager mode,
      where all of it has run).

    Raises:
      ValueError: if called in cross-replica context, no variable has a
        gradient, or an entry of `grads_and_vars` is not a (gradient,
        variable) pair whose gradient has the variable's dtype and shape.
    """
    grads_and_vars = checks.check_grads_and_vars(grads_and_vars)
    if tf.distribute.in_cross_replica_context():
      raise ValueError(
          "apply_gradients() must be called in a replica context. Call it "
          "inside strategy.run(...).")
    grads_and_vars = tf_keras_optimizer_utils.filter_empty_gradients(
        grads_and_vars)
    if not grads_and_vars:
      return tf.no_op()  # As OptimizerV2 does.
    self._create_all_weights([v for _, v in grads_and_vars])
    return tf.distribute.get_replica_context().merge_call(
        self._distributed_apply,
        args=(grads_and_vars, name, experimental_aggregate_gradients))

  def _distributed_apply(self, distribution, grads_and_vars, name=None,
                         experimental_aggregate_gradients=True):
    """Applies on every replica or on none; updates the loss scale once.

    Args:
      distribution: the `tf.distribute.Strategy` in use.
      grads_and_vars: `(gradient, variable)` pairs, per replica.
      name: optional name of the returned op.
      experimental_aggregate_gradients: passed to the wrapped optimizer.

    Returns:
      The op of `apply_gradients` (None in eager mode).
    """

    def apply_fn():
      return distribution.group(distribution.extended.call_for_each_replica(
          self._optimizer.apply_gradients,
          args=(grads_and_vars, name, experimental_aggregate_gradients)))

    def skip_fn():
      # The wrapped optimizer advances `iterations` when it applies; TF 2.3
      # documents that a skipped step advances it too.
      return self._optimizer.iterations.assign_add(1, read_value=False)

    return apply.guarded_step(self._loss_scale,
                              [g for g, _ in grads_and_vars], apply_fn,
                              skip_fn=skip_fn, name=name,
                              variables=[v for _, v in grads_and_vars],
                              step=self._optimizer.iterations)

  # Passthrough to the wrapped optimizer.

  iterations = _forwarded(
      "iterations", "The wrapped optimizer's step counter (a variable).")
  learning_rate = _forwarded(
      "learning_rate", "The wrapped optimizer's learning rate or schedule.")
  lr = _forwarded("lr", "Alias of `learning_rate`.")
  clipnorm = _forwarded("clipnorm", "The wrapped optimizer's `clipnorm`.")
  clipvalue = _forwarded("clipvalue", "The wrapped optimizer's `clipvalue`.")
  global_clipnorm = _forwarded("global_clipnorm",
                               "The wrapped optimizer's `global_clipnorm`.")

  @property
  def _hyper(self):
    # OptimizerV2's attribute hooks look hyperparameters up here, so reading
    # and setting `opt.beta_1` or `opt.lr` reach the wrapped optimizer. Read
    # `_optimizer` from the instance dict: a plain lookup that fails would
    # come back here through OptimizerV2.__getattribute__.
    optimizer = vars(self).get("_optimizer")
    if optimizer is None:
      raise AttributeError("_hyper")
    return optimizer._hyper

  def _get_hyper(self, name, dtype=None):
    return self._optimizer._get_hyper(name, dtype)

  def _set_hyper(self, name, value):
    self._optimizer._set_hyper(name, value)

  def _create_all_weights(self, var_list):
    # Before the step's tf.cond, so that neither branch creates variables;
    # named as the wrapped optimizer names them. tf_keras's `.h5` loader
    # calls this too, before `set_weights`.
    with tf.name_scope(self._optimizer._name), tf.init_scope():
      self._optimizer._create_all_weights(var_list)

  def add_slot(self, var, slot_name, initializer="zeros", shape=None):
    """Adds slot `slot_name` for `var` to the wrapped optimizer."""
    return self._optimizer.add_slot(var, slot_name, initializer, shape)

  def get_slot(self, var, slot_name):
    """Returns the wrapped optimizer's slot `slot_name` for `var`."""
    return self._optimizer.get_slot(var, slot_name)

  def get_slot_names(self):
    """Returns the names of the wrapped optimizer's slots.

    TF's checkpointer reads slots from every object that has this method.
    The wrapped optimizer is no separate object in a checkpoint (this
    wrapper stands in for it), so its slots are saved once, under this one.
    """
    return self._optimizer.get_slot_names()

  # Checkpoint restoration finds slots through the object that saved them.

  def _create_or_restore_slot_variable(self, slot_variable_position,
                                       slot_name, variable):
    return self._optimizer._create_or_restore_slot_variable(
        slot_variable_position, slot_name, variable)

  def _restore_slot_variable(self, slot_name, variable, slot_variable):
    return self._optimizer._restore_slot_variable(
        slot_name, variable, slot_variable)

  @property
  def weights(self):
    """The wrapped optimizer's variables, then the loss scale's."""
    return list(self._optimizer.weights) + list(self._loss_scale.variables)

  def variables(self):
    """The wrapped optimizer's variables, then the loss scale's."""
    return self.weights

  def get_weights(self):
    """Returns the values of `weights` as NumPy arrays."""
    return tf_keras.backend.batch_get_value(self.weights)

  def set_weights(self, weights):
    """Sets `weights` from NumPy arrays, as `get_weights` returns them.

    A list of only the wrapped optimizer's weights (for instance from an
    `.h5` file written with tf_keras's own wrapper) is accepted too and
    leaves the loss scale as it is.

    Raises:
      ValueError: if the number of arrays or a shape does not match.
    """
    tf_keras.backend.batch_set_value(config_lib.weights_to_set(
        self.weights, len(self._optimizer.weights), weights))

  # Configuration.

  def get_config(self):
    """Returns TF 2.3's config: the wrapped optimizer's and the loss scale's."""
    return config_lib.make_config(
        tf_keras.optimizers.serialize(self._optimizer), self._loss_scale)

  @classmethod
  def from_config(cls, config, custom_objects=None):
    """Creates the optimizer from `get_config()` output.

    TF 2.3's and tf_keras's loss-scale optimizer configs are read too.

    Args:
      config: the config dict.
      custom_objects: optional mapping of names to custom optimizer,
        schedule or `LossScale` classes.

    Raises:
      ValueError: if `config` is not a loss-scale optimizer config.
      TypeError: if the wrapped optimizer's config is not an OptimizerV2's.
    """
    optimizer_config, loss_scale = config_lib.split_config(
        config, custom_objects)
    optimizer = tf_keras.optimizers.deserialize(
        dict(optimizer_config), custom_objects=custom_objects,
        use_legacy_optimizer=True)
    return cls(optimizer, loss_scale)
