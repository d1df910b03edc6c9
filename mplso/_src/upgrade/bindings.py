"""Which TensorFlow name an expression in a source file stands for.

`Bindings` follows what a name was bound to (an `import`, or a plain
assignment of a TensorFlow namespace such as `mp = tf.contrib.mixed_precision`)
and gives the canonical path (`tf.a.b`, see `names.canonical`) of a name or
attribute chain, with the binding it goes through. A chain may pass through
`getattr(x, "literal")`; a member of a private module that held a table
name reads as the table's spelling (`names.public`). A name bound more than
once in reach to different paths, a relative import or a star import
resolves to nothing (`resolutions` then gives the path through each
binding): the tool changes only what it can name for certain.
"""

from __future__ import annotations

import dataclasses

import libcst as cst
from libcst import metadata
from libcst.helpers import get_full_name_for_node

from mplso._src.upgrade import names


def dotted(node: cst.BaseExpression) -> str | None:
  """`a.b.c` for a chain of names, else None."""
  if isinstance(node, cst.Name):
    return node.value
  if isinstance(node, cst.Attribute):
    base = dotted(node.value)
    return None if base is None else f"{base}.{node.attr.value}"
  return None


@dataclasses.dataclass(frozen=True)
class Resolved:
  """A chain's canonical path and the binding of its first name."""
  path: str
  binding: metadata.BaseAssignment


def literal_getattr(node) -> tuple[cst.BaseExpression, str] | None:
  """`(x, "name")` for a call `getattr(x, "name")` (a default allowed)."""
  if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and
          node.func.value == "getattr" and len(node.args) in (2, 3) and
          all(a.keyword is None and not a.star for a in node.args)):
    return None
  name = node.args[1].value
  if not isinstance(name, cst.SimpleString) or name.prefix not in ("", "r"):
    return None
  text = name.evaluated_value
  return (node.args[0].value, text) if text.isidentifier() else None


def import_path(statement, bound: str) -> str | None:
  """The dotted path that `statement` binds to the local name `bound`."""
  if isinstance(statement, cst.Import):
    for alias in statement.names:
      path = alias.evaluated_name
      if alias.asname is not None:
        if alias.evaluated_alias == bound:
          return path
      elif path is not None and path.split(".")[0] == bound:
        return bound
    return None
  if isinstance(statement, cst.ImportFrom):
    if statement.relative or isinstance(statement.names, cst.ImportStar):
      return None
    module = get_full_name_for_node(statement.module)
    for alias in statement.names:
      if (alias.evaluated_alias or alias.evaluated_name) == bound:
        return f"{module}.{alias.evaluated_name}"
  return None


