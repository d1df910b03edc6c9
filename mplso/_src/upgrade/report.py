"""The upgrade's report, in `tf_upgrade_v2`'s layout: per file, per edit."""

from __future__ import annotations

from mplso._src.upgrade import edits as edits_lib

_RULE = "-" * 80


def edit_line(path: str, edit: edits_lib.Edit) -> str:
  """`PATH:LINE: KIND: 'old' -> 'new'`, then why, for one edit."""
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
