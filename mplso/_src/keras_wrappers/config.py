"""The Keras wrappers' arguments and configs, shared by every Keras family.

`get_config` writes TF 2.3's format, `{"optimizer": ..., "loss_scale": ...}`.
`from_config` also reads the formats of the later wrappers that users may
have saved: tf_keras's `{"inner_optimizer", "dynamic", "initial_scale",
"dynamic_growth_steps"}` and Keras 3's `{"inner_optimizer", "initial_scale",
"dynamic_growth_steps", "name"}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mplso._src import loss_scale as loss_scale_lib
from mplso._src.keras_wrappers import load_hint

ACCEPTED_OPTIMIZERS = (
    "a tf_keras.optimizers.legacy.Optimizer (Keras 2 OptimizerV2), a "
    "tf_keras.optimizers.Optimizer (Keras 2) or a keras.optimizers.Optimizer "
    "(Keras 3)")

_ACCEPTED_LOSS_SCALES = ("an mplso.LossScale, a Python int or float >= 1, "
                         "or the string 'dynamic'")


def loss_scale_arg(loss_scale) -> loss_scale_lib.LossScale:
  """Returns the `LossScale` for a wrapper's `loss_scale` argument.

  Raises:
    ValueError: for None or anything `mplso.loss_scale.get` refuses.
  """
  if loss_scale is None:
    raise ValueError(
        "`loss_scale` cannot be None. Accepted: "
        f"{_ACCEPTED_LOSS_SCALES}.")
  return loss_scale_lib.get(loss_scale)


def wrapped_twice_error(optimizer) -> TypeError:
  """The error for wrapping an optimizer that already scales the loss."""
  return TypeError(
      "`optimizer` is already a loss-scale optimizer: "
      f"{type(optimizer).__module__}.{type(optimizer).__name__}. Wrapping it "
      "again would scale the loss twice. Accepted: "
      f"{ACCEPTED_OPTIMIZERS} that does not scale the loss itself; pass "
      "the optimizer it wraps instead.")


def check_tape(loss, tape) -> None:
  """Raises ValueError for a tensor `loss` without the tape that recorded it.

  The wrappers' `minimize` / `compute_gradients` differentiate a tensor loss
  through the `tf.GradientTape` that computed it; a callable needs none.
  """
  if not callable(loss) and tape is None:
    raise ValueError(
        "`tape` is required when a tensor loss is passed. Received: "
        f"loss={loss!r}, tape=None. Pass the tf.GradientTape that computed "
        "it, or pass the loss as a callable.")


def weights_to_set(variables, inner_count: int, weights) -> list[tuple]:
  """Pairs `set_weights`'s arrays with the wrapper's variables, checked.

  `variables` are the wrapped optimizer's `inner_count` variables followed by
  the loss scale's. `weights` holds an array for each of them, or for the
  wrapped optimizer's alone (a file of tf_keras's own wrapper or of the bare
  optimizer), which leaves the loss scale as it is.

  Raises:
    ValueError: if the number of arrays or a shape does not match, naming
      what was expected.
  """
  variables, weights = list(variables), list(weights)
  if len(weights) not in (len(variables), inner_count):
    raise ValueError(
        f"Expected {len(variables)} weights (or {inner_count} for the "
        f"wrapped optimizer alone). Received: {len(weights)} weights.")
  for variable, weight in zip(variables, weights):
    shape = tuple(getattr(weight, "shape", ()))
    if tuple(variable.shape) != shape:
      raise ValueError(
          f"Optimizer variable {variable.name} has shape "
          f"{tuple(variable.shape)}, which does not fit the weight of shape "
          f"{shape}.")
  return list(zip(variables, weights))


def make_config(optimizer_config: Mapping[str, Any],
                loss_scale: loss_scale_lib.LossScale) -> dict[str, Any]:
  """Returns a wrapper's config, in TF 2.3's format, plus a loading note."""
  return load_hint.with_hint({
      "optimizer": dict(optimizer_config),
      "loss_scale": loss_scale_lib.serialize(loss_scale)})


def _loss_scale_from_keras_2(config: Mapping[str, Any]):
  if not config.get("dynamic", True):
    return loss_scale_lib.FixedLossScale(config["initial_scale"])
  return loss_scale_lib.DynamicLossScale(
      initial_loss_scale=config.get("initial_scale") or 2**15,
      increment_period=config.get("dynamic_growth_steps") or 2000)


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
  if not isinstance(config, Mapping):
    raise ValueError(
        "A LossScaleOptimizer config must be a dict. Received: "
        f"config={config!r}.")
  if "optimizer" in config and "loss_scale" in config:
    scale = config["loss_scale"]
    if isinstance(scale, Mapping):
      scale = loss_scale_lib.deserialize(
          scale, custom_objects=_loss_scale_classes(custom_objects))
    return _optimizer_config(config, "optimizer"), loss_scale_arg(scale)
  if "inner_optimizer" in config:
    return (_optimizer_config(config, "inner_optimizer"),
            _loss_scale_from_keras_2(config))
  raise ValueError(
      "A LossScaleOptimizer config needs the keys 'optimizer' and "
      "'loss_scale' (TF 2.3, as get_config() writes them) or "
      "'inner_optimizer' (tf_keras, Keras 3). Received keys: "
      f"{sorted(config)}.")


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
