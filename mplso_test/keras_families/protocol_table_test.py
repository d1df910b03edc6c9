"""Every sequence of loss-scaling calls, run against the reference class.

A generated table, not hand-picked cases. Each row is a sequence of up to 4
protocol calls on a tiny state: two float32 vector variables, a loss of
their current values (recomputed at every call) and the pending gradients,
at first the unscaled gradients of the loss. The calls:

  scale_loss:             pending = gradients of `scale_loss(loss)`.
  get_scaled_loss:        pending = gradients of `get_scaled_loss(loss)`.
  get_unscaled_gradients: pending = `get_unscaled_gradients(pending)`.
  compute_gradients:      pending = the gradients of
                          `compute_gradients(loss, vars, tape=tape)`.
  minimize:               `minimize(loss, vars, tape=tape)`.
  apply_gradients:        `apply_gradients(zip(pending, vars))`; pending
                          stays, so a second apply is a second group.

After every call, the variables, the loss scale, the good-step counter,
`iterations` and the pending gradients must equal the reference's (rtol
1e-6; powers of two make them exact). SGD's learning rate is small and the
scale keeps its default, 2**15, so a gradient applied scaled moves a
variable 2**15 times too far, and nothing overflows.

  Table A, Keras 3's dialect: the 30 sequences over {scale_loss,
      apply_gradients}, mplso's Keras 3 wrapper against
      `keras.optimizers.LossScaleOptimizer`. Modes: eagerly; each call in
      its own `tf.function` (kept for every row); each row in one
      `tf.function`, without and with XLA; and both of the latter two in
      `strategy.run` of a 2-replica `MirroredStrategy`. The documented
      rows, the 15 that start with `apply_gradients` (no `scale_loss`
      before it): Keras 3's class divides those gradients by the scale,
      mplso's wrapper applies them as TF 2.3's unscaled gradients
      (docs/keras.md). There each class is held to its own rule instead,
      run by `_Rule` on a bare SGD (Keras 3's class only where each call
      has its own function: it checks the rule, not mplso).
  Table B, TF 2.4-2.15's dialect: the 780 sequences over the five other
      calls, mplso's wrapper against tf_keras's
      `tf_keras.mixed_precision.LossScaleOptimizer` for tf_keras's new SGD
      and its legacy SGD (340 sequences: the legacy class has no public
      `compute_gradients`), and mplso's Keras 3 wrapper over Keras 3's SGD
      against tf_keras's class over tf_keras's SGD (TF 2.3's protocol on
      Keras 3). Eagerly, and each call in its own `tf.function`.
  Table C, the dialects mixed, mplso's Keras 3 wrapper only: the 748
      sequences over all six calls that hold `scale_loss` and at least one
      of TF 2.3's calls, against `_Rule`: the gradients the rule says reach
      a bare `keras.optimizers.SGD`, and a scale that stays 2**15 (it
      grows after 2000 finite steps). Eagerly, and each call in its own
      `tf.function`.

The state after each call is checked, so a run of a row also runs each of
its prefixes: each table runs its longest rows (those no other row
extends), where each call has its own function depth first, restoring the
state saved where rows part, and reports a mismatch under the shortest row
of the table that reaches it. Each test collects every failing row into
one message.
"""

import collections
import itertools

from absl.testing import absltest
from absl.testing import parameterized
import keras
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import mplso.keras
from mplso_test.helpers import strategies

SCALE_LOSS = "scale_loss"
GET_SCALED_LOSS = "get_scaled_loss"
GET_UNSCALED_GRADIENTS = "get_unscaled_gradients"
COMPUTE_GRADIENTS = "compute_gradients"
MINIMIZE = "minimize"
APPLY_GRADIENTS = "apply_gradients"
KERAS_3_CALLS = (SCALE_LOSS, APPLY_GRADIENTS)
TF_2_4_CALLS = (GET_SCALED_LOSS, GET_UNSCALED_GRADIENTS, COMPUTE_GRADIENTS,
                MINIMIZE, APPLY_GRADIENTS)
# TF 2.3's calls: those that unscale, and the one that scales for them.
TF_2_3_CALLS = (GET_SCALED_LOSS, GET_UNSCALED_GRADIENTS, COMPUTE_GRADIENTS,
                MINIMIZE)
ALL_CALLS = (SCALE_LOSS,) + TF_2_4_CALLS
MAX_LENGTH = 4

SCALE = 2.**15  # The default initial scale of every class here.
LEARNING_RATE = 2.**-6
INITIAL = ([1., -2.], [.5, 3.])
RTOL = 1e-6

