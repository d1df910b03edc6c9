"""The data, expected results and optimizer families of the distribution tests.

Every family trains the same linear model on the same global batches
(`BATCHES`); one replica's part of some batches holds a NaN or an Inf. The
data are small integers, the batch size, learning rate and loss scales powers
of two, so every sum is exact whatever the all-reduce order. Used by
`distribute_test`, `multiworker_fault_test` and their worker processes
(`mplso_test.helpers.workers.multiworker_worker`,
`mplso_test.helpers.workers.multiworker_fault_worker`).
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
import tf_keras

import mplso
import mplso.contrib
import mplso.keras
from mplso_test.helpers import testing

GLOBAL_BATCH = 8
W0 = [[1.], [2.], [-1.]]
LR = 0.5
# Row of the global batch that gets a NaN or an Inf: row 4 lands on replica
# 1 of 2 and replica 2 of 4, row 7 on the last replica.
SCHEDULE = [None, (testing.NAN, 4), None, None, (testing.INF, 7), None, None,
            None]
# Loss scale 16, growing after 2 finite steps, halving on each poisoned one.
EXPECTED = {"scale": 16., "good_steps": 1, "applied": 6, "steps": 8}


def _batch(step: int, poison=None) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(step)
  x = rng.integers(-3, 4, size=(GLOBAL_BATCH, 3)).astype(np.float32)
  t = (rng.integers(1, 4, size=(GLOBAL_BATCH, 1)) *
       rng.choice([-1, 1], size=(GLOBAL_BATCH, 1))).astype(np.float32)
  if poison is not None:
    value, row = poison
    x[row, 0] = value
  return x, t


BATCHES = [_batch(i, p) for i, p in enumerate(SCHEDULE)]


def _loss(w, x, t):
  """The replica's share of the global batch's loss (sum / global size)."""
  return tf.reduce_sum(tf.matmul(x, w) * t) / GLOBAL_BATCH


def replica_slice(x, t):
  """This replica's rows of the global batch."""
  context = tf.distribute.get_replica_context()
  size = GLOBAL_BATCH // context.num_replicas_in_sync
  start = context.replica_id_in_sync_group * size
  return x[start:start + size], t[start:start + size]


def local_values(strategy, value) -> list[np.ndarray]:
  """Every replica's copy of `value` (a variable, or a tensor read once)."""
  if isinstance(value, keras.Variable):
    value = value.value
  if isinstance(value, tf.Variable):
    return [np.asarray(v) for v in strategy.experimental_local_results(value)]
  return [np.asarray(value)]


def _named(variables, name):
  return next(v for v in variables if v.name.split(":")[0].endswith(name))


class _Family:
  """One optimizer family: its model, optimizer and one replica's step."""

  def __init__(self, make_optimizer):
    self._make_optimizer = make_optimizer

  def build(self) -> None:
    """Creates the model and the optimizer (in the strategy's scope)."""
    self.w = tf.Variable(W0, name="w")
    self.opt = self._make_optimizer()

  def replica_step(self, x, t) -> None:
    raise NotImplementedError

  def apply_in_cross_replica_context(self) -> None:
    """Calls apply_gradients outside any replica context."""
    self.opt.apply_gradients([(tf.ones_like(self.w), self.w)])

  def train(self, strategy, batches) -> None:

    @tf.function(autograph=False)
    def step(x, t):
      strategy.run(lambda x, t: self.replica_step(*replica_slice(x, t)),
                   args=(x, t))

    for x, t in batches:
      step(tf.constant(x), tf.constant(t))

  def state(self) -> dict[str, object]:
    """Variables (or tensors) by name: var, scale, good_steps, steps, ..."""
    raise NotImplementedError

  def trackables(self) -> dict[str, object]:
    """What a checkpoint of this family holds."""
    return {"w": self.w, "optimizer": self.opt}


