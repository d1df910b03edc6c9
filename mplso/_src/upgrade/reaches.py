"""Whether the planner can act on a file, read from `ast`: `may_reach`.

`prefilter` passes a file on the words it spells, and TensorFlow's own code
spells `python`, `training`, `experimental`, `mixed_precision`, `Policy` and
`LossScaleOptimizer` in code that has nothing to upgrade
(`tensorflow.python.training.optimizer`, Keras's own optimizer classes). In
a file that calls no policy setter or loss-scaling method by name and does
not name mplso (`prefilter.for_reaches`), the planner can act only on

- a path an import names (`_plan_import`), or that a chain (a name,
  attributes read on it, `getattr(x, "literal")`) reaches through what the
  file's imports and aliases of TensorFlow namespaces bind (`bindings`),
  where the path or one it begins is one `reach.legacy` names; for an
  import also a module TF 2.21 lacks, or a private module of the tables;
- a chain that reads `mixed_precision.experimental`, or a legacy member
  (`names.LEGACY_MEMBERS`) on something it cannot name, a chain through
  another module's import that spells a legacy name read from TensorFlow
  (`from utils import tf`), and a legacy member's name that nothing binds
  (`reach.warnings`);
- a switch `switches` warns about.

`may_reach` reads the same from `ast`, more generously than the planner:
a name stands for what any binding of it anywhere in the file makes it,
whatever the scope, and a switch counts whatever it is set to. So its "no"
is certain, and such a file skips LibCST, whose parse and metadata cost a
hundred times the `ast` parse.
"""

from __future__ import annotations

import ast
import functools

from mplso._src.upgrade import bindings
from mplso._src.upgrade import names
from mplso._src.upgrade import reach
from mplso._src.upgrade import switches

# What an alias may name for `bindings` to follow it (`x = tf.compat.v1`).
_KNOWN = names.NAMESPACES | set(names.TARGETS) | {"tf"}
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def may_reach(tree: ast.Module) -> bool:
  """Whether the planner may act on something in `tree`.

  `tree`: a module whose text `prefilter.for_reaches` passes. False only
  where no import, alias, chain, legacy member or switch of it can be one
  the planner acts on.
  """
  walk = _Walk()
  if walk.acts(tree):
    return True
  bound: dict[str, set[str]] = {}
  for node in walk.imports:
    for local, path, named in _imported(node):
      if _acted_on_import(named):
        return True
      bound.setdefault(local, set()).add(path)
  _follow_aliases(walk.assigns, bound)
  for node in walk.chains:
    found = _chain(node)
    if found is None:
      continue
    root, attributes = found
    for path in bound.get(root, ()):
      if _reaches(path, tuple(attributes)):
        return True
      if not names.is_library(path) and any(
          reach.spelled_from_tf(attributes[:i])
          for i in range(1, len(attributes) + 1)):
        return True  # `from utils import tf` (`reach.warnings`).
  module_known, module_bound = _module_bindings(tree)
  for base in walk.legacy_bases:
    found = _chain(base)
    if (found is None or found[0] not in module_known or
        found[0] in walk.other_bound):
      return True  # `reach.warnings` may not know what it is.
  return any(name not in module_bound for name in walk.legacy_names)


