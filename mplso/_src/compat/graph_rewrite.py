"""TF 1.14-2.3's automatic mixed precision switch, with mplso's optimizers.

`enable_mixed_precision_graph_rewrite(opt)` wraps `opt` in mplso's loss-scale
optimizer and turns on Grappler's `auto_mixed_precision` rewrite (float32 ops
that are safe in float16 run in float16 on NVIDIA GPUs), for `tf.function`s
and for every `tf.compat.v1.Session` created afterwards;
`disable_mixed_precision_graph_rewrite()` turns it off again.
"""

from __future__ import annotations

import logging
import sys

import tensorflow as tf

from mplso._src.core import tf_seams
from mplso._src.keras import factory
from mplso._src.tf1 import v1_optimizer

_logger = logging.getLogger("mplso")
_OPTION = "auto_mixed_precision"


def _keras_mixed_policy_in_use() -> bool:
  """Whether the global Keras policy computes in a mixed precision."""
  if tf_seams.graph_rewrite_state().is_using_mixed_precision_policy():
    return True  # tf_keras's set_global_policy says so.
  keras = sys.modules.get("keras")  # Keras 3 keeps it to itself.
  if keras is None or not hasattr(keras, "mixed_precision"):
    return False
  policy = keras.mixed_precision.global_policy()
  return policy.compute_dtype != policy.variable_dtype


def _wrap(opt, loss_scale):
  """Returns `opt` in the mplso loss-scale optimizer of its kind."""
  wrappers = (v1_optimizer.MixedPrecisionLossScaleOptimizer,
              tf_seams.tf_v1_loss_scale_optimizer_class())
  if isinstance(opt, wrappers) or factory.scales_loss(opt):
    name = ("MixedPrecisionLossScaleOptimizer"
            if isinstance(opt, tf.compat.v1.train.Optimizer)
            else "LossScaleOptimizer")
    raise ValueError(
        f'"opt" must not already be an instance of a {name}. '
        "`enable_mixed_precision_graph_rewrite` will automatically wrap the "
        f"optimizer with a {name}. Received: opt={opt!r}. Pass the optimizer "
        "it wraps instead.")
  if isinstance(opt, tf.compat.v1.train.Optimizer):
    return v1_optimizer.MixedPrecisionLossScaleOptimizer(opt, loss_scale)
  if factory.family_of(opt) is not None:
    return factory.LossScaleOptimizer(opt, loss_scale)
  raise ValueError(
      '"opt" must be an instance of a tf.train.Optimizer or a '
      f"tf.keras.optimizers.Optimizer, but got: {opt!r}. Pass a "
      "tf.compat.v1.train.Optimizer (such as "
      "tf.compat.v1.train.AdamOptimizer()) or a Keras optimizer.")


def enable_mixed_precision_graph_rewrite(opt, loss_scale="dynamic"):
  """Wraps `opt` for loss scaling and turns on TF's float16 graph rewrite.

  What TF 1.14-2.3's function of this name did, with mplso's wrappers: a
  `tf.compat.v1.train.Optimizer` comes back as an
  `mplso.MixedPrecisionLossScaleOptimizer`, a Keras optimizer (any family) as
  an `mplso.keras.LossScaleOptimizer`, and Grappler's `auto_mixed_precision`
  rewrite is on for `tf.function`s and for `tf.compat.v1.Session`s created
  from now on. The rewrite only changes ops placed on NVIDIA GPUs with
  Tensor Cores; elsewhere only the loss scaling (and the skipping of
  non-finite steps) remains.

  Compute gradients with the returned optimizer (`minimize`, or
  `compute_gradients` then `apply_gradients`), not with `tf.gradients` or a
  bare `tf.GradientTape`, which would not scale the loss.

  >>> opt = enable_mixed_precision_graph_rewrite(
  ...     tf.compat.v1.train.GradientDescentOptimizer(0.1), loss_scale=128)
  >>> type(opt).__name__, float(opt.loss_scale())
  ('MixedPrecisionLossScaleOptimizer', 128.0)
  >>> tf.config.optimizer.get_experimental_options()["auto_mixed_precision"]
  True
  >>> disable_mixed_precision_graph_rewrite()

  Args:
    opt: a `tf.compat.v1.train.Optimizer` or a Keras optimizer, not already
      wrapped for loss scaling.
    loss_scale: anything `mplso.loss_scale.get` accepts except None: a
      number, `"dynamic"` (the default) or an `mplso.LossScale`.

  Returns:
    `opt` wrapped in the mplso loss-scale optimizer of its kind.

  Raises:
    ValueError: `opt` is of another kind or already a loss-scale optimizer;
      the global Keras policy is a mixed precision policy (only one of the
      two mixed precision APIs may be used); or `loss_scale` is refused.

  Compatibility: TF 2.0-2.3's `tf.train.experimental` version took only Keras
  optimizers; this one takes both kinds under every spelling. TF 2.21's own
  function returns TF's wrapper, which applies non-finite steps under a fixed
  loss scale and refuses mplso's loss scales.
  """
  if _keras_mixed_policy_in_use():
    raise ValueError(
        "The mixed precision graph rewrite cannot be enabled, because the "
        "global Keras dtype Policy has been set to a mixed precision policy. "
        "At most, one of the following can be called: 1. "
        "tf.keras.mixed_precision.set_global_policy() with a mixed precision "
        "policy (you called this first); 2. "
        "enable_mixed_precision_graph_rewrite() (you called this second). "
        "Use one of the two: set the global policy back to 'float32', or "
        "drop the enable_mixed_precision_graph_rewrite() call and keep the "
        "Keras policy.")
  state = tf_seams.graph_rewrite_state()
  if state.non_mixed_precision_session_created():
    _logger.warning(
        "You already have existing Sessions that do not use mixed precision. "
        "enable_mixed_precision_graph_rewrite() will not affect these "
        "Sessions.")
  opt = _wrap(opt, loss_scale)
  tf.config.optimizer.set_experimental_options({_OPTION: True})
  state.set_mixed_precision_graph_rewrite_enabled(True)
  return opt


def disable_mixed_precision_graph_rewrite() -> None:
  """Turns TF's float16 graph rewrite off for new Sessions and `tf.function`s.

  Sessions created while it was on keep it; optimizers already wrapped keep
  scaling the loss. Warns (and does nothing else) when it was off.
  """
  state = tf_seams.graph_rewrite_state()
  if not state.is_mixed_precision_graph_rewrite_enabled():
    _logger.warning("disable_mixed_precision_graph_rewrite() called when "
                    "mixed precision is already disabled.")
  tf.config.optimizer.set_experimental_options({_OPTION: False})
  state.set_mixed_precision_graph_rewrite_enabled(False)


def graph_rewrite_enabled() -> bool:
  """Whether new Sessions get the rewrite (what `enable` turned on)."""
  return tf_seams.graph_rewrite_state().is_mixed_precision_graph_rewrite_enabled()
