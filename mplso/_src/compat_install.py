"""Points TensorFlow's removed loss-scale names at mplso's classes, and back."""

from __future__ import annotations

import importlib
import sys
import types

import tensorflow as tf

from mplso._src import contrib_managers
from mplso._src import contrib_optimizer
from mplso._src import loss_scale
from mplso._src import v1_optimizer

_CONTRIB = "tensorflow.contrib"
_CONTRIB_MP = "tensorflow.contrib.mixed_precision"
_MISSING = object()

# What install() replaced: (namespace, name, original or _MISSING), in order.
_saved: list[tuple[object, str, object]] | None = None


def _contrib_mixed_precision() -> types.ModuleType:
  """Returns the `tf.contrib.mixed_precision` module mplso stands in for."""
  module = types.ModuleType(_CONTRIB_MP, "TF 1.x contrib mixed precision, "
                            "provided by mplso.contrib.")
  for cls in (contrib_optimizer.LossScaleOptimizer,
              contrib_managers.LossScaleManager,
              contrib_managers.FixedLossScaleManager,
              contrib_managers.ExponentialUpdateLossScaleManager):
    setattr(module, cls.__name__, cls)
  return module


def _namespace(name: str, doc: str, **members) -> types.ModuleType:
  module = types.ModuleType(name, doc)
  for member_name, member in members.items():
    setattr(module, member_name, member)
  return module


def _keras_experimental() -> types.ModuleType:
  """Returns TF 2.3's `tf.keras.mixed_precision.experimental`, on today's Keras.

  Besides the optimizer, TF 2.3 scripts call `set_policy` / `global_policy`
  there: they become today's `set_global_policy` / `global_policy` of the
  Keras that `tf.keras` is.
  """
  from mplso import keras as mplso_keras  # pylint: disable=g-import-not-at-top
  current = tf.keras.mixed_precision
  return _namespace(
      "tensorflow.keras.mixed_precision.experimental",
      "TF 2.3's Keras mixed precision, provided by mplso.keras.",
      LossScaleOptimizer=mplso_keras.LossScaleOptimizer,
      Policy=current.Policy,
      set_policy=current.set_global_policy,
      global_policy=current.global_policy)


def _keras_mixed_precision_modules() -> list[types.ModuleType]:
  """Returns each module object that scripts reach as tf.keras.mixed_precision.

  `tf.keras.mixed_precision` and `import tensorflow.keras.mixed_precision`
  can be two different module objects (TF's lazy Keras loader), and which one
  the attribute gives depends on whether the import happened first.
  """
  modules = [tf.keras.mixed_precision]
  modules.append(importlib.import_module("tensorflow.keras.mixed_precision"))
  modules.append(tf.keras.mixed_precision)
  unique = []
  for module in modules:
    if all(module is not seen for seen in unique):
      unique.append(module)
  return unique


def _table() -> list[tuple[object, str, object]]:
  """Every legacy name: (namespace, attribute, what it becomes)."""
  v1 = tf.compat.v1
  loss_scales = [loss_scale.LossScale, loss_scale.FixedLossScale,
                 loss_scale.DynamicLossScale]
  table = [(v1.train.experimental, "MixedPrecisionLossScaleOptimizer",
            v1_optimizer.MixedPrecisionLossScaleOptimizer),
           (v1.mixed_precision, "MixedPrecisionLossScaleOptimizer",
            v1_optimizer.MixedPrecisionLossScaleOptimizer)]
  for namespace in (v1.mixed_precision, v1.mixed_precision.experimental,
                    v1.train.experimental):
    table += [(namespace, cls.__name__, cls) for cls in loss_scales]
  contrib = types.ModuleType(_CONTRIB, "TF 1.x contrib, as far as mplso "
                             "provides it.")
  contrib.mixed_precision = _contrib_mixed_precision()
  table += [(sys.modules, _CONTRIB, contrib),
            (sys.modules, _CONTRIB_MP, contrib.mixed_precision),
            (tf, "contrib", contrib)]
  # TF 2.x's Keras optimizer, on whichever Keras `tf.keras` is, and the loss
  # scales it took, from `tf.mixed_precision.experimental`.
  keras_experimental = _keras_experimental()
  table += [(module, "experimental", keras_experimental)
            for module in _keras_mixed_precision_modules()]
  loss_scales_2 = _namespace(
      "tensorflow.mixed_precision.experimental",
      "TF 2.x loss scales, provided by mplso.",
      **{cls.__name__: cls for cls in loss_scales})
  mixed_precision = getattr(tf, "mixed_precision", None)
  if mixed_precision is None:
    mixed_precision = _namespace("tensorflow.mixed_precision",
                                 "TF 2.x mixed precision, provided by mplso.")
    table.append((tf, "mixed_precision", mixed_precision))
  table.append((mixed_precision, "experimental", loss_scales_2))
  return table


def _get(namespace, name):
  if isinstance(namespace, dict):
    return namespace.get(name, _MISSING)
  return getattr(namespace, name, _MISSING)


def _set(namespace, name, value):
  if isinstance(namespace, dict):
    if value is _MISSING:
      namespace.pop(name, None)
    else:
      namespace[name] = value
  elif value is _MISSING:
    if hasattr(namespace, name):
      delattr(namespace, name)
  else:
    setattr(namespace, name, value)


def install() -> None:
  """Makes TensorFlow's legacy loss-scale names resolve to mplso.

  Afterwards `tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer`,
  `tf.compat.v1.mixed_precision.{MixedPrecisionLossScaleOptimizer, LossScale,
  FixedLossScale, DynamicLossScale}` (also under `.experimental` and
  `tf.compat.v1.train.experimental`), `tf.contrib.mixed_precision.*`,
  `tf.keras.mixed_precision.experimental.LossScaleOptimizer` (with TF 2.3's
  `set_policy`, `global_policy` and `Policy` beside it; for whichever Keras
  `tf.keras` is) and `tf.mixed_precision.experimental.{LossScale,
  FixedLossScale, DynamicLossScale}` are mplso's. Calling it again changes nothing; `uninstall()` restores
  what was there.
  """
  global _saved
  if _saved is not None:
    return
  table = _table()
  _saved = [(namespace, name, _get(namespace, name))
            for namespace, name, _ in table]
  for namespace, name, value in table:
    _set(namespace, name, value)


def uninstall() -> None:
  """Restores every name `install()` replaced; a no-op when not installed."""
  global _saved
  if _saved is None:
    return
  for namespace, name, original in reversed(_saved):
    _set(namespace, name, original)
  _saved = None
