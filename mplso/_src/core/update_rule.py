"""The dynamic loss-scale update rule, as branch-free tensor arithmetic."""

from __future__ import annotations

import tensorflow as tf


def next_dynamic_state(
    scale: tf.Tensor,
    good_steps: tf.Tensor,
    grads_finite: tf.Tensor,
    increment_period: int,
    multiplier: float,
) -> tuple[tf.Tensor, tf.Tensor]:
  """Returns the loss scale and good-step count that follow one step.

  The rule of TF's `DynamicLossScale`, written with `tf.where` instead of
  nested `tf.cond`s so that it costs a few scalar ops and no branches:

      if grads_finite:
        good_steps += 1
        if good_steps >= increment_period:
          if isfinite(scale * multiplier): scale *= multiplier
          good_steps = 0
      else:
        scale = max(scale / multiplier, 1)
        good_steps = 0

  >>> s, g = next_dynamic_state(tf.constant(8.), tf.constant(1, tf.int64),
  ...                           tf.constant(True), 2, 2.)
  >>> float(s), int(g)
  (16.0, 0)

  Args:
    scale: scalar float32, the current loss scale.
    good_steps: scalar int64, consecutive finite steps so far.
    grads_finite: scalar bool, whether this step's gradients are all finite.
    increment_period: steps of finite gradients before the scale grows.
    multiplier: factor by which the scale grows and shrinks.

  Returns:
    `(new_scale, new_good_steps)`, float32 and int64 scalars.
  """
  multiplier = tf.constant(multiplier, tf.float32)
  counted = tf.where(grads_finite, good_steps + 1, tf.zeros_like(good_steps))
  grow = counted >= increment_period  # Never true on a non-finite step.
  grown = scale * multiplier
  shrunk = tf.maximum(scale / multiplier, 1.0)
  new_scale = tf.where(
      grads_finite,
      tf.where(tf.logical_and(grow, tf.math.is_finite(grown)), grown, scale),
      shrunk,
  )
  new_good_steps = tf.where(grow, tf.zeros_like(counted), counted)
  return new_scale, new_good_steps
