"""What the upgrade's planners share: one source file, and its plan.

`SourceFile` holds one parsed file and what is known of it (its metadata,
bindings and optimizer uses); `Plan` holds what the planners decide for it
(the nodes to swap, the lines to add, the report's edits). The `--to mplso`
planner (`rewrite`) and the `--to native` one (`native_plan`) take both, as
LibCST's codemods take a `CodemodContext`.
"""

from __future__ import annotations

import dataclasses

import libcst as cst
from libcst import metadata

from mplso._src.upgrade import bindings as bindings_lib
from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import names
from mplso._src.upgrade import optimizer_uses


def is_compile(node: cst.CSTNode) -> bool:
  """Whether `node` is a call `x.compile(...)`.

  Asked of every node of a file: plain `isinstance` tests, as LibCST's
  `matchers` take some 400 times as long for the same answer.
  """
  return (isinstance(node, cst.Call) and
          isinstance(node.func, cst.Attribute) and
          node.func.attr.value == "compile")


class SourceFile:
  """One parsed source file, with its metadata, bindings and optimizer uses.

  Attributes:
    module: the file's LibCST module.
    path: the file, as the report names it.
    bindings: what each name of the file stands for.
    parents: every node's parent (in the order of the tree).
    positions: every node's place in the file.
    contexts: every name's expression context (load, store, del).
    uses: where the file's LossScaleOptimizers go and what is done with them.
  """

  def __init__(self, wrapper: metadata.MetadataWrapper, keras: str,
               facts: optimizer_uses.Facts | None = None,
               path: str = "this file"):
    self.module = wrapper.module
    self.path = path
    self.bindings = bindings_lib.Bindings(wrapper)
    self.parents = wrapper.resolve(metadata.ParentNodeProvider)
    self.positions = wrapper.resolve(metadata.PositionProvider)
    self.contexts = wrapper.resolve(metadata.ExpressionContextProvider)
    self.uses = optimizer_uses.Uses(wrapper, keras,
                                    facts or optimizer_uses.Facts(), path)
    self._wrapping: list[cst.Call] | None = None

  def code(self, node: cst.CSTNode) -> str:
    """The source text of `node`."""
    return self.module.code_for_node(node)

  def line(self, node: cst.CSTNode) -> int:
    """The line `node` starts on."""
    return self.positions[node].start.line

  def statement_of(self, node: cst.CSTNode) -> cst.CSTNode:
    """The simple statement line that holds `node` (the module if none)."""
    while not isinstance(node, (cst.SimpleStatementLine, cst.Module)):
      node = self.parents[node]
    return node

  def inside(self, node: cst.CSTNode | None, ancestor: cst.CSTNode) -> bool:
    """Whether `node` is `ancestor` or lies within it."""
    while node is not None:
      if node is ancestor:
        return True
      node = self.parents.get(node)
    return False

  def optimizer_sites(self) -> list[cst.Call]:
    """The calls of a Keras LossScaleOptimizer class (legacy or mplso's)."""
    sites = []
    for node in self.parents:
      if isinstance(node, cst.Call):
        found = self.bindings.resolve(node.func)
        path = found.path if found else ""
        if "mplso.keras.LossScaleOptimizer" in (names.TARGETS.get(path),
                                                path):
          sites.append(node)
    return sites

  def sites_and_compiles(self) -> list[cst.Call]:
    """Every LossScaleOptimizer call, then every `compile` call."""
    return self.optimizer_sites() + [
        n for n in self.parents if is_compile(n)]

  def wrapping_compiles(self) -> list[cst.Call]:
    """The `compile` calls that wrap their optimizer by themselves.

    Not one given an optimizer the file builds as a LossScaleOptimizer
    (directly or through what holds it), nor, where a class of the file
    overrides `compile` and builds one in it, any call of `compile`: the
    override wraps.
    """
    if self._wrapping is not None:
      return self._wrapping
    sites = self.optimizer_sites()
    explicit = set(sites)
    for site in sites:
      explicit.update(self.uses.holders(site))
    overrides = any(
        isinstance(node, cst.FunctionDef) and node.name.value == "compile"
        and any(self.inside(site, node) for site in sites)
        for node in self.parents)
    self._wrapping = []
    for node in self.parents:
      if not is_compile(node) or overrides:
        continue
      positional = [a for a in node.args if a.keyword is None]
      given = next((a.value for a in node.args if a.keyword is not None and
                    a.keyword.value == "optimizer"),
                   positional[0].value if positional else None)
      if given is None or given not in explicit:
        self._wrapping.append(node)
    return self._wrapping


@dataclasses.dataclass
class Plan:
  """What the planners decided for one file.

  Attributes:
    replace: {original node: its new node, `cst.RemoveFromParent()`, or a
      function of the updated node that returns the new one}.
    after: {original statement line: the statements to add after it}.
    edits: the report's edits, in the order they were planned.
    modules: the modules to import (`mplso.keras`, `tensorflow as tf`).
    install_why: (line, reason) for each use that needs
      `mplso.compat.install()`.
    installs: whether `mplso.compat.install()` was inserted (once applied).
    quoted: (index in `edits`, node) of each `KEPT` or `WARNED` edit: its
      text is the node's as the output holds it (another edit may change
      it).
  """
  replace: dict[cst.CSTNode, object] = dataclasses.field(default_factory=dict)
  after: dict[cst.CSTNode, list[cst.BaseStatement]] = dataclasses.field(
      default_factory=dict)
  edits: list[edits_lib.Edit] = dataclasses.field(default_factory=list)
  modules: set[str] = dataclasses.field(default_factory=set)
  install_why: list[tuple[int, str]] = dataclasses.field(default_factory=list)
  installs: bool = False
  quoted: list[tuple[int, cst.CSTNode]] = dataclasses.field(
      default_factory=list)

  def needs(self, target: str) -> None:
    """Notes the import that the name `target` (`mplso.x.Y`) needs."""
    self.modules.add(names.target_module(target))

  def rename(self, source: SourceFile, node: cst.CSTNode, target: str,
             why: str = "") -> None:
    """Plans `node` as the name `target`, with the import it needs."""
    self.replace[node] = cst.parse_expression(target)
    if target.startswith("mplso."):
      self.needs(target)
    self.edits.append(edits_lib.changed(source.line(node), source.code(node),
                                        target, why))

  def keep(self, source: SourceFile, node: cst.CSTNode, why: str) -> None:
    """Reports `node`, left as it was and right as it is (an INFO line)."""
    self.quoted.append((len(self.edits), node))
    self.edits.append(edits_lib.kept(source.line(node), source.code(node),
                                     why))

  def warn(self, source: SourceFile, node: cst.CSTNode, why: str) -> None:
    """Reports `node`, left as it was, for a person to look at."""
    self.quoted.append((len(self.edits), node))
    self.edits.append(edits_lib.warned(source.line(node), source.code(node),
                                       why))
