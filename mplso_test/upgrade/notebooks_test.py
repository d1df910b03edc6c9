"""Tests `notebooks`: a notebook's code cells to one Python text and back."""

import ast
import json

from absl.testing import absltest
from absl.testing import parameterized

from mplso._src.upgrade import notebooks
from mplso._src.upgrade import rewrite

# How nbformat writes (indent 1, keys sorted), how Colab and tensorflow/docs
# write (indent 2), and a notebook written on one line (jupytext, old Colab).
LAYOUTS = {
    "nbformat": dict(indent=1, sort_keys=True, ensure_ascii=False),
    "colab": dict(indent=2, ensure_ascii=True),
    "one_line": dict(separators=(",", ":"), ensure_ascii=False),
}


def notebook(cells, layout="nbformat", metadata=None, end="\n"):
  """A notebook's bytes: `cells` is [(cell_type, source)], a source a list
  of lines or one string, as the notebook stores it."""
  body = []
  for number, (kind, source) in enumerate(cells):
    cell = {"cell_type": kind, "metadata": {"id": f"c{number}"},
            "source": source}
    if kind == "code":
      cell.update(execution_count=number, outputs=[
          {"name": "stdout", "output_type": "stream", "text": ["é ok\n"]}])
    body.append(cell)
  document = {"cells": body, "metadata": metadata or {
      "kernelspec": {"display_name": "Python 3", "language": "python",
                     "name": "python3"}}, "nbformat": 4,
              "nbformat_minor": 5}
  return (json.dumps(document, **LAYOUTS[layout]) + end).encode("utf-8")


def convert(data, to="mplso"):
  """(new bytes, the notebook, its edits) of `data` through the rewrite."""
  read = notebooks.read(data)
  result = rewrite.upgrade_sources({"nb.ipynb": read.python}, to=to)[
      "nb.ipynb"]
  assert result.error is None, result.error
  return read.encode(read.split(result.code)), read, result.edits


class RoundTripTest(parameterized.TestCase):

  @parameterized.named_parameters(
      [(f"{layout}_{form}", layout, form)
       for layout in LAYOUTS for form in ("lines", "string")])
  def test_a_notebook_without_edits_is_its_own_bytes(self, layout, form):
    source = "import numpy as np\n# é, ü\nx = np.ones(3)  # done"
    lines = source.splitlines(keepends=True)
    data = notebook([("markdown", ["# A title\n", "é"]),
                     ("code", lines if form == "lines" else source),
                     ("code", [])], layout)
    read = notebooks.read(data)
    self.assertEqual({}, read.split(read.python))
    self.assertEqual(data, read.encode({}))
    new, _, edits = convert(data)
    self.assertEqual([], edits)
    self.assertEqual(data, new)

  def test_bom_crlf_and_no_final_newline_are_kept(self):
    data = b"\xef\xbb\xbf" + notebook(
        [("code", ["import tensorflow as tf\r\n",
                   "o = tf.train.experimental.DynamicLossScale()"])],
        end="").replace(b"\n", b"\r\n")
    new, _, _ = convert(data)
    self.assertEqual(
        data.replace(b'tf.train.experimental.DynamicLossScale()"',
                     b'mplso.DynamicLossScale()"').replace(
                         b'"import tensorflow as tf\\r\\n",',
                         b'"import tensorflow as tf\\r\\n",\r\n'
                         b'    "import mplso\\r\\n",'), new)


