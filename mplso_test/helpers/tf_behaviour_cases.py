"""The harness of the TF behaviour tests, and tests that also run in a worker.

`integration/tf_loss_scale_behaviour_test.py` and
`integration/tf_optimizer_behaviour_test.py` run TF 2.3's tests of its TF1
loss scales and optimizer on mplso's classes and TF's. `UpdateTest` and
`TrajectoryTest` live here, not there, because
`workers/tf_behaviour_worker.py` runs their eager MirroredStrategy tests
again in a fresh process (with collective all-reduces) and must not import a
test module; tf_loss_scale_behaviour_test imports them, so pytest collects
them there.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
import contextlib
import os

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mplso
from mplso_test.helpers import testing

NAN, INF = testing.NAN, testing.INF
F32_MAX = np.finfo(np.float32).max
GRAPH, EAGER = testing.GRAPH, testing.EAGER
MODES = (GRAPH, EAGER)  # The modes TF's tests ran in.
NO_STRATEGY, MIRRORED = "no_strategy", "mirrored"
STRATEGIES = (NO_STRATEGY, MIRRORED)
CPUS = ["/cpu:0", "/cpu:1"]

# Set in the environment of EagerCollectivesTest's fresh process
# (`workers/tf_behaviour_worker.py`): eager MirroredStrategy there all-reduces
# with collective ops, its default; elsewhere through one device.
IN_WORKER = "MPLSO_TF_BEHAVIOUR_WORKER"

# The classes under test: mplso's, and TF's own that TF 2.21 still ships.
Classes = collections.namedtuple("Classes", "optimizer dynamic fixed")
OURS = Classes(mplso.MixedPrecisionLossScaleOptimizer, mplso.DynamicLossScale,
               mplso.FixedLossScale)
THEIRS = Classes(tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer,
                 tf.compat.v1.mixed_precision.DynamicLossScale,
                 tf.compat.v1.mixed_precision.FixedLossScale)
IMPLEMENTATIONS = {"ours": OURS, "theirs": THEIRS}


NAMED_MODES = [(mode, mode) for mode in MODES]


def split_cpu() -> None:
  """Splits the CPU into the logical CPUs of `CPUS`, as conftest.py does.

  For a test module run as a script, outside pytest.
  """
  cpu, = tf.config.list_physical_devices("CPU")
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * len(CPUS))


def matrix(*cases):
  """Named parameters: each case (name, *args) in every mode and strategy.

  Names start with "_": `test` + name reads `test_NAME_MODE_STRATEGY`; a
  case named "" gives `test_..._MODE_STRATEGY`.
  """
  return [("_" + "_".join(filter(None, (case[0], mode, strategy))), *case[1:],
           mode, strategy)
          for case in cases for mode in MODES for strategy in STRATEGIES]


def make_strategy(strategy_id: str, mode: str) -> tf.distribute.Strategy:
  """The strategy `strategy_id` (in graph mode, call it inside the graph)."""
  if strategy_id == NO_STRATEGY:
    return tf.distribute.get_strategy()
  if mode == GRAPH or os.environ.get(IN_WORKER):
    return tf.distribute.MirroredStrategy(CPUS)
  return tf.distribute.MirroredStrategy(
      CPUS, cross_device_ops=tf.distribute.ReductionToOneDevice())


@contextlib.contextmanager
def running(mode: str, strategy_id: str):
  """Yields `(runner, strategy)`, inside the strategy's scope."""
  with testing.ModeRunner(mode) as runner:
    strategy = make_strategy(strategy_id, mode)
    with strategy.scope():
      yield runner, strategy


def agreed(runner, value, strategy=None):
  """The value each replica holds of a variable or tensor; raises if not one.

  `strategy` defaults to the current one.
  """
  strategy = strategy or tf.distribute.get_strategy()
  values = runner.read(list(strategy.experimental_local_results(value)))
  for other in values[1:]:
    np.testing.assert_array_equal(values[0], other, "replicas differ")
  return values[0]


def not_converted(fn):
  """`fn`, which MirroredStrategy runs as it is (AutoGraph skips it)."""
  return tf.autograph.experimental.do_not_convert(fn)


def is_last_replica() -> bool:
  """Whether this replica is its strategy's last (in replica context)."""
  context = tf.distribute.get_replica_context()
  replica = tf.get_static_value(context.replica_id_in_sync_group)
  return replica == context.num_replicas_in_sync - 1


def on_last_replica(poisoned: Callable[[], object],
                    clean: Callable[[], object]):
  """`poisoned()` on the last replica, `clean()` on the others.

  Called in cross-replica context, it returns per-replica values, as TF's
  test made its gradients; without a strategy, `poisoned()`.
  """
  strategy = tf.distribute.get_strategy()
  if strategy.num_replicas_in_sync == 1:
    return poisoned()
  return strategy.extended.call_for_each_replica(not_converted(
      lambda: poisoned() if is_last_replica() else clean()))


