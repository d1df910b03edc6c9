"""Shared test helpers: execution modes and a runner that drives a step in each."""

from __future__ import annotations

import collections
from collections.abc import Callable
import contextlib
import json
import os
import socket
import subprocess
import sys

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
