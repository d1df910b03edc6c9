"""`mplso._src.core.distribution`: strategies, one finite flag, replica ids.

Training under each strategy is in integration/distribute_test and
integration/tf_loss_scale_behaviour_test; here the module's functions, on 2
of the logical CPUs conftest.py makes, eagerly.
"""

from unittest import mock

import numpy as np
import tensorflow as tf

from mplso._src.core import distribution
from mplso_test.helpers import strategies

NAN, INF = float("nan"), float("inf")


def _per_replica(strategy, first, last):
  """A per-replica tensor: `first` on replica 0, `last` on replica 1."""
  return strategy.experimental_distribute_values_from_function(
      lambda context: tf.constant(
          last if context.replica_id_in_sync_group == 1 else first))


class CheckStrategySupportedTest(tf.test.TestCase):

  def test_default_and_mirrored_are_supported(self):
    distribution.check_strategy_supported("Creating a loss scale")
    with strategies.mirrored().scope():
      distribution.check_strategy_supported("Creating a loss scale")

  def test_parameter_server_is_refused_naming_the_supported(self):
    for cls in (tf.distribute.experimental.ParameterServerStrategy,
                tf.compat.v1.distribute.experimental.ParameterServerStrategy):
      strategy = cls.__new__(cls)  # Only its type is read.
      with mock.patch.object(tf.distribute, "get_strategy",
                             return_value=strategy):
        with self.assertRaisesRegex(
            ValueError, f"^Wrapping an optimizer is not supported under "
            f"{cls.__name__}: .*Supported: no strategy"):
          distribution.check_strategy_supported("Wrapping an optimizer")


class GradsFiniteTest(tf.test.TestCase):

  def test_without_a_strategy(self):
    self.assertTrue(distribution.grads_finite([tf.constant([1., 2.]), None]))
    self.assertFalse(distribution.grads_finite([tf.constant([1., NAN])]))
    flag, per_grad = distribution.check([tf.constant([1.]),
                                         tf.constant([INF])])
    self.assertFalse(flag)
    self.assertIsNotNone(per_grad)

  def test_a_nan_on_one_replica_makes_all_skip(self):
    strategy = strategies.mirrored()
    with strategy.scope():
      finite = _per_replica(strategy, [1., 2.], [3., 4.])
      self.assertTrue(distribution.grads_finite([finite, None]))
      poisoned = _per_replica(strategy, [1., 2.], [NAN, 4.])
      flag, per_grad = distribution.check([finite, poisoned])
      self.assertFalse(flag)
      self.assertIsNone(per_grad)  # Each replica has its own.
      poisoned_first = _per_replica(strategy, [INF, 2.], [1., 4.])
      self.assertFalse(distribution.grads_finite([poisoned_first]))


class ReplicaNamesTest(tf.test.TestCase):

  def test_no_strategy_is_one_replica(self):
    self.assertEqual([0], distribution.replica_names())

  def test_mirrored_replicas_in_order(self):
    with strategies.mirrored().scope():
      self.assertEqual([0, 1], distribution.replica_names())

  def test_several_workers_read_worker_colon_replica(self):
    strategy = mock.Mock(num_replicas_in_sync=4)
    strategy.extended.worker_devices = ["/cpu:0", "/cpu:1"]
    with mock.patch.object(tf.distribute, "has_strategy", return_value=True), \
        mock.patch.object(tf.distribute, "get_strategy",
                          return_value=strategy):
      self.assertEqual(["0:0", "0:1", "1:0", "1:1"],
                       distribution.replica_names())


class GradKindsTest(tf.test.TestCase):

  def test_one_row_without_a_strategy(self):
    kinds = distribution.grad_kinds(
        [tf.constant([1., NAN]), None, tf.constant([-INF])])
    self.assertEqual([[1, 0, 2]], kinds.numpy().tolist())

  def test_one_row_per_replica_in_replica_order(self):
    strategy = strategies.mirrored()
    with strategy.scope():
      kinds = distribution.grad_kinds([
          _per_replica(strategy, [1., 2.], [NAN, 4.]),
          _per_replica(strategy, [INF, 2.], [1., 4.])])
    np.testing.assert_array_equal([[0, 2], [1, 0]], kinds)


class RareBranchCondTest(tf.test.TestCase):

  def _lowering(self, strategy=None) -> list[bool | None]:
    @tf.function
    def step(x):
      return distribution.rare_branch_cond(x > 0., lambda: x, lambda: -x)

    if strategy is None:
      graph = step.get_concrete_function(tf.constant(1.)).graph
    else:
      with strategy.scope():
        graph = step.get_concrete_function(tf.constant(1.)).graph
    return [op.node_def.attr["_lower_using_switch_merge"].b
            if "_lower_using_switch_merge" in op.node_def.attr else None
            for op in graph.get_operations() if op.type.endswith("If")]

  def test_a_call_without_a_strategy(self):
    self.assertEqual([False], self._lowering())

  def test_lowered_under_a_strategy(self):
    # Each replica's tensors stay on their device.
    self.assertEqual([True], self._lowering(strategies.mirrored()))


if __name__ == "__main__":
  tf.test.main()
