"""One file read once with `ast`: what every later pass needs of it.

`ast` is the floor any tool that reads Python pays; LibCST, with its
metadata, costs a hundred times as much. `parse` parses a file once and
keeps, instead of the tree, what the passes after it use: whether a legacy
name can be spelled in it, the error of a file that does not parse, the
statements LibCST needs to see (`sparse`), and, for `--to native` over a
tree, what the file shows about optimizers without LibCST (its imports, its
classes that define `apply_gradients`).
"""

from __future__ import annotations

import ast
import dataclasses

from mplso._src.upgrade import optimizer_uses
from mplso._src.upgrade import prefilter
from mplso._src.upgrade import reaches
from mplso._src.upgrade import sparse


@dataclasses.dataclass(frozen=True)
class Parsed:
  """What the upgrade needs of one file's text.

  `legacy`: whether a legacy name can be spelled in it (`prefilter`), and
  where `reaches` can tell, whether the planner may act on it.
  `error`: why `ast` could not parse it (None: it parses).
  `reduced`: the statements LibCST needs (None: all of them, or the file
  does not parse).
  `facts`: whether `imports` and `overriding` were noted: as
  `optimizer_uses.imported_names` and `optimizer_uses.overriding_classes`.
  """
  text: str
  legacy: bool
  facts: bool = False
  error: str | None = None
  reduced: sparse.Sparse | None = None
  imports: frozenset[str] = frozenset()
  overriding: dict[str, str] = dataclasses.field(default_factory=dict)

  @property
  def for_libcst(self) -> str:
    """The text to give LibCST: the reduced one where there is one."""
    return self.reduced.text if self.reduced else self.text


def parse(text: str, path: str = "this file", facts: bool = False,
          imports: bool = True) -> Parsed:
  """Reads `text` once with `ast`.

  Args:
    text: a Python module's text.
    path: the file, as the report names it.
    facts: also note what `optimizer_uses.Facts` takes without LibCST
      (`--to native`).
    imports: with `facts`, note the file's imports too (they tell which
      files of a tree reach which; one file alone needs none).
  """
  legacy = prefilter.may_hold_legacy(text)
  try:
    tree = ast.parse(text)
  except (SyntaxError, ValueError) as e:
    return Parsed(text, legacy, facts, error=described(e))
  except (RecursionError, MemoryError):
    return Parsed(text, legacy, facts)  # LibCST says what it can.
  if legacy and prefilter.for_reaches(text):
    legacy = reaches.may_reach(tree)
  reduced = sparse.reduce(text, tree) if legacy else None
  if not facts:
    return Parsed(text, legacy, reduced=reduced)
  return Parsed(text, legacy, True, reduced=reduced,
                imports=(optimizer_uses.imported_names(tree) if imports
                         else frozenset()),
                overriding=(optimizer_uses.overriding_classes(tree, path)
                            if "apply_gradients" in text else {}))


def syntax_error(text: str) -> str | None:
  """Why Python does not parse `text`, in its own words; None where it does.

  LibCST's parser names other positions (the token after the error), so a
  file neither parses is reported with Python's, the line the report names.
  """
  try:
    compile(text, "<upgrade>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
  except (SyntaxError, ValueError) as e:
    return described(e)
  except (RecursionError, MemoryError):
    return None
  return None


def described(error: SyntaxError | ValueError) -> str:
  """`does not parse (line L, column C): Python's message`."""
  if not isinstance(error, SyntaxError):
    return f"does not parse: {error}"  # Null bytes.
  where = f"line {error.lineno}" if error.lineno else ""
  if error.lineno and error.offset:
    where += f", column {error.offset}"
  return (f"does not parse ({where}): {error.msg}" if where else
          f"does not parse: {error.msg}")
