"""The Keras families of `mplso.keras.LossScaleOptimizer`, as tests see them.

`keras_families()` describes each family (its Keras, its optimizers, mplso's
wrapper and the family's own Keras class, and how they differ); the rest are
a model, data and a training step shared by the family tests.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
from typing import Any

import numpy as np
import tensorflow as tf

# How a training step drives the optimizer: TF 2.3's custom loop
# (`get_scaled_loss`, then `get_unscaled_gradients`), Keras 3's trainer
# (`scale_loss`, scaled gradients to `apply_gradients`), Keras's `fit`, or
# `minimize`.
TF_2_3, KERAS_TRAINER, FIT, MINIMIZE = (
    "tf_2_3", "keras_trainer", "fit", "minimize")


# The Keras families of mplso.keras.LossScaleOptimizer.


def _tf_keras_scale_and_counter(opt) -> tuple:
  return opt.loss_scale, opt.dynamic_counter


@dataclasses.dataclass(frozen=True)
class KerasFamily:
  """What the tests need to know of one Keras family of the wrapper.

  Where the family, its own Keras class or its optimizers behave differently
  from the other families, a field says so, and its comment says why. The
  defaults are the tf_keras families'.
  """

  name: str
  # The family's Keras package (layers, models, schedules, serialize) and
  # the module of its optimizers (SGD, Adam and their base, Optimizer).
  keras: Any
  optimizers: Any
  # mplso's wrapper class for the family, its registered name, and the
  # optimizers it accepts, as its errors name them.
  wrapper: type
  registered_name: str
  kind: str
  # The family's own Keras LossScaleOptimizer.
  own: type
  # Creates an optimizer's state for variables before a first step.
  build: Callable[[Any, list], None]
  # A variable's first and second moments as a (bare) Adam holds them, and
  # `get_slot`'s KeyError for an Adam's missing slot 'vhat'.
  adam_state: Callable[[Any, Any], tuple]
  missing_slot_error: str
  # Adam's slot names.
  adam_slots: tuple[str, str] = ("m", "v")
  # The name of the class `own` gives for an optimizer of the family, and
  # `(scale, good steps)` of one.
  own_class_name: str = "LossScaleOptimizer"
  own_scale_and_counter: Callable[[Any], tuple] = _tf_keras_scale_and_counter
  # The protocols the family's own class runs, its custom loop first: Keras
  # 3's has neither TF 2.3's methods nor `minimize`.
  own_protocols: tuple[str, ...] = (TF_2_3, FIT, MINIMIZE)
  # A variable of the kind the family's models hold, from a value.
  variable: Callable[[Any], Any] = tf.Variable
  # The formats `model.save` writes for the family's models.
  model_formats: tuple[str, ...] = ("keras", "h5", "saved_model")
  # Formats whose files hold no optimizer state: tf_keras's `.keras` saving
  # visits only tf_keras.optimizers.Optimizer, not OptimizerV2.
  formats_without_optimizer_state: tuple[str, ...] = ()
  # Keras 3's class leaves `iterations` on a skipped step; tf_keras's advance
  # it, as TF 2.3 documents and as mplso does in every family.
  own_counts_skipped_steps: bool = True
  # Keras 3's class has no fixed scale.
  own_has_fixed_scale: bool = True
  # OptimizerV2's `weights` (so its `.h5` files) are the wrapped optimizer's
  # alone, as TF 2.3's and tf_keras's wrappers' are.
  weights_hold_loss_scale: bool = True
  # The tf_keras families' wrappers stand in for the wrapped optimizer in
  # checkpoints, as tf_keras's classes do; Keras 3's, as Keras 3's class,
  # is an object of its own with the child `inner_optimizer`.
  checkpoints_as_own: bool = True
  # Keras 3's wrapper, an optimizer of its own as Keras 3's class is, keeps
  # an attribute set on it (and has its own `clipnorm` and `name`); Keras 3's
  # optimizers have no `iterations` setter.
  forwards_attribute_writes: bool = True
  # Keras 3's wrapper writes its `name` too, as Keras 3's class does.
  extra_config_keys: tuple[str, ...] = ()

  def sgd(self, learning_rate: float = 0.1):
    """A plain SGD optimizer of the family."""
    return self.optimizers.SGD(learning_rate)


@functools.cache
def keras_families() -> tuple[KerasFamily, ...]:
  """The three Keras families, imported when first asked for."""
  # pylint: disable=g-import-not-at-top,protected-access
  import keras
  import tf_keras

  from mplso._src.keras import keras3_optimizer
  from mplso._src.keras import optimizer_v2
  from mplso._src.keras import tf_keras_optimizer

  def keras3_state(adam, var):
    index = adam._get_variable_index(var)
    return adam._momentums[index], adam._velocities[index]

  def tf_keras_state(adam, var):
    index = adam._index_dict[adam._var_key(var)]
    return adam._momentums[index], adam._velocities[index]

  return (
      KerasFamily(
          name="keras3", keras=keras, optimizers=keras.optimizers,
          wrapper=keras3_optimizer.LossScaleOptimizer,
          registered_name="mplso>LossScaleOptimizer",
          kind="a keras.optimizers.Optimizer (Keras 3)",
          own=keras.optimizers.LossScaleOptimizer,
          build=lambda opt, var_list: opt.build(var_list),
          adam_state=keras3_state,
          missing_slot_error=(r"has no slot 'vhat'\. Its slots: "
                              r"\['momentum', 'velocity'\]"),
          adam_slots=("momentum", "velocity"),
          own_scale_and_counter=lambda o: (o.dynamic_scale, o.step_counter),
          own_protocols=(KERAS_TRAINER, FIT), variable=keras.Variable,
          model_formats=("keras",), own_counts_skipped_steps=False,
          own_has_fixed_scale=False, checkpoints_as_own=False,
          forwards_attribute_writes=False,
          extra_config_keys=("name",)),
      KerasFamily(
          name="optimizer_v2", keras=tf_keras,
          optimizers=tf_keras.optimizers.legacy,
          wrapper=optimizer_v2.LossScaleOptimizer,
          registered_name="mplso>LossScaleOptimizer",
          kind="a tf_keras.optimizers.legacy.Optimizer (Keras 2 OptimizerV2)",
          own=tf_keras.mixed_precision.LossScaleOptimizer,
          build=lambda opt, var_list: opt._create_all_weights(var_list),
          adam_state=lambda adam, var: (adam.get_slot(var, "m"),
                                        adam.get_slot(var, "v")),
          # OptimizerV2's own `get_slot`, which the wrapper forwards.
          missing_slot_error="^'vhat'$",
          formats_without_optimizer_state=("keras",),
          weights_hold_loss_scale=False),
      KerasFamily(
          name="tf_keras", keras=tf_keras, optimizers=tf_keras.optimizers,
          wrapper=tf_keras_optimizer.LossScaleOptimizer,
          registered_name="mplso>LossScaleOptimizerV3",
          kind="a tf_keras.optimizers.Optimizer (Keras 2 new optimizer)",
          own=tf_keras.mixed_precision.LossScaleOptimizer,
          build=lambda opt, var_list: opt.build(var_list),
          adam_state=tf_keras_state,
          missing_slot_error=r"has no slot 'vhat'\. Its slots: \['m', 'v'\]",
          own_class_name="LossScaleOptimizerV3"),
  )


def named_keras_families(
    where: Callable[[KerasFamily], bool] = lambda family: True) -> list:
  """`(name, family)` of each family `where` holds for, for named_parameters."""
  return [(f.name, f) for f in keras_families() if where(f)]


def optimizer_variables(optimizer) -> list:
  """An optimizer's variables, whether `variables` is a list or a method."""
  variables = optimizer.variables
  return list(variables() if callable(variables) else variables)


