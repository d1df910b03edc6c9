"""TF 2.3's own tests of its TF1 loss scales, run on mplso's.

TF 2.3 tested `FixedLossScale` and `DynamicLossScale` in
tensorflow/python/training/experimental/loss_scale_test.py, in graph and
eager mode, most with and without a MirroredStrategy. Their behaviours are written anew here and run on mplso's
classes and, in the same test on the same inputs, on TF's own classes that
TF 2.21 still ships (`tf.compat.v1.mixed_precision.*`): both must agree,
except where mplso deviates on purpose, which the test then asserts.

The MirroredStrategy has 2 replicas on 2 of the logical CPUs conftest.py
makes, and a non-finite gradient sits on the last replica only, so that the
replicas must agree on the finite flag. In graph mode it all-reduces with
collective ops, its default (each Session keeps its own collective state).
Eagerly, in this process, it reduces through one device: eager collective
instances are numbered per process, and two all-reduces of different shapes
under one instance key fail ("Shape mismatch in the collective instance").
`EagerCollectivesTest` runs the eager MirroredStrategy loss-scale tests again
with the default collective all-reduce, in a fresh process of exactly 2
logical CPUs (`mplso_test/helpers/workers/tf_behaviour_worker.py`), where every
all-reduce is the scalar finite flag. Those tests (`UpdateTest`,
`TrajectoryTest`) and their harness live in
`mplso_test/helpers/tf_behaviour_cases.py`, so that the worker imports no test
module; pytest collects them here.

TF's test -> the test that covers it ("here" is this file; the others are
mplso_test/FILE::CLASS::TEST, a FILE without a folder being in integration/).
MODE is graph or eager, STRATEGY no_strategy or mirrored.

loss_scale_test.py
  FixedLossScaleTest.test_basic -> here FixedLossScaleTest::
      test_update_keeps_scale_and_returns_true_MODE; before:
      loss_scales/loss_scale_test.py::ConstructorTest::test_fixed (eager) and
      loss_scales/loss_scale_test.py::DynamicUpdateTest::
      test_fixed_update_returns_what_tfs_returns.
  FixedLossScaleTest.test_serialization -> here FixedLossScaleTest::
      test_from_config_MODE; before:
      loss_scales/loss_scale_test.py::SerializationTest::
      test_round_trip_fixed (eager).
  FixedLossScaleTest.test_call_type -> here FixedLossScaleTest::
      test_call_returns_tensor_MODE.
  FixedLossScaleTest.test_repr ->
      loss_scales/loss_scale_test.py::ConstructorTest::test_fixed; here
      FixedLossScaleTest::test_repr_MODE.
  DynamicLossScaleTest.test_increase, test_keep_increasing_until_capped,
      test_decrease_every_step, test_keep_decreasing_until_one,
      test_nan_clear_good_step, test_trigger_loss_scale_update_each_step,
      test_alternating_good_and_bad_gradients_trigger_each_step,
      test_alternating_good_and_bad_gradients_trigger_every_other_step,
      test_nondefault_multiplier, test_random_mix_good_and_bad_gradients ->
      here TrajectoryTest::test_NAME_MODE_STRATEGY (NAME without "test_"),
      and EagerCollectivesTest::test_trajectory_NAME_eager_mirrored; before:
      the arithmetic in core/update_rule_test.py::DynamicRuleTest (no TF
      class, no strategy),
      one sequence in loss_scales/loss_scale_test.py::DynamicUpdateTest::
      test_update_steps_MODE (no strategy), the float32 cap in
      loss_scales/loss_scale_test.py::NumbersAsTfAcceptedThemTest::
      test_keep_increasing_until_capped_at_float32_max (eager, no strategy).
  DynamicLossScaleTest.test_single_tensor_gradient -> here UpdateTest::
      test_tensor_alone_MODE_STRATEGY and test_python_scalar_alone_*.
  DynamicLossScaleTest.test_update_with_none_gradients -> here UpdateTest::
      test_only_none_MODE_STRATEGY (and *_and_none_*); before, with other
      gradients: loss_scales/loss_scale_test.py::DynamicUpdateTest::
      test_update_steps.
  DynamicLossScaleTest.test_serialization -> here DynamicLossScaleTest::
      test_from_config_MODE; before:
      loss_scales/loss_scale_test.py::SerializationTest (eager).
  DynamicLossScaleTest.test_get -> loss_scales/loss_scale_test.py::GetTest::
      test_accepted.
  DynamicLossScaleTest.test_call_type -> here DynamicLossScaleTest::
      test_call_returns_tensor_MODE.
  DynamicLossScaleTest.test_repr -> here DynamicLossScaleTest::
      test_repr_MODE_STRATEGY; before:
      loss_scales/loss_scale_test.py::DynamicUpdateTest::test_repr (eager, no
      strategy).
  Beyond TF's file, what `update` also accepts: Python numbers (`[1.]`,
      `[nan]`, `[inf]`), NumPy values, nests, None entries, tensors of every
      float dtype and unknown shape, `IndexedSlices`, per-replica values ->
      here UpdateTest::test_CASE_MODE_STRATEGY (and test_tf_refuses_*: a
      Python int, which TF's class refuses) and EagerCollectivesTest::
      test_update_CASE_eager_mirrored; before: loss_scales/loss_scale_test.py::
      DynamicUpdateTest::test_eager_python_number_gradients (eager, no
      strategy) and config_matrix_test.py::PythonNumbersTest (eager).

The optimizer's tests (loss_scale_optimizer_test.py) are in
tf_optimizer_behaviour_test.py.
"""

