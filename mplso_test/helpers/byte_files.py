"""Files as bytes, for the upgrade tool's tests (no TensorFlow imported)."""

import os


def put(path, data, mode=None):
  """Writes bytes (and a mode) at `path`, making its folder."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "wb") as f:
    f.write(data)
  if mode is not None:
    os.chmod(path, mode)


def get(path):
  """The bytes at `path`."""
  with open(path, "rb") as f:
    return f.read()
