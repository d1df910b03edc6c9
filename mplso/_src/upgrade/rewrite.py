"""Rewrites one source file's legacy loss-scale names: `upgrade_source`.

The file is parsed with LibCST, which keeps every byte it is not asked to
change. A planning pass decides every edit on the original tree (what each
name stands for comes from `bindings`); a transformer then swaps exactly the
planned nodes. The planners share two objects (`planning`): the source file
with its metadata and bindings, and the plan with its edits; `--to native`
hands each legacy reference to `native_plan.NativePlanner`. The edits, in
order of line:

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

import dataclasses

import libcst as cst
from libcst import metadata
from libcst.helpers import get_full_name_for_node

from mplso._src.upgrade import comments
from mplso._src.upgrade import cst_metadata
from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import names
from mplso._src.upgrade import native_plan
from mplso._src.upgrade import optimizer_uses
from mplso._src.upgrade import parsed as parsed_lib
from mplso._src.upgrade import placement
from mplso._src.upgrade import planning
from mplso._src.upgrade import policies
from mplso._src.upgrade import reach
from mplso._src.upgrade import sparse
from mplso._src.upgrade import stars

_COMPILE_WHY = (
    "`compile` here wraps the optimizer of a model built under a mixed "
    "policy by itself. The program ran with mplso's LossScaleOptimizer there "
    "under `python -m mplso.compat`; plain TF 2.21 would wrap it in Keras's "
    "own class instead, and no name in the file says which class to use. "
    "`mplso.compat.install()` keeps compile's wrapper mplso's")
# The same for a policy set in a file without a `compile` (`policies`).
_ELSEWHERE_WHY = (
    "the policy here reaches each `compile` run once it is set, and this "
    "file has none: one in another file, or in code the tool does not see (a "
    "library), wraps the optimizer of a model built under it by itself. The "
    "program ran with mplso's LossScaleOptimizer there under `python -m "
    "mplso.compat`; plain TF 2.21 would wrap it in Keras's own class instead")


def _is_import(node) -> bool:
  """Whether `node` is an `import` or a `from ... import`."""
  return isinstance(node, (cst.Import, cst.ImportFrom))


class _Planner:
  """Decides every edit of one module; `apply()` returns the new module.

  It reads the file from a `planning.SourceFile` and writes its decisions
  into a `planning.Plan`; with `--to native`, a `native_plan.NativePlanner`
  on the same two decides each reference to a legacy name.
  """

  def __init__(self, wrapper: metadata.MetadataWrapper, to: str, keras: str,
               facts: optimizer_uses.Facts | None = None,
               path: str = "this file"):
    self.to, self.keras = to, keras
    self.source = planning.SourceFile(wrapper, keras, facts, path)
    self.planned = planning.Plan()
    self.native = (native_plan.NativePlanner(self.source, self.planned, keras)
                   if to == edits_lib.NATIVE else None)
    self._rebound: set[metadata.BaseAssignment] = set()
    # Imports of a namespace TF 2.21 lacks, kept for a use left as written.
    self._kept_namespaces: list[tuple[cst.CSTNode, str, object]] = []

  @property
  def edits(self) -> list[edits_lib.Edit]:
    """The plan's edits."""
    return self.planned.edits

  @property
  def installs(self) -> bool:
    """Whether `apply()` inserted `mplso.compat.install()`."""
    return self.planned.installs

  # The plan.

  def plan(self) -> None:
    """Plans every edit of the file, in `planned`."""
    source, plan = self.source, self.planned
    imports = [n for n in source.parents if _is_import(n)]
    self._mark_rebinding(imports)
    for statement in imports:
      self._plan_import(statement)
    for node in source.contexts:
      if isinstance(node, (cst.Name, cst.Attribute)):
        self._plan_reference(node)
    relies_on_compile = self._plan_compile()
    if self.native is not None and (self.native.went_native or
                                    relies_on_compile):
      self.native.plan_methods()
    if not plan.install_why:
      for kept in self._kept_namespaces:
        self._warn_kept_namespace(*kept)
    plan.edits += reach.warnings(source.bindings, plan.edits)
    self._note_scaling_elsewhere()

  def _note_scaling_elsewhere(self) -> None:
    """Notes each TF 2.4 loss-scaling call on an optimizer from elsewhere.

    The file needs that optimizer to be one that has the method.
    """
    source, plan = self.source, self.planned
    # What this file wraps itself; a model's `.optimizer` counts only where
    # the file's own `compile` wraps it (under a mixed policy).
    traced = set()
    compile_native = self.native is not None and self.native.compile_native
    for site in source.optimizer_sites() + (
        source.wrapping_compiles() if plan.install_why or compile_native
        else []):
      traced.update(source.uses.holders(site))
    # Under Keras 3, a class check this file widened to Keras's class lets
    # Keras 3's own class reach these calls, which it does not have: one a
    # `compile` wraps in, in a file not converted with this one. (Files
    # joined to it by imports in this run keep such optimizers on mplso.)
    widened = (self.native.widened if self.native is not None and
               self.keras == edits_lib.KERAS_3 and not source.uses.joined()
               else [])
    for call in source.uses.untraced_scaling(traced):
      what = ("tf_keras's own class or mplso's" if self.keras ==
              edits_lib.TF_KERAS else "mplso's")
      why = (f"TF 2.4-2.15's `{call.func.attr.value}` on an optimizer "
             f"built elsewhere: it works when that optimizer is {what} "
             "LossScaleOptimizer (the upgrade gives every legacy one "
             "mplso's name" + (", and keeps on mplso each one of the files "
                               "converted together that may reach here" if
                               self.to == edits_lib.NATIVE else "") +
             "); Keras 3's own class has `scale_loss` and unscales in "
             "`apply_gradients` instead")
      if widened:
        plan.edits.append(edits_lib.warned(
            source.line(call), source.code(call.func),
            f"{why}. The class check at line {widened[0]} now names Keras's "
            "class, so Keras 3's own one passes it too: an optimizer a "
            "`compile` wraps in a file converted on its own reaches this "
            "call and fails. Convert the files that build the optimizer "
            "together with this one (one `--intree` run keeps it on mplso), "
            "or look at the check"))
        continue
      plan.edits.append(edits_lib.kept(source.line(call),
                                       source.code(call.func), why))

  def _mark_rebinding(self, imports) -> None:
    """Notes the bindings that will name mplso's objects themselves.

    An import of a spelling (or of `tf.contrib.mixed_precision`) becomes an
    import of mplso's, and an assignment of one gets mplso's as its value:
    the names bound so are right as they stand.
    """
    bindings = self.source.bindings
    rebinding = set(names.TARGETS) | set(names.SERVED_WHOLE)
    for statement in imports:
      for binding in bindings.made_by(statement):
        if bindings.bound_path(binding) in rebinding:
          self._rebound.add(binding)
    for target, path in bindings.aliases.items():
      binding = bindings.binding(target)
      if path in rebinding and binding is not None:
        self._rebound.add(binding)
        assign = self.source.parents[self.source.parents[target]]
        if self.native is not None and isinstance(assign.value, cst.Name):
          # `Wrapper = LossScaleOptimizer`, imported: mplso's class too.
          self.native.plan_exported(target, binding, path)

  def _plan_star_import(self, statement: cst.ImportFrom) -> None:
    """Plans `from X import *` of a legacy namespace (`stars`)."""
    source, plan = self.source, self.planned
    found = stars.plan(reach.star_namespace(statement),
                       get_full_name_for_node(statement.module),
                       source.bindings.unbound(),
                       reach.star_namespaces(source.bindings))
    if found is None:
      return
    plan.after.setdefault(source.statement_of(statement), []).extend(
        cst.parse_statement(line + "\n") for line in found.imports)
    if not found.keep:
      plan.replace[statement] = cst.RemoveFromParent()
    plan.edits.append(edits_lib.changed(
        source.line(statement), source.code(statement),
        found.new(source.code(statement)), found.why))
    plan.edits += [edits_lib.warned(source.line(n), n.value,
                                    found.unknown_why)
                   for n in found.unknown]

  def _plan_import(self, statement) -> None:
    """Rewrites or drops the aliases of one import statement."""
    source, plan = self.source, self.planned
    if isinstance(statement, cst.ImportFrom) and statement.relative:
      return
    if isinstance(statement, cst.ImportFrom) and isinstance(
        statement.names, cst.ImportStar):
      self._plan_star_import(statement)
      return
    by_local = {a.name: a for a in source.bindings.made_by(statement)}
    kept, added, changed, unused = [], [], False, False
    removed_why = ""
    for alias in statement.names:
      local = alias.evaluated_alias or alias.evaluated_name
      name = alias.evaluated_name
      if isinstance(statement, cst.ImportFrom):
        name = f"{get_full_name_for_node(statement.module)}.{name}"
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
        if self.native is not None and local in by_local:
          self.native.plan_exported(
              alias.asname.name if alias.asname else alias.name,
              by_local[local], path)
        continue
      binding = by_local.get(local.split(".")[0])
      if ((names.absent_today(path) or path in names.PRIVATE_MODULES) and
          not (names.absent_today(path) and self._probe(statement, path))):
        if binding is not None and self._all_rewritten(binding):
          unused = not source.bindings.references(binding)
          removed_why = (
              "the namespace exists only under `mplso.compat.install()`"
              if names.made_by_install(path) else
              f"`{name}` is an attribute of `tf`, not a module TF 2.21 can "
              "import under Keras 3" if path in names.ATTRIBUTES_ONLY else
              f"`{name}` held legacy loss-scale names" +
              (" (TF 2.21 lacks it)" if names.absent_today(path) else ""))
          changed = True
          continue
        if binding is not None and names.absent_today(path):
          self._kept_namespaces.append((statement, name, binding))
      if binding is not None and not source.bindings.references(binding):
        why = reach.unserved_why(path)
        if why:
          plan.warn(source, statement, why)
      kept.append(alias)
    if not changed:
      return
    old = source.code(statement)
    line = source.statement_of(statement)
    new_statements = []
    if kept:
      kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
      replacement = statement.with_changes(names=kept)
      if isinstance(statement, cst.ImportFrom) and statement.lpar:
        replacement = replacement.with_changes(
            lpar=statement.lpar, rpar=statement.rpar)
      plan.replace[statement] = replacement
      new_statements.append(source.code(replacement))
    else:
      plan.replace[statement] = cst.RemoveFromParent()
    extra = []
    for text, alias in added:
      extra.append(cst.parse_statement(text + "\n"))
      if isinstance(statement, cst.ImportFrom) and statement.lpar:
        extra[-1] = comments.with_comments(
            extra[-1], *comments.own_comments(statement, alias))
    if extra and not kept and len(line.body) == 1:
      # The new lines stand where the statement stood, with its comments.
      extra = comments.in_place_of(line, extra)
      plan.replace[line] = extra.pop(0)
    if extra:
      plan.after.setdefault(line, []).extend(extra)
      for text, _ in added:
        plan.modules.discard(text.split()[1])
    new_statements += [text for text, _ in added]
    removed = removed_why + (", and nothing in the file uses it" if unused
                             else ", and every use of it is rewritten")
    plan.edits.append(edits_lib.changed(
        source.line(statement), old, "; ".join(new_statements) or "(removed)",
        "" if kept or added else removed))

  def _warn_kept_namespace(self, statement, name: str, binding) -> None:
    """Warns that an import of a namespace TF 2.21 lacks stays, and fails.

    It stays because a use of it is left as written (`_first_kept_use`),
    which has its own line; without `mplso.compat.install()` in the file,
    the import itself stops the program first.
    """
    use = self._first_kept_use(binding)
    if use is None:
      return
    above = self.source.bindings.above(use)
    self.planned.warn(self.source, statement, (
        f"kept: TF 2.21 lacks `{name}`, so this import stops the program "
        "(ModuleNotFoundError) unless `mplso.compat.install()` runs before "
        f"it; the file still reads it as written (`{self.source.code(above or use)}`, "
        f"line {self.source.line(use)})"))

  def _probe(self, statement, path: str) -> bool:
    """Whether `statement` tries a namespace TF 2.21 lacks, in a `try`.

    Such an import is a program's test for an old TensorFlow: it stays, so
    that its `except` branch runs on TF 2.21, with a report line.
    """
    node = statement
    while node is not None and not isinstance(node, (cst.FunctionDef,
                                                     cst.Module)):
      parent = self.source.parents.get(node)
      if isinstance(parent, cst.Try) and node is parent.body:
        self.planned.warn(
            self.source, statement,
            f"kept: inside a `try`, it tests for `{path}`, which TF 2.21 "
            "lacks, so the program takes its `except` branch here (under "
            "`python -m mplso.compat` the import succeeded)")
        return True
      node = parent
    return False

  def _all_rewritten(self, binding) -> bool:
    """Whether every use of `binding` reaches a name the upgrade rewrites."""
    return self._first_kept_use(binding) is None

  def _first_kept_use(self, binding) -> cst.CSTNode | None:
    """The first use of `binding` that reaches no name the upgrade rewrites."""
    bindings = self.source.bindings
    for name in sorted(bindings.references(binding), key=bindings.line):
      top = name
      while True:
        found = bindings.resolve(top)
        if found is not None and (found.path in names.TARGETS or
                                  found.path in names.SERVED_WHOLE):
          break
        if bindings.above(top) is None:
          return name
        top = bindings.above(top)
    return None

  def _plan_reference(self, node) -> None:
    """Plans one name or attribute chain the file reads."""
    source, plan = self.source, self.planned
    bindings = source.bindings
    parent = source.parents.get(node)
    if isinstance(parent, cst.Attribute) and parent.attr is node:
      return
    if source.contexts.get(node) not in (None,
                                         metadata.ExpressionContext.LOAD):
      return
    statement = source.statement_of(node)
    if isinstance(statement, cst.SimpleStatementLine) and any(
        _is_import(s) for s in statement.body if source.inside(node, s)):
      return
    while isinstance(bindings.above(node), cst.Call):
      node = bindings.above(node)  # `getattr(x, "y")` reads `x.y`.
    maximal = bindings.above(node) is None
    found = bindings.resolve(node) or reach.agreed(
        bindings, node, self._rebound)
    if found is None:
      why = maximal and reach.two_ways_why(bindings, node, self._rebound)
      if why:
        plan.warn(source, node, why)
      elif self.native is not None:
        self._plan_rebound_check(node)
      return
    if found.binding in self._rebound:
      if self.native is not None:
        # mplso's class now; a class check of it must match Keras's too.
        self.native.plan_kinds_check(node, found.path)
        self._carry_comments(node)
      return
    if self.native is not None and self.native.consumes(node):
      return
    path = found.path
    if path in names.TARGETS:
      self._plan_target(node, path)
    elif path in names.SERVED_WHOLE and maximal:
      plan.rename(source, node, names.SERVED_WHOLE[path])
    elif maximal and names.made_by_install(path):
      plan.install_why.append((source.line(node), (
          f"`{source.code(node)}` uses the namespace `{path}` itself, "
          "which only `mplso.compat.install()` provides")))
    elif maximal and names.unserved_member(path):
      plan.warn(source, node,
                f"kept: `{path}` is not one of the names mplso serves; TF "
                "2.21 lacks it (so does `python -m mplso.compat`)")
    elif maximal and reach.unserved_why(path):
      plan.warn(source, node, reach.unserved_why(path))
    self._carry_comments(node)

  def _plan_rebound_check(self, node) -> None:
    """A class check through a name bound twice, each time to mplso's class.

    `try: from A import LossScaleOptimizer` / `except ImportError: from B
    import ...`: both imports become mplso's, and a class check of the name
    gets Keras's class as with one import (`plan_kinds_check`).
    """
    found = self.source.bindings.resolutions(node)
    meanings = {names.TARGETS.get(path) for _, path in found}
    if found and len(meanings) == 1 and None not in meanings and all(
        binding in self._rebound for binding, _ in found):
      self.native.plan_kinds_check(node, found[0][1])
      self._carry_comments(node)

  def _carry_comments(self, node) -> None:
    """Keeps the comments within `node` on the name planned for it."""
    new = self.planned.replace.get(node)
    if isinstance(new, (cst.Name, cst.Attribute)):
      self.planned.replace[node] = comments.carry(node, new)

  def _plan_target(self, node, path: str) -> None:
    """Plans mplso's name (or, `--to native`, Keras's) for a legacy name."""
    target = names.TARGETS[path]
    if self.native is not None:
      self.native.plan_reference(node, path, target)
      return
    self.planned.rename(self.source, node, target)

  # compile.

  def _plan_compile(self) -> bool:
    """Plans what a `compile` that wraps by itself needs; True if one does.

    Decided per `compile` call: one given a LossScaleOptimizer the file
    builds wraps nothing; one given a plain optimizer under a mixed policy
    wraps it (TF 2.1-2.15's and today's `compile` alike).
    """
    source = self.source
    policy, mplso_policy = False, False
    kinds = policies.Kinds(source)
    for node in source.parents:
      if not isinstance(node, cst.Call):
        continue
      func = node.func
      found = source.bindings.resolve(func)
      path = found.path if found else None
      target = names.TARGETS.get(path or "")
      if target in ("mplso.compat.set_policy", "mplso.compat.Policy"):
        policy = True
        # A name an import binds: the import becomes mplso's (`from
        # mplso.compat import set_policy`) in both modes, so the policy
        # stays mplso's, as in an upgraded file.
        mplso_policy |= isinstance(func, cst.Name) and isinstance(
            found.binding, metadata.ImportAssignment)
      elif path in ("mplso.compat.set_policy", "mplso.compat.Policy"):
        policy = mplso_policy = True  # An upgraded file's: it stays.
      elif isinstance(func, cst.Attribute) and func.attr.value in (
          "set_global_policy", "set_policy"):
        policy = True
      elif kinds.of(node, found) in (policies.SETTER,
                                     policies.LEGACY_POLICY):
        policy = True  # Keras's imported by name; one a star import gives.
    compiles = source.wrapping_compiles() if policy else []
    if not compiles:
      return policy and self._plan_compile_elsewhere(mplso_policy)
    if self.native is not None and not (
        self.native.policy_stays() or mplso_policy):
      self.native.plan_compile(compiles)
      return True
    self.planned.install_why.append((source.line(compiles[0]), _COMPILE_WHY))
    return True

  def _plan_compile_elsewhere(self, mplso_policy: bool) -> bool:
    """Plans for a policy set here that a `compile` elsewhere may wrap under.

    A file without a `compile` of its own cannot show whether the policy it
    sets reaches one (in another file, or a library): one that may make
    `compile` wrap (`policies`) gets what a `compile` here would, and the
    report says so. True if it did.
    """
    source = self.source
    if any(planning.is_compile(node) for node in source.parents):
      return False
    found = policies.wrapping_policy(source)
    if found is None:
      return False
    if self.native is not None and not (
        self.native.policy_stays() or mplso_policy):
      self.native.plan_compile_elsewhere(found.policy)
      return True
    self.planned.install_why.append((source.line(found.call), (
        _ELSEWHERE_WHY + (
            f"; the policy's loss scale, `{found.scale}`, would be lost too: "
            "Keras's `compile` wraps only a `mixed_float16` model's "
            "optimizer, with its own dynamic scale (2**15)"
            if found.scale else "") + ". `mplso.compat.install()` keeps "
        "compile's wrapper mplso's, as the runner did")))
    return True

  # Applying it.

  def apply(self) -> cst.Module:
    """The new module; notes in `installs` whether it adds `install()`."""
    plan = self.planned
    swap = _Swap(plan.replace, plan.after, {node for _, node in plan.quoted})
    module = self.source.module.visit(swap)
    for index, node in plan.quoted:
      # A line kept as it is quotes what the output holds.
      if node in swap.left:
        text = module.code_for_node(swap.left[node])
        plan.edits[index] = dataclasses.replace(plan.edits[index], old=text,
                                                new=text)
    placed = placement.insert(module, plan.modules, plan.install_why)
    plan.edits += placed.edits
    plan.installs = placed.installs
    return module.with_changes(body=placed.body)


