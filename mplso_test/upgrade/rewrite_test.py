"""Tests `upgrade_source`: which names change, into what, and what stays."""

import difflib
import glob
import os
import textwrap

from absl.testing import absltest
from absl.testing import parameterized
import pytest

from mplso._src.compat import spellings as compat_spellings
from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import rewrite
from mplso_test.helpers import upgrade_cases

assert_upgrade = upgrade_cases.assert_upgrade

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
NATIVE, KERAS_3, TF_KERAS = (edits_lib.NATIVE, edits_lib.KERAS_3,
                             edits_lib.TF_KERAS)


def upgrade(source, **kwargs):
  return rewrite.upgrade_source(textwrap.dedent(source), **kwargs)


def changed_lines(before, after):
  """The original lines that a diff of the two texts removes or changes."""
  lines = []
  matcher = difflib.SequenceMatcher(a=before.splitlines(),
                                    b=after.splitlines(), autojunk=False)
  for tag, i1, i2, _, _ in matcher.get_opcodes():
    if tag in ("replace", "delete"):
      lines += before.splitlines()[i1:i2]
  return lines


class AssertUpgradeTest(absltest.TestCase):
  """The whole-file helper fails on any byte and any report line."""

  BEFORE = "import tensorflow as tf\nx = tf.train.experimental.LossScale\n"
  AFTER = "import tensorflow as tf\nimport mplso\nx = mplso.LossScale\n"
  REPORT = ["a.py: INFO: Added 'import mplso'",
            "a.py:2: INFO: Renamed 'tf.train.experimental.LossScale' to "
            "'mplso.LossScale'"]

  def test_passes_on_the_whole_file_and_report(self):
    assert_upgrade(self.BEFORE, self.AFTER, self.REPORT)

  def test_fails_on_one_byte(self):
    with self.assertRaisesRegex(AssertionError, r"\+x = mplso.LossScale\n"):
      assert_upgrade(self.BEFORE, self.AFTER.replace("\nx", "\nx "))

  def test_fails_on_a_report_line_missing(self):
    with self.assertRaisesRegex(AssertionError, "the report differs"):
      assert_upgrade(self.BEFORE, self.AFTER, self.REPORT[1:])


