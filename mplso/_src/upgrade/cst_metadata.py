"""LibCST's metadata for the upgrade, the same, at less cost: `wrap`.

`libcst.metadata.MetadataWrapper` resolves a batchable provider by walking
the whole tree once more besides the provider's own walk, and LibCST's walk
rebuilds every node it passes. Parents, expression contexts and scopes are
each computed by the provider's own walk of the module, so `Wrapper` runs
that walk alone; the parents are taken from each node's children, in the
order LibCST's `ParentNodeProvider` gives them (a node after the nodes
below it). Positions are computed for the top-level statement of the node
asked about only, when asked (`Positions`), starting at the line the
statements before it end on: LibCST computes the same positions by
generating the code of the whole module. Every other provider is resolved
as LibCST resolves it.
"""

from __future__ import annotations

import collections.abc
import functools
import re
import types

import libcst as cst
from libcst import metadata

try:  # LibCST's internals, which `Wrapper` uses; `wrap` checks them.
  from libcst._nodes import internal  # pylint: disable=g-import-not-at-top
  from libcst.metadata import position_provider  # pylint: disable=g-import-not-at-top
except ImportError:  # Another LibCST: `agrees_with_libcst` says so.
  internal = position_provider = None

# Providers that do all their work in their `visit_Module`.
_WHOLE_MODULE = (metadata.ExpressionContextProvider, metadata.ScopeProvider)
# What LibCST counts as one line break while generating code.
_NEWLINE = re.compile(r"\r\n?|\n")


def wrap(module: cst.Module) -> metadata.MetadataWrapper:
  """The metadata wrapper of a module just parsed, used by nothing else.

  LibCST's wrapper copies the whole tree first, so that a node shared by
  two places gets its own metadata; a tree the parser just made shares
  none, and the copy was a tenth of a big file's time. `Wrapper` where it
  gives what LibCST gives on a sample (`agrees_with_libcst`: it uses
  LibCST's internals, which another version may have changed), else
  LibCST's own wrapper.
  """
  if agrees_with_libcst():
    return Wrapper(module, unsafe_skip_copy=True)
  return metadata.MetadataWrapper(module, unsafe_skip_copy=True)


# A module with the shapes whose metadata `Wrapper` computes its own way:
# a header comment, statements on one line and on several, a class, a
# nested function, a string across lines, CRLF line breaks.
_SAMPLE = (
    "# header\r\n\r\nimport a.b as c\r\nx = 1; y = [\r\n  2]\r\n"
    "class K(c.D):\r\n  \"\"\"Doc\r\n  string.\"\"\"\r\n"
    "  def f(self, z=x):\r\n    def g():\r\n      nonlocal z\r\n"
    "      return z\r\n    return g\r\n\r\nprint(K().f()())\r\n")


@functools.cache
def agrees_with_libcst() -> bool:
  """Whether `Wrapper` gives LibCST's metadata on `_SAMPLE` (once a process)."""
  providers = (metadata.ParentNodeProvider, metadata.PositionProvider,
               metadata.ExpressionContextProvider, metadata.ScopeProvider)
  try:
    ours = Wrapper(cst.parse_module(_SAMPLE), unsafe_skip_copy=True)
    theirs = metadata.MetadataWrapper(ours.module, unsafe_skip_copy=True)
    for provider in providers:
      mine, reference = ours.resolve(provider), theirs.resolve(provider)
      if provider is metadata.PositionProvider:
        # Each asked for alone, the last first, as the planner may ask.
        if any(mine[n] != reference[n] for n in list(reference)[::-1]):
          return False
      elif provider is metadata.ScopeProvider:
        if ({n: type(s) for n, s in mine.items()} !=
            {n: type(s) for n, s in reference.items()}):
          return False
      elif dict(mine) != dict(reference):
        return False
  except Exception:  # pylint: disable=broad-except
    return False  # Another LibCST: its own wrapper.
  return True


def parents(module: cst.Module) -> dict[cst.CSTNode, cst.CSTNode]:
  """Every node's parent, in `ParentNodeProvider`'s order.

  That provider notes a node's children when it leaves the node, after
  every node below it: the same walk, without LibCST's visit (which
  rebuilds every node it passes).
  """
  found = {}
  stack = [(module, module.children, [0])]
  while stack:
    node, children, at = stack[-1]
    if at[0] < len(children):
      child = children[at[0]]
      at[0] += 1
      stack.append((child, child.children, [0]))
      continue
    stack.pop()
    for child in children:
      found[child] = node
  return found


