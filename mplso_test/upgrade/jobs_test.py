"""Tests for `jobs` (`-j N`): several processes, the same results.

Each case converts the same tree with `-j 1` and `-j 2` and compares every
output file and the report, whole.
"""

import os
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized

from mplso._src.upgrade import cli
from mplso._src.upgrade import rewrite
from mplso_test.helpers.upgrade_cases import run_main

# An optimizer built in one file and read in another that imports it:
# `--to native` keeps it on mplso only if both files' facts meet.
TREE = {
    "a.py": "import tensorflow as tf\n\n\ndef make():\n"
            "  return tf.keras.mixed_precision.LossScaleOptimizer(\n"
            "      tf.keras.optimizers.SGD())\n",
    "b.py": "import a\n\nopt = a.make()\nprint(opt.loss_scale)\n",
    "c.py": "import tensorflow as tf\n"
            "x = tf.train.experimental.DynamicLossScale()\n",
    "d.py": "def plain():\n  return 1\n",
    "e.py": "import tensorflow as tf\n"
            "opt = tf.train.experimental.enable_mixed_precision_graph_rewrite("
            "tf.compat.v1.train.GradientDescentOptimizer(0.1))\n",
}


def read(path):
  with open(path, encoding="utf-8") as f:
    return f.read()


class JobsTest(parameterized.TestCase):

  def tree(self, texts):
    folder = self.create_tempdir().full_path
    src = os.path.join(folder, "src")
    os.makedirs(src)
    for name, text in texts.items():
      with open(os.path.join(src, name), "w", encoding="utf-8") as f:
        f.write(text)
    return folder, src

  def convert(self, folder, src, jobs, *args):
    out = os.path.join(folder, f"out{jobs}")
    report = os.path.join(folder, f"r{jobs}.txt")
    status, _, err = run_main("--intree", src, "--outtree", out,
                              "--reportfile", report, "-j", str(jobs), *args)
    outputs = {name: read(os.path.join(out, name)) for name in
               sorted(os.listdir(out))}
    # The report names the output folder; the rest must be the same.
    return status, err, outputs, read(report).replace(out, "OUT")

  @parameterized.parameters("mplso", "native")
  def test_same_files_and_report_as_one_process(self, to):
    folder, src = self.tree(TREE)
    one = self.convert(folder, src, 1, "--to", to)
    two = self.convert(folder, src, 2, "--to", to)
    self.assertEqual(one, two)
    self.assertEqual(0, two[0])
    self.assertIn("mplso.keras.LossScaleOptimizer(", two[2]["a.py"])
    self.assertNotEqual(TREE["c.py"], two[2]["c.py"])

  def test_a_file_that_raises_is_reported_alone(self):
    folder, src = self.tree({**TREE, "c.py": TREE["c.py"] + "# BOOM\n"})
    real = rewrite.upgrade_source

    def upgrade_source(text, **kwargs):
      if "BOOM" in text:
        raise RecursionError("maximum recursion depth exceeded")
      return real(text, **kwargs)

    # Forked workers inherit the patch.
    with mock.patch.object(rewrite, "upgrade_source", upgrade_source):
      status, err, outputs, report = self.convert(folder, src, 2)
    self.assertEqual(1, status)
    error = (f"{src}/c.py: ERROR: could not be converted: RecursionError: "
             "maximum recursion depth exceeded; copied unchanged\n")
    self.assertEqual(error, err)
    self.assertIn(error, report)
    self.assertEqual(TREE["c.py"] + "# BOOM\n", outputs["c.py"])
    self.assertIn("mplso.enable_mixed_precision_graph_rewrite",
                  outputs["e.py"])

  @parameterized.parameters("-1", "two", "1.5")
  def test_a_bad_count_is_refused(self, value):
    folder, src = self.tree({"d.py": TREE["d.py"]})
    status, _, err = run_main("--intree", src, "--outtree",
                              os.path.join(folder, "out"), "-j", value)
    self.assertEqual(cli.BAD_COMMAND_LINE, status)
    self.assertIn(f"{value!r} is not a number of processes: give 0 (one "
                  "per CPU) or more", err)
    self.assertFalse(os.path.exists(os.path.join(folder, "out")))


if __name__ == "__main__":
  absltest.main()