class SpellingTest(parameterized.TestCase):

  def test_every_spelling_becomes_its_target(self):
    # One file that uses every spelling of the --list table as written after
    # `import tensorflow as tf`: each becomes mplso's name.
    rows = compat_spellings.SPELLINGS
    source = "import tensorflow as tf\n\n" + "".join(
        f"x{i} = {row.name}\n" for i, row in enumerate(rows))
    result = rewrite.upgrade_source(source)
    lines = result.code.splitlines()
    for i, row in enumerate(rows):
      self.assertIn(f"x{i} = {row.target}", lines, row.name)
    # Each module it needs is imported once; mplso alone is implied.
    for module in ("mplso.compat", "mplso.contrib", "mplso.keras"):
      self.assertEqual(1, lines.count(f"import {module}"), module)
    self.assertNotIn("import mplso", lines)
    self.assertFalse(result.installs)
    self.assertLen([e for e in result.edits if e.old.startswith("tf.")],
                   len(rows))

  def test_namespace_assigned_as_a_value_becomes_mplso_module(self):
    result = assert_upgrade("""\
        import tensorflow as tf
        mixed_precision = tf.contrib.mixed_precision
        """, """\
        import tensorflow as tf
        import mplso
        mixed_precision = mplso.contrib
        """, [
            "a.py: INFO: Added 'import mplso'",
            "a.py:2: INFO: Renamed 'tf.contrib.mixed_precision' to "
            "'mplso.contrib'"])
    self.assertFalse(result.installs, result.edits)

  def test_namespace_import_that_exists_today_stays(self):
    # The policy, with no `compile` in the file, gets `install()`
    # (policies_test); the import of `mp` stays.
    result = assert_upgrade("""\
        from tensorflow.keras import mixed_precision as mp
        mp.set_global_policy("mixed_float16")
        opt = mp.experimental.LossScaleOptimizer(o, "dynamic")
        """, """\
        import mplso.compat
        mplso.compat.install()
        from tensorflow.keras import mixed_precision as mp
        import mplso.keras
        mp.set_global_policy("mixed_float16")
        opt = mplso.keras.LossScaleOptimizer(o, "dynamic")
        """, [
            "a.py: INFO: Added 'import mplso.compat; import mplso.keras'",
            "a.py:2: INFO: Added 'mplso.compat.install()'",
            "a.py:3: INFO: Renamed 'mp.experimental.LossScaleOptimizer' to "
            "'mplso.keras.LossScaleOptimizer'"])
    self.assertTrue(result.installs, result.edits)

  @parameterized.named_parameters(
      ("name", "from tensorflow.contrib.mixed_precision import "
       "LossScaleOptimizer\n", "from mplso.contrib import LossScaleOptimizer"),
      ("renamed", "from tensorflow.contrib.mixed_precision import "
       "LossScaleOptimizer as LSO\n",
       "from mplso.contrib import LossScaleOptimizer as LSO"),
      ("keras_name", "from tensorflow.keras.mixed_precision.experimental "
       "import LossScaleOptimizer\n",
       "from mplso.keras import LossScaleOptimizer"),
      ("keras_name_other_target", "from tensorflow.keras.mixed_precision."
       "experimental import set_policy\n",
       "from mplso.compat import set_policy"),
      ("contrib_module", "from tensorflow.contrib import mixed_precision\n",
       "from mplso import contrib as mixed_precision"),
      ("contrib_module_as", "import tensorflow.contrib.mixed_precision as mp\n",
       "from mplso import contrib as mp"),
  )
  def test_import_becomes_mplso_import(self, source, expected):
    assert_upgrade(source + "x = 1  # keep\n", f"{expected}\nx = 1  # keep\n",
                   [f"a.py:1: INFO: Renamed {source[:-1]!r} to {expected!r}"])

  def test_mixed_import_is_split(self):
    assert_upgrade("""\
        from tensorflow.keras.mixed_precision.experimental import (
            LossScaleOptimizer, Policy)
        p = Policy("mixed_float16", loss_scale=8)
        o = LossScaleOptimizer(opt, p.loss_scale)
        """, """\
        import mplso.compat
        mplso.compat.install()
        from mplso.keras import LossScaleOptimizer
        from mplso.compat import Policy
        p = Policy("mixed_float16", loss_scale=8)
        o = LossScaleOptimizer(opt, p.loss_scale)
        """)  # `install()`: a policy with a loss scale (policies_test).

  def test_plain_import_of_contrib_keeps_tensorflow_bound(self):
    assert_upgrade("""\
        import tensorflow.contrib.mixed_precision
        m = tensorflow.contrib.mixed_precision.FixedLossScaleManager(8)
        t = tensorflow.constant(1.)
        """, """\
        import tensorflow
        import mplso.contrib
        m = mplso.contrib.FixedLossScaleManager(8)
        t = tensorflow.constant(1.)
        """)

  def test_only_install_namespace_import_goes_when_every_use_is_rewritten(
      self):
    assert_upgrade("""\
        import tensorflow as tf
        from tensorflow.keras.mixed_precision import experimental as mp
        mp.set_policy("mixed_float16")
        """, """\
        import mplso.compat
        mplso.compat.install()
        import tensorflow as tf
        mplso.compat.set_policy("mixed_float16")
        """, [
            "a.py: INFO: Added 'import mplso.compat'",
            "a.py:2: INFO: Changed 'from tensorflow.keras.mixed_precision "
            "import experimental as mp' to '(removed)'",
            "a.py:3: INFO: Renamed 'mp.set_policy' to "
            "'mplso.compat.set_policy'",
            # The policy, with no `compile` in the file (policies_test).
            "a.py:3: INFO: Added 'mplso.compat.install()'"])


  def test_a_removed_import_leaves_the_lines_above_it(self):
    # LibCST counts blank and comment lines as the next statement's own.
    assert_upgrade("""\
        import tensorflow as tf

        # The policy of the whole program.
        from tensorflow.keras.mixed_precision import experimental as mp
        mp.set_policy("mixed_float16")


        def model():
          x = 1

          # Unused here.
          from tensorflow.keras.mixed_precision import experimental as mp2
          return x


        def last():
          pass
          # The last lines of a block.
          from tensorflow.keras.mixed_precision import experimental as mp3
        # After the block.
        """, """\
        import mplso.compat
        mplso.compat.install()
        import tensorflow as tf

        # The policy of the whole program.
        mplso.compat.set_policy("mixed_float16")


        def model():
          x = 1

          # Unused here.
          return x


        def last():
          pass
          # The last lines of a block.
        # After the block.
        """)