class Wrapper(metadata.MetadataWrapper):
  """A `MetadataWrapper` that resolves some providers more cheaply.

  Parents, expression contexts and scopes are computed by one walk each
  (see the module's text); positions when a node's is asked for
  (`Positions`). What each gives is what LibCST's own resolution gives.
  """

  def resolve_many(self, providers):
    for provider in providers:
      self._resolve_alone(provider)
    return super().resolve_many(providers)

  def _resolve_alone(self, provider) -> None:
    """Resolves `provider` without the batched walk, where it can."""
    if provider in self._metadata:
      return
    if provider is metadata.ParentNodeProvider:
      self._metadata[provider] = types.MappingProxyType(parents(self.module))
    elif provider is metadata.PositionProvider:
      self._metadata[provider] = Positions(
          self.module, self.resolve(metadata.ParentNodeProvider))
    elif provider in _WHOLE_MODULE:
      instance = provider()
      with instance.resolve(self):  # Its dependencies first.
        instance.visit_Module(self.module)
      self._metadata[provider] = types.MappingProxyType(
          dict(instance._computed))  # pylint: disable=protected-access


class Positions(collections.abc.Mapping):
  """`PositionProvider`'s positions, computed per top-level statement.

  A node's position is computed, with those of every node of its top-level
  statement, when it is first asked for. LibCST generates the module's code
  from its first line on; a top-level statement's code starts on a line of
  its own, at the line the code before it ends on: its positions are those
  of the statement's code generated from that line. Iterating over all of
  them computes the whole module's, as LibCST does.
  """

  def __init__(self, module: cst.Module,
               parent_of: collections.abc.Mapping[cst.CSTNode, cst.CSTNode]):
    self._module = module
    self._parents = parent_of
    self._computed: dict[cst.CSTNode, metadata.CodeRange] = {}
    self._done: set[cst.CSTNode] = set()  # Top-level statements computed.
    self._whole = False
    self._index = {id(s): i for i, s in enumerate(module.body)}
    # The line each top-level statement starts on, as far as known.
    self._starts = [1 + sum(_lines(module, h) for h in module.header)]

  def __getitem__(self, node: cst.CSTNode) -> metadata.CodeRange:
    found = self._computed.get(node)
    if found is not None:
      return found
    statement = node
    while (parent := self._parents.get(statement)) is not None and (
        parent is not self._module):
      statement = parent
    if (statement not in self._done and parent is self._module and
        id(statement) in self._index and
        self._module.body[self._index[id(statement)]] is statement):
      self._statement(self._index[id(statement)])
    else:
      self._everything()
    return self._computed[node]

  def _statement(self, index: int) -> None:
    """Computes the positions of the nodes of top-level statement `index`."""
    body = self._module.body
    while len(self._starts) <= index:
      k = len(self._starts) - 1
      self._starts.append(self._starts[k] + _lines(self._module, body[k]))
    provider = metadata.PositionProvider()
    state = position_provider.PositionProvidingCodegenState(
        default_indent=self._module.default_indent,
        default_newline=self._module.default_newline,
        provider=provider)
    state.line = self._starts[index]
    body[index]._codegen(state)  # pylint: disable=protected-access
    for node, where in provider._computed.items():  # pylint: disable=protected-access
      self._computed.setdefault(node, where)
    self._done.add(body[index])

  def _everything(self) -> None:
    """Computes every node's position, as LibCST does."""
    if not self._whole:
      provider = metadata.PositionProvider()
      provider._gen_impl(self._module)  # pylint: disable=protected-access
      self._computed.update(provider._computed)  # pylint: disable=protected-access
      self._whole = True

  def __iter__(self):
    self._everything()
    return iter(self._computed)

  def __len__(self) -> int:
    self._everything()
    return len(self._computed)


def _lines(module: cst.Module, node: cst.CSTNode) -> int:
  """The line breaks in the code of `node`, a statement of `module`, as
  LibCST counts them when it generates the module's code (token by token).
  """
  state = internal.CodegenState(default_indent=module.default_indent,
                           default_newline=module.default_newline)
  node._codegen(state)  # pylint: disable=protected-access
  text = "".join(state.tokens)
  if "\r" not in text:
    return text.count("\n")
  return sum(len(_NEWLINE.findall(token)) for token in state.tokens)
