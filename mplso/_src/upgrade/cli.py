"""`python -m mplso.upgrade` / `mplso-upgrade`: tf_upgrade_v2's command line.

Imports no TensorFlow: the rewrite is a source-to-source edit. One file never
stops a run: each is converted, copied unchanged, or named in the report
with an `ERROR` line, and the report is always written.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import os
import stat
import sys
import threading

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import files
from mplso._src.upgrade import json_report
from mplso._src.upgrade import notebooks
from mplso._src.upgrade import report as report_lib

DESCRIPTION = """\
Rewrites legacy TensorFlow mixed-precision loss-scale code (every spelling
`python -m mplso.compat --list` prints) so that it runs with plain `python`
on TF 2.21.

  --to mplso   (default) mplso's names; the program trains exactly as under
               `python -m mplso.compat`.
  --to native  Keras's own LossScaleOptimizer where its behaviour allows,
               mplso's names elsewhere; the report names every difference.
               The Keras is the one `tf.keras` will be when the program runs:
               Keras 3, or tf_keras when TF_USE_LEGACY_KERAS=1 is set (read
               here as TensorFlow reads it).

Jupyter notebooks (.ipynb) are converted too: their code cells, as one
program; IPython lines (%magic, !shell, obj?) and cells (%%bash) are kept as
they are, and report lines name the cell (nb.ipynb:cell 4:2 is line 2 of
the notebook's 4th cell, markdown cells counted).

Untouched lines stay byte for byte (encoding, byte order mark and line
endings included; in a notebook every byte but the changed cells'
sources), and every output keeps its input's mode. A file that does not
parse or decode, or a notebook that is not nbformat 4 JSON, is reported and
copied unchanged; symbolic links are mirrored as links, never written
through.

--check and --diff write nothing: --check says which files would change,
--diff prints a unified diff of each. PATH arguments (as pre-commit passes
them) are converted in place with --inplace, or checked with --check or
--diff. --infile - reads Python from standard input and writes the
converted text to standard output. These four write a report only where
--reportfile (or --json-report) names one.

Exit status:
  0  plain run: every file was converted or copied;
     --check/--diff: nothing would change.
  1  plain run: a file could not be converted or written (it does not
     parse or decode, a notebook is not nbformat 4 JSON or one of its cells
     does not parse, or reading or writing it failed): the report's ERROR
     lines and the last line printed name it;
     --check/--diff: a file would change, and none needs a person.
  2  a command line that cannot run, before anything is read or written.
  3  --check/--diff: a file needs a person: it has a WARNING line, or it
     could not be converted (an ERROR line).
See docs/upgrade.md.
"""

OK = 0
FAILED = 1  # A plain run: a file could not be converted or written.
WOULD_CHANGE = 1  # --check, --diff: a file would change.
BAD_COMMAND_LINE = 2  # As argparse exits.
NEEDS_A_PERSON = 3  # --check, --diff: a WARNING or an ERROR line.

STDIO = "-"  # `--infile -`: standard input in, standard output out.
STDIN_NAME = "<stdin>"  # How the report names standard input.
_DEFAULT_REPORT = "report.txt"

# LibCST's visitors recurse once per level of the syntax tree: a 400-term
# sum or a 1,000-branch `elif` chain goes deeper than Python's default limit
# of 1,000 frames. The rewrite runs in a thread whose stack holds 5 KiB per
# allowed frame, ten times what a frame of it was measured to take, so that
# a deeper file still ends in a RecursionError (reported), not a crash.
_RECURSION_LIMIT = 100_000
_STACK_BYTES = 512 << 20

_NAMED_ON_THE_LAST_LINE = 10  # Files with an ERROR; the report has all.

# The member kind of a Jupyter notebook (`files.walk` lists it as OTHER).
NOTEBOOK = "notebook"
_CONVERTED = (files.PYTHON, NOTEBOOK)  # The kinds read and converted.
_SUFFIXES = (".py", ".ipynb")  # Their names (a link to one is mirrored).


def _boolean(text: str) -> bool:
  lowered = text.lower()
  if lowered in ("true", "1", "yes"):
    return True
  if lowered in ("false", "0", "no"):
    return False
  raise argparse.ArgumentTypeError(
      f"expected True or False. Received: {text!r}")


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
      prog="python -m mplso.upgrade", description=DESCRIPTION,
      formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("paths", nargs="*", metavar="PATH",
                 help="Python files or notebooks to convert in place "
                 "(with --inplace) or check (with --check or --diff)")
  p.add_argument("--infile", dest="input_file",
                 help="the Python file (or .ipynb notebook) to convert; "
                 "- reads Python from standard input and writes to "
                 "standard output")
  p.add_argument("--outfile", dest="output_file",
                 help="where to write the converted file")
  p.add_argument("--intree", dest="input_tree",
                 help="convert every .py file and .ipynb notebook under "
                 "this folder")
  p.add_argument("--outtree", dest="output_tree",
                 help="the folder to write the converted tree to (must not "
                 "exist yet, nor lie inside --intree)")
  p.add_argument("--copyotherfiles", dest="copy_other_files", nargs="?",
                 const=True, default=True, type=_boolean,
                 help="with --intree: also copy the files that are not "
                 "Python or notebooks (default True; --copyotherfiles "
                 "False: do not)")
  p.add_argument("--inplace", action="store_true",
                 help="convert --infile, --intree or the PATH arguments "
                 "in place")
  p.add_argument("--reportfile", dest="report_filename", default=None,
                 help="where to write the report (default report.txt; "
                 "with --check, --diff, --infile - or PATH arguments, no "
                 "report unless given)")
  p.add_argument("--json-report", dest="json_report", default=None,
                 metavar="FILE",
                 help="also write a machine-readable report (JSON) to FILE")
  p.add_argument("--check", action="store_true",
                 help="write nothing; exit 1 when a file would change, 3 "
                 "when one needs a person (see Exit status)")
  p.add_argument("--diff", action="store_true",
                 help="write nothing; print a unified diff of each file "
                 "that would change (exit status as --check)")
  p.add_argument("--to", choices=(edits_lib.MPLSO, edits_lib.NATIVE),
                 default=edits_lib.MPLSO,
                 help="whose names to use (default mplso)")
  p.add_argument("-j", "--jobs", type=_jobs, default=1, metavar="N",
                 help="convert the files of a tree in N processes (0: one "
                 "per CPU; default 1); the output is the same")
  return p


def _jobs(text: str) -> int:
  """`-j`'s value: a count of processes, 0 for one per CPU."""
  try:
    value = int(text)
  except ValueError:
    value = -1
  if value < 0:
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a number of processes: give 0 (one per CPU) or "
        "more")
  return value


