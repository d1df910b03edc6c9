"""Shared test helpers: execution modes and a runner that drives a step in each."""

from __future__ import annotations

import collections
from collections.abc import Callable
import contextlib
import dataclasses
import functools
import json
import os
import socket
import subprocess
import sys
from typing import Any

import numpy as np
import tensorflow as tf

# The execution modes every TF1-family behaviour is tested in.
GRAPH, EAGER, FUNCTION = "graph", "eager", "function"
MODES = (GRAPH, EAGER, FUNCTION)
NAMED_MODES = [(m, m) for m in MODES]  # For parameterized.named_parameters.

NAN, INF = float("nan"), float("inf")


class ModeRunner:
  """Builds a training step once and runs it in graph, eager or tf.function mode.

  In graph mode everything happens in a fresh `tf.Graph` with a `Session`, as
  TF1 code does; the step is built once and `session.run` many times.

  Use as a context manager:

      with ModeRunner(mode) as runner:
        var = tf.Variable(...)
        step = runner.step(lambda: opt.minimize(loss, ...))
        runner.initialize()
        step()
        runner.read(var)
  """

  def __init__(self, mode: str):
    self.mode = mode
    self._stack = contextlib.ExitStack()
    self.session = None

  def __enter__(self) -> "ModeRunner":
    if self.mode == GRAPH:
      graph = self._stack.enter_context(tf.Graph().as_default())
      self.session = self._stack.enter_context(
          tf.compat.v1.Session(graph=graph))
    return self

  def __exit__(self, *exc):
    self._stack.close()

  @property
  def graph_mode(self) -> bool:
    return self.mode == GRAPH

  def step(self, build: Callable[[], object]) -> Callable[[], None]:
    """Returns a callable that performs the step that `build` creates."""
    if self.mode == GRAPH:
      op = build()
      return lambda: self.session.run(op)
    if self.mode == FUNCTION:
      function = tf.function(lambda: (build(), None)[1], autograph=False)
      return function
    return lambda: (build(), None)[1]

  def initialize(self) -> None:
    """Initialises all variables (graph mode only; a no-op otherwise)."""
    if self.mode == GRAPH:
      self.session.run(tf.compat.v1.global_variables_initializer())

  def read(self, value):
    """Returns the numpy value of a tensor, variable or nest of them."""
    if self.mode == GRAPH:
      return self.session.run(value)
    return tf.nest.map_structure(lambda v: np.asarray(v), value)

  def assign(self, var: tf.Variable, value) -> None:
    """Sets `var` to `value` outside any step."""
    if self.mode == GRAPH:
      var.load(value, self.session)
    else:
      var.assign(value)

  def run(self, fetch):
    """Evaluates `fetch` built in the runner's context (graph) or now (eager)."""
    if self.mode == GRAPH:
      return self.session.run(fetch)
    return fetch


class TinyModel:
  """Dense and embedding variables whose gradients the tests control.

      loss = sum((x @ w + b) * t) + sum(embedding_lookup(emb, ids) * u)

  Writing NaN/Inf into `x` makes only `w`'s (dense) gradient non-finite;
  writing it into `u` makes only `emb`'s (`tf.IndexedSlices`) gradient
  non-finite. The data live in non-trainable variables, so one built step can
  be fed a new batch in every mode.
  """

  def __init__(self, seed: int = 0):
    rng = np.random.default_rng(seed)
    self.w = tf.Variable(rng.normal(size=(3, 2)).astype(np.float32), name="w")
    self.b = tf.Variable(np.zeros(2, np.float32), name="b")
    self.emb = tf.Variable(rng.normal(size=(6, 2)).astype(np.float32),
                           name="emb")
    self.x = tf.Variable(np.zeros((4, 3), np.float32), trainable=False,
                         name="x")
    self.t = tf.Variable(np.zeros((4, 2), np.float32), trainable=False,
                         name="t")
    self.u = tf.Variable(np.zeros((3, 2), np.float32), trainable=False,
                         name="u")
    self.ids = tf.constant([0, 2, 5])

  @property
  def trainable(self) -> list[tf.Variable]:
    return [self.w, self.b, self.emb]

  def loss(self) -> tf.Tensor:
    dense = tf.reduce_sum((tf.matmul(self.x, self.w) + self.b) * self.t)
    sparse = tf.reduce_sum(
        tf.nn.embedding_lookup(self.emb, self.ids) * self.u)
    return dense + sparse

  @staticmethod
  def batch(step: int, poison: str | None = None) -> dict[str, np.ndarray]:
    """Returns the data of `step`, with `poison` = "nan_dense", "inf_sparse",
    "minus_inf_dense", "overflow" (finite data whose scaled gradient overflows)
    or None."""
    rng = np.random.default_rng(1000 + step)
    data = {
        "x": rng.normal(size=(4, 3)).astype(np.float32),
        "t": rng.normal(size=(4, 2)).astype(np.float32),
        "u": rng.normal(size=(3, 2)).astype(np.float32),
    }
    if poison == "nan_dense":
      data["x"][1, 2] = NAN
    elif poison == "inf_dense":
      data["x"][0, 0] = INF
    elif poison == "minus_inf_dense":
      data["x"][3, 1] = -INF
    elif poison == "nan_sparse":
      data["u"][2, 0] = NAN
    elif poison == "inf_sparse":
      data["u"][0, 1] = INF
    elif poison == "overflow":
      data["x"][2, :] = 3e37
    elif poison is not None:
      raise ValueError(poison)
    return data

  def feed(self, runner: ModeRunner, data: dict[str, np.ndarray]) -> None:
    for name, value in data.items():
      runner.assign(getattr(self, name), value)


