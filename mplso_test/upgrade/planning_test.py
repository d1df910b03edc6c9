"""Tests `planning`: one source file's facts, and the plan for it."""

import textwrap

from absl.testing import absltest
from absl.testing import parameterized
import libcst as cst
from libcst import metadata

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import planning


def source_file(text: str) -> planning.SourceFile:
  """The `SourceFile` of `text` (dedented), under Keras 3."""
  wrapper = metadata.MetadataWrapper(cst.parse_module(textwrap.dedent(text)))
  return planning.SourceFile(wrapper, edits_lib.KERAS_3, path="a.py")


def calls(source: planning.SourceFile) -> list[str]:
  """The text of every call of `source`, in the tree's order."""
  return [source.code(n) for n in source.parents if isinstance(n, cst.Call)]


class SourceFileTest(parameterized.TestCase):

  def test_code_line_and_statement_of_a_node(self):
    source = source_file("""\
        import tensorflow as tf
        x = tf.constant(1); y = 2
        """)
    [call] = [n for n in source.parents if isinstance(n, cst.Call)]
    self.assertEqual("tf.constant(1)", source.code(call))
    self.assertEqual(2, source.line(call))
    self.assertEqual("x = tf.constant(1); y = 2\n",
                     source.code(source.statement_of(call)))
    self.assertTrue(source.inside(call.func, call))
    self.assertTrue(source.inside(call, call))
    self.assertFalse(source.inside(call, call.func))

  def test_optimizer_sites_are_legacy_and_mplso_classes(self):
    source = source_file("""\
        import tensorflow as tf
        import mplso.keras
        a = tf.keras.mixed_precision.experimental.LossScaleOptimizer(s, 8)
        b = mplso.keras.LossScaleOptimizer(s)
        c = tf.keras.optimizers.SGD()
        model.compile(optimizer=a)
        """)
    self.assertEqual(
        ["tf.keras.mixed_precision.experimental.LossScaleOptimizer(s, 8)",
         "mplso.keras.LossScaleOptimizer(s)"],
        [source.code(n) for n in source.optimizer_sites()])
    self.assertEqual(
        [source.code(n) for n in source.optimizer_sites()] +
        ["model.compile(optimizer=a)"],
        [source.code(n) for n in source.sites_and_compiles()])

  @parameterized.named_parameters(
      ("plain_optimizer", "model.compile(tf.keras.optimizers.SGD())",
       ["model.compile(tf.keras.optimizers.SGD())"]),
      ("no_optimizer", "model.compile(loss='mse')",
       ["model.compile(loss='mse')"]),
      ("wrapped_by_the_file", "model.compile(optimizer=opt)", []),
  )
  def test_wrapping_compiles(self, line, expected):
    source = source_file(f"""\
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)
        {line}
        """)
    self.assertEqual(expected,
                     [source.code(n) for n in source.wrapping_compiles()])
    self.assertIs(source.wrapping_compiles(), source.wrapping_compiles())

  def test_an_override_that_wraps_makes_no_compile_wrap(self):
    source = source_file("""\
        import tensorflow as tf
        class Model(tf.keras.Model):
          def compile(self, optimizer):
            super().compile(
                tf.keras.mixed_precision.LossScaleOptimizer(optimizer))
        model.compile(tf.keras.optimizers.SGD())
        """)
    self.assertEmpty(source.wrapping_compiles())

  @parameterized.named_parameters(
      ("method", "m.compile(x)", True),
      ("function", "compile(x)", False),
      ("attribute", "m.compile", False),
      ("other_method", "m.fit(x)", False),
  )
  def test_is_compile(self, text, expected):
    self.assertEqual(expected,
                     planning.is_compile(cst.parse_expression(text)))


class PlanTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.source = source_file("""\
        import tensorflow as tf
        tf.train.experimental.LossScale
        tf.keras.mixed_precision.experimental.global_policy
        """)
    self.names = [n for n in self.source.parents
                  if isinstance(n, cst.Attribute) and
                  isinstance(self.source.parents[n], cst.Expr)]

  def test_rename_plans_the_node_its_import_and_its_edit(self):
    plan = planning.Plan()
    plan.rename(self.source, self.names[0], "mplso.LossScale")
    self.assertEqual("mplso.LossScale",
                     self.source.code(plan.replace[self.names[0]]))
    self.assertEqual({"mplso"}, plan.modules)
    self.assertEqual([edits_lib.renamed(2, "tf.train.experimental.LossScale",
                                        "mplso.LossScale")], plan.edits)

  def test_rename_with_a_reason_is_a_change(self):
    plan = planning.Plan()
    plan.rename(self.source, self.names[1], "tf.keras.x", "why")
    self.assertEqual(set(), plan.modules)  # Not a name of mplso's.
    self.assertEqual(edits_lib.CHANGED, plan.edits[0].kind)

  def test_warn_reports_the_node_as_it_is(self):
    plan = planning.Plan()
    plan.warn(self.source, self.names[1], "look here")
    self.assertEqual(
        [edits_lib.warned(
            3, "tf.keras.mixed_precision.experimental.global_policy",
            "look here")], plan.edits)
    self.assertEqual({}, plan.replace)

  def test_needs_the_module_of_a_name(self):
    plan = planning.Plan()
    plan.needs("mplso.keras.LossScaleOptimizer")
    self.assertEqual({"mplso.keras"}, plan.modules)


if __name__ == "__main__":
  absltest.main()
