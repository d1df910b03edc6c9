"""Tests for `benchmarks.upgrade_speed`: its workloads and its tables.

Timings are not asserted (they depend on the machine); the synthesized file,
the floor's counts, the check that outputs still parse and the commit the
tables name are.
"""

import ast
import os
import tempfile

from absl.testing import absltest

from benchmarks import upgrade_speed
from mplso._src.upgrade import rewrite


class UpgradeSpeedTest(absltest.TestCase):

  def test_big_file_has_the_lines_and_the_uses_asked_for(self):
    text = upgrade_speed.big_file(2000, 7)
    ast.parse(text)
    self.assertBetween(text.count("\n"), 1990, 2000)
    self.assertEqual(7, text.count("LossScaleOptimizer("))
    new = rewrite.upgrade_source(text).code
    self.assertEqual(7, new.count("mplso.keras.LossScaleOptimizer("))

  def test_floor_counts_files_and_lines_and_skips_what_fails(self):
    with tempfile.TemporaryDirectory() as root:
      for name, text in (("a.py", "x = 1\ny = 2\n"), ("b.py", "def (:\n"),
                         ("c.txt", "not python\n")):
        with open(os.path.join(root, name), "w") as f:
          f.write(text)
      got = upgrade_speed.floor([root])
    self.assertEqual((2, 3), (got["files"], got["lines"]))
    self.assertEqual([os.path.join(root, "a.py")], got["parsed"])

  def test_missing_package_is_skipped(self):
    with tempfile.TemporaryDirectory() as site:
      os.makedirs(os.path.join(site, "keras"))
      with open(os.path.join(site, "keras", "m.py"), "w") as f:
        f.write("import tensorflow as tf\n"
                "o = tf.train.experimental.FixedLossScale(8)\n")
      got = upgrade_speed.packages(site)
    self.assertEqual(["keras"], got["packages"])
    for mode in upgrade_speed.MODES:
      self.assertEqual([0], got["modes"][mode]["statuses"])
      self.assertEqual([], got["modes"][mode]["broken"])
      # --check: the file would change, and needs no person.
      self.assertEqual([1], got["checks"][mode]["statuses"])
    self.assertGreater(got["copy"]["seconds"], 0)

  def test_tables_name_the_commit(self):
    data = {
        "meta": {"commit": "abc1234", "tool_dirty": False,
                 "command": "python -m benchmarks.upgrade_speed",
                 "when": "now", "machine": "x86_64, 2 CPUs, Linux"},
        "packages": {"packages": ["keras"],
                     "floor": {"seconds": 2.0, "files": 3, "lines": 40},
                     "copy": {"seconds": 3.0},
                     "checks": {"mplso": {"seconds": 4.0, "statuses": [3]}},
                     "modes": {"mplso": {"seconds": 5.0, "statuses": [0],
                                         "broken": []}}},
        "file": {"lines": 20000, "uses": 20, "floor": {"seconds": 0.5},
                 "modes": {"mplso": {"seconds": 1.5, "status": 0,
                                     "parses": True}}},
    }
    text = upgrade_speed.markdown(data)
    self.assertIn("measured at commit abc1234", text.lower())
    self.assertIn("| --check --to mplso | 4.0 | 2.00 |  | 3 |  |", text)
    self.assertIn("| --outtree --to mplso | 5.0 | 2.50 | 1.00 | 0 | 0 |",
                  text)


if __name__ == "__main__":
  absltest.main()
