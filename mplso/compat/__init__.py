"""Runs legacy TF mixed-precision code unmodified: `install()` / `uninstall()`.

Besides the switch, TF 2.1-2.3's Keras policy API, which the legacy
`tf.keras.mixed_precision.experimental` spellings resolve to.
"""

from mplso._src.compat_install import install
from mplso._src.compat_install import uninstall
from mplso._src.compat_policy import Policy
from mplso._src.compat_policy import global_policy
from mplso._src.compat_policy import set_policy

__all__ = ["Policy", "global_policy", "install", "set_policy", "uninstall"]
