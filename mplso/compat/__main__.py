"""`python -m mplso.compat [--quiet] SCRIPT [ARGS...]`: runs a legacy script on mplso.

`--help` imports no TensorFlow; `--list` prints the spelling table.
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys

from mplso._src import compat_spellings
from mplso._src.quiet_start import DEFAULT_LOG_LEVEL
from mplso._src.quiet_start import import_tensorflow_quietly

USAGE = """\
usage: python -m mplso.compat [--quiet] SCRIPT [ARGS...]
       python -m mplso.compat --list
       python -m mplso.compat --help

Runs SCRIPT as __main__ with ARGS as its own arguments, after
mplso.compat.install() has pointed TensorFlow's removed mixed-precision names
at mplso. Errors in SCRIPT keep their traceback and exit code. At exit, one
line on stderr names the mplso classes the script built (--quiet: no line).

The names it replaces, by family:
{families}

  --list   prints every spelling and what it resolves to.
  --quiet  no report at exit.

TensorFlow's C++ start-up logs are hidden: TF_CPP_MIN_LOG_LEVEL defaults to
{level} here (set it yourself, e.g. TF_CPP_MIN_LOG_LEVEL=0, to see them).
"""

def usage() -> str:
  families = "\n".join(f"  - {family}"
                       for family in compat_spellings.FAMILIES)
  return USAGE.format(families=families, level=DEFAULT_LOG_LEVEL)


def table_text() -> str:
  """Returns `--list`'s text: each spelling, what it resolves to, since when."""
  from mplso._src import compat_install  # pylint: disable=g-import-not-at-top
  applies = compat_install.spellings()
  lines = []
  for row in compat_spellings.SPELLINGS:
    note = "" if row in applies else "  (not installed: tf.keras is tf_keras)"
    lines.append(f"{row.name} -> {row.target}  [TF {row.since}]{note}")
  for module_name, spelling in compat_spellings.IMPORTABLE:
    lines.append(f"import {module_name} -> {spelling}")
  return "\n".join(lines) + "\n"


def _report(stream) -> None:
  from mplso._src import compat_usage  # pylint: disable=g-import-not-at-top
  stream.write(compat_usage.report() + "\n")
  stream.flush()


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if not argv:
    sys.stderr.write(usage())
    return 2
  if argv[0] in ("-h", "--help"):
    sys.stdout.write(usage())
    return 0
  quiet = argv[0] == "--quiet"
  if quiet:
    argv = argv[1:]
  if argv and argv[0] == "--list":
    import_tensorflow_quietly()
    sys.stdout.write(table_text())
    return 0
  if not argv or not os.path.isfile(argv[0]):
    missing = f": no such script: {argv[0]!r}" if argv else ": no SCRIPT given"
    sys.stderr.write(f"{usage()}\nerror{missing}\n")
    return 2
  script = argv[0]
  import_tensorflow_quietly()
  from mplso._src import compat_install  # pylint: disable=g-import-not-at-top
  from mplso._src import compat_usage  # pylint: disable=g-import-not-at-top
  compat_install.install()
  if not quiet:
    compat_usage.watch()
    # At exit, after the script's own output and traceback, whatever ends it.
    atexit.register(_report, sys.stderr)
  sys.argv = [script, *argv[1:]]
  sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
  runpy.run_path(script, run_name="__main__")
  return 0


if __name__ == "__main__":
  sys.exit(main())
