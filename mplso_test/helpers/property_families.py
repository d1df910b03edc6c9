"""Reference models, families and hypothesis strategies of the property tests.

The models are plain-Python versions of TF's loss-scale update rules, written
from TF's documentation and code, not from mplso's. Each `Family` pairs one
mplso wrapper with its bare wrapped optimizer and compiles one step for each.
Used by `property_test` and `long_run_test`.
"""

from __future__ import annotations

import dataclasses
import re

import hypothesis
from hypothesis import strategies as st
import keras
import numpy as np
import tensorflow as tf
import tf_keras

import mplso
import mplso.contrib
import mplso.keras

DENSE_SHAPE = (3, 2)
EMB_ROWS, SPARSE_IDS = 6, (0, 2, 5)
SPARSE_SHAPE = (len(SPARSE_IDS), 2)
LR = 0.01

# Dynamic scales: grow after 2 finite steps by 2. contrib's manager shrinks
# after 2 non-finite steps by 0.8 (not a power of two: float32 rounding is
# part of the model).
INCREMENT_PERIOD, MULTIPLIER = 2, 2.0
DECR_EVERY, DECR_RATIO = 2, 0.8
FIXED = 8.0
F32_MAX_POW2 = float(2.0**127)
F32_MAX = np.finfo(np.float32).max

# Two thirds of the gradients are finite, so that runs of finite steps (and
# growth) are as common as runs of skipped ones.
POISONS = (None,) * 6 + ("nan", "inf", "-inf")
POISON_VALUE = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}


# --- The plain-Python models of the update rules. -------------------------


def f32(x) -> np.float32:
  """`x` rounded to float32, as TF's variables hold it."""
  return np.float32(x)


def _grown(scale: np.float32) -> np.float32:
  """The scale after a growth: times MULTIPLIER, kept if that overflows."""
  with np.errstate(over="ignore"):
    grown = f32(scale * f32(MULTIPLIER))
  return grown if np.isfinite(grown) else scale


@dataclasses.dataclass
class DynamicModel:
  """TF's DynamicLossScale.update: every non-finite step shrinks."""
  scale: np.float32
  good: int = 0

  def step(self, finite: bool) -> None:
    if finite:
      if self.good + 1 >= INCREMENT_PERIOD:
        self.scale = _grown(self.scale)
        self.good = 0
      else:
        self.good += 1
    else:
      self.scale = max(f32(self.scale / f32(MULTIPLIER)), f32(1))
      self.good = 0

  def state(self) -> dict[str, float]:
    return {"scale": float(self.scale), "good_steps": self.good}


@dataclasses.dataclass
class ExponentialModel:
  """TF 1.x contrib's ExponentialUpdateLossScaleManager.update_loss_scale."""
  scale: np.float32
  good: int = 0
  bad: int = 0

  def step(self, finite: bool) -> None:
    if finite:
      if self.good + 1 >= INCREMENT_PERIOD:
        self.scale = _grown(self.scale)
        self.good = self.bad = 0  # _reset_stats, grown or not.
      else:
        self.good += 1
    elif self.bad + 1 >= DECR_EVERY:
      self.scale = max(f32(self.scale * f32(DECR_RATIO)), f32(1))
      self.good = self.bad = 0
    else:
      self.bad += 1
      self.good = 0

  def state(self) -> dict[str, float]:
    return {"scale": float(self.scale), "good_steps": self.good,
            "bad_steps": self.bad}


@dataclasses.dataclass
class FixedModel:
  scale: np.float32

  def step(self, finite: bool) -> None:
    del finite

  def state(self) -> dict[str, float]:
    return {"scale": float(self.scale)}


