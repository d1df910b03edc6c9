"""Rewrites one source file's legacy loss-scale names: `upgrade_source`.

The file is parsed with LibCST, which keeps every byte it is not asked to
change. A planning pass decides every edit on the original tree (what each
name stands for comes from `bindings`); a transformer then swaps exactly the
planned nodes. The edits, in order of line:

- a reference to a spelling of the `--list` table becomes mplso's name
  (`tf.contrib.mixed_precision.LossScaleOptimizer` ->
  `mplso.contrib.LossScaleOptimizer`), and the `import mplso.X` it needs is
  added once, after the file's TensorFlow imports;
- an import of such a name, or of `tf.contrib.mixed_precision` (served whole
  by `mplso.contrib`), imports mplso's instead under the same local name;
- an import of a namespace that only `install()` provides
  (`from tensorflow.keras.mixed_precision import experimental`) goes once
  every use of it is rewritten;
- what has no explicit form (a model `compile` wraps by itself under a
  mixed policy, a legacy namespace used as a value) gets
  `mplso.compat.install()` before the file's first TensorFlow import, with a
  report line saying why;
- `--to native`: see `native_rules`.
"""

from __future__ import annotations

import ast

import libcst as cst
from libcst import metadata

from mplso._src.upgrade import bindings as bindings_lib
from mplso._src.upgrade import comments
from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import names
from mplso._src.upgrade import native_plan
from mplso._src.upgrade import native_rules
from mplso._src.upgrade import optimizer_uses
from mplso._src.upgrade import placement
from mplso._src.upgrade import prefilter
from mplso._src.upgrade import reach
from mplso._src.upgrade import stars

_COMPILE_WHY = (
    "`compile` here wraps the optimizer of a model built under a mixed "
    "policy by itself. The program ran with mplso's LossScaleOptimizer there "
    "under `python -m mplso.compat`; plain TF 2.21 would wrap it in Keras's "
    "own class instead, and no name in the file says which class to use. "
    "`mplso.compat.install()` keeps compile's wrapper mplso's")


def _is_import(node) -> bool:
  return isinstance(node, (cst.Import, cst.ImportFrom))