# How a table runs its rows.
EAGER = "eager"
FUNCTIONS = "functions"  # Each call in its own tf.function, kept.
FUNCTION = "function"  # Each row in one tf.function.
XLA = "xla"  # FUNCTION with jit_compile=True.
MIRRORED = "mirrored"  # FUNCTION, in strategy.run.
MIRRORED_FUNCTIONS = "mirrored_functions"  # FUNCTIONS, in strategy.run.
WHOLE_ROW_MODES = (FUNCTION, XLA, MIRRORED)
REPLICAS = 2  # Of the mirrored strategy, on conftest's logical CPUs.


def _sequences(calls, keep=lambda sequence: True):
  """Every sequence of `calls` of length 1 to MAX_LENGTH that `keep` keeps."""
  return [sequence for length in range(1, MAX_LENGTH + 1)
          for sequence in itertools.product(calls, repeat=length)
          if keep(sequence)]


def _mixed(sequence) -> bool:
  """Table C's rows: `scale_loss` and at least one of TF 2.3's calls."""
  return (SCALE_LOSS in sequence and
          any(call in TF_2_3_CALLS for call in sequence))


def _documented(sequence) -> bool:
  """Table A's rows where Keras 3's class and mplso differ on purpose.

  An `apply_gradients` with no `scale_loss` before it: Keras 3's class
  divides its gradients by the scale, mplso's wrapper applies them as they
  are, as TF 2.3's code passes them unscaled.
  """
  first_scale_loss = (sequence.index(SCALE_LOSS) if SCALE_LOSS in sequence
                      else len(sequence))
  return APPLY_GRADIENTS in sequence[:first_scale_loss]


def _longest(rows):
  """The rows no other row extends: running them runs every row."""
  prefixes = {row[:length] for row in rows for length in range(len(row))}
  return [row for row in rows if row not in prefixes]


# The state and the calls.


def _loss(variables):
  a, b = (tf.convert_to_tensor(v) for v in variables)
  return 0.5 * tf.reduce_sum(a * a) + tf.reduce_sum(a * b)


def _gradients(variables, scale=lambda loss: loss):
  with tf.GradientTape() as tape:
    loss = scale(_loss(variables))
  return tape.gradient(loss, variables)


def _taped_loss(variables):
  with tf.GradientTape() as tape:
    loss = _loss(variables)
  return loss, tape


def _compute_gradients(opt, variables, pending):
  del pending  # Replaced.
  loss, tape = _taped_loss(variables)
  return [g for g, _ in opt.compute_gradients(loss, variables, tape=tape)]


def _minimize(opt, variables, pending):
  loss, tape = _taped_loss(variables)
  opt.minimize(loss, variables, tape=tape)
  return pending


def _apply_gradients(opt, variables, pending):
  opt.apply_gradients(zip(pending, variables))
  return pending


# Each call: (optimizer, variables, pending) -> the new pending gradients.
CALLS = {
    SCALE_LOSS: lambda opt, v, _: _gradients(v, opt.scale_loss),
    GET_SCALED_LOSS: lambda opt, v, _: _gradients(v, opt.get_scaled_loss),
    GET_UNSCALED_GRADIENTS:
        lambda opt, v, pending: list(opt.get_unscaled_gradients(pending)),
    COMPUTE_GRADIENTS: _compute_gradients,
    MINIMIZE: _minimize,
    APPLY_GRADIENTS: _apply_gradients,
}