class ConvertTest(parameterized.TestCase):

  @parameterized.named_parameters(
      [(f"{layout}_{form}", layout, form)
       for layout in LAYOUTS for form in ("lines", "string")])
  def test_only_the_changed_cells_differ(self, layout, form):

    def cells(imports, use):
      def stored(lines):
        return lines if form == "lines" else "".join(lines)
      return [("markdown", stored(["# Mixed précision\n", "text"])),
              ("code", stored(["%matplotlib inline\n", *imports])),
              ("code", stored(["x = 1  # é\n", "print(x)"])),
              ("raw", stored(["tf.train.experimental.LossScale"])),
              ("code", stored(["!nvidia-smi\n", *use])),
              ("code", stored(["mixed_precision = 1\n"]))]

    data = notebook(cells(
        ["import tensorflow as tf\n", "import numpy as np\n"],
        ["opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(\n",
         "    opt, 'dynamic')  # ü\n", "print(opt)"]), layout)
    new, _, _ = convert(data)
    self.assertEqual(notebook(cells(
        ["import tensorflow as tf\n", "import numpy as np\n",
         "import mplso.keras\n"],
        ["opt = mplso.keras.LossScaleOptimizer(\n",
         "    opt, 'dynamic')  # ü\n", "print(opt)"]), layout), new)

  def test_import_in_one_cell_resolves_a_use_in_another(self):
    data = notebook([
        ("code", ["from tensorflow.keras import mixed_precision"]),
        ("code", ["opt = mixed_precision.LossScaleOptimizer(opt)\n"]),
        ("code", ["import tensorflow as tf\n",
                  "s = tf.train.experimental.DynamicLossScale()"]),
    ])
    new, read, edits = convert(data)
    self.assertEqual(notebook([
        ("code", ["from tensorflow.keras import mixed_precision\n",
                  "import mplso.keras"]),
        ("code", ["opt = mplso.keras.LossScaleOptimizer(opt)\n"]),
        ("code", ["import tensorflow as tf\n",
                  "s = mplso.DynamicLossScale()"]),
    ]), new)
    self.assertEqual(
        [(None, "", "import mplso.keras"),
         ((2, 1), "mixed_precision.LossScaleOptimizer",
          "mplso.keras.LossScaleOptimizer"),
         ((3, 2), "tf.train.experimental.DynamicLossScale",
          "mplso.DynamicLossScale")],
        [(read.where(e.line) if e.line else None, e.old, e.new)
         for e in edits])

  def test_install_goes_before_the_first_tensorflow_import(self):
    data = notebook([
        ("code", ["%matplotlib inline\n", "import numpy as np\n",
                  "import tensorflow as tf"]),
        ("markdown", ["# Policy"]),
        ("code", ["tf.keras.mixed_precision.experimental.set_policy("
                  "'mixed_float16')\n"]),
        ("code", ["model = tf.keras.Sequential()\n",
                  "model.compile(optimizer='adam', loss='mse')"]),
    ])
    new, read, edits = convert(data)
    self.assertEqual(notebook([
        ("code", ["%matplotlib inline\n", "import numpy as np\n",
                  "import mplso.compat\n", "mplso.compat.install()\n",
                  "import tensorflow as tf"]),
        ("markdown", ["# Policy"]),
        ("code", ["mplso.compat.set_policy('mixed_float16')\n"]),
        ("code", ["model = tf.keras.Sequential()\n",
                  "model.compile(optimizer='adam', loss='mse')"]),
    ]), new)
    read_cells = read.cells(read.split(
        read.python.replace("import tensorflow as tf\n",
                            "import mplso.compat\nimport tensorflow as tf\n")))
    self.assertEqual(1, read_cells.added("import mplso.compat"))
    self.assertEqual((4, 2), read.where(
        next(e.line for e in edits if e.new == "mplso.compat.install()")))

  def test_non_ascii_of_a_changed_line_is_escaped_as_the_file_escapes(self):
    for escaped in (True, False):
      lines = ["import tensorflow as tf  # ü\n",
               "s = tf.train.experimental.LossScale  # é"]
      document = json.loads(notebook([("code", lines)]))
      data = json.dumps(document, indent=2, ensure_ascii=escaped) + "\n"
      self.assertEqual(escaped, "\\u00e9" in data)
      new, _, _ = convert(data.encode())
      document["cells"][0]["source"] = [
          "import tensorflow as tf  # ü\n", "import mplso\n",
          "s = mplso.LossScale  # é"]
      self.assertEqual(
          json.dumps(document, indent=2, ensure_ascii=escaped) + "\n",
          new.decode())


class EncodeTest(parameterized.TestCase):

  @parameterized.named_parameters(*[(layout, layout) for layout in LAYOUTS])
  def test_an_empty_list_gets_lines_laid_out_as_the_file(self, layout):
    data = notebook([("markdown", ["x"]), ("code", [])], layout)
    read = notebooks.read(data)
    self.assertEqual(
        notebook([("markdown", ["x"]), ("code", ["a = 1\n", "b = 2"])],
                 layout),
        read.encode({2: "a = 1\nb = 2"}))

  @parameterized.named_parameters(*[(layout, layout) for layout in LAYOUTS])
  def test_lines_can_become_none(self, layout):
    data = notebook([("code", ["a = 1\n", "b = 2"]), ("code", "x = 1")],
                    layout)
    self.assertEqual(notebook([("code", []), ("code", "")], layout),
                     notebooks.read(data).encode({1: "", 2: ""}))

  def test_items_that_are_not_lines_are_written_as_lines(self):
    # Another writer's split: only what nbformat would write is kept.
    data = notebook([("code", ["a = 1\nb = 2\n", "c = ", "3"])])
    self.assertEqual(notebook([("code", ["a = 1\n", "b = 2\n", "c = 4"])]),
                     notebooks.read(data).encode({1: "a = 1\nb = 2\nc = 4"}))