class _Planner(native_plan.NativePlanning):
  """Decides every edit of one module; `apply()` returns the new module."""

  def __init__(self, wrapper: metadata.MetadataWrapper, to: str, keras: str,
               facts: optimizer_uses.Facts | None = None,
               path: str = "this file"):
    self.module = wrapper.module
    self.to, self.keras = to, keras
    self.uses = optimizer_uses.Uses(wrapper, keras,
                                    facts or optimizer_uses.Facts(), path)
    self.moved: list[tuple[cst.Call, bool]] = []  # --to native: (site, tf23)
    self.bindings = bindings_lib.Bindings(wrapper)
    self.parents = wrapper.resolve(metadata.ParentNodeProvider)
    self.positions = wrapper.resolve(metadata.PositionProvider)
    self.contexts = wrapper.resolve(metadata.ExpressionContextProvider)
    self.replace: dict[cst.CSTNode, object] = {}
    self.after: dict[cst.CSTNode, list[cst.BaseStatement]] = {}
    self.edits: list[edits_lib.Edit] = []
    self.modules: set[str] = set()
    self.install_why: list[tuple[int, str]] = []
    self.installs = False  # Whether `apply()` inserted `install()`.
    self._rebound: set[metadata.BaseAssignment] = set()
    # --to native: the loss-scale arguments a native call takes in, whether
    # any name went native, and Keras's namespace as this file can name it.
    self.consumed: list[cst.CSTNode] = []
    self.went_native = False
    self.compile_native = False
    self._root: str | None = None
    self._wrapping: list[cst.Call] | None = None

  # Helpers.

  def code(self, node: cst.CSTNode) -> str:
    return self.module.code_for_node(node)

  def line(self, node: cst.CSTNode) -> int:
    return self.positions[node].start.line

  def edit(self, node, new_code: str, why: str = "") -> None:
    self.edits.append(edits_lib.changed(self.line(node), self.code(node),
                                        new_code, why))

  def needs(self, target: str) -> None:
    self.modules.add(names.target_module(target))

  def statement_of(self, node) -> cst.CSTNode:
    while not isinstance(node, (cst.SimpleStatementLine, cst.Module)):
      node = self.parents[node]
    return node

  def maximal(self, node) -> bool:
    parent = self.parents.get(node)
    return not (isinstance(parent, cst.Attribute) and parent.value is node)

  # The plan.

  def plan(self) -> None:
    nodes = list(self.contexts) + [n for n in self.parents if _is_import(n)]
    imports = [n for n in self.parents if _is_import(n)]
    self._mark_rebinding(imports)
    for statement in imports:
      self._plan_import(statement)
    for node in nodes:
      if isinstance(node, (cst.Name, cst.Attribute)):
        self._plan_reference(node)
    relies_on_compile = self._plan_compile()
    if self.to == edits_lib.NATIVE and (self.went_native or
                                        relies_on_compile):
      self._plan_methods()
    self.edits += reach.warnings(self.bindings, self.edits)
    self._note_scaling_elsewhere()

  def _note_scaling_elsewhere(self) -> None:
    """A line for each TF 2.4 loss-scaling call on an optimizer from
    elsewhere: the file needs that optimizer to be one that has the method.
    """
    # What this file wraps itself; a model's `.optimizer` counts only where
    # the file's own `compile` wraps it (under a mixed policy).
    traced = set()
    for site in self._optimizer_sites() + (
        self.wrapping_compiles() if self.install_why or
        self.compile_native else []):
      traced.update(self.uses.holders(site))
    for call in self.uses.untraced_scaling(traced):
      what = ("tf_keras's own class or mplso's" if self.keras ==
              edits_lib.TF_KERAS else "mplso's")
      self.edits.append(edits_lib.kept(
          self.line(call), self.code(call.func),
          f"TF 2.4-2.15's `{call.func.attr.value}` on an optimizer built "
          f"elsewhere: it works when that optimizer is {what} "
          "LossScaleOptimizer (the upgrade gives every legacy one mplso's "
          "name" + (", and keeps on mplso each one of the files converted "
                    "together that may reach here" if self.to ==
                    edits_lib.NATIVE else "") + "); Keras 3's own class has "
          "`scale_loss` and unscales in `apply_gradients` instead"))

  def _mark_rebinding(self, imports) -> None:
    """Notes the bindings that will name mplso's objects themselves.

    An import of a spelling (or of `tf.contrib.mixed_precision`) becomes an
    import of mplso's, and an assignment of one gets mplso's as its value:
    the names bound so are right as they stand.
    """
    rebinding = set(names.TARGETS) | set(names.SERVED_WHOLE)
    for statement in imports:
      for binding in self.bindings.made_by(statement):
        if self.bindings.bound_path(binding) in rebinding:
          self._rebound.add(binding)
    for target, path in self.bindings.aliases.items():
      binding = self.bindings.binding(target)
      if path in rebinding and binding is not None:
        self._rebound.add(binding)

  def _plan_import(self, statement) -> None:
    """Rewrites or drops the aliases of one import statement."""
    if isinstance(statement, cst.ImportFrom) and statement.relative:
      return
    if isinstance(statement, cst.ImportFrom) and isinstance(
        statement.names, cst.ImportStar):
      text = bindings_lib.dotted(statement.module)
      found = stars.plan(reach.star_namespace(statement), text,
                         self.bindings.unbound(),
                         reach.star_namespaces(self.bindings))
      if found is not None:
        self.after.setdefault(self.statement_of(statement), []).extend(
            cst.parse_statement(line + "\n") for line in found.imports)
        if not found.keep:
          self.replace[statement] = cst.RemoveFromParent()
        self.edits.append(edits_lib.changed(
            self.line(statement), self.code(statement),
            found.new(self.code(statement)), found.why))
        self.edits += [edits_lib.warned(self.line(n), n.value,
                                        found.unknown_why)
                       for n in found.unknown]
      return
    by_local = {a.name: a for a in self.bindings.made_by(statement)}
    kept, added, changed, unused = [], [], False, False
    removed_why = ""
    for alias in statement.names:
      local = bindings_lib.dotted(
          alias.asname.name if alias.asname else alias.name)
      name = bindings_lib.dotted(alias.name)
      if isinstance(statement, cst.ImportFrom):
        name = f"{bindings_lib.dotted(statement.module)}.{name}"
      path = names.public(names.canonical(name) or name)
      if isinstance(statement, cst.Import) and alias.asname is None:
        if (names.absent_today(path) and
            not self._probe(statement, path)):
          # `import tensorflow.contrib.mixed_precision` binds `tensorflow`;
          # its uses are rewritten one by one, the binding stays.
          kept.append(alias.with_changes(name=cst.Name(
              name.split(".")[0])))
          changed = True
          continue
        kept.append(alias)
        continue
      if path in names.TARGETS or path in names.SERVED_WHOLE:
        target = names.TARGETS.get(path) or names.SERVED_WHOLE[path]
        module, _, member = target.rpartition(".")
        asname = "" if member == local else f" as {local}"
        added.append((f"from {module} import {member}{asname}", alias))
        changed = True
        continue
      binding = by_local.get(local.split(".")[0])
      if ((names.absent_today(path) or path in names.PRIVATE_MODULES) and
          not (names.absent_today(path) and self._probe(statement, path))):
        if binding is not None and self._all_rewritten(binding):
          unused = not self.bindings.references(binding)
          removed_why = (
              "the namespace exists only under `mplso.compat.install()`"
              if names.made_by_install(path) else
              f"`{name}` is an attribute of `tf`, not a module TF 2.21 can "
              "import under Keras 3" if path in names.ATTRIBUTES_ONLY else
              f"`{name}` held legacy loss-scale names" +
              (" (TF 2.21 lacks it)" if names.absent_today(path) else ""))
          changed = True
          continue
      if binding is not None and not self.bindings.references(binding):
        why = reach.unserved_why(path)
        if why:
          self.edits.append(edits_lib.warned(
              self.line(statement), self.code(statement), why))
      kept.append(alias)
    if not changed:
      return
    old = self.code(statement)
    line = self.statement_of(statement)
    new_statements = []
    if kept:
      kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
      replacement = statement.with_changes(names=kept)
      if isinstance(statement, cst.ImportFrom) and statement.lpar:
        replacement = replacement.with_changes(
            lpar=statement.lpar, rpar=statement.rpar)
      self.replace[statement] = replacement
      new_statements.append(self.module.code_for_node(replacement))
    else:
      self.replace[statement] = cst.RemoveFromParent()
    extra = []
    for text, alias in added:
      extra.append(cst.parse_statement(text + "\n"))
      if isinstance(statement, cst.ImportFrom) and statement.lpar:
        extra[-1] = comments.with_comments(
            extra[-1], *comments.own_comments(statement, alias))
    if extra and not kept and len(line.body) == 1:
      # The new lines stand where the statement stood, with its comments.
      extra = comments.in_place_of(line, extra)
      self.replace[line] = extra.pop(0)
    if extra:
      self.after.setdefault(line, []).extend(extra)
      for text, _ in added:
        self.modules.discard(text.split()[1])
    new_statements += [text for text, _ in added]
    removed = removed_why + (", and nothing in the file uses it" if unused
                             else ", and every use of it is rewritten")
    self.edits.append(edits_lib.changed(
        self.line(statement), old, "; ".join(new_statements) or "(removed)",
        "" if kept or added else removed))

  def _probe(self, statement, path: str) -> bool:
    """Whether `statement` tries a namespace TF 2.21 lacks, in a `try`.

    Such an import is a program's test for an old TensorFlow: it stays, so
    that its `except` branch runs on TF 2.21, with a report line.
    """
    node = statement
    while node is not None and not isinstance(node, (cst.FunctionDef,
                                                     cst.Module)):
      parent = self.parents.get(node)
      if isinstance(parent, cst.Try) and node is parent.body:
        self.edits.append(edits_lib.warned(
            self.line(statement), self.code(statement),
            f"kept: inside a `try`, it tests for `{path}`, which TF 2.21 "
            "lacks, so the program takes its `except` branch here (under "
            "`python -m mplso.compat` the import succeeded)"))
        return True
      node = parent
    return False

  def _all_rewritten(self, binding) -> bool:
    for name in self.bindings.references(binding):
      top = name
      hit = False
      while True:
        found = self.bindings.resolve(top)
        if found is not None and (found.path in names.TARGETS or
                                  found.path in names.SERVED_WHOLE):
          hit = True
          break
        if self.bindings.above(top) is None:
          break
        top = self.bindings.above(top)
      if not hit:
        return False
    return True

  def _plan_reference(self, node) -> None:
    parent = self.parents.get(node)
    if isinstance(parent, cst.Attribute) and parent.attr is node:
      return
    if self.contexts.get(node) not in (None, metadata.ExpressionContext.LOAD):
      return
    if isinstance(self.statement_of(node), cst.SimpleStatementLine) and any(
        _is_import(s) for s in self.statement_of(node).body
        if self._inside(node, s)):
      return
    while isinstance(self.bindings.above(node), cst.Call):
      node = self.bindings.above(node)  # `getattr(x, "y")` reads `x.y`.
    maximal = self.bindings.above(node) is None
    found = self.bindings.resolve(node) or reach.agreed(
        self.bindings, node, self._rebound)
    if found is None:
      why = maximal and reach.two_ways_why(
          self.bindings, node, self._rebound)
      if why:
        self.edits.append(edits_lib.warned(
            self.line(node), self.code(node), why))
      return
    if found.binding in self._rebound:
      return
    if any(self._inside(node, arg) for arg in self.consumed):
      return
    path = found.path
    if path in names.TARGETS:
      self._plan_target(node, path)
    elif path in names.SERVED_WHOLE and maximal:
      self._rename(node, names.SERVED_WHOLE[path])
    elif maximal and names.made_by_install(path):
      self.install_why.append((self.line(node), (
          f"`{self.code(node)}` uses the namespace `{path}` itself, which "
          "only `mplso.compat.install()` provides")))
    elif maximal and names.unserved_member(path):
      self.edits.append(edits_lib.warned(
          self.line(node), self.code(node),
          f"kept: `{path}` is not one of the names mplso serves; TF 2.21 "
          "lacks it (so does `python -m mplso.compat`)"))
    elif maximal and reach.unserved_why(path):
      self.edits.append(edits_lib.warned(
          self.line(node), self.code(node), reach.unserved_why(path)))
    new = self.replace.get(node)
    if isinstance(new, (cst.Name, cst.Attribute)):
      self.replace[node] = comments.carry(node, new)

  def _inside(self, node, ancestor) -> bool:
    while node is not None:
      if node is ancestor:
        return True
      node = self.parents.get(node)
    return False

  def _rename(self, node, target: str, why: str = "") -> None:
    self.replace[node] = cst.parse_expression(target)
    if target.startswith("mplso."):
      self.needs(target)
    self.edit(node, target, why)

  def _plan_target(self, node, path: str) -> None:
    target = names.TARGETS[path]
    if self.to == edits_lib.NATIVE:
      if self._plan_native(node, path, target):
        return
    self._rename(node, target)

  # compile.

  def _plan_compile(self) -> bool:
    """Plans what a `compile` that wraps by itself needs; True if one does.

    Decided per `compile` call: one given a LossScaleOptimizer the file
    builds wraps nothing; one given a plain optimizer under a mixed policy
    wraps it (TF 2.1-2.15's and today's `compile` alike).
    """
    policy, mplso_policy = False, False
    for node in self.parents:
      if not isinstance(node, cst.Call):
        continue
      func = node.func
      found = self.bindings.resolve(func)
      path = found.path if found else None
      target = names.TARGETS.get(path or "")
      if target in ("mplso.compat.set_policy", "mplso.compat.Policy"):
        policy = True
      elif path in ("mplso.compat.set_policy", "mplso.compat.Policy"):
        policy = mplso_policy = True  # An upgraded file's: it stays.
      elif isinstance(func, cst.Attribute) and func.attr.value in (
          "set_global_policy", "set_policy"):
        policy = True
    compiles = self.wrapping_compiles() if policy else []
    if not compiles:
      return False
    if self.to == edits_lib.NATIVE and not (
        self._policy_stays() or mplso_policy):
      node = compiles[0].func
      why = ("`compile` wraps the optimizer of a `mixed_float16` model in "
             "Keras's own `LossScaleOptimizer` by itself")
      if self.keras == edits_lib.KERAS_3:
        why += "; " + native_rules.KERAS_3_DIFFERENCES
      self.edits.append(edits_lib.warned(self.line(node), self.code(node),
                                         why))
      self.compile_native = True
      self.moved += [(call, True) for call in compiles]
      return True
    self.install_why.append((self.line(compiles[0]), _COMPILE_WHY))
    return True

  def sites_and_compiles(self) -> list[cst.Call]:
    """Every LossScaleOptimizer call, then every `compile` call."""
    return self._optimizer_sites() + [
        n for n in self.parents if isinstance(n, cst.Call) and
        isinstance(n.func, cst.Attribute) and n.func.attr.value == "compile"]

  def _optimizer_sites(self) -> list[cst.Call]:
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

  def wrapping_compiles(self) -> list[cst.Call]:
    """The `compile` calls that wrap their optimizer by themselves.

    Not one given an optimizer the file builds as a LossScaleOptimizer
    (directly or through what holds it), nor, where a class of the file
    overrides `compile` and builds one in it, any call of `compile`: the
    override wraps.
    """
    if self._wrapping is not None:
      return self._wrapping
    sites = self._optimizer_sites()
    explicit = set(sites)
    for site in sites:
      explicit.update(self.uses.holders(site))
    overrides = any(
        isinstance(node, cst.FunctionDef) and node.name.value == "compile"
        and any(self._inside(site, node) for site in sites)
        for node in self.parents)
    self._wrapping = []
    for node in self.parents:
      if not (isinstance(node, cst.Call) and
              isinstance(node.func, cst.Attribute) and
              node.func.attr.value == "compile") or overrides:
        continue
      positional = [a for a in node.args if a.keyword is None]
      given = next((a.value for a in node.args if a.keyword is not None and
                    a.keyword.value == "optimizer"),
                   positional[0].value if positional else None)
      if given is None or given not in explicit:
        self._wrapping.append(node)
    return self._wrapping

  # Applying it.

  def apply(self) -> cst.Module:
    """The new module; notes in `installs` whether it adds `install()`."""
    module = self.module.visit(_Swap(self.replace, self.after))
    placed = placement.insert(module, self.modules, self.install_why)
    self.edits += placed.edits
    self.installs = placed.installs
    return module.with_changes(body=placed.body)


