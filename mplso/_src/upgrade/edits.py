"""What the upgrade did to one file: its edits, and the file's outcome."""

from __future__ import annotations

import dataclasses

MPLSO = "mplso"
NATIVE = "native"
KERAS_3 = "Keras 3"
TF_KERAS = "tf_keras"


@dataclasses.dataclass(frozen=True)
class Edit:
  """One change (or one kept name) at `line` of the original file.

  `why` is empty for a plain rename; otherwise it says why the edit was
  made and what changes in behaviour. `old == new` marks a name left as it
  was on purpose (with `why` saying why).
  """
  line: int
  old: str
  new: str
  why: str = ""
  # A name left as it was that is not a warning: it is right as written
  # (the report says what it means, as an `INFO` line).
  kept_as_written: bool = False


@dataclasses.dataclass
class Upgraded:
  """The new text of one file, its edits, and an error that stopped it."""
  code: str
  edits: list[Edit]
  error: str | None = None
  installs: bool = False  # Whether `mplso.compat.install()` was inserted.

  @property
  def changed(self) -> bool:
    return any(edit.old != edit.new for edit in self.edits)