class ThroughAProjectImportTest(parameterized.TestCase):

  @parameterized.parameters(
      ("from utils import tf", "utils.tf"),
      ("from utils import tensorflow as tf", "utils.tensorflow"),
      ("import utils.tf as tf", "utils.tf"),
      ("from utils.compat import tf1 as tf", "utils.compat.tf1"),
      ("from pkg.models import tf", "pkg.models.tf"))
  def test_a_legacy_path_read_from_tensorflow_is_warned(self, line, path):
    # A project module that re-exports TensorFlow: the tool does not follow
    # it, and a clean report would hide a name TF 2.21 lacks.
    source = (f"{line}\n\ndef f(o):\n"
              "  m = tf.contrib.mixed_precision.FixedLossScaleManager(8)\n"
              "  return tf.contrib.mixed_precision.LossScaleOptimizer(o, m)\n")
    result = rewrite.upgrade_source(source)
    self.assertEqual(source, result.code)
    self.assertEqual(
        [(4, "tf.contrib.mixed_precision.FixedLossScaleManager"),
         (5, "tf.contrib.mixed_precision.LossScaleOptimizer")],
        [(e.line, e.old) for e in result.edits])
    for edit in result.edits:
      self.assertEqual(edits_lib.WARNED, edit.kind)
      self.assertIn(f"`tf` is imported from another module (`{path}`)",
                    edit.why)
    self.assertIn("mplso's `mplso.contrib.LossScaleOptimizer`",
                  result.edits[1].why)

  def test_a_project_name_that_tensorflow_never_had_is_left_alone(self):
    source = ("from mylib import tf\nx = tf.contrib.layers.x\n"
              "y = tf.mixed_precision.MyScaler\n")
    result = rewrite.upgrade_source(source)
    self.assertEqual((source, []), (result.code, result.edits))


class LeftAloneTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("own_module", """\
          from mylib import mixed_precision
          opt = mixed_precision.LossScaleOptimizer(o)
          s = mixed_precision.experimental.DynamicLossScale()
          """),
      ("string_and_comment", """\
          import tensorflow as tf
          # tf.train.experimental.DynamicLossScale is used below? No.
          name = "tf.contrib.mixed_precision.LossScaleOptimizer"
          """),
      # (A `mixed_float16` policy gets `install()` where no `compile` is:
      # policies_test.)
      ("native_names", """\
          import tensorflow as tf
          tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
          p = tf.keras.mixed_precision.Policy("mixed_bfloat16")
          """),
      ("relative_import", """\
          from .mixed_precision import LossScaleOptimizer
          opt = LossScaleOptimizer(o)
          """),
  )
  def test_unchanged(self, source):
    assert_upgrade(source, source, [])

  def test_file_that_does_not_parse_is_returned_as_it_is(self):
    source = "import tensorflow as tf\ndef f(:\n  tf.contrib.x\n"
    result = rewrite.upgrade_source(source)
    self.assertEqual(source, result.code)
    self.assertStartsWith(result.error, "does not parse (line ")
    self.assertEmpty(result.edits)

  def test_a_file_that_does_not_parse_gets_pythons_line_and_words(self):
    # LibCST's parser names the token after the error (line 4 here).
    source = ("import tensorflow as tf\nwith tf.device('/cpu:0'):\n"
              "x = 1\ny = tf.contrib.mixed_precision\n")
    self.assertEqual(
        "does not parse (line 3, column 1): expected an indented block "
        "after 'with' statement on line 2",
        rewrite.upgrade_source(source).error)


