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


if __name__ == "__main__":
  absltest.main()
