"""TF 2.3's Keras `LossScaleOptimizer`, for every Keras family on TF 2.21."""

from mplso._src.keras_wrappers import factory as _factory
from mplso._src.keras_wrappers.factory import LossScaleOptimizer

# Register every installed family's wrapper, so that `load_model` finds it.
_factory.families(import_missing=True)

__all__ = ["LossScaleOptimizer"]