class InstallFallbackTest(parameterized.TestCase):

  def test_compile_that_wraps_by_itself_gets_install(self):
    result = assert_upgrade("""\
        import tensorflow as tf
        tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
        model.compile(optimizer="adam", loss="mse")
        """, """\
        import mplso.compat
        mplso.compat.install()
        import tensorflow as tf
        mplso.compat.set_policy("mixed_float16")
        model.compile(optimizer="adam", loss="mse")
        """, [
            "a.py: INFO: Added 'import mplso.compat'",
            "a.py:2: INFO: Renamed "
            "'tf.keras.mixed_precision.experimental.set_policy' to "
            "'mplso.compat.set_policy'",
            "a.py:3: INFO: Added 'mplso.compat.install()'"])
    self.assertTrue(result.installs)
    self.assertStartsWith(result.edits[2].why, "line 3: `compile` here wraps")

  @parameterized.named_parameters(
      ("install_added", ""),
      # The import is moved up on the first run.
      ("compat_imported_after_tensorflow", "import mplso.compat\n"),
  )
  def test_second_run_inserts_nothing(self, compat_import):
    once = rewrite.upgrade_source(
        "import tensorflow as tf\n" + compat_import +
        'tf.keras.mixed_precision.set_global_policy("mixed_float16")\n'
        'model.compile(optimizer="adam", loss="mse")\n')
    self.assertTrue(once.installs)
    twice = rewrite.upgrade_source(once.code)
    self.assertEqual(once.code, twice.code)
    self.assertFalse(twice.changed, twice.edits)
    self.assertEmpty(twice.edits)
    self.assertFalse(twice.installs)

  def test_compile_of_an_explicit_wrapper_needs_no_install(self):
    result = assert_upgrade("""\
        import tensorflow as tf
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD())
        model.compile(optimizer=opt, loss="mse")
        """, """\
        import tensorflow as tf
        import mplso.keras
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        opt = mplso.keras.LossScaleOptimizer(tf.keras.optimizers.SGD())
        model.compile(optimizer=opt, loss="mse")
        """)
    self.assertFalse(result.installs)

  def test_import_of_a_namespace_keras_3_has_only_as_attribute_goes(self):
    # Under Keras 3, `import tensorflow.compat.v1.keras...` fails on TF 2.21
    # (only `tf.compat.v1.keras` exists): once every use is rewritten, the
    # import goes.
    result = assert_upgrade("""\
        import tensorflow.compat.v1.keras.mixed_precision as mp
        from tensorflow.compat.v2.keras import mixed_precision as mp2
        opt = mp.experimental.LossScaleOptimizer(sgd, "dynamic")
        p = mp2.experimental.Policy("mixed_float16")
        """, """\
        import mplso.compat
        import mplso.keras
        opt = mplso.keras.LossScaleOptimizer(sgd, "dynamic")
        p = mplso.compat.Policy("mixed_float16")
        """)
    self.assertIn("not a module TF 2.21 can import under Keras 3",
                  result.edits[1].why)

  def test_decided_per_compile_call(self):
    # Model A gets an explicit wrapper; model B relies on compile's own
    # wrap under the policy: only install() keeps B on mplso's class.
    result = assert_upgrade("""\
        import tensorflow as tf
        tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
        opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(sgd,
                                                                       "dynamic")
        model_a.compile(optimizer=opt, loss="mse")
        model_b.compile(optimizer="adam", loss="mse")
        """, """\
        import mplso.compat
        mplso.compat.install()
        import tensorflow as tf
        import mplso.keras
        mplso.compat.set_policy("mixed_float16")
        opt = mplso.keras.LossScaleOptimizer(sgd,
                                                                       "dynamic")
        model_a.compile(optimizer=opt, loss="mse")
        model_b.compile(optimizer="adam", loss="mse")
        """)
    [install] = [e for e in result.edits if e.new == "mplso.compat.install()"]
    self.assertIn("line 6: `compile` here wraps", install.why)

  def test_compile_override_that_wraps_needs_no_install(self):
    source = textwrap.dedent("""\
        import tensorflow as tf
        tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
        class Model(tf.keras.Model):
          def compile(self, optimizer, **kwargs):
            optimizer = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
                optimizer, "dynamic")
            super().compile(optimizer=optimizer, **kwargs)
        Model().compile(optimizer="adam", loss="mse")
        """)
    result = upgrade(source)
    self.assertFalse(result.installs)
    self.assertEqual(source.replace(
        "import tensorflow as tf\n",
        "import tensorflow as tf\nimport mplso.compat\nimport mplso.keras\n"
    ).replace("tf.keras.mixed_precision.experimental.set_policy",
              "mplso.compat.set_policy").replace(
                  "tf.keras.mixed_precision.experimental.LossScaleOptimizer",
                  "mplso.keras.LossScaleOptimizer"), result.code)

  def test_namespace_used_as_a_value_gets_install(self):
    result = assert_upgrade("""\
        import tensorflow as tf
        from tensorflow.keras.mixed_precision import experimental as mp
        register(mp)
        """, """\
        import mplso.compat
        mplso.compat.install()
        import tensorflow as tf
        from tensorflow.keras.mixed_precision import experimental as mp
        register(mp)
        """, [
            "a.py: INFO: Added 'import mplso.compat'",
            "a.py:3: INFO: Added 'mplso.compat.install()'"])
    self.assertTrue(result.installs)

  def test_member_mplso_does_not_serve_is_reported_not_installed(self):
    # install() would not provide it either: the runner failed there too.
    source = """\
        import tensorflow as tf
        policy = tf.keras.mixed_precision.experimental.get_layer_policy(layer)
        """
    result = assert_upgrade(source, source, [
        "a.py:2: WARNING: Kept "
        "'tf.keras.mixed_precision.experimental.get_layer_policy'"])
    self.assertFalse(result.installs)
    self.assertIn("not one of the names mplso serves", result.edits[0].why)

  @parameterized.named_parameters(("mplso", edits_lib.MPLSO),
                                  ("native", edits_lib.NATIVE))
  def test_kept_namespace_import_is_reported_where_it_fails(self, to):
    # A tester's notebook (neural-audio-fp): the import stays for a member
    # mplso does not serve, and with no install() it stops the program at
    # the import, before the line the member's WARNING names.
    source = """\
        import tensorflow as tf
        import tensorflow.keras.mixed_precision.experimental as mp

        print(mp.get_layer_policy(layer))
        """
    result = upgrade_cases.assert_upgrade(source, source, [
        "a.py:2: WARNING: Kept "
        "'import tensorflow.keras.mixed_precision.experimental as mp'",
        "    kept: TF 2.21 lacks `tensorflow.keras.mixed_precision."
        "experimental`, so this import stops the program "
        "(ModuleNotFoundError) unless `mplso.compat.install()` runs before "
        "it; the file still reads it as written (`mp.get_layer_policy`, "
        "line 4)",
        "a.py:4: WARNING: Kept 'mp.get_layer_policy'",
        "    kept: `tf.keras.mixed_precision.experimental.get_layer_policy` "
        "is not one of the names mplso serves; TF 2.21 lacks it (so does "
        "`python -m mplso.compat`)"], reasons=True, to=to)
    self.assertFalse(result.installs)

  def test_other_contrib_modules_are_not_ours(self):
    source = """\
        import tensorflow as tf
        from tensorflow.contrib import slim
        layers = tf.contrib.layers
        """
    assert_upgrade(source, source, [])

  def test_probe_in_a_try_stays(self):
    # A program's test for an old TensorFlow keeps failing on TF 2.21.
    source = textwrap.dedent("""\
        try:
          from tensorflow.keras.mixed_precision import experimental as mp
          import tensorflow.contrib.mixed_precision
          OLD = True
        except ImportError:
          OLD = False
        """)
    result = rewrite.upgrade_source(source)
    self.assertEqual(source, result.code)
    self.assertLen(result.edits, 2)
    for edit in result.edits:
      self.assertStartsWith(edit.why, "kept: inside a `try`")

  def test_unused_import_of_a_namespace_tf_lacks_goes(self):
    result = assert_upgrade("""\
        import tensorflow as tf
        from tensorflow.keras.mixed_precision import experimental as mp
        """, "import tensorflow as tf\n", [
            "a.py:2: INFO: Changed 'from tensorflow.keras.mixed_precision "
            "import experimental as mp' to '(removed)'"])
    self.assertIn("nothing in the file uses it", result.edits[0].why)

  def test_comment_of_a_rewritten_import_stays(self):
    assert_upgrade("""\
        from tensorflow.contrib.mixed_precision import A, B  # noqa: TF1
        """.replace("A, B", "LossScaleOptimizer, FixedLossScaleManager"), """\
        from mplso.contrib import LossScaleOptimizer
        from mplso.contrib import FixedLossScaleManager  # noqa: TF1
        """)


