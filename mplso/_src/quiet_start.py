"""Imports TensorFlow with its start-up logs held to TF_CPP_MIN_LOG_LEVEL."""

from __future__ import annotations

import importlib
import os
import re
import sys
import tempfile

# Hides TF's C++ logs below FATAL (on a CPU machine: cuInit errors, oneDNN
# and CPU-feature notices) unless the user chose a level.
DEFAULT_LOG_LEVEL = "3"
# A C++ log line: severity letter, date, time, thread, file:line].
_LOG_LINE = re.compile(r"^([IWEF])\d{4} [\d:.]+\s+\d+ \S+:\d+\] ")
_SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}
_NOTICE = "WARNING: All log messages before absl::InitializeLog() is called"


def _min_log_level() -> int:
  try:
    return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
  except ValueError:
    return 0


def filter_startup_logs(text: str, min_level: int) -> str:
  """Drops the C++ log records below `min_level` from captured stderr.

  TF 2.21 writes some records while its libraries load, before absl's
  logging reads TF_CPP_MIN_LOG_LEVEL; this applies the level to them. A
  record's continuation lines go with it; anything else is kept.
  """
  kept = []
  dropping = False
  for line in text.splitlines(keepends=True):
    match = _LOG_LINE.match(line)
    if match:
      dropping = _SEVERITY[match.group(1)] < min_level
    elif line.startswith(_NOTICE):
      dropping = min_level > 0
    elif line.startswith(("/", "Traceback")):  # Python's own output.
      dropping = False
    if not dropping:
      kept.append(line)
  return "".join(kept)


def import_tensorflow_quietly() -> None:
  """Imports TensorFlow, keeping its load-time logs to TF_CPP_MIN_LOG_LEVEL.

  The level defaults to 3 (FATAL only: on a CPU machine TF's cuInit errors,
  oneDNN and CPU-feature notices are hidden); a level the user set wins, and
  `TF_CPP_MIN_LOG_LEVEL=0` shows everything. Python's own output is kept.
  """
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", DEFAULT_LOG_LEVEL)
  level = _min_log_level()
  if "tensorflow" in sys.modules or level <= 0:
    importlib.import_module("tensorflow")
    return
  sys.stderr.flush()
  stderr_fd = os.dup(2)
  with tempfile.TemporaryFile() as captured:
    os.dup2(captured.fileno(), 2)
    try:
      importlib.import_module("tensorflow")
    finally:
      sys.stderr.flush()
      os.dup2(stderr_fd, 2)
      os.close(stderr_fd)
      captured.seek(0)
      sys.stderr.write(filter_startup_logs(
          captured.read().decode("utf-8", "replace"), level))
      sys.stderr.flush()
