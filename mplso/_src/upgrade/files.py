"""The upgrade's files on disk: decoded as Python reads them, written whole.

A Python file is decoded as the interpreter decodes it (PEP 263: a UTF-8
byte order mark, or a `# -*- coding: ... -*-` line on line 1 or 2, else
UTF-8) and encoded back the same way; its line endings are never
translated, so an untouched line keeps its bytes. Every output is written to
a temporary file beside its target and moved over it with `os.replace`, so a
reader (or a run stopped halfway) sees the old file or the new one, never
half of one; it keeps the mode of its input. `walk` lists a tree without
following a symbolic link.
"""

from __future__ import annotations

import codecs
import dataclasses
import io
import os
import re
import shutil
import stat
import tempfile
import tokenize

# The member kinds `walk` lists.
PYTHON = "python"  # A regular file named `*.py`: converted.
OTHER = "other"  # Any other regular file: copied.
LINK = "link"  # A symbolic link, whatever it points to: mirrored as a link.
SPECIAL = "special"  # A pipe, socket or device: neither read nor copied.

# PEP 263's pattern for the declaration, as `tokenize` matches it.
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_BOM = b"\xef\xbb\xbf"


class DecodeError(ValueError):
  """A file's bytes are not valid in the encoding Python would read it in.

  Attributes:
    line: the 1-based line Python names for the error.
  """

  def __init__(self, line: int, message: str):
    super().__init__(message)
    self.line = line


@dataclasses.dataclass(frozen=True)
class Source:
  """A Python file as read: its bytes, its text and how to write it back."""
  data: bytes
  text: str  # Decoded; line endings as in the file, no byte order mark.
  encoding: str  # A codec name; `utf-8-sig` for a file with a BOM.
  mode: int  # The permission bits (`stat.S_IMODE`).

  def encode(self, text: str) -> bytes:
    """`text` as bytes in this file's encoding (its BOM, if it had one)."""
    return text.encode(self.encoding)


def decode(data: bytes) -> tuple[str, str]:
  """Returns (text, encoding) of a Python file's bytes, as Python reads it.

  Args:
    data: the file's bytes.

  Raises:
    DecodeError: the declared encoding is unknown or contradicts a byte
      order mark, or a byte is not valid in the encoding.
  """
  try:
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
  except SyntaxError as e:
    # A bad declaration, or a byte of line 1 or 2 that is not valid.
    encoding = _undetected(data)
    error = e
  else:
    error = None
  try:
    text = data.decode(encoding)
  except UnicodeDecodeError as e:
    body = e.object  # `data` after its byte order mark, if any.
    line = body.count(b"\n", 0, e.start) + 1
    column = e.start - (body.rfind(b"\n", 0, e.start) + 1) + 1
    line_declared, name = _declaration(data)
    declared = (f"declared on line {line_declared}" if name else
                "as its byte order mark says" if data.startswith(_BOM) else
                "no encoding declared, PEP 263")
    raise DecodeError(line, (
        f"byte 0x{body[e.start]:02x} at column {column} is not valid "
        f"{encoding} ({declared})")) from None
  if error is not None:
    raise DecodeError(_declaration(data)[0], str(error))
  return text, encoding


def _undetected(data: bytes) -> str:
  """The encoding to find the bad byte with where `tokenize` found none.

  Raises:
    DecodeError: the declared encoding is unknown, or contradicts the
      file's byte order mark.
  """
  line, name = _declaration(data)
  bom = data.startswith(_BOM)
  if name:
    try:
      codec = codecs.lookup(name).name
    except LookupError:
      raise DecodeError(line, f"unknown encoding: {name}") from None
    if bom and codec != "utf-8":
      raise DecodeError(line, "it starts with a UTF-8 byte order mark, but "
                        f"line {line} declares {name}")
  return "utf-8-sig" if bom else name or "utf-8"


def _declaration(data: bytes) -> tuple[int, str]:
  """(line, encoding) of the encoding declaration; (1, "") without one."""
  for number, line in enumerate(data.splitlines()[:2], start=1):
    match = _COOKIE.match(line.removeprefix(_BOM))
    if match:
      return number, match.group(1).decode("ascii", "replace")
  return 1, ""


def read(path: str) -> Source:
  """Reads a Python file.

  Args:
    path: the file.

  Raises:
    OSError: it cannot be read.
    DecodeError: as `decode`.
  """
  with open(path, "rb") as f:
    mode = stat.S_IMODE(os.fstat(f.fileno()).st_mode)
    data = f.read()
  text, encoding = decode(data)
  return Source(data, text, encoding, mode)


