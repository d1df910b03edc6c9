"""Checks `grads_and_vars` before a step, with errors that name the bad entry."""

from __future__ import annotations

from collections.abc import Iterable

import tensorflow as tf


def _is_variable(value) -> bool:
  # tf.Variable (and AutoCast, distributed, ref variables) or keras.Variable.
  return isinstance(value, tf.Variable) or (
      hasattr(value, "assign") and hasattr(value, "dtype") and
      hasattr(value, "shape"))


def _base_dtype(value) -> tf.DType:
  return tf.as_dtype(getattr(value, "true_dtype", value.dtype)).base_dtype


def check_grads_and_vars(grads_and_vars: Iterable,
                         *, same_dtype: bool = True) -> list:
  """Returns `grads_and_vars` as a list, after checking every pair.

  Each entry must be a `(gradient, variable)` pair whose gradient is None, a
  numeric tensor or `tf.IndexedSlices`, and whose dense gradient's shape
  fits the variable's. With `same_dtype`, the gradient's dtype must be the
  variable's: TF1 kernels given another dtype abort the process instead of
  raising.

  Raises:
    ValueError: naming the first bad entry and what is accepted.
  """
  if isinstance(grads_and_vars, (str, bytes)) or not isinstance(
      grads_and_vars, Iterable):
    raise ValueError(
        "`grads_and_vars` must be a list of (gradient, variable) pairs. "
        f"Received: grads_and_vars={grads_and_vars!r}.")
  grads_and_vars = list(grads_and_vars)
  for index, pair in enumerate(grads_and_vars):
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
      raise ValueError(
          "`grads_and_vars` must hold (gradient, variable) pairs. Received "
          f"at index {index}: {pair!r}.")
    grad, var = pair
    if not _is_variable(var):
      raise ValueError(
          "The second element of each pair of `grads_and_vars` must be a "
          f"variable. Received at index {index}: {var!r}.")
    if grad is None:
      continue
    values = grad.values if isinstance(grad, tf.IndexedSlices) else grad
    try:
      dtype = tf.as_dtype(values.dtype if hasattr(values, "dtype") else
                          tf.convert_to_tensor(values).dtype)
    except (TypeError, ValueError):
      dtype = None
    if dtype is None or not (dtype.is_floating or dtype.is_integer or
                             dtype.is_complex):
      raise ValueError(
          "Each gradient must be None, a numeric tensor or tf.IndexedSlices. "
          f"Received for variable {var.name!r}: {grad!r}.")
    if same_dtype and dtype.base_dtype != _base_dtype(var):
      raise ValueError(
          f"The gradient of variable {var.name!r} has dtype {dtype.name}, "
          f"not the variable's {_base_dtype(var).name}. Received: "
          f"{grad!r}. Cast the gradient to the variable's dtype.")
    if (not isinstance(grad, tf.IndexedSlices) and
        not tf.TensorShape(grad.shape).is_compatible_with(var.shape)):
      raise ValueError(
          f"The gradient of variable {var.name!r} has shape "
          f"{tuple(grad.shape)}, which does not fit the variable's "
          f"{tuple(var.shape)}. Received: {grad!r}.")
  return grads_and_vars