def scale_variables(loss_scale) -> tuple[tf.Variable, tf.Variable]:
  """The (scale, good_steps) variables of our or TF's DynamicLossScale."""
  if isinstance(loss_scale, mplso.LossScale):
    return loss_scale.variables[:2]
  # pylint: disable-next=protected-access
  return loss_scale._current_loss_scale, loss_scale._num_good_steps


def _slices(values, indices=(0, 2)):
  return tf.IndexedSlices(tf.constant(values), tf.constant(list(indices)),
                          tf.constant([4, 2]))


def _unknown_shape(values):
  # Unknown shape in a graph; a plain tensor eagerly.
  return tf.compat.v1.placeholder_with_default(
      np.array(values, np.float32), shape=None)


# What one `update` is given: (name, gradients made in cross-replica
# context, all finite?). Per-replica ones differ on the last replica.
GRAD_CASES = [
    ("python_one", lambda: [1.], True),
    ("python_nan", lambda: [NAN], False),
    ("python_inf", lambda: [INF], False),
    ("python_scalar_alone", lambda: 1., True),
    ("python_and_none", lambda: [1., None], True),
    ("none_and_python_nan", lambda: [None, NAN], False),
    ("only_none", lambda: [None], True),
    ("empty_list", lambda: [], True),
    ("numpy_nan", lambda: [np.float32(2.), np.array([1., NAN], np.float32)],
     False),
    ("nest", lambda: {"a": 1., "b": [tf.constant([2.]), None]}, True),
    ("tensor_alone", lambda: tf.constant(4.), True),
    ("tensor_minus_inf", lambda: [tf.constant([[1.], [-INF]])], False),
    ("empty_tensor", lambda: [tf.zeros([0, 3]), tf.constant(1.)], True),
    ("unknown_shape_nan", lambda: [_unknown_shape([[1.], [NAN]])], False),
    ("indexed_slices_nan", lambda: [_slices([[1., NAN], [3., 4.]])], False),
    ("float16_largest", lambda: [tf.constant([65504.], tf.float16)], True),
    ("float16_inf", lambda: [tf.constant([1., INF], tf.float16)], False),
    ("bfloat16_nan", lambda: [tf.constant([NAN, 1.], tf.bfloat16)], False),
    ("float64_beyond_float32", lambda: [tf.constant([1e300], tf.float64)],
     True),
    # Finite values whose sum overflows float32, and many of one shape.
    ("many_summing_past_float32", lambda: [tf.fill([2], 3e38)] * 9, True),
    ("many_one_nan", lambda: [tf.ones([2])] * 8 + [tf.constant([1., NAN])],
     False),
    ("per_replica_finite", lambda: [on_last_replica(
        lambda: tf.constant([3.]), lambda: tf.constant([1.]))], True),
    ("per_replica_nan_on_last", lambda: [on_last_replica(
        lambda: tf.constant([NAN, 1.]), lambda: tf.constant([1., 1.]))],
     False),
    ("per_replica_slices_inf_on_last", lambda: [None, on_last_replica(
        lambda: _slices([[1., 1.], [INF, 1.]]),
        lambda: _slices([[1., 1.], [1., 1.]]))], False),
]

# Gradients TF's class refuses where mplso's accepts them, with TF's error.
TF_REFUSES = {
    # TF's check calls `is_finite(2)`, an int32 tensor; mplso converts a
    # Python number to float32.
    "python_int": (lambda: [2], True,
                   (TypeError, tf.errors.InvalidArgumentError)),
}


def update_once(runner, make_grads) -> dict[str, tuple[bool, float, int]]:
  """Updates a fresh DynamicLossScale(4, increment_period=1) of each kind once.

  Call inside the strategy's scope. In graph mode the update ops run in one
  `Session.run`.

  Returns:
    Per implementation: `(should_apply, scale, good_steps)` after the update.
  """
  grads = make_grads()
  loss_scales, updates = {}, {}
  for name, classes in IMPLEMENTATIONS.items():
    loss_scales[name] = classes.dynamic(initial_loss_scale=4.,
                                        increment_period=1)
    updates[name] = loss_scales[name].update(grads)
  runner.initialize()
  if runner.graph_mode:
    updates = runner.session.run(updates)
  results = {}
  for name, (_, should_apply) in updates.items():
    scale, good_steps = scale_variables(loss_scales[name])
    results[name] = (bool(np.asarray(should_apply)),
                     float(agreed(runner, scale)),
                     int(agreed(runner, good_steps)))
  return results


