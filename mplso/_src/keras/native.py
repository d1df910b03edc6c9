"""`to_native` / `from_native`: mplso's Keras wrapper to Keras's own, and back.

The exit ramp for training state: a run trained with
`mplso.keras.LossScaleOptimizer` goes on with Keras's own
`LossScaleOptimizer`, or the other way round, without losing its state. The
state that matters is

  * the wrapped optimizer's (`iterations`, slots, hyperparameters): the new
    wrapper wraps the very same optimizer object, so it is carried as it is;
  * the loss scale's: the current scale and the good-step count (finite
    steps since the scale last grew or shrank), copied into the new
    wrapper's variables, with the same growth interval.

Keras's own classes have one rule, a dynamic scale that doubles after
`dynamic_growth_steps` finite steps and halves on a non-finite one (and,
tf_keras only, a fixed scale); an mplso scale with another rule is refused
rather than changed.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from mplso._src.core import calibration
from mplso._src.core import tf_seams
from mplso._src.keras import factory
from mplso._src.loss_scales import loss_scale as loss_scale_lib

# The loss scales' state variables and Keras's wrappers' marks are private
# by name only: the wrappers themselves set them the same way.
# pylint: disable=protected-access

# What each function accepts, for its TypeError.
_ACCEPTS_MPLSO = (
    "an mplso.keras.LossScaleOptimizer (mplso's wrapper of a Keras 3 "
    "keras.optimizers.Optimizer, a tf_keras.optimizers.Optimizer or a "
    "tf_keras.optimizers.legacy.Optimizer)")
_ACCEPTS_NATIVE = (
    "Keras's own LossScaleOptimizer: Keras 3's "
    "keras.optimizers.LossScaleOptimizer, or tf_keras's "
    "tf_keras.mixed_precision.LossScaleOptimizer (either of its classes)")

# The checkpoint links that a tf_keras wrapper adds to the optimizer it wraps
# (its loss scale; tf_keras's OptimizerV2 wrapper, also a link back for TF
# 2.2's checkpoints).
_TF_KERAS_LINKS = ("loss_scale", "base_optimizer")


def to_native(optimizer):
  """Returns Keras's own `LossScaleOptimizer` in place of mplso's wrapper.

  The result wraps the same optimizer object as `optimizer`: `iterations`,
  slots and hyperparameters, which live there, carry over as they are. Its
  loss scale starts where `optimizer`'s is: the current scale, the good-step
  count (finite steps since the scale last changed) and the growth interval
  (`dynamic_growth_steps`). The initial scale (in its config) stays the
  initial one, except on Keras 3 before the first step (below).

  The class is the one of the wrapped optimizer's Keras:
  `keras.optimizers.LossScaleOptimizer` for a Keras 3 optimizer,
  `tf_keras.mixed_precision.LossScaleOptimizer` (which builds tf_keras's
  `LossScaleOptimizerV3` for a `tf_keras.optimizers.Optimizer`) for a
  tf_keras one; a fixed mplso scale becomes tf_keras's `dynamic=False`.

  Use the result from then on (compile the model with it again), and not
  `optimizer`: both wrap one optimizer. Under tf_keras the wrapped
  optimizer's checkpoint link `loss_scale` moves to the new scale, so a
  checkpoint of the model holds the result's state.

  How Keras's own classes behave differently from mplso's wrapper:

    * Keras 3's: a skipped (non-finite) step does not advance `iterations`
      (mplso's and tf_keras's do, as TF 2.3 documents), so schedules and
      `iterations`-based logic drift by the number of skipped steps; the
      scale has no floor (mplso's and tf_keras's stop at 1) and doubles even
      past float32's range; there is no fixed scale (so one is refused).
    * tf_keras's: a fixed scale applies a step with NaN or Inf gradients
      (mplso's skips it).
    * Both: `get_config` writes their own format, not TF 2.3's; there is no
      `min_loss_scale`, `max_loss_scale`, `hysteresis` or `stall_limit`.

  Before the first step: tf_keras's scale variables exist from the start and
  get the state. Keras 3's class creates its own when it is built; if the
  wrapped optimizer is built already, the result is built on its variables
  and gets the state; if not, it is built by its first step, so the current
  scale becomes its `initial_scale` and the good-step count must be 0.

  Call it eagerly, outside `tf.function` and `strategy.run`. The new
  variables are made under the `tf.distribute` strategy that made
  `optimizer`'s loss scale (its scope is entered if the call is outside
  it); a call inside the scope of another strategy is refused.

  Args:
    optimizer: an `mplso.keras.LossScaleOptimizer`, as built or trained.

  Returns:
    Keras's own `LossScaleOptimizer`, wrapping `optimizer.inner_optimizer`.

  Raises:
    TypeError: if `optimizer` is not mplso's Keras wrapper.
    ValueError: if Keras's class cannot hold its loss scale: a multiplier
      other than 2, a custom `LossScale`, `min_loss_scale`,
      `max_loss_scale`, `hysteresis` or `stall_limit` set, a fixed scale on
      Keras 3, or (Keras 3, wrapped optimizer not built) a non-zero
      good-step count, or an `initial_scale="calibrate"` that has not
      calibrated yet (after it has, the current scale is the result's
      `initial_scale`); or if the call is under another strategy's scope.
      Nothing has changed then.
    RuntimeError: if called inside a `tf.function` or in a replica context.
  """
  _check_context("to_native")
  if not isinstance(optimizer, factory.wrapper_classes()):
    hint = (" It is Keras's own LossScaleOptimizer already; from_native "
            "turns one into mplso's."
            if factory.scales_loss(optimizer) else "")
    raise TypeError(
        "to_native() takes an mplso.keras.LossScaleOptimizer. Received: "
        f"{optimizer!r} of type {_type_name(optimizer)}. Accepted: "
        f"{_ACCEPTS_MPLSO}.{hint}")
  inner = optimizer.inner_optimizer
  keras_3 = factory.package_of(factory.family_of(inner)) == "keras"
  loss_scale = optimizer._loss_scale
  dynamic, initial_scale, growth_steps = _native_rule(loss_scale, keras_3)
  scale = _read(loss_scale(), float) if dynamic else None
  good_steps = _read(optimizer.dynamic_counter, int) if dynamic else None
  if calibration.is_calibrate(initial_scale):
    initial_scale = _calibrated_initial(scale, good_steps)
  strategy = _strategy_of(list(loss_scale.variables) + _variables_of(inner))
  if keras_3:
    return _to_keras_3(optimizer, inner, initial_scale, growth_steps, scale,
                       good_steps, strategy)
  with _scope_of(strategy, "to_native"):
    with _released(inner):
      native = _own_class(keras_3)(
          inner, dynamic=dynamic, initial_scale=initial_scale,
          dynamic_growth_steps=growth_steps)
    if dynamic:
      native._loss_scale.current_loss_scale.assign(scale)
      native.dynamic_counter.assign(good_steps)
  return native


def from_native(optimizer):
  """Returns `mplso.keras.LossScaleOptimizer` in place of Keras's own.

  The reverse of `to_native`: the result wraps the same optimizer object
  (`iterations`, slots and hyperparameters carry over as they are), with a
  loss scale in the TF 2.4-2.15 / Keras 3 dialect (`loss_scale` reads as the
  current scale) that starts where `optimizer`'s is: the current scale, the
  good-step count and the growth interval, the initial scale as its config's.
  Keras's rule is mplso's `DynamicLossScale(initial_scale,
  dynamic_growth_steps, multiplier=2)`; tf_keras's `dynamic=False`, a
  `FixedLossScale`. Keras 3's class not built yet has its initial state.

  From then on the differences `to_native` lists apply the other way: for a
  Keras 3 optimizer a skipped step advances `iterations` again, the scale
  stops at 1 and a fixed tf_keras scale skips non-finite steps. Use the
  result (compile the model with it again), and not `optimizer`.

  Call it eagerly, outside `tf.function` and `strategy.run`; the new loss
  scale is made under the strategy that made `optimizer`'s variables, as in
  `to_native`.

  Args:
    optimizer: Keras 3's `keras.optimizers.LossScaleOptimizer` or tf_keras's
      `tf_keras.mixed_precision.LossScaleOptimizer`.

  Returns:
    An `mplso.keras.LossScaleOptimizer`, wrapping
    `optimizer.inner_optimizer`.

  Raises:
    TypeError: if `optimizer` is not Keras's own loss-scale optimizer (mplso's
      wrapper included).
    ValueError: if its scale is below 1 (Keras 3's has no floor; mplso's
      scale cannot go there), if mplso refuses its `initial_scale` or
      `dynamic_growth_steps`, or if the call is under another strategy's
      scope. Nothing has changed then.
    RuntimeError: if called inside a `tf.function` or in a replica context.
  """
  _check_context("from_native")
  if (isinstance(optimizer, factory.wrapper_classes()) or
      not factory.scales_loss(optimizer)):
    hint = (" It is mplso's already; to_native turns one into Keras's own."
            if isinstance(optimizer, factory.wrapper_classes()) else "")
    raise TypeError(
        "from_native() takes Keras's own LossScaleOptimizer. Received: "
        f"{optimizer!r} of type {_type_name(optimizer)}. Accepted: "
        f"{_ACCEPTS_NATIVE}.{hint}")
  inner = optimizer.inner_optimizer
  family = factory.family_of(inner)
  keras_3 = factory.package_of(family) == "keras"
  if keras_3:
    dynamic = True
    built = optimizer.built
    own_variables = ([optimizer.dynamic_scale, optimizer.step_counter]
                     if built else [])
    scale = _read(optimizer.dynamic_scale, float) if built else None
    good_steps = _read(optimizer.step_counter, int) if built else 0
    kwargs = {"name": optimizer.name}
  else:
    dynamic = optimizer.dynamic
    own_variables = ([optimizer._loss_scale.current_loss_scale,
                      optimizer.dynamic_counter] if dynamic else [])
    scale = _read(optimizer.loss_scale, float) if dynamic else None
    good_steps = _read(optimizer.dynamic_counter, int) if dynamic else None
    kwargs = {}
  if scale is not None and scale < 1:
    raise ValueError(
        f"The loss scale is {scale!r}, below 1, which mplso's "
        "DynamicLossScale never goes to (its floor is 1; Keras 3's class has "
        "none). Accepted: a current scale >= 1. Keep Keras's class, or "
        "assign a scale >= 1 to `optimizer.dynamic_scale` first.")
  strategy = _strategy_of(own_variables + _variables_of(inner))
  with _scope_of(strategy, "from_native"):
    with contextlib.nullcontext() if keras_3 else _released(inner):
      wrapper = family(inner, dynamic=dynamic,
                       initial_scale=optimizer.initial_scale,
                       dynamic_growth_steps=optimizer.dynamic_growth_steps,
                       **kwargs)
    if scale is not None:
      wrapper._loss_scale._current_loss_scale.assign(scale)
      wrapper.dynamic_counter.assign(good_steps)
  return wrapper


def _to_keras_3(optimizer, inner, initial_scale, growth_steps, scale,
                good_steps, strategy):
  """`to_native` for a Keras 3 optimizer (whose class builds its scale late).

  Keras 3's class creates `dynamic_scale` and `step_counter` in `build`. On
  a built optimizer it is built now, on the optimizer's variables (its
  `build` builds the wrapped optimizer too, which Keras's optimizers skip
  when built, as they do when Keras's class wraps a built one), and given
  the state; otherwise its first step builds it from `initial_scale`.
  """
  built = inner.built
  if not built and good_steps != 0:
    raise ValueError(
        f"The good-step count is {good_steps}, but the wrapped Keras 3 "
        "optimizer is not built yet, so Keras 3's LossScaleOptimizer would "
        "start it at 0 when its first step builds it. Accepted: a built "
        "optimizer, or a count of 0. Build it first: "
        "`optimizer.build(model.trainable_variables)`.")
  with _scope_of(strategy, "to_native"):
    native = _own_class(True)(
        inner, initial_scale=initial_scale if built else scale,
        dynamic_growth_steps=growth_steps, name=optimizer.name)
    if built:
      native.build(list(inner._trainable_variables))
      native.dynamic_scale.assign(scale)
      native.step_counter.assign(good_steps)
  return native


def _calibrated_initial(scale: float, good_steps: int) -> float:
  """The initial scale Keras's class gets for a calibrated mplso scale.

  Keras's classes cannot calibrate: once the scale has, its current value
  stands in for `"calibrate"` in their config.

  Raises:
    ValueError: if the scale has not calibrated yet (no step has run).
  """
  if good_steps < 0:
    raise ValueError(
        "Keras's own LossScaleOptimizer cannot calibrate its initial scale, "
        "and this optimizer's (initial_scale='calibrate') has not calibrated "
        "yet: it does so on its first step. Run a step first, or keep "
        "mplso's wrapper.")
  return scale


def _native_rule(loss_scale, keras_3: bool) -> tuple:
  """`(dynamic, initial_scale, dynamic_growth_steps)` for Keras's class.

  Raises:
    ValueError: if Keras's class cannot follow `loss_scale`'s rule.
  """
  keras = "Keras 3's" if keras_3 else "tf_keras's"
  # The classes themselves: a subclass may change the rule.
  kind = type(loss_scale)
  if kind is loss_scale_lib.FixedLossScale:
    if keras_3:
      raise ValueError(
          "Keras 3's LossScaleOptimizer has no fixed scale (it refuses "
          f"dynamic=False); this optimizer's is {loss_scale!r}. Accepted on "
          "Keras 3: a dynamic scale, mplso.DynamicLossScale with "
          "multiplier 2 (initial_scale / dynamic_growth_steps). Keep mplso's "
          "wrapper for a fixed scale.")
    return False, loss_scale.loss_scale_value, None
  if kind is not loss_scale_lib.DynamicLossScale:
    raise ValueError(
        f"{keras} LossScaleOptimizer cannot follow a custom loss scale: "
        f"{loss_scale!r} (of type {_type_name(loss_scale)}). Accepted: "
        "mplso.DynamicLossScale with multiplier 2"
        + ("" if keras_3 else ", or mplso.FixedLossScale") + ".")
  if loss_scale.multiplier != 2:
    raise ValueError(
        f"{keras} LossScaleOptimizer doubles and halves its scale; this "
        f"optimizer's DynamicLossScale has multiplier={loss_scale.multiplier!r}"
        ". Accepted: multiplier=2.")
  extensions = loss_scale_lib.DynamicLossScale._EXTENSION_DEFAULTS
  for name, default in extensions.items():
    value = getattr(loss_scale, name)
    if value != default:
      raise ValueError(
          f"{keras} LossScaleOptimizer has no {name}; this optimizer's "
          f"DynamicLossScale has {name}={value!r}. Accepted: {name}="
          f"{default!r}, the default.")
  return True, loss_scale.initial_loss_scale, loss_scale.increment_period


def _own_class(keras_3: bool) -> type:
  """Keras's own `LossScaleOptimizer` of Keras 3 or of tf_keras.

  The classes as the family modules imported them: `mplso.compat` may have
  pointed the public names at mplso's class since.
  """
  # pylint: disable=g-import-not-at-top
  if keras_3:
    from mplso._src.keras import keras3_optimizer
    return keras3_optimizer._KerasLossScaleOptimizer
  from mplso._src.keras import tf_keras_base
  return tf_keras_base.TfKerasLossScaleOptimizer


@contextlib.contextmanager
def _released(inner):
  """Frees `inner` of its tf_keras-style wrapper for a new one to wrap it.

  Both tf_keras families' wrappers, tf_keras's and mplso's, mark the optimizer
  they wrap (and refuse a marked one) and link their loss scale into its
  checkpoint children as `loss_scale`, which the new wrapper links anew.
  Everything is put back if the new wrapper is not made.
  """
  marked = getattr(inner, "_is_wrapped_by_loss_scale_optimizer", False)
  with tf_seams.checkpoint_links_dropped(inner, _TF_KERAS_LINKS):
    inner._is_wrapped_by_loss_scale_optimizer = False
    try:
      yield
    except BaseException:
      inner._is_wrapped_by_loss_scale_optimizer = marked
      raise


def _check_context(name: str) -> None:
  if not tf.executing_eagerly():
    raise RuntimeError(
        f"{name}() must run eagerly: call it outside any tf.function (it "
        "reads the loss scale's state and creates variables).")
  if tf.distribute.has_strategy() and not (
      tf.distribute.in_cross_replica_context()):
    raise RuntimeError(
        f"{name}() must not run in a replica context (inside "
        "strategy.run): call it outside strategy.run, in the strategy's "
        "scope or outside it.")


# Marks "no variable to tell the strategy by": the new ones go where the call
# runs.
_ANY = object()


def _strategy_of(variables):
  """The strategy whose scope made `variables` (None: no strategy's).

  Read off the first variable (Keras 3's wrap a `tf.Variable`); `_ANY` when
  there is none.
  """
  for variable in variables:
    variable = getattr(variable, "_value", variable)  # Keras 3's Variable.
    return tf_seams.variable_strategy(variable)
  return _ANY


def _scope_of(strategy, name: str):
  """Enters `strategy`'s scope, unless the call is in it already.

  Raises:
    ValueError: if the call runs in the scope of another strategy (or of
      one, while `strategy` is None): the new variables would be made there,
      unlike the ones they stand beside.
  """
  current = (tf.distribute.get_strategy() if tf.distribute.has_strategy()
             else None)
  if strategy is _ANY or current is strategy:
    return contextlib.nullcontext()
  if current is None:
    return strategy.scope()
  made = ("outside any tf.distribute strategy" if strategy is None else
          f"under another {type(strategy).__name__}")
  raise ValueError(
      f"{name}() runs in the scope of a {type(current).__name__}, but the "
      f"optimizer's variables were made {made}: the new loss-scale "
      "variables must be made where those were. Call it outside any "
      "strategy's scope (it enters the one that made them), or in that "
      "strategy's scope.")


def _read(value, kind: type):
  """A scalar variable's or tensor's value (a mirrored one's too) as `kind`."""
  return kind(tf.convert_to_tensor(value).numpy())


def _variables_of(optimizer) -> list:
  """An optimizer's variables, whether `variables` is a list or a method."""
  variables = optimizer.variables
  return list(variables() if callable(variables) else variables)


def _type_name(value) -> str:
  kind = type(value)
  return f"{kind.__module__}.{kind.__qualname__}"
