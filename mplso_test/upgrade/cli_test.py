"""Tests `python -m mplso.upgrade`'s command line, files and report."""

import contextlib
import io
import json
import os
import stat
import subprocess
import sys
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import pytest

from mplso._src.upgrade import cli
from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import files
from mplso._src.upgrade import json_report
from mplso._src.upgrade import rewrite
from mplso_test.helpers.byte_files import get
from mplso_test.helpers.byte_files import put
from mplso_test.helpers.upgrade_cases import run_main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BOM = b"\xef\xbb\xbf"
LEGACY = """\
import tensorflow as tf  # comment kept

opt = tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer(sgd, 1)
"""


def upgrade(*args, cwd=None, env=None, input=None):  # pylint: disable=redefined-builtin
  environment = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [ROOT, os.environ.get("PYTHONPATH", "")]), **(env or {}))
  return subprocess.run([sys.executable, "-X", "importtime", "-m",
                         "mplso.upgrade", *args], capture_output=True,
                        text=True, cwd=cwd, env=environment, timeout=120,
                        input=input)


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
                 "--copyotherfiles", "--inplace", "--reportfile", "--to",
                 "--check", "--diff", "--json-report", "PATH"):
      self.assertIn(flag, proc.stdout)
    self.assertNotIn("tensorflow", proc.stderr)  # -X importtime's list
    self.assertIn("Exit status:\n"
                  "  0  plain run: every file was converted or copied;\n"
                  "     --check/--diff: nothing would change.\n"
                  "  1  plain run: a file could not be converted or written",
                  proc.stdout)
    self.assertIn("     --check/--diff: a file would change, and none needs "
                  "a person.\n"
                  "  2  a command line that cannot run, before anything is "
                  "read or written.\n"
                  "  3  --check/--diff: a file needs a person: it has a "
                  "WARNING line, or it\n     could not be converted (an "
                  "ERROR line).\n", proc.stdout)

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
    self.assertEqual(1, proc.returncode, proc.stderr)  # broken.py
    self.assertIn("mplso.MixedPrecisionLossScaleOptimizer",
                  read(os.path.join(out, "a.py")))
    self.assertEqual("x = 1\n", read(os.path.join(out, "pkg", "b.py")))
    # A file that does not parse is copied unchanged and reported, at the
    # line Python names.
    broken = os.path.join(source, "pkg", "broken.py")
    self.assertEqual("def f(:\n", read(os.path.join(out, "pkg", "broken.py")))
    self.assertIn(f"{broken}:1: ERROR: does not parse", read(report))
    self.assertIn(f"{broken}:1: ERROR: does not parse", proc.stderr)
    self.assertEqual(
        "Processed 3 Python files: 1 changed; ERROR in 1 file (not converted "
        f"or not written): {broken}. Report: {report}\n", proc.stdout)
    # --copyotherfiles is on by default, as tf_upgrade_v2's.
    self.assertEqual("keep me\n", read(os.path.join(out, "pkg", "data.txt")))
    out2 = os.path.join(folder, "out2")
    self.assertEqual(1, upgrade("--intree", source, "--outtree", out2,
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
    write(os.path.join(folder, "src", "main.py"),
          "import build\nimport train\ntrain.step(build.opt, 1.0)\n")
    proc = upgrade("--intree", "src", "--outtree", "out", "--to", "native",
                   cwd=folder, env={"TF_USE_LEGACY_KERAS": "0"})
    self.assertEqual(0, proc.returncode, proc.stderr)
    self.assertIn("opt = mplso.keras.LossScaleOptimizer(sgd)",
                  read(os.path.join(folder, "out", "build.py")))
    self.assertIn("and src/train.py:2 calls `get_scaled_loss` on an "
                  "optimizer the tool cannot trace",
                  read(os.path.join(folder, "report.txt")))

  def test_native_reads_which_keras_as_tensorflow_does(self):
    folder = self.create_tempdir().full_path
    write(os.path.join(folder, "a.py"),
          "import tensorflow as tf\n"
          "opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd, True, 8)\n")
    for legacy, expected in (
        ("0", "tf.keras.mixed_precision.LossScaleOptimizer(sgd, "
              "initial_scale=8)"),
        ("1", "tf.keras.mixed_precision.LossScaleOptimizer(sgd, "
              "dynamic=True, initial_scale=8)")):
      proc = upgrade("--infile", "a.py", "--outfile", "b.py", "--to",
                     "native", cwd=folder, env={"TF_USE_LEGACY_KERAS": legacy})
      self.assertEqual(0, proc.returncode, proc.stderr)
      self.assertIn(expected, read(os.path.join(folder, "b.py")))
      keras = "tf_keras" if legacy == "1" else "Keras 3"
      self.assertIn(f"where the behaviour allows ({keras})",
                    read(os.path.join(folder, "report.txt")))


def mode_of(path):
  return stat.S_IMODE(os.stat(path).st_mode)


USE = b"opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)"
NEW = b"opt = mplso.keras.LossScaleOptimizer(sgd)"


class EncodingTest(absltest.TestCase):
  """Encodings, byte order marks and line endings, byte for byte."""

  def test_kept_on_converted_files(self):
    folder = self.create_tempdir().full_path
    src, out = os.path.join(folder, "src"), os.path.join(folder, "out")
    before_after = {
        "latin_1.py": (
            b"# -*- coding: latin-1 -*-\nimport tensorflow as tf\n"
            b"name = 'caf\xe9'\n" + USE + b"\n",
            b"# -*- coding: latin-1 -*-\nimport tensorflow as tf\n"
            b"import mplso.keras\nname = 'caf\xe9'\n" + NEW + b"\n"),
        "bom.py": (
            BOM + b"import tensorflow as tf\n" + USE + b"  # \xc3\xa9\n",
            BOM + b"import tensorflow as tf\nimport mplso.keras\n" + NEW +
            b"  # \xc3\xa9\n"),
        "crlf.py": (
            b"import tensorflow as tf\r\n\r\n" + USE + b"\r\nx = 1\r\n",
            b"import tensorflow as tf\r\nimport mplso.keras\r\n\r\n" + NEW +
            b"\r\nx = 1\r\n"),
        # The line the tool adds takes the file's (first line's) ending;
        # every other line keeps its own.
        "mixed.py": (
            b"import tensorflow as tf\r\nx = 1\n" + USE + b"\r\ny = 2",
            b"import tensorflow as tf\r\nimport mplso.keras\r\nx = 1\n" +
            NEW + b"\r\ny = 2"),
        "untouched.py": (BOM + b"x = 1\r\ny = 'caf\xc3\xa9'\r\n",) * 2,
    }
    for name, (before, _) in before_after.items():
      put(os.path.join(src, name), before)
    proc = upgrade("--intree", src, "--outtree", out, cwd=folder)
    self.assertEqual(0, proc.returncode, proc.stderr)
    for name, (_, after) in before_after.items():
      self.assertEqual(after, get(os.path.join(out, name)), name)
    proc = upgrade("--intree", out, "--inplace", cwd=folder)  # Twice: same.
    for name, (_, after) in before_after.items():
      self.assertEqual(after, get(os.path.join(out, name)), name)

  def test_bytes_not_valid_are_reported_and_copied_byte_for_byte(self):
    folder = self.create_tempdir().full_path
    src, out = os.path.join(folder, "src"), os.path.join(folder, "out")
    bad = {
        "no_declaration.py": (b"import tensorflow as tf\n# caf\xe9\n" + USE +
                              b"\n", 2, "byte 0xe9 at column 6 is not valid "
                              "utf-8 (no encoding declared, PEP 263)"),
        "declared_ascii.py": (b"# coding: ascii\n" + USE + b"\nx = '\xc3'\n",
                              3, "byte 0xc3 at column 6 is not valid ascii "
                              "(declared on line 1)"),
        "unknown.py": (b"#!/usr/bin/python\n# coding: klingon\n" + USE, 2,
                       "unknown encoding: klingon"),
    }
    for name, (data, _, _) in bad.items():
      put(os.path.join(src, name), data)
    put(os.path.join(src, "good.py"), b"import tensorflow as tf\n" + USE)
    proc = upgrade("--intree", "src", "--outtree", "out", cwd=folder)
    self.assertEqual(1, proc.returncode, proc.stderr)
    report = read(os.path.join(folder, "report.txt"))
    for name, (data, line, why) in bad.items():
      self.assertEqual(data, get(os.path.join(out, name)))
      error = (f"src/{name}:{line}: ERROR: does not decode: {why}; copied "
               "unchanged")
      self.assertIn(error + "\n", report)
      self.assertIn(error + "\n", proc.stderr)
    self.assertIn(NEW, get(os.path.join(out, "good.py")))
    self.assertEqual(
        "Processed 4 Python files: 1 changed; ERROR in 3 files (not converted "
        "or not written): src/declared_ascii.py, src/no_declaration.py, "
        "src/unknown.py. Report: report.txt\n", proc.stdout)


class ModeTest(absltest.TestCase):

  def test_outputs_keep_the_mode_of_their_input(self):
    folder = self.create_tempdir().full_path
    src, out = os.path.join(folder, "src"), os.path.join(folder, "out")
    legacy = b"#!/usr/bin/env python\nimport tensorflow as tf\n" + USE + b"\n"
    put(os.path.join(src, "run.py"), legacy, 0o755)
    put(os.path.join(src, "private.py"), legacy, 0o600)
    put(os.path.join(src, "same.py"), b"x = 1\n", 0o750)
    put(os.path.join(src, "run.sh"), b"echo\n", 0o755)
    proc = upgrade("--intree", src, "--outtree", out, cwd=folder)
    self.assertEqual(0, proc.returncode, proc.stderr)
    for name, mode in (("run.py", 0o755), ("private.py", 0o600),
                       ("same.py", 0o750), ("run.sh", 0o755)):
      self.assertEqual(oct(mode), oct(mode_of(os.path.join(out, name))), name)
    self.assertIn(NEW, get(os.path.join(out, "run.py")))
    upgrade("--infile", os.path.join(src, "run.py"), "--outfile",
            os.path.join(folder, "one.py"), cwd=folder)
    self.assertEqual(0o755, mode_of(os.path.join(folder, "one.py")))
    upgrade("--infile", os.path.join(src, "run.py"), "--inplace", cwd=folder)
    self.assertEqual(0o755, mode_of(os.path.join(src, "run.py")))
    self.assertIn(NEW, get(os.path.join(src, "run.py")))
    # Nothing is left beside the outputs: each was moved into place whole.
    self.assertCountEqual(["private.py", "run.py", "run.sh", "same.py"],
                          os.listdir(src))


class LinkTest(absltest.TestCase):

  def make_tree(self):
    """A tree with links in it, and a folder outside it."""
    folder = self.create_tempdir().full_path
    src = os.path.join(folder, "src")
    legacy = b"import tensorflow as tf\n" + USE + b"\n"
    put(os.path.join(src, "pkg", "a.py"), legacy)
    put(os.path.join(folder, "outside", "ext.py"), legacy)
    os.symlink("pkg/a.py", os.path.join(src, "alias.py"))
    os.symlink("pkg", os.path.join(src, "pkg_link"))
    os.symlink("../outside/ext.py", os.path.join(src, "ext.py"))
    os.symlink(os.path.join(folder, "outside"), os.path.join(src, "vendor"))
    os.symlink("gone.py", os.path.join(src, "dangling.py"))
    return folder, src, legacy

  def test_outtree_mirrors_links_as_links(self):
    folder, src, legacy = self.make_tree()
    out = os.path.join(folder, "out")
    proc = upgrade("--intree", "src", "--outtree", "out", cwd=folder)
    self.assertEqual(0, proc.returncode, proc.stderr)  # A dangling link warns.
    for name, text in (("alias.py", "pkg/a.py"), ("pkg_link", "pkg"),
                       ("ext.py", "../outside/ext.py"),
                       ("vendor", os.path.join(folder, "outside")),
                       ("dangling.py", "gone.py")):
      self.assertTrue(os.path.islink(os.path.join(out, name)), name)
      self.assertEqual(text, os.readlink(os.path.join(out, name)), name)
    self.assertIn(NEW, get(os.path.join(out, "pkg", "a.py")))
    self.assertEqual(legacy, get(os.path.join(folder, "outside", "ext.py")))
    report = read(os.path.join(folder, "report.txt"))
    # The folder a link points to is walked once, as itself; one outside
    # the tree not at all.
    self.assertEqual(1, report.count("Processing file"), report)
    self.assertIn("Processing file 'src/pkg/a.py'", report)
    self.assertIn("src/dangling.py: WARNING: is a symbolic link to 'gone.py', "
                  "which does not exist: mirrored as a link\n", report)
    self.assertIn("src/ext.py: INFO: is a symbolic link to "
                  "'../outside/ext.py': mirrored as a link; the file it points "
                  "to lies outside --intree: not converted\n", report)
    self.assertIn("src/alias.py: INFO: is a symbolic link to 'pkg/a.py': "
                  "mirrored as a link; the file it points to, 'pkg/a.py' in "
                  "--intree, is handled as itself\n", report)

  def test_inplace_never_writes_through_a_link(self):
    folder, src, legacy = self.make_tree()
    proc = upgrade("--intree", "src", "--inplace", cwd=folder)
    self.assertEqual(0, proc.returncode, proc.stderr)
    self.assertEqual(legacy, get(os.path.join(folder, "outside", "ext.py")))
    for name in ("alias.py", "pkg_link", "ext.py", "vendor", "dangling.py"):
      self.assertTrue(os.path.islink(os.path.join(src, name)), name)
    self.assertEqual(
        b"import tensorflow as tf\nimport mplso.keras\n" + NEW + b"\n",
        get(os.path.join(src, "pkg", "a.py")))  # Converted once.
    report = read(os.path.join(folder, "report.txt"))
    self.assertIn("src/ext.py: INFO: is a symbolic link to "
                  "'../outside/ext.py': left alone; the file it points to lies "
                  "outside --intree: not converted\n", report)
    self.assertIn("src/dangling.py: WARNING: is a symbolic link to 'gone.py', "
                  "which does not exist: left alone\n", report)

  def test_inplace_infile_link_is_refused(self):
    folder, src, _ = self.make_tree()
    proc = upgrade("--infile", "src/alias.py", "--inplace", cwd=folder)
    self.assertEqual(2, proc.returncode)
    self.assertIn("error: --infile 'src/alias.py' is a symbolic link (to "
                  "'pkg/a.py'); --inplace never writes through a link: give "
                  "the file it points to.\n", proc.stderr)
    self.assertTrue(os.path.islink(os.path.join(src, "alias.py")))
    self.assertFalse(os.path.exists(os.path.join(folder, "report.txt")))

  def test_a_pipe_is_named_not_read(self):
    folder = self.create_tempdir().full_path
    put(os.path.join(folder, "src", "a.py"), b"x = 1\n")
    os.mkfifo(os.path.join(folder, "src", "pipe.py"))
    status, _, err = run_main("--intree", os.path.join(folder, "src"),
                              "--outtree", os.path.join(folder, "out"),
                              "--reportfile", os.path.join(folder, "r.txt"))
    self.assertEqual(0, status, err)
    self.assertIn("pipe.py: WARNING: is not a regular file (a pipe, socket or "
                  "device): neither read nor copied",
                  read(os.path.join(folder, "r.txt")))
    self.assertEqual(["a.py"], os.listdir(os.path.join(folder, "out")))


class RefusedCommandLineTest(parameterized.TestCase):
  """Exit 2 with one line, before anything is written."""

  @parameterized.named_parameters(
      ("outtree_inside_intree", ["--intree", "src", "--outtree", "src/out"],
       "--outtree 'src/out' lies inside --intree 'src': give a folder "
       "outside it."),
      ("outtree_inside_intree_through_a_link",
       ["--intree", "src", "--outtree", "src_link/out"],
       "--outtree 'src_link/out' lies inside --intree 'src': give a folder "
       "outside it."),
      ("outtree_under_a_file", ["--intree", "src", "--outtree", "file/out"],
       "--outtree 'file/out' cannot be written: '{folder}/file' is not a "
       "folder."),
      ("outfile_under_a_file",
       ["--infile", "src/a.py", "--outfile", "file/a.py"],
       "--outfile 'file/a.py' cannot be written: '{folder}/file' is not a "
       "folder."),
      ("outfile_a_folder", ["--infile", "src/a.py", "--outfile", "src"],
       "--outfile 'src' cannot be written: is a folder."),
      ("reportfile_under_a_file",
       ["--intree", "src", "--outtree", "out", "--reportfile", "file/r.txt"],
       "--reportfile 'file/r.txt' cannot be written: '{folder}/file' is not "
       "a folder."),
      ("reportfile_is_the_outfile",
       ["--infile", "src/a.py", "--outfile", "b.py", "--reportfile", "b.py"],
       "--reportfile 'b.py' is a file the upgrade reads or writes: give "
       "another."),
  )
  def test_refused(self, args, message):
    folder = self.create_tempdir().full_path
    put(os.path.join(folder, "src", "a.py"), LEGACY.encode())
    put(os.path.join(folder, "file"), b"")
    os.symlink("src", os.path.join(folder, "src_link"))
    before = sorted(os.listdir(folder))
    proc = upgrade(*args, cwd=folder)
    self.assertEqual(2, proc.returncode, proc.stderr)
    self.assertEqual(
        f"python -m mplso.upgrade: error: {message.format(folder=folder)}",
                     proc.stderr.splitlines()[-1])
    self.assertEqual(before, sorted(os.listdir(folder)))
    self.assertEqual(["a.py"], os.listdir(os.path.join(folder, "src")))

  def test_unwritable_reportfile_writes_nothing(self):
    folder = self.create_tempdir().full_path
    put(os.path.join(folder, "a.py"), LEGACY.encode())
    with mock.patch.object(files.tempfile, "mkstemp",
                           side_effect=PermissionError(13, "Permission denied")):
      status, out, err = run_main(
          "--infile", os.path.join(folder, "a.py"), "--outfile",
          os.path.join(folder, "b.py"), "--reportfile",
          os.path.join(folder, "r.txt"))
    self.assertEqual(2, status)
    self.assertIn(f"cannot be written: no file can be made in {folder!r} "
                  "(Permission denied).", err)
    self.assertEqual(["a.py"], os.listdir(folder))


class OneFileNeverStopsATreeTest(absltest.TestCase):

  def tree(self):
    folder = self.create_tempdir().full_path
    src = os.path.join(folder, "src")
    for name in ("a.py", "b.py", "c.py"):
      put(os.path.join(src, name), b"import tensorflow as tf\n" + USE + b"\n")
    return folder, src

  def test_an_exception_in_one_file_is_its_report_line(self):
    folder, src = self.tree()
    put(os.path.join(src, "b.py"), b"import tensorflow as tf\n" + USE +
        b"  # BOOM\n")
    real = rewrite.upgrade_sources
    calls = []

    def upgrade_sources(texts, **kwargs):
      calls.append(sorted(os.path.basename(path) for path in texts))
      if any("BOOM" in text for text in texts.values()):
        raise RecursionError("maximum recursion depth exceeded")
      return real(texts, **kwargs)

    with mock.patch.object(rewrite, "upgrade_sources", upgrade_sources):
      status, out, err = run_main(
          "--intree", src, "--outtree", os.path.join(folder, "out"),
          "--reportfile", os.path.join(folder, "r.txt"))
    self.assertEqual(1, status)
    # The whole set, each file alone, then the others together again.
    self.assertEqual([["a.py", "b.py", "c.py"], ["a.py"], ["b.py"], ["c.py"],
                      ["a.py", "c.py"]], calls)
    for name in ("a.py", "c.py"):
      self.assertIn(NEW, get(os.path.join(folder, "out", name)))
    self.assertEqual(get(os.path.join(src, "b.py")),
                     get(os.path.join(folder, "out", "b.py")))
    error = (f"{src}/b.py: ERROR: could not be converted: RecursionError: "
             "maximum recursion depth exceeded; copied unchanged\n")
    self.assertIn(error, read(os.path.join(folder, "r.txt")))
    self.assertEqual(error, err)
    self.assertEqual(
        "Processed 3 Python files: 2 changed; ERROR in 1 file (not converted "
        f"or not written): {src}/b.py. Report: {folder}/r.txt\n", out)

  def test_a_failed_write_is_its_report_line(self):
    folder, src = self.tree()
    real = os.replace

    def replace(source, destination):
      if destination.endswith("b.py"):
        raise OSError(28, "No space left on device")
      return real(source, destination)

    with mock.patch.object(os, "replace", replace):
      status, out, err = run_main("--intree", src, "--inplace",
                                  "--reportfile",
                                  os.path.join(folder, "r.txt"))
    self.assertEqual(1, status)
    self.assertIn(NEW, get(os.path.join(src, "a.py")))
    self.assertIn(NEW, get(os.path.join(src, "c.py")))
    self.assertEqual(b"import tensorflow as tf\n" + USE + b"\n",
                     get(os.path.join(src, "b.py")))
    self.assertEqual(["a.py", "b.py", "c.py"], sorted(os.listdir(src)))
    self.assertIn(f"{src}/b.py: ERROR: could not be written to "
                  f"'{src}/b.py': [Errno 28] No space left on device; nothing "
                  "written\n", read(os.path.join(folder, "r.txt")))
    self.assertIn(f"ERROR in 1 file (not converted or not written): "
                  f"{src}/b.py.", out)

  def test_a_file_that_cannot_be_read_is_its_report_line(self):
    folder, src = self.tree()
    real = files.read

    def read_file(path):
      if path.endswith("b.py"):
        raise PermissionError(13, "Permission denied", path)
      return real(path)

    with mock.patch.object(files, "read", read_file):
      status, _, _ = run_main("--intree", src, "--outtree",
                              os.path.join(folder, "out"), "--reportfile",
                              os.path.join(folder, "r.txt"))
    self.assertEqual(1, status)
    self.assertEqual(["a.py", "c.py"],
                     sorted(os.listdir(os.path.join(folder, "out"))))
    self.assertIn(f"{src}/b.py: ERROR: could not be read: [Errno 13] "
                  f"Permission denied: '{src}/b.py'; nothing written\n",
                  read(os.path.join(folder, "r.txt")))

  def assert_converted(self, texts):
    folder = self.create_tempdir().full_path
    for name, text in texts.items():
      put(os.path.join(folder, "src", name),
          ("import tensorflow as tf\n" + text).encode() + USE + b"\n")
    proc = upgrade("--intree", "src", "--outtree", "out", cwd=folder)
    self.assertEqual(0, proc.returncode, proc.stderr)
    for name, text in texts.items():
      self.assertEqual(
          ("import tensorflow as tf\nimport mplso.keras\n" + text).encode() +
          NEW + b"\n", get(os.path.join(folder, "out", name)), name)

  def test_deep_expressions_are_converted(self):
    # Each stops LibCST's visitors at Python's default recursion limit
    # (1,000); the rewrite's thread has room for them.
    self.assert_converted({
        "sum.py": "x = " + " + ".join(["a"] * 400) + "\n",
        "elif.py": "if a == 0:\n  pass\n" + "".join(
            f"elif a == {i}:\n  pass\n" for i in range(1, 400)),
        "nested.py": "y = " + "[" * 150 + "1" + "]" * 150 + "\n",
    })

  @pytest.mark.slow
  def test_a_1000_branch_elif_chain_is_converted(self):
    self.assert_converted({"elif.py": "if a == 0:\n  pass\n" + "".join(
        f"elif a == {i}:\n  pass\n" for i in range(1, 1000))})

  def test_syntax_errors_name_the_line_python_names(self):
    folder = self.create_tempdir().full_path
    put(os.path.join(folder, "a.py"),
        b"import tensorflow as tf\nx = (1,\n\n" + USE + b"\n")
    proc = upgrade("--infile", "a.py", "--outfile", "b.py", cwd=folder)
    self.assertEqual(1, proc.returncode)
    self.assertStartsWith(proc.stderr.splitlines()[-1],
                          "a.py:2: ERROR: does not parse")
    self.assertEqual(get(os.path.join(folder, "a.py")),
                     get(os.path.join(folder, "b.py")))



class DeepStackTest(absltest.TestCase):

  def test_runs_deeper_than_python_s_limit_and_restores_it(self):
    limit = sys.getrecursionlimit()

    def depth(n):
      return 0 if n == 0 else 1 + depth(n - 1)

    self.assertEqual(20_000, cli._with_deep_stack(lambda: depth(20_000)))
    self.assertEqual(limit, sys.getrecursionlimit())
    with self.assertRaises(KeyError):  # Raises what the function raises.
      cli._with_deep_stack(lambda: {}["x"])

  def test_without_such_a_thread_it_runs_here_with_python_s_limit(self):
    limit = sys.getrecursionlimit()
    seen = []
    with mock.patch.object(cli.threading, "stack_size",
                           side_effect=[0, ValueError("size not valid"),
                                        None]):
      self.assertEqual(3, cli._with_deep_stack(
          lambda: seen.append(sys.getrecursionlimit()) or 3))
    self.assertEqual([limit], seen)
    self.assertEqual(limit, sys.getrecursionlimit())

def notebook(*cells, indent=1):
  """A notebook's bytes, as nbformat writes it: `cells` are (type, lines)."""
  return (json.dumps({
      "cells": [{"cell_type": kind, "execution_count": None, "metadata": {},
                 "outputs": [], "source": lines} if kind == "code" else
                {"cell_type": kind, "metadata": {}, "source": lines}
                for kind, lines in cells],
      "metadata": {"language_info": {"name": "python"}},
      "nbformat": 4, "nbformat_minor": 5}, indent=indent, sort_keys=True,
                     ensure_ascii=False) + "\n").encode()


# The legacy notebook, and what it becomes: only cells 2 and 4 change.
NOTEBOOK = notebook(
    ("markdown", ["# Mixed précision\n", "`tf.keras.mixed_precision`"]),
    ("code", ["!pip install -q tensorflow\n", "import tensorflow as tf"]),
    ("code", ["%%bash\n", "nvidia-smi"]),
    ("code", ["%time x = 1\n", USE.decode() + "  # é\n", "opt?"]))
CONVERTED = notebook(
    ("markdown", ["# Mixed précision\n", "`tf.keras.mixed_precision`"]),
    ("code", ["!pip install -q tensorflow\n", "import tensorflow as tf\n",
              "import mplso.keras"]),
    ("code", ["%%bash\n", "nvidia-smi"]),
    ("code", ["%time x = 1\n", NEW.decode() + "  # é\n", "opt?"]))


class NotebookTest(absltest.TestCase):
  """`.ipynb` files: their code cells are converted, the rest kept."""

  def test_infile(self):
    folder = self.create_tempdir().full_path
    put(os.path.join(folder, "guide.ipynb"), NOTEBOOK)
    proc = upgrade("--infile", "guide.ipynb", "--outfile", "new.ipynb",
                   cwd=folder)
    self.assertEqual(0, proc.returncode, proc.stderr)
    self.assertNotIn("tensorflow", proc.stderr)  # -X importtime's list
    self.assertEqual(CONVERTED, get(os.path.join(folder, "new.ipynb")))
    self.assertEqual(NOTEBOOK, get(os.path.join(folder, "guide.ipynb")))
    self.assertEqual("Processed 0 Python files and 1 notebook: 1 changed, no "
                     "errors. Report: report.txt\n", proc.stdout)
    report = read(os.path.join(folder, "report.txt"))
    self.assertIn(
        "Processed 0 Python files and 1 notebook: 1 changed, 0 with an ERROR "
        "line, 0 with a WARNING line, 0 with mplso.compat.install() "
        "inserted.\n", report)
    self.assertIn(
        "guide.ipynb:cell 2: INFO: Added 'import mplso.keras'\n"
        "guide.ipynb:cell 4:2: INFO: Renamed "
        "'tf.keras.mixed_precision.LossScaleOptimizer' to "
        "'mplso.keras.LossScaleOptimizer'\n", report)
    self.assertIn("guide.ipynb:cell 3:1: INFO: a `%%bash` cell is not "
                  "Python: left as it is\n", report)

  def test_tree_converts_notebooks_with_the_python_files(self):
    folder = self.create_tempdir().full_path
    src = os.path.join(folder, "src")
    unchanged = notebook(("code", ["import numpy as np\n", "!ls"]),
                         indent=2)
    put(os.path.join(src, "guide.ipynb"), NOTEBOOK, mode=0o600)
    put(os.path.join(src, "pkg", "plain.ipynb"), unchanged)
    put(os.path.join(src, "a.py"), b"import tensorflow as tf\n" + USE + b"\n")
    os.symlink("guide.ipynb", os.path.join(src, "link.ipynb"))
    status, out, err = run_main(
        "--intree", src, "--outtree", os.path.join(folder, "out"),
        "--copyotherfiles", "False", "--reportfile",
        os.path.join(folder, "r.txt"))
    self.assertEqual(0, status, err)
    out_tree = os.path.join(folder, "out")
    self.assertEqual(CONVERTED, get(os.path.join(out_tree, "guide.ipynb")))
    self.assertEqual(0o600, mode_of(os.path.join(out_tree, "guide.ipynb")))
    self.assertEqual(unchanged,
                     get(os.path.join(out_tree, "pkg", "plain.ipynb")))
    self.assertEqual("guide.ipynb",
                     os.readlink(os.path.join(out_tree, "link.ipynb")))
    self.assertIn(NEW, get(os.path.join(out_tree, "a.py")))
    self.assertIn("Processed 1 Python files and 2 notebooks: 2 changed, no "
                  "errors.", out)
    self.assertIn(f"{src}/pkg/plain.ipynb: no legacy loss-scale names",
                  read(os.path.join(folder, "r.txt")))

  def test_inplace_twice(self):
    folder = self.create_tempdir().full_path
    path = os.path.join(folder, "src", "guide.ipynb")
    put(path, NOTEBOOK)
    report = os.path.join(folder, "r.txt")
    for _ in range(2):
      status, _, err = run_main("--intree", os.path.join(folder, "src"),
                                "--inplace", "--reportfile", report)
      self.assertEqual(0, status, err)
      self.assertEqual(CONVERTED, get(path))
    self.assertIn(f"{path}: no legacy loss-scale names", read(report))

  def test_not_a_notebook_is_an_error_and_copied_unchanged(self):
    folder = self.create_tempdir().full_path
    src = os.path.join(folder, "src")
    broken = b'{\n "cells": [\n  {"cell_type": "code", "source": [\n'
    old = b'{"nbformat": 3, "worksheets": []}\n'
    put(os.path.join(src, "broken.ipynb"), broken)
    put(os.path.join(src, "old.ipynb"), old)
    put(os.path.join(src, "guide.ipynb"), NOTEBOOK)
    status, out, err = run_main(
        "--intree", src, "--outtree", os.path.join(folder, "out"),
        "--reportfile", os.path.join(folder, "r.txt"))
    self.assertEqual(1, status)
    self.assertEqual(broken, get(os.path.join(folder, "out", "broken.ipynb")))
    self.assertEqual(old, get(os.path.join(folder, "out", "old.ipynb")))
    self.assertEqual(CONVERTED,
                     get(os.path.join(folder, "out", "guide.ipynb")))
    errors = (
        f"{src}/broken.ipynb:4: ERROR: is not valid JSON: Expecting value "
        "(line 4, column 1); copied unchanged\n"
        f"{src}/old.ipynb: ERROR: is not an nbformat 4 notebook: its "
        "nbformat is 3, the upgrade reads 4 (open it in Jupyter and save it "
        "to make it nbformat 4); copied unchanged\n")
    self.assertEqual(errors, err)
    self.assertIn(errors.split("\n")[0], read(os.path.join(folder, "r.txt")))
    self.assertEqual(
        "Processed 0 Python files and 3 notebooks: 1 changed; ERROR in 2 "
        f"files (not converted or not written): {src}/broken.ipynb, "
        f"{src}/old.ipynb. Report: {folder}/r.txt\n", out)

  def test_a_cell_that_does_not_parse_is_an_error_the_others_converted(self):
    folder = self.create_tempdir().full_path
    path = os.path.join(folder, "nb.ipynb")
    put(path, notebook(("code", ["import tensorflow as tf\n", "x = (\n"]),
                       ("code", ["import tensorflow as tf\n", USE.decode()])))
    status, _, err = run_main("--infile", path, "--inplace", "--reportfile",
                              os.path.join(folder, "r.txt"))
    self.assertEqual(1, status)
    self.assertEqual(notebook(
        ("code", ["import tensorflow as tf\n", "x = (\n"]),
        ("code", ["import tensorflow as tf\n", "import mplso.keras\n",
                  NEW.decode()])), get(path))
    error = (f"{path}:cell 1:2: ERROR: does not parse: '(' was never closed; "
             "this cell left unchanged, the others converted\n")
    self.assertEqual(error, err)
    self.assertIn(error, read(os.path.join(folder, "r.txt")))

  def test_a_notebook_that_cannot_be_read_is_its_report_line(self):
    folder = self.create_tempdir().full_path
    path = os.path.join(folder, "src", "nb.ipynb")
    put(path, NOTEBOOK)
    with mock.patch.object(cli, "_read_notebook", side_effect=PermissionError(
        13, "Permission denied", path)):
      status, _, err = run_main("--intree", os.path.join(folder, "src"),
                                "--outtree", os.path.join(folder, "out"),
                                "--reportfile", os.path.join(folder, "r.txt"))
    self.assertEqual(1, status)
    self.assertFalse(os.path.exists(os.path.join(folder, "out", "nb.ipynb")))
    self.assertEqual(f"{path}: ERROR: could not be read: [Errno 13] "
                     f"Permission denied: '{path}'; nothing written\n", err)

  def test_another_file_s_reason_names_the_cell(self):
    folder = self.create_tempdir().full_path
    src = os.path.join(folder, "src")
    put(os.path.join(src, "a.py"), b"x = 1\n")
    put(os.path.join(src, "nb.ipynb"), NOTEBOOK)
    nb = os.path.join(src, "nb.ipynb")

    def upgrade_sources(texts, **kwargs):
      del kwargs
      why = f"stays: the optimizer is scaled at {nb}:6 and {nb}:99"
      return {p: edits_lib.Upgraded(t, [edits_lib.warned(1, "x", why)]
                                    if p.endswith(".py") else [])
              for p, t in texts.items()}

    with mock.patch.object(rewrite, "upgrade_sources", upgrade_sources):
      status, _, _ = run_main("--intree", src, "--inplace", "--reportfile",
                              os.path.join(folder, "r.txt"))
    self.assertEqual(0, status)
    self.assertIn(f"stays: the optimizer is scaled at {nb}:cell 4:2 and "
                  f"{nb}:99\n", read(os.path.join(folder, "r.txt")))

  def test_a_failed_conversion_names_the_cell(self):
    folder = self.create_tempdir().full_path
    path = os.path.join(folder, "nb.ipynb")
    put(path, NOTEBOOK)

    def upgrade_sources(texts, **kwargs):
      del kwargs
      return {p: edits_lib.Upgraded(
          t, [], error="does not parse (line 6, column 3)")
              for p, t in texts.items()}

    with mock.patch.object(rewrite, "upgrade_sources", upgrade_sources):
      status, _, err = run_main("--infile", path, "--outfile",
                                os.path.join(folder, "out.ipynb"),
                                "--reportfile", os.path.join(folder, "r.txt"))
    self.assertEqual(1, status)
    self.assertEqual(NOTEBOOK, get(os.path.join(folder, "out.ipynb")))
    self.assertEqual(f"{path}: ERROR: does not parse (line 2 of cell 4, "
                     "column 3); copied unchanged\n", err)


WARNED = """\
import tensorflow as tf

def f(mp):
  return tf.keras.mixed_precision.experimental.get_layer_policy(mp)
"""
UPGRADED = ("import tensorflow as tf  # comment kept\nimport mplso\n\n"
            "opt = mplso.MixedPrecisionLossScaleOptimizer(sgd, 1)\n")
# `WARNED` looked at by a person: its line carries the comment.
ACKNOWLEDGED = WARNED.replace("(mp)\n", "(mp)  # mplso-upgrade: ok\n")


def _notebook(source):
  """A notebook of one markdown cell and one code cell holding `source`."""
  return json.dumps({
      "cells": [
          {"cell_type": "markdown", "metadata": {}, "source": ["# Title"]},
          {"cell_type": "code", "metadata": {}, "execution_count": None,
           "outputs": [], "source": source.splitlines(keepends=True)}],
      "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"


NOTEBOOK_TEXT = json.dumps({
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Title"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None,
         "outputs": [], "source": LEGACY.splitlines(keepends=True)}],
    "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"


def listing(folder):
  """Every file under `folder`: {relative path: (bytes, mtime_ns, mode)}."""
  found = {}
  for root, dirs, names in os.walk(folder):
    for name in dirs + names:
      path = os.path.join(root, name)
      info = os.lstat(path)
      data = b""
      if stat.S_ISREG(info.st_mode):
        with open(path, "rb") as f:
          data = f.read()
      found[os.path.relpath(path, folder)] = (data, info.st_mtime_ns,
                                              info.st_mode)
  return found


class ContinuousIntegrationTest(parameterized.TestCase):
  """--check, --diff, PATH arguments, `--infile -` and --json-report."""

  def setUp(self):
    super().setUp()
    self.folder = self.create_tempdir().full_path
    self.enter_context(mock.patch.dict(os.environ,
                                       {"TF_USE_LEGACY_KERAS": ""}))
    old = os.getcwd()
    os.chdir(self.folder)
    self.addCleanup(os.chdir, old)

  def main(self, *args):
    """(status, stdout, stderr) of `cli.main(args)` in the folder."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      try:
        status = cli.main(list(args))
      except SystemExit as e:  # argparse's error.
        status = e.code
    return status, out.getvalue(), err.getvalue()

  def files(self, **texts):
    for name, text in texts.items():
      write(os.path.join(self.folder, name.replace("__", ".")), text)

  @parameterized.named_parameters(
      ("nothing_to_change", {"a__py": "x = 1\n"}, 0),
      ("would_change", {"a__py": LEGACY, "b__py": "x = 1\n"}, 1),
      ("warning", {"a__py": WARNED}, 3),
      ("warning_wins", {"a__py": WARNED, "b__py": LEGACY}, 3),
      ("does_not_parse", {"a__py": "def (:\n", "b__py": LEGACY}, 3),
      ("notebook_would_change", {"a__ipynb": NOTEBOOK_TEXT}, 1),
      # A person looked at the line: nothing left for one to do.
      ("acknowledged", {"a__py": ACKNOWLEDGED}, 0),
      ("acknowledged_and_legacy", {"a__py": ACKNOWLEDGED, "b__py": LEGACY},
       1),
      ("notebook_warning", {"a__ipynb": _notebook(WARNED)}, 3),
      ("notebook_acknowledged", {"a__ipynb": _notebook(ACKNOWLEDGED)}, 0),
  )
  def test_check_exit_status_and_writes_nothing(self, texts, expected):
    self.files(**texts)
    before = listing(self.folder)
    names = sorted(before)
    for args in (["--check", *names], ["--diff", *names],
                 ["--check", "--intree", "."]):
      status, _, err = self.main(*args)
      self.assertEqual(expected, status, (args, err))
      self.assertEqual(before, listing(self.folder), args)  # No report.
    if len(names) == 1:
      status, _, _ = self.main("--check", "--infile", names[0])
      self.assertEqual(expected, status)
      self.assertEqual(before, listing(self.folder))

  def test_check_leaves_links_and_other_files_alone(self):
    self.files(a__py=LEGACY, notes__txt="notes\n")
    os.symlink("a.py", os.path.join(self.folder, "link.py"))
    os.symlink("nowhere.py", os.path.join(self.folder, "dangling.py"))
    before = listing(self.folder)
    status, _, err = self.main("--check", "--intree", ".")
    self.assertEqual(cli.NEEDS_A_PERSON, status)  # The dangling link.
    self.assertIn("./dangling.py: WARNING: is a symbolic link to "
                  "'nowhere.py', which does not exist: left alone\n", err)
    self.assertEqual(before, listing(self.folder))
    os.remove(os.path.join(self.folder, "dangling.py"))
    self.assertEqual(cli.WOULD_CHANGE, self.main("--diff", "--intree",
                                                 ".")[0])
    self.assertEqual(before.keys() - {"dangling.py"},
                     listing(self.folder).keys())

  def test_check_names_what_would_change_and_why_not(self):
    self.files(a__py=LEGACY, b__py="x = 1\n", w__py=WARNED)
    status, out, err = self.main("--check", "a.py", "b.py", "w.py")
    self.assertEqual(cli.NEEDS_A_PERSON, status)
    self.assertEqual("", out)
    self.assertEqual(
        "w.py:4: WARNING: Kept "
        "'tf.keras.mixed_precision.experimental.get_layer_policy'\n",
        err.splitlines(keepends=True)[0])
    self.assertEqual(
        ["would change: a.py",
         "Checked 3 Python files: 1 would change, 0 with an ERROR line, 1 "
         "with a WARNING line; nothing written."], err.splitlines()[-2:])

  def test_plain_run_keeps_its_exit_status(self):
    self.files(a__py=WARNED, b__py="def (:\n")
    self.assertEqual(0, self.main("--infile", "a.py", "--outfile", "o.py")[0])
    self.assertEqual(1, self.main("--infile", "b.py", "--outfile", "p.py")[0])
    self.assertEqual(2, self.main("--infile", "a.py")[0])

  def test_diff_is_exact(self):
    self.files(a__py=LEGACY, b__py="x = 1\n", c__py="import tensorflow as tf\n"
               "y = tf.compat.v1.train.experimental.DynamicLossScale()")
    # c.py has no final newline.
    before = listing(self.folder)
    status, out, _ = self.main("--diff", "a.py", "b.py", "c.py")
    self.assertEqual(cli.WOULD_CHANGE, status)
    self.assertEqual(
        "--- a.py\n"
        "+++ a.py\n"
        "@@ -1,3 +1,4 @@\n"
        " import tensorflow as tf  # comment kept\n"
        "+import mplso\n"
        " \n"
        "-opt = tf.compat.v1.train.experimental."
        "MixedPrecisionLossScaleOptimizer(sgd, 1)\n"
        "+opt = mplso.MixedPrecisionLossScaleOptimizer(sgd, 1)\n"
        "--- c.py\n"
        "+++ c.py\n"
        "@@ -1,2 +1,3 @@\n"
        " import tensorflow as tf\n"
        "-y = tf.compat.v1.train.experimental.DynamicLossScale()\n"
        "\\ No newline at end of file\n"
        "+import mplso\n"
        "+y = mplso.DynamicLossScale()\n"
        "\\ No newline at end of file\n", out)
    self.assertEqual(before, listing(self.folder))

  def test_diff_applies_as_the_plain_run_writes(self):
    self.files(a__py=LEGACY, b__ipynb=NOTEBOOK_TEXT)
    _, out, _ = self.main("--diff", "--intree", ".")
    self.assertIn("--- ./b.ipynb\n+++ ./b.ipynb\n", out)
    # GNU patch, as users apply such a diff (Debian's, on every machine this
    # project tests on; `git apply` refuses `./` paths).
    proc = subprocess.run(["patch", "-p0", "--dry-run"], input=out,
                          capture_output=True, text=True, cwd=self.folder,
                          check=False)
    self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)
    self.assertEqual(0, self.main("--inplace", "a.py", "b.ipynb")[0])
    self.assertEqual(UPGRADED, read("a.py"))
    self.assertEqual((0, "", ""), self.main("--diff", "a.py", "b.ipynb")[:2] +
                     ("",))

  def test_paths_inplace(self):
    self.files(a__py=LEGACY, b__py="x = 1\n", c__ipynb=NOTEBOOK_TEXT)
    status, out, _ = self.main("--inplace", "a.py", "b.py", "c.ipynb",
                               "a.py")
    self.assertEqual(0, status)
    self.assertEqual(UPGRADED, read("a.py"))
    self.assertEqual("x = 1\n", read("b.py"))
    self.assertIn('"import mplso\\n"', read("c.ipynb"))
    self.assertEqual(
        "Processed 2 Python files and 1 notebook: 2 changed, no errors.\n",
        out)
    self.assertEqual(["a.py", "b.py", "c.ipynb"],
                     sorted(os.listdir(self.folder)))  # No report.txt.
    self.assertEqual(0, self.main("--check", "a.py", "b.py", "c.ipynb")[0])

  def test_paths_with_a_report_when_asked(self):
    self.files(a__py=LEGACY)
    self.assertEqual(1, self.main("--check", "a.py", "--reportfile",
                                  "r.txt")[0])
    self.assertEqual(["a.py", "r.txt"], sorted(os.listdir(self.folder)))
    self.assertIn("a.py:3: INFO: Renamed", read("r.txt"))
    self.assertEqual(LEGACY, read("a.py"))

  @parameterized.named_parameters(
      ("paths_alone", ["a.py"], "PATH arguments need --inplace"),
      ("paths_and_infile", ["a.py", "--check", "--infile", "a.py"],
       "not both --infile and PATH arguments"),
      ("check_outfile", ["--check", "--infile", "a.py", "--outfile", "b.py"],
       "--check and --diff write nothing; give no --outfile"),
      ("check_outtree", ["--diff", "--intree", ".", "--outtree", "../o"],
       "give no --outtree"),
      ("check_inplace", ["--check", "--inplace", "a.py"],
       "give no --inplace"),
      ("a_folder", ["--check", "."], "'.' is a folder: give it as --intree"),
      ("missing", ["--inplace", "nope.py"], "no such file: 'nope.py'"),
      ("stdin_inplace", ["--infile", "-", "--inplace"],
       "cannot be converted in place"),
      ("stdin_outfile", ["--infile", "-", "--outfile", "o.py"],
       "writes to standard output; give no --outfile"),
      ("json_is_input", ["--check", "a.py", "--json-report", "a.py"],
       "--json-report 'a.py' is a file the upgrade reads or writes"),
  )
  def test_bad_command_lines(self, args, message):
    self.files(a__py=LEGACY)
    before = listing(self.folder)
    status, _, err = self.main(*args)
    self.assertEqual(cli.BAD_COMMAND_LINE, status)
    self.assertIn(message, err)
    self.assertEqual(before, listing(self.folder))

  def test_the_last_line_counts_the_files_with_a_warning(self):
    # A plain run is what users run first: it says what needs a person.
    self.files(a__py=LEGACY, w__py=WARNED)
    status, out, _ = self.main("--inplace", "a.py", "w.py")
    self.assertEqual(0, status)
    self.assertEqual(
        "Processed 2 Python files: 1 changed, 1 with a WARNING line (the "
        "report says what to look at), no errors.\n", out)

  def test_stdin_to_stdout(self):
    self.files(w__py=WARNED)
    proc = upgrade("--infile", "-", cwd=self.folder, input=LEGACY)
    self.assertEqual(0, proc.returncode, proc.stderr)
    self.assertEqual(UPGRADED, proc.stdout)
    self.assertTrue(proc.stderr.endswith(
        "Processed 1 Python files: 1 changed, no errors.\n"), proc.stderr)
    proc = upgrade("--infile", "-", cwd=self.folder, input=UPGRADED)
    self.assertEqual((0, UPGRADED), (proc.returncode, proc.stdout))
    self.assertEqual(["w.py"], os.listdir(self.folder))  # No report.
    proc = upgrade("--infile", "-", "--check", cwd=self.folder, input=LEGACY)
    self.assertEqual((1, ""), (proc.returncode, proc.stdout))
    proc = upgrade("--infile", "-", "--outfile", "-", "--reportfile", "r.txt",
                   cwd=self.folder, input="def (:\n")
    self.assertEqual((1, "def (:\n"), (proc.returncode, proc.stdout))
    self.assertIn("<stdin>:1: ERROR: does not parse", read("r.txt"))

  def test_stdin_bytes_kept(self):
    data = LEGACY.replace("\n", "\r\n").encode("utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "mplso.upgrade", "--infile", "-"], input=data,
        capture_output=True, cwd=self.folder, timeout=120,
        env=dict(os.environ, PYTHONPATH=ROOT))
    self.assertEqual(0, proc.returncode, proc.stderr)
    self.assertEqual(UPGRADED.replace("\n", "\r\n").encode("utf-8"),
                     proc.stdout)

  def test_json_report(self):
    self.files(a__py=LEGACY, b__py="x = 1\n", c__py="def (:\n", w__py=WARNED,
               n__ipynb=NOTEBOOK_TEXT)
    status, _, _ = self.main("--check", "a.py", "b.py", "c.py", "w.py",
                             "n.ipynb", "--json-report", "r.json")
    self.assertEqual(cli.NEEDS_A_PERSON, status)
    with open("r.json", encoding="utf-8") as f:
      got = json.load(f)
    renamed = {
        "line": 3, "cell": None, "kind": "renamed",
        "old": "tf.compat.v1.train.experimental."
               "MixedPrecisionLossScaleOptimizer",
        "new": "mplso.MixedPrecisionLossScaleOptimizer", "why": ""}
    added = {"line": None, "cell": None, "kind": "added", "old": "",
             "new": "import mplso", "why": ""}
    self.assertEqual(
        {"version": 1, "to": "mplso", "keras": "Keras 3", "other": []},
        {k: v for k, v in got.items() if k != "files"})
    files_ = {entry["path"]: entry for entry in got["files"]}
    self.assertEqual(["a.py", "b.py", "c.py", "w.py", "n.ipynb"],
                     list(files_))
    self.assertEqual({"path": "a.py", "output": None, "kind": "python",
                      "outcome": "changed", "edits": [added, renamed]},
                     files_["a.py"])
    self.assertEqual({"path": "b.py", "output": None, "kind": "python",
                      "outcome": "unchanged", "edits": []}, files_["b.py"])
    self.assertEqual("error", files_["c.py"]["outcome"])
    [error] = files_["c.py"]["edits"]
    self.assertEqual((1, None, "error", "", ""),
                     (error["line"], error["cell"], error["kind"],
                      error["old"], error["new"]))
    self.assertTrue(error["why"].startswith("does not parse"), error)
    [warned] = files_["w.py"]["edits"]
    self.assertEqual((4, "warned"), (warned["line"], warned["kind"]))
    self.assertEqual("unchanged", files_["w.py"]["outcome"])
    self.assertEqual(
        {"path": "n.ipynb", "output": None, "kind": "notebook",
         "outcome": "changed",
         "edits": [dict(added, cell=2), dict(renamed, line=3, cell=2)]},
        files_["n.ipynb"])
    # A plain run names each output.
    self.assertEqual(0, self.main("--infile", "a.py", "--outfile", "o.py",
                                  "--json-report", "p.json")[0])
    with open("p.json", encoding="utf-8") as f:
      self.assertEqual("o.py", json.load(f)["files"][0]["output"])

  @parameterized.parameters(
      (edits_lib.renamed(1, "a", "b"), "renamed"),
      (edits_lib.changed(1, "a", "b", "why"), "changed"),
      (edits_lib.added("import mplso"), "added"),
      (edits_lib.moved("import mplso.compat", "why"), "changed"),
      (edits_lib.kept(1, "a", "why"), "kept"),
      (edits_lib.warned(1, "a", "why"), "warned"),
  )
  def test_edit_kind(self, edit, kind):
    self.assertEqual(kind, json_report.edit_kind(edit))


class PreCommitHooksTest(absltest.TestCase):
  """The repository's .pre-commit-hooks.yaml, read without a YAML parser."""

  def test_hooks(self):
    with open(os.path.join(ROOT, ".pre-commit-hooks.yaml"),
              encoding="utf-8") as f:
      text = f.read()
    hooks, hook = [], None
    for line in text.splitlines():
      if not line.strip() or line.startswith("#"):
        continue
      if line.startswith("- "):
        hook = {}
        hooks.append(hook)
        line = "  " + line[2:]
      self.assertTrue(line.startswith("  ") and ": " in line, line)
      key, value = line.strip().split(": ", 1)
      hook[key] = value
    self.assertEqual(
        [{"id": "mplso-upgrade-check", "entry": "mplso-upgrade --check",
          "language": "python", "types_or": "[python, jupyter]"},
         {"id": "mplso-upgrade", "entry": "mplso-upgrade --inplace",
          "language": "python", "types_or": "[python, jupyter]"}],
        [{k: v for k, v in h.items() if k not in ("name", "description")}
         for h in hooks])
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
      setup = f.read()
    self.assertIn('"console_scripts": ["mplso-upgrade=mplso.upgrade:main"]',
                  setup)

  def test_entry_point_exits_with_main_status(self):
    # setup.py's console script calls `mplso.upgrade.main` and exits with
    # what it returns.
    from mplso import upgrade as upgrade_lib  # pylint: disable=g-import-not-at-top
    self.assertIs(cli.main, upgrade_lib.main)


if __name__ == "__main__":
  absltest.main()
