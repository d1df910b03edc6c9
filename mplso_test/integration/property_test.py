"""Property tests: random finite/NaN/Inf gradient sequences, every family.

For each optimizer family and each kind of loss scale, one training step is
compiled once (a `tf.function` with a fixed input signature) and fed, step
after step, a dense gradient and the values of an `tf.IndexedSlices`
gradient drawn by hypothesis (finite, or with a NaN, +Inf or -Inf at a random
place); a third variable always gets a `None` gradient. Between hypothesis
examples every variable is reset, so the step is traced once per family.

After every step the test checks:

* no variable and no optimizer slot holds a NaN or an Inf;
* a step with a non-finite gradient changes nothing but the loss scale's
  variables (and `iterations` on Keras, which advances on a skipped step;
  TF1's `global_step` does not);
* an applied step moves the variables exactly as the bare wrapped optimizer
  does on the same gradients;
* the loss scale and its counters equal a plain-Python model of TF's update
  rules (in `property_families`), written from TF's documentation and code,
  not from mplso's.
"""

from __future__ import annotations

from absl.testing import absltest
from absl.testing import parameterized
import hypothesis
from hypothesis import strategies as st
import numpy as np
import tensorflow as tf

import mplso
from mplso_test.helpers import property_families

# Each test runs its examples in a few seconds; derandomize makes CI
# reproducible (the same examples on every run).
SETTINGS = hypothesis.settings(
    max_examples=25, deadline=None, derandomize=True,
    suppress_health_check=list(hypothesis.HealthCheck))

SCALE_KINDS = {"tf1": ("fixed", "dynamic"),
               "contrib": ("fixed", "exponential"),
               "keras3": ("fixed", "dynamic"),
               "optimizer_v2": ("fixed", "dynamic"),
               "tf_keras": ("fixed", "dynamic")}
CASES = [(f"{family}_{kind}", family, kind)
         for family, kinds in SCALE_KINDS.items() for kind in kinds]

# Family instances are built once per test process (tracing is the slow
# part) and reset before every example.
_BUILT: dict[tuple[str, str], property_families.Family] = {}


def _family(name: str, kind: str) -> property_families.Family:
  if (name, kind) not in _BUILT:
    _BUILT[(name, kind)] = property_families.FAMILIES[name](kind)
  return _BUILT[(name, kind)]


class ExtendedDynamicPropertyTest(tf.test.TestCase):
  """min_loss_scale, max_loss_scale and hysteresis against their model."""

  def test_random_sequences(self):

    @SETTINGS
    @hypothesis.given(config=property_families.extended_config(),
                      poisons=st.lists(
                          st.sampled_from(property_families.POISONS),
                          min_size=1, max_size=24))
    def check(config, poisons):
      loss_scale = mplso.DynamicLossScale(**config)
      model = property_families.ExtendedDynamicModel(
          property_families.f32(config["initial_loss_scale"]),
          config["increment_period"], config["multiplier"],
          config["min_loss_scale"], config["max_loss_scale"],
          config["hysteresis"])
      for i, poison in enumerate(poisons):
        grad = np.ones([2], np.float32)
        if poison is not None:
          grad[i % 2] = property_families.POISON_VALUE[poison]
        _, should_apply = loss_scale.update([tf.constant(grad)])
        model.step(poison is None)
        self.assertEqual(poison is None, bool(should_apply))
        counters = [int(v) for v in loss_scale.variables[1:]]
        got = (float(loss_scale()), counters[0],
               counters[1] if len(counters) > 1 else 0)
        self.assertEqual(model.state(), got, f"step {i}, {config}")

    check()


class PropertyTest(tf.test.TestCase, parameterized.TestCase):

  def _check(self, family: property_families.Family, start_scale: float,
             steps) -> None:
    family.reset(start_scale)
    model = family.model(start_scale)
    scale_ids = {id(v) for v in family.scale_vars.values()}
    counter = family.counter(family.opt)
    for i, (dense, sparse) in enumerate(steps):
      finite = bool(np.isfinite(dense).all() and np.isfinite(sparse).all())
      before = {id(v): np.asarray(v) for v in family.all_vars(family.opt)}
      counter_before = int(np.asarray(counter))
      family.step(dense, sparse)
      model.step(finite)
      msg = f"step {i} (finite={finite})"
      self.assertEqual(family.read_scale(), model.state(), msg)
      for v in family.all_vars(family.opt):
        value = np.asarray(v)
        self.assertTrue(np.isfinite(value).all(), f"{v.name}, {msg}")
        if not finite and id(v) not in scale_ids and v is not counter:
          self.assertAllEqual(value, before[id(v)], f"{v.name}, {msg}")
      advanced = finite or family.advances_on_skip
      self.assertEqual(int(np.asarray(counter)), counter_before + int(advanced),
                       msg)
      if finite:
        family.bare_step(dense, sparse)
      else:
        family.counter(family.bare).assign_add(int(advanced))
      for name, var in family.model_vars.items():
        self.assertAllEqual(np.asarray(var), np.asarray(family.bare_vars[name]),
                            f"{name}, {msg}")

  @parameterized.named_parameters(CASES)
  def test_random_sequences(self, family_name, scale_kind):
    family = _family(family_name, scale_kind)

    @SETTINGS
    @hypothesis.given(start_scale=property_families.START_SCALES,
                      steps=property_families.STEPS)
    def check(start_scale, steps):
      self._check(family, start_scale, steps)

    check()

  @parameterized.named_parameters(CASES)
  def test_harness_sees_skip_and_apply(self, family_name, scale_kind):
    # The harness sees a skipped step leave `w` alone and an applied one
    # move it, so the properties above are not vacuous.
    family = _family(family_name, scale_kind)
    nan_dense = np.full(property_families.DENSE_SHAPE, np.nan, np.float32)
    sparse = np.ones(property_families.SPARSE_SHAPE, np.float32)
    family.reset(4.)
    before = np.asarray(family.model_vars["w"])
    family.step(nan_dense, sparse)
    self.assertAllEqual(np.asarray(family.model_vars["w"]), before)
    family.step(np.ones(property_families.DENSE_SHAPE, np.float32), sparse)
    self.assertNotAllClose(np.asarray(family.model_vars["w"]), before)


if __name__ == "__main__":
  absltest.main()
