"""TF 1.x's `tf.contrib.mixed_precision`: the optimizer and its managers."""

from mplso._src.loss_scales.contrib_managers import (
    ExponentialUpdateLossScaleManager,
)
from mplso._src.loss_scales.contrib_managers import FixedLossScaleManager
from mplso._src.loss_scales.contrib_managers import LossScaleManager
from mplso._src.tf1.contrib_optimizer import LossScaleOptimizer

__all__ = [
    "ExponentialUpdateLossScaleManager",
    "FixedLossScaleManager",
    "LossScaleManager",
    "LossScaleOptimizer",
]
