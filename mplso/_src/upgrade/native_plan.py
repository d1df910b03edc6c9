"""`--to native`'s planning: which calls and reads move to Keras's class.

`NativePlanner` decides, for a reference to a legacy name that the rewrite's
planner hands it, Keras's own name or mplso's with the reason
(`native_rules` holds the per-call rules), and plans what the calls around
a moved optimizer need under Keras 3 or tf_keras. It reads the file from a
`planning.SourceFile` and writes its decisions into a `planning.Plan`; it
calls nothing of the rewrite's planner.
"""

from __future__ import annotations

import libcst as cst
from libcst import metadata

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import names
from mplso._src.upgrade import native_rules
from mplso._src.upgrade import planning

# Two node shapes, tested by hand: importing `libcst.matchers` for them
# took a third of a second, a sixth of a 20,000-line file's whole run.


def _kinds_check(node) -> bool:
  """Whether `node` is `isinstance(...)` or `issubclass(...)`."""
  return (isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and
          node.func.value in ("isinstance", "issubclass"))


def _checked_class(node, parents) -> bool:
  """Whether `node` is the class `isinstance`/`issubclass` checks against.

  The second argument, or one class of a tuple there.
  """
  parent = parents.get(node)
  if isinstance(parent, cst.Element) and isinstance(parents.get(parent),
                                                    cst.Tuple):
    node = parents.get(parent)
    parent = parents.get(node)
  if not (isinstance(parent, cst.Arg) and parent.value is node and
          parent.keyword is None and not parent.star):
    return False
  call = parents.get(parent)
  return _kinds_check(call) and len(call.args) > 1 and call.args[1] is parent


def _held_in_a_name(node) -> bool:
  """Whether `node` is `name = <the class>`: one plain name assigned."""
  return (isinstance(node, cst.Assign) and len(node.targets) == 1 and
          isinstance(node.targets[0].target, cst.Name))

# Why tf_keras's `compile` wrapping by itself needs no person.
TF_KERAS_COMPILE = ("tf_keras's class is TF's own, the one TF 2.4-2.15's "
                    "`compile` wrapped in: nothing changes")


