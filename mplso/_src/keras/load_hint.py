"""A note in the Keras wrappers' saved configs: what to import to load them.

No Keras loader imports mplso by itself: Keras 3 imports only the modules of
Keras's own packages, and tf_keras's `.h5` and SavedModel loaders look
optimizers up by their registered name alone (tf_keras's `.keras` loader does
import the class's module, so those files load without mplso imported). So a
fresh process must run `import mplso.keras`, which registers the wrapper
classes, before `load_model(path)` with `compile=True`.

Where the loader fails, Keras 3 prints the optimizer's whole saved config in
its error ("Could not locate class 'LossScaleOptimizer' ... Full object
config: {...}"): the note added here is then the first entry of that config
and says what to do. `from_config` ignores it.
"""

from __future__ import annotations

from typing import Any

KEY = "how_to_load"

HINT = ("Run `import mplso.keras` before loading: it registers mplso's "
        "LossScaleOptimizer with Keras (`pip install mplso`). Without mplso, "
        "load_model(path, compile=False) loads the model without its "
        "optimizer.")


def with_hint(config: dict[str, Any]) -> dict[str, Any]:
  """Returns `config` with the loading note as its first entry."""
  return {KEY: HINT, **{k: v for k, v in config.items() if k != KEY}}