def keras_at_run_time() -> str:
  """The Keras `tf.keras` will be: TensorFlow reads TF_USE_LEGACY_KERAS."""
  legacy = os.environ.get("TF_USE_LEGACY_KERAS", "") in ("true", "True", "1")
  return edits_lib.TF_KERAS if legacy else edits_lib.KERAS_3


@dataclasses.dataclass(frozen=True)
class _Job:
  """What the command line asks: the members to handle, and where to."""
  members: list[files.Member]  # The tree's, or the one --infile.
  outputs: dict[str, str]  # {member path: output path}; none in place.
  tree: str | None  # --intree (as given), or None for --infile.
  inplace: bool
  copy_other_files: bool
  problems: list[tuple[str, str]]  # (folder, why) it could not list.
  dry: bool = False  # --check, --diff: nothing written.
  stdin: bool = False  # --infile -: the one member is standard input.


def _job(args, error) -> _Job:
  """Checks the command line and lists what it converts; writes nothing."""
  given = [flag for flag, value in (("--infile", args.input_file),
                                    ("--intree", args.input_tree),
                                    ("PATH arguments", args.paths)) if value]
  if len(given) > 1:
    error(f"give one of --infile, --intree or PATH arguments, not both "
          f"{given[0]} and {given[1]}.")
  if args.check or args.diff:
    for flag, value in (("--outfile", args.output_file),
                        ("--outtree", args.output_tree),
                        ("--inplace", args.inplace)):
      if value:
        error(f"--check and --diff write nothing; give no {flag} with "
              "them.")
  if args.paths:
    return _paths_job(args, error)
  if args.input_file == STDIO:
    return _stdin_job(args, error)
  if args.input_file:
    return _file_job(args, error)
  if args.input_tree:
    return _tree_job(args, error)
  error("give --infile FILE --outfile FILE, --intree DIR --outtree DIR, "
        "either input with --inplace, --check or --diff, or PATH arguments "
        "with one of those.")
  raise AssertionError("unreachable")  # `error` exits.