def keras_model(keras_module, seed: int = 0):
  """A model of `keras_module` with a dense and an embedding path.

  Its gradients are dense and `tf.IndexedSlices`. Under `mixed_float16` the
  layer "hidden" computes in float16; the output layer is float32.
  """
  keras_module.utils.set_random_seed(seed)
  x = keras_module.Input((4,))
  ids = keras_module.Input((2,), dtype="int32")
  embedded = keras_module.layers.Flatten()(
      keras_module.layers.Embedding(5, 3)(ids))
  hidden = keras_module.layers.Dense(8, activation="tanh", name="hidden")(
      keras_module.layers.Concatenate()([x, embedded]))
  out = keras_module.layers.Dense(1, dtype="float32")(hidden)
  return keras_module.Model([x, ids], out)


def keras_data(size: int, seed: int = 0):
  """`((x, ids), y)` for `keras_model`, `y` a function of `x` and `ids`."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(size, 4)).astype(np.float32)
  ids = rng.integers(0, 5, size=(size, 2)).astype(np.int32)
  y = (x @ np.array([[0.5], [-1.], [0.25], [1.]], np.float32) +
       0.2 * ids.sum(axis=1, keepdims=True).astype(np.float32))
  return (x, ids), y


def keras_batch(step: int, poison: dict[int, float] | None = None):
  """The 8 examples of `step`, one input `poison[step]` if there is one."""
  (x, ids), y = keras_data(8, seed=100 + step)
  if poison and step in poison:
    x[1, 2] = poison[step]
  return (x, ids), y


def keras_loss(model, batch):
  """The mean squared error of `model` on `batch`, in float32."""
  inputs, y = batch
  return tf.reduce_mean(tf.square(tf.cast(model(inputs), tf.float32) - y))



def keras_step(protocol: str, model, optimizer,
               use_function: bool = False) -> Callable[[Any], None]:
  """Returns `step(batch)`, one training step of `model` in `protocol`.

  `use_function` runs the custom loops in a `tf.function`; `fit` and
  `minimize` run as Keras runs them.
  """
  if protocol == FIT:
    model.compile(optimizer=optimizer, loss="mse")
    return lambda batch: model.train_on_batch(*batch)
  if protocol == MINIMIZE:
    return lambda batch: optimizer.minimize(
        lambda: keras_loss(model, batch), model.trainable_variables)

  def step(batch):
    variables = model.trainable_variables
    with tf.GradientTape() as tape:
      loss = keras_loss(model, batch)
      if protocol == KERAS_TRAINER:
        scaled_loss = optimizer.scale_loss(loss)
      else:
        scaled_loss = optimizer.get_scaled_loss(loss)
    grads = tape.gradient(scaled_loss, variables)
    if protocol == TF_2_3:
      grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, variables))

  if use_function:
    function = tf.function(step)
    return lambda batch: function(tf.nest.map_structure(tf.constant, batch))
  return step