class _Swap(cst.CSTTransformer):
  """Swaps the planned nodes; adds statements after planned lines."""

  def __init__(self, replace, after):
    super().__init__()
    self._replace, self._after = replace, after

  def on_leave(self, original_node, updated_node):
    new = self._replace.get(original_node, updated_node)
    if callable(new):
      new = new(updated_node)
    if original_node in self._after:
      extra = self._after[original_node]
      if isinstance(new, cst.RemovalSentinel) or (
          isinstance(new, cst.SimpleStatementLine) and not new.body):
        extra = list(extra)
        extra[0] = extra[0].with_changes(
            leading_lines=original_node.leading_lines)
        extra[-1] = extra[-1].with_changes(
            trailing_whitespace=original_node.trailing_whitespace)
        return cst.FlattenSentinel(extra)
      return cst.FlattenSentinel([new, *extra])
    if isinstance(new, cst.SimpleStatementLine) and not new.body:
      return cst.RemoveFromParent()
    if isinstance(new, cst.IndentedBlock) and not new.body:
      return new.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])])
    return new


def _parse(source: str):
  """The module, or None and the error for a file that does not parse."""
  if not prefilter.may_hold_legacy(source):
    # No legacy name can be spelled here: only say whether it parses.
    try:
      ast.parse(source)
    except (SyntaxError, ValueError) as e:
      return None, f"does not parse (line {getattr(e, 'lineno', '?')}): {e}"
    return None, None
  try:
    return cst.parse_module(source), None
  except cst.ParserSyntaxError as e:
    return None, (f"does not parse (line {e.raw_line}, column "
                  f"{e.raw_column}): {e.message}")


