"""mplso: TensorFlow's mixed-precision loss-scale optimizers on current TensorFlow."""

from mplso import contrib
from mplso import loss_scale
from mplso._src.loss_scale import DynamicLossScale
from mplso._src.loss_scale import FixedLossScale
from mplso._src.loss_scale import LossScale
from mplso._src.overflow import overflow_log
from mplso._src.v1_optimizer import MixedPrecisionLossScaleOptimizer

__version__ = "0.1.0"

__all__ = [
    "DynamicLossScale",
    "FixedLossScale",
    "LossScale",
    "MixedPrecisionLossScaleOptimizer",
    "contrib",
    "loss_scale",
    "overflow_log",
]