class IPythonLinesTest(parameterized.TestCase):
  """IPython's lines are never parsed as Python, and come back as they were."""

  @parameterized.named_parameters(
      ("line_magic", "%matplotlib inline\n"),
      ("shell", "!pip install -q tensorflow==2.3\n"),
      ("shell_twice", "!!ls\n"),
      ("shell_indented_in_a_block", "if True:\n  !nvidia-smi\n  x = 1\n"),
      ("assigned_shell", "files = !ls *.py\n"),
      ("assigned_magic", "t = %timeit -o f()\n"),
      ("help_after", "tf.keras.mixed_precision?\n"),
      ("help_more", "tf.keras.mixed_precision.LossScaleOptimizer??\n"),
      ("help_before", "?tf.train\n"),
      ("magic_help", "%timeit?\n"),
      ("autocall", "/print 1 2\n"),
      ("autoquote", ",print a b\n"),
      ("automagic_cd", "cd /tmp\n"),
      ("automagic_pip", "pip install tensorflow==2.3\n"),
      ("shell_continued", "!python train.py \\\n  --amp \\\n  --epochs=3\n"),
      ("cell_magic_time", "%%time\nx = 1\n!ls\n"),
      ("cell_magic_after_blank_lines", "\n%%capture out\nx = 1\n"),
      ("no_final_newline", "x = 1\n%env A=1"),
      ("crlf", "%env A=1\r\nx = 1\r\n"),
  )
  def test_kept_and_the_cell_parses(self, source):
    data = notebook([("code", source)])
    read = notebooks.read(data)
    ast.parse(read.python)
    self.assertNotIn("!", read.python)
    self.assertNotIn("%", read.python.replace("%%", ""))
    self.assertEqual({}, read.split(read.python))
    self.assertEqual([], read.notes)

  @parameterized.named_parameters(
      ("python_after_a_name", "history = model.fit(x,\n    y)\n"),
      ("an_operator", "ls -la\n"),
      ("in_a_string", 's = """\n%d items\n!x\n"""\n'),
      ("in_brackets", "f(\n  1,\n)\n"),
      ("after_a_backslash", "x = 1 + \\\n  2\n"),
      ("modulo", "x = 5 % 3\n"),
      ("a_comment", "# %matplotlib inline\n"),
  )
  def test_python_is_python(self, source):
    read = notebooks.read(notebook([("code", source)]))
    self.assertIn(source, read.python)

  def test_a_legacy_name_in_a_magic_line_is_not_converted(self):
    data = notebook([("code", [
        "import tensorflow as tf\n",
        "%time s = tf.train.experimental.LossScale\n",
        "tf.train.experimental.LossScale?"])])
    new, _, edits = convert(data)
    self.assertEqual(data, new)
    self.assertEqual([], edits)

  def test_the_body_of_a_time_cell_is_converted(self):
    data = notebook([("code", ["%%time\n", "import tensorflow as tf\n",
                               "s = tf.train.experimental.LossScale"])])
    new, _, _ = convert(data)
    self.assertEqual(notebook([("code", [
        "%%time\n", "import tensorflow as tf\n", "import mplso\n",
        "s = mplso.LossScale"])]), new)

  def test_a_line_added_above_a_cell_magic_goes_below_it(self):
    read = notebooks.read(notebook([("code", "\n%%time\nx = 1\n"),
                                    ("code", "%%time\ny = 2\n%%time\n")]))
    lines = read.python.splitlines(keepends=True)
    # IPython reads a cell magic on the first line that is not blank.
    self.assertEqual(
        {1: "%%time\nimport mplso\n\nx = 1\n"},
        read.split("".join([lines[0], "import mplso\n", *lines[1:]])))
    self.assertEqual({}, read.split(read.python))

  @parameterized.named_parameters(
      ("bash", ["%%bash\n", "python train.py --mixed_precision\n"],
       notebooks.INFO, "a `%%bash` cell is not Python: left as it is"),
      ("writefile_legacy", [
          "%%writefile train.py\n", "import tensorflow as tf\n",
          "tf.train.experimental.LossScale\n"], notebooks.WARNING,
       "a `%%writefile` cell writes the Python file 'train.py', which names "
       "legacy spellings: left as it is; convert that file once written "
       "(--infile)"),
      ("writefile_other", ["%%writefile x.py\n", "print(1)\n"],
       notebooks.INFO, "a `%%writefile` cell is not Python: left as it is"),
  )
  def test_a_cell_magic_that_is_not_python_leaves_the_cell(
      self, lines, severity, message):
    data = notebook([("code", "import tensorflow as tf\n"),
                     ("code", lines)])
    read = notebooks.read(data)
    self.assertEqual([notebooks.Note(2, 1, severity, message)], read.notes)
    self.assertNotIn("train.py", read.python)
    new, _, _ = convert(data)
    self.assertEqual(data, new)