class _Walk:
  """One pass over a tree: what `may_reach` looks at, or a plain act."""

  def __init__(self):
    self.imports: list[ast.Import | ast.ImportFrom] = []
    self.assigns: list[ast.Assign] = []
    self.chains: list[ast.expr] = []
    # The expressions legacy members are read on, and legacy names read.
    self.legacy_bases: list[ast.expr] = []
    self.legacy_names: set[str] = set()
    # Names bound anywhere other than by an absolute import or a definition.
    self.other_bound: set[str] = set()

  def acts(self, tree: ast.Module) -> bool:
    """Collects what `may_reach` resolves; True on what acts by itself.

    That is a `mixed_precision.experimental` chain, or a switch.
    """
    for node in ast.walk(tree):
      kind = type(node)
      if kind is ast.Attribute:
        if node.attr == "experimental" and type(node.value) is (
            ast.Attribute) and node.value.attr == "mixed_precision":
          return True
        if node.attr in names.LEGACY_MEMBERS:
          self.legacy_bases.append(node.value)
        self.chains.append(node)
      elif kind is ast.Name:
        if node.id in names.LEGACY_MEMBERS:
          self.legacy_names.add(node.id)
        if type(node.ctx) is not ast.Load:
          self.other_bound.add(node.id)
        self.chains.append(node)
      elif kind is ast.Call:
        if _policy_call(node):
          return True
        self.chains.append(node)
      elif kind is ast.Constant:
        if type(node.value) is str and _switch_text(node.value):
          return True
      elif kind in _OTHERS and self._other(node):
        return True
    return False

  def _other(self, node: ast.AST) -> bool:
    """`acts` for the node kinds of `_OTHERS`."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      self.imports.append(node)
      if isinstance(node, ast.ImportFrom) and node.level:
        self.other_bound.update(a.asname or a.name for a in node.names)
    elif isinstance(node, ast.Assign):
      if any(isinstance(t, ast.Attribute) and
             t.attr in switches.GRAPPLER_FLOAT16 for t in node.targets):
        return True
      self.assigns.append(node)
    elif isinstance(node, ast.keyword):
      return bool(node.arg) and (
          node.arg in switches.GRAPPLER_FLOAT16 or
          node.arg.startswith(switches.ENVIRONMENT))
    elif isinstance(node, ast.Dict):
      return any(isinstance(k, ast.Constant) and
                 k.value in switches.GRAPPLER_FLOAT16 for k in node.keys)
    elif isinstance(node, ast.arg):
      self.other_bound.add(node.arg)
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
      self.other_bound.update(node.names)
    elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)):
      if node.name:
        self.other_bound.add(node.name)
    elif isinstance(node, ast.MatchMapping) and node.rest:
      self.other_bound.add(node.rest)
    return False


# The node kinds `_Walk._other` looks at.
_OTHERS = frozenset({
    ast.Import, ast.ImportFrom, ast.Assign, ast.keyword, ast.Dict, ast.arg,
    ast.Global, ast.Nonlocal, ast.ExceptHandler, ast.MatchAs, ast.MatchStar,
    ast.MatchMapping})


def _switch_text(text: str) -> bool:
  """Whether a string may be a switch `switches` warns about.

  NVIDIA's variable, or a TF 2.0-2.1 policy name other than "infer" (which
  counts only as a policy call's argument, `_policy_call`).
  """
  return text.startswith(switches.ENVIRONMENT) or (
      text != "infer" and switches.policy_fix(text) is not None)


def _policy_call(node: ast.Call) -> bool:
  """Whether `node` is a policy call given "infer" (`switches`)."""
  func = node.func
  called = (func.attr if isinstance(func, ast.Attribute) else
            func.id if isinstance(func, ast.Name) else "")
  return called in switches.POLICY_CALLS and any(
      isinstance(value, ast.Constant) and value.value == "infer"
      for value in [*node.args, *(k.value for k in node.keywords)])


def _module_bindings(tree: ast.Module) -> tuple[set[str], set[str]]:
  """The names the module's own statements bind (not in a def or class).

  (Those bound by an absolute import or a definition, those bound at all.)
  """
  known, bound = set(), set()
  statements = list(tree.body)
  while statements:
    node = statements.pop()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef)):
      known.add(node.name)
      bound.add(node.name)
      continue
    if isinstance(node, ast.Import):
      known.update(a.asname or a.name.split(".")[0] for a in node.names)
    elif isinstance(node, ast.ImportFrom):
      local = {a.asname or a.name for a in node.names} - {"*"}
      bound.update(local)
      if not node.level:
        known.update(local)
    elif isinstance(node, ast.AnnAssign) and node.value is None:
      continue  # `x: int` binds nothing.
    for child in ast.iter_child_nodes(node):
      if isinstance(child, ast.stmt):
        statements.append(child)
      elif isinstance(child, ast.expr):
        bound.update(_stored(child))
      elif isinstance(child, ast.ExceptHandler):
        statements.extend(child.body)
      elif isinstance(child, ast.match_case):
        statements.extend(child.body)
      elif isinstance(child, ast.withitem) and child.optional_vars:
        bound.update(_stored(child.optional_vars))
  bound |= known
  return known, bound


def _stored(node: ast.expr) -> set[str]:
  """The names an expression of a module-level statement stores."""
  found, pending = set(), [node]
  while pending:
    node = pending.pop()
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
      found.add(node.id)
    elif isinstance(node, ast.NamedExpr):
      found.add(node.target.id)
    if not isinstance(node, _SCOPES):
      pending.extend(ast.iter_child_nodes(node))
  return found


def _canonical(path: str) -> str:
  """`path` as `bindings` gives it: canonical, and public where private."""
  return names.public(names.canonical(path) or path)


def _imported(node) -> list[tuple[str, str, str]]:
  """(local name, the path it is bound to, the path the import names).

  For each name an import binds: `import a.b` binds `a` and names `a.b`; a
  relative or star import binds nothing `bindings` follows.
  """
  found = []
  if isinstance(node, ast.Import):
    for alias in node.names:
      named = _canonical(alias.name)
      if alias.asname:
        found.append((alias.asname, named, named))
      else:
        first = alias.name.split(".")[0]
        found.append((first, _canonical(first), named))
    return found
  if node.level or not node.module:
    return found
  for alias in node.names:
    if alias.name == "*":
      continue
    path = _canonical(f"{node.module}.{alias.name}")
    found.append((alias.asname or alias.name, path, path))
  return found


def _follow_aliases(assigns: list[ast.Assign],
                    bound: dict[str, set[str]]) -> None:
  """Adds to `bound` each `name = <chain>` that names a TF namespace."""
  changed = True
  while changed:  # An alias may be bound through another alias.
    changed = False
    for node in assigns:
      found = _chain(node.value)
      if found is None:
        continue
      root, attributes = found
      for target in node.targets:
        if not isinstance(target, ast.Name):
          continue
        have = bound.setdefault(target.id, set())
        for path in list(bound.get(root, ())):
          path = bindings.extend(path, attributes)
          if path in _KNOWN and path not in have:
            have.add(path)
            changed = True


def _chain(node) -> tuple[str, list[str]] | None:
  """The first name of a chain and the attributes read after it.

  Through `getattr(x, "literal")` too (whatever `getattr` is: generous);
  None for any other expression.
  """
  attributes = []
  while True:
    if isinstance(node, ast.Name):
      return node.id, attributes[::-1]
    if isinstance(node, ast.Attribute):
      attributes.append(node.attr)
      node = node.value
      continue
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "getattr" and len(node.args) in (2, 3)):
      return None
    name = node.args[1]
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str)
            and name.value.isidentifier()):
      return None
    attributes.append(name.value)
    node = node.args[0]


@functools.lru_cache(maxsize=65536)
def _reaches(path: str, attributes: tuple[str, ...]) -> bool:
  """Whether the planner acts on `path` with `attributes` read on it."""
  return reach.legacy(bindings.extend(path, list(attributes)))


@functools.lru_cache(maxsize=None)
def _acted_on_import(path: str) -> bool:
  """Whether the planner acts on an import that names `path`."""
  parts = path.split(".")
  return reach.legacy(path) or any(
      names.absent_today(prefix) or prefix in names.PRIVATE_MODULES
      for prefix in (".".join(parts[:i]) for i in range(1, len(parts) + 1)))
