"""TF 2.3's Keras `LossScaleOptimizer` for every Keras family, and its monitor.

`to_native` and `from_native` move a training run's state between it and
Keras's own `LossScaleOptimizer`.
"""

from mplso._src.keras import factory as _factory
from mplso._src.keras.factory import LossScaleOptimizer
from mplso._src.keras.monitor import LossScaleMonitor
from mplso._src.keras.native import from_native
from mplso._src.keras.native import to_native

# Register every installed family's wrapper, so that `load_model` finds it.
_factory.families(import_missing=True)

__all__ = ["LossScaleMonitor", "LossScaleOptimizer", "from_native",
           "to_native"]