from __future__ import annotations

import json
import os
import re

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

from mplso import loss_scale as loss_scale_module
from mplso_test.helpers import processes
from mplso_test.helpers import testing
from mplso_test.helpers import tf_behaviour_cases
from mplso_test.helpers.tf_behaviour_cases import EAGER
from mplso_test.helpers.tf_behaviour_cases import IMPLEMENTATIONS
from mplso_test.helpers.tf_behaviour_cases import IN_WORKER
from mplso_test.helpers.tf_behaviour_cases import MIRRORED
from mplso_test.helpers.tf_behaviour_cases import NAMED_MODES
from mplso_test.helpers.tf_behaviour_cases import NAN
from mplso_test.helpers.tf_behaviour_cases import OURS
from mplso_test.helpers.tf_behaviour_cases import THEIRS
from mplso_test.helpers.tf_behaviour_cases import TrajectoryTest
from mplso_test.helpers.tf_behaviour_cases import UpdateTest
from mplso_test.helpers.tf_behaviour_cases import matrix
from mplso_test.helpers.tf_behaviour_cases import running


class FixedLossScaleTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*NAMED_MODES)
  def test_update_keeps_scale_and_returns_true(self, mode):
    with testing.ModeRunner(mode) as runner:
      for classes in IMPLEMENTATIONS.values():
        loss_scale = classes.fixed(1000)
        for grad in (0., NAN):
          update_op, should_apply = loss_scale.update([tf.constant(grad)])
          if update_op is not None:  # What TF returns: a no_op in a graph.
            runner.run(update_op)
          # A Python bool, so that callers need no tf.cond.
          self.assertIs(True, should_apply)
          self.assertEqual(1000., runner.run(loss_scale()))

  @parameterized.named_parameters(*NAMED_MODES)
  def test_call_returns_tensor(self, mode):
    with testing.ModeRunner(mode):
      for classes in IMPLEMENTATIONS.values():
        self.assertIsInstance(classes.fixed(123)(), tf.Tensor)
        self.assertEqual(tf.float32, classes.fixed(123)().dtype)

  @parameterized.named_parameters(*NAMED_MODES)
  def test_from_config(self, mode):
    with testing.ModeRunner(mode) as runner:
      configs = []
      for classes in IMPLEMENTATIONS.values():
        restored = classes.fixed.from_config(classes.fixed(123).get_config())
        self.assertEqual(123., runner.run(restored()))
        configs.append(restored.get_config())
      self.assertEqual(*configs)
      restored = loss_scale_module.deserialize(
          loss_scale_module.serialize(loss_scale_module.get(123)))
      self.assertEqual(123., runner.run(restored()))

  @parameterized.named_parameters(*NAMED_MODES)
  def test_repr(self, mode):
    with testing.ModeRunner(mode):
      self.assertEqual(repr(THEIRS.fixed(123)), repr(OURS.fixed(123)))
      self.assertEqual("FixedLossScale(123.0)", repr(OURS.fixed(123)))


class DynamicLossScaleTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*NAMED_MODES)
  def test_from_config(self, mode):
    with testing.ModeRunner(mode) as runner:
      for classes in IMPLEMENTATIONS.values():
        original = classes.dynamic(initial_loss_scale=1, increment_period=2,
                                   multiplier=3)
        restored = classes.dynamic.from_config(original.get_config())
        runner.initialize()
        self.assertEqual(1., runner.run(restored()))
        self.assertEqual((2, 3.),
                         (restored.increment_period, restored.multiplier))
        self.assertEqual(original.get_config(), restored.get_config())
      self.assertEqual(THEIRS.dynamic(1, 2, 3).get_config(),
                       OURS.dynamic(1, 2, 3).get_config())
      restored = loss_scale_module.deserialize(
          loss_scale_module.serialize(OURS.dynamic(1, 2, 3)))
      runner.initialize()
      self.assertEqual((1., 2, 3.), (runner.run(restored()),
                                     restored.increment_period,
                                     restored.multiplier))

  @parameterized.named_parameters(*NAMED_MODES)
  def test_call_returns_tensor(self, mode):
    with testing.ModeRunner(mode):
      for classes in IMPLEMENTATIONS.values():
        self.assertIsInstance(classes.dynamic()(), tf.Tensor)

  @parameterized.named_parameters(matrix(("",)))
  def test_repr(self, mode, strategy_id):
    with running(mode, strategy_id) as (runner, _):
      loss_scales = [classes.dynamic(initial_loss_scale=1, increment_period=2,
                                     multiplier=3)
                     for classes in IMPLEMENTATIONS.values()]
      runner.initialize()
      # Eagerly with the variables' values, in a graph without.
      state = ("current_loss_scale=1.0, num_good_steps=0, "
               if mode == EAGER else "")
      expected = (f"DynamicLossScale({state}initial_loss_scale=1.0, "
                  "increment_period=2, multiplier=3.0)")
      self.assertEqual([expected] * 2, [repr(ls) for ls in loss_scales])


# The tests EagerCollectivesTest runs again in a fresh process, by
# "Class.method": those of eager MirroredStrategy loss-scale updates, whose
# only all-reduce is the scalar finite flag.
FRESH_PROCESS_TESTS = [
    f"{cls.__name__}.{name}" for cls in (UpdateTest, TrajectoryTest)
    for name in sorted(dir(cls))
    if name.startswith("test") and name.endswith(f"_{EAGER}_{MIRRORED}")]


class _FreshProcess:
  """The fresh process of EagerCollectivesTest, running FRESH_PROCESS_TESTS.

  setUpModule starts it, so that it runs beside this process's own tests.
  """

  def __init__(self):
    self._worker = processes.Worker(
        "mplso_test.helpers.workers.tf_behaviour_worker", *FRESH_PROCESS_TESTS,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
             "CUDA_VISIBLE_DEVICES": "", IN_WORKER: "1"},
        name="the fresh process")
    self._results = None

  def results(self) -> dict[str, str | None]:
    """Test id -> None if it passed, else its traceback; waits for the end."""
    if self._results is None:
      [output] = processes.finish([self._worker])
      self._results = json.loads(processes.last_line(output))
    return self._results

  def stop(self) -> None:
    self._worker.close()


def setUpModule():  # pylint: disable=invalid-name
  EagerCollectivesTest.worker = _FreshProcess()


def tearDownModule():  # pylint: disable=invalid-name
  if EagerCollectivesTest.worker is not None:
    EagerCollectivesTest.worker.stop()


class EagerCollectivesTest(tf.test.TestCase, parameterized.TestCase):
  """The eager MirroredStrategy update tests, with collective all-reduces.

  All run in one fresh process of 2 logical CPUs (`_FreshProcess`).
  """

  worker: _FreshProcess | None = None

  @parameterized.named_parameters(
      ("_" + re.sub(r"Test\.test_?", "_", test_id).lower(), test_id)
      for test_id in FRESH_PROCESS_TESTS)
  def test(self, test_id):
    if EagerCollectivesTest.worker is None:  # setUpModule did not run.
      EagerCollectivesTest.worker = _FreshProcess()
    results = EagerCollectivesTest.worker.results()
    self.assertIn(test_id, results, "not run in the worker")
    if results[test_id] is not None:
      self.fail(f"{test_id} in a fresh process with collective all-reduces:"
                f"\n{results[test_id]}")


if __name__ == "__main__":
  tf_behaviour_cases.split_cpu()
  absltest.main()
