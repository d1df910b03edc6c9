"""Makes `compile` wrap a `mixed_float16` model's optimizer in mplso's class.

TF 2.4-2.15's `Model.compile` wrapped the optimizer of a `mixed_float16`
model in `tf.keras.mixed_precision.LossScaleOptimizer`, and code of that time
asks `isinstance(self.optimizer, tf.keras.mixed_precision.LossScaleOptimizer)`
before it scales its loss. Under `install()` that name is mplso's, so the
class `compile` wraps in must be too, or the check fails and the model
silently does not train. Keras 3's and tf_keras's `compile` look their own
class up in a module global; `patches()` names those globals and what
`install()` puts there.
"""

from __future__ import annotations

import importlib
import types

from mplso._src.keras import factory

# Where each Keras's `compile` finds the class it wraps in: (module, global,
# the class's name inside that global, or None for the global itself).
# tf_keras has two: `training` and, in TF1 graph mode (after
# `disable_eager_execution`), `training_v1`.
_SEAMS = {
    "keras": [("keras.src.trainers.trainer", "LossScaleOptimizer", None)],
    "tf_keras": [
        ("tf_keras.src.engine.training", "lso", "BaseLossScaleOptimizer"),
        ("tf_keras.src.engine.training_v1", "loss_scale_optimizer",
         "LossScaleOptimizer"),
    ],
}


class _WrapsInMplso:
  """Stands in for a Keras's loss-scale class where its `compile` reads it.

  `isinstance(optimizer, stand_in)` is True for any loss-scale optimizer, the
  Keras's own or mplso's, so `compile` keeps one it is given;
  `stand_in(optimizer, **kwargs)` returns
  `mplso.keras.LossScaleOptimizer(optimizer, **kwargs)`, whose default dynamic
  scale is both Keras's (2**15, doubling after 2000 finite steps).
  """

  def __instancecheck__(self, instance) -> bool:
    return factory.scales_loss(instance)

  def __call__(self, optimizer, **kwargs):
    return factory.LossScaleOptimizer(optimizer, **kwargs)


def patches(keras_3: bool) -> list[tuple[object, str, object]]:
  """Returns `[(module, global, value)]`: the global `install()` replaces.

  Args:
    keras_3: whether `tf.keras` is Keras 3 (else tf_keras).
  """
  found = []
  for module_name, name, member in _SEAMS["keras" if keras_3 else "tf_keras"]:
    module = importlib.import_module(module_name)
    if member is None:
      found.append((module, name, _WrapsInMplso()))
      continue
    # A copy of the module the global holds, with the one class replaced:
    # whatever else `compile`'s module reads there stays the same.
    copy = types.SimpleNamespace(**vars(getattr(module, name)))
    setattr(copy, member, _WrapsInMplso())
    found.append((module, name, copy))
  return found
