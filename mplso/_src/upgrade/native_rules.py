"""`--to native`: when Keras's own class can take a legacy call's place.

`optimizer_call` decides for one optimizer call and returns a `Decision`:
the new call's keyword arguments for Keras's class, or the reason the call
stays on mplso; `policy_call`, for a policy call, a `PolicyDecision` (Keras's
policy takes the name alone). The text of every argument is the user's own,
copied.
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
  """Whether `call` unpacks arguments (`*args`, `**kwargs`)."""
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
    if value is None:
      return Decision(stays=(
          "`loss_scale=None`: TF 2.3's class refused it (\"loss_scale cannot "
          "be None\"), as mplso's does"))
    if value is True:
      return Decision(stays=(
          "`loss_scale=True`: TF 2.3 took a bool as a number, a fixed scale "
          "of 1; mplso refuses a bool (write 1)"))
    refused = _refused_by_tf23(value, code(scale.value))
    if refused:
      return Decision(stays=refused)
    if isinstance(value, (int, float)):
      return _fixed(keras)
    if dynamic_loss_scale(scale.value):
      return _from_dynamic_loss_scale(arguments, scale.value, code)
    if value is ... and isinstance(scale.value, (cst.Name, cst.Attribute)):
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
  value = True if dynamic is None else _literal(dynamic.value)
  if value is False:
    return _fixed(keras)
  if value is not True:
    return Decision(stays="`dynamic` is decided at run time, and a fixed "
                    "scale " + ("has no Keras 3 counterpart"
                                if keras == edits_lib.KERAS_3 else
                                "applies steps with Inf or NaN gradients "
                                "under tf_keras's class"))
  if keras == edits_lib.TF_KERAS:
    for keyword, arg in (("dynamic", dynamic), ("initial_scale", initial),
                         ("dynamic_growth_steps", growth)):
      if arg is not None:
        arguments.append((keyword, code(arg.value)))
    return Decision(tuple(arguments), why="tf_keras's class takes the same "
                    "arguments and follows the same dynamic rule")
  for keyword, arg in (("initial_scale", initial),
                       ("dynamic_growth_steps", growth)):
    if arg is not None:
      arguments.append((keyword, code(arg.value)))
  return Decision(tuple(arguments), why="Keras 3's class takes "
                  "`initial_scale` and `dynamic_growth_steps` (no `dynamic`)")


def _refused_by_tf23(value, text: str) -> str:
  """Why TF 2.3 refused the literal loss scale `value` ('' if it took it).

  TF 2.3 took 'dynamic', a number >= 1 (a bool too, as an int: True was a
  fixed scale of 1), a loss-scale object, and, in a policy, None and
  'auto'; `False`, a number below 1 and any other string raised
  `ValueError`, as they do in mplso. (mplso refuses True as well.)
  """
  if value is False or (isinstance(value, (int, float)) and
                        not isinstance(value, bool) and not value >= 1):
    return (f"`loss_scale={text}`: TF 2.3 refused it (a fixed scale must be "
            "at least 1), as mplso does")
  if isinstance(value, (str, bytes)) and value != "dynamic":
    return (f"`loss_scale={text}`: TF 2.3 refused it ('dynamic' was the only "
            "string it took besides a policy's 'auto'), as mplso does")
  return ""


_FIXED_TF_KERAS = (
    "a fixed loss scale: tf_keras's class (`dynamic=False`) applies a step "
    "whose gradients hold Inf or NaN under a fixed scale, so the weights "
    "take them; TF 2.4-2.15's Keras class did too, but mplso's skips the "
    "step, as the program did under `python -m mplso.compat`")


def _fixed(keras: str) -> Decision:
  """The decision for a fixed loss scale under `keras`: it stays."""
  if keras == edits_lib.KERAS_3:
    return Decision(stays="a fixed loss scale, which Keras 3's class does "
                    "not have")
  return Decision(stays=_FIXED_TF_KERAS)


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


@dataclasses.dataclass(frozen=True)
class PolicyDecision:
  """A `Policy(name, ...)` call: Keras's `Policy(name)`, why; or `stays`."""
  why: str = ""
  stays: str = ""


