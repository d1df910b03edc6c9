"""Runs one mplso test file under pytest, as the README's test command does.

Bazel's `py_test` runs a file as `__main__`; going through pytest instead
keeps `mplso_test/conftest.py` (four logical CPUs, Grappler's remapper off)
in force, so a test behaves the same under `bazel test` and under pytest.
"""

import os
import sys

import pytest

if __name__ == "__main__":
  # Runfiles hold the workspace as the current directory.
  sys.path.insert(0, os.getcwd())
  sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
