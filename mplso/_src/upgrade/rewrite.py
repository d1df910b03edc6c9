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
from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import names
from mplso._src.upgrade import native_rules

_COMPILE_WHY = (
    "`compile` here wraps the optimizer of a model built under a mixed "
    "policy by itself. The program ran with mplso's LossScaleOptimizer there "
    "under `python -m mplso.compat`; plain TF 2.21 would wrap it in Keras's "
    "own class instead, and no name in the file says which class to use. "
    "`mplso.compat.install()` keeps compile's wrapper mplso's")


def _in_install_only(path: str) -> bool:
  """Whether `path` lies in (or is) a namespace only install() provides."""
  parts = path.split(".")
  return any(".".join(parts[:i]) in names.INSTALL_ONLY
             for i in range(1, len(parts) + 1))


def _is_import(node) -> bool:
  return isinstance(node, (cst.Import, cst.ImportFrom))


class _Planner:
  """Decides every edit of one module; `apply()` returns the new module."""

  def __init__(self, wrapper: metadata.MetadataWrapper, to: str, keras: str):
    self.module = wrapper.module
    self.to, self.keras = to, keras
    self.bindings = bindings_lib.Bindings(wrapper)
    self.parents = wrapper.resolve(metadata.ParentNodeProvider)
    self.positions = wrapper.resolve(metadata.PositionProvider)
    self.contexts = wrapper.resolve(metadata.ExpressionContextProvider)
    self.replace: dict[cst.CSTNode, object] = {}
    self.after: dict[cst.CSTNode, list[cst.BaseStatement]] = {}
    self.edits: list[edits_lib.Edit] = []
    self.modules: set[str] = set()
    self.install_why: list[tuple[int, str]] = []
    self._rebound: set[metadata.BaseAssignment] = set()
    # --to native: what keeps every Keras optimizer of the file on mplso,
    # the loss-scale arguments a native call takes in, whether any name
    # went native, and Keras's namespace as this file can name it.
    self.file_stays: list[str] = []
    self.consumed: list[cst.CSTNode] = []
    self.went_native = False
    self.compile_native = False
    self.native_receivers: set[str] = set()
    self._root: str | None = None

  # Helpers.

  def code(self, node: cst.CSTNode) -> str:
    return self.module.code_for_node(node)

  def line(self, node: cst.CSTNode) -> int:
    return self.positions[node].start.line

  def edit(self, node, new_code: str, why: str = "") -> None:
    self.edits.append(edits_lib.Edit(self.line(node), self.code(node),
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

  def top_of_chain(self, node):
    while not self.maximal(node):
      node = self.parents[node]
    return node

  # The plan.

  def plan(self) -> None:
    nodes = list(self.contexts) + [n for n in self.parents if _is_import(n)]
    imports = [n for n in self.parents if _is_import(n)]
    for statement in imports:
      self._mark_rebinding(statement)
    for statement in imports:
      self._plan_import(statement)
    if self.to == edits_lib.NATIVE:
      self.file_stays = self._file_stays()
    for node in nodes:
      if isinstance(node, (cst.Name, cst.Attribute)):
        self._plan_reference(node)
    relies_on_compile = self._plan_compile()
    if self.to == edits_lib.NATIVE and (self.went_native or
                                        relies_on_compile):
      self._plan_methods()

  def _mark_rebinding(self, statement) -> None:
    """Notes the bindings whose import becomes an import of mplso."""
    for binding in self._bindings_of(statement):
      path = self.bindings.bound_path(binding)
      if path in names.TARGETS or path in names.SERVED_WHOLE:
        self._rebound.add(binding)
    for target, path in self.bindings.aliases.items():
      if path in names.TARGETS or path in names.SERVED_WHOLE:
        scope_bindings = self._assignment_bindings(target)
        self._rebound.update(scope_bindings)

  def _assignment_bindings(self, target: cst.Name):
    found = self.bindings.binding(target)
    return [found] if found is not None else []

  def _bindings_of(self, statement):
    """The ImportAssignments `statement` makes."""
    found = []
    scope_map = self.bindings._scopes  # pylint: disable=protected-access
    scope = scope_map.get(statement)
    if scope is None:
      return found
    for assignment in scope.assignments:
      if (isinstance(assignment, metadata.ImportAssignment) and
          assignment.node is statement):
        found.append(assignment)
    return found

  def _plan_import(self, statement) -> None:
    """Rewrites or drops the aliases of one import statement."""
    if isinstance(statement, cst.ImportFrom) and (
        statement.relative or isinstance(statement.names, cst.ImportStar)):
      return
    by_local = {a.name: a for a in self._bindings_of(statement)}
    kept, added, changed = [], [], False
    for alias in statement.names:
      local = bindings_lib.dotted(
          alias.asname.name if alias.asname else alias.name)
      if isinstance(statement, cst.ImportFrom):
        path = names.canonical(
            f"{bindings_lib.dotted(statement.module)}.{local and bindings_lib.dotted(alias.name)}")
      elif alias.asname is not None:
        path = names.canonical(bindings_lib.dotted(alias.name))
      else:
        path = names.canonical(bindings_lib.dotted(alias.name))
        if path is not None and _in_install_only(path):
          # `import tensorflow.contrib.mixed_precision` binds `tensorflow`;
          # its uses are rewritten one by one, the binding stays.
          kept.append(alias.with_changes(name=cst.Name("tensorflow")))
          changed = True
          continue
        kept.append(alias)
        continue
      if path in names.TARGETS or path in names.SERVED_WHOLE:
        target = names.TARGETS.get(path) or names.SERVED_WHOLE[path]
        module, _, member = target.rpartition(".")
        asname = "" if member == local else f" as {local}"
        added.append(f"from {module} import {member}{asname}")
        changed = True
        continue
      if path is not None and _in_install_only(path):
        binding = by_local.get(local.split(".")[0])
        if binding is not None and self._all_rewritten(binding):
          changed = True
          continue
        self.install_why.append((self.line(statement), (
            f"`{local}` is bound to `{path}`, a namespace only "
            "`mplso.compat.install()` provides, and is used for more than "
            "the names it rewrites")))
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
    extra = [cst.parse_statement(text + "\n") for text in added]
    if extra:
      self.after.setdefault(line, []).extend(extra)
      for text in added:
        self.modules.discard(text.split()[1])
    new_statements += added
    self.edits.append(edits_lib.Edit(
        self.line(statement), old, "; ".join(new_statements) or "(removed)",
        "" if kept or added else (
            "the namespace exists only under `mplso.compat.install()`, and "
            "every use of it now names mplso")))

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
        if self.maximal(top):
          break
        top = self.parents[top]
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
    found = self.bindings.resolve(node)
    if found is None or found.binding in self._rebound:
      return
    if any(self._inside(node, arg) for arg in self.consumed):
      return
    path = found.path
    if path in names.TARGETS:
      self._plan_target(node, path)
    elif path in names.SERVED_WHOLE and self.maximal(node):
      self._rename(node, names.SERVED_WHOLE[path])
    elif self.maximal(node) and _in_install_only(path):
      self.install_why.append((self.line(node), (
          f"`{self.code(node)}` uses `{path}`, which only "
          "`mplso.compat.install()` provides (not one of the names it "
          "rewrites)")))

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

  # --to native.

  def _plan_native(self, node, path, target) -> bool:
    """Plans Keras's own name for `node`, or mplso's with the reason."""
    call = self.parents.get(node)
    call = call if isinstance(call, cst.Call) and call.func is node else None
    if names.is_keras_optimizer(path):
      if call is None:
        if names.canonical_native(path):
          return True  # TF 2.4-2.15's name is Keras's own class today.
        self._rename(node, self.native(names.NATIVE_OPTIMIZER), (
            "Keras's own class; mplso's classes subclass it, so the name "
            "still matches both"))
        return True
      if self.file_stays:
        self._stay(node, target, "; ".join(self.file_stays))
        return True
      decision = native_rules.optimizer_call(
          call, names.is_tf23_dialect(path), self.keras, self.code,
          self._is_dynamic_loss_scale)
      if decision.stays:
        self._stay(node, target, decision.stays)
        return True
      self._native_call(call, names.NATIVE_OPTIMIZER, decision, (
          native_rules.KERAS_3_DIFFERENCES if self.keras == edits_lib.KERAS_3
          else ""))
      return True
    if target in names.NATIVE_POLICY:
      if self.file_stays or self._policy_stays():
        reason = "; ".join(self.file_stays) or self._policy_stays()
        self._stay(node, target, reason)
        return True
      if target == "mplso.compat.Policy" and call is not None:
        self._native_call(call, names.NATIVE_POLICY[target],
                          native_rules.policy_call(call), "")
      else:
        self._rename(node, self.native(names.NATIVE_POLICY[target]),
                     "Keras's own policy functions")
        self.went_native = True
      return True
    self._stay(node, target, native_rules.stays_why(target))
    return True

  def _stay(self, node, target: str, reason: str) -> None:
    self._rename(node, target, f"stays on mplso: {reason}")

  def native(self, name: str) -> str:
    """`keras.x.Y` as this file can name it: `tf.keras.x.Y`."""
    if self._root is None:
      self._root = self._tensorflow_name()
    return f"{self._root}.{name}"

  def _tensorflow_name(self) -> str:
    """The module-level name of `tensorflow`, imported if there is none."""
    scope = self.bindings._scopes.get(self.module)  # pylint: disable=protected-access
    for assignment in scope.assignments:
      if (isinstance(assignment, metadata.ImportAssignment) and
          self.bindings.bound_path(assignment) == "tf" and
          self.bindings.binding_is_unique(scope, assignment.name)):
        return assignment.name
    name = "tf" if "tf" not in scope else "tensorflow"
    self.modules.add("tensorflow as tf" if name == "tf" else "tensorflow")
    return name

  def _is_dynamic_loss_scale(self, node) -> bool:
    if not isinstance(node, cst.Call):
      return False
    found = self.bindings.resolve(node.func)
    return found is not None and (
        names.TARGETS.get(found.path) == "mplso.DynamicLossScale")

  def _native_call(self, call: cst.Call, name: str, decision, why: str):
    """Plans `call` as a call of Keras's `name` with the decided arguments."""
    func = cst.parse_expression(self.native(name))
    inner = next(i for i, arg in enumerate(call.args)
                 if arg.keyword is None or arg.keyword.value in (
                     "optimizer", "inner_optimizer", "name"))
    for arg in call.args:
      if arg is not call.args[inner]:
        self.consumed.append(arg)
    extra = [cst.Arg(
        keyword=cst.Name(keyword), value=cst.parse_expression(code),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                              whitespace_after=cst.SimpleWhitespace("")))
             for keyword, code in decision.arguments[1:]]

    def rebuild(updated: cst.Call) -> cst.Call:
      first = updated.args[inner].with_changes(
          keyword=None, equal=cst.MaybeSentinel.DEFAULT)
      args = [first, *extra]
      args = [a.with_changes(comma=cst.Comma(
          whitespace_after=cst.SimpleWhitespace(" ")))
              for a in args[:-1]] + [args[-1].with_changes(
                  comma=cst.MaybeSentinel.DEFAULT)]
      return updated.with_changes(func=func, args=args)

    self.replace[call] = rebuild
    self.went_native = True
    parent = self.parents.get(call)
    if (name == names.NATIVE_OPTIMIZER and isinstance(parent, cst.Assign) and
        len(parent.targets) == 1):
      self.native_receivers.add(self.code(parent.targets[0].target))
    new = self.code(rebuild(call))
    reasons = "; ".join(r for r in (decision.why, why) if r)
    self.edits.append(edits_lib.Edit(self.line(call), self.code(call), new,
                                     f"Keras's own class: {reasons}"))

  def _policy_stays(self) -> str:
    """Why the file's policy names stay on mplso ('' if they need not)."""
    policies = set()
    for node in self.parents:
      if isinstance(node, cst.Call):
        found = self.bindings.resolve(node.func)
        if found and names.TARGETS.get(found.path) == "mplso.compat.Policy":
          decision = native_rules.policy_call(node)
          if decision.stays:
            return decision.stays
          parent = self.parents.get(node)
          if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            policies.add(self.code(parent.targets[0].target))
    for node in self.parents:
      if (isinstance(node, cst.Attribute) and
          node.attr.value == "loss_scale" and
          self.code(node.value) in policies):
        return (f"the program reads the policy's loss scale (line "
                f"{self.line(node)}), which Keras's policies do not have")
    return ""

  def _file_stays(self) -> list[str]:
    """What keeps every Keras optimizer of this file on mplso."""
    reasons = []
    calls = [n for n in self.parents if isinstance(n, cst.Call) and
             isinstance(n.func, cst.Attribute)]
    methods = {call.func.attr.value for call in calls}
    if "get_gradients" in methods:
      reasons.append(
          "the file calls `get_gradients`, which Keras's own class does not "
          "serve on today's optimizers (mplso's does)")
    for call in calls:
      if call.func.attr.value == "apply_gradients" and len(
          [a for a in call.args if a.keyword is None]) > 1:
        reasons.append(
            f"`apply_gradients` takes a second positional argument (line "
            f"{self.line(call)}), which mplso hands to the wrapped "
            "optimizer as TF 2.4-2.10 did; Keras's class does not")
        break
    if self.keras == edits_lib.KERAS_3:
      for function, (scaled, unscaled) in self._loss_scaling_calls().items():
        if bool(scaled) != bool(unscaled):
          reasons.append(
              f"`{function.name.value}` calls only one of `get_scaled_loss` "
              "and `get_unscaled_gradients`; Keras 3's class has "
              "`scale_loss` and unscales in `apply_gradients`, so the pair "
              "converts only together")
          break
    return reasons

  def _loss_scaling_calls(self):
    """{function: ([get_scaled_loss calls], [get_unscaled_gradients calls])}."""
    found = {}
    for node in self.parents:
      if not (isinstance(node, cst.Call) and
              isinstance(node.func, cst.Attribute) and
              node.func.attr.value in ("get_scaled_loss",
                                       "get_unscaled_gradients")):
        continue
      function = node
      while function is not None and not isinstance(function,
                                                    cst.FunctionDef):
        function = self.parents.get(function)
      if function is None:
        continue
      pair = found.setdefault(function, ([], []))
      pair[node.func.attr.value == "get_unscaled_gradients"].append(node)
    return found

  def _native_receiver(self, node, depth: int = 0) -> bool:
    """Whether `node` holds an optimizer the plan moved to Keras's class.

    That is: the target of an assignment of a call moved to Keras's class
    (`opt`, `self.optimizer`), a model's `.optimizer` where `compile` wraps
    in Keras's class, or a name assigned once from one of these.
    """
    if self.code(node) in self.native_receivers:
      return True
    if isinstance(node, cst.Attribute) and node.attr.value == "optimizer":
      return self.compile_native or self._compiles_native_optimizer()
    if isinstance(node, cst.Name) and depth < 3:
      binding = self.bindings.only_assignment(node)
      if isinstance(binding, metadata.Assignment):
        value = self.bindings.assigned_value(binding.node)
        return value is not None and self._native_receiver(value, depth + 1)
    return False

  def _compiles_native_optimizer(self) -> bool:
    """Whether a `compile` call here takes an optimizer moved to Keras's."""
    for node in self.parents:
      if (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
          and node.func.attr.value == "compile"):
        for arg in node.args:
          if (arg.keyword is None or arg.keyword.value == "optimizer") and (
              self.code(arg.value) in self.native_receivers):
            return True
    return False

  def _plan_methods(self) -> None:
    """What Keras's class calls otherwise: the loss scale, its reads.

    Keras 3: `scale_loss` for a `get_scaled_loss` paired with a
    `get_unscaled_gradients` (dropped: Keras 3 unscales in
    `apply_gradients`), and the scale read from `dynamic_scale` once built
    (`initial_scale` before). tf_keras: TF 2.3's `loss_scale()` call is
    tf_keras's `loss_scale` property.
    """
    keras_3 = self.keras == edits_lib.KERAS_3
    for scaled, unscaled in self._loss_scaling_calls().values():
      if not keras_3:
        break
      if not (scaled and unscaled):
        continue
      if not all(self._native_receiver(call.func.value)
                 for call in scaled + unscaled):
        continue
      for call in scaled:
        attr = call.func
        self.replace[attr.attr] = cst.Name("scale_loss")
        self.edits.append(edits_lib.Edit(
            self.line(call), self.code(attr), self.code(attr.value) +
            ".scale_loss", "Keras 3's class scales the loss with "
            "`scale_loss`"))
      for call in unscaled:
        if len(call.args) != 1 or call.args[0].keyword is not None:
          continue
        self.replace[call] = call.args[0].value
        self.edits.append(edits_lib.Edit(
            self.line(call), self.code(call), self.code(call.args[0].value),
            "Keras 3's class unscales the gradients in `apply_gradients` "
            "after `scale_loss`; unscaling them here too would divide twice"))
    for node in self.parents:
      if not (isinstance(node, cst.Attribute) and
              node.attr.value == "loss_scale"):
        continue
      if not self._native_receiver(node.value):
        continue
      parent = self.parents.get(node)
      target = node
      if (isinstance(parent, cst.Call) and parent.func is node and
          not parent.args):
        target = parent  # TF 2.3's `loss_scale()`.
      if not keras_3:
        if target is not node:
          self.replace[target] = node
          self.edits.append(edits_lib.Edit(
              self.line(target), self.code(target), self.code(node),
              "tf_keras's class has `loss_scale` as a property (TF 2.3's "
              "was a LossScale object, called to read it)"))
        continue
      receiver = self.code(node.value)
      text = (f"{receiver}.dynamic_scale if {receiver}.built "
              f"else {receiver}.initial_scale")
      if not isinstance(self.parents.get(target), cst.Arg):
        text = f"({text})"
      new = cst.parse_expression(text)
      self.replace[target] = new
      self.edits.append(edits_lib.Edit(
          self.line(target), self.code(target), text,
          "Keras 3's class holds its scale in `dynamic_scale`, a variable it "
          "makes when built (at its first apply); before that the scale is "
          "`initial_scale`. TF 2.3's `loss_scale()` and TF 2.4's "
          "`loss_scale` read the same value"))

  # compile.

  def _plan_compile(self) -> bool:
    """Plans what a `compile` that wraps by itself needs; True if one does."""
    compiles, policy, builds, mplso_policy = [], False, False, False
    for node in self.parents:
      if not isinstance(node, cst.Call):
        continue
      func = node.func
      if isinstance(func, cst.Attribute) and func.attr.value == "compile":
        compiles.append(node)
      found = self.bindings.resolve(func)
      path = found.path if found else None
      target = names.TARGETS.get(path or "")
      if "mplso.keras.LossScaleOptimizer" in (target, path):
        builds = True
      elif target in ("mplso.compat.set_policy", "mplso.compat.Policy"):
        policy = True
      elif path in ("mplso.compat.set_policy", "mplso.compat.Policy"):
        policy = mplso_policy = True  # An upgraded file's: it stays.
      elif isinstance(func, cst.Attribute) and func.attr.value in (
          "set_global_policy", "set_policy"):
        policy = True
    relies = bool(compiles and policy and not builds)
    if not relies:
      return False
    if self.to == edits_lib.NATIVE and not (
        self.file_stays or self._policy_stays() or mplso_policy):
      node = compiles[0].func
      why = ("`compile` wraps the optimizer of a `mixed_float16` model in "
             "Keras's own `LossScaleOptimizer` by itself")
      if self.keras == edits_lib.KERAS_3:
        why += "; " + native_rules.KERAS_3_DIFFERENCES
      self.edits.append(edits_lib.Edit(self.line(node), self.code(node),
                                       self.code(node), why))
      self.compile_native = True
      return True
    self.install_why.append((self.line(compiles[0]), _COMPILE_WHY))
    return True

  # Applying it.

  def apply(self) -> cst.Module:
    module = self.module.visit(_Swap(self.replace, self.after))
    return _insert_imports(module, self)


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
        first = extra[0].with_changes(leading_lines=original_node.leading_lines)
        return cst.FlattenSentinel([first, *extra[1:]])
      return cst.FlattenSentinel([new, *extra])
    if isinstance(new, cst.SimpleStatementLine) and not new.body:
      return cst.RemoveFromParent()
    if isinstance(new, cst.IndentedBlock) and not new.body:
      return new.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])])
    return new


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


