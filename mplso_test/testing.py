"""Shared test helpers: execution modes and a runner that drives a step in each."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

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
