"""Tests for `sparse`: LibCST sees only what it needs, and nothing changes.

The upgrade of a file through `sparse` must be the upgrade of the whole
file, text, edits and report alike. That is checked on every spelling in
every reach form (the coverage table's files), on the legacy corpus and
on crafted files whose decisions depend on statements far apart, each
padded with statements the upgrade does not need; both modes, both Keras.
"""

import ast
import glob
import os
import textwrap

from absl.testing import absltest
from absl.testing import parameterized
import pytest

from mplso._src.compat import spellings as compat_spellings
from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import parsed as parsed_lib
from mplso._src.upgrade import rewrite
from mplso._src.upgrade import sparse
from mplso_test.helpers import upgrade_coverage

NATIVE, MPLSO = edits_lib.NATIVE, edits_lib.MPLSO
KERAS_3, TF_KERAS = edits_lib.KERAS_3, edits_lib.TF_KERAS
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
MODES = ((MPLSO, KERAS_3), (NATIVE, KERAS_3), (NATIVE, TF_KERAS))


def padded(source: str) -> str:
  """`source` with unrelated top-level statements after each of its own."""
  tree = ast.parse(source)
  lines = sparse.lines_of(source)
  ends = {statement.end_lineno for statement in tree.body}
  out = []
  for number, line in enumerate(lines, 1):
    out.append(line)
    following = lines[number] if number < len(lines) else ""
    if (number in ends and line.endswith("\n") and
        not following[:1].isspace()):
      out.append(f"def _unrelated_{number}(a, b=None):\n"
                 f"  c = tf.add(a, {number})  # experimental\n"
                 "  return [c, b]\n\n"
                 f"_value_{number} = _unrelated_{number}(2)\n")
  return "".join(out)


def _coverage_files():
  for files in upgrade_coverage._files(  # pylint: disable=protected-access
      compat_spellings.SPELLINGS).values():
    for text, _ in files:
      yield text


def _corpus_files():
  for path in sorted(glob.glob(os.path.join(ROOT, "examples", "**", "*.py"),
                               recursive=True)):
    with open(path, encoding="utf-8") as f:
      yield path, f.read()


FAR_APART = {
    # `compile` wraps under a policy set elsewhere; the model's optimizer is
    # read in a callback far below (it keeps the policy on mplso).
    "policy_and_optimizer_read": """\
        import tensorflow as tf

        def setup():
          tf.keras.mixed_precision.experimental.set_policy('mixed_float16')

        def unrelated(x):
          return x + 1

        def build(model):
          model.compile(optimizer="sgd", loss="mse")

        def on_reset(state):
          print(state.model.optimizer.lr)
        """,
    # An optimizer held by a module-level name, by an attribute of another
    # object and returned by a function, used in statements far below.
    "holders": """\
        import tensorflow as tf
        from tensorflow.keras.mixed_precision import experimental as mp

        OPT = mp.LossScaleOptimizer(tf.keras.optimizers.SGD(), "dynamic")

        def unrelated(x):
          return x + 1

        def build(cfg):
          cfg.opt = mp.LossScaleOptimizer(tf.keras.optimizers.SGD(), 128)
          return cfg

        def unrelated_too(y):
          return y * 2

        def later(cfg):
          print(cfg.opt.get_config(), OPT.get_config())

        def main():
          print(build(object()).opt.iterations)

        if __name__ == "__main__":
          main()
        """,
    # A private module's parts spelled over statements; a namespace alias.
    "parts_apart": """\
        from tensorflow.python.training import experimental
        import tensorflow as tf
        mpx = tf.keras.mixed_precision.experimental

        def unrelated(x):
          return x + 1

        def use():
          return experimental.loss_scale.get("dynamic"), mpx.global_policy()
        """,
    # An already-upgraded file: mplso's own names, `install()` called
    # (it stays as it is: `install()` is not added twice).
    "mplso_names": """\
        import mplso.compat
        mplso.compat.install()
        import tensorflow as tf
        from mplso import compat

        def unrelated(x):
          return x + 1

        def use(model):
          compat.set_policy("mixed_float16")
          model.compile(optimizer="sgd")
        """,
    # A class overriding apply_gradients, a checkpoint read back.
    "overrides_and_restores": """\
        import tensorflow as tf

        class Inner(tf.keras.optimizers.SGD):
          def apply_gradients(self, grads_and_vars):
            return super().apply_gradients(grads_and_vars)

        def unrelated(x):
          return x + 1

        def make():
          return tf.keras.mixed_precision.LossScaleOptimizer(Inner())

        def resume(opt):
          tf.train.Checkpoint(optimizer=opt).restore("ckpt")
        """,
}


