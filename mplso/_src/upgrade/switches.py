"""Warnings for mixed-precision switches that do nothing, or half, on TF 2.21.

Three kinds, each left as it is with a `WARNING` line that names the fix:

- Grappler's `auto_mixed_precision` rewrite turned on
  (`tf.config.optimizer.set_experimental_options({"auto_mixed_precision":
  True})`, a `RewriterConfig`'s field, `auto_mixed_precision=` anywhere):
  on TF 2.21 it casts to float16 with no loss scaling;
- NVIDIA's `TF_ENABLE_AUTO_MIXED_PRECISION` variables (set in `os.environ`,
  `os.putenv`, an environment dict): NGC's TensorFlow read them, stock TF
  2.21 does not;
- TF 2.0-2.1's policy names (`"infer_float32_vars"`,
  `"float16_with_float32_vars"`, `Policy("infer")`): TF 2.21 refuses them.

A switch set to a literal off value (`False`, `"0"`, `RewriterConfig.OFF`),
or to a name assigned once to one (`USE_AMP = False`), gets none, and so does a dict assigned to the setter's own name
(`tf.config.optimizer.set_experimental_options = {...}` turns nothing on).
Where the file also wraps an optimizer in a loss scale (a call of any
`LossScaleOptimizer`, `MixedPrecisionLossScaleOptimizer` or
`enable_mixed_precision_graph_rewrite`, legacy, mplso's or Keras's own),
Grappler's switch is what the warning's advice asks for: it gets an `INFO`
line naming that call instead, so that a file that follows the advice
passes `--check`. A report line quotes the switch without the comma after
it.
"""

from __future__ import annotations

import libcst as cst
from libcst import metadata

from mplso._src.upgrade import bindings as bindings_lib
from mplso._src.upgrade import edits as edits_lib

# Grappler's options that rewrite to float16 (the bfloat16 ones need no
# loss scaling).
GRAPPLER_FLOAT16 = ("auto_mixed_precision", "auto_mixed_precision_cpu")
ENVIRONMENT = "TF_ENABLE_AUTO_MIXED_PRECISION"
# Grappler's setter: a dict assigned to this name turns nothing on.
SETTER = "set_experimental_options"
# The calls whose first argument is a policy's name.
POLICY_CALLS = ("Policy", "PolicyV1", "set_policy", "set_global_policy")

_GRAPPLER_WHY = (
    "Grappler's `{key}` rewrite casts to float16 on TF 2.21 with no loss "
    "scaling, so small gradients underflow to zero: wrap the optimizer "
    "instead, `opt = mplso.enable_mixed_precision_graph_rewrite(opt)` "
    "(turns the rewrite on and scales the loss), or use a Keras "
    "`mixed_float16` policy with a LossScaleOptimizer")
_ENVIRONMENT_WHY = (
    "`{key}` turned on the float16 graph rewrite and loss scaling in "
    "NVIDIA's NGC TensorFlow containers; stock TF 2.21 ignores it, so the "
    "program trains in float32: for the same effect, `opt = "
    "mplso.enable_mixed_precision_graph_rewrite(opt)`, or a Keras "
    "`mixed_float16` policy with a LossScaleOptimizer")
_POLICY_WHY = (
    "TF 2.21 refuses the policy name {name!r} (a TF 2.0-2.1 name, since "
    "removed): use {fix}")

_GRAPPLER_WRAPPED_WHY = (
    "Grappler's `{key}` rewrite casts to float16 on TF 2.21 with no loss "
    "scaling of its own; the optimizer wrapped at line {line} (`{called}`) "
    "scales the loss")
# The calls that wrap an optimizer in a loss scale, by their last name.
LOSS_SCALE_WRAPPERS = ("LossScaleOptimizer", "MixedPrecisionLossScaleOptimizer",
                       "enable_mixed_precision_graph_rewrite")

# Literal values that turn a switch off (or leave it at its default, off).
_OFF_TEXT = ("0", "false", "False", "")
_OFF_NAMES = ("False", "None", "OFF", "DEFAULT")


def policy_fix(name: str) -> str | None:
  """What to use instead of a TF 2.0-2.1 policy name; None for others."""
  if name in ("infer_float32_vars", "infer_with_float32_vars"):
    return "'mixed_float16' or 'mixed_bfloat16' (TF's own advice)"
  if name == "infer":
    return ("a dtype name ('float32') or 'mixed_float16': layers no longer "
            "infer their dtype from the first input")
  if name.endswith("_with_float32_vars"):
    dtype = name[:-len("_with_float32_vars")]
    return {"float16": "'mixed_float16'",
            "bfloat16": "'mixed_bfloat16'"}.get(
                dtype, f"{dtype!r} (variables then take that dtype too)")
  return None


def _text(node) -> str | None:
  """The value of a plain string literal; else None."""
  if isinstance(node, cst.SimpleString) and "b" not in node.prefix.lower():
    value = node.evaluated_value
    return value if isinstance(value, str) else None
  return None


def _off(value, bindings: bindings_lib.Bindings | None = None) -> bool:
  """Whether `value` is a literal that turns a switch off.

  With `bindings`, a name assigned once, to such a literal, is one too
  (`USE_AMP = False`).
  """
  if value is None:
    return False
  if isinstance(value, cst.Name) and bindings is not None:
    assignment = bindings.only_assignment(value)
    if isinstance(assignment, metadata.Assignment) and isinstance(
        assignment.node, cst.Name):
      assigned = bindings.assigned_value(assignment.node)
      if assigned is not None:
        return _off(assigned)
  text = _text(value)
  if text is not None:
    return text.strip() in _OFF_TEXT
  if isinstance(value, cst.Integer):
    return value.value in ("0", "2")  # RewriterConfig's DEFAULT, OFF.
  if isinstance(value, cst.Name):
    return value.value in _OFF_NAMES
  if isinstance(value, cst.Attribute):
    return value.attr.value in _OFF_NAMES
  return False