class _Rule:
  """mplso's Keras 3 rule, as the gradients it feeds a bare Keras 3 SGD.

  `scale_loss` sets a mark; while it is set, every `apply_gradients` divides
  by the scale; `get_unscaled_gradients`, `compute_gradients` and `minimize`
  clear it. With `divides_always`, Keras 3's class: every `apply_gradients`
  divides. The scale stays 2**15: every step is finite, and it would grow
  only after 2000 of them.
  """

  def __init__(self, divides_always=False):
    self._optimizer = keras.optimizers.SGD(LEARNING_RATE)
    self._divides_always = divides_always
    # A variable, each replica's own, so that one traced call serves every
    # row that reaches it.
    self._mark = tf.Variable(
        False, trainable=False,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

  @property
  def iterations(self):
    return self._optimizer.iterations

  @property
  def loss_scale(self):
    return tf.constant(SCALE)

  @property
  def dynamic_counter(self):
    return self._optimizer.iterations  # Every step is finite.

  def build(self, variables):
    self._optimizer.build(variables)

  def scale_loss(self, loss):
    self._mark.assign(True)
    return loss * SCALE

  def get_scaled_loss(self, loss):
    return loss * SCALE

  def get_unscaled_gradients(self, grads):
    self._mark.assign(False)
    return [g / SCALE for g in grads]

  def compute_gradients(self, loss, var_list, tape):
    self._mark.assign(False)
    return list(zip(tape.gradient(loss, var_list), var_list))

  def minimize(self, loss, var_list, tape):
    self.apply_gradients(self.compute_gradients(loss, var_list, tape))

  def apply_gradients(self, grads_and_vars):
    grads, variables = zip(*grads_and_vars)
    divides = tf.logical_or(self._mark.read_value(), self._divides_always)
    grads = [g / tf.where(divides, SCALE, 1.) for g in grads]
    # Every gradient before any variable moves, as a loss-scale optimizer's
    # finite check orders them: in a tf.function, Grappler's dependency
    # optimization otherwise lets a gradient read a variable already moved.
    with tf.control_dependencies(grads):
      self._optimizer.apply_gradients(zip(grads, variables))


def _scale_and_counter(opt):
  if type(opt) is keras.optimizers.LossScaleOptimizer:  # pylint: disable=unidiomatic-typecheck
    # Keras 3's own (mplso's is a subclass).
    return opt.dynamic_scale, opt.step_counter
  return opt.loss_scale, opt.dynamic_counter


FIELDS = ("variable 0", "variable 1", "loss scale", "good steps", "iterations",
          "pending 0", "pending 1")


def _state(opt, variables, pending):
  """FIELDS, as float32 tensors."""
  values = list(variables) + list(_scale_and_counter(opt)) + [opt.iterations]
  return [tf.cast(tf.convert_to_tensor(v), tf.float32) for v in values] + [
      tf.identity(g) for g in pending]


# Each kind of optimizer a table runs: (variable class, optimizer maker).
MPLSO_KERAS_3, KERAS_3, RULE, KERAS_3_RULE = (
    "mplso_keras_3", "keras_3", "rule", "keras_3_rule")
MPLSO_NEW, TF_KERAS_NEW, MPLSO_LEGACY, TF_KERAS_LEGACY = (
    "mplso_new", "tf_keras_new", "mplso_legacy", "tf_keras_legacy")
KINDS = {
    MPLSO_KERAS_3: (keras.Variable, lambda: mplso.keras.LossScaleOptimizer(
        keras.optimizers.SGD(LEARNING_RATE))),
    KERAS_3: (keras.Variable, lambda: keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(LEARNING_RATE))),
    RULE: (keras.Variable, _Rule),
    KERAS_3_RULE: (keras.Variable, lambda: _Rule(divides_always=True)),
    MPLSO_NEW: (tf.Variable, lambda: mplso.keras.LossScaleOptimizer(
        tf_keras.optimizers.SGD(LEARNING_RATE))),
    TF_KERAS_NEW: (tf.Variable,
                   lambda: tf_keras.mixed_precision.LossScaleOptimizer(
                       tf_keras.optimizers.SGD(LEARNING_RATE))),
    MPLSO_LEGACY: (tf.Variable, lambda: mplso.keras.LossScaleOptimizer(
        tf_keras.optimizers.legacy.SGD(LEARNING_RATE))),
    TF_KERAS_LEGACY: (tf.Variable,
                      lambda: tf_keras.mixed_precision.LossScaleOptimizer(
                          tf_keras.optimizers.legacy.SGD(LEARNING_RATE))),
}


