"""What is measured: the models, optimizer families and scenarios (no TF).

Every scenario trains the same model three times, with the same initial
weights and data: with the bare optimizer (`bare`), with TF's own loss-scale
wrapper of that family (`tf`), and with mplso's (`mplso`); `benchmarks.run`
also with mplso's opt-in features on (`FEATURES`), and with mplso's built
again (`CONTROL`). The model computes
in float16 and keeps float32 variables (mixed precision). `SCENARIOS` train
with SGD with momentum, `MATRIX` with each of `OPTIMIZERS`, with and without
XLA. No TensorFlow here: the command line plans the work without its import.
"""

from __future__ import annotations

import dataclasses
import itertools
import os

import numpy as np

VARIANTS = ("bare", "tf", "mplso")
WRAPPERS = ("tf", "mplso")
# mplso's opt-in features, each a variant of its own: mplso's wrapper with
# the feature on. `benchmarks.run` and `benchmarks.first_call` time them
# beside `VARIANTS`, interleaved, and compare each with `"mplso"` (the
# feature off). The product has no measurement switch: these are built here.
FEATURES = {
    "mplso_meter": "underflow meter on (`mplso.meter_underflow(opt, "
                   "every=100)`)",
    "mplso_calibrate": 'calibrated initial scale (`"calibrate"`)',
}
# The meter's period. A full run's timed blocks are this long, so that each
# holds exactly one sampled step of the metered variant.
METER_EVERY = 100
# mplso's wrapper with every feature off, built a second time: its step
# over `"mplso"`'s is what two identical builds differ by in the same
# process (where their weights and graphs landed in memory), the ratio a
# feature's must be told apart from.
CONTROL = "mplso_again"
# What `benchmarks.run` times per scenario.
STEP_VARIANTS = VARIANTS + tuple(FEATURES) + (CONTROL,)
# The bare optimizer made to wait for every gradient, as a wrapper that may
# skip the step must: the cost no wrapper can avoid (`benchmarks.matrix`).
BARRIER = "barrier"
# Low enough that no step overflows, so every wrapper applies every step (the
# final scale is reported to show it).
INITIAL_SCALE = 2.0**10
LEARNING_RATE = 0.01
MOMENTUM = 0.9
# Each family has its own class of these. SGD's update is the cheapest, so a
# wrapper's cost shows most there; many models train with Adam or Adagrad.
OPTIMIZERS = {"sgd": "SGD with momentum", "adam": "Adam",
              "adagrad": "Adagrad"}
ADAM_LEARNING_RATE = 0.001


@dataclasses.dataclass(frozen=True)
class Model:
  """A stack of dense layers trained on a mean squared error."""
  inputs: int  # Width of the input.
  widths: tuple[int, ...]  # Each dense layer's (a kernel and a bias).
  activation: str  # Of every layer but the last.
  batch: int  # Examples per step.

  @property
  def num_variables(self) -> int:
    return 2 * len(self.widths)

  def describe(self) -> str:
    shape = (f"{len(self.widths)} x {self.widths[0]}"
             if len(set(self.widths)) == 1 else "-".join(map(str, self.widths)))
    return (f"dense {self.inputs}->{shape} {self.activation}, batch "
            f"{self.batch}, {self.num_variables} variables")

  def initial_weights(self) -> list[np.ndarray]:
    """Kernels and biases, `[k0, b0, k1, b1, ...]`, from a fixed seed."""
    rng = np.random.default_rng(0)
    weights, fan_in = [], self.inputs
    for width in self.widths:
      limit = np.sqrt(6.0 / (fan_in + width))  # Glorot uniform.
      weights.append(rng.uniform(-limit, limit, (fan_in, width)))
      weights.append(np.zeros(width))
      fan_in = width
    return [w.astype(np.float32) for w in weights]

  def data(self) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((self.batch, self.inputs)).astype(np.float32)
    y = rng.standard_normal((self.batch, self.widths[-1])).astype(np.float32)
    return x, y


# A small MLP, where a step costs a few milliseconds on two CPU cores.
MLP = Model(inputs=256, widths=(512, 512, 10), activation="relu", batch=64)
# ~200 small variables: the per-variable costs of a wrapper show here.
DEEP_200 = Model(inputs=32, widths=(32,) * 100, activation="tanh", batch=16)
# Ten variables of realistic size, the small model of the optimizer matrix.
MLP_10 = Model(inputs=256, widths=(512,) * 4 + (10,), activation="relu",
               batch=64)
# The same layers, 10 and 20 variables (DEEP_20: how op counts grow).
DEEP_10 = dataclasses.replace(DEEP_200, widths=(32,) * 5)
DEEP_20 = dataclasses.replace(DEEP_200, widths=(32,) * 10)
# Wide layers, for peak memory: 24M parameters, so the gradients alone are
# 96 MB in float32 and a wrapper that copied them would show.
WIDE = Model(inputs=1024, widths=(4096, 4096, 1024), activation="relu",
             batch=8)


