"""The TF1 `MixedPrecisionLossScaleOptimizer`, wrapping a `tf.compat.v1` optimizer."""

from __future__ import annotations

import tensorflow as tf

from mplso._src.core import checks
from mplso._src.core import tf_seams
from mplso._src.diagnostics import record
from mplso._src.loss_scales import loss_scale as loss_scale_lib
from mplso._src.step import apply
from mplso._src.step import wrapping

_V1Optimizer = tf.compat.v1.train.Optimizer
# TF's own wrapper, still shipped in TF 2.21.
_TF_WRAPPER = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer


@tf_seams.not_converted
class MixedPrecisionLossScaleOptimizer(wrapping.HidesSlotNames,
                                       _V1Optimizer):
  """An optimizer that applies loss scaling to a `tf.compat.v1` optimizer.

  Loss scaling multiplies the loss by a loss scale and divides each gradient
  by the same number:

      loss = ...
      loss *= loss_scale
      grads = gradients(loss, vars)
      grads /= loss_scale

  Mathematically this changes nothing, but float16 gradients that would
  underflow to zero keep their value. `apply_gradients` applies a step only
  when every gradient is finite; otherwise no variable moves, `global_step`
  stays, and a dynamic loss scale shrinks.

  Works in TF1 graph mode (`Session`, `global_step`, `Saver`), in eager mode
  (the loss must then be a callable) and inside `tf.function`.

  >>> opt = MixedPrecisionLossScaleOptimizer(
  ...     tf.compat.v1.train.GradientDescentOptimizer(0.5), "dynamic")
  >>> var = tf.Variable(1.)
  >>> opt.minimize(lambda: var ** 2, var_list=[var])
  >>> float(var)
  0.0

  Compatibility: mirrors
  `tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer`, with the
  same checkpoint children (`base_optimizer`, `loss_scale`) so checkpoints
  move between the two, and TF's error wording as the first clause of its
  errors ('"opt" must be an instance of Optimizer, but got: ...',
  "loss_scale cannot be None"). Deliberate differences from TF 2.21's
  class: a step with non-finite gradients is skipped under a fixed loss
  scale too (TF's class applies it); `get_slot` / `get_slot_names` answer
  for the wrapped optimizer (TF's class answers None and []); and a
  loss-scale optimizer, TF's included, is refused as `opt` (TF's class
  accepts one and stacks the two scales).
  """

  def __init__(self, opt: tf.compat.v1.train.Optimizer, loss_scale):
    """Wraps `opt` with `loss_scale`.

    Args:
      opt: a `tf.compat.v1.train.Optimizer` instance.
      loss_scale: a `mplso.LossScale`, a Python int or float >= 1 for a fixed
        scale, or `"dynamic"` for a `mplso.DynamicLossScale()`.

    Raises:
      ValueError: if `opt` is not a `tf.compat.v1.train.Optimizer`, is
        already a loss-scale optimizer (mplso's or TF's
        `tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer`), or
        `loss_scale` is None or not accepted by `mplso.loss_scale.get`. The
        first clause of each message is TF's where TF raised.
    """
    if not isinstance(opt, _V1Optimizer):
      raise ValueError(
          f'"opt" must be an instance of Optimizer, but got: {type(opt)}. '
          "Pass a tf.compat.v1.train.Optimizer such as "
          "tf.compat.v1.train.AdamOptimizer; received opt="
          f"{opt!r}. For Keras optimizers use mplso.keras.LossScaleOptimizer.")
    if isinstance(opt, (MixedPrecisionLossScaleOptimizer, _TF_WRAPPER)):
      raise ValueError(
          f"`opt` is already a loss-scale optimizer ({type(opt).__name__}): "
          f"{opt!r}. Wrapping it would scale the loss twice and stack two "
          "loss scales. Pass the optimizer it wraps instead, e.g. "
          "tf.compat.v1.train.AdamOptimizer(...), with the loss scale as "
          "this class's `loss_scale`.")
    loss_scale = wrapping.loss_scale_arg(loss_scale)
    super().__init__(tf_seams.v1_optimizer_use_locking(opt), opt.get_name())
    self._optimizer = opt
    self._loss_scale = loss_scale
    self._track_trackable(self._optimizer, "base_optimizer")
    self._track_trackable(self._loss_scale, "loss_scale")

  @property
  def loss_scale(self) -> loss_scale_lib.LossScale:
    """The `mplso.LossScale` this optimizer scales by."""
    return self._loss_scale

  def compute_gradients(self,
                        loss,
                        var_list=None,
                        gate_gradients=_V1Optimizer.GATE_OP,
                        aggregation_method=None,
                        colocate_gradients_with_ops=False,
                        grad_loss=None):
    """Computes unscaled gradients of `loss` for the variables in `var_list`.

    The loss is multiplied by the loss scale before the wrapped optimizer
    differentiates it, and every gradient is divided by the scale afterwards.

    Args:
      loss: a tensor, or a callable with no arguments returning one (required
        in eager mode).
      var_list: optional list or tuple of variables; defaults to the graph's
        trainable variables.
      gate_gradients: `GATE_NONE`, `GATE_OP` or `GATE_GRAPH`.
      aggregation_method: a `tf.AggregationMethod` value.
      colocate_gradients_with_ops: colocate gradients with their ops.
      grad_loss: optional tensor holding the gradient computed for `loss`.

    Returns:
      A list of `(gradient, variable)` pairs; a gradient may be None.
    """
    return wrapping.unscaled_gradients(
        self._loss_scale, loss,
        lambda scaled_loss: self._optimizer.compute_gradients(
            scaled_loss,
            var_list=var_list,
            gate_gradients=gate_gradients,
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops,
            grad_loss=grad_loss))

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    """Applies the gradients if all are finite, and updates the loss scale.

    Args:
      grads_and_vars: list of `(gradient, variable)` pairs as returned by
        `compute_gradients()`.
      global_step: optional variable incremented by one when the step is
        applied (and only then).
      name: optional name for the returned op; defaults to the wrapped
        optimizer's name.

    Returns:
      One op that applies the gradients only when every gradient is finite
      and updates the loss scale (None in eager mode, where both are done).

    Raises:
      ValueError: if called in cross-replica context, or if an entry of
        `grads_and_vars` is not a (gradient, variable) pair whose gradient
        has the variable's dtype and shape.
    """
    grads_and_vars = checks.check_grads_and_vars(grads_and_vars)
    wrapping.check_replica_context(
        hint=", or call _distributed_apply() from cross-replica context")
    return tf.distribute.get_replica_context().merge_call(
        self._distributed_apply, args=(tuple(grads_and_vars), global_step, name))

  def _distributed_apply(self,
                         distribution,
                         grads_and_vars,
                         global_step=None,
                         name=None):
    """Applies on every replica or on none; updates the loss scale once.

    Args:
      distribution: the `tf.distribute.Strategy` in use (TF's name for this
        parameter: `merge_call` passes it positionally).
      grads_and_vars: `(gradient, variable)` pairs, per replica.
      global_step: optional variable incremented when the step is applied.
      name: optional name for the returned op.

    Returns:
      The op of `apply_gradients` (None in eager mode).
    """
    name = name if name is not None else self.get_name()
    grads = [g for g, _ in grads_and_vars]

    def apply_fn():
      return distribution.group(
          distribution.extended.call_for_each_replica(
              self._optimizer.apply_gradients,
              args=(grads_and_vars, global_step, name + "-wrapped")))

    return apply.guarded_step(
        self._loss_scale, grads, apply_fn, name=name,
        steps=record.StepRecord(variables=[v for _, v in grads_and_vars],
                                step=global_step, step_counts_skips=False))

  def get_slot(self, var, name):
    """Returns the wrapped optimizer's slot `name` for `var`, or None."""
    return self._optimizer.get_slot(var, name)

  def get_slot_names(self):
    """Returns the names of the wrapped optimizer's slots."""
    return self._optimizer.get_slot_names()

  def variables(self):
    """Returns the wrapped optimizer's variables plus the loss scale's."""
    return self._optimizer.variables() + list(self._loss_scale.variables)

  # TF's wording; the wrapped optimizer applies every update.
  _NEVER_CALLED = ("This function should never be called: the wrapped "
                   "optimizer applies the updates.")

  def _apply_dense(self, grad, var):
    raise RuntimeError(self._NEVER_CALLED)

  _apply_sparse = _resource_apply_dense = _apply_dense

  def _resource_apply_sparse(self, grad, handle, indices):
    raise RuntimeError(self._NEVER_CALLED)