class _Subject:
  """An optimizer of one kind on its own variables, in one mode.

  Every variable made for it is recorded, so that its whole state (the
  variables, the optimizer's, mplso's mark) can be saved and restored: the
  rows sharing a prefix run it once. (Python attributes, which here only
  decide whether a never-scaled warning is logged, are not restored.)
  """

  def __init__(self, kind, mode, strategy=None):
    self._mode = mode
    self.whole_rows = mode in WHOLE_ROW_MODES
    self._strategy = strategy or tf.distribute.get_strategy()
    variable, make = KINDS[kind]
    created = []

    def record(next_creator, **kwargs):
      created.append(next_creator(**kwargs))
      return created[-1]

    with self._strategy.scope(), tf.variable_creator_scope(record):
      self.variables = [variable(value) for value in INITIAL]
      self.opt = make()
      if variable is keras.Variable:
        self.opt.build(self.variables)  # Keras 3's scale is built here.
      _ = self.opt.iterations  # OptimizerV2 makes it when first read.
    self._components = [c for v in created
                        for c in self._strategy.experimental_local_results(v)]
    self._initial = self.save()
    self._functions = {}

  def save(self):
    return [c.numpy() for c in self._components]

  def restore(self, saved):
    for component, value in zip(self._components, saved):
      component.assign(value)

  def _step(self, name, pending):
    pending = CALLS[name](self.opt, self.variables, pending)
    return pending, _state(self.opt, self.variables, pending)

  def _per_replica(self, fn, *args):
    if self._mode in (MIRRORED, MIRRORED_FUNCTIONS):
      return self._strategy.run(fn, args=args)
    return fn(*args)

  def _numpy(self, states):
    return tf.nest.map_structure(
        lambda x: np.stack([np.asarray(r) for r in
                            self._strategy.experimental_local_results(x)]),
        states)

  def start(self):
    """Restores the initial state; returns the first pending gradients."""
    self.restore(self._initial)
    if self._mode == EAGER:
      return _gradients(self.variables)
    return tf.function(lambda: self._per_replica(
        _gradients, self.variables))()

  def call(self, name, pending):
    """Runs one call (FUNCTIONS: in a tf.function kept for the next rows).

    Returns the new pending gradients and the state after the call.
    """
    if self._mode == EAGER:
      pending, state = self._step(name, pending)
    else:
      if name not in self._functions:
        self._functions[name] = tf.function(
            lambda pending: self._per_replica(self._step, name, pending))
      pending, state = self._functions[name](pending)
    return pending, self._numpy(state)

  def run(self, row):
    """Runs `row` in one tf.function: the state after each call."""

    def run_all():
      pending, states = _gradients(self.variables), []
      for name in row:
        # Each call after the last one's results: in one graph, Grappler
        # could otherwise compute a pending gradient after a later call
        # moved the variables it reads.
        with tf.control_dependencies(tf.nest.flatten((pending, states))):
          pending, state = self._step(name, pending)
        states.append(state)
      return states

    self.restore(self._initial)
    states = tf.function(lambda: self._per_replica(run_all),
                         jit_compile=self._mode == XLA)()
    return self._numpy(states)


def _walk(subject, rows):
  """Runs `rows`: {longest row: the state after each of its calls}.

  In a mode that runs whole rows, each longest row runs on its own; in the
  others, depth first, the rows that share a prefix running it once.
  """
  runs = _longest(rows)
  if subject.whole_rows:
    return {run: subject.run(run) for run in runs}
  children = collections.defaultdict(list)
  for prefix in sorted({run[:length] for run in runs
                        for length in range(1, len(run) + 1)}):
    children[prefix[:-1]].append(prefix[-1])
  states = {}

  def visit(prefix, pending):
    saved = subject.save() if len(children[prefix]) > 1 else None
    for index, name in enumerate(children[prefix]):
      if index:
        subject.restore(saved)
      after, states[prefix + (name,)] = subject.call(name, pending)
      visit(prefix + (name,), after)

  visit((), subject.start())
  return {run: [states[run[:length]] for length in range(1, len(run) + 1)]
          for run in runs}


def _trajectory(walk, row):
  """The state after each call of `row`, from a run of `_walk` extending it."""
  run = row if row in walk else next(run for run in walk
                                     if run[:len(row)] == row)
  return walk[run][:len(row)]


def _by_length(rows):
  return sorted(rows, key=lambda row: (len(row), row))


def _differences(rows, ours, theirs):
  """{row: text} naming where two walks first diverge.

  Each divergence is named by the shortest of `rows` that reaches it.
  """
  found = {}
  for run in _longest(rows):
    pairs = zip(_trajectory(ours, run), _trajectory(theirs, run))
    for length, (mine, other) in enumerate(pairs, 1):
      wrong = [f"{field}: {a.tolist()} vs {b.tolist()}"
               for field, a, b in zip(FIELDS, mine, other)
               if a.shape != b.shape or
               not np.allclose(a, b, rtol=RTOL, atol=0)]
      if wrong:
        found.setdefault(run[:length], "; ".join(wrong))
        break
  report = {}
  for prefix in _by_length(found):
    row = next(row for row in _by_length(rows) if row[:len(prefix)] == prefix)
    report.setdefault(row, f"after call {len(prefix)} ({prefix[-1]}), ours "
                           f"vs theirs: {found[prefix]}")
  return report


