"""Validates numeric constructor arguments, with errors that name the bad value."""

from __future__ import annotations

import math
from typing import Any


def check_number(name: str, value: Any, *, minimum: float,
                 inclusive: bool = True, maximum: float | None = None,
                 integer: bool = False) -> None:
  """Raises ValueError unless `value` is a finite Python number in range.

  Args:
    name: the argument's name, as the user spelled it.
    value: what the user passed.
    minimum: the lower bound.
    inclusive: whether `minimum` itself is allowed.
    maximum: an optional upper bound, always allowed itself.
    integer: accept only Python ints.

  Raises:
    ValueError: naming `name`, the accepted range and `value`. Bools are
      refused: nobody means True as a loss scale.
  """
  kinds = (int,) if integer else (int, float)
  ok = (isinstance(value, kinds) and not isinstance(value, bool) and
        math.isfinite(value) and
        (value >= minimum if inclusive else value > minimum) and
        (maximum is None or value <= maximum))
  if not ok:
    kind = "a Python int" if integer else "a Python int or float"
    if maximum is None:
      bound = (">= " if inclusive else "> ") + f"{minimum:g}"
    else:
      bound = f"in {'[' if inclusive else '('}{minimum:g}, {maximum:g}]"
    raise ValueError(
        f"`{name}` must be {kind} {bound}. Received: {name}={value!r}.")