class V1(_Family):
  """The TF1 optimizers: compute_gradients, apply_gradients(global_step)."""

  def build(self):
    super().build()
    # As tf.compat.v1.train.create_global_step makes it.
    self.global_step = tf.Variable(
        0, dtype=tf.int64, trainable=False, name="global_step",
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

  def replica_step(self, x, t):
    grads_and_vars = self.opt.compute_gradients(
        lambda: _loss(self.w, x, t), var_list=[self.w])
    return self.opt.apply_gradients(grads_and_vars,
                                    global_step=self.global_step)

  def state(self):
    variables = self.opt.variables()
    state = {"var": self.w, "scale": _named(variables, "loss_scale"),
             "good_steps": _named(variables, "good_steps"),
             "applied": self.global_step}
    if isinstance(self.opt, mplso.MixedPrecisionLossScaleOptimizer):
      state["scale"] = self.opt.loss_scale.variables[0]
      state.update({v.name.split(":")[0]: v
                    for v in self.opt.loss_scale.variables[2:]})
    return state

  def trackables(self):
    return {**super().trackables(), "global_step": self.global_step}


class KerasRun(_Family):
  """A Keras optimizer in a custom loop under strategy.run.

  `protocol` is "tf23" (get_scaled_loss, get_unscaled_gradients, then
  unscaled gradients to apply_gradients) or "keras3" (scale_loss, then
  scaled gradients to apply_gradients). With `aggregate=False` the loop sums
  the gradients across replicas itself and passes
  `experimental_aggregate_gradients=False`.
  """

  def __init__(self, make_optimizer, protocol="tf23", aggregate=True):
    super().__init__(make_optimizer)
    self._protocol = protocol
    self._aggregate = aggregate

  def replica_step(self, x, t):
    with tf.GradientTape() as tape:
      loss = _loss(self.w, x, t)
      if self._protocol == "keras3":
        scaled_loss = self.opt.scale_loss(loss)
      else:
        scaled_loss = self.opt.get_scaled_loss(loss)
    grads = tape.gradient(scaled_loss, [self.w])
    if self._protocol == "tf23":
      grads = self.opt.get_unscaled_gradients(grads)
    if self._aggregate:
      self.opt.apply_gradients(zip(grads, [self.w]))
    else:
      grads = tf.distribute.get_replica_context().all_reduce(
          tf.distribute.ReduceOp.SUM, grads)
      self.opt.apply_gradients(zip(grads, [self.w]),
                               experimental_aggregate_gradients=False)

  def state(self):
    opt = self.opt
    if isinstance(getattr(opt, "loss_scale", None), mplso.LossScale):
      scale, good_steps = opt.loss_scale.variables
    elif isinstance(opt, keras.optimizers.LossScaleOptimizer):  # Keras 3's.
      scale, good_steps = opt.dynamic_scale, opt.step_counter
    else:  # tf_keras's.
      scale, good_steps = opt.loss_scale, opt.dynamic_counter
    return {"var": self.w, "scale": scale, "good_steps": good_steps,
            "steps": opt.iterations}


class _Keras3Fit(KerasRun):
  """Keras 3's `Model.fit`, which scales the loss with `scale_loss`."""

  def build(self):
    self.model = keras.Sequential([
        keras.Input((3,)),
        keras.layers.Dense(1, use_bias=False,
                           kernel_initializer=keras.initializers.Constant(
                               np.array(W0)))])
    self.w = self.model.trainable_variables[0]
    self.opt = self._make_optimizer()
    # Per example: (x @ w) * t; fit averages over the global batch.
    self.model.compile(optimizer=self.opt,
                       loss=lambda t, y: tf.reduce_sum(t * y, axis=-1))

  def train(self, strategy, batches):
    del strategy  # The model's own, from the scope it was built in.
    x = np.concatenate([x for x, _ in batches])
    t = np.concatenate([t for _, t in batches])
    self.model.fit(x, t, batch_size=GLOBAL_BATCH, shuffle=False, epochs=1,
                   verbose=0)

  def trackables(self):
    return {"model": self.model, "optimizer": self.opt}


def dynamic():
  """The loss scale of mplso's families: 16, doubling after 2 finite steps."""
  return mplso.DynamicLossScale(initial_loss_scale=16, increment_period=2)


def _ours(optimizer):
  return lambda: mplso.keras.LossScaleOptimizer(optimizer(LR), dynamic())


# mplso's families, by readable id.
FAMILIES = {
    "v1": lambda: V1(lambda: mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(LR), dynamic())),
    "contrib": lambda: V1(lambda: mplso.contrib.LossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(LR),
        mplso.contrib.ExponentialUpdateLossScaleManager(
            16, 2, decr_every_n_nan_or_inf=1, decr_ratio=0.5))),
    "keras3_run": lambda: KerasRun(_ours(keras.optimizers.SGD)),
    "keras3_run_keras3_protocol": lambda: KerasRun(
        _ours(keras.optimizers.SGD), protocol="keras3"),
    "keras3_fit": lambda: _Keras3Fit(_ours(keras.optimizers.SGD)),
    "optimizer_v2": lambda: KerasRun(_ours(tf_keras.optimizers.legacy.SGD)),
    "optimizer_v2_own_all_reduce": lambda: KerasRun(
        _ours(tf_keras.optimizers.legacy.SGD), aggregate=False),
    "tf_keras": lambda: KerasRun(_ours(tf_keras.optimizers.SGD)),
    "tf_keras_own_all_reduce": lambda: KerasRun(
        _ours(tf_keras.optimizers.SGD), aggregate=False),
}