def policy_call(call: cst.Call, code, dynamic_loss_scale) -> PolicyDecision:
  """Decides for TF 2.1-2.3's `Policy(name, loss_scale='auto')`.

  TF 2.3's `compile` wrapped the optimizer in a LossScaleOptimizer with the
  policy's loss scale when it had one: 'auto' was a dynamic scale for
  `'mixed_float16'` and none otherwise (as Keras's `compile` does today);
  'dynamic', a number or a loss-scale object gave any policy that scale;
  None, no loss scale.

  Args:
    call: the call.
    code: returns a node's source text.
    dynamic_loss_scale: returns whether an expression is a call of a legacy
      `DynamicLossScale`.
  """
  if _starred(call):
    return PolicyDecision(stays="its arguments are unpacked")
  name = _argument(call, 0, "name")
  scale = _argument(call, 1, "loss_scale")
  if name is None:
    return PolicyDecision(stays="no policy name")
  value = "auto" if scale is None else _literal(scale.value)
  text = "" if scale is None else code(scale.value)
  compile_wraps = ("Keras's `compile` wraps the optimizer of a "
                   "`mixed_float16` model in Keras's own `LossScaleOptimizer` "
                   "with a dynamic scale")
  if value == "auto":
    return PolicyDecision(why=(
        f"it has no loss scale; {compile_wraps}, and leaves other models' "
        "optimizers alone, as TF 2.3's 'auto' did"))
  if value == "dynamic":
    policy = _literal(name.value)
    if isinstance(policy, str) and policy != "mixed_float16":
      return PolicyDecision(stays=(
          f"`loss_scale='dynamic'` made TF 2.3's `compile` scale the loss of "
          f"a '{policy}' model; Keras's `compile` scales only a "
          "`mixed_float16` model's"))
    why = f"it has no loss scale; {compile_wraps}, as TF 2.3's 'dynamic' did"
    if not isinstance(policy, str):
      why += (f"; the name, `{code(name.value)}`, is known only at run time: "
              "for another policy, TF 2.3 scaled the loss too, Keras does not")
    return PolicyDecision(why=why)
  if value is None:
    return PolicyDecision(stays=(
        "TF 2.3's `loss_scale=None` turned loss scaling off, but today's "
        "`compile` scales the loss of a `mixed_float16` model whatever the "
        "policy says (Keras's, and mplso's under `mplso.compat.install()`, "
        "as `mplso.compat.Policy` documents): neither keeps TF 2.3's "
        "unscaled training"))
  if value is True:
    return PolicyDecision(stays=(
        "`loss_scale=True`: TF 2.3 took a bool as a number, a fixed scale of "
        "1; mplso refuses a bool (write 1), and Keras's policies have no "
        "loss scale"))
  refused = "" if value is ... else _refused_by_tf23(value, text)
  if refused:
    return PolicyDecision(stays=refused)
  if isinstance(value, (int, float)):
    return PolicyDecision(stays=(
        f"its loss scale, `{text}`, is fixed; Keras's policies have none, "
        f"and {compile_wraps}"))
  if dynamic_loss_scale(scale.value):
    return PolicyDecision(stays=(
        f"its loss scale is the object `{text}`; Keras's policies take none, "
        f"and {compile_wraps} of its own (2**15, doubled after 2,000 finite "
        "steps), not this one"))
  return PolicyDecision(stays=(
      f"its loss scale, `{text}`, is known only at run time (a number, "
      "'dynamic', None or a loss-scale object); Keras's policies have none"))


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
  """Why mplso's name `target` has no Keras counterpart ('' if it has)."""
  if target == "mplso.MixedPrecisionLossScaleOptimizer":
    return STAYS[target]
  if target.startswith("mplso.contrib."):
    return STAYS["mplso.contrib"]
  if target.endswith("_graph_rewrite"):
    return STAYS["mplso.graph_rewrite"]
  if target.endswith("LossScale"):
    return STAYS["mplso.LossScale"]
  return ""
