"""Where the upgrade puts the lines it adds: imports and `install()`.

`import mplso.X` lines go after the file's first block of TensorFlow
imports (before it, when its first line also holds other statements, which
may use the names); `mplso.compat.install()` goes just before its first
TensorFlow import (after anything the program sets up first, such as
environment variables), or after the docstring and `from __future__` imports
when the file imports no TensorFlow at the top, with `import mplso.compat`
before it: added there, or moved up from a line of its own below.
"""

from __future__ import annotations

from typing import NamedTuple

import libcst as cst
from libcst.helpers import get_full_name_for_node

from mplso._src.upgrade import bindings as bindings_lib
from mplso._src.upgrade import edits as edits_lib

COMPAT = "mplso.compat"
INSTALL_CALL = "mplso.compat.install"
INSTALL = f"{INSTALL_CALL}()"  # The line `insert` adds; its edit's `new`.


def _is_import(node) -> bool:
  """Whether `node` is an `import` or a `from ... import`."""
  return isinstance(node, (cst.Import, cst.ImportFrom))


def _imports_tensorflow(statement) -> bool:
  """Whether the line `statement` imports `tensorflow`."""
  if not isinstance(statement, cst.SimpleStatementLine):
    return False
  for small in statement.body:
    if isinstance(small, cst.Import):
      if any(a.evaluated_name.split(".")[0] == "tensorflow"
             for a in small.names):
        return True
    if isinstance(small, cst.ImportFrom) and not small.relative:
      module = get_full_name_for_node(small.module) or ""
      if module.split(".")[0] == "tensorflow":
        return True
  return False


def _is_import_line(statement) -> bool:
  """Whether `statement` is a line of imports only."""
  return isinstance(statement, cst.SimpleStatementLine) and all(
      _is_import(s) for s in statement.body)


def _imported_at(body) -> dict[str, int]:
  """{module: index of the first top-level line with `import module`}."""
  found = {}
  for index, statement in enumerate(body):
    if _is_import_line(statement):
      for small in statement.body:
        if isinstance(small, cst.Import):
          for alias in small.names:
            if alias.asname is None:
              found.setdefault(alias.evaluated_name, index)
  return found


class _InstallFinder(cst.CSTVisitor):
  """Finds a statement `mplso.compat.install()`, at any depth."""

  def __init__(self):
    super().__init__()
    self.found = False

  def visit_Expr(self, node: cst.Expr) -> bool:
    """Notes an expression statement that calls `install()`."""
    if (isinstance(node.value, cst.Call) and not node.value.args and
        bindings_lib.dotted(node.value.func) == INSTALL_CALL):
      self.found = True
    return False


def _installs(module: cst.Module) -> bool:
  """Whether `module` has a statement that calls `mplso.compat.install()`.

  A comment or a string with that text is not one.
  """
  finder = _InstallFinder()
  module.visit(finder)
  return finder.found


def _moves_compat_import(body, index: int) -> bool:
  """Whether the line `body[index]` is `import mplso.compat` alone.

  Such a line can move up to where `install()` needs it (comments above it
  stay where they are, on the next statement).
  """
  statement = body[index]
  if not (len(statement.body) == 1 and
          isinstance(statement.body[0], cst.Import) and
          len(statement.body[0].names) == 1):
    return False
  return index + 1 < len(body) or not statement.leading_lines


def _header_end(module: cst.Module) -> int:
  """Index after the docstring and `from __future__` imports."""
  index = 0
  body = module.body
  if (body and isinstance(body[0], cst.SimpleStatementLine) and
      isinstance(body[0].body[0], cst.Expr) and
      isinstance(body[0].body[0].value, (cst.SimpleString,
                                          cst.ConcatenatedString))):
    index = 1
  while index < len(body) and isinstance(body[index],
                                         cst.SimpleStatementLine) and any(
      isinstance(s, cst.ImportFrom) and get_full_name_for_node(s.module) ==
      "__future__" for s in body[index].body):
    index += 1
  return index


class Placed(NamedTuple):
  """What `insert` did: the new body, its edits, and whether it installs."""
  body: list[cst.BaseStatement]
  edits: list[edits_lib.Edit]
  installs: bool  # Whether it inserted `mplso.compat.install()`.


def insert(module: cst.Module, modules: set[str],
           install_why: list[tuple[int, str]]) -> Placed:
  """Adds the imports and `install()` the plan needs; returns what it did.

  The edits: `install()` (when inserted: not when the file calls it
  already), one for the added imports (`import mplso.compat` among them),
  and one for an `import mplso.compat` moved up to `install()`.

  Args:
    module: the rewritten module.
    modules: what to import (`mplso.keras`, `tensorflow as tf`, ...); a
      module the file imports already is not imported again.
    install_why: (line, reason) for each use that needs
      `mplso.compat.install()`; empty: no install() line.
  """
  body = list(module.body)
  edits = []
  imported = _imported_at(body)
  wanted = set(modules)
  if install_why:
    wanted.add(COMPAT)
  if any(m.startswith("mplso.") for m in wanted):
    wanted.discard("mplso")
  first_tf = next((i for i, s in enumerate(body) if _imports_tensorflow(s)),
                  None)
  install_at = first_tf if first_tf is not None else _header_end(module)
  install = bool(install_why) and not _installs(module)
  moved = None
  if install and imported.get(COMPAT, -1) >= install_at:
    # `import mplso.compat` comes too late to bind `mplso` for install().
    index = imported.pop(COMPAT)
    if _moves_compat_import(body, index):
      moved = body.pop(index)
      if index < len(body):
        body[index] = body[index].with_changes(leading_lines=[
            *moved.leading_lines, *body[index].leading_lines])
      moved = moved.with_changes(leading_lines=())
      edits.append(edits_lib.moved(
          "import mplso.compat",
          "moved up: `mplso.compat.install()` goes before the first "
          "TensorFlow import, and needs `mplso.compat` imported before it"))
  missing = sorted(m for m in wanted
                   if m not in imported and not (m == COMPAT and moved))
  # Where the imports go: after the first block of import lines that
  # imports TensorFlow; before its first line when that line holds more
  # than imports (`import tensorflow as tf; tf.x()` uses names on it).
  before_tf = first_tf is not None and not _is_import_line(body[first_tf])
  if first_tf is None:
    position = install_at
  elif before_tf:
    position = first_tf
  else:
    position = first_tf
    while position + 1 < len(body) and _is_import_line(body[position + 1]):
      position += 1
    position += 1
  lines = [cst.parse_statement(f"import {m}\n") for m in missing]
  if install:
    call = cst.parse_statement(f"{INSTALL}\n")
    compat_import = [moved] if moved else [
        s for s in lines
        if s.body[0].names[0].evaluated_name == COMPAT]
    lines = [s for s in lines if s not in compat_import]
    block = [*compat_import, call]
    if install_at < len(body):
      block[0] = block[0].with_changes(
          leading_lines=body[install_at].leading_lines)
      body[install_at] = body[install_at].with_changes(leading_lines=())
    body[install_at:install_at] = block
    position += len(block)
    edits.append(edits_lib.added(
        INSTALL, "; ".join(f"line {line}: {why}" for line, why in install_why),
        line=install_why[0][0]))
  if lines:
    if before_tf and not install:
      # Comments and blank lines above TensorFlow's line go above ours.
      lines[0] = lines[0].with_changes(
          leading_lines=body[position].leading_lines)
      body[position] = body[position].with_changes(leading_lines=())
    body[position:position] = lines
  if missing:
    edits.append(edits_lib.added("; ".join(f"import {m}" for m in missing)))
  return Placed(body, edits, install)
