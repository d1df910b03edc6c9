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
  elif edit.old == edit.new:
    head = f"{where}: WARNING: Kept {edit.old!r}"
  else:
    kind = "INFO: Renamed" if not edit.why else "INFO: Changed"
    head = f"{where}: {kind} {edit.old!r} to {edit.new!r}"
  if edit.why:
    head += f"\n    {edit.why}"
  return head


def file_section(path: str, output: str, result: edits_lib.Upgraded) -> str:
  """The report's section for one file: where it went, then each edit.

  Args:
    path: the file read.
    output: the file written.
    result: what the upgrade did to it; a file that does not parse gets an
      `ERROR` line, one without edits a line that says so.
  """
  lines = [_RULE, f"Processing file {path!r}", f" outputting to {output!r}",
           _RULE]
  if result.error is not None:
    lines.append(f"{path}: ERROR: {result.error}; copied unchanged")
  elif not result.edits:
    lines.append(f"{path}: no legacy loss-scale names")
  lines += [edit_line(path, edit) for edit in result.edits]
  return "\n".join(lines) + "\n"


def header(to: str, keras: str, files: int, changed: int, errors: int,
           installs: int) -> str:
  """The report's first lines: whose names, and the counts of the run.

  Args:
    to: `edits.MPLSO` or `edits.NATIVE`.
    keras: the Keras `tf.keras` is when the program runs (for `NATIVE`).
    files: the Python files processed.
    changed: those the upgrade changed.
    errors: those that do not parse.
    installs: those it inserted `mplso.compat.install()` into.
  """
  target = ("mplso's names" if to == edits_lib.MPLSO else
            f"Keras's own names where the behaviour allows ({keras}), "
            "mplso's elsewhere")
  return "\n".join([
      "mplso.upgrade: legacy loss-scale code to " + target,
      _RULE,
      f"Processed {files} Python files: {changed} changed, {errors} that do "
      f"not parse (copied unchanged), {installs} with "
      "mplso.compat.install() inserted.",
      ""])