class Bindings:
  """Resolves names and attribute chains of one parsed module."""

  def __init__(self, wrapper: metadata.MetadataWrapper):
    self._scopes = wrapper.resolve(metadata.ScopeProvider)
    self._positions = wrapper.resolve(metadata.PositionProvider)
    self._parents = wrapper.resolve(metadata.ParentNodeProvider)
    self.wrapper = wrapper
    # The target Name of a plain `name = <TF namespace>` -> its value.
    self._assigned: dict[cst.Name, cst.BaseExpression] = {}
    # ... and the canonical path that value resolves to.
    self.aliases: dict[cst.Name, str] = {}
    for node in self._scopes:
      if (isinstance(node, cst.Assign) and len(node.targets) == 1 and
          isinstance(node.targets[0].target, cst.Name)):
        self._assigned[node.targets[0].target] = node.value
    known = names.NAMESPACES | set(names.TARGETS) | {"tf"}
    changed = True
    while changed:  # An alias may be bound through another alias.
      changed = False
      for target, value in self._assigned.items():
        if target in self.aliases:
          continue
        found = self.resolve(value)
        if found is not None and found.path in known:
          self.aliases[target] = found.path
          changed = True

  def binding(self, name: cst.Name) -> metadata.BaseAssignment | None:
    """The one binding `name` reads (None: none, or several that differ)."""
    scope = self._scopes.get(name)
    if scope is None:
      return None
    found = list(scope[name.value])
    if not found:
      return None
    paths = {self.bound_path(a) for a in found}
    if len(paths) != 1 or None in paths:
      return None
    return found[0]

  def only_assignment(self, name: cst.Name):
    """The one assignment `name` reads, whatever it binds; else None."""
    scope = self._scopes.get(name)
    found = list(scope[name.value]) if scope is not None else []
    return found[0] if len(found) == 1 else None

  def assigned_value(self, target: cst.Name) -> cst.BaseExpression | None:
    """The value of the plain `target = value` that binds `target`."""
    return self._assigned.get(target)

  def binding_is_unique(self, scope, name: str) -> bool:
    """Whether `name` has one binding (path) in `scope`."""
    return len({self.bound_path(a) for a in scope[name]}) == 1

  def bound_path(self, binding: metadata.BaseAssignment) -> str | None:
    """The path a binding gives its name (canonical for TensorFlow's)."""
    if isinstance(binding, metadata.ImportAssignment):
      path = import_path(binding.node, binding.name)
      if path is None:
        return None
      return names.public(names.canonical(path) or path)
    if isinstance(binding, metadata.Assignment):
      return self.aliases.get(binding.node)
    return None

  def chain(self, node: cst.BaseExpression
            ) -> tuple[cst.Name, list[str]] | None:
    """The first name of a chain and the attributes read after it.

    `mp.experimental.X` -> (`mp`, ["experimental", "X"]), also through a
    `getattr(x, "literal")` of the builtin; None for any other expression.
    """
    attributes = []
    while True:
      if isinstance(node, cst.Name):
        return node, attributes[::-1]
      if isinstance(node, cst.Attribute):
        attributes.append(node.attr.value)
        node = node.value
        continue
      found = literal_getattr(node)
      if found is None or not self._is_builtin(node.func):
        return None
      node, attribute = found
      attributes.append(attribute)

  def above(self, node: cst.CSTNode) -> cst.BaseExpression | None:
    """The chain one step longer built on `node`, if any.

    `x.y` for `x`, and `getattr(x, "y")` (of the builtin) for `x`.
    """
    parent = self._parents.get(node)
    if isinstance(parent, cst.Attribute) and parent.value is node:
      return parent
    if isinstance(parent, cst.Arg):
      call = self._parents.get(parent)
      found = literal_getattr(call)
      if (found is not None and found[0] is node and
          self._is_builtin(call.func)):
        return call
    return None

  def _is_builtin(self, name: cst.Name) -> bool:
    """Whether `name` stands for a builtin (nothing binds it)."""
    scope = self._scopes.get(name)
    return scope is not None and all(
        isinstance(a, metadata.BuiltinAssignment) for a in scope[name.value])

  def resolve(self, node: cst.BaseExpression) -> Resolved | None:
    """The canonical path `node` (a name or attribute chain) stands for."""
    found = self.chain(node)
    if found is None:
      return None
    name, attributes = found
    binding = self.binding(name)
    if binding is None:
      return None
    path = self.bound_path(binding)
    return None if path is None else Resolved(
        extend(path, attributes), binding)

  def resolutions(self, node: cst.BaseExpression
                  ) -> list[tuple[metadata.BaseAssignment, str | None]]:
    """Each binding the chain's first name may read, with the path through it.

    The path is None through a binding that is not a TensorFlow namespace or
    an import; the list is empty for an expression that is no chain, and
    for an unbound name.
    """
    found = self.chain(node)
    if found is None:
      return []
    name, attributes = found
    scope = self._scopes.get(name)
    if scope is None:
      return []
    result = []
    for binding in scope[name.value]:
      path = self.bound_path(binding)
      result.append((binding, None if path is None else
                     extend(path, attributes)))
    return result

  def unbound(self) -> list[cst.Name]:
    """The names the module reads that nothing binds (not even a builtin).

    A name a star import gives (`from x import *`) is one of them.
    """
    found = []
    for scope in {s for s in self._scopes.values() if s is not None}:
      found += [access.node for access in scope.accesses
                if not access.referents and
                isinstance(access.node, cst.Name)]
    return sorted(found, key=self.line)

  def line(self, node: cst.CSTNode) -> int:
    """The line `node` starts on."""
    return self._positions[node].start.line

  def module_scope(self, module: cst.Module) -> metadata.Scope:
    """The global scope of `module`, the one this `Bindings` was made for."""
    return self._scopes[module]

  def made_by(self, statement) -> list[metadata.ImportAssignment]:
    """The bindings an import statement makes."""
    scope = self._scopes.get(statement)
    if scope is None:
      return []
    return [a for a in scope.assignments
            if isinstance(a, metadata.ImportAssignment) and
            a.node is statement]

  def references(self, binding: metadata.BaseAssignment):
    """The Name nodes that read `binding`."""
    return [access.node for access in binding.references]


def extend(path: str, attributes: list[str]) -> str:
  """`path` with `attributes` read on it, each step as `names.public` has it."""
  for attribute in attributes:
    path = names.public(f"{path}.{attribute}")
  return path
