"""Tests `python -m mplso.upgrade`'s command line, files and report."""

import os
import subprocess
import sys

from absl.testing import absltest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
LEGACY = """\
import tensorflow as tf  # comment kept

opt = tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer(sgd, 1)
"""


def upgrade(*args, cwd=None, env=None):
  environment = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [ROOT, os.environ.get("PYTHONPATH", "")]), **(env or {}))
  return subprocess.run([sys.executable, "-X", "importtime", "-m",
                         "mplso.upgrade", *args], capture_output=True,
                        text=True, cwd=cwd, env=environment, timeout=120)


def write(path, text):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def read(path):
  with open(path, encoding="utf-8") as f:
    return f.read()


class CommandLineTest(absltest.TestCase):

  def test_help_imports_no_tensorflow(self):
    proc = upgrade("--help")
    self.assertEqual(0, proc.returncode, proc.stderr)
    for flag in ("--infile", "--outfile", "--intree", "--outtree",
                 "--copyotherfiles", "--inplace", "--reportfile", "--to"):
      self.assertIn(flag, proc.stdout)
    self.assertNotIn("tensorflow", proc.stderr)  # -X importtime's list

  def test_one_file_with_report(self):
    folder = self.create_tempdir().full_path
    write(os.path.join(folder, "train.py"), LEGACY)
    proc = upgrade("--infile", "train.py", "--outfile", "new.py", cwd=folder)
    self.assertEqual(0, proc.returncode, proc.stderr)
    self.assertNotIn("tensorflow", proc.stderr)  # A rename imports none.
    self.assertEqual(
        "import tensorflow as tf  # comment kept\nimport mplso\n\n"
        "opt = mplso.MixedPrecisionLossScaleOptimizer(sgd, 1)\n",
        read(os.path.join(folder, "new.py")))
    self.assertEqual(LEGACY, read(os.path.join(folder, "train.py")))
    report = read(os.path.join(folder, "report.txt"))  # The default name.
    self.assertIn("Processing file 'train.py'\n outputting to 'new.py'",
                  report)
    self.assertIn(
        "train.py:3: INFO: Renamed "
        "'tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer' "
        "to "
        "'mplso.MixedPrecisionLossScaleOptimizer'", report)

  def test_inplace_twice(self):
    folder = self.create_tempdir().full_path
    path = os.path.join(folder, "train.py")
    write(path, LEGACY)
    report = os.path.join(folder, "r.txt")
    self.assertEqual(0, upgrade("--infile", path, "--inplace",
                                "--reportfile", report).returncode)
    once = read(path)
    self.assertIn("mplso.MixedPrecisionLossScaleOptimizer", once)
    self.assertEqual(0, upgrade("--infile", path, "--inplace",
                                "--reportfile", report).returncode)
    self.assertEqual(once, read(path))
    self.assertIn("no legacy loss-scale names", read(report))

  def test_tree(self):
    folder = self.create_tempdir().full_path
    source = os.path.join(folder, "src")
    write(os.path.join(source, "a.py"), LEGACY)
    write(os.path.join(source, "pkg", "b.py"), "x = 1\n")
    write(os.path.join(source, "pkg", "broken.py"), "def f(:\n")
    write(os.path.join(source, "pkg", "data.txt"), "keep me\n")
    report = os.path.join(folder, "report.txt")
    out = os.path.join(folder, "out")
    proc = upgrade("--intree", source, "--outtree", out, "--reportfile",
                   report)
    self.assertEqual(0, proc.returncode, proc.stderr)
    self.assertIn("mplso.MixedPrecisionLossScaleOptimizer",
                  read(os.path.join(out, "a.py")))
    self.assertEqual("x = 1\n", read(os.path.join(out, "pkg", "b.py")))
    # A file that does not parse is copied unchanged and reported.
    self.assertEqual("def f(:\n", read(os.path.join(out, "pkg", "broken.py")))
    self.assertIn("broken.py: ERROR: does not parse", read(report))
    self.assertIn("1 that do not parse", proc.stdout)
    # --copyotherfiles is on by default, as tf_upgrade_v2's.
    self.assertEqual("keep me\n", read(os.path.join(out, "pkg", "data.txt")))
    out2 = os.path.join(folder, "out2")
    self.assertEqual(0, upgrade("--intree", source, "--outtree", out2,
                                "--copyotherfiles", "False", "--reportfile",
                                report).returncode)
    self.assertFalse(os.path.exists(os.path.join(out2, "pkg", "data.txt")))
    self.assertTrue(os.path.exists(os.path.join(out2, "pkg", "b.py")))

  def test_bad_command_lines(self):
    folder = self.create_tempdir().full_path
    write(os.path.join(folder, "a.py"), LEGACY)
    os.makedirs(os.path.join(folder, "exists"))
    for args, message in (
        ([], "give --infile FILE --outfile FILE"),
        (["--infile", "a.py"], "--infile needs --outfile"),
        (["--infile", "missing.py", "--outfile", "b.py"], "no such file"),
        (["--intree", ".", "--outtree", "exists"], "must not already exist"),
        (["--infile", "a.py", "--intree", "."], "not both"),
        (["--infile", "a.py", "--inplace", "--outfile", "b.py"],
         "give no --outfile"),
        (["--infile", "a.py", "--outfile", "b.py", "--to", "keras"],
         "invalid choice: 'keras'"),
        (["--intree", ".", "--outtree", "o", "--copyotherfiles", "maybe"],
         "expected True or False. Received: 'maybe'"),
    ):
      proc = upgrade(*args, cwd=folder)
      self.assertEqual(2, proc.returncode, args)
      self.assertIn(message, proc.stderr, args)
    self.assertFalse(os.path.exists(os.path.join(folder, "b.py")))

  def test_native_tree_keeps_an_optimizer_scaled_in_another_file(self):
    # Keras 3's class lacks get_scaled_loss: an optimizer built in one file
    # and scaled with it in another stays on mplso, with the file named.
    folder = self.create_tempdir().full_path
    write(os.path.join(folder, "src", "build.py"),
          "import tensorflow as tf\n"
          "opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)\n")
    write(os.path.join(folder, "src", "train.py"),
          "def step(opt, loss):\n  return opt.get_scaled_loss(loss)\n")
    proc = upgrade("--intree", "src", "--outtree", "out", "--to", "native",
                   cwd=folder, env={"TF_USE_LEGACY_KERAS": "0"})
    self.assertEqual(0, proc.returncode, proc.stderr)
    self.assertIn("opt = mplso.keras.LossScaleOptimizer(sgd)",
                  read(os.path.join(folder, "out", "build.py")))
    self.assertIn("stays on mplso: src/train.py:2 calls `get_scaled_loss`",
                  read(os.path.join(folder, "report.txt")))

  def test_native_reads_which_keras_as_tensorflow_does(self):
    folder = self.create_tempdir().full_path
    write(os.path.join(folder, "a.py"),
          "import tensorflow as tf\n"
          "opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd, False, 8)\n")
    for legacy, expected in (
        ("0", "mplso.keras.LossScaleOptimizer(sgd, False, 8)"),
        ("1", "tf.keras.mixed_precision.LossScaleOptimizer(sgd, "
              "dynamic=False, initial_scale=8)")):
      proc = upgrade("--infile", "a.py", "--outfile", "b.py", "--to",
                     "native", cwd=folder, env={"TF_USE_LEGACY_KERAS": legacy})
      self.assertEqual(0, proc.returncode, proc.stderr)
      self.assertIn(expected, read(os.path.join(folder, "b.py")))
      keras = "tf_keras" if legacy == "1" else "Keras 3"
      self.assertIn(f"where the behaviour allows ({keras})",
                    read(os.path.join(folder, "report.txt")))


if __name__ == "__main__":
  absltest.main()
