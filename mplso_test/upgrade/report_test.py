"""Tests `report`: the upgrade's report, per file and per edit."""

from absl.testing import absltest
from absl.testing import parameterized

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import report

RULE = "-" * 80


class EditLineTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("renamed", edits_lib.renamed(3, "tf.train.experimental.LossScale",
                                    "mplso.LossScale"),
       "a.py:3: INFO: Renamed 'tf.train.experimental.LossScale' to "
       "'mplso.LossScale'"),
      ("changed_with_why", edits_lib.changed(4, "LSO(o, 8)", "LSO(o)",
                                             "why it changed"),
       "a.py:4: INFO: Changed 'LSO(o, 8)' to 'LSO(o)'\n    why it changed"),
      ("added_at_no_line", edits_lib.added("import mplso"),
       "a.py: INFO: Added 'import mplso'"),
      ("added_with_why", edits_lib.added("mplso.compat.install()",
                                         "line 5: w", line=5),
       "a.py:5: INFO: Added 'mplso.compat.install()'\n    line 5: w"),
      ("kept", edits_lib.warned(2, "tf.x", "kept: TF 2.21 lacks it"),
       "a.py:2: WARNING: Kept 'tf.x'\n    kept: TF 2.21 lacks it"),
      ("kept_as_written", edits_lib.kept(2, "tf.x", "right as it is"),
       "a.py:2: INFO: Kept 'tf.x' as written\n    right as it is"),
  )
  def test_edit_line(self, edit, expected):
    self.assertEqual(expected, report.edit_line("a.py", edit))


class FileSectionTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("edits", edits_lib.Upgraded("new", [edits_lib.added("import mplso"),
                                           edits_lib.renamed(3, "a", "b")]),
       ["a.py: INFO: Added 'import mplso'",
        "a.py:3: INFO: Renamed 'a' to 'b'"]),
      ("no_edits", edits_lib.Upgraded("same", []),
       ["a.py: no legacy loss-scale names"]),
      ("error", edits_lib.Upgraded("def f(:", [], error="does not parse"),
       ["a.py: ERROR: does not parse; copied unchanged"]),
  )
  def test_file_section(self, result, lines):
    self.assertEqual(
        "\n".join([RULE, "Processing file 'a.py'", " outputting to 'b.py'",
                   RULE, *lines]) + "\n",
        report.file_section("a.py", "b.py", result))

  @parameterized.named_parameters(
      ("error_at_a_line", edits_lib.Upgraded("x", [], error="bad"), 7, (),
       ["a.py:7: ERROR: bad; copied unchanged"]),
      ("not_read", None, None, ("a.py: ERROR: could not be read",),
       ["a.py: ERROR: could not be read"]),
      ("converted_not_written",
       edits_lib.Upgraded("x", [edits_lib.renamed(3, "a", "b")]),
       None, ("a.py: ERROR: not written",),
       ["a.py:3: INFO: Renamed 'a' to 'b'", "a.py: ERROR: not written"]),
  )
  def test_file_section_with_problems(self, result, line, problems, lines):
    self.assertEqual(
        "\n".join([RULE, "Processing file 'a.py'", " outputting to 'b.py'",
                   RULE, *lines]) + "\n",
        report.file_section("a.py", "b.py", result, line, problems))


class NoteTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("with_a_line", 4, "ERROR", "a.py:4: ERROR: why"),
      ("without", None, "WARNING", "a.py: WARNING: why"),
  )
  def test_note_line(self, line, severity, expected):
    self.assertEqual(expected, report.note_line("a.py", line, severity, "why"))

  def test_not_converted_line(self):
    self.assertEqual("a.py:2: ERROR: does not decode: x; copied unchanged",
                     report.not_converted_line("a.py", 2,
                                               "does not decode: x"))

  def test_other_section(self):
    self.assertEqual("", report.other_section([]))
    self.assertEqual(
        f"{RULE}\nLinks and other files\n{RULE}\nl: WARNING: w\n",
        report.other_section(["l: WARNING: w"]))


class Cells:
  """A notebook whose joined lines 1-3 are cell 2, lines 5-9 cell 4."""

  def where(self, line):
    if 1 <= line <= 3:
      return 2, line
    if 5 <= line <= 9:
      return 4, line - 4
    return None

  def added(self, text):
    return 4 if text == "import mplso" else None


class NotebookLinesTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("renamed", edits_lib.renamed(6, "a", "b"),
       "nb.ipynb:cell 4:2: INFO: Renamed 'a' to 'b'"),
      ("added_import", edits_lib.added("import mplso"),
       "nb.ipynb:cell 4: INFO: Added 'import mplso'"),
      ("added_elsewhere", edits_lib.added("import other"),
       "nb.ipynb: INFO: Added 'import other'"),
      ("moved", edits_lib.moved("import mplso", "moved up"),
       "nb.ipynb:cell 4: INFO: Changed 'import mplso' to '(moved)'\n"
       "    moved up"),
      ("why_names_lines", edits_lib.added(
          "mplso.compat.install()",
          "line 7: compile; the policy at line 3, nb.ipynb:9 and other.py:9; "
          "line 4", line=2),
       "nb.ipynb:cell 2:2: INFO: Added 'mplso.compat.install()'\n"
       "    line 3 of cell 4: compile; the policy at line 3 of cell 2, "
       "nb.ipynb:cell 4:5 and other.py:9; line 4"),
  )
  def test_edit_line(self, edit, expected):
    self.assertEqual(expected, report.edit_line("nb.ipynb", edit, Cells()))

  def test_error_lines(self):
    self.assertEqual(
        "nb.ipynb:cell 4:1: ERROR: does not parse (line 1 of cell 4, "
        "column 2); copied unchanged",
        report.not_converted_line("nb.ipynb", 5, "does not parse (line 5, "
                                  "column 2)", Cells()))
    self.assertEqual("nb.ipynb:12: ERROR: is not valid JSON; copied "
                     "unchanged", report.not_converted_line(
                         "nb.ipynb", 12, "is not valid JSON"))
    self.assertEqual("nb.ipynb:cell 3:2: ERROR: why",
                     report.cell_line("nb.ipynb", 3, 2, "ERROR", "why"))
    self.assertEqual("nb.ipynb:cell 3: INFO: why",
                     report.cell_line("nb.ipynb", 3, None, "INFO", "why"))

  def test_a_path_with_regex_characters(self):
    self.assertEqual("a+b (1).ipynb:cell 4:1 and a+b (1).ipynb:cell 2:1",
                     report.in_cells("a+b (1).ipynb:5 and a+b (1).ipynb:1",
                                     "a+b (1).ipynb", Cells()))

  def test_file_section(self):
    result = edits_lib.Upgraded("new", [edits_lib.added("import mplso"),
                                        edits_lib.renamed(5, "a", "b")])
    self.assertEqual(
        "\n".join([RULE, "Processing file 'nb.ipynb'",
                   " outputting to 'out.ipynb'", RULE,
                   "nb.ipynb:cell 4: INFO: Added 'import mplso'",
                   "nb.ipynb:cell 4:1: INFO: Renamed 'a' to 'b'",
                   "nb.ipynb:cell 3: INFO: left"]) + "\n",
        report.file_section("nb.ipynb", "out.ipynb", result, None,
                            ("nb.ipynb:cell 3: INFO: left",), Cells()))


class HeaderTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("mplso", edits_lib.MPLSO, edits_lib.KERAS_3, "mplso's names"),
      ("mplso_whatever_the_keras", edits_lib.MPLSO, edits_lib.TF_KERAS,
       "mplso's names"),
      ("native_keras_3", edits_lib.NATIVE, edits_lib.KERAS_3,
       "Keras's own names where the behaviour allows (Keras 3), mplso's "
       "elsewhere"),
      ("native_tf_keras", edits_lib.NATIVE, edits_lib.TF_KERAS,
       "Keras's own names where the behaviour allows (tf_keras), mplso's "
       "elsewhere"),
  )
  def test_header(self, to, keras, target):
    self.assertEqual(
        f"mplso.upgrade: legacy loss-scale code to {target}\n{RULE}\n"
        "Processed 5 Python files: 3 changed, 1 with an ERROR line, 4 with "
        "a WARNING line, 2 with mplso.compat.install() inserted.\n",
        report.header(to, keras, files=5, changed=3, errors=1, installs=2,
                      warned=4))

  @parameterized.named_parameters(
      ("none", 0, "Processed 5 Python files"),
      ("one", 1, "Processed 5 Python files and 1 notebook"),
      ("two", 2, "Processed 5 Python files and 2 notebooks"),
  )
  def test_notebooks_are_counted(self, notebooks, processed):
    self.assertEqual(processed, report.processed(5, notebooks))
    self.assertIn(f"\n{processed}: 3 changed,", report.header(
        edits_lib.MPLSO, edits_lib.KERAS_3, 5, 3, 1, 2, notebooks))


class DocstringTest(absltest.TestCase):

  def test_every_function_has_a_docstring(self):
    for function in (report.edit_line, report.file_section, report.header,
                     report.note_line, report.not_converted_line,
                     report.other_section, report.location,
                     report.in_cells, report.cell_line, report.processed):
      self.assertTrue(function.__doc__, function.__name__)

  def test_edit_line_docstring_shows_the_line_it_writes(self):
    line = report.edit_line("PATH", edits_lib.renamed(7, "old", "new"))
    self.assertEqual("PATH:7: INFO: Renamed 'old' to 'new'", line)
    self.assertIn("`PATH:LINE: INFO: Renamed 'old' to 'new'`",
                  report.edit_line.__doc__)
    self.assertNotIn("->", report.edit_line.__doc__)


if __name__ == "__main__":
  absltest.main()