class _Swap(cst.CSTTransformer):
  """Swaps the planned nodes; adds statements after planned lines."""

  def __init__(self, replace, after, quoted=frozenset()):
    super().__init__()
    self._replace, self._after = replace, after
    self._gone = []  # The statements removed, until their block closes up.
    self._quoted = quoted
    self.left = {}  # {node of `quoted` another edit changed: its new node}

  def on_leave(self, original_node, updated_node):
    """The planned node for `original_node`, with what goes after it."""
    new = self._replace.get(original_node, updated_node)
    if callable(new):
      new = new(updated_node)
    if original_node in self._quoted and isinstance(new, cst.CSTNode) and (
        not new.deep_equals(original_node)):
      self.left[original_node] = new
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
    if (isinstance(new, cst.RemovalSentinel) and isinstance(
        original_node, cst.BaseStatement)) or (
            isinstance(new, cst.SimpleStatementLine) and not new.body):
      # Its block removes it; the lines above it stay (`_closed_up`). An
      # empty line of statements would be removed by LibCST at once.
      gone = cst.SimpleStatementLine(
          body=[cst.Pass()], leading_lines=original_node.leading_lines)
      self._gone.append(gone)
      return gone
    if isinstance(new, (cst.Module, cst.IndentedBlock)):
      new = _closed_up(new, self._gone)
    if isinstance(new, cst.IndentedBlock) and not new.body:
      return new.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])])
    return new


