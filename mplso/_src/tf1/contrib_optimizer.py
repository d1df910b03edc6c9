"""TF 1.x contrib's `LossScaleOptimizer(opt, loss_scale_manager)`."""

from __future__ import annotations

import tensorflow as tf

from mplso._src.core import tf_seams
from mplso._src.loss_scales import contrib_managers
from mplso._src.tf1 import v1_optimizer


@tf_seams.not_converted
class LossScaleOptimizer(v1_optimizer.MixedPrecisionLossScaleOptimizer):
  """An optimizer that scales the loss by a `LossScaleManager`'s scale.

  `compute_gradients` multiplies the loss by
  `loss_scale_manager.get_loss_scale()` and divides the gradients by it;
  `apply_gradients` applies them only when all are finite (otherwise no
  variable moves and `global_step` stays) and calls
  `loss_scale_manager.update_loss_scale(is_finite)`.

  Compatibility: mirrors `tf.contrib.mixed_precision.LossScaleOptimizer` of
  TF 1.x, built on `mplso.MixedPrecisionLossScaleOptimizer`, so unlike TF 1.x
  it also keeps `tf.IndexedSlices` gradients sparse, ignores `None`
  gradients in the finite check, has `get_name`, `get_slot`,
  `get_slot_names` and `variables`, checkpoints with `tf.train.Checkpoint`
  (children `base_optimizer` and `loss_scale`) and works under
  `tf.distribute`. TF 1.x checked neither argument; this class refuses an
  `opt` that is not a `tf.compat.v1.train.Optimizer` or is already a
  loss-scale optimizer (mplso's, or TF's
  `tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer`, whose
  scale would stack on the manager's), and a `loss_scale_manager` that is not
  a `LossScaleManager`.
  """

  def __init__(self, opt: tf.compat.v1.train.Optimizer,
               loss_scale_manager: contrib_managers.LossScaleManager):
    """Wraps `opt`.

    Args:
      opt: a `tf.compat.v1.train.Optimizer` instance.
      loss_scale_manager: a `LossScaleManager` instance.

    Raises:
      ValueError: if `opt` is not a `tf.compat.v1.train.Optimizer` or is a
        loss-scale optimizer already, or `loss_scale_manager` is not a
        `LossScaleManager`.
    """
    if not isinstance(loss_scale_manager, contrib_managers.LossScaleManager):
      raise ValueError(
          "`loss_scale_manager` must be an mplso.contrib.LossScaleManager "
          "such as FixedLossScaleManager(128) or "
          "ExponentialUpdateLossScaleManager(2**15, 2000). Received: "
          f"loss_scale_manager={loss_scale_manager!r}.")
    super().__init__(opt, loss_scale_manager)
    # TF 1.x's names for the two, which subclasses written for TF 1.x read.
    self._opt = opt
    self._loss_scale_manager = loss_scale_manager
