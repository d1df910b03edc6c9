"""Side by side with TF's own TF1 classes: same model, data and poisoned steps.

TF 2.21 still ships `tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer`
and `DynamicLossScale`. Both optimizers train twin models on the same batches,
including NaN, +Inf, -Inf and overflowing steps in dense and sparse gradients,
and after every step the variables, slots, loss scale, good-step count and
global step must be bit-identical.
"""

import itertools

from absl.testing import absltest
from absl.testing import parameterized
import hypothesis
from hypothesis import strategies as st
import numpy as np
import tensorflow as tf

import mplso
from mplso_test.helpers import testing

TF_MPLSO = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer
TF_DYNAMIC = tf.compat.v1.mixed_precision.DynamicLossScale

OPTIMIZERS = {
    "sgd": (lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1), []),
    "momentum": (lambda: tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
                 ["momentum"]),
    "adam": (lambda: tf.compat.v1.train.AdamOptimizer(0.01), ["m", "v"]),
}
DYNAMIC_CONFIGS = {
    "tf_default_scale": dict(initial_loss_scale=2.**15, increment_period=3,
                             multiplier=2.),
    "small_growing_scale": dict(initial_loss_scale=3., increment_period=1,
                                multiplier=3.),
}
CASES = [(f"{mode}_{opt}_{cfg}", mode, opt, cfg) for mode, opt, cfg in
         itertools.product(testing.MODES, OPTIMIZERS, DYNAMIC_CONFIGS)]


class Twin:
  """One model with its optimizer, global step and the loss scale's variables."""

  def __init__(self, runner, wrapper, loss_scale, opt_name):
    make_opt, self.slot_names = OPTIMIZERS[opt_name]
    self.model = testing.TinyModel()
    self.base = make_opt()
    self.opt = wrapper(self.base, loss_scale)
    self.global_step = tf.compat.v1.train.get_or_create_global_step() if (
        runner.graph_mode and wrapper is TF_MPLSO) else tf.Variable(
            0, dtype=tf.int64, trainable=False, name="global_step")
    loss = self.model.loss() if runner.graph_mode else self.model.loss
    self.step = runner.step(lambda: self.opt.minimize(
        loss, var_list=self.model.trainable, global_step=self.global_step))
    self.loss_scale = loss_scale

  def state(self, runner, scale_vars):
    # Keyed by role, not by graph name (the twin's names get a suffix).
    fetch = {}
    for role, var in zip(("w", "b", "emb"), self.model.trainable):
      fetch[role] = var
      for slot in self.slot_names:
        fetch[f"{role}/{slot}"] = self.base.get_slot(var, slot)
    fetch["global_step"] = self.global_step
    fetch.update(scale_vars)
    return runner.read(fetch)


def tf_scale_vars(loss_scale):
  # TF's DynamicLossScale has no public accessor for its variables.
  return {"scale": loss_scale._current_loss_scale,  # pylint: disable=protected-access
          "good_steps": loss_scale._num_good_steps}  # pylint: disable=protected-access


def our_scale_vars(loss_scale):
  scale, good_steps = loss_scale.variables
  return {"scale": scale, "good_steps": good_steps}


class DynamicParityTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*CASES)
  def test_identical_after_every_step(self, mode, opt_name, config_name):
    config = DYNAMIC_CONFIGS[config_name]
    with testing.ModeRunner(mode) as runner:
      theirs = Twin(runner, TF_MPLSO, TF_DYNAMIC(**config), opt_name)
      ours = Twin(runner, mplso.MixedPrecisionLossScaleOptimizer,
                  mplso.DynamicLossScale(**config), opt_name)
      runner.initialize()
      skipped = 0
      for step, poison in enumerate(testing.POISONED_SCHEDULE):
        data = testing.TinyModel.batch(step, poison)
        for twin in (theirs, ours):
          twin.model.feed(runner, data)
          twin.step()
        expected = theirs.state(runner, tf_scale_vars(theirs.loss_scale))
        got = ours.state(runner, our_scale_vars(ours.loss_scale))
        self.assertEqual(expected.keys(), got.keys())
        for key in expected:
          self.assertAllEqual(expected[key], got[key],
                              msg=f"step {step} ({poison}): {key}")
          self.assertTrue(np.all(np.isfinite(got[key])), f"{key} not finite")
        skipped = step + 1 - int(got["global_step"])
      # Every poisoned step was skipped, and only those.
      poisoned = sum(p is not None for p in testing.POISONED_SCHEDULE)
      self.assertEqual(poisoned, skipped)


F32_MAX = np.finfo(np.float32).max


@st.composite
def gradient_values(draw):
  """A small float32 gradient: finite (possibly huge), or with NaN or +-Inf."""
  values = np.array(draw(st.lists(
      st.sampled_from([0., 1e-3, -2.5, 3e38, -3e38, np.nan, np.inf, -np.inf]
                      + [1.] * 8), min_size=1, max_size=4)), np.float32)
  return values


