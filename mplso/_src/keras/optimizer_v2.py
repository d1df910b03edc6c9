"""The OptimizerV2 family: loss scaling for `tf_keras.optimizers.legacy`."""

from __future__ import annotations

import tensorflow as tf
import tf_keras

from mplso._src.core import checks
from mplso._src.core import tf_seams
from mplso._src.keras import base
from mplso._src.keras import tf_keras_base
from mplso._src.loss_scales import loss_scale as loss_scale_lib

# The wrapper forwards to the wrapped optimizer's OptimizerV2 hooks, which
# are private by name only: tf_keras's own wrapper calls the same ones.
# pylint: disable=protected-access

_OptimizerV2 = tf_keras.optimizers.legacy.Optimizer


@tf_keras.saving.register_keras_serializable(package="mplso",
                                             name="LossScaleOptimizer")
@tf_seams.not_converted
class LossScaleOptimizer(base.LossScaleOptimizerBase, base.DelegatesTracking,
                         _OptimizerV2, tf_keras_base.TfKerasLossScaleOptimizer):
  """Loss scaling for a tf_keras OptimizerV2 (`tf_keras.optimizers.legacy`).

  What differs from the other families: it is an OptimizerV2, whose
  `minimize` (with `grad_loss`, `name`) and `fit` come to
  `_compute_gradients`; slots, hyperparameters (`opt.beta_1`) and clipping
  are the wrapped optimizer's; `weights`, `variables()`, `get_weights()` and
  `set_weights()` are the wrapped optimizer's alone, as in TF 2.3 and
  tf_keras, so weights copy between the wrapper and a bare optimizer.

  >>> opt = LossScaleOptimizer(tf_keras.optimizers.legacy.SGD(0.25),
  ...                          "dynamic")
  >>> var = tf.Variable(1.)
  >>> opt.minimize(lambda: var ** 2, var_list=[var])
  >>> float(var)
  0.5

  Compatibility: checkpoints as tf_keras's `LossScaleOptimizer`
  (`base.DelegatesTracking`: `iter`, hyperparameters, slots and a
  `loss_scale` child). An `.h5` file keeps no loss scale (its `weights` have
  none; the scale restarts), while SavedModel and `tf.train.Checkpoint`
  keep it; after tf_keras's SavedModel loader,
  `model.load_weights(f"{path}/variables/variables")` restores the state.
  """

  # The family (see `base`).
  _FAMILY = "a tf_keras.optimizers.legacy.Optimizer (Keras 2 OptimizerV2)"

  @staticmethod
  def _wraps(optimizer) -> bool:
    return isinstance(optimizer, _OptimizerV2)

  # Any tf_keras loss-scale optimizer, of either tf_keras family.
  _scales_loss = staticmethod(tf_keras_base.scales_loss)

  @staticmethod
  def _reads_config(optimizer_config) -> bool:
    # tf_keras marks a legacy config it converted; TF 2.3's has no mark.
    return bool(optimizer_config.get("is_legacy_optimizer",
                                     "use_ema" not in optimizer_config))

  _OPTIMIZERS = tf_keras.optimizers
  _DESERIALIZE_KWARGS = {"use_legacy_optimizer": True}

  # OptimizerV2's signature (`grad_loss`, `name`); it calls the hooks below.
  minimize = _OptimizerV2.minimize

  def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
    return self._unscaled_gradients(loss, var_list, tape, grad_loss)

  def _gradients_of(self, scaled_loss, var_list, tape, grad_loss=None):
    return self._optimizer._compute_gradients(scaled_loss, var_list,
                                              grad_loss, tape=tape)

  def apply_gradients(self, grads_and_vars, name=None,
                      experimental_aggregate_gradients=True):
    """Applies the gradients if all are finite; returns one op (eager: None).

    `experimental_aggregate_gradients` is passed to the wrapped optimizer;
    every replica skips or applies alike either way. ValueError in
    cross-replica context, when no variable has a gradient, or for an entry
    that is not a (gradient, variable) pair of one dtype and shape.
    """
    grads_and_vars = checks.check_grads_and_vars(grads_and_vars)
    self._warn_if_never_scaled()
    grads_and_vars = tf_seams.tf_keras_filter_empty_gradients(grads_and_vars)
    if not grads_and_vars:
      return tf.no_op()  # As OptimizerV2 does.
    self._create_all_weights([v for _, v in grads_and_vars])
    if experimental_aggregate_gradients and self._aggregates_its_own_way():
      # What the wrapped optimizer would apply is checked: a custom
      # aggregation (which may make a NaN) runs first, as in tf_keras's class.
      grads_and_vars = self._optimizer._transform_unaggregated_gradients(
          grads_and_vars)
      grads_and_vars = self._optimizer._aggregate_gradients(grads_and_vars)
      experimental_aggregate_gradients = False
    variables = [v for _, v in grads_and_vars]
    return self._apply_if_finite(
        [g for g, _ in grads_and_vars], variables,
        # As TF 2.3's wrapper: `name` positionally (an optimizer whose
        # second argument is another, such as a `clip_norm`, gets the
        # caller's value there), `experimental_aggregate_gradients` by
        # keyword.
        lambda grads: self._optimizer.apply_gradients(
            list(zip(grads, variables)), name,
            experimental_aggregate_gradients=experimental_aggregate_gradients),
        name=name if isinstance(name, str) else None)

  def _aggregates_its_own_way(self) -> bool:
    """Whether the wrapped optimizer changes OptimizerV2's aggregation.

    A `gradient_aggregator` argument, or an override of its hooks. The
    default sums across replicas, which the check already covers (each
    replica's own gradients are checked), so it is left to the optimizer.
    """
    base = tf_keras.optimizers.legacy.Optimizer
    kind = type(self._optimizer)
    return (self._optimizer.gradient_aggregator is not
            tf_seams.tf_keras_default_gradient_aggregator() or
            kind._aggregate_gradients is not base._aggregate_gradients or
            kind._transform_unaggregated_gradients is not
            base._transform_unaggregated_gradients)

  # Passthrough to the wrapped optimizer, with OptimizerV2's hooks.

  clipnorm = base.forwarded("clipnorm")
  clipvalue = base.forwarded("clipvalue")
  global_clipnorm = base.forwarded("global_clipnorm")

  @property
  def _hyper(self):
    # OptimizerV2's attribute hooks look hyperparameters up here, so reading
    # and setting `opt.beta_1` reach the wrapped optimizer. Read `_optimizer`
    # from the instance dict: a plain lookup that fails would come back here
    # through OptimizerV2.__getattribute__.
    optimizer = vars(self).get("_optimizer")
    if optimizer is None:
      raise AttributeError("_hyper")
    return optimizer._hyper

  def __getattr__(self, name):
    # Called once OptimizerV2's lookup (hyperparameters included) failed.
    optimizer = vars(self).get("_optimizer")
    if name.startswith("_") or optimizer is None:
      raise AttributeError(name)
    raise base.missing_attribute(name, optimizer, forwards=False)

  def __setattr__(self, name, value):
    # A property of the wrapper (`loss_scale`, `iterations`) is set as
    # Python sets it, or refused; OptimizerV2's hook would otherwise set a
    # hyperparameter of the wrapped optimizer of the same name.
    if isinstance(getattr(type(self), name, None), property):
      object.__setattr__(self, name, value)
    else:
      super().__setattr__(name, value)

  _get_hyper = base.delegated(_OptimizerV2._get_hyper)
  _set_hyper = base.delegated(_OptimizerV2._set_hyper)

  def _create_all_weights(self, var_list):
    # Before the step's tf.cond, so that neither branch creates variables;
    # named as the wrapped optimizer names them. tf_keras's `.h5` loader
    # calls this too, before `set_weights`.
    with tf.name_scope(self._optimizer._name), tf.init_scope():
      self._optimizer._create_all_weights(var_list)

  # Slots are the wrapped optimizer's. This wrapper stands in for it in
  # checkpoints (no separate object there), so TF's checkpointer, which reads
  # slots through `get_slot_names`, saves them once, under this one; and
  # restoring finds them through the object that saved them.
  add_slot = base.delegated(_OptimizerV2.add_slot)
  get_slot = base.delegated(_OptimizerV2.get_slot)
  get_slot_names = base.delegated(_OptimizerV2.get_slot_names)
  _create_or_restore_slot_variable = base.delegated(
      _OptimizerV2._create_or_restore_slot_variable)
  _restore_slot_variable = base.delegated(_OptimizerV2._restore_slot_variable)

  # The wrapped optimizer's weights alone (not the loss scale's), as TF 2.3's
  # and tf_keras's.
  weights = base.forwarded("weights")
  variables = base.delegated(_OptimizerV2.variables)
  get_weights = base.delegated(_OptimizerV2.get_weights)
  set_weights = base.delegated(_OptimizerV2.set_weights)


def _legacy_counterpart(optimizer, convert):
  """tf_keras's `convert_to_legacy_optimizer` for the new-optimizer wrapper.

  mplso's wrapper of a `tf_keras.optimizers.Optimizer` (the tf_keras new-
  optimizer family's) becomes this family's: the wrapped optimizer is
  converted by tf_keras, and the result is wrapped in the same dialect with
  the same loss-scale arguments (a fresh scale, as tf_keras's conversion
  makes).
  """
  if not (isinstance(optimizer, base.LossScaleOptimizerBase) and
          isinstance(optimizer, tf_keras.optimizers.Optimizer)):
    return None
  inner = convert(optimizer.inner_optimizer)
  if optimizer._tf_2_3_dialect:
    return LossScaleOptimizer(
        inner, loss_scale_lib.deserialize(
            loss_scale_lib.serialize(optimizer._loss_scale)))
  return LossScaleOptimizer(
      inner, dynamic=optimizer.dynamic, initial_scale=optimizer.initial_scale,
      dynamic_growth_steps=optimizer.dynamic_growth_steps)


tf_seams.teach_tf_keras_convert_to_legacy_optimizer(_legacy_counterpart)