@dataclasses.dataclass
class ExtendedDynamicModel:
  """mplso's DynamicLossScale with a floor, a ceiling and hysteresis."""
  scale: np.float32
  period: int
  multiplier: float
  min_scale: float
  max_scale: float | None
  hysteresis: int
  good: int = 0
  nonfinite: int = 0

  def step(self, finite: bool) -> None:
    if finite:
      self.nonfinite = 0  # Non-finite steps must come in a row.
      self.good += 1
      if self.good >= self.period:
        with np.errstate(over="ignore"):
          grown = f32(self.scale * f32(self.multiplier))
        if self.max_scale is not None:
          grown = min(grown, f32(self.max_scale))
        if np.isfinite(grown):
          self.scale = grown
        self.good = 0
    else:
      self.good = 0
      self.nonfinite += 1
      if self.nonfinite >= self.hysteresis:
        self.scale = max(f32(self.scale / f32(self.multiplier)),
                         f32(self.min_scale))
        self.nonfinite = 0

  def state(self) -> tuple[float, int, int]:
    return float(self.scale), self.good, self.nonfinite


# --- The families under test. ---------------------------------------------


def _loss_scale_state(loss_scale) -> dict[str, tf.Variable]:
  """The loss scale's variables under the model's names."""
  by_name = {v.name.split("/")[-1].split(":")[0]: v
             for v in loss_scale.variables}
  names = {"current_loss_scale": "scale", "loss_scale": "scale",
           "good_steps": "good_steps", "bad_steps": "bad_steps"}
  return {names[k]: v for k, v in by_name.items()}


def _pair_key(name: str) -> str:
  """A variable's name without the wrapped/bare prefixes and cond scopes."""
  name = re.sub(r"^((cond|adam|Adam)(_\d+)?/)+", "", name.split(":")[0])
  return re.sub(r"(wrapped|bare)_", "", name)