class UpdateTest(tf.test.TestCase, parameterized.TestCase):
  """One `DynamicLossScale.update` on every kind of gradient TF accepted."""

  @parameterized.named_parameters(matrix(*GRAD_CASES))
  def test(self, make_grads, finite, mode, strategy_id):
    with running(mode, strategy_id) as (runner, _):
      results = update_once(runner, make_grads)
    expected = (finite, 8. if finite else 2., 0)
    # Lists, which assertEqual compares exactly (dicts within a tolerance).
    self.assertEqual([expected] * 2, [results["ours"], results["theirs"]])

  @parameterized.named_parameters(matrix(
      *[(name, *case) for name, case in TF_REFUSES.items()]))
  def test_tf_refuses(self, make_grads, finite, tf_error, mode, strategy_id):
    with running(mode, strategy_id) as (runner, _):
      with self.assertRaises(tf_error):
        update_once(runner, make_grads)  # TF's class raises.
      loss_scale = mplso.DynamicLossScale(4., increment_period=1)
      update_op, should_apply = loss_scale.update(make_grads())
      runner.initialize()
      if runner.graph_mode:
        _, should_apply = runner.session.run((update_op, should_apply))
      self.assertEqual(finite, bool(should_apply))
      self.assertEqual(8. if finite else 2.,
                       agreed(runner, loss_scale.variables[0]))


# TF's sequences: (name, {is each step finite}, the scale after each step,
# DynamicLossScale's arguments).
F32_QUARTER = F32_MAX / 4
TRAJECTORIES = [
    ("increase", [True] * 6, [1, 2, 2, 4, 4, 8], {}),
    ("keep_increasing_until_capped", [True] * 6,
     [F32_QUARTER, F32_QUARTER * 2, F32_QUARTER * 2, F32_MAX, F32_MAX,
      F32_MAX], dict(initial_loss_scale=float(F32_QUARTER))),
    ("decrease_every_step", [False] * 6, [512, 256, 128, 64, 32, 16],
     dict(initial_loss_scale=1024)),
    ("keep_decreasing_until_one", [False] * 6, [8, 4, 2, 1, 1, 1],
     dict(initial_loss_scale=16)),
    ("nan_clear_good_step", [True, True, True, False, True], [1, 2, 2, 1, 1],
     {}),
    ("trigger_loss_scale_update_each_step", [True] * 3 + [False, True, True],
     [2, 4, 8, 4, 8, 16], dict(increment_period=1)),
    ("alternating_good_and_bad_gradients_trigger_each_step",
     [True, False] * 4 + [True], [2, 1, 2, 1, 2, 1, 2, 1, 2],
     dict(increment_period=1)),
    ("alternating_good_and_bad_gradients_trigger_every_other_step",
     [True, False] * 3 + [True], [32, 16, 16, 8, 8, 4, 4],
     dict(initial_loss_scale=32)),
    ("nondefault_multiplier", [True, True, False, True, True],
     [4, 12, 4, 4, 12], dict(initial_loss_scale=4, multiplier=3)),
    ("random_mix_good_and_bad_gradients",
     [False, True, True, True, False, True, False, True, True, True, False],
     [2, 2, 4, 4, 2, 2, 1, 1, 2, 2, 1], dict(initial_loss_scale=4)),
]


def trajectory(runner, finite_steps, **config) -> dict[str, list]:
  """Updates a DynamicLossScale of each kind once per entry of `finite_steps`.

  Each step's gradient is NaN on the last replica when the step is not
  finite. TF's test defaults: initial scale 1, period 2, multiplier 2. Call
  inside the strategy's scope.

  Returns:
    Per implementation, `[should_apply, scale]` after each step.
  """
  config = {"initial_loss_scale": 1., "increment_period": 2, "multiplier": 2,
            **config}
  loss_scales = {name: classes.dynamic(**config)
                 for name, classes in IMPLEMENTATIONS.items()}

  def grads(finite):
    return [on_last_replica(lambda: tf.where(finite, 1., NAN),
                            lambda: tf.constant(1.))]

  if runner.graph_mode:
    finite = tf.compat.v1.placeholder(tf.bool, [])
    built = {name: ls.update(grads(finite)) for name, ls in loss_scales.items()}
    runner.initialize()
  results = {name: [] for name in loss_scales}
  for step_finite in finite_steps:
    if runner.graph_mode:
      flags = {name: should_apply for name, (_, should_apply) in
               runner.session.run(built, {finite: step_finite}).items()}
    else:
      flags = {name: ls.update(grads(tf.constant(step_finite)))[1]
               for name, ls in loss_scales.items()}
    for name, loss_scale in loss_scales.items():
      results[name].append([
          bool(np.asarray(flags[name])),
          float(agreed(runner, scale_variables(loss_scale)[0]))])
  return results


class TrajectoryTest(tf.test.TestCase, parameterized.TestCase):
  """TF's update-rule sequences: period, multiplier, floor 1, float32 cap."""

  @parameterized.named_parameters(matrix(*TRAJECTORIES))
  def test(self, finite_steps, scales, config, mode, strategy_id):
    with running(mode, strategy_id) as (runner, _):
      results = trajectory(runner, finite_steps, **config)
    expected = [[f, float(np.float32(s))] for f, s in zip(finite_steps, scales)]
    self.assertEqual([expected] * 2, [results["ours"], results["theirs"]])
