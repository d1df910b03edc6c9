"""The Keras wrappers' constructor arguments: their dialects and errors.

`loss_scale_from_args` reads the loss-scale arguments of TF 2.3's dialect
(`loss_scale`) and of TF 2.4-2.15's and Keras 3's (`dynamic`,
`initial_scale`, `dynamic_growth_steps`); the error builders word the
refusals of the optimizer argument as tf_keras's classes do. Every Keras
family and `mplso.keras.LossScaleOptimizer(...)` itself use them.
"""

from __future__ import annotations

import contextlib

from mplso._src.loss_scales import loss_scale as loss_scale_lib
from mplso._src.step import wrapping

ACCEPTED_OPTIMIZERS = (
    "a tf_keras.optimizers.legacy.Optimizer (Keras 2 OptimizerV2), a "
    "tf_keras.optimizers.Optimizer (Keras 2) or a keras.optimizers.Optimizer "
    "(Keras 3)")

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
