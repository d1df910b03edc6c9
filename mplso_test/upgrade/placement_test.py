"""Tests `placement`: where the upgrade puts its imports and `install()`."""

import textwrap

from absl.testing import absltest
from absl.testing import parameterized
import libcst as cst

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import placement

INSTALL = "mplso.compat.install()"


def insert(source, modules=(), install_why=()):
  """The module's code after `placement.insert`, and the edits it reports."""
  module = cst.parse_module(textwrap.dedent(source))
  body, edits = placement.insert(module, set(modules), list(install_why))
  return module.with_changes(body=body).code, edits


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
  )
  def test_where_an_import_goes(self, source, expected):
    code, edits = insert(source, {"mplso.keras"})
    self.assertEqual(textwrap.dedent(expected), code)
    self.assertEqual([edits_lib.Edit(0, "", "import mplso.keras")], edits)

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
        [edits_lib.Edit(0, "", "; ".join(added))] if added else [], edits)


class InstallTest(absltest.TestCase):

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
    self.assertEqual(edits_lib.Edit(6, "", INSTALL, "line 6: why"), install)
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
        [edits_lib.Edit(2, "", INSTALL, "line 2: first; line 5: second")],
        edits)

  def test_install_present_is_not_added_again(self):
    source = f"import mplso.compat\n{INSTALL}\nimport tensorflow as tf\n"
    code, edits = insert(source, install_why=[(3, "why")])
    self.assertEqual(source, code)
    self.assertEmpty(edits)


if __name__ == "__main__":
  absltest.main()
