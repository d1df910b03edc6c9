"""mplso's optimizers under tf.distribute: all replicas skip or apply together.

Every family trains the same linear model on the same global batches under
each strategy of `testing.STRATEGIES`; one replica's part of some batches
holds a NaN or an Inf. The data are small integers, the batch size, learning
rate and loss scales powers of two, so every sum is exact whatever the
all-reduce order: results are compared with assertAllEqual, never with a
tolerance.

`MultiWorkerTest` (marked `multiworker`) starts worker processes on
127.0.0.1: two under MultiWorkerMirroredStrategy
(`mplso_test.workers.multiworker_worker`), and a one-process parameter-server
cluster (`mplso_test.workers.parameter_server_worker`), which mplso refuses.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time

from absl.testing import absltest
from absl.testing import parameterized
import keras
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import mplso
import mplso.contrib
import mplso.keras
from mplso_test import testing

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


def _replica_slice(x, t):
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
      strategy.run(lambda x, t: self.replica_step(*_replica_slice(x, t)),
                   args=(x, t))

    for x, t in batches:
      step(tf.constant(x), tf.constant(t))

  def state(self) -> dict[str, object]:
    """Variables (or tensors) by name: var, scale, good_steps, steps, ..."""
    raise NotImplementedError

  def trackables(self) -> dict[str, object]:
    """What a checkpoint of this family holds."""
    return {"w": self.w, "optimizer": self.opt}


class _V1(_Family):
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


class _KerasRun(_Family):
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


class _Keras3Fit(_KerasRun):
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


def _dynamic():
  return mplso.DynamicLossScale(initial_loss_scale=16, increment_period=2)


def _ours(optimizer):
  return lambda: mplso.keras.LossScaleOptimizer(optimizer(LR), _dynamic())


# mplso's families, by readable id.
FAMILIES = {
    "v1": lambda: _V1(lambda: mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(LR), _dynamic())),
    "contrib": lambda: _V1(lambda: mplso.contrib.LossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(LR),
        mplso.contrib.ExponentialUpdateLossScaleManager(
            16, 2, decr_every_n_nan_or_inf=1, decr_ratio=0.5))),
    "keras3_run": lambda: _KerasRun(_ours(keras.optimizers.SGD)),
    "keras3_run_keras3_protocol": lambda: _KerasRun(
        _ours(keras.optimizers.SGD), protocol="keras3"),
    "keras3_fit": lambda: _Keras3Fit(_ours(keras.optimizers.SGD)),
    "optimizer_v2": lambda: _KerasRun(_ours(tf_keras.optimizers.legacy.SGD)),
    "optimizer_v2_own_all_reduce": lambda: _KerasRun(
        _ours(tf_keras.optimizers.legacy.SGD), aggregate=False),
    "tf_keras": lambda: _KerasRun(_ours(tf_keras.optimizers.SGD)),
    "tf_keras_own_all_reduce": lambda: _KerasRun(
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
    "v1": lambda: _V1(
        lambda: tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(LR),
            tf.compat.v1.mixed_precision.DynamicLossScale(
                initial_loss_scale=16, increment_period=2))),
    "keras3_run_keras3_protocol": lambda: _KerasRun(_keras3_lso,
                                                    protocol="keras3"),
    "keras3_fit": lambda: _Keras3Fit(_keras3_lso),
    "optimizer_v2": lambda: _KerasRun(
        _tf_keras_lso(tf_keras.optimizers.legacy.SGD)),
    "optimizer_v2_own_all_reduce": lambda: _KerasRun(
        _tf_keras_lso(tf_keras.optimizers.legacy.SGD), aggregate=False),
    "tf_keras": lambda: _KerasRun(_tf_keras_lso(tf_keras.optimizers.SGD)),
    "tf_keras_own_all_reduce": lambda: _KerasRun(
        _tf_keras_lso(tf_keras.optimizers.SGD), aggregate=False),
}


# Combinations that TF or Keras itself refuses, with the reason.
UNSUPPORTED = {
    ("optimizer_v2_own_all_reduce", testing.CENTRAL_STORAGE): (
        "tf_keras's OptimizerV2 raises NotImplementedError for "
        "experimental_aggregate_gradients=False under CentralStorageStrategy."),
}
TF_UNSUPPORTED = {
    **{(family, testing.CENTRAL_STORAGE): (
        "Keras 3's LossScaleOptimizer assigns its loss-scale variables in "
        "replica context, which CentralStorageStrategy refuses.")
       for family in ("keras3_run_keras3_protocol", "keras3_fit")},
    **{(family, strategy): (
        "Keras 3's LossScaleOptimizer checks each replica's own gradients "
        "before they are summed (no merge_call under MirroredStrategy), so a "
        "NaN on one replica is applied by the others and poisons them all.")
       for family in ("keras3_run_keras3_protocol", "keras3_fit")
       for strategy in (testing.MIRRORED_2, testing.MIRRORED_4)},
    **{(family, testing.CENTRAL_STORAGE): (
        "tf_keras's LossScaleOptimizer refuses CentralStorageStrategy.")
       for family in ("optimizer_v2", "optimizer_v2_own_all_reduce",
                      "tf_keras", "tf_keras_own_all_reduce")},
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


def _matrix(families, strategies=tuple(testing.STRATEGIES)):
  return [(f"{family}_{strategy}", family, strategy)
          for family, strategy in itertools.product(families, strategies)]


class DistributeTest(tf.test.TestCase, parameterized.TestCase):

  def _assert_same_everywhere(self, state):
    for name, values in state.items():
      for value in values[1:]:
        self.assertAllEqual(value, values[0], msg=name)

  @parameterized.named_parameters(_matrix(FAMILIES))
  def test_skip_together(self, family, strategy):
    if (family, strategy) in UNSUPPORTED:
      self.skipTest(UNSUPPORTED[family, strategy])
    strategy = testing.STRATEGIES[strategy]()
    state = train(FAMILIES[family](), strategy)
    self._assert_same_everywhere(state)
    reference = train(FAMILIES[family]())  # One device, global batch.
    self.assertEqual(state.keys(), reference.keys())
    for name in state:
      self.assertAllEqual(state[name][0], reference[name][0], msg=name)
    for name, expected in EXPECTED.items():
      if name in state:
        self.assertEqual(state[name][0], expected, msg=name)
    if "bad_steps" in state:
      self.assertEqual(state["bad_steps"][0], 0)

  @parameterized.named_parameters(_matrix(TF_FAMILIES))
  def test_parity_with_tf(self, family, strategy):
    for unsupported in (UNSUPPORTED, TF_UNSUPPORTED):
      if (family, strategy) in unsupported:
        self.skipTest(unsupported[family, strategy])
    ours = train(FAMILIES[family](), testing.STRATEGIES[strategy]())
    theirs = train(TF_FAMILIES[family](),
                         testing.STRATEGIES[strategy]())
    self._assert_same_everywhere(theirs)
    for name in theirs:
      if name == "steps" and family.startswith("keras3"):
        # Keras 3's wrapper does not count a skipped step; TF 2.3 does.
        self.assertEqual(theirs[name][0], EXPECTED["applied"])
        continue
      self.assertAllEqual(ours[name][0], theirs[name][0], msg=name)

  @parameterized.named_parameters(
      (f, f) for f in FAMILIES if f != "keras3_fit")
  def test_apply_in_cross_replica_context_raises(self, family):
    family = FAMILIES[family]()
    strategy = testing.STRATEGIES[testing.MIRRORED_2]()
    with strategy.scope():
      family.build()
      with self.assertRaisesRegex(ValueError, "replica context"):
        family.apply_in_cross_replica_context()


  @parameterized.named_parameters(
      (f"{family}_{direction}", family, direction)
      for family in FAMILIES
      for direction in ("strategy_to_none", "none_to_strategy"))
  def test_checkpoint_moves_between_strategy_and_none(self, family,
                                                     direction):
    mirrored = testing.STRATEGIES[testing.MIRRORED_2]()
    default = tf.distribute.get_strategy()
    saver, restorer = ((mirrored, default) if direction == "strategy_to_none"
                       else (default, mirrored))
    # Six steps (two skipped): scale 8, one good step, four applied.
    saving = FAMILIES[family]()
    saved = train(saving, saver, BATCHES[:6])
    self.assertEqual(saved["scale"][0], 8.)
    self.assertEqual(saved["good_steps"][0], 1)
    path = tf.train.Checkpoint(**saving.trackables()).save(
        self.create_tempdir().full_path + "/ckpt")

    family_instance = FAMILIES[family]()
    with restorer.scope():
      family_instance.build()
    tf.train.Checkpoint(**family_instance.trackables()).restore(
        path).assert_existing_objects_matched()
    restored = {name: local_values(restorer, value)
                for name, value in family_instance.state().items()}
    self._assert_same_everywhere(restored)
    for name in saved:
      self.assertAllEqual(restored[name][0], saved[name][0], msg=name)
    # Two more steps from the restored state end where an uninterrupted
    # single-device run ends.
    family_instance.train(restorer, BATCHES[6:])
    final = {name: local_values(restorer, value)
             for name, value in family_instance.state().items()}
    reference = train(FAMILIES[family]())
    for name in reference:
      self.assertAllEqual(final[name][0], reference[name][0], msg=name)

  @parameterized.named_parameters(_matrix(("v1", "contrib")))
  def test_v1_graph_session_skip_together(self, family, strategy):
    reference = train(FAMILIES[family]())
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
      strategy = testing.STRATEGIES[strategy]()
      family = FAMILIES[family]()
      with strategy.scope():
        family.build()
      x = tf.compat.v1.placeholder(tf.float32, (GLOBAL_BATCH, 3))
      t = tf.compat.v1.placeholder(tf.float32, (GLOBAL_BATCH, 1))
      ops = strategy.run(
          lambda x, t: family.replica_step(*_replica_slice(x, t)),
          args=(x, t))
      train_op = tf.group(strategy.experimental_local_results(ops))
      session.run(tf.compat.v1.global_variables_initializer())
      for x_value, t_value in BATCHES:
        session.run(train_op, {x: x_value, t: t_value})
      state = {name: session.run(strategy.experimental_local_results(value))
               for name, value in family.state().items()}
    self._assert_same_everywhere(state)
    for name in reference:
      self.assertAllEqual(state[name][0], reference[name][0], msg=name)


# Families trained by each worker process, one after another. Keras 3's fit
# is left out: it shards numpy input per worker its own way, so the workers
# would not see the rows this test gives them.
MULTIWORKER_FAMILIES = ("v1", "contrib", "keras3_run", "optimizer_v2",
                        "optimizer_v2_own_all_reduce", "tf_keras")
MULTIWORKER_TIMEOUT = 240  # Seconds for both workers, then they are killed.


@pytest.mark.multiworker
class MultiWorkerTest(tf.test.TestCase):
  """Two worker processes on 127.0.0.1 under MultiWorkerMirroredStrategy."""

  def _start_workers(self, families):
    ports = testing.free_ports(2)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    workers = []
    for index in range(2):
      env = testing.worker_env(ports, index)
      worker = subprocess.Popen(
          [sys.executable, "-m", "mplso_test.workers.multiworker_worker",
           *families],
          cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
          text=True)
      # Killed whatever happens; a no-op once it has exited.
      self.addCleanup(worker.kill)
      self.addCleanup(worker.wait)
      workers.append(worker)
    return workers

  def _results(self, workers):
    deadline = time.monotonic() + MULTIWORKER_TIMEOUT
    results = []
    for index, worker in enumerate(workers):
      try:
        stdout, stderr = worker.communicate(
            timeout=max(1., deadline - time.monotonic()))
      except subprocess.TimeoutExpired:
        for w in workers:
          w.kill()
        self.fail(f"Worker {index} did not finish in {MULTIWORKER_TIMEOUT} "
                  "s; both workers were killed.")
      self.assertEqual(worker.returncode, 0,
                       f"Worker {index} failed:\n{stderr[-4000:]}")
      results.append(json.loads(stdout.strip().splitlines()[-1]))
    return results

  def test_nan_on_one_worker_skips_on_both(self):
    # BATCHES put the NaN in row 4 and the Inf in row 7: worker 1's half.
    workers = self._start_workers(MULTIWORKER_FAMILIES)
    first, second = self._results(workers)
    for family in MULTIWORKER_FAMILIES:
      with self.subTest(family=family):
        reference = train(FAMILIES[family]())
        self.assertEqual(first[family].keys(), reference.keys())
        for name in reference:
          self.assertAllEqual(first[family][name], second[family][name],
                              msg=name)
          self.assertAllEqual(first[family][name][0], reference[name][0],
                              msg=name)
        for name, expected in EXPECTED.items():
          if name in reference:
            self.assertEqual(first[family][name][0], expected, msg=name)


  def test_parameter_server_strategy_raises_naming_supported(self):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(
        [sys.executable, "-m", "mplso_test.workers.parameter_server_worker"],
        cwd=root, capture_output=True, text=True, check=False,
        timeout=MULTIWORKER_TIMEOUT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
             "CUDA_VISIBLE_DEVICES": ""})
    self.assertEqual(result.returncode, 0, result.stderr[-4000:])
    errors = json.loads(result.stdout.strip().splitlines()[-1])
    self.assertLen(errors, 8)
    for what, message in errors.items():
      with self.subTest(what):
        self.assertIsNotNone(message)
        self.assertIn("is not supported under ParameterServerStrategy",
                      message)
        self.assertIn("Supported: no strategy (the default), "
                      "OneDeviceStrategy, MirroredStrategy, "
                      "MultiWorkerMirroredStrategy and CentralStorageStrategy",
                      message)


if __name__ == "__main__":
  absltest.main()
