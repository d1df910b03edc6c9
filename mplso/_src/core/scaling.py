"""Multiplies a loss by the loss scale and divides gradients by it."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from typing import Union

import tensorflow as tf

from mplso._src.core import tf_seams

Grad = Union[tf.Tensor, tf.IndexedSlices, None]
Grads = Sequence[Grad]
Scale = Union[tf.Tensor, float]
Loss = Union[tf.Tensor, Callable[[], tf.Tensor]]


def _is_one(scale: Scale) -> bool:
  return tf_seams.static_value(scale) == 1


def scale_loss(loss: Loss, scale: Scale | Callable[[], Scale]) -> Loss:
  """Returns `loss * scale`, as a callable when `loss` is a callable.

  The scale is cast to the loss's dtype, as TF's optimizers do (so a float16
  loss times a scale above 65504 overflows to inf and the step is skipped).
  `scale` may be a callable (such as a `LossScale`): it is then read when the
  loss is computed, so a scaled callable kept across steps uses the scale of
  the step it runs in.

  >>> float(scale_loss(tf.constant(3.), tf.constant(4.)))
  12.0
  """
  if not callable(scale) and _is_one(scale):
    return loss
  if callable(loss):

    def scaled_loss():
      return scale_loss(tf.convert_to_tensor(loss()), scale)

    return scaled_loss
  if callable(scale):
    scale = scale()
  loss = tf.convert_to_tensor(loss)
  if not loss.dtype.is_floating:
    raise ValueError(
        "The loss must be a floating-point tensor, or a callable returning "
        f"one. Received: loss={loss!r}.")
  return loss * tf.cast(scale, loss.dtype)


def _mul(grad: Grad, factor: tf.Tensor) -> Grad:
  if grad is None:
    return None
  if isinstance(grad, tf.IndexedSlices):
    return tf.IndexedSlices(
        grad.values * tf.cast(factor, grad.values.dtype),
        grad.indices,
        grad.dense_shape,
    )
  return grad * tf.cast(factor, grad.dtype)


def unscale_grads(grads: Grads, scale: Scale) -> list[Grad]:
  """Returns each gradient times `1 / scale`; `None` stays `None`.

  The reciprocal is taken once in float32 and each gradient multiplied by it,
  the arithmetic of TF's own loss-scale optimizers, so results are bit-equal.
  `tf.IndexedSlices` keep their indices; only their values are rescaled.
  """
  if _is_one(scale):
    return list(grads)
  reciprocal = 1.0 / tf.cast(scale, tf.float32)
  return [_mul(g, reciprocal) for g in grads]
