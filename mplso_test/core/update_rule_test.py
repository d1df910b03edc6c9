"""Tests for the dynamic loss-scale update rule: the arithmetic, pinned once."""

import numpy as np
import tensorflow as tf
from absl.testing import absltest
from absl.testing import parameterized

from mplso._src.core import update_rule

F, N = True, False  # A finite step, a non-finite step.
MAX32 = float(np.finfo(np.float32).max)

# (name, initial scale, increment_period, multiplier, steps,
#  expected [(scale, good_steps)] after each step). Written by hand from the
# documented rule, not computed.
TABLE = [
    ("grows_after_period", 4., 2, 2., [F, F, F, F],
     [(4., 1), (8., 0), (8., 1), (16., 0)]),
    ("period_one_grows_every_step", 1., 1, 2., [F, F, F],
     [(2., 0), (4., 0), (8., 0)]),
    ("nonfinite_halves_and_resets_count", 64., 3, 2., [F, F, N, F],
     [(64., 1), (64., 2), (32., 0), (32., 1)]),
    ("floor_of_one", 2., 5, 2., [N, N, N],
     [(1., 0), (1., 0), (1., 0)]),
    ("floor_of_one_with_odd_multiplier", 5., 5, 4., [N, N],
     [(1.25, 0), (1., 0)]),
    ("non_power_of_two_multiplier", 10., 1, 3., [F, N],
     [(30., 0), (10., 0)]),
    # At the top of float32 the grown scale would be inf: the scale stays and
    # the count still resets, as in TF.
    ("no_growth_to_inf", 2.**127, 1, 2., [F, F],
     [(2.**127, 0), (2.**127, 0)]),
    ("largest_finite_reached_not_passed", MAX32 / 4, 1, 2., [F, F, F],
     [(MAX32 / 2, 0), (MAX32, 0), (MAX32, 0)]),
]


def python_rule(scale, good_steps, finite, period, multiplier):
  """A plain-Python model of the rule, for a second, independent opinion."""
  scale = np.float32(scale)
  if not finite:
    return max(np.float32(scale / np.float32(multiplier)), np.float32(1)), 0
  good_steps += 1
  if good_steps >= period:
    with np.errstate(over="ignore"):
      grown = np.float32(scale * np.float32(multiplier))
    return (grown if np.isfinite(grown) else scale), 0
  return scale, good_steps


class NextDynamicStateTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*TABLE)
  def test_table(self, scale, period, multiplier, steps, expected):
    good_steps = tf.constant(0, tf.int64)
    scale = tf.constant(scale, tf.float32)
    got = []
    for finite in steps:
      scale, good_steps = update_rule.next_dynamic_state(
          scale, good_steps, tf.constant(finite), period, multiplier)
      got.append((float(scale), int(good_steps)))
    self.assertEqual(expected, got)

  @parameterized.named_parameters(*TABLE)
  def test_matches_python_model(self, scale, period, multiplier, steps,
                                expected):
    del expected
    state = (np.float32(scale), 0)
    tf_state = (tf.constant(scale, tf.float32), tf.constant(0, tf.int64))
    for finite in steps:
      state = python_rule(*state, finite, period, multiplier)
      tf_state = update_rule.next_dynamic_state(
          *tf_state, tf.constant(finite), period, multiplier)
      self.assertEqual((float(state[0]), state[1]),
                       (float(tf_state[0]), int(tf_state[1])))

  def test_dtypes(self):
    scale, good_steps = update_rule.next_dynamic_state(
        tf.constant(2.), tf.constant(0, tf.int64), tf.constant(True), 2, 2.)
    self.assertEqual((tf.float32, tf.int64), (scale.dtype, good_steps.dtype))

  def test_traced_rule_has_no_branches(self):
    # The rule is arithmetic only: no tf.cond, so no If/Switch op per step.
    graph = tf.function(update_rule.next_dynamic_state).get_concrete_function(
        tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.int64),
        tf.TensorSpec([], tf.bool), 3, 2.).graph
    op_types = {op.type for op in graph.get_operations()}
    self.assertEmpty(op_types & {"If", "StatelessIf", "Switch", "Merge"})


if __name__ == "__main__":
  absltest.main()
