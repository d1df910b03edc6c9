"""Small real data sets shipped with mplso, for its demos and docs (no downloads)."""

from __future__ import annotations

import os

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))

__all__ = ["load_digits"]


def load_digits() -> tuple[np.ndarray, np.ndarray]:
  """Returns the UCI handwritten digits: 1797 images of 8x8 and their labels.

  Pixels are counts from 0 to 16 (uint8); labels are the digits 0 to 9
  (uint8). Source and licence (CC BY 4.0, Alpaydin & Kaynak, UCI Machine
  Learning Repository): `DIGITS_PROVENANCE.txt` beside this module.

  Returns:
    `(images, labels)`: uint8 arrays of shape (1797, 8, 8) and (1797,).
  """
  with np.load(os.path.join(_HERE, "digits.npz"), allow_pickle=False) as data:
    return data["images"], data["labels"]