def _closed_up(block, gone):
  """`block` without the statements in `gone`, the lines above them kept.

  A statement's blank and comment lines above it are its own in LibCST, so
  removing an import would take them too: they go to the next statement
  instead (or to the block's footer after the last), and every line the
  tool does not edit stays.
  """
  body, above = [], []
  for statement in block.body:
    if any(statement is g for g in gone):
      above += statement.leading_lines
      continue
    if above:
      statement = statement.with_changes(
          leading_lines=[*above, *statement.leading_lines])
      above = []
    body.append(statement)
  return block.with_changes(body=body, footer=[*above, *block.footer])


def _parse(source: str):
  """The LibCST module, or None and the error for a file that does not
  parse."""
  try:
    return cst.parse_module(source), None
  except cst.ParserSyntaxError as e:
    # Python's words where Python does not parse it either.
    return None, parsed_lib.syntax_error(source) or (
        f"does not parse (line {e.raw_line}, column {e.raw_column}): "
        f"{e.message}")


def _wrap(module: cst.Module) -> metadata.MetadataWrapper:
  """The metadata wrapper of a module just parsed (`cst_metadata.wrap`)."""
  return cst_metadata.wrap(module)


def file_facts(source: str, keras: str, path: str = "this file",
               wrapper: metadata.MetadataWrapper | None = None,
               parsed: parsed_lib.Parsed | None = None
               ) -> optimizer_uses.Facts:
  """What `source` shows about optimizers, for the files converted with it.

  Its classes that define `apply_gradients`, where it reads a checkpoint
  back, and its uses of loss-scale methods and attributes on expressions it
  does not trace to a LossScaleOptimizer it builds (`optimizer_uses`).
  `wrapper`: `source` already parsed and wrapped (its metadata is resolved
  once for the facts and the plan). `parsed`: `source` read with
  `parsed.parse(..., facts=True)` already.
  """
  if parsed is None or not parsed.facts:
    parsed = parsed_lib.parse(source, path, facts=True)
  facts = optimizer_uses.Facts(overriding=dict(parsed.overriding),
                               imports={path: parsed.imports})
  if not any(word in source for word in optimizer_uses.WORDS):
    return facts
  if wrapper is None:
    if parsed.error:
      return facts
    try:
      wrapper = _wrap(cst.parse_module(
          parsed.for_libcst if parsed.legacy else
          sparse.reduced_text(parsed.text)))
    except (cst.ParserSyntaxError, RecursionError, ValueError):
      return facts
  source = planning.SourceFile(wrapper, keras, facts, path)
  for site in source.sites_and_compiles():
    source.uses.holders(site)
  facts.untraced = source.uses.untraced()
  facts.restores = source.uses.restores()
  return facts