def write(path: str, data: bytes, mode: int) -> None:
  """Writes `data` to `path` whole or not at all, with permission bits `mode`.

  The bytes go to a temporary file in `path`'s folder (created if missing),
  which then replaces `path` in one step.

  Args:
    path: the file to write (replaced if it exists; a link there is
      replaced by the file, its target left alone).
    data: the bytes.
    mode: the permission bits the file gets (its input's).

  Raises:
    OSError: it cannot be written; nothing is left behind.
  """
  def fill(temp):
    with open(temp, "wb") as f:
      f.write(data)
    os.chmod(temp, mode)
  _replace(path, fill)


def new_file_mode(path: str) -> int:
  """The mode `path` has, or the one `open` would give a new file there."""
  try:
    return stat.S_IMODE(os.stat(path).st_mode)
  except OSError:
    umask = os.umask(0o022)  # Reading the mask means setting it.
    os.umask(umask)
    return 0o666 & ~umask


def copy(source: str, destination: str) -> None:
  """Copies a file's bytes, mode and times, whole or not at all (as `write`).

  Raises:
    OSError: it cannot be read or written; nothing is left behind.
  """
  def fill(temp):
    shutil.copyfile(source, temp)
    shutil.copystat(source, temp)
  _replace(destination, fill)


def _replace(path: str, fill) -> None:
  """Calls `fill(temp)` on a new file beside `path`, then moves it there."""
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
  handle, temp = tempfile.mkstemp(
      dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
  os.close(handle)
  try:
    fill(temp)
    os.replace(temp, path)
  except BaseException:
    try:
      os.unlink(temp)
    except OSError:
      pass
    raise


def link(text: str, destination: str) -> None:
  """Makes `destination` a symbolic link whose text is `text`.

  Raises:
    OSError: it cannot be made.
  """
  os.makedirs(os.path.dirname(os.path.abspath(destination)), exist_ok=True)
  os.symlink(text, destination)


@dataclasses.dataclass(frozen=True)
class Member:
  """One entry of a tree `walk` lists.

  Attributes:
    path: where it is (the tree's path joined with its relative path).
    relative: its path inside the tree.
    kind: `PYTHON`, `OTHER`, `LINK` or `SPECIAL`.
    link: a link's text (what `os.readlink` returns); "" for others.
  """
  path: str
  relative: str
  kind: str
  link: str = ""


def walk(tree: str) -> tuple[list[Member], list[tuple[str, str]]]:
  """Lists a tree's files and links, sorted by path, following no link.

  A link to a folder is listed as a link, not walked into: the folder, when
  inside the tree, is walked as itself.

  Args:
    tree: the folder.

  Returns:
    (members, problems): `problems` lists (folder, why) for each folder
    that could not be listed.
  """
  members, problems = [], []

  def failed(error: OSError):
    problems.append((error.filename or tree, error.strerror or str(error)))

  for folder, folders, names in os.walk(tree, onerror=failed):
    folders.sort()
    entries = sorted(names + [f for f in folders
                              if os.path.islink(os.path.join(folder, f))])
    for name in entries:
      path = os.path.join(folder, name)
      relative = os.path.relpath(path, tree)
      try:
        status = os.lstat(path)
        if stat.S_ISLNK(status.st_mode):
          members.append(Member(path, relative, LINK, os.readlink(path)))
          continue
      except OSError as e:
        failed(e)
        continue
      if not stat.S_ISREG(status.st_mode):
        kind = SPECIAL
      elif name.endswith(".py"):
        kind = PYTHON
      else:
        kind = OTHER
      members.append(Member(path, relative, kind))
  members.sort(key=lambda m: m.relative.split(os.sep))
  return members, problems


def inside(path: str, folder: str) -> bool:
  """Whether `path`, links resolved, is `folder` or lies under it."""
  path, folder = os.path.realpath(path), os.path.realpath(folder)
  return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def unwritable(path: str) -> str | None:
  """Why a file cannot be written at `path`, or None when it can.

  Tries it: a temporary file is made, and removed, in the nearest folder
  that exists on the way to `path` (the folders below it would be made).

  Args:
    path: a file or folder to create, or a file to replace.
  """
  if os.path.isdir(path):
    return "is a folder"
  if os.path.exists(path) and not os.access(path, os.W_OK):
    return "is read-only"
  folder = os.path.dirname(os.path.abspath(path))
  while not os.path.lexists(folder):
    folder = os.path.dirname(folder)
  if not os.path.isdir(folder):
    return f"{folder!r} is not a folder"
  try:
    handle, temp = tempfile.mkstemp(dir=folder, prefix=".mplso-upgrade-")
  except OSError as e:
    return f"no file can be made in {folder!r} ({e.strerror or e})"
  os.close(handle)
  os.unlink(temp)
  return None