class NativePlanner:
  """Plans Keras's own names for one file's legacy names (`--to native`).

  Attributes:
    source: the file.
    plan: the plan it adds to (shared with the rewrite's planner).
    keras: the Keras `tf.keras` is when the program runs.
    moved: (call, whether TF 2.3's dialect) of each optimizer moved to
      Keras's class, and of each `compile` that wraps in it by itself.
    consumed: the arguments of the calls moved: what the call's new
      arguments replace, not to be planned again.
    went_native: whether a name of the file went to Keras's.
    compile_native: whether a `compile` wraps in Keras's class by itself.
  """

  def __init__(self, source: planning.SourceFile, plan: planning.Plan,
               keras: str):
    self.source, self.plan, self.keras = source, plan, keras
    self.moved: list[tuple[cst.Call, bool]] = []
    self.consumed: list[cst.CSTNode] = []
    self.went_native = False
    self.compile_native = False
    # The lines of class checks widened to Keras's class (`isinstance`).
    self.widened: list[int] = []
    self._root: str | None = None  # Keras's namespace as the file names it.

  def consumes(self, node: cst.CSTNode) -> bool:
    """Whether `node` is (within) an argument a moved call replaces."""
    return any(self.source.inside(node, arg) for arg in self.consumed)

  def plan_reference(self, node, path: str, target: str) -> None:
    """Plans Keras's own name for `node`, or mplso's with the reason."""
    parents = self.source.parents
    call = parents.get(node)
    call = call if isinstance(call, cst.Call) and call.func is node else None
    if names.is_keras_optimizer(path):
      if call is None:
        self._plan_class_reference(node, path, target)
        return
      decision = self._optimizer_decision(call, path)
      if decision.stays:
        self._stay(node, target, decision.stays)
        return
      self._native_call(call, names.NATIVE_OPTIMIZER, decision.arguments[1:],
                        decision.why, self._differences(call),
                        keep=names.canonical_native(path))
      self.moved.append((call, names.is_tf23_dialect(path)))
      return
    if target in names.NATIVE_POLICY:
      if self.policy_stays():
        self._stay(node, target, self.policy_stays())
        return
      if target == "mplso.compat.Policy" and call is not None:
        self._native_call(call, names.NATIVE_POLICY[target], (),
                          self._policy_call(call).why)
      else:
        self.plan.rename(self.source, node,
                         self.native(names.NATIVE_POLICY[target]),
                         "Keras's own policy functions")
        self.went_native = True
      return
    self._stay(node, target, native_rules.stays_why(target))

  def plan_compile(self, compiles: list[cst.Call]) -> None:
    """Plans the `compile` calls that wrap in Keras's class by themselves."""
    node = compiles[0].func
    why = ("`compile` wraps the optimizer of a `mixed_float16` model in "
           "Keras's own `LossScaleOptimizer` by itself")
    self._compile_line(node, why)
    self.compile_native = True
    self.moved += [(call, True) for call in compiles]

  def plan_compile_elsewhere(self, policy: cst.CSTNode) -> None:
    """Reports a policy set here that a `compile` elsewhere may wrap under.

    `policy`: what names the policy in the call that sets it (`policies`).
    """
    why = ("the policy here reaches each `compile` run once it is set, and "
           "this file has none: one in another file, or in code the tool "
           "does not see (a library), wraps the optimizer of a "
           "`mixed_float16` model in Keras's own `LossScaleOptimizer` by "
           "itself (where none runs, as in a custom training loop, nothing "
           "changes)")
    self._compile_line(policy, why)

  def _compile_line(self, node: cst.CSTNode, why: str) -> None:
    """Reports what a `compile` wraps in by itself, from `node`.

    Keras 3's class differs from TF's (a `WARNING` naming how); tf_keras's
    is TF's own, which the legacy program's `compile` wrapped in: an `INFO`
    line, nothing for a person to do.
    """
    if self.keras == edits_lib.KERAS_3:
      self.plan.warn(self.source, node,
                     f"{why}; {native_rules.KERAS_3_DIFFERENCES}")
    else:
      self.plan.keep(self.source, node, f"{why}; {TF_KERAS_COMPILE}")

  def _optimizer_decision(self, call: cst.Call,
                          path: str) -> native_rules.Decision:
    """The rule's decision for one call, with its uses' reasons to stay."""
    tf23 = names.is_tf23_dialect(path)
    decision = native_rules.optimizer_call(
        call, tf23, self.keras, self.source.code, self._is_dynamic_loss_scale)
    if decision.stays:
      return decision
    reasons = self.source.uses.stays(call, tf23)
    if reasons:
      return native_rules.Decision(stays="; ".join(reasons))
    return decision

  def _differences(self, call: cst.Call) -> str:
    """What Keras's class does otherwise, for the report line of `call`."""
    if self.keras != edits_lib.KERAS_3:
      return ""
    differences = native_rules.KERAS_3_DIFFERENCES
    if any(isinstance(h, cst.Attribute) and h.attr.value == "optimizer"
           for h in self.source.uses.holders(call)):
      return differences
    for holder in self.source.uses.holders(call):
      if holder is not call and not isinstance(
          self.source.parents.get(holder), cst.Attribute):
        return differences + ("; " + self.source.uses.leaves_why(call)
                              if self.source.uses.leaves_why(call) else "")
    return differences

  def _plan_class_reference(self, node, path: str, target: str) -> None:
    """A legacy optimizer class named but not called right there.

    Held in a name (`wrapper = ...LossScaleOptimizer`), it is decided by the
    calls made through that name, like direct calls: Keras's class if every
    one moves, mplso's otherwise. In `isinstance`/`issubclass`, Keras's
    class matches both (mplso's classes subclass it).
    """
    parent = self.source.parents.get(node)
    if (isinstance(parent, cst.Arg) and _kinds_check(
        self.source.parents.get(parent))) or _checked_class(
            node, self.source.parents):
      if not names.canonical_native(path):
        self.plan.rename(
            self.source, node, self.native(names.NATIVE_OPTIMIZER),
            "Keras's own class; mplso's classes subclass it, so the name "
            "still matches both")
        self.widened.append(self.source.line(node))
      return
    calls, reason = self._calls_through(node)
    if reason is None:
      decisions = [(c, self._optimizer_decision(c, path)) for c in calls]
      stays = [f"line {self.source.line(c)}: {d.stays}" for c, d in decisions
               if d.stays]
      if not stays:
        if not names.canonical_native(path):
          self.plan.rename(
              self.source, node, self.native(names.NATIVE_OPTIMIZER), (
                  "Keras's own class, held in a name; each call through it "
                  "is decided as a direct call" if calls else
                  "Keras's own class; mplso's classes subclass it, so the "
                  "name still matches both"))
        for c, decision in decisions:
          self._native_call(c, names.NATIVE_OPTIMIZER,
                            decision.arguments[1:], decision.why,
                            self._differences(c), keep=True, func=c.func)
          self.moved.append((c, names.is_tf23_dialect(path)))
        return
      reason = ("the class is held in a name and called through it, and a "
                "call stays: " + "; ".join(stays))
    self._stay(node, target, reason)

  def plan_kinds_check(self, node, path: str) -> None:
    """Plans Keras's class for a name of mplso's class in a class check.

    `node` reads a binding the upgrade makes name mplso's class (`from
    ...experimental import LossScaleOptimizer` becomes `from mplso.keras
    import ...`, `path` its legacy name). Checked against by `isinstance` or
    `issubclass`, it would not match an optimizer moved to Keras's class,
    here or in another file; Keras's class matches both.
    """
    if names.is_keras_optimizer(path) and _checked_class(
        node, self.source.parents):
      self.widened.append(self.source.line(node))
      self.plan.rename(
          self.source, node, self.native(names.NATIVE_OPTIMIZER),
          f"Keras's own class: `{self.source.code(node)}` names mplso's "
          "class after the upgrade, which an optimizer moved to Keras's "
          "class is not an instance of; mplso's classes subclass Keras's, "
          "so this name matches both")

  def plan_exported(self, local, binding, path: str) -> None:
    """Warns where other files may import mplso's class from this module.

    An import binds the legacy class `path` as `binding` (`local` the name
    it writes), which the upgrade makes name mplso's class. A file that imports it from here
    and checks an optimizer against it (`isinstance`) would not match one
    the upgrade moved to Keras's class; the tool does not follow names
    from file to file, so a person must look.
    """
    if not (names.is_keras_optimizer(path) and
            isinstance(binding.scope, metadata.GlobalScope)):
      return
    uses = self.source.uses
    importers = uses.facts.importers(uses.path)
    if not importers:
      return
    more = f" and {len(importers) - 1} more" if len(importers) > 1 else ""
    native = self.native(names.NATIVE_OPTIMIZER)
    self.plan.warn(self.source, local, (
        f"`{binding.name}` names mplso's class after the upgrade (its "
        "import is mplso's), and "
        f"{importers[0]}{more} import{'' if more else 's'} this module: "
        "where a file checks an "
        f"optimizer against this `{binding.name}` (`isinstance`, "
        "`issubclass`), an optimizer the upgrade moved to Keras's own class "
        f"does not match it; check against `{native}` there, which matches "
        "both (mplso's classes subclass it)"))

  def _calls_through(self, node):
    """The calls made through the name `node` is assigned to.

    Returns (calls, None), or ([], why the tool cannot follow the name).
    """
    source = self.source
    parent = source.parents.get(node)
    if not _held_in_a_name(parent):
      return [], (f"`{source.code(node)}` is used as a value (line "
                  f"{source.line(node)}): what is done with it is not known")
    name = parent.targets[0].target
    reads = source.uses.reads_of(name)
    calls = []
    for read in reads or []:
      call = source.parents.get(read)
      if isinstance(call, cst.Call) and call.func is read:
        calls.append(call)
      else:
        return [], (f"the class is held in `{source.code(name)}`, which is "
                    f"used as a value at line {source.line(read)}")
    if reads is None:
      return [], "the name that holds the class cannot be followed"
    return calls, None

  def _stay(self, node, target: str, reason: str) -> None:
    """Plans mplso's name `target` for `node`, with the reason it stays."""
    self.plan.rename(self.source, node, target, f"stays on mplso: {reason}")

  def native(self, name: str) -> str:
    """`keras.x.Y` as this file can name it: `tf.keras.x.Y`."""
    if self._root is None:
      self._root = self._tensorflow_name()
    return f"{self._root}.{name}"

  def _tensorflow_name(self) -> str:
    """The module-level name of `tensorflow`, imported if there is none."""
    scope = self.source.bindings.module_scope(self.source.module)
    for assignment in scope.assignments:
      if (isinstance(assignment, metadata.ImportAssignment) and
          self.source.bindings.bound_path(assignment) == "tf" and
          self.source.bindings.binding_is_unique(scope, assignment.name)):
        return assignment.name
    name = "tf" if "tf" not in scope else "tensorflow"
    self.plan.modules.add("tensorflow as tf" if name == "tf" else "tensorflow")
    return name

  def _is_dynamic_loss_scale(self, node) -> bool:
    """Whether `node` builds a legacy `DynamicLossScale`."""
    if not isinstance(node, cst.Call):
      return False
    found = self.source.bindings.resolve(node.func)
    return found is not None and (
        names.TARGETS.get(found.path) == "mplso.DynamicLossScale")

  def _policy_call(self, call: cst.Call) -> native_rules.PolicyDecision:
    """The rule's decision for one legacy `Policy(...)` call."""
    return native_rules.policy_call(call, self.source.code,
                                    self._is_dynamic_loss_scale)

  def _native_call(self, call: cst.Call, name: str, arguments, why: str,
                   differences: str = "", keep: bool = False, func=None):
    """Plans `call` as a call of Keras's `name` with the decided arguments.

    Args:
      call: the legacy call.
      name: Keras's class, under `keras.`.
      arguments: (keyword, code) of each argument added after the one kept
        (the optimizer or the policy name).
      why: the rule's reason, for the report line.
      differences: what Keras's class does otherwise, for it too.
      keep: whether the call names Keras's class already: it stays byte for
        byte when its arguments are already the decided ones, in any
        keyword order.
      func: the callee to keep (a name that holds the class), if any.
    """
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
             for keyword, code in arguments]

    def rebuild(updated: cst.Call) -> cst.Call:
      # The kept argument keeps its layout; the call's last comma (and the
      # line break or comment after it) stays last.
      """The call with Keras's callee and the decided arguments."""
      first = updated.args[inner].with_changes(
          keyword=None, equal=cst.MaybeSentinel.DEFAULT)
      args = [first, *extra]
      separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
      if len(args) > 1 and isinstance(first.comma, cst.MaybeSentinel):
        args[0] = first.with_changes(comma=separator)
      args[1:-1] = [a.with_changes(comma=separator) for a in args[1:-1]]
      args[-1] = args[-1].with_changes(comma=updated.args[-1].comma)
      return updated.with_changes(func=func, args=args)

    self.went_native = True
    kept = [a for a in call.args if a is not call.args[inner]]
    # The user's keyword order is kept: keywords in another order than the
    # rule's mean the same.
    if keep and len(kept) == len(arguments) and all(
        a.keyword is not None for a in kept) and {
            a.keyword.value: self.source.code(a.value) for a in kept
        } == dict(arguments):
      # Already Keras's own call, as Keras's class takes it: as written.
      for arg in kept:
        self.consumed.remove(arg)
      self.plan.edits.append(edits_lib.kept(
          self.source.line(call), self.source.code(call),
          f"Keras's own class already: {why}" + (
              f"; {differences}" if differences else "")))
      return
    if func is None:
      func = cst.parse_expression(self.native(name))
    self.plan.replace[call] = rebuild
    new = self.source.code(rebuild(call))
    label = ("Keras's own class" if name == names.NATIVE_OPTIMIZER else
             "Keras's own policy")
    reasons = "; ".join(r for r in (why, differences) if r)
    self.plan.edits.append(edits_lib.changed(
        self.source.line(call), self.source.code(call), new,
        f"{label}: {reasons}"))

  def policy_stays(self) -> str:
    """Why the file's policy names stay on mplso ('' if they need not)."""
    source = self.source
    policies = set()
    for node in source.parents:
      if isinstance(node, cst.Call):
        found = source.bindings.resolve(node.func)
        if found and names.TARGETS.get(found.path) == "mplso.compat.Policy":
          decision = self._policy_call(node)
          if decision.stays:
            return f"the policy at line {source.line(node)}: {decision.stays}"
          parent = source.parents.get(node)
          if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            policies.add(source.code(parent.targets[0].target))
    for node in source.parents:
      if (isinstance(node, cst.Attribute) and
          node.attr.value == "loss_scale" and
          source.code(node.value) in policies):
        return (f"the program reads the policy's loss scale (line "
                f"{source.line(node)}), which Keras's policies do not have")
    return self._compiled_stays()

  def _compiled_stays(self) -> str:
    """Why an optimizer `compile` wraps by itself cannot be Keras's ('')."""
    # Under TF 2.1-2.3's policy, `compile` wrapped in TF 2.3's class.
    tf23 = any(
        isinstance(node, cst.Call) and (
            found := self.source.bindings.resolve(node.func)) is not None and
        ".experimental." in found.path and
        names.TARGETS.get(found.path) in names.NATIVE_POLICY
        for node in self.source.parents)
    compiles = self.source.wrapping_compiles()
    for call in compiles:
      reasons = self.source.uses.stays(call, tf23)
      if reasons:
        return (f"`compile` at line {self.source.line(call)} would wrap its "
                "optimizer in Keras's own class, and " + "; ".join(reasons))
    return self._compiled_elsewhere_stays(compiles)

  def _compiled_elsewhere_stays(self, compiles: list[cst.Call]) -> str:
    """Why compile's optimizer, used in another file, cannot be Keras's ('').

    The optimizer a `compile` wraps goes wherever the model goes: a
    `train_step` or a callback in another file reads it as `self.optimizer`
    or `self.model.optimizer`, which the tool cannot trace. A use Keras's
    class does not serve, in a file joined to this one by imports, may be
    on it. Asked of a file that sets a policy: its own `compiles`, or one
    elsewhere that the policy reaches.
    """
    uses = self.source.uses
    reaching = uses.joined()
    if not reaching:
      return ""
    found = uses.facts.first_untraced(reaching)
    if found is None:
      return ""
    where, what = found
    wraps = (f"`compile` at line {self.source.line(compiles[0])} would wrap "
             "its optimizer" if compiles else
             "a `compile` under the policy here would wrap its optimizer")
    return (f"{wraps} in Keras's own class, and {where} {what} on an "
            "optimizer the tool cannot trace (a model's `optimizer`, in a "
            "`train_step` or a callback): it may be this one")

  def plan_methods(self) -> None:
    """What Keras's class calls otherwise, on each optimizer moved to it.

    Keras 3: `scale_loss` for `get_scaled_loss`, the unscaling dropped
    where its result goes straight into `apply_gradients` (Keras 3's class
    unscales there), and the scale read from `dynamic_scale` once built
    (`initial_scale` before). tf_keras: TF 2.3's `loss_scale()` call is
    tf_keras's `loss_scale` property.
    """
    keras_3 = self.keras == edits_lib.KERAS_3
    done = set()
    for site, _ in self.moved:
      for holder in self.source.uses.holders(site):
        parent = self.source.parents.get(holder)
        if not (isinstance(parent, cst.Attribute) and
                parent.value is holder) or parent in done:
          continue
        done.add(parent)
        self._plan_member(parent, keras_3)
      if keras_3:
        for call, argument in self.source.uses.unscaling(site).items():
          if call not in done:
            done.add(call)
            self._drop_unscaling(call, argument)

  def _plan_member(self, node: cst.Attribute, keras_3: bool) -> None:
    """Plans Keras's spelling of one use `opt.<name>` of a moved optimizer."""
    parent = self.source.parents.get(node)
    called = isinstance(parent, cst.Call) and parent.func is node
    name = node.attr.value
    if keras_3 and called and name == "get_scaled_loss":
      self.plan.replace[node.attr] = cst.Name("scale_loss")
      self.plan.edits.append(edits_lib.changed(
          self.source.line(node), self.source.code(node),
          self.source.code(node.value) + ".scale_loss",
          "Keras 3's class scales the loss with `scale_loss`"))
      return
    if name != "loss_scale":
      return
    target = parent if called and not parent.args else node
    if not keras_3:
      if target is not node:
        self.plan.replace[target] = node
        self.plan.edits.append(edits_lib.changed(
            self.source.line(target), self.source.code(target),
            self.source.code(node),
            "tf_keras's class has `loss_scale` as a property (TF 2.3's "
            "was a LossScale object, called to read it)"))
      return
    receiver = self.source.code(node.value)
    text = (f"{receiver}.dynamic_scale if {receiver}.built "
            f"else {receiver}.initial_scale")
    if not isinstance(self.source.parents.get(target), cst.Arg):
      text = f"({text})"
    self.plan.replace[target] = cst.parse_expression(text)
    self.plan.edits.append(edits_lib.changed(
        self.source.line(target), self.source.code(target), text,
        "Keras 3's class holds its scale in `dynamic_scale`, a variable it "
        "makes when built (at its first apply); before that the scale is "
        "`initial_scale`. TF 2.3's `loss_scale()` and TF 2.4's "
        "`loss_scale` read the same value"))

  def _drop_unscaling(self, call: cst.Call, argument) -> None:
    """Keras 3: `get_unscaled_gradients(g)` feeding `apply_gradients` goes."""
    source = self.source
    parent = source.parents.get(call)
    if (isinstance(parent, cst.Assign) and
        source.code(parent.targets[0].target) == source.code(argument)):
      # `g = opt.get_unscaled_gradients(g)`: the whole line goes.
      self.plan.replace[source.parents[parent]] = cst.RemoveFromParent()
    else:
      # The argument as rewritten: a `get_scaled_loss` within it is renamed.
      self.plan.replace[call] = lambda updated: updated.args[0].value
    self.plan.edits.append(edits_lib.changed(
        source.line(call), source.code(call), source.code(argument),
        "Keras 3's class unscales the gradients in `apply_gradients`, which "
        "takes them straight from here; unscaling them here too would "
        "divide twice"))
