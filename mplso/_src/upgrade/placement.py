"""Where the upgrade puts the lines it adds: imports and `install()`.

`import mplso.X` lines go after the file's first block of TensorFlow
imports; `mplso.compat.install()` goes just before its first TensorFlow
import (after anything the program sets up first, such as environment
variables), or after the docstring and `from __future__` imports when the
file imports no TensorFlow at the top.
"""

from __future__ import annotations

import libcst as cst

from mplso._src.upgrade import bindings as bindings_lib
from mplso._src.upgrade import edits as edits_lib


def _is_import(node) -> bool:
  return isinstance(node, (cst.Import, cst.ImportFrom))


def _imports_tensorflow(statement) -> bool:
  if not isinstance(statement, cst.SimpleStatementLine):
    return False
  for small in statement.body:
    if isinstance(small, cst.Import):
      if any((bindings_lib.dotted(a.name) or "").split(".")[0] ==
             "tensorflow" for a in small.names):
        return True
    if isinstance(small, cst.ImportFrom) and not small.relative:
      if (bindings_lib.dotted(small.module) or "").split(".")[0] == \
          "tensorflow":
        return True
  return False


def _is_import_line(statement) -> bool:
  return isinstance(statement, cst.SimpleStatementLine) and all(
      _is_import(s) for s in statement.body)


def _present_imports(module: cst.Module) -> set[str]:
  found = set()
  for statement in module.body:
    if _is_import_line(statement):
      for small in statement.body:
        if isinstance(small, cst.Import):
          found.update(bindings_lib.dotted(a.name) for a in small.names
                       if a.asname is None)
  return found


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
      isinstance(s, cst.ImportFrom) and bindings_lib.dotted(s.module) ==
      "__future__" for s in body[index].body):
    index += 1
  return index


def insert(module: cst.Module, modules: set[str],
           install_why: list[tuple[int, str]]):
  """Returns the module's new body and the edits that report the additions.

  Args:
    module: the rewritten module.
    modules: what to import (`mplso.keras`, `tensorflow as tf`, ...); a
      module the file imports already is not imported again.
    install_why: (line, reason) for each use that needs
      `mplso.compat.install()`; empty: no install() line.
  """
  body = list(module.body)
  edits = []
  present = _present_imports(module)
  wanted = set(modules)
  if install_why:
    wanted.add("mplso.compat")
  if any(m.startswith("mplso.") for m in wanted):
    wanted.discard("mplso")
  missing = sorted(m for m in wanted if m not in present)
  first_tf = next((i for i, s in enumerate(body) if _imports_tensorflow(s)),
                  None)
  if first_tf is None:
    position = _header_end(module)
  else:
    position = first_tf
    while position + 1 < len(body) and _is_import_line(body[position + 1]):
      position += 1
    position += 1
  lines = [cst.parse_statement(f"import {m}\n") for m in missing]
  install_present = "mplso.compat.install()" in module.code
  if install_why and not install_present:
    install_at = first_tf if first_tf is not None else position
    call = cst.parse_statement("mplso.compat.install()\n")
    compat_import = [s for s in lines
                     if bindings_lib.dotted(s.body[0].names[0].name) ==
                     "mplso.compat"]
    lines = [s for s in lines if s not in compat_import]
    block = [*compat_import, call]
    if install_at < len(body):
      block[0] = block[0].with_changes(
          leading_lines=body[install_at].leading_lines)
      body[install_at] = body[install_at].with_changes(leading_lines=())
    body[install_at:install_at] = block
    position += len(block)
    edits.append(edits_lib.Edit(
        install_why[0][0], "", "mplso.compat.install()",
        "; ".join(f"line {line}: {why}" for line, why in install_why)))
  if lines:
    body[position:position] = lines
    edits.append(edits_lib.Edit(
        0, "", "; ".join(f"import {m}" for m in missing)))
  return body, edits