class Family:
  """One wrapper, its bare twin, and a traced step for each."""

  # Whether a skipped step advances the optimizer's step counter.
  advances_on_skip = True

  def __init__(self, scale_kind: str, loss_scale=None):
    """Builds the family.

    Args:
      scale_kind: "fixed", "dynamic" or "exponential": the loss scale of
        `make_loss_scale` and the model it is checked against.
      loss_scale: a loss scale to use instead (for other tests).
    """
    self.scale_kind = scale_kind
    rng = np.random.default_rng(0)
    self.initial = {
        "w": rng.normal(size=DENSE_SHAPE).astype(np.float32),
        "emb": rng.normal(size=(EMB_ROWS, 2)).astype(np.float32),
        "c": np.ones(2, np.float32),
    }
    self.model_vars = self.make_vars("wrapped")
    self.bare_vars = self.make_vars("bare")
    self.loss_scale = (loss_scale if loss_scale is not None
                       else self.make_loss_scale())
    self.opt = self.wrap(self.make_optimizer(), self.loss_scale)
    self.bare = self.make_optimizer()
    signature = [tf.TensorSpec(DENSE_SHAPE, tf.float32),
                 tf.TensorSpec(SPARSE_SHAPE, tf.float32)]
    self._step = tf.function(
        lambda d, s: self.apply(self.opt, self.model_vars, d, s),
        input_signature=signature, autograph=False)
    self._bare_step = tf.function(
        lambda d, s: self.apply(self.bare, self.bare_vars, d, s),
        input_signature=signature, autograph=False)
    # One skipped step creates every slot (in the wrapped optimizer) and
    # traces the step; the bare optimizer gets one real step for its slots.
    # `reset` then puts every variable back to a known start.
    nan = np.full(DENSE_SHAPE, np.nan, np.float32)
    self._step(nan, np.zeros(SPARSE_SHAPE, np.float32))
    zeros = np.zeros(DENSE_SHAPE, np.float32)
    self._bare_step(zeros, np.zeros(SPARSE_SHAPE, np.float32))
    # Listed once: TF1 optimizers list only the variables of the current
    # default graph, which tf.test.TestCase replaces before every test.
    self._vars = {id(o): self._list_vars(o) for o in (self.opt, self.bare)}
    self._start = {id(v): np.asarray(v) for v in self.all_vars(self.opt)}
    # The bare optimizer starts from the wrapped one's state (its one real
    # step moved its own); the variables pair up by name.
    wrapped = {_pair_key(v.name): v for v in self.all_vars(self.opt)}
    self._bare_start = {}
    for b in self.all_vars(self.bare):
      w = wrapped[_pair_key(b.name)]
      if b.shape != w.shape or b.dtype != w.dtype:
        raise AssertionError(f"Unpaired variables {b.name} and {w.name}.")
      self._bare_start[id(b)] = self._start[id(w)]
    self.scale_vars = _loss_scale_state(self.loss_scale)

  # Hooks.

  def make_vars(self, prefix):
    return {k: tf.Variable(v, name=f"{prefix}_{k}")
            for k, v in self.initial.items()}

  def make_loss_scale(self):
    """An mplso loss scale of `scale_kind` (contrib's managers differ)."""
    if self.scale_kind == "fixed":
      return mplso.FixedLossScale(FIXED)
    return mplso.DynamicLossScale(4., INCREMENT_PERIOD, MULTIPLIER)

  def make_optimizer(self):
    raise NotImplementedError

  def wrap(self, optimizer, loss_scale):
    raise NotImplementedError

  def optimizer_vars(self, optimizer) -> list[tf.Variable]:
    raise NotImplementedError

  def counter(self, optimizer) -> tf.Variable:
    """The variable that counts steps: `iterations` or `global_step`."""
    return optimizer.iterations

  @staticmethod
  def grads_and_vars(variables, dense, sparse_values) -> list:
    """A dense, a sparse and a None gradient for the model's variables."""
    return [
        (dense, variables["w"]),
        (tf.IndexedSlices(sparse_values, tf.constant(SPARSE_IDS),
                          tf.constant([EMB_ROWS, 2])), variables["emb"]),
        (None, variables["c"]),
    ]

  def apply(self, optimizer, variables, dense, sparse_values):
    optimizer.apply_gradients(
        self.grads_and_vars(variables, dense, sparse_values))

  # Driving.

  def all_vars(self, optimizer) -> list[tf.Variable]:
    """The model's and `optimizer`'s variables (its slots, loss scale...)."""
    return self._vars[id(optimizer)]

  def _list_vars(self, optimizer) -> list[tf.Variable]:
    variables = self.model_vars if optimizer is self.opt else self.bare_vars
    found, seen = [], set()
    for v in list(variables.values()) + self.optimizer_vars(optimizer):
      if id(v) not in seen:
        seen.add(id(v))
        found.append(v)
    return found

  def model(self, start_scale: float):
    if self.scale_kind == "fixed":
      return FixedModel(f32(FIXED))
    if self.scale_kind == "exponential":
      return ExponentialModel(f32(start_scale))
    return DynamicModel(f32(start_scale))

  def reset(self, start_scale: float) -> None:
    for v in self.all_vars(self.opt):
      v.assign(self._start[id(v)])
    for v in self.all_vars(self.bare):
      v.assign(self._bare_start[id(v)])
    for name, v in self.scale_vars.items():
      v.assign(start_scale if name == "scale" else 0)
    self.counter(self.opt).assign(0)
    self.counter(self.bare).assign(0)

  def step(self, dense, sparse_values) -> None:
    self._step(dense, sparse_values)

  def bare_step(self, dense, sparse_values) -> None:
    self._bare_step(dense, sparse_values)

  def read_scale(self) -> dict[str, float]:
    if self.scale_kind == "fixed":
      return {"scale": float(self.loss_scale())}
    return {k: (float(np.asarray(v)) if k == "scale" else int(np.asarray(v)))
            for k, v in self.scale_vars.items()}