class CellsTest(absltest.TestCase):

  def test_where_names_the_cell_and_its_line(self):
    read = notebooks.read(notebook([
        ("markdown", "# title"), ("code", "a = 1\nb = 2"),
        ("code", "!ls\nc = 3\n")]))
    self.assertEqual(
        [None, (2, 1), (2, 2), None, (3, 1), (3, 2), None],
        [read.where(line) for line in range(1, 8)])
    self.assertEqual(6, len(read.python.splitlines()))

  def test_a_cell_that_does_not_parse_is_left_the_others_converted(self):
    data = notebook([
        ("code", ["import tensorflow as tf\n", "print 'python 2'"]),
        ("code", ["import tensorflow as tf\n",
                  "s = tf.train.experimental.LossScale"])])
    new, read, _ = convert(data)
    self.assertEqual([notebooks.Note(
        1, 2, notebooks.ERROR, "does not parse: Missing parentheses in call "
        "to 'print'. Did you mean print(...)?; this cell left unchanged, "
        "the others converted")], read.notes)
    self.assertEqual(notebook([
        ("code", ["import tensorflow as tf\n", "print 'python 2'"]),
        ("code", ["import tensorflow as tf\n", "import mplso\n",
                  "s = mplso.LossScale"])]), new)

  def test_another_language_is_left_alone(self):
    data = notebook([("code", "library(tensorflow)\n")], metadata={
        "kernelspec": {"language": "R", "name": "ir"},
        "language_info": {"name": "R"}})
    read = notebooks.read(data)
    self.assertEqual("", read.python)
    self.assertEqual([notebooks.Note(1, None, notebooks.INFO, (
        "the notebook's language is 'R', not Python: left as it is"))],
                     read.notes)

  def test_a_lost_marker_is_an_error_not_a_wrong_split(self):
    read = notebooks.read(notebook([("code", "a = 1\n"),
                                    ("code", "b = 2\n")]))
    marker = read.python.splitlines()[2]
    with self.assertRaisesRegex(ValueError, "lost the marker of cell 2"):
      read.split(read.python.replace(marker, "c = 3"))

  def test_a_notebook_that_holds_the_marker_text_gets_another(self):
    text = '"mplso-upgrade-kept cell 0"\n'
    read = notebooks.read(notebook([("code", text), ("code", "!ls\n")]))
    self.assertIn('"mplso-upgrade-kept-1 cell 0"', read.python)
    self.assertEqual({}, read.split(read.python))


class NotANotebookTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("not_json", b'{\n "cells": [\n', 3,
       "is not valid JSON: Expecting value (line 3, column 1)"),
      ("not_utf_8", b'{"cells": [],\n"x": "\xe9"}', 2,
       "is not UTF-8 (byte 0xe9), as a notebook must be"),
      ("not_utf_8_after_a_bom", b'\xef\xbb\xbf{"cells": [],\n\n"x": "\xff"}',
       3, "is not UTF-8 (byte 0xff), as a notebook must be"),
      ("a_list", b"[]", None,
       "is not a notebook: its JSON is a list, not an object"),
      ("nbformat_3", b'{"nbformat": 3, "worksheets": []}', None,
       "is not an nbformat 4 notebook: its nbformat is 3, the upgrade reads "
       "4 (open it in Jupyter and save it to make it nbformat 4)"),
      ("no_cells", b'{"nbformat": 4}', None,
       "is not an nbformat 4 notebook: 'cells' must be a list. Received: "
       "NoneType"),
      ("source_not_text", b'{"nbformat": 4, "cells": [{"cell_type": "code",'
       b' "source": 3}]}', None,
       "is not an nbformat 4 notebook: the 'source' of cell 1 must be a "
       "string or a list of strings. Received: int"),
  )
  def test_reported(self, data, line, message):
    with self.assertRaises(notebooks.NotebookError) as raised:
      notebooks.read(data)
    self.assertEqual(message, str(raised.exception))
    self.assertEqual(line, raised.exception.line)


if __name__ == "__main__":
  absltest.main()
