"""What the two tf_keras families share: tf_keras's loss-scale base class.

Both tf_keras wrappers (`optimizer_v2`, `tf_keras_optimizer`) derive from it,
so that tf_keras's `compile` under `mixed_float16` does not wrap them again,
and both refuse to wrap an optimizer that is one.
"""

from __future__ import annotations

import tf_keras

# Every tf_keras loss-scale optimizer is one (both tf_keras families'), and
# tf_keras's `compile` under `mixed_float16` wraps any optimizer that is not.
TfKerasLossScaleOptimizer = tf_keras.mixed_precision.LossScaleOptimizer


def scales_loss(optimizer) -> bool:
  """Whether `optimizer` is a tf_keras loss-scale optimizer, of either family.

  tf_keras's own (`LossScaleOptimizer`, `LossScaleOptimizerV3`) and mplso's
  wrappers of both tf_keras families are.
  """
  return isinstance(optimizer, TfKerasLossScaleOptimizer)
