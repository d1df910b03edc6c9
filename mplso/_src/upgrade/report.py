"""The upgrade's report, in `tf_upgrade_v2`'s layout: per file, per edit.

A line names a place as `PATH:LINE`; in a notebook, whose code cells are
converted as one joined Python text, as `PATH:cell CELL:LINE`: the cell's
number from the top, counting every cell (markdown too) from 1, and the
line within the cell.
"""

from __future__ import annotations

import re
from typing import Protocol

from mplso._src.upgrade import edits as edits_lib

_RULE = "-" * 80
# How a reason or an error names a line of the text converted.
_LINE = re.compile(r"\bline (\d+)\b")


class Cells(Protocol):
  """Where the lines of a notebook's joined Python text lie in its cells."""

  def where(self, line: int) -> tuple[int, int] | None:
    """(cell number, line in the cell) of a joined line; None for none."""

  def added(self, text: str) -> int | None:
    """The cell given the new line `text` (stripped), or None."""


def location(path: str, line: int | None, cells: Cells | None = None) -> str:
  """`PATH:LINE`, `PATH:cell CELL:LINE` in a notebook, or `PATH` alone.

  Args:
    path: the file, as the report names it.
    line: a 1-based line of the text converted, or None (or 0) for none.
    cells: a notebook's cells, or None for a Python file.
  """
  if not line:
    return path
  if cells is None:
    return f"{path}:{line}"
  found = cells.where(line)
  return f"{path}:cell {found[0]}:{found[1]}" if found else path


def in_cells(text: str, path: str, cells: Cells | None) -> str:
  """`text` with each `line N` and `PATH:N` of the joined text in cells.

  A reason names lines of the text the rewrite saw; in a notebook that is
  the joined text of its cells: `line 12` becomes `line 3 of cell 5`, and
  `PATH:12` becomes `PATH:cell 5:3`.
  """
  if cells is None:
    return text

  def line(match: re.Match) -> str:
    found = cells.where(int(match.group(1)))
    return (f"line {found[1]} of cell {found[0]}" if found else
            match.group(0))

  return _LINE.sub(line, places_in_cells(text, path, cells))


def places_in_cells(text: str, path: str, cells: Cells) -> str:
  """`text` with each `PATH:N` of a notebook's joined text in its cells.

  Another file's reason may name a line of the notebook (`--to native`:
  where an optimizer is used): `PATH:12` becomes `PATH:cell 5:3`.
  """
  def place(match: re.Match) -> str:
    found = cells.where(int(match.group(1)))
    return f"{path}:cell {found[0]}:{found[1]}" if found else match.group(0)

  return re.sub(re.escape(path) + r":(\d+)\b", place, text)


def edit_line(path: str, edit: edits_lib.Edit,
              cells: Cells | None = None) -> str:
  """The report line of one edit, then its reason on a line of its own.

  `PATH:LINE: INFO: Renamed 'old' to 'new'` for a plain rename,
  `INFO: Changed` for an edit with a reason, `INFO: Added 'new'` for a
  line the upgrade added, `WARNING: Kept 'old'` for a name left as it was
  on purpose; `PATH:` alone where the edit has no line (an added import),
  `PATH:cell CELL:` in a notebook (the cell the import went to).

  Args:
    path: the file, as the report names it.
    edit: the edit.
    cells: a notebook's cells, or None for a Python file.
  """
  where = location(path, edit.line, cells)
  if not edit.line and cells is not None:
    added = (edit.old if edit.kind == edits_lib.MOVED else
             edit.new.split("; ")[0])
    cell = cells.added(added) if added else None
    where = f"{path}:cell {cell}" if cell else path
  if edit.kind == edits_lib.ADDED:
    head = f"{where}: INFO: Added {edit.new!r}"
  elif edit.kind == edits_lib.KEPT:
    head = f"{where}: INFO: Kept {edit.old!r} as written"
  elif edit.kind == edits_lib.WARNED:
    head = f"{where}: WARNING: Kept {edit.old!r}"
  else:
    kind = ("INFO: Renamed" if edit.kind == edits_lib.RENAMED else
            "INFO: Changed")
    head = f"{where}: {kind} {edit.old!r} to {edit.new!r}"
  if edit.why:
    head += f"\n    {in_cells(edit.why, path, cells)}"
  return head