def _file_job(args, error) -> _Job:
  if args.output_tree:
    error("--outtree goes with --intree; for one file give --outfile.")
  if not os.path.isfile(args.input_file):
    error(f"no such file: --infile {args.input_file!r}.")
  member = files.Member(args.input_file, os.path.basename(args.input_file),
                        _kind(args.input_file))
  if args.check or args.diff:
    return _Job([member], {}, None, False, True, [], dry=True)
  if args.inplace and args.output_file:
    error("--inplace writes over --infile; give no --outfile with it.")
  if args.inplace and os.path.islink(args.input_file):
    error(f"--infile {args.input_file!r} is a symbolic link (to "
          f"{os.readlink(args.input_file)!r}); --inplace never writes "
          "through a link: give the file it points to.")
  output = args.input_file if args.inplace else args.output_file
  if not output:
    error("--infile needs --outfile (or --inplace).")
  if not args.inplace:
    _check_writable("--outfile", output, error)
  return _Job([member], {} if args.inplace else {args.input_file: output},
              None, args.inplace, True, [])


def _tree_job(args, error) -> _Job:
  tree = args.input_tree
  if args.output_file:
    error("--outfile goes with --infile; for a tree give --outtree.")
  if not os.path.isdir(tree):
    error(f"no such folder: --intree {tree!r}.")
  if args.inplace and args.output_tree:
    error("--inplace writes over --intree; give no --outtree with it.")
  dry = args.check or args.diff
  if not args.inplace and not dry:
    if not args.output_tree:
      error("--intree needs --outtree (or --inplace).")
    if os.path.lexists(args.output_tree):
      error(f"Output directory {args.output_tree!r} must not already "
            "exist.")
    if files.inside(args.output_tree, tree):
      error(f"--outtree {args.output_tree!r} lies inside --intree "
            f"{tree!r}: give a folder outside it.")
    _check_writable("--outtree", args.output_tree, error)
  members, problems = files.walk(tree)
  members = [dataclasses.replace(m, kind=NOTEBOOK)
             if m.kind == files.OTHER and _kind(m.path) == NOTEBOOK else m
             for m in members]
  outputs = {} if args.inplace or dry else {
      m.path: os.path.join(args.output_tree, m.relative) for m in members}
  return _Job(members, outputs, tree, args.inplace, args.copy_other_files,
              problems, dry=dry)


def _paths_job(args, error) -> _Job:
  """PATH arguments: files converted in place, or checked."""
  dry = args.check or args.diff
  if not (args.inplace or dry):
    error("PATH arguments need --inplace (convert them in place), --check "
          "or --diff.")
  for flag, value in (("--outfile", args.output_file),
                      ("--outtree", args.output_tree)):
    if value:
      error(f"PATH arguments are converted in place; give no {flag}.")
  members, seen = [], set()
  for path in args.paths:
    if path == STDIO:
      error("- (standard input) goes with --infile, not among PATH "
            "arguments.")
    if os.path.isdir(path):
      error(f"{path!r} is a folder: give it as --intree {path!r}.")
    if not os.path.isfile(path):
      error(f"no such file: {path!r}.")
    if args.inplace and os.path.islink(path):
      error(f"{path!r} is a symbolic link (to {os.readlink(path)!r}); "
            "--inplace never writes through a link: give the file it "
            "points to.")
    if os.path.abspath(path) not in seen:
      seen.add(os.path.abspath(path))
      members.append(files.Member(path, path, _kind(path)))
  return _Job(members, {}, None, not dry, True, [], dry=dry)


def _stdin_job(args, error) -> _Job:
  """`--infile -`: standard input converted to standard output."""
  if args.inplace:
    error("--infile - (standard input) cannot be converted in place: it "
          "is written to standard output.")
  if args.output_file not in (None, STDIO):
    error(f"--infile - writes to standard output; give no --outfile "
          f"(received {args.output_file!r}).")
  dry = args.check or args.diff
  member = files.Member(STDIN_NAME, STDIN_NAME, files.PYTHON)
  return _Job([member], {} if dry else {STDIN_NAME: STDIO}, None, False,
              True, [], dry=dry, stdin=True)