def _called(call: cst.Call) -> str:
  """The last name of what `call` calls (`setdefault` for os.environ's)."""
  func = call.func
  if isinstance(func, cst.Attribute):
    return func.attr.value
  return func.value if isinstance(func, cst.Name) else ""


def _environment_value(parents, string: cst.SimpleString):
  """How the variable named by `string` is used: (node to report, value).

  The value is what it is set to (None where it is read, or unknown);
  the node is None where it is unset (`pop`, `del`, `unsetenv`).
  """
  parent = parents.get(string)
  if isinstance(parent, cst.Index):
    subscript = parents.get(parents.get(parent))
    holder = parents.get(subscript)
    if isinstance(holder, cst.Del):
      return None, None
    if isinstance(holder, cst.AssignTarget):
      statement = parents.get(holder)
      return statement, statement.value
    return subscript, None
  if isinstance(parent, cst.Arg):
    call = parents.get(parent)
    if isinstance(call, cst.Call):
      if _called(call) in ("pop", "unsetenv"):
        return None, None
      args = list(call.args)
      value = (args[1].value if len(args) > 1 and args[0] is parent else
               None)
      return call, value
  if isinstance(parent, cst.DictElement) and parent.key is string:
    return parent, parent.value
  return string, None


def warnings(bindings: bindings_lib.Bindings) -> list[edits_lib.Edit]:
  """One warning per switch of the module that does nothing, or half."""
  module = bindings.wrapper.module
  parents = bindings.wrapper.resolve(metadata.ParentNodeProvider)
  wrapper = _loss_scale_wrapper(parents, bindings)
  found = []

  def add(node, why, edit=edits_lib.warned):
    """Warns of `node`, a switch set as written (quoted without its comma)."""
    quoted = node
    if isinstance(node, (cst.DictElement, cst.Arg)):
      quoted = node.with_changes(comma=cst.MaybeSentinel.DEFAULT)
    text = module.code_for_node(quoted)
    found.append(edit(bindings.line(node), text, why))

  def add_grappler(node, key):
    """`add`, or an INFO line where the file wraps an optimizer already."""
    if wrapper is None:
      add(node, _GRAPPLER_WHY.format(key=key))
    else:
      add(node, _GRAPPLER_WRAPPED_WHY.format(
          key=key, line=bindings.line(wrapper), called=_called(wrapper)),
          edits_lib.kept)

  for node in parents:
    text = _text(node)
    if isinstance(node, cst.DictElement):
      key = _text(node.key)
      if (key in GRAPPLER_FLOAT16 and not _off(node.value, bindings) and
          not _rebinds_setter(parents, node)):
        add_grappler(node, key)
    elif isinstance(node, cst.Arg) and node.keyword is not None:
      key = node.keyword.value
      if key in GRAPPLER_FLOAT16 and not _off(node.value, bindings):
        add_grappler(node, key)
      elif key.startswith(ENVIRONMENT) and not _off(node.value, bindings):
        add(node, _ENVIRONMENT_WHY.format(key=key))
    elif isinstance(node, cst.Assign):
      for target in node.targets:
        if (isinstance(target.target, cst.Attribute) and
            target.target.attr.value in GRAPPLER_FLOAT16 and
            not _off(node.value, bindings)):
          add_grappler(node, target.target.attr.value)
    elif text is not None and text.startswith(ENVIRONMENT):
      reported, value = _environment_value(parents, node)
      if reported is not None and not _off(value, bindings):
        add(reported, _ENVIRONMENT_WHY.format(key=text))
    elif text is not None and policy_fix(text) is not None:
      if text == "infer" and not _policy_argument(parents, node):
        continue
      add(node, _POLICY_WHY.format(name=text, fix=policy_fix(text)))
  return found


def _loss_scale_wrapper(parents, bindings) -> cst.Call | None:
  """The first call in the module that wraps an optimizer in a loss scale.

  Found by the called name's last part (`LOSS_SCALE_WRAPPERS`), however the
  name was imported: legacy, mplso's and Keras's own all scale the loss.
  """
  calls = [node for node in parents if isinstance(node, cst.Call) and
           _called(node) in LOSS_SCALE_WRAPPERS]
  return min(calls, key=bindings.line, default=None)


def _last_name(node) -> str:
  """The last name of `node` (`b` for `a.b`); '' for other expressions."""
  if isinstance(node, cst.Attribute):
    return node.attr.value
  return node.value if isinstance(node, cst.Name) else ""


def _rebinds_setter(parents, element: cst.DictElement) -> bool:
  """Whether `element`'s dict is assigned to Grappler's setter's own name.

  `tf.config.optimizer.set_experimental_options = {...}` (a typo for the
  call) replaces the function and turns nothing on.
  """
  holder = parents.get(parents.get(element))
  if isinstance(holder, cst.Assign):
    targets = [target.target for target in holder.targets]
  elif isinstance(holder, cst.AnnAssign):
    targets = [holder.target]
  else:
    return False
  return all(_last_name(target) == SETTER for target in targets)


def _policy_argument(parents, string: cst.SimpleString) -> bool:
  """Whether `string` is the first argument of a policy call."""
  arg = parents.get(string)
  call = parents.get(arg)
  return (isinstance(arg, cst.Arg) and isinstance(call, cst.Call) and
          call.args and call.args[0] is arg and _called(call) in POLICY_CALLS)