class _TableCase(tf.test.TestCase, parameterized.TestCase):

  def assert_table(self, rows, pairs, mode, strategy=None):
    """Runs `rows` with each (label, ours, theirs, keep) pair.

    `keep(row)` says which rows a pair is for; every mismatch of any pair
    fails the test together, each named by its row.
    """
    # Each kind runs once, the rows of all its pairs.
    kinds = collections.defaultdict(set)
    for _, ours, theirs, keep in pairs:
      kinds[ours].update(filter(keep, rows))
      kinds[theirs].update(filter(keep, rows))
    walks = {kind: _walk(_Subject(kind, mode, strategy), kind_rows)
             for kind, kind_rows in kinds.items()}
    lines = []
    for label, ours, theirs, keep in pairs:
      report = _differences(list(filter(keep, rows)), walks[ours],
                            walks[theirs])
      for row in _by_length(report):
        lines.append(f"{', '.join(row)} [{label}]: {report[row]}")
    if lines:
      self.fail(f"{len(lines)} failing rows ({mode}):\n" + "\n".join(lines))


def _legacy_calls():
  """Table B's calls that tf_keras's legacy class has."""
  reference = KINDS[TF_KERAS_LEGACY][1]()
  return tuple(call for call in TF_2_4_CALLS if hasattr(reference, call))


class GeneratedRowsTest(absltest.TestCase):

  def test_row_counts(self):
    rows_a = _sequences(KERAS_3_CALLS)
    self.assertLen(rows_a, 30)
    documented = [row for row in rows_a if _documented(row)]
    self.assertLen(documented, 15)
    self.assertTrue(all(row[0] == APPLY_GRADIENTS for row in documented))
    self.assertLen(_sequences(TF_2_4_CALLS), 780)
    self.assertEqual(_legacy_calls(), (GET_SCALED_LOSS, GET_UNSCALED_GRADIENTS,
                                       MINIMIZE, APPLY_GRADIENTS))
    self.assertLen(_sequences(_legacy_calls()), 340)
    self.assertLen(_sequences(ALL_CALLS, _mixed), 748)


@pytest.mark.slow
class Keras3DialectTest(_TableCase):

  @parameterized.named_parameters(
      (mode, mode) for mode in (EAGER, FUNCTIONS, FUNCTION, XLA, MIRRORED,
                                MIRRORED_FUNCTIONS))
  def test_every_sequence_matches_keras_3(self, mode):
    strategy = strategies.mirrored(REPLICAS) if mode.startswith(MIRRORED) else None
    pairs = [
        ("mplso vs Keras 3's class", MPLSO_KERAS_3, KERAS_3,
         lambda row: not _documented(row)),
        ("documented: mplso vs its rule", MPLSO_KERAS_3, RULE, _documented)]
    if mode not in WHOLE_ROW_MODES:  # Cheap here: that the rule is theirs.
      pairs.append(("documented: Keras 3's class vs its rule", KERAS_3,
                    KERAS_3_RULE, _documented))
    self.assert_table(_sequences(KERAS_3_CALLS), pairs, mode, strategy)


@pytest.mark.slow
class Tf24DialectTest(_TableCase):

  @parameterized.named_parameters(
      (f"{family}_{mode}", ours, theirs, mode)
      for family, ours, theirs in (("new", MPLSO_NEW, TF_KERAS_NEW),
                                   ("legacy", MPLSO_LEGACY, TF_KERAS_LEGACY),
                                   ("keras_3", MPLSO_KERAS_3, TF_KERAS_NEW))
      for mode in (EAGER, FUNCTIONS))
  def test_every_sequence_matches_tf_keras(self, ours, theirs, mode):
    calls = _legacy_calls() if theirs == TF_KERAS_LEGACY else TF_2_4_CALLS
    self.assert_table(_sequences(calls), [
        (f"{ours} vs {theirs}", ours, theirs, lambda row: True)], mode)


@pytest.mark.slow
class MixedDialectsTest(_TableCase):

  @parameterized.named_parameters((mode, mode) for mode in (EAGER, FUNCTIONS))
  def test_every_mixed_sequence_follows_the_rule(self, mode):
    self.assert_table(_sequences(ALL_CALLS, _mixed), [
        ("mplso vs its rule", MPLSO_KERAS_3, RULE, lambda row: True)], mode)


if __name__ == "__main__":
  # Under pytest, conftest.py splits the CPU; run directly, this does.
  cpu, = tf.config.list_physical_devices("CPU")
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * REPLICAS)
  absltest.main()
