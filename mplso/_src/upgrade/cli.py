"""`python -m mplso.upgrade` / `mplso-upgrade`: tf_upgrade_v2's command line.

Imports no TensorFlow: the rewrite is a source-to-source edit. One file never
stops a run: each is converted, copied unchanged, or named in the report
with an `ERROR` line, and the report is always written.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import stat
import sys
import threading

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import files
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

Exit status: 0 when every file was converted or copied; 1 when one could
not be (it does not parse or decode, a notebook is not nbformat 4 JSON or
one of its cells does not parse, or reading or writing it failed): the
report's ERROR lines and the last line printed name it; 2 for a command line
that cannot run, before anything is written. See docs/upgrade.md.
"""

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
  p.add_argument("--infile", dest="input_file",
                 help="the Python file (or .ipynb notebook) to convert")
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
                 help="convert --infile or --intree in place")
  p.add_argument("--reportfile", dest="report_filename",
                 default="report.txt",
                 help="where to write the report (default report.txt)")
  p.add_argument("--to", choices=(edits_lib.MPLSO, edits_lib.NATIVE),
                 default=edits_lib.MPLSO,
                 help="whose names to use (default mplso)")
  return p


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


def _job(args, error) -> _Job:
  """Checks the command line and lists what it converts; writes nothing."""
  if args.input_file and args.input_tree:
    error("give --infile or --intree, not both.")
  if args.input_file:
    return _file_job(args, error)
  if args.input_tree:
    return _tree_job(args, error)
  error("give --infile FILE --outfile FILE, --intree DIR --outtree DIR, or "
        "either input with --inplace.")
  raise AssertionError("unreachable")  # `error` exits.


def _file_job(args, error) -> _Job:
  if args.output_tree:
    error("--outtree goes with --intree; for one file give --outfile.")
  if not os.path.isfile(args.input_file):
    error(f"no such file: --infile {args.input_file!r}.")
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
  member = files.Member(args.input_file, os.path.basename(args.input_file),
                        _kind(args.input_file))
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
  if not args.inplace:
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
  outputs = {} if args.inplace else {
      m.path: os.path.join(args.output_tree, m.relative) for m in members}
  return _Job(members, outputs, tree, args.inplace, args.copy_other_files,
              problems)


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
  return edits_lib.Upgraded(
      text, [], error=f"could not be converted: {type(e).__name__}: {e}")


