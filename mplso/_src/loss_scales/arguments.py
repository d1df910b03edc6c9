"""Validates numeric constructor arguments, with errors that name the bad value."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

# The largest finite float32: every loss scale is kept in a float32 variable,
# so a larger one would silently become inf there.
FLOAT32_MAX = float(np.finfo(np.float32).max)
# The smallest normal float32: a smaller scale is 0 in float32, or a
# subnormal that TensorFlow's kernels flush to 0 (CPU and GPU alike), so
# every step scaled by it would be skipped.
FLOAT32_MIN_NORMAL = float(np.finfo(np.float32).tiny)


def _is_real(value: Any) -> bool:
  """True for Python and NumPy real scalars; False for bools and the rest."""
  return (isinstance(value, numbers.Real) and
          not isinstance(value, (bool, np.bool_)))


def _is_integral(value: Any) -> bool:
  """True for ints and integral floats (2, np.int64(2), 2., np.float32(2.))."""
  if isinstance(value, numbers.Integral):
    return True
  return math.isfinite(value) and float(value).is_integer()


def _float32_magnitude(number: int | float) -> float:
  """Returns `abs(number)` rounded to float32: inf beyond its range, 0 below.

  3.4028235e38 rounds to the largest finite float32, 1e-50 to 0.
  """
  if abs(number) > 2 * FLOAT32_MAX:  # Also keeps huge ints out of NumPy.
    return math.inf
  with np.errstate(over="ignore", under="ignore"):
    return float(abs(np.float32(number)))


def _within(value: int | float, minimum: float, inclusive: bool,
            maximum: float | None) -> bool:
  above = value >= minimum if inclusive else value > minimum
  return above and (maximum is None or value <= maximum)


def check_number(name: str, value: Any, *, minimum: float,
                 inclusive: bool = True, maximum: float | None = None,
                 integer: bool = False, float32: bool = False,
                 type_clause: str | None = None,
                 range_clause: str | None = None) -> int | float:
  """Returns `value` as a Python int or float if it is a number in range.

  Accepted are Python and NumPy real scalars (`8`, `8.`, `np.float32(8)`,
  `np.int64(8)`), as TensorFlow's loss-scale classes accepted them. With
  `integer=True` an integral float (`2.`) is accepted too and returned as an
  int, as TF's `int(increment_period)` did; a non-integral one (`2.5`) is
  refused, where TF silently truncated it.

  >>> check_number("increment_period", np.float32(4.), minimum=1, integer=True)
  4

  Args:
    name: the argument's name, as the user spelled it.
    value: what the user passed.
    minimum: the lower bound.
    inclusive: whether `minimum` itself is allowed.
    maximum: an optional upper bound, always allowed itself.
    integer: accept only integral values; returns an int.
    float32: the value becomes a float32 loss scale, so it must be a normal
      float32: neither beyond float32's largest finite value (about 3.4e38,
      inf in float32) nor below its smallest normal one (about 1.2e-38: 0
      in float32, or a subnormal that TensorFlow flushes to 0).
    type_clause: TensorFlow's wording for a value of the wrong type, put
      first in the message so that legacy tests matching it still pass.
    range_clause: TensorFlow's wording for a value out of range, likewise.

  Returns:
    `value` as a Python int (`integer=True`) or float.

  Raises:
    ValueError: naming `name`, what is accepted and `value`. Bools are
      refused: nobody means True as a loss scale.
  """
  kind = "an integer" if integer else "a real number"
  if maximum is None:
    bound = (">= " if inclusive else "> ") + f"{minimum:g}"
  else:
    bound = f"in {'[' if inclusive else '('}{minimum:g}, {maximum:g}]"
  received = f"Received: {name}={value!r}"

  def fail(clause, what, fix=""):
    prefix = f"{clause} " if clause else ""
    raise ValueError(f"{prefix}{what} {received}.{fix}")

  if not _is_real(value):
    fail(type_clause,
         f"`{name}` must be {kind} {bound} (a Python or NumPy int or "
         f"float), not {type(value).__name__}.")
  if isinstance(value, numbers.Integral):
    number = int(value)
  else:
    number = float(value)
    if not math.isfinite(number):
      fail(None, f"`{name}` must be a finite number {bound}.")
  if integer and not _is_integral(number):
    fail(type_clause,
         f"`{name}` must be {kind} {bound}; a fractional value would be "
         "truncated.", f" Pass {math.floor(number)} or {math.ceil(number)}.")
  if not _within(number, minimum, inclusive, maximum):
    fail(range_clause, f"`{name}` must be {kind} {bound}.")
  if float32:
    magnitude = _float32_magnitude(number)
    if magnitude > FLOAT32_MAX:
      fail(None,
           f"`{name}` must be finite in float32, at most the float32 limit "
           f"{FLOAT32_MAX:g} (loss scales are kept as float32, where this "
           "value would be inf).", " Pass a smaller value, such as 2**15.")
    if magnitude < FLOAT32_MIN_NORMAL:
      became = "0" if magnitude == 0 else "a subnormal that TF flushes to 0"
      fail(None,
           f"`{name}` must be nonzero in float32, at least its smallest "
           f"normal value {FLOAT32_MIN_NORMAL:g} (loss scales are kept as "
           f"float32, where this value would be {became}: a step at that "
           "scale would be skipped).", " Pass a larger value, such as 1.")
  return int(number) if integer else float(number)