def _wrap(module: cst.Module) -> metadata.MetadataWrapper:
  """The metadata wrapper of a module just parsed, and used by nothing else.

  LibCST's wrapper copies the whole tree first, so that a node shared by two
  places gets its own metadata; a tree the parser just made shares none,
  and the copy was a tenth of a big file's time.
  """
  return metadata.MetadataWrapper(module, unsafe_skip_copy=True)


def file_facts(source: str, keras: str, path: str = "this file",
               wrapper: metadata.MetadataWrapper | None = None
               ) -> optimizer_uses.Facts:
  """What `source` shows about optimizers, for the files converted with it.

  Its classes that define `apply_gradients`, where it reads a checkpoint
  back, and its uses of loss-scale methods and attributes on expressions it
  does not trace to a LossScaleOptimizer it builds (`optimizer_uses`).
  `wrapper`: `source` already parsed and wrapped (its metadata is resolved
  once for the facts and the plan).
  """
  facts = optimizer_uses.Facts(
      overriding=optimizer_uses.overriding_classes(source, path),
      imports={path: optimizer_uses.imported_names(source)})
  if not any(word in source for word in optimizer_uses.WORDS):
    return facts
  if wrapper is None:
    try:
      wrapper = _wrap(cst.parse_module(source))
    except (cst.ParserSyntaxError, RecursionError, ValueError):
      return facts
  planner = _Planner(wrapper, edits_lib.NATIVE, keras, facts, path)
  for site in planner.sites_and_compiles():
    planner.uses.holders(site)
  facts.untraced = planner.uses.untraced()
  facts.restores = planner.uses.restores()
  return facts


