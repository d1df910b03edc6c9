"""The Keras wrappers' arguments and configs, shared by every Keras family.

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
import contextlib
from typing import Any

from mplso._src.loss_scales import loss_scale as loss_scale_lib
from mplso._src.loss_scales import wrapping

ACCEPTED_OPTIMIZERS = (
    "a tf_keras.optimizers.legacy.Optimizer (Keras 2 OptimizerV2), a "
    "tf_keras.optimizers.Optimizer (Keras 2) or a keras.optimizers.Optimizer "
    "(Keras 3)")

# The loading note's key and text (see the module docstring).
HINT_KEY = "how_to_load"
HINT = ("Run `import mplso.keras` before loading: it registers mplso's "
        "LossScaleOptimizer with Keras (`pip install mplso`). Without mplso, "
        "load_model(path, compile=False) loads the model without its "
        "optimizer.")

# Marks a constructor argument the caller left out (None is a value there).
UNSET = type("Unset", (), {"__repr__": lambda self: "UNSET"})()

# tf_keras's defaults for the TF 2.4-2.15 dialect (Keras 3's too).
_DEFAULT_INITIAL_SCALE = 2**15
_DEFAULT_GROWTH_STEPS = 2000


def loss_scale_from_args(loss_scale=UNSET, dynamic=UNSET, initial_scale=None,
                         dynamic_growth_steps=None) -> loss_scale_lib.LossScale:
  """Returns the `LossScale` that a wrapper's constructor arguments describe.

  Two dialects are read: TF 2.3's `loss_scale` (`"dynamic"`, a number or a
  `LossScale`), and TF 2.4-2.15's `dynamic` / `initial_scale` /
  `dynamic_growth_steps` (Keras 3's `initial_scale` / `dynamic_growth_steps`
  are its dynamic case). A bool `loss_scale` is TF 2.4's second positional
  argument, `dynamic`. With neither, the scale is dynamic, as tf_keras's:
  `DynamicLossScale(2**15, 2000, multiplier=2)`.

  Raises:
    TypeError: for a `dynamic` that is not a bool, or given twice.
    ValueError: for arguments of both dialects, `dynamic=False` without
      `initial_scale` or with `dynamic_growth_steps`, or a scale that
      `mplso.loss_scale.get` refuses.
  """
  if isinstance(loss_scale, bool):
    if dynamic is not UNSET:
      raise TypeError(
          "LossScaleOptimizer() got multiple values for argument 'dynamic': "
          f"a bool second argument ({loss_scale!r}) is `dynamic`, and "
          f"dynamic={dynamic!r} was passed too. Pass it once.")
    loss_scale, dynamic = UNSET, loss_scale
  if loss_scale is not UNSET:
    if (dynamic is not UNSET or initial_scale is not None or
        dynamic_growth_steps is not None):
      raise ValueError(
          "Pass either `loss_scale` (TF 2.3) or `dynamic`, `initial_scale` "
          "and `dynamic_growth_steps` (TF 2.4 and later), not both. "
          f"Received: loss_scale={loss_scale!r}, dynamic={dynamic!r}, "
          f"initial_scale={initial_scale!r}, "
          f"dynamic_growth_steps={dynamic_growth_steps!r}.")
    return wrapping.loss_scale_arg(loss_scale)
  dynamic = True if dynamic is UNSET else dynamic
  if not isinstance(dynamic, bool):
    raise TypeError(
        '"dynamic" argument to LossScaleOptimizer.__init__ must be a bool, '
        f"but got: {dynamic!r}. For a fixed scale pass dynamic=False and "
        "initial_scale, or TF 2.3's loss_scale (a number or 'dynamic').")
  if dynamic:
    with _in_this_dialect():
      return loss_scale_lib.DynamicLossScale(
          initial_loss_scale=(_DEFAULT_INITIAL_SCALE if initial_scale is None
                              else initial_scale),
          increment_period=(_DEFAULT_GROWTH_STEPS
                            if dynamic_growth_steps is None
                            else dynamic_growth_steps),
          multiplier=2.)
  if initial_scale is None:
    raise ValueError(
        '"initial_scale" must be specified if "dynamic" is False. Received: '
        "initial_scale=None. Pass the fixed scale, e.g. initial_scale=128.")
  if dynamic_growth_steps is not None:
    raise ValueError(
        '"dynamic_growth_steps" must be None if "dynamic" is False, but got: '
        f"{dynamic_growth_steps}. Leave it out for a fixed scale, or pass "
        "dynamic=True.")
  with _in_this_dialect():
    return loss_scale_lib.FixedLossScale(initial_scale)


# The TF1 loss scales' argument names, as TF 2.4-2.15 and Keras 3 call them.
_DIALECT_NAMES = {"initial_loss_scale": "initial_scale",
                  "loss_scale_value": "initial_scale",
                  "increment_period": "dynamic_growth_steps"}


@contextlib.contextmanager
def _in_this_dialect():
  """Re-raises a loss scale's ValueError with the names the caller wrote."""
  try:
    yield
  except ValueError as e:
    message = str(e)
    for tf1_name, name in _DIALECT_NAMES.items():
      message = message.replace(tf1_name, name)
    raise ValueError(message) from None


def optimizer_count_error(optimizer, inner_optimizer) -> TypeError:
  """The error for a wrapper built without its optimizer, or with two."""
  return TypeError(
      "LossScaleOptimizer() needs the optimizer to wrap, once: as the first "
      "argument, `optimizer=` or `inner_optimizer=`. Received: "
      f"optimizer={optimizer!r}, inner_optimizer={inner_optimizer!r}.")


def wrapped_twice_error(optimizer) -> TypeError:
  """The error for wrapping an optimizer that already scales the loss.

  It starts with tf_keras's wording, which code may match.
  """
  return TypeError(
      "LossScaleOptimizer cannot wrap another LossScaleOptimizer, but got: "
      f"{optimizer!r}. It is already a loss-scale optimizer "
      f"({type(optimizer).__module__}.{type(optimizer).__name__}): wrapping "
      f"it again would scale the loss twice. Accepted: {ACCEPTED_OPTIMIZERS} "
      "that does not scale the loss itself; pass the optimizer it wraps "
      "instead.")


def not_an_optimizer_error(optimizer, accepted: str = ACCEPTED_OPTIMIZERS,
                           hint: str = "") -> TypeError:
  """The error for wrapping what is not an optimizer `accepted` describes.

  It starts with tf_keras's wording, which code may match.
  """
  return TypeError(
      '"inner_optimizer" must be an instance of '
      "`tf.keras.optimizers.Optimizer` or "
      f"`tf.keras.optimizers.experimental.Optimizer`, but got: {optimizer!r}"
      f" (of type {type(optimizer).__name__}). Accepted here: {accepted}."
      + hint)


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
  return inner, loss_scale_from_args(
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