# Decisions that join methods of one class far apart: each class has a
# method `unrelated` that names nothing and is blanked.
FAR_APART_IN_A_CLASS = {
    "self_attribute_read_in_another_method": """\
        import tensorflow as tf

        class Trainer:
          def __init__(self, opt):
            self.opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)

          def unrelated(self, x):
            return x + 1

          def hand(self):
            return run(self.opt)
        """,
    "through_a_local_into_an_attribute": """\
        import tensorflow as tf

        class Trainer:
          def __init__(self, opt):
            wrapped = tf.keras.mixed_precision.LossScaleOptimizer(opt)
            self.keep = wrapped

          def unrelated(self, x):
            return x + 1

          def hand(self):
            return run(self.keep)
        """,
    "property_and_its_setter": """\
        import tensorflow as tf

        class Trainer:
          @property
          def opt(self):
            return self._opt

          def unrelated(self, x):
            return x + 1

          @opt.setter
          def opt(self, value):
            self._opt = tf.keras.mixed_precision.LossScaleOptimizer(value)

          def hand(self):
            return run(self._opt)
        """,
    "global_set_in_a_method": """\
        import tensorflow as tf
        OPT = None

        class Holder:
          def unrelated(self, x):
            return x + 1

          def build(self, opt):
            global OPT
            OPT = opt

          def wrap(self):
            return tf.keras.mixed_precision.LossScaleOptimizer(OPT)
        """,
    "private_module_read_in_a_method": """\
        from tensorflow.python.training.experimental import loss_scale as ls

        class Scaler:
          def unrelated(self, x):
            return x + 1

          def make(self):
            return ls.get("dynamic")
        """,
    "getattr_in_a_method": """\
        import tensorflow as tf

        class Finder:
          def unrelated(self, x):
            return x + 1

          def find(self):
            return getattr(tf, "contrib")
        """,
    "compiled_optimizer_handed_on": """\
        import tensorflow as tf
        tf.keras.mixed_precision.set_global_policy("mixed_float16")

        class Runner:
          def unrelated(self, x):
            return x + 1

          def fit(self, model):
            model.compile(optimizer="sgd", loss="mse")
            opt = model.optimizer
            self.saved = opt

          def hand(self):
            return run(self.saved)
        """,
    "prose_names_nothing": """\
        import tensorflow as tf

        class Quiet:
          def unrelated(self, x):
            \"\"\"Says tf.train.experimental.LossScale in prose.\"\"\"
            # tf.keras.mixed_precision.experimental.LossScaleOptimizer
            return "tf.keras.mixed_precision.experimental" + x

          def uses(self):
            return tf.keras.mixed_precision.experimental.global_policy()
        """,
}


class SameAsWholeTest(parameterized.TestCase):
  """Through `sparse` or whole, the upgrade of a file is the same."""

  def assert_same(self, source: str, to: str, keras: str) -> None:
    whole = rewrite._upgrade_whole(  # pylint: disable=protected-access
        source, to, keras, None, "f.py")
    fast = rewrite.upgrade_source(source, to=to, keras=keras, path="f.py")
    self.assertEqual(whole.code, fast.code)
    self.assertEqual(whole.edits, fast.edits)
    self.assertEqual((whole.error, whole.installs),
                     (fast.error, fast.installs))

  @pytest.mark.slow
  def test_every_spelling_in_every_reach_form(self):
    reduced = 0
    for text in _coverage_files():
      source = padded(text)
      # Not where a star import binds what is not known, nor where the
      # file spells a private path's parts ("experimental" is one, in every
      # padding): then every statement spelling one is kept.
      reduced += parsed_lib.parse(source).reduced is not None
      for to, keras in MODES:
        with self.subTest(to=to, keras=keras, text=text[:200]):
          self.assert_same(source, to, keras)
    self.assertGreater(reduced, 2)

  @pytest.mark.slow
  def test_legacy_corpus(self):
    for path, text in _corpus_files():
      source = padded(text)
      for to, keras in MODES:
        with self.subTest(path=os.path.basename(path), to=to, keras=keras):
          self.assert_same(source, to, keras)

  @parameterized.named_parameters(
      *FAR_APART.items(),
      *((f"in_a_class_{name}", text)
        for name, text in FAR_APART_IN_A_CLASS.items()))
  def test_decisions_that_join_far_statements(self, text):
    source = padded(textwrap.dedent(text))
    reduced = parsed_lib.parse(source).reduced
    self.assertIsNotNone(reduced)
    self.assertNotIn("def unrelated(", reduced.text)
    for to, keras in MODES:
      with self.subTest(to=to, keras=keras):
        self.assert_same(source, to, keras)
        if "mplso" not in text:
          result = rewrite.upgrade_source(source, to=to, keras=keras)
          self.assertTrue(result.edits or result.code != source)


