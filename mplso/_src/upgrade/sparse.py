"""The statements of a big file the upgrade needs to see: `reduce`, `splice`.

LibCST and its metadata cost about a hundred times what `ast` does, per
line. In a big file only a few top-level statements can hold anything the
upgrade acts on, so LibCST is given a copy of the file in which every other
top-level statement is blanked out, line for line: each line keeps its
number and every kept line its text, so edits, report lines and positions
are those of the file itself. The edited copy is then spliced back into the
file; a change that would touch a blanked line makes the caller convert the
whole file instead.

A top-level statement is kept when

- its text can name something the upgrade acts on: what `prefilter` passes
  a file for (a legacy word, call, dotted path, star or attribute import),
  an optimizer's loss-scale method or attribute, `apply_gradients`, a
  checkpoint read, `compile`, or mplso itself;
- it imports (imports decide where added imports go), or it is the module's
  docstring;
- it binds a module-level name that a kept statement reads or binds (what a
  kept statement calls, subclasses or reads is there, so that the planner
  knows what each name is; an alias kept so is followed to what it aliases,
  a function or class is not followed into);
- it reads a name that a kept statement assigns (a module-level name, one
  a function declares `global`, an attribute of anything but `self`),
  where that statement was kept for what it names or by this rule: what
  may hold a loss-scale object, or alias a legacy namespace, is followed
  to its users, as the planner follows it. Not the name of a function or
  class: the planner does not follow a call's result (it reports what
  leaves the code it follows), so a function's callers are not needed.

Blank lines and comments stay as they are, but between two blanked
statements, where they are blanked too (LibCST gives them to the second,
which no edit touches).
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import re
import tokenize

from mplso._src.upgrade import names
from mplso._src.upgrade import optimizer_uses
from mplso._src.upgrade import prefilter
from mplso._src.upgrade import switches

# What an optimizer's user spells, besides the legacy names `prefilter`
# knows: a loss-scale method or attribute, `apply_gradients` (called or
# defined), a checkpoint read, a model's `.optimizer` (`compile` may have
# wrapped it), `compile` (called or defined), and mplso itself.
_ATTRIBUTES = (*optimizer_uses.WORDS, "scale_loss", "optimizer", "compile")
_USES = (rf"\.\s*(?:{'|'.join(_ATTRIBUTES)})\b"
         r"|\bdef\s+(?:compile|apply_gradients)\b"
         r"|\b(?:restore|restore_or_initialize|load_weights|load_model)\s*\("
         r"|mplso")
# Every dotted name of the tables, and every namespace above one.
_TABLE_PATHS = prefilter.PATHS
_TABLE_PREFIXES = frozenset(
    ".".join(path.split(".")[:n]) for path in _TABLE_PATHS
    for n in range(1, path.count(".") + 2))
# What of `_USES` may build or hand on an optimizer (a site, or what holds
# one): a model's `.optimizer` (`compile` wraps), `compile`, mplso. The rest
# only uses one.
_HOLDS = r"\.\s*(?:optimizer|compile)\b|\bdef\s+compile\b|mplso"
_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
# The first line of each blanked range: `pass; """` and its number.
_MARK = 'pass; """mplso-blanked-'


@dataclasses.dataclass(frozen=True)
class Sparse:
  """A file with the statements the upgrade needs, line for line.

  `text`: the file with the other top-level statements blanked out.
  `blanked`: (first, last) 0-based line indices of each blanked range.
  """
  text: str
  blanked: tuple[tuple[int, int], ...]


@dataclasses.dataclass
class _Unit:
  """Top-level statements that share lines: lines `first`-`last`, 0-based."""
  first: int
  last: int
  statements: list[ast.stmt]
  binds: set[str] = dataclasses.field(default_factory=set)
  defines: set[str] = dataclasses.field(default_factory=set)  # def, class
  reads: set[str] = dataclasses.field(default_factory=set)
  named: bool = False  # Its text names something the upgrade acts on.
  imports: bool = False
  # Each statement an import, none of a path that leads to a table's name.
  plain_imports: bool = False


def lines_of(text: str) -> list[str]:
  """`text` split into lines, each with its line break, as Python counts."""
  return _LINES.findall(text)


def reduce(source: str, tree: ast.Module) -> Sparse | None:
  """`source` with only the statements the upgrade needs; None: all of it.

  Args:
    source: the file's text, which `ast.parse` made `tree` of.
    tree: the parsed file.
  """
  if "\r" in source.replace("\r\n", "") or _MARK in source:
    return None  # Lone CR line breaks count lines differently.
  if prefilter.star_of_table(source):
    return None  # What it binds is not known.
  lines = lines_of(source)
  named = _named_lines(source, lines)
  units = _units(tree, lines, source, named)
  kept, forward = _kept(units)
  ranges = _blank_ranges(units, kept)
  classes = [units[i].statements[0] for i in sorted(kept)
             if len(units[i].statements) == 1 and
             isinstance(units[i].statements[0], ast.ClassDef)]
  code = _code_lines(lines, tree) if classes else None
  if code is not None:
    named_in_code = _named_lines(source, code)
    holding = _named_lines(source, code, _HOLDS)
    followed = _Followed(set().union(
        *(units[i].binds - units[i].defines for i in forward)))
    changed = True
    while changed:  # What the module's followed statements hand on.
      before = len(followed.attributes)
      for i in forward:
        followed.attributes |= _holding_attributes(
            units[i].statements, followed, holding, own=False)
      changed = len(followed.attributes) > before
    for cls in classes:
      ranges += _blank_methods(cls, lines, named_in_code, holding, followed)
  ranges.sort()
  if not ranges:
    return None
  out = list(lines)
  for k, (first, last) in enumerate(ranges):
    out[first:last + 1] = _filler(k, lines[first:last + 1])
  return Sparse("".join(out), tuple(ranges))


def reduced_text(text: str) -> str:
  """`text` with only the statements LibCST needs (`reduce`), or whole."""
  found = reduce(text, ast.parse(text))
  return found.text if found else text


def splice(source: str, reduced: Sparse, upgraded: str) -> str | None:
  """`source` with the changes the upgrade made to `reduced.text`.

  The blanked ranges must come back each once, in order and unchanged
  (kept statements may move across them). None where they do not: the
  file is then converted whole.
  """
  original, old = lines_of(source), lines_of(reduced.text)
  new = lines_of(upgraded)
  marks = [i for i, line in enumerate(new)
           if line.lstrip(" \t").startswith(_MARK)]
  if len(marks) != len(reduced.blanked):
    return None
  out, at = [], 0
  for i, (first, last) in zip(marks, reduced.blanked):
    end = i + last - first + 1
    if new[i:end] != old[first:last + 1]:
      return None
    out += new[at:i] + original[first:last + 1]
    at = end
  return "".join(out + new[at:])


def _units(tree: ast.Module, lines: list[str], source: str,
           named: list[bool]) -> list[_Unit]:
  """The top-level statements, those that share a line joined.

  `named`: for each line, whether it names something (`_named_lines`).
  """
  units = _joined(tree.body)
  for unit in units:
    text = "".join(lines[unit.first:unit.last + 1])
    unit.named = any(named[unit.first:unit.last + 1])
    unit.reads = set(prefilter.identifiers(text))
    for statement in unit.statements:
      _binds(statement, unit)
    if "global" in text or ":=" in text:
      for node in ast.walk(ast.Module(unit.statements, [])):
        if isinstance(node, ast.Global):
          unit.binds.update(node.names)
        elif isinstance(node, ast.NamedExpr):
          unit.binds.add(node.target.id)
  for unit in units:
    unit.plain_imports = all(
        isinstance(statement, (ast.Import, ast.ImportFrom)) and
        not _leads_to_tables(statement) for statement in unit.statements)
  if units and _is_docstring(units[0].statements[0]):
    units[0].named = True
  return units


def _joined(body: list[ast.stmt]) -> list[_Unit]:
  """The statements of a block as units, those that share a line joined."""
  units: list[_Unit] = []
  for statement in body:
    first = min([statement.lineno] + [
        d.lineno for d in getattr(statement, "decorator_list", [])]) - 1
    last = (statement.end_lineno or statement.lineno) - 1
    if units and first <= units[-1].last:
      units[-1].last = max(units[-1].last, last)
      units[-1].statements.append(statement)
    else:
      units.append(_Unit(first, last, [statement]))
  return units


def _leads_to_tables(statement: ast.Import | ast.ImportFrom) -> bool:
  """Whether a name `statement` binds may lead to a name of the tables.

  It does where the path it binds is a table's name, a namespace above one
  or a member below one; a relative import's path is not known.
  """
  if isinstance(statement, ast.ImportFrom):
    if statement.level or not statement.module:
      return True
    paths = [f"{statement.module}.{a.name}" for a in statement.names]
  else:
    paths = [a.name if a.asname else a.name.split(".")[0]
             for a in statement.names]
  for path in paths:
    path = names.canonical(path) or path
    parts = path.split(".")
    if path in _TABLE_PREFIXES or any(
        ".".join(parts[:n]) in _TABLE_PATHS for n in range(1, len(parts))):
      return True
  return False


def _pattern(source: str, uses: str = _USES) -> re.Pattern[str]:
  """What makes a statement of `source` one the upgrade needs.

  What `prefilter` passes a file for: a word of the tables, a call it acts
  on by name, an import of an attribute-only namespace, and a part of a
  dotted path of the tables that the file spells in full (maybe over
  several statements: `from tensorflow.python import training`, then
  `training.experimental`), where it is spelled as a part of a dotted name
  or as a string (`getattr`); and `uses` (`_USES`, or `_HOLDS`).
  """
  spelled = set(prefilter.identifiers(source))
  parts = "|".join(sorted(set().union(
      *(need for need in prefilter.NEEDS if need <= spelled))))
  words = "|".join(re.escape(w) for w in prefilter.WORDS)
  calls = "|".join(sorted(prefilter.CALLS))
  dotted = (rf"|\.\s*(?:{parts})\b|\b(?:{parts})\s*\.|[\"'](?:{parts})[\"']"
            if parts else "")
  return re.compile(rf"{words}|\b(?:{calls})\b{dotted}|{uses}|"
                    rf"\b(?:{prefilter.ATTRIBUTE_IMPORT.pattern})")


def _code_lines(lines: list[str], tree: ast.Module) -> list[str] | None:
  """`lines` with comments and prose blanked out; None if not tokenized.

  A string stays where the planner may read it: as the name `getattr(x,
  "name")` reads, or as a switch's text (`switches`); so does an f-string.
  Other strings (docstrings, messages, keys) and comments become spaces,
  line breaks kept.
  """
  chars = [list(line) for line in lines]

  def blank(start, end):
    for row in range(start[0] - 1, end[0]):
      first = start[1] if row == start[0] - 1 else 0
      last = end[1] if row == end[0] - 1 else len(chars[row])
      for col in range(first, last):
        if chars[row][col] not in "\r\n":
          chars[row][col] = " "

  try:
    tokens = list(tokenize.generate_tokens(iter(lines).__next__))
  except (tokenize.TokenError, SyntaxError):
    return None
  read = _getattr_names(tree, lines)
  for token in tokens:
    if token.type == tokenize.COMMENT or (
        token.type == tokenize.STRING and token.start not in read and
        not _switch_text(token.string)):
      blank(token.start, token.end)
  return ["".join(line) for line in chars]


def _getattr_names(tree: ast.Module, lines: list[str]) -> set[tuple[int, int]]:
  """Where each string that `getattr(x, "name")` reads starts (row, col)."""
  found = set()
  for node in ast.walk(tree):
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and
        node.func.id == "getattr" and len(node.args) >= 2):
      name = node.args[1]
      line = lines[name.lineno - 1]
      column = len(line.encode()[:name.col_offset].decode(errors="replace"))
      found.add((name.lineno, column))
  return found


def _switch_text(literal: str) -> bool:
  """Whether a string literal may be a switch's text (`switches`)."""
  try:
    value = ast.literal_eval(literal)
  except (ValueError, SyntaxError):
    return True  # An f-string.
  return not isinstance(value, str) or (
      value.startswith(switches.ENVIRONMENT) or
      value in switches.GRAPPLER_FLOAT16 or
      switches.policy_fix(value) is not None)


def _named_lines(source: str, lines: list[str],
                 uses: str = _USES) -> list[bool]:
  """For each of `lines` (`source`'s), whether it spells what `_pattern`
  finds in `source` (with `uses`)."""
  starts = [0]
  for line in lines:
    starts.append(starts[-1] + len(line))
  named = [False] * len(lines)
  text = "".join(lines)
  for match in _pattern(source, uses).finditer(text):
    first = bisect.bisect_right(starts, match.start()) - 1
    last = bisect.bisect_right(starts, max(match.start(),
                                           match.end() - 1)) - 1
    named[first:last + 1] = [True] * (last - first + 1)
  return named


def _import_lines(statements: list[ast.stmt], lines: list[str]) -> set[int]:
  """The lines of imports in `statements` of paths that lead to no name of
  the tables (`_leads_to_tables`): what they bind names nothing the
  planner acts on."""
  found = set()
  for statement in statements:
    for node in ast.walk(statement):
      if isinstance(node, (ast.Import, ast.ImportFrom)) and not (
          _leads_to_tables(node)) and _alone(node, lines):
        found.update(range(node.lineno - 1, node.end_lineno))
  return found


def _alone(statement: ast.stmt, lines: list[str]) -> bool:
  """Whether `statement` has its lines to itself (a comment may follow)."""
  first, last = statement.lineno - 1, statement.end_lineno - 1
  after = lines[last].encode()[statement.end_col_offset:].decode().strip()
  return (not lines[first].encode()[:statement.col_offset].strip() and
          (not after or after.startswith("#")))


def _is_docstring(statement: ast.stmt) -> bool:
  return (isinstance(statement, ast.Expr) and
          isinstance(statement.value, ast.Constant) and
          isinstance(statement.value.value, str))


def _binds(statement: ast.stmt, unit: _Unit) -> None:
  """Notes the module-level names a top-level `statement` binds.

  The targets of its assignments, loops, `with`, `except` and `match`, in
  the blocks of compound statements too, not in functions and classes.
  """
  if isinstance(statement, (ast.Import, ast.ImportFrom)):
    unit.imports = True
    for alias in statement.names:
      unit.binds.add(alias.asname or alias.name.split(".")[0])
    return
  if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef,
                            ast.ClassDef)):
    unit.binds.add(statement.name)
    unit.defines.add(statement.name)
    return
  targets = []
  if isinstance(statement, ast.Assign):
    targets = statement.targets
  elif isinstance(statement, (ast.AugAssign, ast.AnnAssign)):
    targets = [statement.target]
  elif isinstance(statement, (ast.For, ast.AsyncFor)):
    targets = [statement.target]
  elif isinstance(statement, (ast.With, ast.AsyncWith)):
    targets = [i.optional_vars for i in statement.items if i.optional_vars]
  elif isinstance(statement, ast.Delete):
    targets = statement.targets
  for target in targets:
    for node in ast.walk(target):
      if isinstance(node, ast.Name):
        unit.binds.add(node.id)
  for handler in getattr(statement, "handlers", ()):
    if handler.name:
      unit.binds.add(handler.name)
    for child in handler.body:
      _binds(child, unit)
  for case in getattr(statement, "cases", ()):
    for node in ast.walk(case.pattern):
      name = getattr(node, "name", None) or getattr(node, "rest", None)
      if isinstance(name, str):
        unit.binds.add(name)
    for child in case.body:
      _binds(child, unit)
  for field in ("body", "orelse", "finalbody"):
    for child in getattr(statement, field, ()):
      _binds(child, unit)


def _attributes_set(unit: _Unit) -> set[str]:
  """The attributes `unit` assigns, but those of `self` (`cfg.opt = ...`).

  What such an attribute holds is followed wherever the same attribute is
  read; `self.x` is followed within its class only, which is in the unit.
  """
  return {node.attr for statement in unit.statements
          for node in ast.walk(statement)
          if isinstance(node, ast.Attribute) and
          isinstance(node.ctx, ast.Store) and not (
              isinstance(node.value, ast.Name) and node.value.id == "self")}


def _kept(units: list[_Unit]) -> tuple[set[int], set[int]]:
  """The indices of the units the upgrade needs (see the module's text).

  Also those of the units whose assignments are followed.


  A unit kept for what it names, or for reading what such a unit assigns,
  is followed both ways: to the units binding what it reads or binds, and
  to the units reading what it assigns. A unit kept only for binding a
  name is followed to the binders of what it reads where it assigns (an
  alias may stand for another), not where it only defines a function or
  class: what their bodies read does not change what the name is.
  """
  binders: dict[str, list[int]] = {}
  readers: dict[str, list[int]] = {}
  for i, unit in enumerate(units):
    for name in unit.binds:
      binders.setdefault(name, []).append(i)
    for name in unit.reads:
      readers.setdefault(name, []).append(i)
  kept: set[int] = set()
  forward: set[int] = set()  # Units whose assignments are followed.
  work = [(i, unit.named) for i, unit in enumerate(units)
          if unit.named or unit.imports]
  while work:
    i, follow = work.pop()
    if i in kept and (not follow or i in forward):
      continue
    kept.add(i)
    unit = units[i]
    if follow or unit.imports or unit.binds - unit.defines:
      for name in unit.reads | unit.binds:
        work += [(j, False) for j in binders.get(name, ()) if j not in kept]
    if follow and not unit.plain_imports:
      forward.add(i)
      for name in (unit.binds - unit.defines) | _attributes_set(unit):
        work += [(j, True) for j in readers.get(name, ())
                 if j not in forward]
  return kept, forward


@dataclasses.dataclass
class _Followed:
  """What may hold an optimizer, whose readers the upgrade needs.

  `names`: module-level names; `attributes`: attributes, by name.
  """
  names: set[str]
  attributes: set[str] = dataclasses.field(default_factory=set)

  def read_by(self, node: ast.AST) -> bool:
    """Whether `node` reads one of them."""
    return any(
        (isinstance(n, ast.Name) and n.id in self.names) or
        (isinstance(n, ast.Attribute) and n.attr in self.attributes)
        for n in ast.walk(node))


def _blank_methods(cls: ast.ClassDef, lines: list[str], named: list[bool],
                   holding: list[bool],
                   followed: _Followed) -> list[tuple[int, int]]:
  """Line ranges of the methods of a kept class that the upgrade needs not.

  `named` and `holding`: for each line, whether its code (comments and
  prose left out) names something, or something that may build or hold an
  optimizer (`_HOLDS`). `followed`: what the module's followed statements
  bind or hand on.

  The planner follows what holds an optimizer forward only, from where it
  is built, and `self.x` within its class; it resolves no attribute of
  `self`. So a method is needed when it names something, reads what is
  followed (then what it hands on is followed too), declares `global` or
  `nonlocal`, or is named in a needed method's decorator (`@x.setter`).
  Members that are not methods stay.
  """
  members = _joined(cls.body)
  followed = _Followed(set(followed.names), set(followed.attributes))
  needed, forward = set(), set()
  methods: dict[str, list[int]] = {}
  decorators: dict[int, set[str]] = {}
  for i, member in enumerate(members):
    text = "".join(lines[member.first:member.last + 1])
    imports = _import_lines(member.statements, lines)
    spans = [k for k in range(member.first, member.last + 1)
             if k not in imports]
    member.named = any(named[k] for k in spans)
    statement = member.statements[0]
    method = len(member.statements) == 1 and isinstance(
        statement, (ast.FunctionDef, ast.AsyncFunctionDef))
    if method:
      methods.setdefault(statement.name, []).append(i)
      decorators[i] = {n.id for d in statement.decorator_list
                       for n in ast.walk(d) if isinstance(n, ast.Name)}
    scoping = "global" in text or "nonlocal" in text
    if not method or member.named or scoping:
      needed.add(i)
    if not method or scoping or any(holding[k] for k in spans):
      forward.add(i)
    if scoping:
      for node in ast.walk(statement):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
          followed.names.update(node.names)
  changed = True
  while changed:
    changed = False
    for i, member in enumerate(members):
      if i not in forward and any(followed.read_by(statement)
                                  for statement in member.statements):
        needed.add(i)
        forward.add(i)
        changed = True
      if i in forward:
        held = _holding_attributes(member.statements, followed, holding,
                                   own=True)
        if not held <= followed.attributes:
          followed.attributes |= held
          changed = True
  for i in list(needed):
    for name in decorators.get(i, ()):
      needed.update(methods.get(name, ()))
  return _blank_ranges(members, needed)


def _holding_attributes(statements: list[ast.stmt], followed: _Followed,
                        holding: list[bool], own: bool) -> set[str]:
  """The attributes `statements` assign what may hold an optimizer.

  The planner follows an optimizer from where it is built to the names and
  attributes it is assigned to, and on from where those are read. Here a
  value may hold one where its lines may (`holding`), or where it spells a
  name or attribute that is followed or was assigned such a value (in any
  order). `own`: `self`'s attributes too (within its class).
  """
  assigns = [node for statement in statements for node in ast.walk(statement)
             if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign,
                                  ast.NamedExpr)) and node.value is not None]
  tainted = followed.names | followed.attributes
  found, changed = set(), True
  while changed:
    changed = False
    for node in assigns:
      value = node.value
      if not (any(holding[value.lineno - 1:value.end_lineno]) or
              not _spelled(value).isdisjoint(tainted)):
        continue
      targets = node.targets if isinstance(node, ast.Assign) else [
          node.target]
      for name in set().union(*(_spelled(t) for t in targets)):
        if name not in tainted:
          tainted.add(name)
          changed = True
      found |= {n.attr for t in targets for n in ast.walk(t)
                if isinstance(n, ast.Attribute) and (own or not (
                    isinstance(n.value, ast.Name) and n.value.id == "self"))}
  return found


def _spelled(node: ast.AST) -> set[str]:
  """The names and attributes an expression spells."""
  return {n.id if isinstance(n, ast.Name) else n.attr
          for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute))}


def _blank_ranges(units: list[_Unit],
                  kept: set[int]) -> list[tuple[int, int]]:
  """Line ranges to blank: runs of dropped units, with the blank lines and
  comments between them (they lead the next dropped statement, which no
  edit touches)."""
  ranges: list[list[int]] = []
  previous_dropped = False
  for i, unit in enumerate(units):
    if i in kept:
      previous_dropped = False
    elif previous_dropped:
      ranges[-1][1] = unit.last
    else:
      ranges.append([unit.first, unit.last])
      previous_dropped = True
  return [(first, last) for first, last in ranges]


def _filler(k: int, lines: list[str]) -> list[str]:
  """As many lines as `lines`: one statement that does nothing, marked.

  At the indentation of the first line (a method's, in a class).
  """
  mark = f'{_indent(lines[0])}{_MARK}{k}"""'
  if len(lines) == 1:
    return [mark + _break(lines[0])]
  middle = [_break(line) for line in lines[1:-1]]
  return [mark[:-3] + _break(lines[0]), *middle, '"""' + _break(lines[-1])]


def _indent(line: str) -> str:
  """The spaces and tabs that begin `line`."""
  return line[:len(line) - len(line.lstrip(" \t"))]


def _break(line: str) -> str:
  """The line break that ends `line` ("" on a last line without one)."""
  return line[len(line.rstrip("\r\n")):]
