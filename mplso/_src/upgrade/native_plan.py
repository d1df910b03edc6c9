"""`--to native`'s planning: which calls and reads move to Keras's class.

`NativePlanning` is the part of the rewrite's planner that decides, for a
reference to a legacy name, Keras's own name or mplso's with the reason
(`native_rules` holds the per-call rules), and plans what the calls around
a moved optimizer need under Keras 3 or tf_keras.
"""

from __future__ import annotations

import libcst as cst
from libcst import metadata

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import names
from mplso._src.upgrade import native_rules

# TF 2.4-2.15's loss-scaling methods that Keras 3's class lacks.
PROTOCOL = ("get_scaled_loss", "get_unscaled_gradients")


class NativePlanning:
  """Mixed into the planner: uses its tree, bindings, plan and edits."""

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
      self.builds_optimizer = True
      if self.file_stays:
        self._stay(node, target, "; ".join(self.file_stays))
        return True
      decision = native_rules.optimizer_call(
          call, names.is_tf23_dialect(path), self.keras, self.code,
          self._is_dynamic_loss_scale)
      if decision.stays:
        self._stay(node, target, decision.stays)
        return True
      self._native_call(call, names.NATIVE_OPTIMIZER, decision.arguments[1:],
                        decision.why, native_rules.KERAS_3_DIFFERENCES
                        if self.keras == edits_lib.KERAS_3 else "")
      return True
    if target in names.NATIVE_POLICY:
      if self.file_stays or self._policy_stays():
        reason = "; ".join(self.file_stays) or self._policy_stays()
        self._stay(node, target, reason)
        return True
      if target == "mplso.compat.Policy" and call is not None:
        self._native_call(call, names.NATIVE_POLICY[target], (),
                          self._policy_call(call).why)
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
    scope = self.bindings.module_scope(self.module)
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

  def _policy_call(self, call: cst.Call) -> native_rules.PolicyDecision:
    return native_rules.policy_call(call, self.code,
                                    self._is_dynamic_loss_scale)

  def _native_call(self, call: cst.Call, name: str, arguments, why: str,
                   differences: str = ""):
    """Plans `call` as a call of Keras's `name` with the decided arguments.

    Args:
      call: the legacy call.
      name: Keras's class, under `keras.`.
      arguments: (keyword, code) of each argument added after the one kept
        (the optimizer or the policy name).
      why: the rule's reason, for the report line.
      differences: what Keras's class does otherwise, for it too.
    """
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
             for keyword, code in arguments]

    def rebuild(updated: cst.Call) -> cst.Call:
      # The kept argument keeps its layout; the call's last comma (and the
      # line break or comment after it) stays last.
      first = updated.args[inner].with_changes(
          keyword=None, equal=cst.MaybeSentinel.DEFAULT)
      args = [first, *extra]
      separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
      if len(args) > 1 and isinstance(first.comma, cst.MaybeSentinel):
        args[0] = first.with_changes(comma=separator)
      args[1:-1] = [a.with_changes(comma=separator) for a in args[1:-1]]
      args[-1] = args[-1].with_changes(comma=updated.args[-1].comma)
      return updated.with_changes(func=func, args=args)

    self.replace[call] = rebuild
    self.went_native = True
    parent = self.parents.get(call)
    if (name == names.NATIVE_OPTIMIZER and isinstance(parent, cst.Assign) and
        len(parent.targets) == 1):
      self.native_receivers.add(self.code(parent.targets[0].target))
    new = self.code(rebuild(call))
    label = ("Keras's own class" if name == names.NATIVE_OPTIMIZER else
             "Keras's own policy")
    reasons = "; ".join(r for r in (why, differences) if r)
    self.edits.append(edits_lib.Edit(self.line(call), self.code(call), new,
                                     f"{label}: {reasons}"))

  def _policy_stays(self) -> str:
    """Why the file's policy names stay on mplso ('' if they need not)."""
    policies = set()
    for node in self.parents:
      if isinstance(node, cst.Call):
        found = self.bindings.resolve(node.func)
        if found and names.TARGETS.get(found.path) == "mplso.compat.Policy":
          decision = self._policy_call(node)
          if decision.stays:
            return f"the policy at line {self.line(node)}: {decision.stays}"
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

  def untraced_protocol_calls(self) -> list[tuple[int, str]]:
    """Keras 3: `PROTOCOL` calls on an optimizer not traced to Keras's class.

    (line, method) of each; run after `plan()`.
    """
    if self.keras != edits_lib.KERAS_3:
      return []
    return [(self.line(node), node.func.attr.value) for node in self.parents
            if isinstance(node, cst.Call) and
            isinstance(node.func, cst.Attribute) and
            node.func.attr.value in PROTOCOL and
            not self._native_receiver(node.func.value)]

  def _file_stays(self) -> list[str]:
    """What keeps every Keras optimizer of this file on mplso."""
    reasons = list(self.also_stays)
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
        parent = self.parents.get(call)
        if (isinstance(parent, cst.Assign) and len(parent.targets) == 1 and
            self.code(parent.targets[0].target) ==
            self.code(call.args[0].value)):
          # `g = opt.get_unscaled_gradients(g)`: the whole line goes.
          self.replace[self.parents[parent]] = cst.RemoveFromParent()
        else:
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
