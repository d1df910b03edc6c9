"""The upgrade's machine-readable report (`--json-report FILE`).

Beside the text report: per file, its outcome (`changed`, `unchanged` or
`error`) and each edit as `{line, cell, kind, old, new, why}`. `line` is
the file's line (in a notebook, the line within cell `cell`), or null for
an edit without one (an added import); `cell` is null in a Python file.
"""

from __future__ import annotations

import dataclasses
import json

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import report as report_lib

VERSION = 1  # Of this layout; raised when a key changes meaning.

CHANGED = "changed"
UNCHANGED = "unchanged"
ERROR = "error"

# An edit's kinds, as the text report's lines say them: `edits`' own, but
# for a line moved up, which this layout calls `changed`.
RENAMED = edits_lib.RENAMED  # INFO: Renamed 'old' to 'new' (no reason).
EDITED = edits_lib.CHANGED  # INFO: Changed 'old' to 'new' (with a reason).
ADDED = edits_lib.ADDED  # INFO: Added 'new'.
KEPT = edits_lib.KEPT  # INFO: Kept 'old' as written (right as it is).
WARNED = edits_lib.WARNED  # WARNING: Kept 'old' (a person must look).
FAILED = "error"  # ERROR: the file or a cell was not converted.

_SEVERITY_KINDS = {"INFO": KEPT, "WARNING": WARNED, "ERROR": FAILED}


def edit_kind(edit: edits_lib.Edit) -> str:
  """The kind of one edit: `RENAMED`, `EDITED`, `ADDED`, `KEPT` or `WARNED`.

  The edit's own kind; a line moved up (`edits.MOVED`) is `EDITED`, as the
  text report's `Changed` line says it.
  """
  return EDITED if edit.kind == edits_lib.MOVED else edit.kind


def needs_a_person(edit: edits_lib.Edit) -> bool:
  """Whether the text report gives `edit` a `WARNING` line."""
  return edit.kind == edits_lib.WARNED


def _place(edit: edits_lib.Edit, cells: report_lib.Cells | None
           ) -> tuple[int | None, int | None]:
  """(line, cell) of an edit: the cell's line in a notebook."""
  if cells is None:
    return edit.line or None, None
  if edit.line:
    found = cells.where(edit.line)
    return (found[1], found[0]) if found else (None, None)
  added = (edit.old if edit.kind == edits_lib.MOVED else
           edit.new.split("; ")[0])
  return None, cells.added(added) if added else None


def edit_entry(path: str, edit: edits_lib.Edit,
               cells: report_lib.Cells | None = None) -> dict:
  """One edit as `{line, cell, kind, old, new, why}`."""
  line, cell = _place(edit, cells)
  return {"line": line, "cell": cell, "kind": edit_kind(edit),
          "old": edit.old, "new": edit.new,
          "why": report_lib.in_cells(edit.why, path, cells)}


def note_entry(severity: str, message: str, line: int | None = None,
               cell: int | None = None) -> dict:
  """A note (an error, a notebook cell's note) in an edit's layout."""
  return {"line": line or None, "cell": cell,
          "kind": _SEVERITY_KINDS[severity], "old": "", "new": "",
          "why": message}


@dataclasses.dataclass
class FileEntry:
  """What the JSON report says of one file."""
  path: str
  output: str | None  # None where nothing is written (--check, --diff).
  kind: str  # `files.PYTHON` or `cli.NOTEBOOK`.
  outcome: str  # CHANGED, UNCHANGED or ERROR.
  edits: list[dict]

  def to_json(self) -> dict:
    """The entry as a JSON object."""
    return dataclasses.asdict(self)


def dumps(to: str, keras: str, entries: list[FileEntry],
          other: list[str]) -> str:
  """The whole JSON report's text.

  Args:
    to: `edits.MPLSO` or `edits.NATIVE`.
    keras: the Keras `tf.keras` is when the program runs.
    entries: one per Python file or notebook, in the run's order.
    other: the text report's lines about links and other files.
  """
  return json.dumps({
      "version": VERSION, "to": to, "keras": keras,
      "files": [entry.to_json() for entry in entries],
      "other": other}, indent=2, ensure_ascii=False) + "\n"
