"""mplso's optimizers under tf.distribute: all replicas skip or apply together.

Every family of `distribute_families` trains the same linear model on the
same global batches under each strategy of `testing.STRATEGIES`; one replica's part of some batches
holds a NaN or an Inf. The data are small integers, the batch size, learning
rate and loss scales powers of two, so every sum is exact whatever the
all-reduce order: results are compared with assertAllEqual, never with a
tolerance.

`MultiWorkerTest` (marked `multiworker`) starts worker processes on
127.0.0.1: two under MultiWorkerMirroredStrategy
(`mplso_test.helpers.workers.multiworker_worker`), and a one-process
parameter-server cluster (`mplso_test.helpers.workers.parameter_server_worker`),
which mplso refuses.
"""

from __future__ import annotations

import itertools
import json
import os

from absl.testing import absltest
from absl.testing import parameterized
import pytest
import tensorflow as tf

from mplso_test.helpers import distribute_families
from mplso_test.helpers import processes
from mplso_test.helpers import testing

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


def _matrix(families, strategies=tuple(testing.STRATEGIES)):
  return [(f"{family}_{strategy}", family, strategy)
          for family, strategy in itertools.product(families, strategies)]


class DistributeTest(tf.test.TestCase, parameterized.TestCase):

  def _assert_same_everywhere(self, state):
    for name, values in state.items():
      for value in values[1:]:
        self.assertAllEqual(value, values[0], msg=name)

  @parameterized.named_parameters(_matrix(distribute_families.FAMILIES))
  def test_skip_together(self, family, strategy):
    if (family, strategy) in UNSUPPORTED:
      self.skipTest(UNSUPPORTED[family, strategy])
    strategy = testing.STRATEGIES[strategy]()
    state = distribute_families.train(distribute_families.FAMILIES[family](),
                                      strategy)
    self._assert_same_everywhere(state)
    # One device, global batch.
    reference = distribute_families.train(
        distribute_families.FAMILIES[family]())
    self.assertEqual(state.keys(), reference.keys())
    for name in state:
      self.assertAllEqual(state[name][0], reference[name][0], msg=name)
    for name, expected in distribute_families.EXPECTED.items():
      if name in state:
        self.assertEqual(state[name][0], expected, msg=name)
    if "bad_steps" in state:
      self.assertEqual(state["bad_steps"][0], 0)

  @parameterized.named_parameters(_matrix(distribute_families.TF_FAMILIES))
  def test_parity_with_tf(self, family, strategy):
    for unsupported in (UNSUPPORTED, TF_UNSUPPORTED):
      if (family, strategy) in unsupported:
        self.skipTest(unsupported[family, strategy])
    ours = distribute_families.train(distribute_families.FAMILIES[family](),
                                     testing.STRATEGIES[strategy]())
    theirs = distribute_families.train(
        distribute_families.TF_FAMILIES[family](),
        testing.STRATEGIES[strategy]())
    self._assert_same_everywhere(theirs)
    for name in theirs:
      if name == "steps" and family.startswith("keras3"):
        # Keras 3's wrapper does not count a skipped step; TF 2.3 does.
        self.assertEqual(theirs[name][0],
                         distribute_families.EXPECTED["applied"])
        continue
      self.assertAllEqual(ours[name][0], theirs[name][0], msg=name)

  @parameterized.named_parameters(
      (f, f) for f in distribute_families.FAMILIES if f != "keras3_fit")
  def test_apply_in_cross_replica_context_raises(self, family):
    family = distribute_families.FAMILIES[family]()
    strategy = testing.STRATEGIES[testing.MIRRORED_2]()
    with strategy.scope():
      family.build()
      with self.assertRaisesRegex(ValueError, "replica context"):
        family.apply_in_cross_replica_context()


  @parameterized.named_parameters(
      (f"{family}_{direction}", family, direction)
      for family in distribute_families.FAMILIES
      for direction in ("strategy_to_none", "none_to_strategy"))
  def test_checkpoint_moves_between_strategy_and_none(self, family,
                                                     direction):
    mirrored = testing.STRATEGIES[testing.MIRRORED_2]()
    default = tf.distribute.get_strategy()
    saver, restorer = ((mirrored, default) if direction == "strategy_to_none"
                       else (default, mirrored))
    # Six steps (two skipped): scale 8, one good step, four applied.
    saving = distribute_families.FAMILIES[family]()
    saved = distribute_families.train(saving, saver,
                                      distribute_families.BATCHES[:6])
    self.assertEqual(saved["scale"][0], 8.)
    self.assertEqual(saved["good_steps"][0], 1)
    path = tf.train.Checkpoint(**saving.trackables()).save(
        self.create_tempdir().full_path + "/ckpt")

    family_instance = distribute_families.FAMILIES[family]()
    with restorer.scope():
      family_instance.build()
    tf.train.Checkpoint(**family_instance.trackables()).restore(
        path).assert_existing_objects_matched()
    restored = {name: distribute_families.local_values(restorer, value)
                for name, value in family_instance.state().items()}
    self._assert_same_everywhere(restored)
    for name in saved:
      self.assertAllEqual(restored[name][0], saved[name][0], msg=name)
    # Two more steps from the restored state end where an uninterrupted
    # single-device run ends.
    family_instance.train(restorer, distribute_families.BATCHES[6:])
    final = {name: distribute_families.local_values(restorer, value)
             for name, value in family_instance.state().items()}
    reference = distribute_families.train(
        distribute_families.FAMILIES[family]())
    for name in reference:
      self.assertAllEqual(final[name][0], reference[name][0], msg=name)

  @parameterized.named_parameters(_matrix(("v1", "contrib")))
  def test_v1_graph_session_skip_together(self, family, strategy):
    reference = distribute_families.train(
        distribute_families.FAMILIES[family]())
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
      strategy = testing.STRATEGIES[strategy]()
      family = distribute_families.FAMILIES[family]()
      with strategy.scope():
        family.build()
      x = tf.compat.v1.placeholder(
          tf.float32, (distribute_families.GLOBAL_BATCH, 3))
      t = tf.compat.v1.placeholder(
          tf.float32, (distribute_families.GLOBAL_BATCH, 1))
      ops = strategy.run(
          lambda x, t: family.replica_step(
              *distribute_families.replica_slice(x, t)),
          args=(x, t))
      train_op = tf.group(strategy.experimental_local_results(ops))
      session.run(tf.compat.v1.global_variables_initializer())
      for x_value, t_value in distribute_families.BATCHES:
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


