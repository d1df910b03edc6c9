"""The coverage table of docs/upgrade.md is what the upgrade does today.

`mplso_test.helpers.upgrade_coverage` runs the upgrade on every spelling,
reached every way, and raises on a use it neither rewrites nor warns about.
"""

from absl.testing import absltest

from mplso._src.compat import spellings as compat_spellings
from mplso._src.upgrade import edits
from mplso_test.helpers import upgrade_coverage


class CoverageTest(absltest.TestCase):

  def test_docs_show_the_table(self):
    with open(upgrade_coverage.DOC, encoding="utf-8") as f:
      shown = upgrade_coverage.in_doc(f.read())
    self.assertEqual(
        upgrade_coverage.markdown(), shown,
        "run `python -m mplso_test.helpers.upgrade_coverage --write`")

  def test_every_cell_is_rewritten_warned_or_today(self):
    table = upgrade_coverage.cells()
    for column, cells in table.items():
      self.assertLen(cells, len(compat_spellings.SPELLINGS), column)
      self.assertContainsSubset(set(cells), {
          upgrade_coverage.REWRITTEN, upgrade_coverage.WARNED,
          upgrade_coverage.TODAY}, column)

  def test_a_use_with_no_line_is_a_silent_miss(self):
    row = compat_spellings.SPELLINGS[0]
    with self.assertRaises(upgrade_coverage.SilentMiss):
      upgrade_coverage.cell(row, [], "a use with no report line")
    renamed_elsewhere = edits.renamed(3, "x", "mplso.LossScale")
    with self.assertRaises(upgrade_coverage.SilentMiss):
      upgrade_coverage.cell(row, [renamed_elsewhere], "another name")
    self.assertEqual(upgrade_coverage.WARNED, upgrade_coverage.cell(
        row, [edits.warned(3, "x", "why")], "kept"))


if __name__ == "__main__":
  absltest.main()