# A schedule of steps that covers every kind of non-finite gradient.
POISONED_SCHEDULE = [
    None, None, "nan_dense", None, "inf_sparse", None, None, "minus_inf_dense",
    None, "overflow", None, "nan_sparse", None, None, "inf_dense", None, None,
]


# The tf.distribute strategies every family is tested under, by readable id.
# conftest.py splits the CPU into 4 logical devices, so replicas are real.
# MirroredStrategy all-reduces with collective ops by default, and TF numbers
# collective groups per strategy instance from 1: a 4-device strategy after
# a 2-device one in the same process fails with "joining a group with size
# 4, but that group has size 2". So the 2-replica strategy keeps the default
# (collectives) and the 4-replica one reduces through one device: both
# cross-device implementations are covered.
def _cpus(count: int) -> list[str]:
  return [f"/cpu:{i}" for i in range(count)]


ONE_DEVICE, MIRRORED_2, MIRRORED_4, CENTRAL_STORAGE = (
    "one_device", "mirrored2", "mirrored4", "central_storage")
STRATEGIES: dict[str, Callable[[], tf.distribute.Strategy]] = {
    ONE_DEVICE: lambda: tf.distribute.OneDeviceStrategy("/cpu:0"),
    MIRRORED_2: lambda: tf.distribute.MirroredStrategy(_cpus(2)),
    MIRRORED_4: lambda: tf.distribute.MirroredStrategy(
        _cpus(4), cross_device_ops=tf.distribute.ReductionToOneDevice()),
    CENTRAL_STORAGE: lambda: (
        tf.distribute.experimental.CentralStorageStrategy(
            compute_devices=_cpus(2), parameter_device="/cpu:0")),
}


def free_ports(count: int) -> list[int]:
  """Distinct ports of 127.0.0.1 that were free a moment ago.

  All are bound to port 0 at once, so none repeats, then released for a
  worker process to take.
  """
  sockets = [socket.socket() for _ in range(count)]
  try:
    for s in sockets:
      s.bind(("127.0.0.1", 0))
    return [s.getsockname()[1] for s in sockets]
  finally:
    for s in sockets:
      s.close()


def printed_in_fresh_interpreter(code: str, **env: str) -> str:
  """Runs `code` in a fresh Python with `env` set; returns its last line out.

  For what holds for a whole process (eager execution off, the Keras).
  """
  result = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, check=True, env={**os.environ, **env})
  return result.stdout.strip().splitlines()[-1]


def worker_env(ports: list[int], index: int) -> dict[str, str]:
  """The environment of worker `index` of a cluster on 127.0.0.1 `ports`.

  A quiet, CPU-only TensorFlow with the `TF_CONFIG` that
  MultiWorkerMirroredStrategy reads.
  """
  cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
  return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "",
          "TF_CONFIG": json.dumps({"cluster": cluster,
                                   "task": {"type": "worker",
                                            "index": index}})}


def executed_op_types(session, fetches, feed_dict) -> collections.Counter:
  """Runs `fetches` once with a full trace; returns the op types that ran."""
  metadata = tf.compat.v1.RunMetadata()
  session.run(fetches, feed_dict,
              options=tf.compat.v1.RunOptions(
                  trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
              run_metadata=metadata)
  types = collections.Counter()
  for device in metadata.step_stats.dev_stats:
    for node in device.node_stats:
      # "name = Type(inputs)"
      types[node.timeline_label.split(" = ")[-1].split("(")[0]] += 1
  return types


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
