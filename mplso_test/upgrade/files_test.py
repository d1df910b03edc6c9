"""Tests `files`: decoding as Python does, whole writes, walking a tree."""

import os
import stat
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized

from mplso._src.upgrade import files
from mplso_test.helpers.byte_files import get
from mplso_test.helpers.byte_files import put

BOM = b"\xef\xbb\xbf"


class DecodeTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("utf_8", "x = 'é'\r\n".encode(), "x = 'é'\r\n", "utf-8"),
      ("bom", BOM + b"x = 1\r\n", "x = 1\r\n", "utf-8-sig"),
      ("latin_1_declared", b"# -*- coding: latin-1 -*-\nx = '\xe9'\n",
       "# -*- coding: latin-1 -*-\nx = 'é'\n", "iso-8859-1"),
      ("declared_on_line_2", b"#!/usr/bin/env python\n# coding=cp1252\n"
       b"x = '\x80'\n", "#!/usr/bin/env python\n# coding=cp1252\nx = '€'\n",
       "cp1252"),
  )
  def test_round_trip(self, data, text, encoding):
    self.assertEqual((text, encoding), files.decode(data))
    source = files.Source(data, text, encoding, 0o644)
    self.assertEqual(data, source.encode(text))

  @parameterized.named_parameters(
      ("bad_utf_8", b"x = 1\ny = '\xff'\n", 2,
       "byte 0xff at column 6 is not valid utf-8 (no encoding declared, PEP "
       "263)"),
      ("bad_declared", b"# coding: ascii\n\nx = '\xe9'\n", 3,
       "byte 0xe9 at column 6 is not valid ascii (declared on line 1)"),
      ("bad_utf_8_declared", b"# coding: utf-8\n\xff\n", 2,
       "byte 0xff at column 1 is not valid utf-8 (declared on line 1)"),
      ("bad_utf_8_after_a_bom", BOM + b"\xff\n", 1,
       "byte 0xff at column 1 is not valid utf-8-sig (as its byte order mark "
       "says)"),
      ("bad_byte_on_line_1", b"x = '\xff'\n", 1,
       "byte 0xff at column 6 is not valid utf-8 (no encoding declared, PEP "
       "263)"),
      ("unknown_declared", b"#!/bin/python\n# coding: klingon\n", 2,
       "unknown encoding: klingon"),
      ("bom_and_another", BOM + b"# coding: latin-1\n", 1,
       "it starts with a UTF-8 byte order mark, but line 1 declares "
       "latin-1"),
  )
  def test_errors_name_the_line(self, data, line, message):
    with self.assertRaises(files.DecodeError) as raised:
      files.decode(data)
    self.assertEqual(line, raised.exception.line)
    self.assertEqual(message, str(raised.exception))


class WriteTest(absltest.TestCase):

  def test_write_replaces_whole_with_the_mode_given(self):
    folder = self.create_tempdir().full_path
    path = os.path.join(folder, "new", "a.py")
    files.write(path, b"x = 1\r\n", 0o751)
    self.assertEqual(b"x = 1\r\n", get(path))
    self.assertEqual(0o751, stat.S_IMODE(os.stat(path).st_mode))
    files.write(path, b"y = 2\n", 0o644)
    self.assertEqual(b"y = 2\n", get(path))
    self.assertEqual(["a.py"], os.listdir(os.path.dirname(path)))

  def test_a_failed_write_leaves_the_old_file_and_no_temporary(self):
    folder = self.create_tempdir().full_path
    path = os.path.join(folder, "a.py")
    put(path, b"old\n")
    with mock.patch.object(os, "replace", side_effect=OSError(28, "full")):
      with self.assertRaises(OSError):
        files.write(path, b"new\n", 0o644)
    self.assertEqual(b"old\n", get(path))
    self.assertEqual(["a.py"], os.listdir(folder))

  def test_a_link_is_replaced_not_written_through(self):
    folder = self.create_tempdir().full_path
    put(os.path.join(folder, "target.py"), b"old\n")
    os.symlink("target.py", os.path.join(folder, "link.py"))
    files.write(os.path.join(folder, "link.py"), b"new\n", 0o644)
    self.assertEqual(b"old\n", get(os.path.join(folder, "target.py")))
    self.assertFalse(os.path.islink(os.path.join(folder, "link.py")))

  def test_copy_keeps_bytes_and_mode(self):
    folder = self.create_tempdir().full_path
    put(os.path.join(folder, "run.sh"), b"\x00\xff\r\n", 0o755)
    files.copy(os.path.join(folder, "run.sh"), os.path.join(folder, "o", "r"))
    self.assertEqual(b"\x00\xff\r\n", get(os.path.join(folder, "o", "r")))
    self.assertEqual(0o755, stat.S_IMODE(
        os.stat(os.path.join(folder, "o", "r")).st_mode))

  def test_read_keeps_the_mode(self):
    folder = self.create_tempdir().full_path
    path = os.path.join(folder, "a.py")
    put(path, BOM + b"x = 1\r\n", 0o700)
    self.assertEqual(files.Source(BOM + b"x = 1\r\n", "x = 1\r\n",
                                  "utf-8-sig", 0o700), files.read(path))

  def test_new_file_mode(self):
    folder = self.create_tempdir().full_path
    put(os.path.join(folder, "a"), b"", 0o640)
    self.assertEqual(0o640, files.new_file_mode(os.path.join(folder, "a")))
    umask = os.umask(0o027)
    self.addCleanup(os.umask, umask)
    self.assertEqual(0o640, files.new_file_mode(os.path.join(folder, "b")))