@pytest.mark.multiworker
class MultiWorkerTest(tf.test.TestCase):
  """Two worker processes on 127.0.0.1 under MultiWorkerMirroredStrategy."""

  def _results(self, families) -> list[dict]:
    """Trains `families` on two workers; returns what each one printed."""
    ports = testing.free_ports(2)
    workers = [processes.start(
        "mplso_test.helpers.workers.multiworker_worker", *families,
        env=testing.worker_env(ports, index), add_cleanup=self.addCleanup,
        name=f"worker {index}") for index in range(2)]
    return [json.loads(processes.last_line(output))
            for output in processes.finish(workers)]

  def test_nan_on_one_worker_skips_on_both(self):
    # BATCHES put the NaN in row 4 and the Inf in row 7: worker 1's half.
    first, second = self._results(MULTIWORKER_FAMILIES)
    for family in MULTIWORKER_FAMILIES:
      with self.subTest(family=family):
        reference = distribute_families.train(
            distribute_families.FAMILIES[family]())
        self.assertEqual(first[family].keys(), reference.keys())
        for name in reference:
          self.assertAllEqual(first[family][name], second[family][name],
                              msg=name)
          self.assertAllEqual(first[family][name][0], reference[name][0],
                              msg=name)
        for name, expected in distribute_families.EXPECTED.items():
          if name in reference:
            self.assertEqual(first[family][name][0], expected, msg=name)


  def test_parameter_server_strategy_raises_naming_supported(self):
    worker = processes.start(
        "mplso_test.helpers.workers.parameter_server_worker",
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
             "CUDA_VISIBLE_DEVICES": ""}, add_cleanup=self.addCleanup)
    [output] = processes.finish([worker])
    errors = json.loads(processes.last_line(output))
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