def _convert(texts: dict[str, str], to: str, keras: str
             ) -> dict[str, edits_lib.Upgraded]:
  """`rewrite.upgrade_sources` on every file, one failure reported alone.

  When the call on the whole set raises, each file is tried alone to find
  the ones that raise; the rest are then converted together again (what one
  file shows may decide for another), the failures reported.
  """
  from mplso._src.upgrade import rewrite  # pylint: disable=g-import-not-at-top

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

  def __init__(self, job: _Job, to: str, keras: str):
    self.job, self.to, self.keras = job, to, keras
    self.sections: list[str] = []
    self.other_lines: list[str] = []
    self.errors: list[str] = []  # The report's ERROR lines, in order.
    self.failed: list[str] = []  # The files they name, once each.
    self.python = self.notebooks = self.changed = self.installs = 0
    self.cells: dict[str, report_lib.Cells] = {}  # Of each notebook read.

  def error(self, path: str, text: str) -> str:
    """Notes an ERROR line of the report, `text`, about `path`."""
    self.errors.append(text)
    if path not in self.failed:
      self.failed.append(path)
    return text

  def run(self) -> None:
    """Reads, converts and writes every member; notes every problem."""
    for folder, why in self.job.problems:
      self.other_lines.append(self.error(folder, report_lib.note_line(
          folder, None, "ERROR", f"could not be listed ({why}); nothing "
          "under it was converted or copied")))
    sources, unreadable = {}, {}
    for member in self.job.members:
      try:
        if member.kind == files.PYTHON:
          sources[member.path] = files.read(member.path)
        elif member.kind == NOTEBOOK:
          sources[member.path] = _read_notebook(member.path)
      except Exception as e:  # pylint: disable=broad-except
        unreadable[member.path] = e  # OSError, DecodeError, ...
    # Every file and notebook is converted with the others: what one shows
    # may decide for another.
    texts = {path: _text(source) for path, source in sources.items()}
    results = _convert(texts, self.to, self.keras) if texts else {}
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
    if result is not None:
      try:
        if result.error is None and result.code != source.text:
          files.write(output, source.encode(result.code), source.mode)
        elif output != path:
          files.copy(path, output)  # Byte for byte.
      except (OSError, UnicodeError) as e:
        problems.append(f"could not be written to {output!r}: {e}; nothing "
                        "written")
      if result.error is not None:
        self.error(path, report_lib.not_converted_line(path, line,
                                                       result.error))
    problems = [self.error(path, report_lib.note_line(path, None, "ERROR", p))
                for p in problems]
    self.sections.append(report_lib.file_section(
        path, output, result, line, tuple(problems)))

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
    if result is not None:
      try:
        if data is not None and data != source.data:
          files.write(output, data, source.mode)
        elif output != path:
          files.copy(path, output)  # Byte for byte.
      except (OSError, UnicodeError) as e:
        problems.append(f"could not be written to {output!r}: {e}; nothing "
                        "written")
      if result.error is not None:
        self.error(path, report_lib.not_converted_line(
            path, line, result.error, cells))
    lines = [self.error(path, report_lib.note_line(path, None, "ERROR", p))
             for p in problems]
    if notebook is not None:
      notes = [report_lib.cell_line(path, note.cell, note.line,
                                    note.severity, note.message)
               for note in notebook.notes]
      for note, text in zip(notebook.notes, notes):
        if note.severity == notebooks.ERROR:
          self.error(path, text)
      lines = notes + lines
    self.sections.append(report_lib.file_section(
        path, output, result, line, tuple(lines), cells))

  def _other(self, member: files.Member, output: str) -> None:
    """Copies a file that is not Python, if asked; names a special one."""
    if member.kind == files.SPECIAL:
      self.other_lines.append(report_lib.note_line(
          member.path, None, "WARNING", "is not a regular file (a pipe, "
          "socket or device): neither read nor copied"))
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
    mirror = not self.job.inplace and (
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
            "left alone" if self.job.inplace else
            "not mirrored (--copyotherfiles False)")
    head = f"is a symbolic link to {member.link!r}"
    if not os.path.exists(path):
      self.other_lines.append(report_lib.note_line(
          path, None, "WARNING", f"{head}, which does not exist: {what}"))
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
                              self.notebooks) +
            sections + report_lib.other_section(self.other_lines))

  def last_line(self, report_file: str) -> str:
    """What the run prints last: the counts, and the files with errors."""
    counts = (f"{report_lib.processed(self.python, self.notebooks)}: "
              f"{self.changed} changed")
    if not self.failed:
      return f"{counts}, no errors. Report: {report_file}"
    named = ", ".join(self.failed[:_NAMED_ON_THE_LAST_LINE])
    more = len(self.failed) - _NAMED_ON_THE_LAST_LINE
    if more > 0:
      named += f" and {more} more"
    return (f"{counts}; ERROR in {len(self.failed)} "
            f"file{'s' if len(self.failed) > 1 else ''} (not converted or "
            f"not written): {named}. Report: {report_file}")


def main(argv: list[str] | None = None) -> int:
  """Runs the command line; returns the exit status (0, or 1 on an ERROR)."""
  p = parser()
  args = p.parse_args(argv)
  job = _job(args, p.error)
  report_file = args.report_filename
  touched = [*job.outputs.values(),
             *(m.path for m in job.members if m.kind in _CONVERTED)]
  if os.path.abspath(report_file) in {os.path.abspath(p) for p in touched}:
    p.error(f"--reportfile {report_file!r} is a file the upgrade reads or "
            "writes: give another.")
  _check_writable("--reportfile", report_file, p.error)
  run = _Run(job, args.to, keras_at_run_time())
  run.run()
  status = 1 if run.failed else 0
  try:
    files.write(report_file, run.report().encode("utf-8"),
                files.new_file_mode(report_file))
  except OSError as e:
    print(f"ERROR: the report could not be written to {report_file!r}: {e}",
          file=sys.stderr)
    status = 1
  for line in run.errors:
    print(line, file=sys.stderr)
  print(run.last_line(report_file))
  return status
