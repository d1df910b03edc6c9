"""What the upgrade did to one file: its edits, and the file's outcome."""

from __future__ import annotations

import dataclasses
import re

MPLSO = "mplso"
NATIVE = "native"
KERAS_3 = "Keras 3"
TF_KERAS = "tf_keras"

# An edit's kinds, and the text report's line for each.
RENAMED = "renamed"  # INFO: Renamed 'old' to 'new' (no reason needed).
CHANGED = "changed"  # INFO: Changed 'old' to 'new', with the reason.
ADDED = "added"  # INFO: Added 'new' (a line the file did not have).
MOVED = "moved"  # INFO: Changed 'old' to '(moved)': a line moved up.
KEPT = "kept"  # INFO: Kept 'old' as written: right as it is.
WARNED = "warned"  # WARNING: Kept 'old': a person must look.
KINDS = (RENAMED, CHANGED, ADDED, MOVED, KEPT, WARNED)
MOVED_NEW = "(moved)"  # The `new` of a `MOVED` edit.


@dataclasses.dataclass(frozen=True)
class Edit:
  """One change (or one name left as it was) at `line` of the original file.

  `line` is 0 for an edit without one (the added imports). `why` is empty
  for a plain rename; otherwise it says why the edit was made and what
  changes in behaviour. A `KEPT` or `WARNED` edit has `new == old`; an
  `ADDED` one has `old == ""`.
  """
  kind: str
  line: int
  old: str
  new: str
  why: str = ""

  def __post_init__(self):
    """Refuses a kind that is not one of `KINDS`."""
    if self.kind not in KINDS:
      raise ValueError(f"an edit's kind is one of {KINDS}, not "
                       f"{self.kind!r}")

  @property
  def changes(self) -> bool:
    """Whether the edit changes the file (not a name left as it was)."""
    return self.kind not in (KEPT, WARNED)


def renamed(line: int, old: str, new: str) -> Edit:
  """A plain rename: `old` became `new`, and no reason is needed."""
  return Edit(RENAMED, line, old, new)


def changed(line: int, old: str, new: str, why: str = "") -> Edit:
  """`old` became `new`, for the reason `why` (a rename without one)."""
  return Edit(CHANGED if why else RENAMED, line, old, new, why)


def added(new: str, why: str = "", line: int = 0) -> Edit:
  """A line the upgrade added: `new`, because of `why` (at `line`)."""
  return Edit(ADDED, line, "", new, why)


def moved(old: str, why: str) -> Edit:
  """The line `old` moved up, because of `why`."""
  return Edit(MOVED, 0, old, MOVED_NEW, why)


def kept(line: int, old: str, why: str) -> Edit:
  """`old` is right as written; `why` says what it means."""
  return Edit(KEPT, line, old, old, why)


def warned(line: int, old: str, why: str) -> Edit:
  """`old` stays as it was, and a person must look: `why` says why."""
  return Edit(WARNED, line, old, old, why)


# A comment that marks a `WARNED` line as looked at: its edit becomes
# `KEPT` (an INFO line), so that `--check` passes on it.
ACKNOWLEDGED = "mplso-upgrade: ok"
_ACKNOWLEDGED = re.compile(r"#.*\b" + re.escape(ACKNOWLEDGED) + r"\b")


def acknowledge(edits: list[Edit], text: str) -> list[Edit]:
  """`edits`, each `WARNED` one whose line of `text` has the comment `KEPT`.

  The comment (`# mplso-upgrade: ok`) is a person's word that the line was
  looked at: the report keeps the line and its reason, as INFO.
  """
  lines = text.splitlines()
  return [
      kept(e.line, e.old, f"acknowledged (`# {ACKNOWLEDGED}`): {e.why}")
      if e.kind == WARNED and 0 < e.line <= len(lines) and
      _ACKNOWLEDGED.search(lines[e.line - 1]) else e for e in edits]


@dataclasses.dataclass
class Upgraded:
  """The new text of one file, its edits, and an error that stopped it."""
  code: str
  edits: list[Edit]
  error: str | None = None
  installs: bool = False  # Whether `mplso.compat.install()` was inserted.

  @property
  def changed(self) -> bool:
    """Whether an edit changes the file."""
    return any(edit.changes for edit in self.edits)