def _kind(path: str) -> str:
  """`NOTEBOOK` for a `.ipynb` file, else `files.PYTHON`."""
  return NOTEBOOK if path.endswith(".ipynb") else files.PYTHON


def _check_writable(flag: str, path: str, error) -> None:
  why = files.unwritable(path)
  if why is not None:
    error(f"{flag} {path!r} cannot be written: {why}.")


def _with_deep_stack(function):
  """Returns `function()`, run in a thread with room for deep recursion.

  Raises what `function` raises. Where no such thread can be made, it runs
  here, with Python's limit.
  """
  outcome = {}

  def run():
    try:
      outcome["value"] = function()
    except BaseException as e:  # pylint: disable=broad-except
      outcome["error"] = e

  old_limit, old_stack = sys.getrecursionlimit(), threading.stack_size()
  started = False
  try:
    threading.stack_size(_STACK_BYTES)
    sys.setrecursionlimit(max(old_limit, _RECURSION_LIMIT))
    thread = threading.Thread(target=run, name="mplso-upgrade", daemon=True)
    thread.start()
    started = True
    thread.join()
  except (ValueError, RuntimeError):  # No stack of that size here.
    pass
  finally:
    sys.setrecursionlimit(old_limit)
    threading.stack_size(old_stack)
  if not started:
    run()  # With Python's own limit, which this thread's stack holds.
  if "error" in outcome:
    raise outcome["error"]
  return outcome["value"]


def _failure(text: str, e: BaseException) -> edits_lib.Upgraded:
  return _failed(text, type(e).__name__, str(e))


def _failed(text: str, kind: str, message: str) -> edits_lib.Upgraded:
  """The result of a file whose conversion raised `kind` with `message`."""
  return edits_lib.Upgraded(
      text, [], error=f"could not be converted: {kind}: {message}")


def _convert(texts: dict[str, str], to: str, keras: str, processes: int = 1
             ) -> dict[str, edits_lib.Upgraded]:
  """`rewrite.upgrade_sources` on every file, one failure reported alone.

  When the call on the whole set raises, each file is tried alone to find
  the ones that raise; the rest are then converted together again (what one
  file shows may decide for another), the failures reported. With several
  `processes`, files are converted in that many (`jobs`), with the same
  results.
  """
  from mplso._src.upgrade import rewrite  # pylint: disable=g-import-not-at-top
  if processes > 1 and len(texts) > 1:
    from mplso._src.upgrade import jobs  # pylint: disable=g-import-not-at-top
    return jobs.upgrade_in_processes(texts, to, keras, processes,
                                     _with_deep_stack, _failed)

  def upgrade(subset):
    return _with_deep_stack(
        lambda: rewrite.upgrade_sources(subset, to=to, keras=keras))

  try:
    return upgrade(texts)
  except Exception:  # pylint: disable=broad-except
    pass
  alone, failed = {}, {}
  for path, text in texts.items():
    try:
      alone.update(upgrade({path: text}))
    except Exception as e:  # pylint: disable=broad-except
      failed[path] = _failure(text, e)
  rest = {path: text for path, text in texts.items() if path not in failed}
  try:
    together = upgrade(rest) if failed and rest else alone
  except Exception:  # pylint: disable=broad-except
    together = alone
  return {path: failed.get(path) or together[path] for path in texts}