class DefaultsBitIdenticalTest(tf.test.TestCase):
  """Default DynamicLossScale == TF's, bit for bit, on random NaN/Inf steps.

  The configurations include non-powers of two (rounding), NumPy arguments,
  an integral float period, and scales at the top of float32; the gradients
  include finite values whose sum overflows (a finite step all the same).
  """

  def test_random_gradients(self):

    @hypothesis.settings(max_examples=25, deadline=None, derandomize=True,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(
        initial=st.sampled_from([1., 3., 2.**15, 1e5, F32_MAX / 4,
                                 np.float32(2.**127)]),
        period=st.sampled_from([1, 2, 3., np.int64(2)]),
        multiplier=st.sampled_from([2., 3, 1.5, np.float32(2.)]),
        steps=st.lists(st.lists(gradient_values(), min_size=1, max_size=3),
                       min_size=1, max_size=15))
    def check(initial, period, multiplier, steps):
      theirs = TF_DYNAMIC(initial, period, multiplier)
      ours = mplso.DynamicLossScale(initial, period, multiplier)
      for i, grads in enumerate(steps):
        results = [ls.update([tf.constant(g) for g in grads])[1]
                   for ls in (theirs, ours)]
        self.assertEqual(*[bool(r) for r in results])
        expected = np.asarray(theirs()), int(theirs._num_good_steps)  # pylint: disable=protected-access
        got = np.asarray(ours()), int(ours._num_good_steps)  # pylint: disable=protected-access
        # Bit for bit: the float32 scales' bytes, not just their values.
        self.assertEqual(expected[0].tobytes(), got[0].tobytes(), f"step {i}")
        self.assertEqual(expected[1], got[1], f"step {i}")

    check()


class FixedScaleTest(tf.test.TestCase, parameterized.TestCase):
  """Under a fixed scale TF 2.21's class applies non-finite gradients; we skip.

  The seed documents say `apply_gradients` "conditionally applies gradients if
  all gradient values are finite. Otherwise no update is performed (nor is
  global_step incremented)", with no exception for a fixed scale; TF's class
  bypasses the check when the scale is fixed. On finite steps both agree
  bit for bit.
  """

  @parameterized.named_parameters(*testing.NAMED_MODES)
  def test_finite_steps_identical_nonfinite_step_skipped_by_us_only(self, mode):
    with testing.ModeRunner(mode) as runner:
      theirs = Twin(runner, TF_MPLSO, 128, "adam")
      ours = Twin(runner, mplso.MixedPrecisionLossScaleOptimizer, 128, "adam")
      runner.initialize()
      for step in range(3):
        data = testing.TinyModel.batch(step)
        for twin in (theirs, ours):
          twin.model.feed(runner, data)
          twin.step()
        expected, got = theirs.state(runner, {}), ours.state(runner, {})
        for key in expected:
          self.assertAllEqual(expected[key], got[key], msg=key)
      before = ours.state(runner, {})
      data = testing.TinyModel.batch(3, "nan_dense")
      for twin in (theirs, ours):
        twin.model.feed(runner, data)
        twin.step()
      after_theirs, after_ours = theirs.state(runner, {}), ours.state(runner, {})
      for key in before:
        self.assertAllEqual(before[key], after_ours[key], msg=key)
      self.assertTrue(np.isnan(after_theirs["w"]).any())
      self.assertEqual(4, after_theirs["global_step"])
      self.assertEqual(3, after_ours["global_step"])


class ValidationDifferencesTest(tf.test.TestCase):
  """Inputs TF's classes took and then misbehaved on; mplso refuses them."""

  def test_fractional_increment_period(self):
    # TF truncates 2.5 to 2 without a word: the user asked for something
    # that cannot happen, so mplso says so.
    self.assertEqual(2, TF_DYNAMIC(increment_period=2.5).increment_period)
    with self.assertRaisesRegex(ValueError, "increment_period=2.5"):
      mplso.DynamicLossScale(increment_period=2.5)

  def test_scale_beyond_float32(self):
    # TF stores inf: every scaled loss is then inf and every step skipped.
    self.assertEqual(np.inf, float(TF_DYNAMIC(initial_loss_scale=2**200)()))
    with self.assertRaisesRegex(ValueError, "float32 limit"):
      mplso.DynamicLossScale(initial_loss_scale=2**200)

  def test_tf_wrapper_as_opt(self):
    # TF's class wraps its own class and scales the loss twice (two dynamic
    # scales, each shrinking on the same overflows).
    inner = TF_MPLSO(tf.compat.v1.train.GradientDescentOptimizer(1.), 8)
    TF_MPLSO(inner, 8)
    with self.assertRaisesRegex(ValueError, "stack two loss scales"):
      mplso.MixedPrecisionLossScaleOptimizer(inner, 8)


class SlotPassthroughTest(tf.test.TestCase):
  """TF's class answers None for slots; ours answers for the wrapped optimizer."""

  def test_slots(self):
    var = tf.Variable([1., 2.])
    theirs = TF_MPLSO(tf.compat.v1.train.AdamOptimizer(0.1), "dynamic")
    ours = mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.AdamOptimizer(0.1), "dynamic")
    for opt in (theirs, ours):
      opt.minimize(lambda: tf.reduce_sum(var**2), var_list=[var])
    self.assertEqual([], theirs.get_slot_names())
    self.assertIsNone(theirs.get_slot(var, "m"))
    self.assertEqual(["m", "v"], sorted(ours.get_slot_names()))
    self.assertIs(ours._optimizer.get_slot(var, "m"), ours.get_slot(var, "m"))  # pylint: disable=protected-access


if __name__ == "__main__":
  absltest.main()
