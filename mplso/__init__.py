"""mplso: TensorFlow's mixed-precision loss-scale optimizers on current TensorFlow.

The names load on first use (PEP 562), so that `import mplso` and
`python -m mplso.compat --help` do not pay for importing TensorFlow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # What the lazy names below are, for readers and tools.
  from mplso import contrib
  from mplso import loss_scale
  from mplso._src.compat.graph_rewrite import (
    disable_mixed_precision_graph_rewrite,
  )
  from mplso._src.compat.graph_rewrite import (
    enable_mixed_precision_graph_rewrite,
  )
  from mplso._src.diagnostics.overflow import overflow_log
  from mplso._src.diagnostics.underflow import meter_underflow
  from mplso._src.diagnostics.underflow import underflow_log
  from mplso._src.loss_scales.loss_scale import DynamicLossScale
  from mplso._src.loss_scales.loss_scale import FixedLossScale
  from mplso._src.loss_scales.loss_scale import LossScale
  from mplso._src.quiet_start import import_tensorflow_quietly
  from mplso._src.tf1.v1_optimizer import MixedPrecisionLossScaleOptimizer

__version__ = "0.1.0"

# Public name -> the module that defines it (itself, for a submodule).
_LAZY = {
    "DynamicLossScale": "mplso._src.loss_scales.loss_scale",
    "FixedLossScale": "mplso._src.loss_scales.loss_scale",
    "LossScale": "mplso._src.loss_scales.loss_scale",
    "MixedPrecisionLossScaleOptimizer": "mplso._src.tf1.v1_optimizer",
    "contrib": "mplso.contrib",
    "disable_mixed_precision_graph_rewrite": "mplso._src.compat.graph_rewrite",
    "enable_mixed_precision_graph_rewrite": "mplso._src.compat.graph_rewrite",
    "import_tensorflow_quietly": "mplso._src.quiet_start",
    "loss_scale": "mplso.loss_scale",
    "meter_underflow": "mplso._src.diagnostics.underflow",
    "overflow_log": "mplso._src.diagnostics.overflow",
    "underflow_log": "mplso._src.diagnostics.underflow",
}

__all__ = [
    "DynamicLossScale",
    "FixedLossScale",
    "LossScale",
    "MixedPrecisionLossScaleOptimizer",
    "contrib",
    "disable_mixed_precision_graph_rewrite",
    "enable_mixed_precision_graph_rewrite",
    "import_tensorflow_quietly",
    "loss_scale",
    "meter_underflow",
    "overflow_log",
    "underflow_log",
]


def __getattr__(name: str):
  if name not in _LAZY:
    raise AttributeError(f"module 'mplso' has no attribute {name!r}")
  module = importlib.import_module(_LAZY[name])
  value = module if module.__name__ == f"mplso.{name}" else getattr(
      module, name)
  globals()[name] = value
  return value


def __dir__():
  return sorted(set(globals()) | set(_LAZY))
