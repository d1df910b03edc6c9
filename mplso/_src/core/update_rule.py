"""The dynamic loss-scale update rule, as branch-free tensor arithmetic."""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf


def next_state(
    scale: tf.Tensor,
    good_steps: tf.Tensor,
    grads_finite: tf.Tensor,
    *,
    increment_period: int,
    grow_ratio: float,
    shrink: Callable[[tf.Tensor], tf.Tensor],
    bad_steps: tf.Tensor | None = None,
    decrement_period: int = 1,
    finite_step_resets_bad_steps: bool = False,
    min_scale: float = 1.0,
    max_scale: float | None = None,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor | None]:
  """Returns the loss scale and step counters that follow one step.

  One rule serves TF's `DynamicLossScale` (no bad-step counter: every
  non-finite step shrinks), its mplso extensions (a floor other than 1, a
  ceiling, and hysteresis: shrink after `decrement_period` consecutive
  non-finite steps) and TF 1.x's `ExponentialUpdateLossScaleManager`
  (shrinks after `decrement_period` non-finite steps, consecutive or not).
  Written with `tf.where` instead of nested `tf.cond`s, it costs a few scalar
  ops and no branches:

      if grads_finite:
        good_steps += 1
        if finite_step_resets_bad_steps: bad_steps = 0
        if good_steps >= increment_period:
          grown = min(scale * grow_ratio, max_scale)  # no min() if None
          if isfinite(grown): scale = grown
          good_steps = bad_steps = 0
      else:
        good_steps = 0
        bad_steps += 1
        if bad_steps >= decrement_period:
          scale = max(shrink(scale), min_scale)
          bad_steps = 0

  With the defaults (no `bad_steps`, `min_scale=1`, no `max_scale`) this is
  TF's `DynamicLossScale.update`, bit for bit.

  >>> s, g, _ = next_state(tf.constant(8.), tf.constant(1, tf.int64),
  ...                      tf.constant(True), increment_period=2,
  ...                      grow_ratio=2., shrink=lambda s: s / 2.)
  >>> float(s), int(g)
  (16.0, 0)

  Args:
    scale: scalar float32, the current loss scale.
    good_steps: scalar integer, consecutive finite steps so far.
    grads_finite: scalar bool, whether this step's gradients are all finite.
    increment_period: finite steps in a row before the scale grows.
    grow_ratio: factor by which the scale grows.
    shrink: the smaller scale as a function of the current one (before the
      floor of 1 is applied); TF divides by its multiplier, TF 1.x contrib
      multiplies by its `decr_ratio`, and the two round differently.
    bad_steps: scalar integer, non-finite steps since the last change; None
      when every non-finite step shrinks (then `decrement_period` must be 1).
    decrement_period: non-finite steps before the scale shrinks.
    finite_step_resets_bad_steps: whether a finite step restarts the count
      of non-finite steps (hysteresis: they must be consecutive); TF 1.x
      contrib does not restart it.
    min_scale: the floor a shrinking scale stops at (TF: 1).
    max_scale: the ceiling a growing scale stops at; None for none (TF).

  Returns:
    `(new_scale, new_good_steps, new_bad_steps)`; the last is None when
    `bad_steps` is None.
  """
  # Each state variable is read once; every use below shares that read.
  scale = tf.convert_to_tensor(scale)
  good_steps = tf.convert_to_tensor(good_steps)
  zero = tf.zeros_like(good_steps)
  counted = tf.where(grads_finite, good_steps + 1, zero)
  grow = counted >= increment_period  # Never true on a non-finite step.
  grown = scale * tf.constant(grow_ratio, tf.float32)
  if max_scale is not None:
    grown = tf.minimum(grown, tf.constant(max_scale, tf.float32))
  shrunk = tf.maximum(shrink(scale), min_scale)
  if bad_steps is None:
    if decrement_period != 1:
      raise ValueError("decrement_period needs a bad_steps counter.")
    # Every non-finite step shrinks.
    kept_or_shrunk, new_bad_steps = tf.where(grads_finite, scale, shrunk), None
  else:
    bad_steps = tf.convert_to_tensor(bad_steps)
    kept_bad_steps = (tf.zeros_like(bad_steps) if finite_step_resets_bad_steps
                      else bad_steps)
    bad_counted = tf.where(grads_finite, kept_bad_steps, bad_steps + 1)
    shrink_now = tf.logical_and(tf.logical_not(grads_finite),
                                bad_counted >= decrement_period)
    new_bad_steps = tf.where(tf.logical_or(grow, shrink_now),
                             tf.zeros_like(bad_counted), bad_counted)
    kept_or_shrunk = tf.where(shrink_now, shrunk, scale)
  new_scale = tf.where(tf.logical_and(grow, tf.math.is_finite(grown)), grown,
                       kept_or_shrunk)
  new_good_steps = tf.where(grow, zero, counted)
  return new_scale, new_good_steps, new_bad_steps