class _V1Family(Family):
  advances_on_skip = False

  def __init__(self, scale_kind, loss_scale=None):
    self.global_step = tf.Variable(0, dtype=tf.int64, name="global_step")
    self.bare_global_step = tf.Variable(0, dtype=tf.int64, name="bare_gs")
    super().__init__(scale_kind, loss_scale)

  def make_optimizer(self):
    return tf.compat.v1.train.AdamOptimizer(LR)

  def optimizer_vars(self, optimizer):
    return list(optimizer.variables())

  def counter(self, optimizer):
    return self.global_step if optimizer is self.opt else self.bare_global_step

  def apply(self, optimizer, variables, dense, sparse_values):
    optimizer.apply_gradients(
        self.grads_and_vars(variables, dense, sparse_values),
        global_step=self.counter(optimizer))


class TF1Family(_V1Family):

  def wrap(self, optimizer, loss_scale):
    return mplso.MixedPrecisionLossScaleOptimizer(optimizer, loss_scale)


class ContribFamily(_V1Family):

  def make_loss_scale(self):
    if self.scale_kind == "fixed":
      return mplso.contrib.FixedLossScaleManager(FIXED)
    return mplso.contrib.ExponentialUpdateLossScaleManager(
        4., INCREMENT_PERIOD, decr_every_n_nan_or_inf=DECR_EVERY,
        incr_ratio=MULTIPLIER, decr_ratio=DECR_RATIO)

  def wrap(self, optimizer, loss_scale):
    return mplso.contrib.LossScaleOptimizer(optimizer, loss_scale)


class _KerasFamily(Family):

  def wrap(self, optimizer, loss_scale):
    return mplso.keras.LossScaleOptimizer(optimizer, loss_scale)

  def optimizer_vars(self, optimizer):
    variables = optimizer.variables  # A method on OptimizerV2.
    return list(variables() if callable(variables) else variables)


class Keras3Family(_KerasFamily):

  def make_vars(self, prefix):
    return {k: keras.Variable(v, name=f"{prefix}_{k}")
            for k, v in self.initial.items()}

  def make_optimizer(self):
    return keras.optimizers.Adam(LR)


class OptimizerV2Family(_KerasFamily):

  def make_optimizer(self):
    return tf_keras.optimizers.legacy.Adam(LR)


class TfKerasFamily(_KerasFamily):

  def make_optimizer(self):
    return tf_keras.optimizers.Adam(LR)


FAMILIES = {
    "tf1": TF1Family,
    "contrib": ContribFamily,
    "keras3": Keras3Family,
    "optimizer_v2": OptimizerV2Family,
    "tf_keras": TfKerasFamily,
}


# --- The hypothesis strategies. -------------------------------------------


@st.composite
def gradient(draw, shape):
  """A float32 gradient of `shape`, finite or poisoned at one element."""
  seed = draw(st.integers(0, 2**16))
  values = np.random.default_rng(seed).normal(size=shape).astype(np.float32)
  values *= draw(st.sampled_from([1e-3, 1., 1e3]))
  poison = draw(st.sampled_from(POISONS))
  if poison is not None:
    index = tuple(draw(st.integers(0, n - 1)) for n in shape)
    values[index] = POISON_VALUE[poison]
  return values


STEPS = st.lists(st.tuples(gradient(DENSE_SHAPE), gradient(SPARSE_SHAPE)),
                 min_size=1, max_size=12)
# Starting scales: the floor, a small one, and the largest finite powers of
# two (growth must stop there).
START_SCALES = st.sampled_from([1., 4., 2.**126, F32_MAX_POW2])


@st.composite
def extended_config(draw):
  """Keyword arguments of a DynamicLossScale with its extensions in use."""
  min_scale = draw(st.sampled_from([.25, 1., 3.]))
  max_scale = draw(st.sampled_from([None, 24., 2.**20, float(F32_MAX)]))
  initial = draw(st.sampled_from([1., 4., 20., 2.**126, F32_MAX_POW2]))
  hypothesis.assume(initial >= min_scale and
                    (max_scale is None or initial <= max_scale))
  return dict(initial_loss_scale=initial,
              increment_period=draw(st.integers(1, 3)),
              multiplier=draw(st.sampled_from([2., 3., 1.5])),
              min_loss_scale=min_scale, max_loss_scale=max_scale,
              hysteresis=draw(st.integers(1, 3)))

