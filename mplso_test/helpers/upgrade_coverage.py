"""The upgrade's coverage table: each spelling, reached each way, and its fate.

Rows are the spellings `python -m mplso.compat --list` prints; columns the
ways real code reached them. Each cell is what `python -m mplso.upgrade`
does there: "rewritten" (to the row's mplso name), "warned" (a `WARNING`
line at the use), or "TF 2.21 API" (a chain that ends as TF 2.21's own
`keras.mixed_precision` name, through what the tool cannot resolve). A use
that gets neither raises `SilentMiss`: the table exists only when nothing
passes unreported.

Each column is one synthesized file holding every row (one line each), so
the whole table costs a few runs of the tool, not one per cell.

    python -m mplso_test.helpers.upgrade_coverage           # print it
    python -m mplso_test.helpers.upgrade_coverage --write   # into the docs
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from mplso._src.compat import spellings as compat_spellings
from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import names
from mplso._src.upgrade import rewrite

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "upgrade.md")
BEGIN, END = "<!-- coverage:begin -->\n", "<!-- coverage:end -->\n"

REWRITTEN, WARNED, TODAY = "rewritten", "warned", "TF 2.21 API"


class SilentMiss(AssertionError):
  """A use of a legacy spelling that the upgrade neither rewrote nor warned."""


def _module(namespace: str) -> str:
  """`tf.a.b` -> `tensorflow.a.b`."""
  return "tensorflow" + namespace[len("tf"):]


def _private(row) -> str | None:
  """The private member that held the row's object, as a module path."""
  member = row.name.rpartition(".")[2]
  candidates = [path for path, public in names.PRIVATE.items()
                if public == row.name] or [
                    path for path, public in names.PRIVATE.items()
                    if names.TARGETS[public] == row.target and
                    public.rpartition(".")[2] == member]
  if not candidates:
    return None
  path = candidates[0]
  return _module(path) if path.startswith("tf.") else path


def _two_ways(name: str) -> str:
  """How code bound to both `tf.compat.v1` and `tf` spells `name`."""
  if name.startswith("tf.compat.v1."):
    return "tf." + name[len("tf.compat.v1."):]
  return name


def _files(rows) -> dict[str, list[tuple[str, dict[int, int]]]]:
  """{column: [(file text, {line: row index})]}, one file or more each."""
  files = {}
  header = "import tensorflow as tf\n"

  def one(column, head, lines):
    text = head + "".join(line + "\n" for _, line in lines)
    first = head.count("\n") + 1
    files.setdefault(column, []).append(
        (text, {first + k: index for k, (index, _) in enumerate(lines)}))

  one("`tf.` chain", header,
      [(i, f"x{i} = {row.name}") for i, row in enumerate(rows)])
  one("`from` import", "",
      [(i, f"from {_module(row.name.rpartition('.')[0])} import "
        f"{row.name.rpartition('.')[2]} as x{i}") for i, row in
       enumerate(rows)])
  by_namespace: dict[str, list[int]] = {}
  for i, row in enumerate(rows):
    by_namespace.setdefault(row.name.rpartition(".")[0], []).append(i)
  for namespace, indexes in by_namespace.items():
    # The uses are the cells; the star import itself is on line 1.
    one("star import", f"from {_module(namespace)} import *\n",
        [(i, f"x{i} = {rows[i].name.rpartition('.')[2]}") for i in indexes])
  private = [(i, _private(row)) for i, row in enumerate(rows)]
  one("private module", "",
      [(i, f"from {path.rpartition('.')[0]} import "
        f"{path.rpartition('.')[2]} as x{i}") for i, path in private
       if path is not None])
  one("`getattr`", header,
      [(i, f"x{i} = getattr({row.name.rpartition('.')[0]}, "
        f"\"{row.name.rpartition('.')[2]}\")") for i, row in enumerate(rows)])
  one("bound two ways",
      "try:\n  import tensorflow.compat.v1 as tf\n"
      "except ImportError:\n  import tensorflow as tf\n",
      [(i, f"x{i} = {_two_ways(row.name)}") for i, row in enumerate(rows)])
  one("through a helper", "",
      [(i, f"x{i} = get_tf().{row.name[len('tf.'):]}")
       for i, row in enumerate(rows)])
  return files


def single_uses(rows=compat_spellings.SPELLINGS):
  """(column, file text) for each use of the coverage table, alone.

  The coverage files hold every spelling in every reach form (a `tf.`
  chain, a `from` import, a star import, a private module, `getattr`, ...);
  here each use keeps its file's header and nothing else.
  """
  for column, files in _files(rows).items():
    for text, lines_rows in files:
      lines = text.splitlines(keepends=True)
      head = "".join(lines[:min(lines_rows) - 1])
      for line in lines_rows:
        yield column, head + lines[line - 1]


def cell(row, edits: list[edits_lib.Edit], where: str) -> str:
  """What the edits at a row's use did; raises SilentMiss for nothing."""
  if any(e.kind == edits_lib.WARNED for e in edits):
    return WARNED
  module, _, member = row.target.rpartition(".")
  for edit in edits:
    if edit.changes and (
        edit.new == row.target or re.search(
            rf"\bfrom {re.escape(module)} import (\*|(.*, )?{member}\b)",
            edit.new)):
      return REWRITTEN
  if not edits and any(row.name.endswith(f"keras.mixed_precision.{m}")
                       for m in names.KERAS_TODAY):
    return TODAY
  raise SilentMiss(f"{row.name} ({where}): {edits!r}")


def cells(rows=compat_spellings.SPELLINGS) -> dict[str, list[str | None]]:
  """{column: [cell per row]} (None where a column has no such use)."""
  table = {}
  for column, files in _files(rows).items():
    table[column] = [None] * len(rows)
    for text, lines in files:
      result = rewrite.upgrade_source(text)
      star = column == "star import"
      for line, index in lines.items():
        found = [e for e in result.edits if e.line == line or (
            star and e.line == 1 and e.old != e.new)]
        table[column][index] = cell(rows[index], found,
                                     f"{column}: {text.splitlines()[line - 1]}")
  return table


def markdown(rows=compat_spellings.SPELLINGS) -> str:
  """The table, in Markdown."""
  table = cells(rows)
  columns = list(table)
  lines = ["| Spelling | " + " | ".join(columns) + " |",
           "| --- |" + " --- |" * len(columns)]
  for i, row in enumerate(rows):
    lines.append(f"| `{row.name}` | " + " | ".join(
        table[c][i] or "-" for c in columns) + " |")
  return "\n".join(lines) + "\n"


def in_doc(text: str) -> str:
  """The table the doc holds between its markers."""
  found = re.search(re.escape(BEGIN) + "(.*?)" + re.escape(END), text, re.S)
  if found is None:
    raise ValueError(f"{DOC} lacks the markers {BEGIN.strip()} and "
                     f"{END.strip()}; add them where the table goes.")
  return found.group(1)


def write(path: str = DOC) -> None:
  """Puts the table between the markers of `path`."""
  with open(path, encoding="utf-8") as f:
    text = f.read()
  old = in_doc(text)
  text = text.replace(BEGIN + old + END, BEGIN + markdown() + END)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--write", action="store_true",
                      help=f"rewrite the table in {DOC}")
  args = parser.parse_args(argv)
  if args.write:
    write()
  else:
    sys.stdout.write(markdown())
  return 0


if __name__ == "__main__":
  sys.exit(main())