def _python_line(text: str) -> int | None:
  """The line Python names for `text`'s syntax error, or None."""
  try:
    compile(text, "<upgrade>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
  except SyntaxError as e:
    return e.lineno
  except (ValueError, RecursionError, MemoryError):
    return None
  return None


@dataclasses.dataclass(frozen=True)
class _NotebookSource:
  """A notebook file as read: its bytes and mode, and what they hold."""
  data: bytes
  mode: int
  notebook: notebooks.Notebook


def _read_notebook(path: str) -> _NotebookSource:
  """Reads a notebook file.

  Raises:
    OSError: it cannot be read.
    notebooks.NotebookError: it is not an nbformat 4 notebook.
  """
  with open(path, "rb") as f:
    mode = stat.S_IMODE(os.fstat(f.fileno()).st_mode)
    data = f.read()
  return _NotebookSource(data, mode, notebooks.read(data))


def _not_read(problem: Exception) -> str:
  """The report's words for a file that could not be read."""
  why = (str(problem) if isinstance(problem, OSError) else
         f"{type(problem).__name__}: {problem}")
  return f"could not be read: {why}; nothing written"


def _text(source) -> str:
  """The Python text to convert of a file (or a notebook's cells) read."""
  if isinstance(source, _NotebookSource):
    return source.notebook.python
  return source.text


class _Run:
  """Writes every output of a job; gathers its report and its errors."""

  def __init__(self, job: _Job, to: str, keras: str, stdin: bytes = b"",
               processes: int = 1):
    self.job, self.to, self.keras = job, to, keras
    self.processes = processes
    self.stdin = stdin  # What standard input held (`job.stdin`).
    self.sections: list[str] = []
    self.other_lines: list[str] = []
    self.errors: list[str] = []  # The report's ERROR lines, in order.
    self.failed: list[str] = []  # The files they name, once each.
    self.python = self.notebooks = self.changed = self.installs = 0
    self.cells: dict[str, report_lib.Cells] = {}  # Of each notebook read.
    self.would_change: list[str] = []  # Files whose output differs.
    self.diffs: list[str] = []  # Their unified diffs (`job.dry`).
    self.warnings: list[str] = []  # The report's WARNING lines.
    self.warned: list[str] = []  # The files they name, once each.
    self.entries: list[json_report.FileEntry] = []  # The JSON report's.

  def error(self, path: str, text: str) -> str:
    """Notes an ERROR line of the report, `text`, about `path`."""
    self.errors.append(text)
    if path not in self.failed:
      self.failed.append(path)
    return text

  def warn(self, path: str, text: str) -> str:
    """Notes a WARNING line of the report, `text`, about `path`."""
    self.warnings.append(text)
    if path not in self.warned:
      self.warned.append(path)
    return text

  def _put(self, path: str, output: str, old: bytes | None,
           new: bytes | None, mode: int, encoding: str) -> None:
    """Writes one file's output, or notes the change (`job.dry`).

    Args:
      path: the file read.
      output: where its output goes (`path` in place; `STDIO`).
      old: its bytes, or None where they could not be decoded.
      new: the converted bytes, or None to keep `old` as they are.
      mode: the permission bits of the output.
      encoding: how to read `old` and `new` as text (for a diff).
    """
    if new is not None and new != old:
      self.would_change.append(path)
      if self.job.dry:
        self.diffs.append(unified_diff(path, old.decode(encoding),
                                       new.decode(encoding)))
    elif new is not None:
      new = None
    if self.job.dry:
      return
    if output == STDIO:
      _write_stdout(new if new is not None else self.stdin)
    elif new is not None:
      files.write(output, new, mode)
    elif output != path:
      files.copy(path, output)  # Byte for byte.

  def _entry(self, path: str, output: str, kind: str, notes: list[dict]
             ) -> None:
    """Adds one file's entry of the JSON report."""
    outcome = (json_report.ERROR if path in self.failed else
               json_report.CHANGED if path in self.would_change else
               json_report.UNCHANGED)
    self.entries.append(json_report.FileEntry(
        path, None if self.job.dry else output, kind, outcome, notes))

  def _read(self, member: files.Member):
    """Reads a member: a `files.Source` or a `_NotebookSource`, or None."""
    if self.job.stdin:
      text, encoding = files.decode(self.stdin)
      return files.Source(self.stdin, text, encoding, 0o644)
    if member.kind == files.PYTHON:
      return files.read(member.path)
    if member.kind == NOTEBOOK:
      return _read_notebook(member.path)
    return None

  def run(self) -> None:
    """Reads, converts and writes every member; notes every problem."""
    for folder, why in self.job.problems:
      self.other_lines.append(self.error(folder, report_lib.note_line(
          folder, None, "ERROR", f"could not be listed ({why}); nothing "
          "under it was converted or copied")))
    sources, unreadable = {}, {}
    for member in self.job.members:
      try:
        source = self._read(member)
        if source is not None:
          sources[member.path] = source
      except Exception as e:  # pylint: disable=broad-except
        unreadable[member.path] = e  # OSError, DecodeError, ...
    # Every file and notebook is converted with the others: what one shows
    # may decide for another.
    texts = {path: _text(source) for path, source in sources.items()}
    results = (_convert(texts, self.to, self.keras, self.processes)
               if texts else {})
    for member in self.job.members:
      output = self.job.outputs.get(member.path, member.path)
      try:
        if member.kind == files.PYTHON:
          self._python(member.path, output, sources.get(member.path),
                       results.get(member.path), unreadable.get(member.path))
        elif member.kind == NOTEBOOK:
          self._notebook(member.path, output, sources.get(member.path),
                         results.get(member.path),
                         unreadable.get(member.path))
        elif member.kind == files.LINK:
          self._link(member, output)
        else:
          self._other(member, output)
      except Exception as e:  # pylint: disable=broad-except
        # A bug of this module's: the file is named, the others go on.
        self.other_lines.append(self.error(member.path, report_lib.note_line(
            member.path, None, "ERROR",
            f"could not be handled: {type(e).__name__}: {e}")))

  def _python(self, path, output, source, result, problem) -> None:
    """Writes one Python file's output; adds its report section."""
    self.python += 1
    line, problems = None, []
    if isinstance(problem, files.DecodeError):
      result = edits_lib.Upgraded("", [], error=f"does not decode: {problem}")
      line = problem.line
    elif problem is not None:
      problems.append(_not_read(problem))
      result = None
    elif result.error is not None:
      line = _python_line(source.text)
    else:
      self.changed += result.changed
      self.installs += result.installs
    notes = []
    if result is not None:
      try:
        new = (source.encode(result.code)
               if result.error is None and result.code != source.text
               else None)
        self._put(path, output, source and source.data, new,
                  source.mode if source else 0o644,
                  source.encoding if source else "utf-8")
      except (OSError, UnicodeError) as e:
        problems.append(f"could not be written to {output!r}: {e}; nothing "
                        "written")
      if result.error is not None:
        self.error(path, report_lib.not_converted_line(path, line,
                                                       result.error))
        notes.append(json_report.note_entry("ERROR", result.error, line))
      for edit in result.edits:
        notes.append(json_report.edit_entry(path, edit))
        if json_report.needs_a_person(edit):
          self.warn(path, report_lib.edit_line(path, edit))
    notes += [json_report.note_entry("ERROR", p) for p in problems]
    problems = [self.error(path, report_lib.note_line(path, None, "ERROR", p))
                for p in problems]
    self.sections.append(report_lib.file_section(
        path, output, result, line, tuple(problems)))
    self._entry(path, output, files.PYTHON, notes)

  def _notebook(self, path, output, source, result, problem) -> None:
    """Writes one notebook's output; adds its report section.

    A notebook that is not nbformat 4 JSON is copied unchanged with its
    ERROR line, as a Python file that does not parse; a cell that does not
    parse is left as it is with its ERROR line, and the others converted.
    """
    self.notebooks += 1
    line, problems, cells = None, [], None
    if isinstance(problem, notebooks.NotebookError):
      result = edits_lib.Upgraded("", [], error=str(problem))
      line = problem.line
    elif problem is not None:
      problems.append(_not_read(problem))
      result = None
    notebook = source.notebook if source is not None else None
    data = None
    if notebook is not None:
      result = result or edits_lib.Upgraded(notebook.python, [])
      changed = {}
      if result.error is None:
        try:
          changed = notebook.split(result.code)
          data = notebook.encode(changed)
        except ValueError as e:
          result = edits_lib.Upgraded(notebook.python, [], error=str(e))
      cells = self.cells[path] = notebook.cells(changed)
      if result.error is not None:
        line = _python_line(notebook.python)
      else:
        self.changed += result.changed
        self.installs += result.installs
    entries = []
    if result is not None:
      try:
        self._put(path, output, source and source.data, data,
                  source.mode if source else 0o644, "utf-8")
      except (OSError, UnicodeError) as e:
        problems.append(f"could not be written to {output!r}: {e}; nothing "
                        "written")
      if result.error is not None:
        self.error(path, report_lib.not_converted_line(
            path, line, result.error, cells))
        at, cell = line, None  # A line of the file: not nbformat 4 JSON.
        if cells is not None:
          found = cells.where(line) if line else None
          at, cell = found[1] if found else None, found and found[0]
        entries.append(json_report.note_entry(
            "ERROR", report_lib.in_cells(result.error, path, cells), at,
            cell))
      for edit in result.edits:
        entries.append(json_report.edit_entry(path, edit, cells))
        if json_report.needs_a_person(edit):
          self.warn(path, report_lib.edit_line(path, edit, cells))
    lines = [self.error(path, report_lib.note_line(path, None, "ERROR", p))
             for p in problems]
    if notebook is not None:
      notes = [report_lib.cell_line(path, note.cell, note.line,
                                    note.severity, note.message)
               for note in notebook.notes]
      for note, text in zip(notebook.notes, notes):
        if note.severity == notebooks.ERROR:
          self.error(path, text)
        elif note.severity == notebooks.WARNING:
          self.warn(path, text)
        entries.append(json_report.note_entry(
            note.severity, note.message, note.line, note.cell))
      lines = notes + lines
    entries += [json_report.note_entry("ERROR", p) for p in problems]
    self.sections.append(report_lib.file_section(
        path, output, result, line, tuple(lines), cells))
    self._entry(path, output, NOTEBOOK, entries)

  def _other(self, member: files.Member, output: str) -> None:
    """Copies a file that is not Python, if asked; names a special one."""
    if member.kind == files.SPECIAL:
      self.other_lines.append(self.warn(member.path, report_lib.note_line(
          member.path, None, "WARNING", "is not a regular file (a pipe, "
          "socket or device): neither read nor copied")))
    elif output != member.path and self.job.copy_other_files:
      try:
        files.copy(member.path, output)
      except OSError as e:
        self.other_lines.append(self.error(member.path, report_lib.note_line(
            member.path, None, "ERROR",
            f"could not be copied to {output!r}: {e}")))

  def _link(self, member: files.Member, output: str) -> None:
    """Mirrors a link as a link; names one that dangles or leaves the tree.

    A link is never written through: with --inplace it is left alone, and
    what it points to is converted as itself when it lies in the tree.
    """
    path, tree = member.path, self.job.tree
    folder = os.path.isdir(path)
    in_place = self.job.inplace or self.job.dry  # Nothing made.
    mirror = not in_place and (
        member.relative.endswith(_SUFFIXES) or folder or
        self.job.copy_other_files)
    if mirror:
      try:
        files.link(member.link, output)
      except OSError as e:
        self.other_lines.append(self.error(path, report_lib.note_line(
            path, None, "ERROR", f"could not be made a link at {output!r}: "
            f"{e}")))
        return
    what = ("mirrored as a link" if mirror else
            "left alone" if in_place else
            "not mirrored (--copyotherfiles False)")
    head = f"is a symbolic link to {member.link!r}"
    if not os.path.exists(path):
      self.other_lines.append(self.warn(path, report_lib.note_line(
          path, None, "WARNING", f"{head}, which does not exist: {what}")))
    elif not files.inside(path, tree):
      kind = "folder" if folder else "file"
      self.other_lines.append(report_lib.note_line(
          path, None, "INFO", f"{head}: {what}; the {kind} it points to lies "
          "outside --intree: not converted"))
    elif member.relative.endswith(_SUFFIXES) and not folder:
      target = os.path.relpath(os.path.realpath(path),
                               os.path.realpath(tree))
      self.other_lines.append(report_lib.note_line(
          path, None, "INFO", f"{head}: {what}; the file it points to, "
          f"{target!r} in --intree, is handled as itself"))

  def report(self) -> str:
    """The report's text."""
    sections = "".join(self.sections)
    for path, cells in self.cells.items():
      # Where a reason in another file's section names a notebook's line.
      sections = report_lib.places_in_cells(sections, path, cells)
    return (report_lib.header(self.to, self.keras, self.python, self.changed,
                              len(self.failed), self.installs,
                              self.notebooks, len(self.warned)) +
            sections + report_lib.other_section(self.other_lines))

  def json_text(self) -> str:
    """The JSON report's text."""
    return json_report.dumps(self.to, self.keras, self.entries,
                             self.other_lines)

  def status(self) -> int:
    """The exit status (`job.dry`: of --check and --diff)."""
    if not self.job.dry:
      return FAILED if self.failed else OK
    if self.failed or self.warned:
      return NEEDS_A_PERSON
    return WOULD_CHANGE if self.would_change else OK

  def check_line(self, report_file: str | None) -> str:
    """What --check and --diff print last: what would change, what not."""
    line = (f"Checked {report_lib.processed(self.python, self.notebooks)[10:]}"
            f": {len(self.would_change)} would change, {len(self.failed)} "
            f"with an ERROR line, {len(self.warned)} with a WARNING line; "
            "nothing written.")
    return line + (f" Report: {report_file}" if report_file else "")

  def last_line(self, report_file: str | None) -> str:
    """What the run prints last: the counts, and the files with errors."""
    counts = (f"{report_lib.processed(self.python, self.notebooks)}: "
              f"{self.changed} changed")
    if self.warned:
      # What a person must look at, beside what was done.
      counts += (f", {len(self.warned)} with a WARNING line (the report "
                 "says what to look at)")
    tail = f" Report: {report_file}" if report_file else ""
    if not self.failed:
      return f"{counts}, no errors.{tail}"
    named = ", ".join(self.failed[:_NAMED_ON_THE_LAST_LINE])
    more = len(self.failed) - _NAMED_ON_THE_LAST_LINE
    if more > 0:
      named += f" and {more} more"
    return (f"{counts}; ERROR in {len(self.failed)} "
            f"file{'s' if len(self.failed) > 1 else ''} (not converted or "
            f"not written): {named}.{tail}")


def unified_diff(path: str, old: str, new: str) -> str:
  """A unified diff of `old` to `new`, both named `path`, as `diff -u`."""
  lines = []
  for line in difflib.unified_diff(old.splitlines(keepends=True),
                                   new.splitlines(keepends=True),
                                   fromfile=path, tofile=path):
    lines.append(line)
    if not line.endswith(("\n", "\r")):
      lines.append("\n\\ No newline at end of file\n")
  return "".join(lines)


def _write_stdout(data: bytes) -> None:
  """Writes bytes to standard output as they are."""
  sys.stdout.flush()
  buffer = getattr(sys.stdout, "buffer", None)
  if buffer is not None:
    buffer.write(data)
    buffer.flush()
  else:  # A text stream in place of stdout (a test's).
    sys.stdout.write(data.decode("utf-8", "surrogateescape"))


def _read_stdin() -> bytes:
  buffer = getattr(sys.stdin, "buffer", None)
  return buffer.read() if buffer is not None else sys.stdin.read().encode()


def main(argv: list[str] | None = None) -> int:
  """Runs the command line; returns the exit status (see `DESCRIPTION`)."""
  p = parser()
  args = p.parse_args(argv)
  job = _job(args, p.error)
  report_file = args.report_filename
  # Only what is asked is written: a default report only for tf_upgrade_v2's
  # --infile and --intree runs that write files (not for a pre-commit hook).
  quiet = job.dry or job.stdin or bool(args.paths)
  if report_file is None and not quiet:
    report_file = _DEFAULT_REPORT
  touched = {os.path.abspath(path) for path in [
      *job.outputs.values(),
      *(m.path for m in job.members if m.kind in _CONVERTED)]
             if path not in (STDIO, STDIN_NAME) or not job.stdin}
  for flag, name in (("--reportfile", report_file),
                     ("--json-report", args.json_report)):
    if name is None:
      continue
    if os.path.abspath(name) in touched:
      p.error(f"{flag} {name!r} is a file the upgrade reads or writes: "
              "give another.")
    _check_writable(flag, name, p.error)
  if (report_file is not None and args.json_report is not None and
      os.path.abspath(report_file) == os.path.abspath(args.json_report)):
    p.error(f"--reportfile and --json-report are both {report_file!r}: "
            "give two files.")
  run = _Run(job, args.to, keras_at_run_time(),
             _read_stdin() if job.stdin else b"",
             processes=args.jobs or os.cpu_count() or 1)
  run.run()
  status = run.status()
  for name, text in ((report_file, run.report),
                     (args.json_report, run.json_text)):
    if name is None:
      continue
    try:
      files.write(name, text().encode("utf-8"), files.new_file_mode(name))
    except OSError as e:
      print(f"ERROR: the report could not be written to {name!r}: {e}",
            file=sys.stderr)
      status = NEEDS_A_PERSON if job.dry else FAILED
  if args.diff:
    sys.stdout.write("".join(run.diffs))
    sys.stdout.flush()
  for line in run.errors:
    print(line, file=sys.stderr)
  if job.dry:
    for line in run.warnings:
      print(line, file=sys.stderr)
    if args.check:
      for path in run.would_change:
        print(f"would change: {path}", file=sys.stderr)
    print(run.check_line(report_file), file=sys.stderr)
  else:
    print(run.last_line(report_file),
          file=sys.stderr if job.stdin else sys.stdout)
  return status