@pytest.mark.slow
class FileInvariantsTest(parameterized.TestCase):

  SOURCES = sorted(glob.glob(os.path.join(ROOT, "examples", "**", "*.py"),
                             recursive=True))

  @parameterized.parameters(
      (edits_lib.MPLSO, KERAS_3), (NATIVE, KERAS_3), (NATIVE, TF_KERAS))
  def test_second_run_changes_nothing(self, to, keras):
    for path in self.SOURCES:
      with open(path, encoding="utf-8") as f:
        source = f.read()
      once = rewrite.upgrade_source(source, to=to, keras=keras)
      twice = rewrite.upgrade_source(once.code, to=to, keras=keras)
      self.assertEqual(once.code, twice.code, path)
      self.assertFalse(twice.changed, (path, twice.edits))

  @parameterized.parameters(
      (edits_lib.MPLSO, KERAS_3), (NATIVE, KERAS_3), (NATIVE, TF_KERAS))
  def test_only_edited_lines_change(self, to, keras):
    # Every original line that the result changes holds the old text of an
    # edit (its first line, for an edit over several lines): comments,
    # docstrings and every other line stay byte for byte.
    for path in self.SOURCES:
      with open(path, encoding="utf-8") as f:
        source = f.read()
      result = rewrite.upgrade_source(source, to=to, keras=keras)
      olds = [e.old for e in result.edits if e.old]
      for line in changed_lines(source, result.code):
        self.assertTrue(
            any(piece and piece in line for old in olds
                for piece in old.splitlines()), (path, line))


class NativeTest(absltest.TestCase):
  """`upgrade_source`'s second plan under `--to native`."""

  def test_scaling_an_optimizer_the_file_cannot_trace_keeps_mplso(self):
    result = upgrade("""\
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)
        def step(other, loss):
          return other.get_scaled_loss(loss), other.get_unscaled_gradients(g)
        """, to=NATIVE)
    self.assertIn("opt = mplso.keras.LossScaleOptimizer(sgd)", result.code)
    [edit] = [e for e in result.edits if e.line == 2]
    self.assertIn("held in the module-level name `opt` (line 2), which "
                  "other modules can import), and this file:4 calls "
                  "`get_scaled_loss`", edit.why)


if __name__ == "__main__":
  absltest.main()
