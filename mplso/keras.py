"""TF 2.3's Keras `LossScaleOptimizer` for every Keras family, and its monitor."""

from mplso._src.keras import factory as _factory
from mplso._src.keras.factory import LossScaleOptimizer
from mplso._src.keras.monitor import LossScaleMonitor

# Register every installed family's wrapper, so that `load_model` finds it.
_factory.families(import_missing=True)

__all__ = ["LossScaleMonitor", "LossScaleOptimizer"]