class ReduceTest(absltest.TestCase):

  def test_keeps_lines_and_blanks_what_names_nothing(self):
    source = textwrap.dedent("""\
        '''Docs.'''
        import tensorflow as tf  # a comment stays

        @decorator
        def unrelated(x):
          return tf.add(x, 1)

        # Between: a comment that names nothing.
        VALUE = unrelated(2); OTHER = 3


        def uses():
          return tf.keras.mixed_precision.experimental.global_policy()
        """)
    reduced = sparse.reduce(source, ast.parse(source))
    self.assertEqual(textwrap.dedent('''\
        \'\'\'Docs.\'\'\'
        import tensorflow as tf  # a comment stays

        pass; """mplso-blanked-0
        
        
        
        
        """


        def uses():
          return tf.keras.mixed_precision.experimental.global_policy()
        '''), reduced.text)
    self.assertEqual(((3, 8),), reduced.blanked)
    self.assertEqual(len(sparse.lines_of(source)),
                     len(sparse.lines_of(reduced.text)))

  def test_a_helper_a_kept_statement_calls_is_kept(self):
    source = textwrap.dedent("""\
        import tensorflow as tf

        def helper(opt):
          return opt

        def unrelated():
          return 1

        def uses():
          return helper(tf.keras.mixed_precision.LossScaleOptimizer(None))
        """)
    reduced = sparse.reduce(source, ast.parse(source))
    self.assertIn("def helper", reduced.text)
    self.assertNotIn("def unrelated", reduced.text)

  def test_line_breaks_kept_on_every_line(self):
    source = ("import tensorflow as tf\r\n\r\ndef f():\r\n  return 1\r\n"
              "\r\nx = tf.train.experimental.LossScale\r\n")
    reduced = sparse.reduce(source, ast.parse(source))
    self.assertEqual([line[-2:] for line in sparse.lines_of(source)],
                     [line[-2:] for line in sparse.lines_of(reduced.text)])
    result = rewrite.upgrade_source(source)
    self.assertEqual(source.replace("tf.train.experimental.LossScale",
                                    "mplso.LossScale"),
                     result.code.replace("import mplso\r\n", ""))
    self.assertEqual(6, result.edits[-1].line)

  def test_all_of_a_file_that_needs_it(self):
    for source in (
        # Every statement is needed.
        "import tensorflow as tf\nx = tf.train.experimental.LossScale\n",
        # A star import of a legacy namespace binds names not known here.
        "from tensorflow.keras.mixed_precision.experimental import *\n"
        "def f():\n  return 1\nglobal_policy()\n",
        # Lone carriage returns count lines differently.
        "import tensorflow as tf\rdef f():\r  return 1\r"
        "x = tf.train.experimental.LossScale\r",
        # The text that marks blanked lines is the file's own.
        "def f():\n  return 1\ns = 'pass; \"\"\"mplso-blanked-0'\n"
        "x = tf.train.experimental.LossScale\n"):
      with self.subTest(source=source):
        self.assertIsNone(sparse.reduce(source, ast.parse(source)))


class SpliceTest(absltest.TestCase):

  SOURCE = textwrap.dedent("""\
      import tensorflow as tf

      def unrelated(x):
        return x

      def uses():
        return tf.train.experimental.LossScale
      """)

  def test_changes_outside_blanked_lines_come_back(self):
    reduced = sparse.reduce(self.SOURCE, ast.parse(self.SOURCE))
    upgraded = reduced.text.replace("import tensorflow as tf\n",
                                    "import mplso\nimport tensorflow as tf\n")
    self.assertEqual("import mplso\n" + self.SOURCE,
                     sparse.splice(self.SOURCE, reduced, upgraded))

  def test_kept_statements_may_move_across_blanked_lines(self):
    reduced = sparse.reduce(self.SOURCE, ast.parse(self.SOURCE))
    lines = sparse.lines_of(reduced.text)
    first, last = reduced.blanked[0]
    moved = lines[:first] + lines[last + 1:] + lines[first:last + 1]
    source = sparse.lines_of(self.SOURCE)
    self.assertEqual(
        "".join(source[:first] + source[last + 1:] +
                source[first:last + 1]),
        sparse.splice(self.SOURCE, reduced, "".join(moved)))

  def test_a_changed_twice_or_lost_blanked_line_is_refused(self):
    reduced = sparse.reduce(self.SOURCE, ast.parse(self.SOURCE))
    lines = sparse.lines_of(reduced.text)
    first, last = reduced.blanked[0]
    changed = lines[:first + 1] + ["x\n"] + lines[first + 2:]
    twice = lines + lines[first:last + 1]
    lost = lines[:first] + lines[last + 1:]
    for upgraded in (changed, twice, lost):
      with self.subTest(upgraded=upgraded):
        self.assertIsNone(
            sparse.splice(self.SOURCE, reduced, "".join(upgraded)))

  def test_upgrade_falls_back_to_the_whole_file(self):
    real = sparse.splice
    calls = []

    def refuse(*args):
      calls.append(real(*args))
      return None

    sparse.splice = refuse
    try:
      result = rewrite.upgrade_source(self.SOURCE)
    finally:
      sparse.splice = real
    self.assertLen(calls, 1)
    self.assertEqual(calls[0], result.code)


if __name__ == "__main__":
  absltest.main()
