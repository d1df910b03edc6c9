"""Tests `placement`: where the upgrade puts its imports and `install()`."""

import sys
import textwrap
import types
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import libcst as cst

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import placement
from mplso._src.upgrade import rewrite

INSTALL = "mplso.compat.install()"


def insert(source, modules=(), install_why=()):
  """The module's code after `placement.insert`, and the edits it reports."""
  module = cst.parse_module(textwrap.dedent(source))
  placed = placement.insert(module, set(modules), list(install_why))
  return module.with_changes(body=placed.body).code, placed.edits


class ImportTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("after_the_tensorflow_import_block", """\
          import os
          import tensorflow as tf
          import numpy as np

          x = 1
          """, """\
          import os
          import tensorflow as tf
          import numpy as np
          import mplso.keras

          x = 1
          """),
      ("after_the_first_block_only", '''\
          """Docstring."""
          from tensorflow import keras
          x = 1
          import tensorflow as tf
          ''', '''\
          """Docstring."""
          from tensorflow import keras
          import mplso.keras
          x = 1
          import tensorflow as tf
          '''),
      ("relative_import_is_not_tensorflow", """\
          from .tensorflow import keras
          x = 1
          import tensorflow
          """, """\
          from .tensorflow import keras
          x = 1
          import tensorflow
          import mplso.keras
          """),
      ("no_tensorflow_import", '''\
          """Docstring."""
          from __future__ import annotations
          import os
          x = 1
          ''', '''\
          """Docstring."""
          from __future__ import annotations
          import mplso.keras
          import os
          x = 1
          '''),
      ("before_a_tensorflow_line_that_holds_more", """\
          import os
          import tensorflow as tf; x = tf.keras
          import numpy as np
          """, """\
          import os
          import mplso.keras
          import tensorflow as tf; x = tf.keras
          import numpy as np
          """),
      ("before_it_below_the_comments_above_it", """\
          import os

          # TensorFlow.
          import tensorflow as tf; x = tf.keras
          """, """\
          import os

          # TensorFlow.
          import mplso.keras
          import tensorflow as tf; x = tf.keras
          """),
      ("after_a_block_whose_later_line_holds_more", """\
          import tensorflow as tf
          import numpy as np; x = tf.keras
          """, """\
          import tensorflow as tf
          import mplso.keras
          import numpy as np; x = tf.keras
          """),
  )
  def test_where_an_import_goes(self, source, expected):
    code, edits = insert(source, {"mplso.keras"})
    self.assertEqual(textwrap.dedent(expected), code)
    self.assertEqual([edits_lib.added("import mplso.keras")], edits)

  @parameterized.named_parameters(
      ("sorted_in_one_edit", {"mplso.keras", "mplso.compat"},
       ["import mplso.compat", "import mplso.keras"]),
      ("mplso_is_implied_by_a_submodule", {"mplso", "mplso.keras"},
       ["import mplso.keras"]),
      ("mplso_alone", {"mplso"}, ["import mplso"]),
      ("present_already", {"mplso.contrib"}, []),
      ("tensorflow", {"tensorflow as tf"}, ["import tensorflow as tf"]),
  )
  def test_which_imports_are_added(self, modules, added):
    source = "from tensorflow import keras\nimport mplso.contrib\nx = 1\n"
    code, edits = insert(source, modules)
    self.assertEqual(
        "from tensorflow import keras\nimport mplso.contrib\n" +
        "".join(line + "\n" for line in added) + "x = 1\n", code)
    self.assertEqual(
        [edits_lib.added("; ".join(added))] if added else [], edits)


