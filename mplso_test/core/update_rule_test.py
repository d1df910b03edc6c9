"""Tests for the loss-scale update rule: the arithmetic, pinned once.

Three tables: TF's `DynamicLossScale` (every non-finite step shrinks, by
division), mplso's extensions of it (floor, ceiling, hysteresis), and TF 1.x
contrib's `ExponentialUpdateLossScaleManager` (shrinks after
`decrement_period` non-finite steps, by multiplication). The last table is
the expectations of TF 1.x's own `loss_scale_manager_test.py`.
"""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mplso._src.core import update_rule

T, F = True, False  # A finite step, a non-finite step.
MAX32 = float(np.finfo(np.float32).max)

# (name, initial scale, increment_period, multiplier, steps,
#  expected [(scale, good_steps)] after each step). Written by hand from the
# documented rule, not computed.
DYNAMIC_TABLE = [
    ("grows_after_period", 4., 2, 2., [T, T, T, T],
     [(4., 1), (8., 0), (8., 1), (16., 0)]),
    ("period_one_grows_every_step", 1., 1, 2., [T, T, T],
     [(2., 0), (4., 0), (8., 0)]),
    ("nonfinite_halves_and_resets_count", 64., 3, 2., [T, T, F, T],
     [(64., 1), (64., 2), (32., 0), (32., 1)]),
    ("floor_of_one", 2., 5, 2., [F, F, F],
     [(1., 0), (1., 0), (1., 0)]),
    ("floor_of_one_with_odd_multiplier", 5., 5, 4., [F, F],
     [(1.25, 0), (1., 0)]),
    ("non_power_of_two_multiplier", 10., 1, 3., [T, F],
     [(30., 0), (10., 0)]),
    # At the top of float32 the grown scale would be inf: the scale stays and
    # the count still resets, as in TF.
    ("no_growth_to_inf", 2.**127, 1, 2., [T, T],
     [(2.**127, 0), (2.**127, 0)]),
    ("largest_finite_reached_not_passed", MAX32 / 4, 1, 2., [T, T, T],
     [(MAX32 / 2, 0), (MAX32, 0), (MAX32, 0)]),
]

# mplso's extensions, multiplier 2: (name, initial scale, increment_period,
# keyword arguments of next_state, steps, expected [(scale, good_steps,
# consecutive non-finite steps)]). Written by hand from the documented rules
# of min_loss_scale, max_loss_scale and hysteresis.
EXTENSIONS_TABLE = [
    ("floor_below_one", 1., 5, dict(min_scale=.25), [F, F, F, F],
     [(.5, 0, 0), (.25, 0, 0), (.25, 0, 0), (.25, 0, 0)]),
    ("floor_above_one", 64., 5, dict(min_scale=16.), [F, F, F],
     [(32., 0, 0), (16., 0, 0), (16., 0, 0)]),
    ("ceiling_caps_growth", 4., 1, dict(max_scale=10.), [T, T, T],
     [(8., 0, 0), (10., 0, 0), (10., 0, 0)]),
    ("ceiling_instead_of_inf", MAX32 / 2, 1, dict(max_scale=MAX32), [T, T],
     [(MAX32, 0, 0), (MAX32, 0, 0)]),
    ("hysteresis_waits_for_consecutive", 64., 2, dict(decrement_period=3),
     [F, F, T, F, F, F, F],
     [(64., 0, 1), (64., 0, 2), (64., 1, 0), (64., 0, 1), (64., 0, 2),
      (32., 0, 0), (32., 0, 1)]),
    ("hysteresis_growth_unchanged", 8., 2, dict(decrement_period=2),
     [T, T, F, T, T], [(8., 1, 0), (16., 0, 0), (16., 0, 1), (16., 1, 0),
                       (32., 0, 0)]),
    ("all_together", 8., 1, dict(decrement_period=2, min_scale=4.,
                                 max_scale=16.),
     [T, T, F, F, F, F, F, F],
     [(16., 0, 0), (16., 0, 0), (16., 0, 1), (8., 0, 0), (8., 0, 1),
      (4., 0, 0), (4., 0, 1), (4., 0, 0)]),
]

# TF 1.x's tests: incr_ratio 2, decr_ratio 1/2; (name, init, incr_every_n,
# decr_every_n, steps, expected scales after each step).
CAPPED_INIT = float(np.float32(MAX32 / 4 + 10))
CONTRIB_TABLE = [
    ("grows", 1., 2, 2, [T] * 6, [1, 2, 2, 4, 4, 8]),
    ("capped", CAPPED_INIT, 2, 2, [T] * 6,
     [CAPPED_INIT, 2 * CAPPED_INIT, 2 * CAPPED_INIT, 4 * CAPPED_INIT,
      4 * CAPPED_INIT, 4 * CAPPED_INIT]),
    ("shrinks", 1024., 2, 2, [F] * 6, [1024, 512, 512, 256, 256, 128]),
    ("floor_of_one", 16., 2, 2, [F] * 10, [16, 8, 8, 4, 4, 2, 2, 1, 1, 1]),
    ("bad_step_clears_good_steps", 1., 2, 2, [T, T, T, F, T],
     [1, 2, 2, 2, 2]),
    ("good_step_keeps_bad_steps", 1., 2, 2, [T, T, T, F, T, F],
     [1, 2, 2, 2, 2, 1]),
    ("every_step", 1., 1, 1, [T, T, T, F, T, T], [2, 4, 8, 4, 8, 16]),
    ("alternating", 1., 1, 1, [T, F] * 4 + [T], [2, 1, 2, 1, 2, 1, 2, 1, 2]),
    ("decrease_every_bad_step", 32., 2, 1, [T, F] * 3 + [T],
     [32, 16, 16, 8, 8, 4, 4]),
    ("mixed", 4., 2, 2, [F, F, T, T, T, F, T, F, T, T, T, F],
     [4, 2, 2, 4, 4, 4, 4, 2, 2, 4, 4, 4]),
]