def upgrade_source(source: str, to: str = edits_lib.MPLSO,
                   keras: str = edits_lib.KERAS_3,
                   facts: optimizer_uses.Facts | None = None,
                   path: str = "this file") -> edits_lib.Upgraded:
  """Returns `source` with its legacy loss-scale names rewritten.

  Args:
    source: a Python module's text.
    to: `edits.MPLSO` (mplso's names) or `edits.NATIVE` (Keras's own where
      the behaviour allows).
    keras: the Keras `tf.keras` is when the program runs (`--to native`).
    facts: `--to native`: what the files converted together show
      (`file_facts` of each, merged); by default this file's alone.
    path: the file, as the report names it.

  Returns:
    The new text and its edits; for a file that does not parse, the text
    unchanged and the error.
  """
  module, error = _parse(source)
  if module is None:
    return edits_lib.Upgraded(source, [], error=error)
  wrapper = _wrap(module)
  if to == edits_lib.NATIVE and facts is None:
    facts = file_facts(source, keras, path, wrapper)
  planner = _Planner(wrapper, to, keras, facts, path)
  planner.plan()
  new = planner.apply()
  edits = sorted(planner.edits, key=lambda e: e.line)
  return edits_lib.Upgraded(new.code, edits, installs=planner.installs)


def upgrade_sources(texts: dict[str, str], to: str = edits_lib.MPLSO,
                    keras: str = edits_lib.KERAS_3
                    ) -> dict[str, edits_lib.Upgraded]:
  """`upgrade_source` for a set of files converted together (a tree).

  An optimizer built in one file may be used in another: with `--to
  native`, what every file shows (`file_facts`) decides for each optimizer
  that leaves the code the tool follows, and a class defined in one file
  for an optimizer built in another.

  Args:
    texts: {path: source text}.
    to: as for `upgrade_source`.
    keras: as for `upgrade_source`.

  Returns:
    {path: what the upgrade did to that file}.
  """
  facts = None
  if to == edits_lib.NATIVE:
    facts = optimizer_uses.Facts()
    for path, text in texts.items():
      facts.merge(file_facts(text, keras, path))
  return {path: upgrade_source(text, to=to, keras=keras, facts=facts,
                               path=path)
          for path, text in texts.items()}