class InstallTest(parameterized.TestCase):

  def test_install_goes_before_the_first_tensorflow_import(self):
    # After what the program sets up first; the imports still go after
    # TensorFlow's.
    code, edits = insert('''\
        """Docstring."""
        import os
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import tensorflow as tf
        x = 1
        ''', {"mplso.keras"}, [(6, "why")])
    self.assertEqual(textwrap.dedent('''\
        """Docstring."""
        import os
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import mplso.compat
        mplso.compat.install()
        import tensorflow as tf
        import mplso.keras
        x = 1
        '''), code)
    install, imports = edits
    self.assertEqual(edits_lib.added(INSTALL, "line 6: why", line=6), install)
    self.assertEqual((0, ""), (imports.line, imports.old))
    self.assertIn("import mplso.keras", imports.new)

  def test_blank_lines_before_the_tensorflow_import_stay_before(self):
    code, _ = insert("import os\n\n\nimport tensorflow as tf\n",
                     install_why=[(4, "why")])
    self.assertEqual("import os\n\n\nimport mplso.compat\n"
                     f"{INSTALL}\nimport tensorflow as tf\n", code)

  def test_without_a_tensorflow_import_install_follows_the_docstring(self):
    code, edits = insert('"""Docstring."""\nx = 1\n',
                         install_why=[(2, "first"), (5, "second")])
    self.assertEqual(f'"""Docstring."""\nimport mplso.compat\n{INSTALL}\n'
                     "x = 1\n", code)
    self.assertEqual(
        [edits_lib.added(INSTALL, "line 2: first; line 5: second", line=2),
         edits_lib.added("import mplso.compat")], edits)

  @parameterized.named_parameters(
      ("alone", set(), "import mplso.compat"),
      ("with_others", {"mplso.keras"},
       "import mplso.compat; import mplso.keras"),
  )
  def test_the_import_of_mplso_compat_is_reported(self, modules, imports):
    # Whether or not other imports are added with it.
    _, edits = insert("import tensorflow as tf\nx = 1\n", modules,
                      [(2, "why")])
    self.assertEqual(
        [edits_lib.added(INSTALL, "line 2: why", line=2),
         edits_lib.added(imports)], edits)

  def test_install_present_is_not_added_again(self):
    source = f"import mplso.compat\n{INSTALL}\nimport tensorflow as tf\n"
    code, edits = insert(source, install_why=[(3, "why")])
    self.assertEqual(source, code)
    self.assertEmpty(edits)

  @parameterized.named_parameters(
      ("comment", f"# Under {INSTALL} it ran.\n"),
      ("string", f'NOTE = "run {INSTALL} first"\n'),
      ("docstring", f'"""Needs {INSTALL}."""\n'),
      ("other_call", "mplso.compat.install(strict=True)\n"),
  )
  def test_install_is_added_when_only_its_text_is_there(self, text):
    source = text + "import mplso.compat\nimport tensorflow as tf\nx = 1\n"
    code, edits = insert(source, install_why=[(4, "why")])
    self.assertEqual(text + f"import mplso.compat\n{INSTALL}\n"
                     "import tensorflow as tf\nx = 1\n", code)
    self.assertEqual([edits_lib.added(INSTALL, "line 4: why", line=4)], edits)

  def test_install_in_a_function_counts_as_present(self):
    source = (f"import mplso.compat\ndef main():\n  {INSTALL}\n"
              "import tensorflow as tf\n")
    code, edits = insert(source, install_why=[(4, "why")])
    self.assertEqual(source, code)
    self.assertEmpty(edits)


class OneLineTest(absltest.TestCase):
  """A TensorFlow import and a use of it on one line, whole files."""

  def test_the_added_import_comes_before_the_use(self):
    result = rewrite.upgrade_source(
        "import tensorflow as tf; s = tf.train.experimental.DynamicLossScale()"
        "\nprint(s)\n")
    self.assertEqual(
        "import mplso\n"
        "import tensorflow as tf; s = mplso.DynamicLossScale()\nprint(s)\n",
        result.code)

  def test_after_install_and_before_the_use(self):
    result = rewrite.upgrade_source(textwrap.dedent("""\
        import os
        import tensorflow as tf; tf.keras.mixed_precision.set_global_policy(
            "mixed_float16"); s = tf.train.experimental.DynamicLossScale()
        model.compile(optimizer="sgd", loss="mse")
        """))
    self.assertEqual(textwrap.dedent("""\
        import os
        import mplso.compat
        mplso.compat.install()
        import tensorflow as tf; tf.keras.mixed_precision.set_global_policy(
            "mixed_float16"); s = mplso.DynamicLossScale()
        model.compile(optimizer="sgd", loss="mse")
        """), result.code)


