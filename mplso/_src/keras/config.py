"""The Keras wrappers' configs and their loading note, for every Keras family.

`get_config` writes TF 2.3's format, `{"optimizer": ..., "loss_scale": ...}`.
`from_config` also reads the formats of the later wrappers that users may
have saved: tf_keras's `{"inner_optimizer", "dynamic", "initial_scale",
"dynamic_growth_steps"}` and Keras 3's `{"inner_optimizer", "initial_scale",
"dynamic_growth_steps", "name"}`.

Every config also starts with a note, `how_to_load`, for a loader that does
not know the class. No Keras loader imports mplso by itself: Keras 3 imports
only the modules of Keras's own packages, and tf_keras's `.h5` and
SavedModel loaders look optimizers up by their registered name alone
(tf_keras's `.keras` loader does import the class's module). So a fresh
process must run `import mplso.keras`, which registers the wrapper classes,
before `load_model(path)` with `compile=True`. Where the loader fails,
Keras 3 prints the optimizer's whole saved config in its error ("Could not
locate class 'LossScaleOptimizer' ... Full object config: {...}"): the note
is then the first entry there and says what to do. `from_config` ignores it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mplso._src.keras import arguments
from mplso._src.loss_scales import loss_scale as loss_scale_lib
from mplso._src.step import wrapping

# The loading note's key and text (see the module docstring).
HINT_KEY = "how_to_load"
HINT = ("Run `import mplso.keras` before loading: it registers mplso's "
        "LossScaleOptimizer with Keras (`pip install mplso`). Without mplso, "
        "load_model(path, compile=False) loads the model without its "
        "optimizer.")


def make_config(optimizer_config: Mapping[str, Any],
                loss_scale: loss_scale_lib.LossScale) -> dict[str, Any]:
  """Returns a wrapper's config, in TF 2.3's format, after the loading note."""
  return {HINT_KEY: HINT, "optimizer": dict(optimizer_config),
          "loss_scale": loss_scale_lib.serialize(loss_scale)}


# The keys `split_config` reads, in any of the formats.
_FORMAT_KEYS = frozenset(["optimizer", "loss_scale", "inner_optimizer",
                          "dynamic", "initial_scale", "dynamic_growth_steps",
                          HINT_KEY])


def other_keys(config: Mapping[str, Any]) -> dict[str, Any]:
  """The entries of a wrapper's config that `split_config` does not read.

  The family's constructor takes or refuses them (Keras 3's `name`).
  """
  return {key: value for key, value in config.items()
          if key not in _FORMAT_KEYS}


def optimizer_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
  """Returns the wrapped optimizer's config from a wrapper's config.

  Args:
    config: TF 2.3's, tf_keras's or Keras 3's loss-scale optimizer config.

  Raises:
    ValueError: if `config` is none of these formats.
  """
  if not isinstance(config, Mapping):
    raise ValueError(
        "A LossScaleOptimizer config must be a dict. Received: "
        f"config={config!r}.")
  if "optimizer" in config and "loss_scale" in config:
    return _optimizer_config(config, "optimizer")
  if "inner_optimizer" in config:
    return _optimizer_config(config, "inner_optimizer")
  raise ValueError(
      "A LossScaleOptimizer config needs the keys 'optimizer' and "
      "'loss_scale' (TF 2.3, as get_config() writes them) or "
      "'inner_optimizer' (tf_keras, Keras 3). Received keys: "
      f"{sorted(config)}.")


def split_config(
    config: Mapping[str, Any],
    custom_objects: Mapping[str, Any] | None = None,
) -> tuple[Mapping[str, Any], loss_scale_lib.LossScale]:
  """Returns `(optimizer_config, loss_scale)` read from a wrapper's config.

  Args:
    config: TF 2.3's, tf_keras's or Keras 3's loss-scale optimizer config.
    custom_objects: optional names of custom `LossScale` classes.

  Raises:
    ValueError: if `config` is none of these formats.
  """
  inner = optimizer_config(config)
  if "loss_scale" in config and "optimizer" in config:
    scale = config["loss_scale"]
    if isinstance(scale, Mapping):
      scale = loss_scale_lib.deserialize(
          scale, custom_objects=_loss_scale_classes(custom_objects))
    return inner, wrapping.loss_scale_arg(scale)
  dynamic = config.get("dynamic", True)
  return inner, arguments.loss_scale_from_args(
      dynamic=dynamic, initial_scale=config.get("initial_scale"),
      dynamic_growth_steps=(config.get("dynamic_growth_steps")
                            if dynamic else None))


def _optimizer_config(config, key):
  optimizer_config = config[key]
  if not isinstance(optimizer_config, Mapping):
    raise ValueError(
        f"The {key!r} entry of a LossScaleOptimizer config must be a "
        "serialized optimizer, a dict with 'class_name' and 'config'. "
        f"Received: {key}={optimizer_config!r}.")
  return optimizer_config


def _loss_scale_classes(custom_objects):
  return {name: obj for name, obj in (custom_objects or {}).items()
          if isinstance(obj, type) and
          issubclass(obj, loss_scale_lib.LossScale)}
