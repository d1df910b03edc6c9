"""mplso: TensorFlow's mixed-precision loss-scale optimizers on current TensorFlow."""

from mplso import contrib
from mplso import loss_scale
from mplso._src.graph_rewrite import disable_mixed_precision_graph_rewrite
from mplso._src.graph_rewrite import enable_mixed_precision_graph_rewrite
from mplso._src.loss_scale import DynamicLossScale
from mplso._src.loss_scale import FixedLossScale
from mplso._src.loss_scale import LossScale
from mplso._src.v1_optimizer import MixedPrecisionLossScaleOptimizer

__version__ = "0.1.0"

__all__ = [
    "DynamicLossScale",
    "FixedLossScale",
    "LossScale",
    "MixedPrecisionLossScaleOptimizer",
    "contrib",
    "disable_mixed_precision_graph_rewrite",
    "enable_mixed_precision_graph_rewrite",
    "loss_scale",
]
