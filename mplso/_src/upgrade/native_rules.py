"""`--to native`: when Keras's own class can take a legacy call's place.

Each function decides for one call and returns a `Decision`: the new call's
keyword arguments for Keras's class, or the reason the call stays on mplso.
The text of every argument is the user's own, copied.
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from mplso._src.upgrade import edits as edits_lib

# What Keras 3's class does otherwise than TF 2.4-2.15's (and mplso's), said
# in every report line of a call moved to it.
KERAS_3_DIFFERENCES = (
    "Keras 3's class does not advance `iterations` on a skipped step (TF "
    "2.4-2.15's and mplso's do), lets the scale fall below 1 (they stop at "
    "1), and unscales in `apply_gradients`")


@dataclasses.dataclass(frozen=True)
class Decision:
  """`arguments`: (keyword or None, code) for Keras's class; or `stays`."""
  arguments: tuple[tuple[str | None, str], ...] = ()
  stays: str = ""
  why: str = ""


def _argument(call: cst.Call, position: int, keyword: str):
  """The Arg passed at `position` or as `keyword`, or None."""
  positional = [a for a in call.args if a.keyword is None and not a.star]
  if position < len(positional):
    return positional[position]
  for arg in call.args:
    if arg.keyword is not None and arg.keyword.value == keyword:
      return arg
  return None


def _literal(node: cst.BaseExpression):
  """The value of a number, string, True/False or None literal, else ..."""
  if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
    return {"True": True, "False": False, "None": None}[node.value]
  if isinstance(node, (cst.Integer, cst.Float)):
    return node.evaluated_value
  if isinstance(node, cst.SimpleString):
    return node.evaluated_value
  if (isinstance(node, cst.BinaryOperation) and
      isinstance(node.operator, cst.Power)):
    base, exponent = _literal(node.left), _literal(node.right)
    if isinstance(base, (int, float)) and isinstance(exponent, int):
      return base ** exponent
  return ...


def _starred(call: cst.Call) -> bool:
  return any(arg.star for arg in call.args)


