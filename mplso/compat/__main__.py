"""`python -m mplso.compat [--quiet] PROGRAM [ARGS...]`: legacy code on mplso.

PROGRAM is a script path, `-m MODULE` or `-c CODE`, as `python` takes it.
`--help` and `--list` (the spelling table) import no TensorFlow.
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib.util
import os
import runpy
import sys
import types

from mplso._src.compat import spellings as compat_spellings
from mplso._src.quiet_start import DEFAULT_LOG_LEVEL
from mplso._src.quiet_start import import_tensorflow_quietly

USAGE = """\
usage: python -m mplso.compat [--quiet] SCRIPT [ARGS...]
       python -m mplso.compat [--quiet] -m MODULE [ARGS...]
       python -m mplso.compat [--quiet] -c CODE [ARGS...]
       python -m mplso.compat --list
       python -m mplso.compat --help

Runs a legacy program as __main__ with ARGS as its own arguments, after
mplso.compat.install() has pointed TensorFlow's removed mixed-precision names
at mplso. The program is given as `python` takes it:

  SCRIPT     a Python file (sys.argv[0] is SCRIPT; its folder goes first on
             sys.path).
  -m MODULE  a module found on sys.path (the current directory first, then
             PYTHONPATH), run as `python -m MODULE` runs it, e.g.
             -m package.train; a package runs its __main__ (sys.argv[0] is
             the module's file).
  -c CODE    a string of Python code (sys.argv[0] is '-c').

Errors in the program keep their traceback and exit code. At exit, one line
on stderr names the mplso classes the program built (--quiet: no line).

The names it replaces, by family:
{families}

  --list   prints every spelling and what it resolves to; `python -m
           mplso.upgrade` rewrites a program's spellings to these names once
           (docs/upgrade.md).
  --quiet  no report at exit.

TensorFlow's C++ start-up logs are hidden: TF_CPP_MIN_LOG_LEVEL defaults to
{level} here (set it yourself, e.g. TF_CPP_MIN_LOG_LEVEL=0, to see them).
"""

# What follows `[--quiet]` on the command line, for the usage errors.
_ACCEPTED = "SCRIPT (a file), -m MODULE or -c CODE, then the program's ARGS"


class UsageError(Exception):
  """A command line the runner cannot run; the message says why."""


@dataclasses.dataclass(frozen=True)
class Program:
  """What to run: `kind` is "script", "module" or "code"; `target` its name."""
  kind: str
  target: str
  args: tuple[str, ...]


def usage() -> str:
  families = "\n".join(f"  - {family}"
                       for family in compat_spellings.FAMILIES)
  return USAGE.format(families=families, level=DEFAULT_LOG_LEVEL)


def table_text() -> str:
  """Returns `--list`'s text: each spelling, what it resolves to, since when.

  Every spelling is installed under Keras 3 and tf_keras alike; a line
  whose target builds another class under each says what it builds.
  """
  lines = []
  for row in compat_spellings.SPELLINGS:
    note = compat_spellings.per_keras(row)
    lines.append(f"{row.name} -> {row.target}  [TF {row.since}]"
                 + (f"  ({note})" if note else ""))
  for module, namespace, _ in compat_spellings.import_forms():
    lines.append(f"import {module} -> {namespace}")
  return "\n".join(lines) + "\n"


def parse_program(argv: list[str]) -> Program:
  """Returns the program that `argv` (after `--quiet`) names.

  `-m` and `-c` take their value as the next argument or attached
  (`-mpackage.train`), as `python` does; every later argument is the
  program's own.

  Raises:
    UsageError: if nothing is given, `-m` or `-c` has no value, or the first
      argument is neither an existing file nor one of these options.
  """
  if not argv:
    raise UsageError(f"no program given. Expected {_ACCEPTED}.")
  first = argv[0]
  for option, kind, value in (("-m", "module", "MODULE"),
                              ("-c", "code", "CODE")):
    if first.startswith(option) and not os.path.isfile(first):
      if len(first) > 2:
        return Program(kind, first[2:], tuple(argv[1:]))
      if len(argv) < 2:
        raise UsageError(
            f"Argument expected for the {option} option: {option} {value}. "
            f"Received: {option} as the last argument.")
      return Program(kind, argv[1], tuple(argv[2:]))
  if os.path.isfile(first):
    return Program("script", first, tuple(argv[1:]))
  if first.startswith("-"):
    raise UsageError(f"unknown option: {first!r}. Expected {_ACCEPTED}, "
                     "or --list or --help alone.")
  raise UsageError(f"no such script: {first!r}. Expected {_ACCEPTED}.")


def _module_spec(name: str):
  """Returns the spec of what `python -m name` runs: `name` or its `__main__`.

  Imports the packages above `name`, as `python -m` does.

  Raises:
    UsageError: if `name` is empty or relative, or no such module exists
      (for a package: no `__main__` in it).
    ImportError: raised by the code of a package above `name`: the
      program's own error.
  """
  if not name or name.startswith("."):
    raise UsageError(
        "-m needs an absolute module name such as package.train. "
        f"Received: -m {name!r}.")
  try:
    spec = importlib.util.find_spec(name)
  except ModuleNotFoundError as e:
    # Only a missing `name` or package above it is a usage error; a module
    # that one of them imports is missing for the program itself.
    if e.name is None or not (name == e.name or name.startswith(e.name + ".")):
      raise
    spec = None
  if spec is None:
    hint = (" (a file path? pass it without -m, as SCRIPT)"
            if name.endswith(".py") or os.sep in name else "")
    raise UsageError(
        f"No module named {name}{hint}. Received: -m {name!r}. Expected an "
        "importable module: on sys.path (the current directory first, then "
        "PYTHONPATH), or a package with a __main__ module.")
  if spec.submodule_search_locations is None:
    return spec
  main_spec = importlib.util.find_spec(name + ".__main__")
  if main_spec is None:
    raise UsageError(
        f"No module named {name}.__main__; {name!r} is a package and cannot "
        f"be directly executed. Received: -m {name!r}. Expected a module, or "
        "a package with a __main__ module.")
  return main_spec


def _run_code(code: str) -> None:
  """Runs `code` in a fresh `__main__` module, as `python -c` does."""
  main = types.ModuleType("__main__")
  sys.modules["__main__"] = main
  compiled = compile(code, "<string>", "exec")
  exec(compiled, main.__dict__)  # pylint: disable=exec-used


def run(program: Program) -> None:
  """Runs `program` as `__main__`, with its arguments in `sys.argv`.

  Raises:
    UsageError: for a module that `-m` cannot find (before that module's
      own code runs; the packages above it are imported, as by `python`).
  """
  if program.kind == "script":
    sys.argv = [program.target, *program.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(program.target)))
    runpy.run_path(program.target, run_name="__main__")
  elif program.kind == "module":
    # While the module is looked up sys.argv[0] is '-m', then its file, as
    # under `python -m`, whose sys.path[0] (the current directory) this
    # process already has.
    sys.argv = ["-m", *program.args]
    spec = _module_spec(program.target)
    sys.argv[0] = spec.origin
    runpy.run_module(spec.name, run_name="__main__", alter_sys=True)
  else:
    sys.argv = ["-c", *program.args]
    _run_code(program.target)


def _report(stream) -> None:
  from mplso._src.compat import usage as compat_usage  # pylint: disable=g-import-not-at-top
  stream.write(compat_usage.report() + "\n")
  stream.flush()


def _usage_error(error: UsageError) -> int:
  sys.stderr.write(f"{usage()}\nerror: {error}\n")
  return 2


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
    sys.stdout.write(table_text())
    return 0
  try:
    program = parse_program(argv)
  except UsageError as e:
    return _usage_error(e)
  import_tensorflow_quietly()
  from mplso._src.compat import install as compat_install  # pylint: disable=g-import-not-at-top
  from mplso._src.compat import usage as compat_usage  # pylint: disable=g-import-not-at-top
  compat_install.install()
  if not quiet:
    compat_usage.watch()
    # At exit, after the program's own output and traceback, whatever ends it.
    atexit.register(_report, sys.stderr)
  try:
    run(program)
  except UsageError as e:
    atexit.unregister(_report)  # No program to report on.
    return _usage_error(e)
  return 0


if __name__ == "__main__":
  sys.exit(main())
