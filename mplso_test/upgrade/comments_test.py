"""Tests `comments`: the comments of replaced code go with what replaces it."""

from absl.testing import absltest
from absl.testing import parameterized
import libcst as cst

from mplso._src.upgrade import comments


def _expression(text):
  return cst.parse_expression(text)


class CarryTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("after_the_last_dot",
       "(tf.train.experimental.  # why\n       LossScale)",
       "mplso.LossScale",
       "(mplso.  # why\n       LossScale)"),
      ("every_comment_once",
       "(tf.train.  # one\n  experimental.  # two\n  LossScale)",
       "mplso.LossScale",
       "(mplso.  # one\n  # two\n  LossScale)"),
      ("a_call_brings_its_brackets",
       'getattr(tf.train.experimental,  # by name\n  "LossScale")',
       "mplso.LossScale",
       "(mplso.  # by name\n  LossScale)"),
      ("a_bare_name_gets_parentheses",
       "(tf.train.  # why\n  experimental.LossScale)",
       "LossScale",
       "(  # why\n  LossScale)"),
  )
  def test_carry(self, old, new, expected):
    # A parenthesized chain brings its parentheses, as a call does.
    carried = comments.carry(_expression(old), _expression(new))
    self.assertEqual(expected, cst.Module([]).code_for_node(carried))

  def test_no_comment_no_change(self):
    new = _expression("mplso.LossScale")
    self.assertIs(new, comments.carry(_expression(
        "tf.train.experimental.LossScale"), new))

  def test_inside(self):
    self.assertEqual(["# a", "# b"], comments.inside(_expression(
        "f(x,  # a\n  # b\n  y)")))


class ImportCommentsTest(absltest.TestCase):

  STATEMENT = cst.parse_statement(
      "from a import (  # head\n"
      "    B,  # about B\n"
      "    # above C\n"
      "    C,\n"
      "    D  # about D\n"
      ")\n").body[0]

  def test_own_comments(self):
    b, c, d = self.STATEMENT.names
    self.assertEqual((["# head"], "# about B"),
                     comments.own_comments(self.STATEMENT, b))
    self.assertEqual((["# above C"], None),
                     comments.own_comments(self.STATEMENT, c))
    self.assertEqual(([], "# about D"),
                     comments.own_comments(self.STATEMENT, d))

  def test_with_comments(self):
    statement = comments.with_comments(
        cst.parse_statement("import x\n"), ["# above"], "# after")
    self.assertEqual("# above\nimport x  # after\n",
                     cst.Module([statement]).code)

  def test_in_place_of(self):
    line = cst.parse_module("x = 1\n\n# lead\nimport a, b  # end\n").body[1]
    new = [cst.parse_statement("import a\n"),
           cst.parse_statement("import b  # own\n")]
    self.assertEqual("\n# lead\nimport a\n# own\nimport b  # end\n",
                     cst.Module(comments.in_place_of(line, new)).code)


if __name__ == "__main__":
  absltest.main()
