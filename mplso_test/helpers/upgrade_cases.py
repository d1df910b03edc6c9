"""`assert_upgrade(before, after, report=...)`: an upgrade case, whole file.

In the manner of LibCST's `assertCodemod` and pyupgrade's `(before, after)`
cases: the file before, the file after (both dedented), and, where given,
the report's line for each edit in order (with its reason, where asked), so
that a case fails on any byte of the file and on any edit missing, added or
changed.
"""

from __future__ import annotations

from collections.abc import Sequence
import contextlib
import difflib
import io
import textwrap

from mplso._src.upgrade import cli
from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import report as report_lib
from mplso._src.upgrade import rewrite

PATH = "a.py"  # The file, as the report lines name it by default.


def report_lines(result: edits_lib.Upgraded, path: str = PATH,
                 reasons: bool = False) -> list[str]:
  """The report's lines of each edit: its first, or all (with the reason)."""
  lines = []
  for edit in result.edits:
    text = report_lib.edit_line(path, edit).split("\n")
    lines += text if reasons else text[:1]
  return lines


def assert_upgrade(before: str, after: str,
                   report: Sequence[str] | None = None, *,
                   reasons: bool = False, path: str = PATH,
                   to: str = edits_lib.MPLSO,
                   keras: str = edits_lib.KERAS_3) -> edits_lib.Upgraded:
  """Asserts that upgrading `before` gives `after`, byte for byte.

  Args:
    before: the file's text (dedented here).
    after: the expected text (dedented here); `before` itself where nothing
      may change.
    report: where given, the expected first line of each edit's report line
      (`a.py:2: INFO: Renamed 'x' to 'y'`), in the report's order.
    reasons: whether `report` holds each edit's reason lines too (`    why`
      after its first line), as the text report writes them.
    path: the file, as the report lines name it.
    to: `edits.MPLSO` or `edits.NATIVE`.
    keras: the Keras `tf.keras` is when the program runs.

  Returns:
    What the upgrade did, for a test's further checks (a reason, `installs`).

  Raises:
    AssertionError: with a diff of the file, or the report lines.
  """
  before, after = textwrap.dedent(before), textwrap.dedent(after)
  result = rewrite.upgrade_source(before, to=to, keras=keras, path=path)
  if result.error is not None:
    raise AssertionError(f"the upgrade failed: {result.error}")
  if result.code != after:
    diff = "".join(difflib.unified_diff(
        after.splitlines(keepends=True), result.code.splitlines(keepends=True),
        "expected", "upgraded"))
    raise AssertionError(f"the upgraded file differs:\n{diff}")
  reported = report_lines(result, path, reasons)
  if report is not None and reported != list(report):
    diff = "\n".join(difflib.unified_diff(
        list(report), reported, "expected", "reported", lineterm=""))
    raise AssertionError(f"the report differs:\n{diff}")
  return result


def run_main(*args):
  """`cli.main(args)` in this process: (exit status, stdout, stderr)."""
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      status = cli.main(list(args))
    except SystemExit as e:
      status = e.code
  return status, out.getvalue(), err.getvalue()