def _tf_keras_lso(optimizer):
  return lambda: tf_keras.mixed_precision.LossScaleOptimizer(
      optimizer(LR), initial_scale=16, dynamic_growth_steps=2)


def _keras3_lso():
  return keras.optimizers.LossScaleOptimizer(
      keras.optimizers.SGD(LR), initial_scale=16, dynamic_growth_steps=2)


# TF's own wrappers, by the id of the mplso family they are compared with.
TF_FAMILIES = {
    "v1": lambda: V1(
        lambda: tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(LR),
            tf.compat.v1.mixed_precision.DynamicLossScale(
                initial_loss_scale=16, increment_period=2))),
    "keras3_run_keras3_protocol": lambda: KerasRun(_keras3_lso,
                                                   protocol="keras3"),
    "keras3_fit": lambda: _Keras3Fit(_keras3_lso),
    "optimizer_v2": lambda: KerasRun(
        _tf_keras_lso(tf_keras.optimizers.legacy.SGD)),
    "optimizer_v2_own_all_reduce": lambda: KerasRun(
        _tf_keras_lso(tf_keras.optimizers.legacy.SGD), aggregate=False),
    "tf_keras": lambda: KerasRun(_tf_keras_lso(tf_keras.optimizers.SGD)),
    "tf_keras_own_all_reduce": lambda: KerasRun(
        _tf_keras_lso(tf_keras.optimizers.SGD), aggregate=False),
}


MOMENTUM = 0.5  # A power of two: the slots stay exact.

# The families of `multiworker_fault_worker`: the TF1 wrapper under
# tf.function and the Keras 3 wrapper, both via strategy.run, with momentum so
# that there are slots to restore.
MOMENTUM_FAMILIES = {
    "v1": lambda: V1(
        lambda: mplso.MixedPrecisionLossScaleOptimizer(
            tf.compat.v1.train.MomentumOptimizer(LR, MOMENTUM), dynamic())),
    "keras3_run": lambda: KerasRun(
        lambda: mplso.keras.LossScaleOptimizer(
            keras.optimizers.SGD(LR, momentum=MOMENTUM), dynamic())),
}


def train(family, strategy=None, batches=BATCHES):
  """Builds `family` in `strategy`'s scope and trains it on `batches`.

  Returns:
    Every replica's state, by name. Without `strategy`, one device.
  """
  strategy = strategy or tf.distribute.get_strategy()
  with strategy.scope():
    family.build()
  family.train(strategy, batches)
  return {name: local_values(strategy, value)
          for name, value in family.state().items()}

