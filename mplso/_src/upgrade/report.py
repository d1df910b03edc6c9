"""The upgrade's report, in `tf_upgrade_v2`'s layout: per file, per edit."""

from __future__ import annotations

from mplso._src.upgrade import edits as edits_lib

_RULE = "-" * 80


def edit_line(path: str, edit: edits_lib.Edit) -> str:
  """The report line of one edit, then its reason on a line of its own.

  `PATH:LINE: INFO: Renamed 'old' to 'new'` for a plain rename,
  `INFO: Changed` for an edit with a reason, `INFO: Added 'new'` for a
  line the upgrade added, `WARNING: Kept 'old'` for a name left as it was
  on purpose; `PATH:` alone where the edit has no line (an added import).

  Args:
    path: the file, as the report names it.
    edit: the edit.
  """
  where = f"{path}:{edit.line}" if edit.line else f"{path}"
  if not edit.old:
    head = f"{where}: INFO: Added {edit.new!r}"
  elif edit.kept_as_written:
    head = f"{where}: INFO: Kept {edit.old!r} as written"
  elif edit.old == edit.new:
    head = f"{where}: WARNING: Kept {edit.old!r}"
  else:
    kind = "INFO: Renamed" if not edit.why else "INFO: Changed"
    head = f"{where}: {kind} {edit.old!r} to {edit.new!r}"
  if edit.why:
    head += f"\n    {edit.why}"
  return head


def note_line(path: str, line: int | None, severity: str,
              message: str) -> str:
  """`PATH:LINE: SEVERITY: message`; `PATH: SEVERITY: message` without a line.

  Args:
    path: the file, as the report names it.
    line: the 1-based line Python names (for an error), or None.
    severity: `INFO`, `WARNING` or `ERROR`.
    message: what happened, and what became of the file.
  """
  where = f"{path}:{line}" if line else path
  return f"{where}: {severity}: {message}"


def not_converted_line(path: str, line: int | None, error: str) -> str:
  """The `ERROR` line of a file copied unchanged: `error` says why."""
  return note_line(path, line, "ERROR", f"{error}; copied unchanged")


def file_section(path: str, output: str,
                 result: edits_lib.Upgraded | None, line: int | None = None,
                 problems: tuple[str, ...] = ()) -> str:
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
  """
  lines = [_RULE, f"Processing file {path!r}", f" outputting to {output!r}",
           _RULE]
  if result is not None and result.error is not None:
    lines.append(not_converted_line(path, line, result.error))
  elif result is not None and not result.edits:
    lines.append(f"{path}: no legacy loss-scale names")
  if result is not None:
    lines += [edit_line(path, edit) for edit in result.edits]
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


def header(to: str, keras: str, files: int, changed: int, errors: int,
           installs: int) -> str:
  """The report's first lines: whose names, and the counts of the run.

  Args:
    to: `edits.MPLSO` or `edits.NATIVE`.
    keras: the Keras `tf.keras` is when the program runs (for `NATIVE`).
    files: the Python files processed.
    changed: those the upgrade changed.
    errors: those with an `ERROR` line (not converted: copied unchanged,
      or not written).
    installs: those it inserted `mplso.compat.install()` into.
  """
  target = ("mplso's names" if to == edits_lib.MPLSO else
            f"Keras's own names where the behaviour allows ({keras}), "
            "mplso's elsewhere")
  return "\n".join([
      "mplso.upgrade: legacy loss-scale code to " + target,
      _RULE,
      f"Processed {files} Python files: {changed} changed, {errors} with an "
      f"ERROR line, {installs} with "
      "mplso.compat.install() inserted.",
      ""])
