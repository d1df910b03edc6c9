"""`--to native`: where each optimizer a file builds goes, and what it is asked.

Keras's own `LossScaleOptimizer` can take a legacy call's place only when the
program trains the same way with it. That depends on the optimizer's uses,
not on its call alone: a read of an attribute Keras's class lacks, code
between `get_unscaled_gradients` and `apply_gradients` (Keras 3's class
unscales inside `apply_gradients`), a restored checkpoint (Keras 3's class
names its state otherwise), an inner optimizer whose own `apply_gradients`
Keras's class would call with other arguments. `Uses` follows one optimizer
from its call to every expression that holds it and gives the reasons it
must stay on mplso; `Facts` holds what other files of a tree show about
optimizers they do not build.

Uses are over-approximated, never under: an expression that may hold the
optimizer counts as one, and an optimizer handed to code the tool cannot see
(returned, passed to a function) counts every use of the files converted
together that the tool cannot trace to an optimizer of its own.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
import dataclasses
import os
import re

import libcst as cst
from libcst import metadata

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import names

# Methods of TF 2.4-2.15's class that the program may call, and attributes
# it may read, with what Keras's class under each Keras makes of them: the
# same (`True`), translated by `native_plan` (`"translated"`), or missing.
_SAME = True
_TRANSLATED = "translated"
_CALLS = {
    edits_lib.KERAS_3: {
        "apply_gradients": _SAME, "get_scaled_loss": _TRANSLATED,
        "get_unscaled_gradients": _TRANSLATED, "scale_loss": _SAME,
        "loss_scale": _TRANSLATED,  # TF 2.3's `loss_scale()`.
    },
    edits_lib.TF_KERAS: {
        "apply_gradients": _SAME, "get_scaled_loss": _SAME,
        "get_unscaled_gradients": _SAME, "minimize": _SAME,
        "variables": _SAME, "get_weights": _SAME,
        "loss_scale": _TRANSLATED,
    },
}
_READS = {
    edits_lib.KERAS_3: {
        "loss_scale": _TRANSLATED, "initial_scale": _SAME,
        "dynamic_growth_steps": _SAME, "inner_optimizer": _SAME,
        "iterations": _SAME, "learning_rate": _SAME, "variables": _SAME,
        # Keras 3's own, in a program written for it (or upgraded already).
        "dynamic_scale": _SAME, "step_counter": _SAME, "built": _SAME,
    },
    edits_lib.TF_KERAS: {
        "variables": _SAME, "weights": _SAME, "loss_scale": _SAME,
        "initial_scale": _SAME, "dynamic": _SAME,
        "dynamic_growth_steps": _SAME, "dynamic_counter": _SAME,
        "inner_optimizer": _SAME, "iterations": _SAME, "learning_rate": _SAME,
        "lr": _SAME,
    },
}
# Attributes of a loss-scale optimizer that Keras's class does not serve as
# mplso's does: a use of one on something the tool cannot trace may be a
# use of an optimizer that left its file. (Keras 3's class lacks TF 2.4's
# loss-scaling methods; tf_keras's has them, but not TF 2.3's
# `loss_scale()` call, which `_untraced_member` tells apart.)
_NOT_SERVED = {
    edits_lib.KERAS_3: frozenset({
        "get_scaled_loss", "get_unscaled_gradients", "get_gradients",
        "loss_scale", "dynamic", "dynamic_counter", "_loss_scale",
        "_optimizer"}),
    edits_lib.TF_KERAS: frozenset({
        "get_gradients", "_loss_scale", "_optimizer"}),
}
# TF 2.4-2.15's loss-scaling methods, which Keras 3's own class lacks.
SCALING = ("get_scaled_loss", "get_unscaled_gradients")
# A file whose text has none of these shows nothing `Facts` holds.
WORDS = tuple(_NOT_SERVED[edits_lib.KERAS_3]) + (
    "loss_scale", "apply_gradients", "restore", "load_weights", "load_model")
# Calls that read a checkpoint back.
_RESTORES = frozenset({"restore", "load_weights", "restore_or_initialize",
                       "load_model"})
_CHECKPOINTS = frozenset({"Checkpoint", "CheckpointManager", "Saver"})
# Calls that take an optimizer and only look at it.
_LOOKS = frozenset({"isinstance", "print", "type", "id", "repr", "str"})


@dataclasses.dataclass
class Facts:
  """What files show about optimizers they may not build.

  `untraced`: (where, what) for each use of a loss-scale attribute (or, on
  Keras 3, each `apply_gradients` of gradients that are not unscaled right
  there) on an expression the file does not trace to an optimizer it
  builds. `restores`: where a checkpoint is read back. `overriding`: the
  classes that define their own `apply_gradients`, by name, and where.
  `imports`: {file: every module name its imports spell}, to tell which
  files can reach another's objects.

  `later`: files whose `untraced` and `restores` are read only when a
  decision asks for them (`first_untraced`, `first_restore`), by `reader`
  (path -> that file's `Facts`): they need LibCST, and most files of a big
  tree are never asked about. {path: (may it show an untraced use, may it
  read a checkpoint back)}, as `may_show` tells from its text, or None
  until `shows` (path -> that) is asked; they come after `untraced` and
  `restores`, in the order they were merged.
  """
  untraced: list[tuple[str, str]] = dataclasses.field(default_factory=list)
  restores: list[str] = dataclasses.field(default_factory=list)
  overriding: dict[str, str] = dataclasses.field(default_factory=dict)
  imports: dict[str, frozenset[str]] = dataclasses.field(
      default_factory=dict)
  later: dict[str, tuple[bool, bool] | None] = dataclasses.field(
      default_factory=dict)
  reader: Callable[[str], Facts] | None = None
  shows: Callable[[str], tuple[bool, bool]] | None = None
  _read: dict[str, Facts] = dataclasses.field(
      default_factory=dict, init=False, repr=False, compare=False)
  _joins: tuple[dict, dict] | None = dataclasses.field(
      default=None, init=False, repr=False, compare=False)

  def merge(self, other: Facts) -> None:
    """Adds what `other` (another file's facts) shows."""
    self.untraced += other.untraced
    self.restores += other.restores
    for name, where in other.overriding.items():
      self.overriding.setdefault(name, where)
    self.imports.update(other.imports)
    self.later.update(other.later)
    self._joins = None

  def first_untraced(self, files: set[str]) -> tuple[str, str] | None:
    """The first of `untraced` in one of `files`, the later ones read."""
    found = [u for u in self.untraced if _file_of(u[0]) in files]
    return found[0] if found else next(
        (u for path in self._later_in(files, 0)
         for u in self._read_later(path).untraced), None)

  def first_restore(self, files: set[str]) -> str | None:
    """The first of `restores` in one of `files`, the later ones read."""
    found = [r for r in self.restores if _file_of(r) in files]
    return found[0] if found else next(
        (r for path in self._later_in(files, 1)
         for r in self._read_later(path).restores), None)

  def _later_in(self, files: set[str], which: int) -> list[str]:
    """The files of `later` among `files` that may show `which` fact."""
    found = []
    for path, may in self.later.items():
      if path not in files:
        continue
      if may is None:
        may = self.later[path] = self.shows(path)
      if may[which]:
        found.append(path)
    return found

  def _read_later(self, path: str) -> Facts:
    """One file of `later`, read once."""
    if path not in self._read:
      self._read[path] = self.reader(path)
    return self._read[path]

  def importers(self, path: str) -> list[str]:
    """The other files whose imports spell `path`'s module name, sorted."""
    stem = _stem(path)
    return sorted(file for file, spelled in self.imports.items()
                  if file != path and stem in spelled)

  def reaching(self, path: str) -> set[str]:
    """The files an object of `path` can reach through imports.

    Those joined to `path` by imports either way, at any distance (a file
    that imports `path`'s module may hand its objects to a third that it
    imports): files of an unrelated project in the same tree are not. A
    file joins another whose name (without folder or extension) its
    imports spell.
    """
    if self._joins is None:
      by_stem, by_spelled = {}, {}
      for file, spelled in self.imports.items():
        by_stem.setdefault(_stem(file), []).append(file)
        for name in spelled:
          by_spelled.setdefault(name, []).append(file)
      self._joins = by_stem, by_spelled
    by_stem, by_spelled = self._joins
    found, queue = {path}, [path]
    while queue:
      current = queue.pop()
      joined = [other for name in self.imports.get(current, ())
                for other in by_stem.get(name, ())]
      joined += by_spelled.get(_stem(current), [])
      for other in joined:
        if other not in found:
          found.add(other)
          queue.append(other)
    return found


def _stem(file: str) -> str:
  """A file's name without folder or extension."""
  return os.path.splitext(os.path.basename(file))[0]


# What marks a file that may show an untraced use (an attribute read or
# called, `may_show`) or a checkpoint read (a call), comments and line
# continuations allowed between. A comment is taken to its line's end, one
# way only (a line of many `#` would otherwise split every way there is).
_BETWEEN = r"(?:[\s\\]|#[^\n]*(?=\n|$))*"
_UNTRACED_ATTRIBUTES = sorted(
    set().union(*_NOT_SERVED.values()) | {"loss_scale", "apply_gradients"})
_MAY_USE = re.compile(rf"\.{_BETWEEN}(?:{'|'.join(_UNTRACED_ATTRIBUTES)})\b")
_MAY_RESTORE = re.compile(
    rf"(?:{'|'.join(sorted(_RESTORES))}){_BETWEEN}\(")


def may_show(text: str) -> tuple[bool, bool]:
  """Whether `text` may show an untraced use, and a checkpoint read back.

  False only where `Uses.untraced` and `Uses.restores` find none, under
  either Keras: no such attribute follows a dot, and no such name is
  called.
  """
  if not any(word in text for word in WORDS):
    return False, False
  restores = any(not m.start() or not (text[m.start() - 1].isalnum() or
                                       text[m.start() - 1] == "_")
                 for m in _MAY_RESTORE.finditer(text))
  return bool(_MAY_USE.search(text)), restores


def _file_of(where: str) -> str:
  """`path` of a `path:line` place."""
  return where.rpartition(":")[0]


def imported_names(source: str | ast.Module) -> frozenset[str]:
  """Every module name (each dotted part) the imports of `source` spell.

  `source`: a module's text, or its `ast` tree. Imports from TensorFlow,
  Keras and mplso (`names.LIBRARIES`) spell none.
  """
  tree = _tree(source)
  if tree is None:
    return frozenset()
  found = set()
  for node in _statements(tree.body):
    if isinstance(node, ast.Import):
      for alias in node.names:
        parts = alias.name.split(".")
        if parts[0] not in names.LIBRARIES:
          found.update(parts)
    elif isinstance(node, ast.ImportFrom):
      parts = (node.module or "").split(".")
      if node.level or parts[0] not in names.LIBRARIES:
        found.update(parts)
        found.update(alias.name for alias in node.names)
  return frozenset(found - {""})


def _statements(body: list[ast.stmt]):
  """Every statement of `body` and of the blocks inside it, at any depth.

  Not the expressions: an import or a class is a statement.
  """
  pending = list(body)
  while pending:
    node = pending.pop()
    yield node
    for field in ("body", "orelse", "finalbody"):
      block = getattr(node, field, None)
      if isinstance(block, list):
        pending.extend(block)
    for part in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
      pending.extend(part.body)


def overriding_classes(source: str | ast.Module,
                       path: str) -> dict[str, str]:
  """{class name: `path:line`} for each class defining `apply_gradients`.

  `source`: a module's text, or its `ast` tree.
  """
  if isinstance(source, str) and "apply_gradients" not in source:
    return {}
  tree = _tree(source)
  if tree is None:
    return {}
  return {node.name: f"{path}:{node.lineno}"
          for node in sorted(_statements(tree.body), key=_position)
          if isinstance(node, ast.ClassDef) and any(
              isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and
              item.name == "apply_gradients" for item in node.body)}


def _position(node: ast.stmt) -> tuple[int, int]:
  return node.lineno, node.col_offset


def _tree(source: str | ast.Module) -> ast.Module | None:
  """`source`'s `ast` tree (None where it does not parse)."""
  if isinstance(source, ast.Module):
    return source
  try:
    return ast.parse(source)
  except (SyntaxError, ValueError, RecursionError, MemoryError):
    return None


def _last_name(node) -> str | None:
  """The last name of a chain: `c` of `a.b.c`, else None."""
  if isinstance(node, cst.Name):
    return node.value
  if isinstance(node, cst.Attribute):
    return node.attr.value
  return None


def _zip_gradients(arg: cst.BaseExpression):
  """G of `zip(G, V)` or `list(zip(G, V))`, else None."""
  if (isinstance(arg, cst.Call) and _last_name(arg.func) == "list" and
      len(arg.args) == 1):
    arg = arg.args[0].value
  if (isinstance(arg, cst.Call) and _last_name(arg.func) == "zip" and
      len(arg.args) == 2 and not any(a.star for a in arg.args)):
    return arg.args[0].value
  return None


class Uses:
  """The uses of the optimizers one file builds, for `--to native`.

  Args:
    wrapper: the file's metadata wrapper.
    keras: the Keras `tf.keras` is when the program runs.
    facts: what every file converted together shows (this one included).
    path: the file, as reports name it.
  """

  def __init__(self, wrapper: metadata.MetadataWrapper, keras: str,
               facts: Facts, path: str = "this file"):
    self.module = wrapper.module
    self.keras, self.facts, self.path = keras, facts, path
    self.parents = wrapper.resolve(metadata.ParentNodeProvider)
    self.positions = wrapper.resolve(metadata.PositionProvider)
    self.scopes = wrapper.resolve(metadata.ScopeProvider)
    self._holders: dict[cst.Call, list[cst.CSTNode]] = {}
    self._traced: set[cst.CSTNode] = set()  # Every holder node of any site.
    self._globals: dict[cst.Call, list[str]] = {}

  # Helpers.

  def code(self, node) -> str:
    """The source text of `node`."""
    return self.module.code_for_node(node)

  def line(self, node) -> int:
    """The line `node` starts on."""
    return self.positions[node].start.line

  def _within(self, node, ancestor) -> bool:
    """Whether `node` lies within `ancestor` (not `ancestor` itself)."""
    node = self.parents.get(node)
    while node is not None:
      if node is ancestor:
        return True
      node = self.parents.get(node)
    return False

  def _function(self, node):
    """The function (or module) whose body holds `node`."""
    node = self.parents.get(node)
    while node is not None and not isinstance(node, (cst.FunctionDef,
                                                     cst.Lambda)):
      node = self.parents.get(node)
    return node if node is not None else self.module

  def _class_of(self, node):
    """The class whose body holds `node`, or None."""
    node = self.parents.get(node)
    while node is not None and not isinstance(node, cst.ClassDef):
      node = self.parents.get(node)
    return node

  def reads_of(self, target: cst.Name) -> list[cst.Name] | None:
    """The reads of the binding `target` makes (None: not found)."""
    scope = self.scopes.get(target)
    if scope is None:
      return None
    for assignment in scope.assignments[target.value]:
      if getattr(assignment, "node", None) is target:
        # LibCST keeps the references in a set: in the order of the text,
        # so that the report names the same place on every run.
        return sorted((access.node for access in assignment.references),
                      key=lambda n: (self.positions[n].start.line,
                                     self.positions[n].start.column))
    return None

  # Where an optimizer goes.

  def holders(self, site: cst.Call) -> list[cst.CSTNode]:
    """Every expression that may hold the optimizer `site` builds."""
    if site not in self._holders:
      self._holders[site] = self._follow(site)
      self._traced.update(self._holders[site])
    return self._holders[site]

  def _follow(self, site: cst.Call) -> list[cst.CSTNode]:
    """The expressions that hold the optimizer built at `site`."""
    found, queue, seen_keys = [site], [site], set()
    while queue:
      node = queue.pop()
      parent = self.parents.get(node)
      targets = []
      if node is site and _last_name(site.func) == "compile":
        targets = ["compiled"]  # The optimizer `compile` wraps by itself.
      elif isinstance(parent, (cst.Assign, cst.AnnAssign)) and (
          parent.value is node):
        targets = ([t.target for t in parent.targets]
                   if isinstance(parent, cst.Assign) else [parent.target])
      elif isinstance(parent, cst.Arg) and self._compiled_by(parent):
        targets = ["compiled"]
      for target in targets:
        if isinstance(target, cst.Name) and isinstance(
            self.scopes.get(target), metadata.GlobalScope):
          self._globals.setdefault(site, []).append(
              f"held in the module-level name `{target.value}` (line "
              f"{self.line(target)}), which other modules can import")
        key = target if isinstance(target, str) else self.code(target)
        if key in seen_keys:
          continue
        seen_keys.add(key)
        for holder in self._nodes_holding(target):
          if self._within(holder, site):
            continue  # `opt = Wrapper(opt)`: the inner optimizer, read first.
          if holder not in found:
            found.append(holder)
            queue.append(holder)
    return found

  def _compiled_by(self, arg: cst.Arg) -> bool:
    """Whether `arg` is the optimizer a `compile` call takes."""
    call = self.parents.get(arg)
    if not (isinstance(call, cst.Call) and
            _last_name(call.func) == "compile"):
      return False
    positional = [a for a in call.args if a.keyword is None]
    return (arg.keyword is not None and arg.keyword.value == "optimizer") or (
        bool(positional) and positional[0] is arg)

  def _nodes_holding(self, target) -> list[cst.CSTNode]:
    """The expressions that read what `target` was assigned."""
    if target == "compiled":
      # A model compiled with it holds it as `.optimizer`, wherever used.
      return [n for n in self.parents if isinstance(n, cst.Attribute) and
              n.attr.value == "optimizer" and
              not self._is_target(n) and not self._in_module(n)]
    if isinstance(target, cst.Name):
      reads = self.reads_of(target)
      if reads is not None:
        return [n for n in reads if isinstance(n, cst.Name)]
      return []
    if isinstance(target, cst.Attribute):
      key = self.code(target)
      within = (self._class_of(target)
                if self.code(target.value) == "self" else None)
      return [n for n in self.parents
              if isinstance(n, cst.Attribute) and not self._is_target(n) and
              n.attr.value == target.attr.value and self.code(n) == key and
              (within is None or self._class_of(n) is within)]
    return []

  def _in_module(self, node: cst.Attribute) -> bool:
    """Whether `node` is a module's member (`tf.config.optimizer`)."""
    root = node
    while isinstance(root, cst.Attribute):
      root = root.value
    if not isinstance(root, cst.Name):
      return False
    scope = self.scopes.get(root)
    found = list(scope[root.value]) if scope is not None else []
    return bool(found) and all(
        isinstance(a, metadata.ImportAssignment) for a in found)

  def _is_target(self, node) -> bool:
    """Whether `node` is assigned to (not read)."""
    parent = self.parents.get(node)
    if isinstance(parent, cst.AssignTarget):
      return True
    return isinstance(parent, (cst.AnnAssign, cst.AugAssign)) and (
        parent.target is node)

  # Why an optimizer stays.

  def stays(self, site: cst.Call, tf23: bool) -> list[str]:
    """The reasons the optimizer `site` builds must stay on mplso."""
    reasons = []
    for holder in self.holders(site):
      reason, _ = self._use(holder, tf23)
      if reason:
        reasons.append(reason)
    leaves = self._leaves(site)
    if self.keras == edits_lib.KERAS_3:
      reasons += self._gradient_flow(site)
    reasons += self._inner_overrides(site)
    # A checkpoint holding it may be read back wherever that object goes.
    restores = self._restores(bool(leaves) or self._checkpointed(site))
    if restores:
      reasons.append(restores)
    if leaves:
      # Where it goes: this file, and the files that import its module.
      reaching = self.joined()
      untraced = self.untraced() or [
          u for u in [self.facts.first_untraced(reaching)] if u]
      if untraced:
        where, what = untraced[0]
        reasons.append(
            f"it leaves the code the tool can follow ({leaves[0]}), and "
            f"{where} {what} on an optimizer the tool cannot trace: it may "
            "be this one")
    return list(dict.fromkeys(reasons))

  def joined(self) -> set[str]:
    """The other files of the run joined to this one by imports."""
    return self.facts.reaching(self.path) - {self.path}

  def _checkpointed(self, site) -> bool:
    """Whether the optimizer `site` builds is handed to a checkpoint."""
    for holder in self.holders(site):
      arg = self.parents.get(holder)
      call = self.parents.get(arg)
      if (isinstance(arg, cst.Arg) and isinstance(call, cst.Call) and
          _last_name(call.func) in _CHECKPOINTS):
        return True
    return False

  def _leaves(self, site) -> list[str]:
    """Where the optimizer leaves the code the tool follows."""
    return [left for left in (self._use(h, False)[1]
                              for h in self.holders(site)) if left] + (
                                  self._globals.get(site, []))

  def leaves_why(self, site) -> str:
    """For a report line: where it leaves, and what the tool saw ('')."""
    leaves = self._leaves(site)
    if not leaves:
      return ""
    return (f"it leaves the code the tool follows ({leaves[0]}); the files "
            "converted together use no optimizer they build otherwise in "
            "a way Keras's class does not serve")

  def _use(self, holder, tf23: bool) -> tuple[str, str]:
    """(why `holder`'s use keeps it on mplso, where it leaves), or ''s."""
    parent = self.parents.get(holder)
    if isinstance(parent, cst.Attribute) and parent.value is holder:
      return self._member(parent, tf23), ""
    if isinstance(parent, (cst.Assign, cst.AnnAssign)) and (
        parent.value is holder):
      return "", ""  # Followed: the target holds it too.
    if self._is_target(holder):
      return "", ""
    if isinstance(parent, cst.Arg):
      call = self.parents.get(parent)
      name = _last_name(call.func) if isinstance(call, cst.Call) else None
      if self._compiled_by(parent) or name in _LOOKS:
        return "", ""
      if name in _CHECKPOINTS:
        return "", ""  # `_restores` decides.
      return "", f"passed to `{self.code(call.func)}` at line " \
          f"{self.line(holder)}" if isinstance(call, cst.Call) else ""
    if isinstance(parent, (cst.Return, cst.Yield)):
      return "", f"returned at line {self.line(holder)}"
    if isinstance(parent, cst.Expr):
      return "", ""  # A statement of its own: nothing happens to it.
    return "", f"used as a value at line {self.line(holder)}"

  def _member(self, attribute: cst.Attribute, tf23: bool) -> str:
    """Why a use of `opt.<name>` keeps `opt` on mplso ('' if it need not)."""
    name = attribute.attr.value
    parent = self.parents.get(attribute)
    called = isinstance(parent, cst.Call) and parent.func is attribute
    keras = ("Keras 3's class" if self.keras == edits_lib.KERAS_3 else
             "tf_keras's class")
    where = f"line {self.line(attribute)}"
    if self._is_target(attribute):
      if name in ("learning_rate", "lr"):
        return ""
      return (f"the program sets `{self.code(attribute)}` ({where}); "
              f"{keras} may not have it")
    if called:
      kind = _CALLS[self.keras].get(name)
      if name == "get_gradients":
        return ("the program calls `get_gradients` (" + where + "), which "
                "Keras's own class does not serve on today's optimizers "
                "(mplso's does)")
      if name == "loss_scale":
        if parent.args:
          return f"`{self.code(parent)}` ({where}) is not a read of the scale"
        return ""
      if kind is None:
        return (f"the program calls `{self.code(attribute)}` ({where}), "
                f"which {keras} does not have as TF's class had it")
      if name == "apply_gradients":
        return self._apply_arguments(parent, where)
      if name == "get_config" and tf23:
        return (f"the program reads `get_config()` ({where}): TF 2.3's "
                "class wrote `loss_scale` there, tf_keras's class writes "
                "`dynamic`, `initial_scale` and `dynamic_growth_steps`")
      return ""
    if name == "loss_scale" and tf23 and not isinstance(parent, cst.Call):
      return (f"the program reads `{self.code(attribute)}` ({where}) "
              "without calling it: in TF 2.3 that was the loss-scale object "
              "(`opt.loss_scale is opt._loss_scale`), which Keras's class "
              "does not have")
    if name in _READS[self.keras]:
      return ""
    if name in _CALLS[self.keras] and name != "loss_scale":
      return (f"the program uses `{self.code(attribute)}` ({where}) as a "
              "value, not in a call the tool can follow")
    if self.keras == edits_lib.KERAS_3 and name in ("dynamic",
                                                    "dynamic_counter"):
      return (f"the program reads `{self.code(attribute)}` ({where}), "
              "which Keras 3's class does not have (its counter is "
              "`step_counter`, made when it is built; it is always "
              "dynamic)")
    return (f"the program reads `{self.code(attribute)}` ({where}), which "
            f"{keras} does not have as mplso's does")

  def _apply_arguments(self, call: cst.Call, where: str) -> str:
    """Why `call`'s arguments keep its optimizer on mplso ('')."""
    positional = [a for a in call.args if a.keyword is None]
    if len(positional) > 1:
      return (f"`apply_gradients` takes a second positional argument "
              f"({where}), which mplso hands to the wrapped optimizer as TF "
              "2.4-2.10 did; Keras's class does not")
    keywords = [a.keyword.value for a in call.args if a.keyword is not None]
    allowed = () if self.keras == edits_lib.KERAS_3 else ("name",)
    extra = [k for k in keywords if k not in allowed]
    if extra or any(a.star for a in call.args):
      return (f"`apply_gradients` takes {', '.join(extra) or 'unpacked'} "
              f"arguments ({where}), which "
              + ("Keras 3's `apply_gradients(grads_and_vars)` does not take"
                 if self.keras == edits_lib.KERAS_3 else
                 "tf_keras's class passes on otherwise than mplso's"))
    return ""

  # Keras 3: gradients go from `get_unscaled_gradients` to `apply_gradients`.

  def _uses_of(self, site, method: str) -> list[cst.Call]:
    """The calls `x.<method>(...)` on what holds `site`."""
    found = []
    for holder in self.holders(site):
      parent = self.parents.get(holder)
      if (isinstance(parent, cst.Attribute) and parent.value is holder and
          parent.attr.value == method):
        call = self.parents.get(parent)
        if isinstance(call, cst.Call) and call.func is parent:
          found.append(call)
    return found

  def unscaling(self, site) -> dict[cst.Call, cst.CSTNode]:
    """Keras 3: {get_unscaled_gradients call: what replaces it}.

    The value is the call's argument (the scaled gradients), or the whole
    statement `g = opt.get_unscaled_gradients(g)` (removed). Only calls
    whose result goes straight into one `apply_gradients` of the same
    optimizer are here (see `_gradient_flow`).
    """
    found = {}
    applies = self._uses_of(site, "apply_gradients")
    for call in self._uses_of(site, "get_unscaled_gradients"):
      if self._straight_into_apply(call, applies):
        found[call] = call.args[0].value
    return found

  def _straight_into_apply(self, call: cst.Call, applies) -> bool:
    """Whether `call`'s result is read only by an `apply_gradients` there."""
    if len(call.args) != 1 or call.args[0].keyword or call.args[0].star:
      return False
    parent = self.parents.get(call)
    if isinstance(parent, cst.Arg):  # `apply_gradients(zip(unscale(g), v))`
      return any(_zip_gradients(a.args[0].value) is call
                 for a in applies if a.args)
    if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1 and
            isinstance(parent.targets[0].target, cst.Name)):
      return False
    reads = self.reads_of(parent.targets[0].target)
    if not reads or len(reads) != 1:
      return False
    [read] = reads
    return any(_zip_gradients(a.args[0].value) is read and
               self._function(a) is self._function(call)
               for a in applies if a.args)

  def _gradient_flow(self, site) -> list[str]:
    """Keras 3: why its scaling calls do not convert ([] if they do)."""
    scaled = self._uses_of(site, "get_scaled_loss")
    unscaled = self._uses_of(site, "get_unscaled_gradients")
    applies = self._uses_of(site, "apply_gradients")
    converted = self.unscaling(site)
    reasons = []
    for call in unscaled:
      if call not in converted:
        reasons.append(
            f"the gradients `get_unscaled_gradients` returns at line "
            f"{self.line(call)} do not go straight into `apply_gradients` "
            "(code in between reads them: clipping, accumulation, logging, "
            "a helper, another function); Keras 3's class unscales inside "
            "`apply_gradients`, after that code, so it would see scaled "
            "gradients")
    keras_3_protocol = bool(self._uses_of(site, "scale_loss"))
    for call in applies:
      gradients = _zip_gradients(call.args[0].value) if call.args else None
      if keras_3_protocol and not unscaled:
        break  # Keras 3's own protocol: `scale_loss`, then apply.
      if any(self._is_result_of(gradients, u, site) for u in converted):
        continue
      partly = [u for u in converted if self._named_by(gradients, u)]
      if partly:
        reasons.append(
            f"`apply_gradients` at line {self.line(call)} takes "
            f"`{gradients.value}`, which is the result of "
            f"`get_unscaled_gradients` (line {self.line(partly[0])}) on "
            "some paths only, or on paths the tool cannot follow (a branch, "
            "a loop, another assignment, a `try`); Keras 3's class divides "
            "every gradient by the scale inside `apply_gradients`, the "
            "gradients of the other paths too")
        continue
      reasons.append(
          f"`apply_gradients` at line {self.line(call)} takes gradients "
          "that are not unscaled right before it by "
          "`get_unscaled_gradients`; Keras 3's class divides every "
          "gradient by the scale inside `apply_gradients`")
    if scaled and not unscaled:
      reasons.append(
          f"the program scales the loss (line {self.line(scaled[0])}) but "
          "unscales the gradients otherwise than with "
          "`get_unscaled_gradients`; Keras 3's class unscales in "
          "`apply_gradients`, so the pair converts only together")
    return reasons

  def _is_result_of(self, gradients, unscale: cst.Call, site) -> bool:
    """Whether `gradients` is what `unscale` returned, on every path.

    `site`: the optimizer's call (a check of its class is always true).
    """
    if gradients is None:
      return False
    if gradients is unscale:
      return True
    return self._named_by(gradients, unscale) and self._only_binding(
        gradients, self.parents[unscale], site)

  def _named_by(self, gradients, unscale: cst.Call) -> bool:
    """Whether `gradients` reads the name `unscale`'s result is bound to."""
    parent = self.parents.get(unscale)
    if not (isinstance(parent, cst.Assign) and
            isinstance(gradients, cst.Name)):
      return False
    reads = self.reads_of(parent.targets[0].target) or []
    return gradients in reads

  def _only_binding(self, read: cst.Name, assign: cst.Assign, site) -> bool:
    """Whether `assign` binds every value `read` may see.

    It does when `assign` runs on every path to `read`, after every other
    binding of the name: the two statements lie in one block, `assign`
    first (each perhaps within `with` blocks, which run their body
    through, or within `if isinstance(opt, ...LossScaleOptimizer):` on
    the optimizer `site` builds, always true for it), and nothing between
    them binds the name. Any other shape (a branch, a loop's head, a `try`,
    a name bound from another function) counts as not known: False.
    """
    target = assign.targets[0].target
    scope = self.scopes.get(read)
    if scope is None or self.scopes.get(target) is not scope:
      return False
    bound = scope.assignments[read.value]
    if not any(getattr(a, "node", None) is target for a in bound):
      return False  # Bound in another scope (`global`, `nonlocal`).
    start = self.positions[assign].end
    end = self.positions[read].start
    for assignment in bound:
      node = getattr(assignment, "node", None)
      if node is None or self.scopes.get(node) is not scope:
        return False
      if node is target:
        continue
      at = self.positions[node].start
      if (start.line, start.column) <= (at.line, at.column) < (
          end.line, end.column):
        return False
    for (first, block), (then, other) in (
        (u, p) for u in self._blocks(assign, site)
        for p in self._blocks(read, site)):
      if block is other:
        body = list(block.body)
        return body.index(first) < body.index(then)
    return False

  def _blocks(self, node, site) -> list[tuple[cst.CSTNode, cst.CSTNode]]:
    """(statement, block) holding `node`, then out of each block around it
    that always runs: a `with`, or an `if` that checks the class of the
    optimizer `site` builds (`_checks_its_class`)."""
    found = []
    while True:
      parent = self.parents.get(node)
      while parent is not None and not isinstance(
          parent, (cst.Module, cst.IndentedBlock, cst.SimpleStatementSuite)):
        node, parent = parent, self.parents.get(parent)
      if parent is None:
        return found
      found.append((node, parent))
      owner = self.parents.get(parent)
      if not (isinstance(owner, (cst.With, cst.If)) and
              owner.body is parent) or (isinstance(owner, cst.If) and not (
                  self._checks_its_class(owner, site))):
        return found
      node = owner

  def _checks_its_class(self, statement: cst.If, site) -> bool:
    """Whether `statement` is `if isinstance(opt, ...LossScaleOptimizer):`.

    `opt` an expression holding the optimizer `site` builds; not an `elif`
    (it runs only where the test before it failed).
    """
    test = statement.test
    if isinstance(self.parents.get(statement), cst.If) or not (
        isinstance(test, cst.Call) and _last_name(test.func) == "isinstance"
        and isinstance(test.func, cst.Name) and len(test.args) == 2 and
        not any(a.keyword or a.star for a in test.args)):
      return False
    return (test.args[0].value in self.holders(site) and
            _last_name(test.args[1].value) == "LossScaleOptimizer")

  # The inner optimizer, and checkpoints.

  def _inner_overrides(self, site: cst.Call) -> list[str]:
    """Why the inner optimizer's own `apply_gradients` keeps it on mplso."""
    positional = [a for a in site.args if a.keyword is None and not a.star]
    inner = positional[0] if positional else next(
        (a for a in site.args if a.keyword is not None and
         a.keyword.value in ("optimizer", "inner_optimizer")), None)
    if inner is None:
      return []
    value, depth = inner.value, 0
    while isinstance(value, cst.Name) and depth < 3:
      assigned = self._assigned(value)
      if assigned is None:
        break
      value, depth = assigned, depth + 1
    how = ("calls the inner optimizer's `apply` and never its "
           "`apply_gradients`" if self.keras == edits_lib.KERAS_3 else
           "calls it with `skip_gradients_aggregation`, which TF 2.3-style "
           "overrides (`experimental_aggregate_gradients`) do not take")
    name = _last_name(value.func) if isinstance(value, cst.Call) else None
    where = self.facts.overriding.get(name or "")
    if where is not None:
      return [f"its inner optimizer, `{name}` ({where}), defines its own "
              f"`apply_gradients`; Keras's class {how} (mplso's calls it as "
              "TF 2.4-2.15's did)"]
    if name and name[:1].isupper():
      return []  # A class the tree does not override in: Keras's own.
    # A factory's result, or a value the tool cannot follow: it may be of a
    # class of the joined files that overrides `apply_gradients`.
    reaching = self.facts.reaching(self.path)
    overriding = [(cls, at) for cls, at in self.facts.overriding.items()
                  if _file_of(at) in reaching]
    if not overriding:
      return []
    cls, at = overriding[0]
    return [f"its inner optimizer, `{self.code(inner.value)}`, is built where "
            f"the tool cannot follow, and `{cls}` ({at}) defines its own "
            f"`apply_gradients`: it may be one; Keras's class {how} (mplso's "
            "calls it as TF 2.4-2.15's did)"]

  def _assigned(self, name: cst.Name):
    """The value assigned once to `name` in its scope, or None."""
    scope = self.scopes.get(name)
    if scope is None:
      return None
    found = list(scope[name.value])
    if len(found) != 1 or not isinstance(found[0], metadata.Assignment):
      return None
    target = found[0].node
    parent = self.parents.get(target)
    if isinstance(parent, cst.AssignTarget):
      assign = self.parents.get(parent)
      if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
        return assign.value
    return None

  def _restores(self, leaves: bool) -> str:
    """Keras 3: why a checkpoint the program reads keeps it ('' if none)."""
    if self.keras != edits_lib.KERAS_3:
      return ""  # tf_keras's class reads the legacy class's state as it is.
    reaching = self.joined()
    restores = self.restores() or (
        [r for r in [self.facts.first_restore(reaching)] if r]
        if leaves else [])
    if not restores:
      return ""
    return (f"the program reads a checkpoint back ({restores[0]}): Keras "
            "3's class keeps its scale and good-step count as "
            "`dynamic_scale` and `step_counter`, so the legacy class's "
            "state would not restore into it and the scale would restart")

  # What this file shows about optimizers it does not build.

  def restores(self) -> list[str]:
    """Where this file reads a checkpoint back (`PATH:LINE`)."""
    return [f"{self.path}:{self.line(n)}" for n in self.parents
            if isinstance(n, cst.Call) and _last_name(n.func) in _RESTORES]

  def untraced(self) -> list[tuple[str, str]]:
    """(where, what) of uses on expressions no site's holders cover.

    Call after `holders` for every site of the file.
    """
    found = []
    for node in self.parents:
      if not isinstance(node, cst.Attribute):
        continue
      name = node.attr.value
      if node.value in self._traced:
        continue
      parent = self.parents.get(node)
      called = isinstance(parent, cst.Call) and parent.func is node
      what = ""
      if name in _NOT_SERVED[self.keras]:
        what = (f"calls `{name}`" if called else f"reads `{name}`")
      elif name == "loss_scale" and called and not parent.args:
        what = "calls `loss_scale()` (TF 2.3's)"
      elif name == "apply_gradients" and called:
        positional = [a for a in parent.args if a.keyword is None]
        if len(positional) > 1:
          what = "calls `apply_gradients` with a second positional argument"
        elif self.keras == edits_lib.KERAS_3 and not self._unscaled_here(
            parent):
          what = ("calls `apply_gradients` with gradients that are not "
                  "unscaled right before it")
      if what:
        found.append((f"{self.path}:{self.line(node)}", what))
    return found

  def untraced_scaling(self, traced) -> list[cst.Call]:
    """`SCALING` calls on expressions not in `traced` (holders).

    Not a method's call of its own class's method (`self.get_scaled_loss`
    in a class that defines `get_scaled_loss`): that is the user's.
    """
    return [n for n in self.parents
            if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
            and n.func.attr.value in SCALING and n.func.value not in traced
            and not self._calls_own_method(n.func)]

  def _calls_own_method(self, func: cst.Attribute) -> bool:
    """Whether `func` is `self.m` in a method of a class that defines `m`."""
    function = self._function(func)
    if not (isinstance(function, cst.FunctionDef) and
            isinstance(func.value, cst.Name) and function.params.params and
            function.params.params[0].name.value == func.value.value):
      return False
    owner = self._class_of(function)
    return owner is not None and self.parents.get(
        self.parents.get(function)) is owner and any(
            isinstance(s, cst.FunctionDef) and s.name.value == func.attr.value
            for s in owner.body.body)

  def _unscaled_here(self, call: cst.Call) -> bool:
    """Whether `call`'s gradients are unscaled (or scaled) as Keras 3 needs.

    They come from `get_unscaled_gradients`, or the file scales losses
    with `scale_loss` (Keras 3's own protocol).
    """
    if any(isinstance(n, cst.Attribute) and n.attr.value == "scale_loss"
           for n in self.parents):
      return True
    gradients = _zip_gradients(call.args[0].value) if call.args else None
    if isinstance(gradients, cst.Call):
      return _last_name(gradients.func) == "get_unscaled_gradients"
    if isinstance(gradients, cst.Name):
      value = self._assigned(gradients)
      return isinstance(value, cst.Call) and (
          _last_name(value.func) == "get_unscaled_gradients")
    return False
