"""Points TensorFlow's removed loss-scale names at mplso's classes, and back."""

from __future__ import annotations

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
  `tf.compat.v1.train.experimental`) and `tf.contrib.mixed_precision.*` are
  mplso's classes. Calling it again changes nothing; `uninstall()` restores
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