def optimizer_call(call: cst.Call, tf23: bool, keras: str, code,
                   dynamic_loss_scale) -> Decision:
  """Decides for a legacy `LossScaleOptimizer(...)` call.

  Args:
    call: the call.
    tf23: whether it is TF 2.1-2.3's `(optimizer, loss_scale)` dialect.
    keras: the Keras the program will run on (`edits.KERAS_3`/`TF_KERAS`).
    code: returns a node's source text.
    dynamic_loss_scale: returns whether an expression is a call of a legacy
      `DynamicLossScale`.
  """
  if _starred(call):
    return Decision(stays="its arguments are unpacked (*args/**kwargs); "
                    "which dialect they follow is known only at run time")
  if tf23:
    inner = _argument(call, 0, "optimizer")
    scale = _argument(call, 1, "loss_scale")
    if inner is None:
      return Decision(stays="no optimizer argument")
    arguments = [(None, code(inner.value))]
    value = "dynamic" if scale is None else _literal(scale.value)
    if value == "dynamic":
      return Decision(tuple(arguments), why=(
          "TF 2.3's `loss_scale='dynamic'` is Keras's default: initial scale "
          "2**15, doubled after 2,000 finite steps, halved on a skip"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
      return _fixed(arguments, code(scale.value), keras)
    if scale is not None and dynamic_loss_scale(scale.value):
      return _from_dynamic_loss_scale(arguments, scale.value, code)
    if isinstance(scale.value, (cst.Name, cst.Attribute)):
      return Decision(stays=(
          f"its loss scale, `{code(scale.value)}`, is known only at run "
          "time: a number (a fixed scale) or a loss-scale object, which "
          "Keras's class does not take"))
    return Decision(stays=(
        f"its loss scale, `{code(scale.value)}`, is not 'dynamic' or a "
        "`DynamicLossScale(...)` written in the call"))
  inner = _argument(call, 0, "inner_optimizer")
  if inner is None:
    return Decision(stays="no inner_optimizer argument")
  dynamic = _argument(call, 1, "dynamic")
  initial = _argument(call, 2, "initial_scale")
  growth = _argument(call, 3, "dynamic_growth_steps")
  arguments = [(None, code(inner.value))]
  if keras == edits_lib.TF_KERAS:
    for keyword, arg in (("dynamic", dynamic), ("initial_scale", initial),
                         ("dynamic_growth_steps", growth)):
      if arg is not None:
        arguments.append((keyword, code(arg.value)))
    return Decision(tuple(arguments), why="tf_keras's own class: the same "
                    "dialect and the same rule")
  value = True if dynamic is None else _literal(dynamic.value)
  if value is False:
    return Decision(stays="`dynamic=False` is a fixed scale, which Keras 3's "
                    "class does not have")
  if value is not True:
    return Decision(stays="`dynamic` is decided at run time, and a fixed "
                    "scale has no Keras 3 counterpart")
  for keyword, arg in (("initial_scale", initial),
                       ("dynamic_growth_steps", growth)):
    if arg is not None:
      arguments.append((keyword, code(arg.value)))
  return Decision(tuple(arguments), why="Keras 3's class takes "
                  "`initial_scale` and `dynamic_growth_steps` (no `dynamic`)")


def _fixed(arguments, scale: str, keras: str) -> Decision:
  if keras == edits_lib.KERAS_3:
    return Decision(stays="a fixed loss scale, which Keras 3's class does "
                    "not have")
  return Decision((*arguments, ("dynamic", "False"), ("initial_scale", scale)),
                  why="a fixed scale: tf_keras's `dynamic=False`")


def _from_dynamic_loss_scale(arguments, scale: cst.Call, code) -> Decision:
  """`DynamicLossScale(initial_loss_scale, increment_period, multiplier)`."""
  if _starred(scale):
    return Decision(stays="the loss scale's arguments are unpacked")
  multiplier = _argument(scale, 2, "multiplier")
  if multiplier is not None and _literal(multiplier.value) not in (2, 2.0):
    return Decision(stays=(
        f"multiplier {code(multiplier.value)}: Keras's class always doubles "
        "and halves the scale"))
  initial = _argument(scale, 0, "initial_loss_scale")
  period = _argument(scale, 1, "increment_period")
  arguments = list(arguments)
  arguments.append(("initial_scale",
                    code(initial.value) if initial else "2**15"))
  if period is not None:
    arguments.append(("dynamic_growth_steps", code(period.value)))
  return Decision(tuple(arguments), why=(
      "a `DynamicLossScale` with multiplier 2 is Keras's dynamic scale: "
      "initial_loss_scale -> initial_scale, increment_period -> "
      "dynamic_growth_steps"))


def policy_call(call: cst.Call) -> Decision:
  """Decides for TF 2.1-2.3's `Policy(name, loss_scale='auto')`."""
  if _starred(call):
    return Decision(stays="its arguments are unpacked")
  name = _argument(call, 0, "name")
  scale = _argument(call, 1, "loss_scale")
  if name is None:
    return Decision(stays="no policy name")
  value = "auto" if scale is None else _literal(scale.value)
  if value not in ("auto", "dynamic", None):
    return Decision(stays=(
        "its loss scale is not dynamic, and Keras's policies have none: "
        "Keras's `compile` would wrap the optimizer in a dynamic scale"))
  return Decision(((None, ""),), why=(
      "Keras's policy has no loss scale: `compile` wraps the optimizer of a "
      "`mixed_float16` model in Keras's own `LossScaleOptimizer`, with a "
      "dynamic scale as TF 2.3's 'auto' and 'dynamic' did"))


# Why each kind of name stays on mplso under `--to native`.
STAYS = {
    "mplso.MixedPrecisionLossScaleOptimizer": (
        "TF1 graph code (a Session, global_step, a v1 optimizer) has no "
        "Keras class; TF's own v1 class is deprecated"),
    "mplso.contrib": (
        "the contrib optimizer and managers (their update ratios and "
        "periods) have no counterpart in TF 2.21"),
    "mplso.LossScale": (
        "a loss-scale object has no Keras counterpart (Keras's class keeps "
        "its scale itself)"),
    "mplso.graph_rewrite": (
        "TF 2.21 keeps the graph rewrite only as a deprecated v1 function"),
}


def stays_why(target: str) -> str:
  if target == "mplso.MixedPrecisionLossScaleOptimizer":
    return STAYS[target]
  if target.startswith("mplso.contrib."):
    return STAYS["mplso.contrib"]
  if target.endswith("_graph_rewrite"):
    return STAYS["mplso.graph_rewrite"]
  if target.endswith("LossScale"):
    return STAYS["mplso.LossScale"]
  return ""
