"""Tests `edits`: one file's edits and outcome."""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized

from mplso._src.upgrade import edits

RENAMED = edits.renamed(2, "tf.train.experimental.LossScale",
                         "mplso.LossScale")
ADDED = edits.added("import mplso")
KEPT = edits.warned(3, "tf.x", "kept: TF 2.21 lacks it")


class UpgradedTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("no_edits", [], False),
      ("only_kept_names", [KEPT, KEPT], False),
      ("renamed", [KEPT, RENAMED], True),
      ("added", [ADDED], True),
  )
  def test_changed(self, file_edits, changed):
    self.assertEqual(changed, edits.Upgraded("x = 1\n", file_edits).changed)

  def test_defaults(self):
    result = edits.Upgraded("x = 1\n", [])
    self.assertIsNone(result.error)
    self.assertFalse(result.installs)


class EditTest(absltest.TestCase):

  def test_plain_rename_has_no_why_and_cannot_change(self):
    self.assertEqual("", RENAMED.why)
    with self.assertRaises(dataclasses.FrozenInstanceError):
      RENAMED.new = "other"


class AcknowledgeTest(absltest.TestCase):

  def test_a_warned_line_with_the_comment_is_kept(self):
    text = "a = 1\nb = f(x)  # mplso-upgrade: ok, checked by hand\nc = g(y)\n"
    warned = [edits.warned(2, "f", "why f"), edits.warned(3, "g", "why g"),
              edits.renamed(2, "x", "y")]
    self.assertEqual([
        edits.kept(2, "f", "acknowledged (`# mplso-upgrade: ok`): why f"),
        warned[1], warned[2]], edits.acknowledge(warned, text))

  def test_the_words_outside_a_comment_or_on_another_line_do_nothing(self):
    text = "s = 'mplso-upgrade: ok'\n# mplso-upgrade: ok\nf(x)\n"
    warned = [edits.warned(1, "s", "why"), edits.warned(3, "f", "why"),
              edits.warned(0, "", "no line"), edits.warned(9, "", "past")]
    self.assertEqual(warned, edits.acknowledge(warned, text))


if __name__ == "__main__":
  absltest.main()
