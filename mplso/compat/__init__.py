"""Runs legacy TF mixed-precision code unmodified: `install()` / `uninstall()`."""

from mplso._src.compat_install import install
from mplso._src.compat_install import uninstall

__all__ = ["install", "uninstall"]