def facts_now(parsed: parsed_lib.Parsed, path: str) -> optimizer_uses.Facts:
  """What a file read with `parsed.parse(..., facts=True)` shows at once.

  Its imports and the classes that define `apply_gradients`; its uses and
  checkpoint reads, which need LibCST, are noted to be read when a decision
  asks for them (`Facts.later`, `read_later`).
  """
  facts = optimizer_uses.Facts(overriding=dict(parsed.overriding),
                               imports={path: parsed.imports})
  if not parsed.error and any(
      word in parsed.text for word in optimizer_uses.WORDS):
    facts.later[path] = None  # `optimizer_uses.may_show` when asked.
  return facts


def read_later(source: str, keras: str, path: str,
               parsed: parsed_lib.Parsed | None = None
               ) -> optimizer_uses.Facts:
  """`file_facts` of a file a decision asks about (`Facts.later`).

  A file the tool cannot read so counts as using a loss-scale attribute on
  an optimizer it cannot trace, and as reading a checkpoint back: the
  optimizer asked about stays on mplso.
  """
  try:
    return file_facts(source, keras, path, parsed=parsed)
  except Exception as e:  # pylint: disable=broad-except
    why = f"the tool could not read it: {type(e).__name__}: {e}"
    return optimizer_uses.Facts(
        untraced=[(f"{path}:1", f"may use one ({why})")],
        restores=[f"{path}:1, which may ({why})"])


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
  parsed = parsed_lib.parse(
      source, path, facts=to == edits_lib.NATIVE and facts is None,
      imports=False)
  return _upgrade_parsed(parsed, to, keras, facts, path)