class WalkTest(absltest.TestCase):

  def test_members_sorted_links_not_followed(self):
    tree = self.create_tempdir().full_path
    outside = self.create_tempdir().full_path
    put(os.path.join(tree, "b.py"), b"")
    put(os.path.join(tree, "a", "c.txt"), b"")
    put(os.path.join(outside, "lib", "d.py"), b"")
    os.symlink("../b.py", os.path.join(tree, "a", "link.py"))
    os.symlink(os.path.join(outside, "lib"), os.path.join(tree, "lib"))
    os.symlink("a", os.path.join(tree, "same"))
    os.symlink("gone.py", os.path.join(tree, "dangling.py"))
    os.mkfifo(os.path.join(tree, "pipe"))
    members, problems = files.walk(tree)
    self.assertEqual([
        ("a/c.txt", files.OTHER, ""), ("a/link.py", files.LINK, "../b.py"),
        ("b.py", files.PYTHON, ""), ("dangling.py", files.LINK, "gone.py"),
        ("lib", files.LINK, os.path.join(outside, "lib")),
        ("pipe", files.SPECIAL, ""), ("same", files.LINK, "a")],
        [(m.relative, m.kind, m.link) for m in members])
    self.assertEqual(os.path.join(tree, "b.py"), members[2].path)
    self.assertEmpty(problems)

  def test_a_folder_that_cannot_be_listed_is_a_problem(self):
    tree = self.create_tempdir().full_path
    put(os.path.join(tree, "a", "b.py"), b"")
    put(os.path.join(tree, "top.py"), b"")
    real = os.scandir

    def scandir(path):
      if path.endswith(os.sep + "a"):
        raise PermissionError(13, "Permission denied", path)
      return real(path)

    with mock.patch.object(os, "scandir", scandir):
      members, problems = files.walk(tree)
    self.assertEqual(["top.py"], [m.relative for m in members])
    self.assertEqual([(os.path.join(tree, "a"), "Permission denied")],
                     problems)


class PathTest(parameterized.TestCase):

  def test_inside(self):
    tree = self.create_tempdir().full_path
    os.symlink(tree, tree + "_link")
    self.assertTrue(files.inside(os.path.join(tree, "x", "y"), tree))
    self.assertTrue(files.inside(tree, tree + "_link"))
    self.assertTrue(files.inside(os.path.join(tree + "_link", "x"), tree))
    self.assertFalse(files.inside(tree + "2", tree))
    self.assertFalse(files.inside(os.path.dirname(tree), tree))

  def test_unwritable(self):
    folder = self.create_tempdir().full_path
    put(os.path.join(folder, "file"), b"")
    self.assertIsNone(files.unwritable(os.path.join(folder, "new", "x")))
    self.assertIsNone(files.unwritable(os.path.join(folder, "file")))
    self.assertEqual("is a folder", files.unwritable(folder))
    self.assertEqual(f"{os.path.join(folder, 'file')!r} is not a folder",
                     files.unwritable(os.path.join(folder, "file", "x")))
    self.assertEqual(["file"], os.listdir(folder))  # The probe is gone.
    with mock.patch.object(files.tempfile, "mkstemp",
                           side_effect=PermissionError(13, "Permission "
                                                       "denied")):
      self.assertEqual(f"no file can be made in {folder!r} (Permission "
                       "denied)", files.unwritable(os.path.join(folder, "y")))


if __name__ == "__main__":
  absltest.main()