def dynamic_step(state, finite, period, multiplier):
  scale, good_steps, _ = update_rule.next_state(
      state[0], state[1], tf.constant(finite), increment_period=period,
      grow_ratio=multiplier, shrink=lambda s: s / multiplier)
  return scale, good_steps


def python_rule(scale, good_steps, finite, period, multiplier):
  """A plain-Python model of TF's DynamicLossScale, an independent opinion."""
  scale = np.float32(scale)
  if not finite:
    return max(np.float32(scale / np.float32(multiplier)), np.float32(1)), 0
  good_steps += 1
  if good_steps >= period:
    with np.errstate(over="ignore"):
      grown = np.float32(scale * np.float32(multiplier))
    return (grown if np.isfinite(grown) else scale), 0
  return scale, good_steps


class DynamicRuleTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*DYNAMIC_TABLE)
  def test_table(self, scale, period, multiplier, steps, expected):
    state = (tf.constant(scale, tf.float32), tf.constant(0, tf.int64))
    got = []
    for finite in steps:
      state = dynamic_step(state, finite, period, multiplier)
      got.append((float(state[0]), int(state[1])))
    self.assertEqual(expected, got)

  @parameterized.named_parameters(*DYNAMIC_TABLE)
  def test_matches_python_model(self, scale, period, multiplier, steps,
                                expected):
    del expected
    state = (np.float32(scale), 0)
    tf_state = (tf.constant(scale, tf.float32), tf.constant(0, tf.int64))
    for finite in steps:
      state = python_rule(*state, finite, period, multiplier)
      tf_state = dynamic_step(tf_state, finite, period, multiplier)
      self.assertEqual((float(state[0]), state[1]),
                       (float(tf_state[0]), int(tf_state[1])))

  def test_dtypes(self):
    scale, good_steps = dynamic_step(
        (tf.constant(2.), tf.constant(0, tf.int64)), True, 2, 2.)
    self.assertEqual((tf.float32, tf.int64), (scale.dtype, good_steps.dtype))

  def test_traced_rule_has_no_branches(self):
    # The rule is arithmetic only: no tf.cond, so no If/Switch op per step.
    fn = tf.function(lambda s, g, f, b: update_rule.next_state(
        s, g, f, increment_period=3, grow_ratio=2., shrink=lambda x: x / 2.,
        bad_steps=b, decrement_period=2))
    graph = fn.get_concrete_function(
        tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.int64),
        tf.TensorSpec([], tf.bool), tf.TensorSpec([], tf.int64)).graph
    op_types = {op.type for op in graph.get_operations()}
    self.assertEmpty(op_types & {"If", "StatelessIf", "Switch", "Merge"})

  def test_decrement_period_needs_counter(self):
    with self.assertRaisesRegex(ValueError, "bad_steps"):
      update_rule.next_state(tf.constant(2.), tf.constant(0), tf.constant(True),
                             increment_period=1, grow_ratio=2.,
                             shrink=lambda s: s, decrement_period=2)


class ExtensionsRuleTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*EXTENSIONS_TABLE)
  def test_table(self, scale, period, kwargs, steps, expected):
    kwargs = dict(kwargs)
    decrement_period = kwargs.pop("decrement_period", 1)
    scale = tf.constant(scale, tf.float32)
    good = bad = tf.constant(0, tf.int64)
    got = []
    for finite in steps:
      scale, good, new_bad = update_rule.next_state(
          scale, good, tf.constant(finite), increment_period=period,
          grow_ratio=2., shrink=lambda s: s / 2.,
          bad_steps=bad if decrement_period > 1 else None,
          decrement_period=decrement_period,
          finite_step_resets_bad_steps=True, **kwargs)
      bad = new_bad if new_bad is not None else bad
      got.append((float(scale), int(good), int(bad)))
    self.assertEqual(expected, got)

  def test_ceiling_costs_an_op_only_when_set(self):
    # Without a ceiling the traced rule is the one TF parity pins
    # (tf_parity_test): no Minimum, which only max_scale adds.
    def op_types(**kwargs):
      fn = tf.function(lambda s, g, f: update_rule.next_state(
          s, g, f, increment_period=3, grow_ratio=2.,
          shrink=lambda x: x / 2., **kwargs)[:2])
      graph = fn.get_concrete_function(
          tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.int64),
          tf.TensorSpec([], tf.bool)).graph
      return sorted(op.type for op in graph.get_operations())

    self.assertNotIn("Minimum", op_types())
    self.assertIn("Minimum", op_types(max_scale=8.))


class ContribRuleTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*CONTRIB_TABLE)
  def test_tf1_expectations(self, init, incr_every_n, decr_every_n, steps,
                            expected):
    scale = tf.constant(init, tf.float32)
    good = bad = tf.constant(0, tf.int32)
    got = []
    for finite in steps:
      scale, good, bad = update_rule.next_state(
          scale, good, tf.constant(finite), increment_period=incr_every_n,
          grow_ratio=2., shrink=lambda s: s * 0.5, bad_steps=bad,
          decrement_period=decr_every_n)
      got.append(float(scale))
    self.assertEqual([float(np.float32(e)) for e in expected], got)


if __name__ == "__main__":
  absltest.main()