def note_line(path: str, line: int | None, severity: str,
              message: str, cells: Cells | None = None) -> str:
  """`PATH:LINE: SEVERITY: message`; `PATH: SEVERITY: message` without a line.

  Args:
    path: the file, as the report names it.
    line: the 1-based line Python names (for an error), or None.
    severity: `INFO`, `WARNING` or `ERROR`.
    message: what happened, and what became of the file.
    cells: a notebook's cells (`line` is a line of their joined text), or
      None.
  """
  where = location(path, line, cells)
  return f"{where}: {severity}: {in_cells(message, path, cells)}"


def cell_line(path: str, cell: int, line: int | None, severity: str,
              message: str) -> str:
  """`PATH:cell CELL:LINE: SEVERITY: message`, about one notebook cell.

  Args:
    path: the notebook, as the report names it.
    cell: the cell's number, from 1 (markdown cells count).
    line: the 1-based line in the cell, or None.
    severity: `INFO`, `WARNING` or `ERROR`.
    message: what happened, and what became of the cell.
  """
  where = f"{path}:cell {cell}" + (f":{line}" if line else "")
  return f"{where}: {severity}: {message}"


def not_converted_line(path: str, line: int | None, error: str,
                       cells: Cells | None = None) -> str:
  """The `ERROR` line of a file copied unchanged: `error` says why."""
  return note_line(path, line, "ERROR", f"{error}; copied unchanged", cells)


def file_section(path: str, output: str,
                 result: edits_lib.Upgraded | None, line: int | None = None,
                 problems: tuple[str, ...] = (),
                 cells: Cells | None = None) -> str:
  """The report's section for one file: where it went, then each edit.

  Args:
    path: the file read.
    output: the file written.
    result: what the upgrade did to it (None: it could not be read); a
      file that does not parse gets an `ERROR` line, one without edits a
      line that says so.
    line: the line Python names for `result.error`, if any.
    problems: further lines, already formatted (`note_line`), such as an
      output that could not be written.
    cells: a notebook's cells (the lines of `result` are lines of their
      joined text), or None for a Python file.
  """
  lines = [_RULE, f"Processing file {path!r}", f" outputting to {output!r}",
           _RULE]
  if result is not None and result.error is not None:
    lines.append(not_converted_line(path, line, result.error, cells))
  elif result is not None and not result.edits:
    lines.append(f"{path}: no legacy loss-scale names")
  if result is not None:
    lines += [edit_line(path, edit, cells) for edit in result.edits]
  lines += problems
  return "\n".join(lines) + "\n"


def other_section(lines: list[str]) -> str:
  """The report's last section: links and other files it names, if any.

  Args:
    lines: one `note_line` per such file, in the tree's order.
  """
  if not lines:
    return ""
  return "\n".join([_RULE, "Links and other files", _RULE, *lines]) + "\n"


def processed(files: int, notebooks: int = 0) -> str:
  """`Processed N Python files` (`and M notebooks` when there are any)."""
  if not notebooks:
    return f"Processed {files} Python files"
  return (f"Processed {files} Python files and {notebooks} "
          f"notebook{'s' if notebooks != 1 else ''}")


def header(to: str, keras: str, files: int, changed: int, errors: int,
           installs: int, notebooks: int = 0, warned: int = 0) -> str:
  """The report's first lines: whose names, and the counts of the run.

  Args:
    to: `edits.MPLSO` or `edits.NATIVE`.
    keras: the Keras `tf.keras` is when the program runs (for `NATIVE`).
    files: the Python files processed.
    changed: those the upgrade changed (notebooks among them).
    errors: those with an `ERROR` line (not converted: copied unchanged,
      or not written).
    installs: those it inserted `mplso.compat.install()` into.
    notebooks: the notebooks processed.
    warned: the files with a `WARNING` line (a person must look).
  """
  target = ("mplso's names" if to == edits_lib.MPLSO else
            f"Keras's own names where the behaviour allows ({keras}), "
            "mplso's elsewhere")
  return "\n".join([
      "mplso.upgrade: legacy loss-scale code to " + target,
      _RULE,
      f"{processed(files, notebooks)}: {changed} changed, {errors} with an "
      f"ERROR line, {warned} with a WARNING line, {installs} with "
      "mplso.compat.install() inserted.",
      ""])