def _insert_imports(module: cst.Module, planner: _Planner) -> cst.Module:
  """Adds `import mplso.X` lines (and install()) where the plan needs them."""
  body = list(module.body)
  present = _present_imports(module)
  wanted = set(planner.modules)
  if planner.install_why:
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
  if planner.install_why and not install_present:
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
    planner.edits.append(edits_lib.Edit(
        planner.install_why[0][0], "",
        "mplso.compat.install()",
        "; ".join(f"line {line}: {why}" for line, why in planner.install_why)))
  if lines:
    body[position:position] = lines
    planner.edits.append(edits_lib.Edit(
        0, "", "; ".join(f"import {m}" for m in missing)))
  return module.with_changes(body=body)


def upgrade_source(source: str, to: str = edits_lib.MPLSO,
                   keras: str = edits_lib.KERAS_3) -> edits_lib.Upgraded:
  """Returns `source` with its legacy loss-scale names rewritten.

  Args:
    source: a Python module's text.
    to: `edits.MPLSO` (mplso's names) or `edits.NATIVE` (Keras's own where
      the behaviour allows).
    keras: the Keras `tf.keras` is when the program runs (`--to native`).

  Returns:
    The new text and its edits; for a file that does not parse, the text
    unchanged and the error.
  """
  if not any(word in source for word in names.WORDS):
    # No legacy name can be spelled here: only say whether it parses.
    try:
      ast.parse(source)
    except (SyntaxError, ValueError) as e:
      return edits_lib.Upgraded(source, [], error=(
          f"does not parse (line {getattr(e, 'lineno', '?')}): {e}"))
    return edits_lib.Upgraded(source, [])
  try:
    module = cst.parse_module(source)
  except cst.ParserSyntaxError as e:
    return edits_lib.Upgraded(source, [], error=(
        f"does not parse (line {e.raw_line}, column {e.raw_column}): "
        f"{e.message}"))
  wrapper = metadata.MetadataWrapper(module)
  planner = _Planner(wrapper, to, keras)
  planner.plan()
  new = planner.apply()
  edits = sorted(planner.edits, key=lambda e: e.line)
  return edits_lib.Upgraded(new.code, edits,
                            installs=bool(planner.install_why))
