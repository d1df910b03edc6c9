"""Long runs: a NaN storm, then recovery; a long finite run, up to float32's top.

Every family trains the same least-squares problem on a dense and an
embedding (`tf.IndexedSlices`) variable, with one compiled step per family
(see `property_families.Family`), fed gradients computed from the current
variables.
"""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mplso
import mplso.contrib
from mplso_test.helpers import property_families

STORM_STEPS = 300
RECOVERY_STEPS = 200
TOP = float(2.0**127)  # The largest finite float32 power of two.

FAMILY_NAMES = tuple(property_families.FAMILIES)
NAMED_FAMILIES = [(name, name) for name in FAMILY_NAMES]

# Targets of the least-squares problem: loss = |w - W|^2 + |emb[ids] - E|^2.
_rng = np.random.default_rng(7)
TARGET_W = _rng.normal(size=property_families.DENSE_SHAPE).astype(np.float32)
TARGET_EMB = _rng.normal(size=property_families.SPARSE_SHAPE).astype(np.float32)
IDS = list(property_families.SPARSE_IDS)


def _dynamic(family_name: str, initial: float, period: int, ratio: float):
  """The dynamic loss scale of `family_name`'s kind."""
  if family_name == "contrib":
    return mplso.contrib.ExponentialUpdateLossScaleManager(
        initial, period, decr_every_n_nan_or_inf=1, incr_ratio=ratio,
        decr_ratio=1 / ratio)
  return mplso.DynamicLossScale(initial, period, ratio)


def _family(family_name, loss_scale) -> property_families.Family:
  kind = "exponential" if family_name == "contrib" else "dynamic"
  return property_families.FAMILIES[family_name](kind, loss_scale=loss_scale)


def _grads(family) -> tuple[np.ndarray, np.ndarray, float]:
  """The current gradients of the least-squares loss, and the loss."""
  w = np.asarray(family.model_vars["w"])
  emb = np.asarray(family.model_vars["emb"])[IDS]
  loss = float(np.sum((w - TARGET_W)**2) + np.sum((emb - TARGET_EMB)**2))
  return 2 * (w - TARGET_W), 2 * (emb - TARGET_EMB), loss


def _poisoned(step: int, dense, sparse):
  """Poisons one element of one gradient with NaN, +Inf or -Inf in turn."""
  dense, sparse = dense.copy(), sparse.copy()
  value = (np.nan, np.inf, -np.inf)[step % 3]
  target = dense if step % 2 else sparse
  target[step % target.shape[0], step % 2] = value
  return dense, sparse


def _scale(family) -> float:
  return float(family.scale_vars["scale"].numpy())


class LongRunTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(NAMED_FAMILIES)
  def test_nan_storm_floors_scale_then_training_recovers(self, family_name):
    family = _family(family_name, _dynamic(family_name, 2.**15, 2, 2.))
    family.reset(2.**15)
    # A few good steps first, so the storm hits a trained state.
    for _ in range(10):
      dense, sparse, _ = _grads(family)
      family.step(dense, sparse)
    start = _scale(family)
    self.assertEqual(start, 2.**20)  # Grew 5 times in 10 steps.
    before = [np.asarray(v) for v in family.model_vars.values()]
    counter_before = int(np.asarray(family.counter(family.opt)))
    scales = []
    for step in range(STORM_STEPS):
      family.step(*_poisoned(step, *_grads(family)[:2]))
      scales.append(_scale(family))
    # Halves on every bad step, down to 1 after 20 and held there.
    self.assertEqual(scales[:20], [2.**(19 - i) for i in range(20)])
    self.assertEqual(set(scales[20:]), {1.0})
    for value, var in zip(before, family.model_vars.values()):
      self.assertAllEqual(value, np.asarray(var))
    for var in family.all_vars(family.opt):
      self.assertTrue(np.isfinite(np.asarray(var)).all(), var.name)
    skipped_advance = STORM_STEPS if family.advances_on_skip else 0
    self.assertEqual(int(np.asarray(family.counter(family.opt))),
                     counter_before + skipped_advance)
    # Recovery: training moves on and the scale grows again (every 2 steps).
    _, _, storm_loss = _grads(family)
    for _ in range(RECOVERY_STEPS):
      dense, sparse, _ = _grads(family)
      family.step(dense, sparse)
    _, _, loss = _grads(family)
    self.assertLess(loss, 0.5 * storm_loss)
    self.assertEqual(_scale(family), 2.**(RECOVERY_STEPS // 2))
    for var in family.all_vars(family.opt):
      self.assertTrue(np.isfinite(np.asarray(var)).all(), var.name)

  @parameterized.named_parameters(NAMED_FAMILIES)
  def test_growth_stops_at_largest_finite_power_of_two(self, family_name):
    # 2**7 * (2**8)**15 == 2**127; one more growth would be inf.
    family = _family(family_name, _dynamic(family_name, 2.**7, 1, 2.**8))
    family.reset(2.**7)
    scales = []
    for _ in range(100):
      dense, sparse, _ = _grads(family)
      family.step(dense, sparse)
      scales.append(_scale(family))
      self.assertEqual(int(family.scale_vars["good_steps"].numpy()), 0)
    self.assertEqual(scales[:15], [2.**(7 + 8 * (i + 1)) for i in range(15)])
    self.assertEqual(set(scales[14:]), {TOP})
    # The variables trained all along, and stayed finite.
    for var in family.all_vars(family.opt):
      self.assertTrue(np.isfinite(np.asarray(var)).all(), var.name)
    # A bad step at the top shrinks by one factor, and growth resumes.
    family.step(*_poisoned(0, *_grads(family)[:2]))
    self.assertEqual(_scale(family), 2.**119)
    family.step(*_grads(family)[:2])
    self.assertEqual(_scale(family), TOP)


if __name__ == "__main__":
  absltest.main()