@dataclasses.dataclass(frozen=True)
class Family:
  """An optimizer family: how its step is written and TF's wrapper of it."""
  name: str  # Short id, also the key of its builder in `builders.py`.
  title: str  # What is run, for the report.
  tf_wrapper: str  # TF's own loss-scale wrapper in this family.


@dataclasses.dataclass(frozen=True)
class Scenario:
  name: str
  family: Family
  model: Model
  jit_compile: bool = False
  optimizer: str = "sgd"  # A key of OPTIMIZERS.

  def describe(self) -> str:
    xla = ", XLA" if self.jit_compile else ""
    return (f"{self.family.title}, {OPTIMIZERS[self.optimizer]}; "
            f"{self.model.describe()}{xla}")


TF1 = Family(
    "tf1", "TF1 graph mode: Session, minimize(loss, global_step)",
    "tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer")
TF_KERAS = Family(
    "tf_keras", "tf_keras custom tf.function loop",
    "tf_keras.mixed_precision.LossScaleOptimizer")
TF_KERAS_LEGACY = Family(
    "tf_keras_legacy",
    "tf_keras custom tf.function loop, legacy OptimizerV2",
    "tf_keras.mixed_precision.LossScaleOptimizer")
KERAS3 = Family(
    "keras3", "Keras 3 compile + Model.train_step (the step fit runs) under "
    "mixed_float16", "keras.optimizers.LossScaleOptimizer")
KERAS3_ON_BATCH = Family(
    "keras3_on_batch", "Keras 3 compile + Model.train_on_batch(x, y) on "
    "NumPy arrays under mixed_float16 (Keras's Python work per call "
    "counts)", "keras.optimizers.LossScaleOptimizer")
# The families of the optimizer matrix and of the op counts.
FAMILIES = (TF1, TF_KERAS, TF_KERAS_LEGACY, KERAS3)
# The families `benchmarks.run` times: train_on_batch runs Keras 3's
# train_step graph (counted under KERAS3), plus its Python work per call.
TIMED_FAMILIES = FAMILIES + (KERAS3_ON_BATCH,)

# The timed scenarios, in report order.
SCENARIOS = (
    Scenario("tf1_graph_mlp", TF1, MLP),
    Scenario("tf1_graph_200vars", TF1, DEEP_200),
    # Auto-clustering (`let_tf1_sessions_cluster_on_cpu`); XLA scenarios come
    # last in their family's process: steps timed after them are slower.
    Scenario("tf1_graph_mlp_xla", TF1, MLP, jit_compile=True),
    Scenario("tf_keras_loop_mlp", TF_KERAS, MLP),
    Scenario("tf_keras_legacy_loop_mlp", TF_KERAS_LEGACY, MLP),
    Scenario("tf_keras_loop_200vars", TF_KERAS, DEEP_200),
    Scenario("tf_keras_loop_mlp_xla", TF_KERAS, MLP, jit_compile=True),
    Scenario("keras3_train_step_mlp", KERAS3, MLP),
    Scenario("keras3_train_step_200vars", KERAS3, DEEP_200),
    Scenario("keras3_train_step_mlp_xla", KERAS3, MLP, jit_compile=True),
    Scenario("keras3_train_on_batch_mlp", KERAS3_ON_BATCH, MLP),
)
SCENARIOS_BY_NAME = {s.name: s for s in SCENARIOS}


# What `python -m benchmarks.matrix` times: every family x optimizer x model
# size, without and with XLA (a TF1 `Session` by auto-clustering, the Keras
# families with `jit_compile=True`); 48 scenarios.
MATRIX = tuple(
    Scenario(f"{f.name}_{o}_{m.num_variables}vars" + "_xla" * xla, f, m, xla, o)
    for f, o, m, xla in itertools.product(FAMILIES, OPTIMIZERS,
                                          (MLP_10, DEEP_200), (False, True)))
MATRIX_BY_NAME = {s.name: s for s in MATRIX}

# Each family's added ops are counted at these two sizes (traced, not timed).
GROWTH_MODELS = (DEEP_20, DEEP_200)
# The scenario whose peak memory is measured, one process per variant.
MEMORY_SCENARIO = Scenario("tf1_graph_wide", TF1, WIDE)


def let_tf1_sessions_cluster_on_cpu() -> None:
  """Adds `--tf_xla_cpu_global_jit` to `TF_XLA_FLAGS` (inherited by children).

  Without it a TF1 session's auto-clustering leaves CPU graphs alone. TF
  reads the flag when it first clusters a graph, so this may come after
  TensorFlow's import.
  """
  flags = os.environ.get("TF_XLA_FLAGS", "")
  if "--tf_xla_cpu_global_jit" not in flags:
    os.environ["TF_XLA_FLAGS"] = (flags + " --tf_xla_cpu_global_jit").strip()


def wraps(variant: str) -> bool:
  """Whether `variant` trains with a loss-scale wrapper (else bare)."""
  return variant in WRAPPERS or variant in FEATURES or variant == CONTROL