class CompatImportTest(parameterized.TestCase):
  """`import mplso.compat` below the first TensorFlow import, and install()."""

  def test_its_line_moves_up_before_install(self):
    code, edits = insert("""\
        import os
        import tensorflow as tf
        import mplso.compat  # ours
        import mplso.keras

        x = 1
        """, {"mplso.keras", "mplso.contrib"}, [(6, "why")])
    self.assertEqual(textwrap.dedent("""\
        import os
        import mplso.compat  # ours
        mplso.compat.install()
        import tensorflow as tf
        import mplso.keras
        import mplso.contrib

        x = 1
        """), code)
    moved, install, imports = edits
    self.assertEqual((0, "import mplso.compat", "(moved)"),
                     (moved.line, moved.old, moved.new))
    self.assertIn("needs `mplso.compat` imported before it", moved.why)
    self.assertEqual(edits_lib.added(INSTALL, "line 6: why", line=6), install)
    self.assertEqual(edits_lib.added("import mplso.contrib"), imports)

  def test_comments_above_its_line_stay_where_they_are(self):
    code, _ = insert("""\
        import tensorflow as tf

        # mplso serves the legacy names.
        import mplso.compat
        x = 1
        """, install_why=[(5, "why")])
    self.assertEqual(textwrap.dedent(f"""\
        import mplso.compat
        {INSTALL}
        import tensorflow as tf

        # mplso serves the legacy names.
        x = 1
        """), code)

  @parameterized.named_parameters(
      ("same_line", "import tensorflow as tf, mplso.compat\n"),
      ("with_another_module", "import tensorflow as tf\n"
       "import numpy, mplso.compat\n"),
      ("last_with_a_comment_above", "import tensorflow as tf\n"
       "# ours\nimport mplso.compat\n"),
  )
  def test_a_line_that_cannot_move_stays_and_one_is_added(self, source):
    code, edits = insert(source, install_why=[(2, "why")])
    self.assertEqual(f"import mplso.compat\n{INSTALL}\n{source}", code)
    self.assertEqual(
        [edits_lib.added(INSTALL, "line 2: why", line=2),
         edits_lib.added("import mplso.compat")], edits)

  def test_an_earlier_import_stays(self):
    source = ("import mplso.compat\nimport os\nimport tensorflow as tf\n"
              "x = 1\n")
    code, edits = insert(source, install_why=[(4, "why")])
    self.assertEqual("import mplso.compat\nimport os\n"
                     f"{INSTALL}\nimport tensorflow as tf\nx = 1\n", code)
    self.assertEqual([edits_lib.added(INSTALL, "line 4: why", line=4)], edits)

  @parameterized.named_parameters(
      ("set_global_policy",
       'tf.keras.mixed_precision.set_global_policy("mixed_float16")'),
      ("experimental_set_policy",
       'tf.keras.mixed_precision.experimental.set_policy("mixed_float16")'),
  )
  def test_upgraded_program_binds_mplso_before_install(self, policy):
    # The import/install prefix of the upgraded file runs (with a stand-in
    # for mplso.compat), and install() comes before TensorFlow's import.
    result = rewrite.upgrade_source(textwrap.dedent(f"""\
        import tensorflow as tf
        import mplso.compat
        {policy}
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        """))
    self.assertTrue(result.installs)
    lines = result.code.splitlines(keepends=True)
    first_tf = lines.index("import tensorflow as tf\n")
    self.assertEqual(INSTALL + "\n", lines[first_tf - 1])
    compat = types.ModuleType("mplso.compat")
    compat.install = mock.Mock()
    package = types.ModuleType("mplso")
    package.compat = compat
    with mock.patch.dict(sys.modules, {"mplso": package,
                                       "mplso.compat": compat}):
      exec("".join(lines[:first_tf]), {})  # pylint: disable=exec-used
    compat.install.assert_called_once_with()
    self.assertEqual(1, result.code.count("import mplso.compat\n"))


if __name__ == "__main__":
  absltest.main()