def _upgrade_parsed(parsed: parsed_lib.Parsed, to: str, keras: str,
                    facts: optimizer_uses.Facts | None,
                    path: str) -> edits_lib.Upgraded:
  """`upgrade_source` of a file read already: LibCST sees what it needs."""
  result = _upgrade_read(parsed, to, keras, facts, path)
  return dataclasses.replace(
      result, edits=edits_lib.acknowledge(result.edits, parsed.text))


def _upgrade_read(parsed: parsed_lib.Parsed, to: str, keras: str,
                  facts: optimizer_uses.Facts | None,
                  path: str) -> edits_lib.Upgraded:
  """`_upgrade_parsed` before the acknowledged lines are taken as kept."""
  if not parsed.legacy:
    # No legacy name can be spelled here: only say whether it parses.
    return edits_lib.Upgraded(parsed.text, [], error=parsed.error)
  if parsed.reduced is not None:
    result = _upgrade_whole(parsed.reduced.text, to, keras, facts, path,
                            parsed)
    code = (sparse.splice(parsed.text, parsed.reduced, result.code)
            if result.error is None else None)
    if code is not None:
      return dataclasses.replace(result, code=code)
  return _upgrade_whole(parsed.text, to, keras, facts, path, parsed)


def _upgrade_whole(source: str, to: str, keras: str,
                   facts: optimizer_uses.Facts | None, path: str,
                   parsed: parsed_lib.Parsed | None = None
                   ) -> edits_lib.Upgraded:
  """`upgrade_source` with LibCST on every statement of `source`.

  `parsed`: the file `source` is (or is reduced from), read already.
  """
  module, error = _parse(source)
  if module is None:
    return edits_lib.Upgraded(parsed.text if parsed else source, [],
                              error=error)
  wrapper = _wrap(module)
  if to == edits_lib.NATIVE and facts is None:
    facts = file_facts(parsed.text if parsed else source, keras, path,
                       wrapper, parsed)
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
  native = to == edits_lib.NATIVE
  parsed = {path: parsed_lib.parse(text, path, facts=native,
                                   imports=len(texts) > 1)
            for path, text in texts.items()}
  facts = None
  if native:
    facts = optimizer_uses.Facts(
        reader=lambda path: read_later(texts[path], keras, path,
                                       parsed[path]),
        shows=lambda path: optimizer_uses.may_show(texts[path]))
    for path in texts:
      facts.merge(facts_now(parsed[path], path))
  return {path: _upgrade_parsed(parsed[path], to, keras, facts, path)
          for path in texts}
