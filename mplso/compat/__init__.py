"""Runs legacy TF mixed-precision code unmodified: `install()` / `uninstall()`.

Besides the switch, TF 2.1-2.3's Keras policy API, which the legacy
`tf.keras.mixed_precision.experimental` spellings resolve to. The names load
on first use, so that `python -m mplso.compat --help` imports no TensorFlow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # What the lazy names below are, for readers and tools.
  from mplso._src.compat.install import install
  from mplso._src.compat.install import uninstall
  from mplso._src.compat.policy import Policy
  from mplso._src.compat.policy import global_policy
  from mplso._src.compat.policy import set_policy

_LAZY = {
    "Policy": "mplso._src.compat.policy",
    "global_policy": "mplso._src.compat.policy",
    "install": "mplso._src.compat.install",
    "set_policy": "mplso._src.compat.policy",
    "uninstall": "mplso._src.compat.install",
}

__all__ = ["Policy", "global_policy", "install", "set_policy", "uninstall"]


def __getattr__(name: str):
  if name not in _LAZY:
    raise AttributeError(f"module 'mplso.compat' has no attribute {name!r}")
  value = getattr(importlib.import_module(_LAZY[name]), name)
  globals()[name] = value
  return value


def __dir__():
  return sorted(set(globals()) | set(_LAZY))
