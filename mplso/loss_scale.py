"""Loss scales by name: `get`, `serialize` and `deserialize`, and the classes."""

from mplso._src.loss_scales.loss_scale import DynamicLossScale
from mplso._src.loss_scales.loss_scale import FixedLossScale
from mplso._src.loss_scales.loss_scale import LossScale
from mplso._src.loss_scales.loss_scale import deserialize
from mplso._src.loss_scales.loss_scale import get
from mplso._src.loss_scales.loss_scale import serialize

__all__ = [
    "DynamicLossScale",
    "FixedLossScale",
    "LossScale",
    "deserialize",
    "get",
    "serialize",
]
