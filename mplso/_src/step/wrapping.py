"""What every mplso optimizer wrapper (TF1, contrib, Keras) does the same way.

Each wrapper holds a wrapped optimizer and a loss scale, and runs the guarded
step (`apply`); these helpers are the parts around it that do not depend on
which optimizer is wrapped. Here, below tf1/ and keras/, both families share
them without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable

import tensorflow as tf

from mplso._src.core import scaling
from mplso._src.loss_scales import loss_scale as loss_scale_lib


def loss_scale_arg(loss_scale) -> loss_scale_lib.LossScale:
  """Returns the `LossScale` for a wrapper's `loss_scale` argument.

  Raises:
    ValueError: for None or anything `mplso.loss_scale.get` refuses.
  """
  if loss_scale is None:
    # TF's wording first (TF1's and TF 2.3 Keras's wrappers).
    raise ValueError(
        f"loss_scale cannot be None. Pass {loss_scale_lib.ACCEPTED}. "
        "Received: loss_scale=None.")
  return loss_scale_lib.from_identifier(loss_scale)


def unscaled_gradients(
    loss_scale: loss_scale_lib.LossScale,
    loss,
    compute: Callable[[scaling.Loss], Iterable[tuple]],
    tape: tf.GradientTape | None = None,
) -> list[tuple]:
  """Scales `loss`, lets `compute` differentiate it, and unscales the result.

      scale = loss_scale()  (read once: one ReadVariableOp in a graph)
      scaled_loss = loss * scale  (recorded on `tape` for a tensor loss)
      grads_and_vars = compute(scaled_loss)
      return [(grad / scale, var) for grad, var in grads_and_vars]

  Args:
    loss_scale: the wrapper's `LossScale`.
    loss: a tensor, or a callable with no arguments returning one.
    compute: the wrapped optimizer's gradient computation, given the scaled
      loss; returns `(gradient, variable)` pairs.
    tape: the `tf.GradientTape` that recorded a tensor `loss`, if any; the
      multiplication is recorded on it too.

  Returns:
    A list of `(gradient, variable)` pairs; None gradients stay None.
  """
  scale = loss_scale()
  if tape is not None and not callable(loss):
    with tape:
      scaled_loss = scaling.scale_loss(loss, scale)
  else:
    scaled_loss = scaling.scale_loss(loss, scale)
  grads_and_vars = list(compute(scaled_loss))
  grads = scaling.unscale_grads([g for g, _ in grads_and_vars], scale)
  return list(zip(grads, [v for _, v in grads_and_vars]))


def check_replica_context(hint: str = "") -> None:
  """Raises ValueError when `apply_gradients` runs in cross-replica context.

  The finite check and the loss-scale update are made once per step, in
  `merge_call`, which only a replica context can enter.

  Args:
    hint: an extra sentence for the fix, if the wrapper offers another way.
  """
  if tf.distribute.in_cross_replica_context():
    raise ValueError(
        "apply_gradients() must be called in a replica context. Call it "
        f"inside strategy.run(...){hint}.")


class HidesSlotNames:
  """Keeps `get_slot_names` out of `dir()`, so checkpoints save slots once.

  TF's checkpointer collects slot variables from every object whose `dir()`
  lists `get_slot_names`. A wrapper that forwards slots reports variables
  that already belong to the wrapped optimizer, one of its checkpoint
  children; reported twice, saving fails with "A slot variable was re-used
  as a dependency". Hiding the name from `dir()` keeps the method.
  """

  def __dir__(self):
    return [n for n in super().__dir__() if n != "get_slot_names"]
