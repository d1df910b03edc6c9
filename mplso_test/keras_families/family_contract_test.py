"""What every Keras family's wrapper does in training, tested on all three.

A non-finite step is skipped (no variable or slot moves, `iterations` still
advances); scales and weights are those of the family's own Keras class;
`fit` and custom loops train; checkpoints and saved models round trip.
base_test.py has the wrapper's API (the wrapped optimizer's state through it
too), config_test.py its configs, each family's test file what that family
alone does. Where a family differs, `keras_families.KerasFamily` says so.
"""

import os

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mplso
import mplso.keras
from mplso_test.helpers import keras_families
from mplso_test.helpers import testing

# The tests read the same private hooks that Keras's loaders do.
# pylint: disable=protected-access

NAN, INF = testing.NAN, testing.INF
FAMILIES = keras_families.keras_families()
NAMED_FAMILIES = keras_families.named_keras_families()
# The tf_keras families, whose wrappers stand in for the wrapped optimizer
# in checkpoints.
NAMED_CHECKPOINTS_AS_OWN = keras_families.named_keras_families(
    lambda family: family.checkpoints_as_own)
TF_2_3, KERAS_TRAINER, FIT, MINIMIZE = (
    keras_families.TF_2_3, keras_families.KERAS_TRAINER, keras_families.FIT,
    keras_families.MINIMIZE)

# Steps whose batch holds a non-finite input, and which.
POISON = {2: NAN, 3: INF, 7: -INF}
STEPS = 12
# The scale after each step from 2**6 with increment_period=3: with POISON
# (three halvings, three growths), and with finite steps only.
SCALES = {True: [64, 64, 32, 16, 16, 16, 32, 16, 16, 16, 32, 32],
          False: [64, 64, 128, 128, 128, 256, 256, 256, 512, 512, 512, 1024]}


def _values(variables):
  return [np.asarray(v) for v in variables]


def _state(opt):
  """`(scale, good steps, iterations)` of a wrapper of a dynamic LossScale."""
  return (float(opt.loss_scale()), int(opt.dynamic_counter),
          int(opt.iterations))


def _own_state(family, opt):
  """`(scale, good steps, iterations)` of the family's own class."""
  scale, good_steps = family.own_scale_and_counter(opt)
  return float(scale), int(good_steps), int(opt.iterations)


def _slots(opt, variables):
  """The optimizer's per-variable state, by variable then slot name."""
  return [opt.get_slot(var, name) for var in variables
          for name in opt.get_slot_names()]


def _optimizer_state(opt, variables):
  """`iterations`, the slots of `variables`, then the loss scale's state.

  In an order that does not depend on the order in which the optimizer
  created its variables (a restored one may create its slots first).
  """
  return _values([opt.iterations, *_slots(opt, variables),
                  *opt.loss_scale.variables])


def _assert_same_values(test, got, want, msg=None):
  test.assertEqual(len(got), len(want), msg)
  for g, w in zip(got, want):
    test.assertAllEqual(g, w, msg=msg)


def _their_protocol(family, protocol):
  """The protocol the family's own class runs where ours runs `protocol`."""
  if protocol in family.own_protocols:
    return protocol
  return family.own_protocols[0]  # Its custom loop.


def _use_mixed_float16(test, family):
  family.keras.mixed_precision.set_global_policy("mixed_float16")
  test.addCleanup(family.keras.mixed_precision.set_global_policy, "float32")


def _make_inner(family, kind):
  if kind == "adam":
    return family.optimizers.Adam(0.01)
  return family.optimizers.SGD(0.01, momentum=0.9)


def _parity_cases():
  """Protocols, modes and wrapped optimizers of the side-by-side runs."""
  for family in FAMILIES:
    loops = [TF_2_3]
    if hasattr(family.wrapper, "scale_loss"):  # Keras 3's trainer protocol.
      loops.append(KERAS_TRAINER)
    cases = [(protocol, mode, inner) for protocol in loops
             for mode in ("eager", "function")
             for inner in ("sgd_momentum", "adam")]
    cases += [(protocol, "eager", inner)
              for protocol in (FIT, MINIMIZE, "fit_mixed_float16")
              for inner in ("sgd_momentum", "adam")]
    for protocol, mode, inner in cases:
      name = f"{family.name}_{protocol}_{inner}"
      if protocol in (TF_2_3, KERAS_TRAINER):
        name = f"{family.name}_{protocol}_{mode}_{inner}"
      yield name, family, protocol, mode == "function", inner


def _variable_step(opt, protocol, var, coefficient):
  """One step on the loss `var * coefficient` in `protocol`."""
  with tf.GradientTape() as tape:
    loss = var * coefficient
    if protocol == KERAS_TRAINER:
      scaled_loss = opt.scale_loss(loss)
    else:
      scaled_loss = opt.get_scaled_loss(loss)
  grads = tape.gradient(scaled_loss, [var])
  if protocol == TF_2_3:
    grads = opt.get_unscaled_gradients(grads)
  opt.apply_gradients(zip(grads, [var]))


class ParityTest(tf.test.TestCase, parameterized.TestCase):
  """Ours and the family's own Keras class, side by side on the same steps."""

  @parameterized.named_parameters(_parity_cases())
  def test_same_weights_scales_and_counters_as_the_familys_own_class(
      self, family, protocol, use_function, inner):
    mixed = protocol == "fit_mixed_float16"
    if mixed:
      _use_mixed_float16(self, family)
      protocol = FIT
    # Adam's bias correction reads `iterations`, which Keras 3's class leaves
    # on a skipped step: past a skip the two Adams differ by design, so
    # there they run finite steps.
    poison = POISON
    if inner == "adam" and not family.own_counts_skipped_steps:
      poison = {}
    ours = family.wrapper(_make_inner(family, inner),
                          mplso.DynamicLossScale(2.**6, increment_period=3))
    theirs = family.own(_make_inner(family, inner), initial_scale=2.**6,
                        dynamic_growth_steps=3)
    self.assertEqual(type(theirs).__name__, family.own_class_name)
    our_model = keras_families.keras_model(family.keras)
    their_model = keras_families.keras_model(family.keras)
    our_step = keras_families.keras_step(protocol, our_model, ours,
                                         use_function)
    their_step = keras_families.keras_step(_their_protocol(family, protocol),
                                    their_model, theirs, use_function)
    scales, skipped = [], 0
    for i in range(STEPS):
      before = _values(our_model.weights)
      our_step(keras_families.keras_batch(i, poison))
      their_step(keras_families.keras_batch(i, poison))
      skipped += i in poison
      scale, good_steps, iterations = _state(ours)
      their_scale, their_good_steps, their_iterations = _own_state(family,
                                                                   theirs)
      self.assertEqual((scale, good_steps), (their_scale, their_good_steps),
                       f"step {i}")
      self.assertEqual(iterations, i + 1)
      if family.own_counts_skipped_steps:
        self.assertEqual(their_iterations, i + 1)
      else:
        self.assertEqual(their_iterations, i + 1 - skipped)
      for mine, other in zip(our_model.weights, their_model.weights):
        self.assertAllEqual(mine, other, msg=f"step {i}: {mine.name}")
      moved = any(not np.array_equal(b, a)
                  for b, a in zip(before, _values(our_model.weights)))
      self.assertEqual(moved, i not in poison, f"step {i}")
      scales.append(scale)
    if not mixed:
      self.assertEqual(scales, SCALES[bool(poison)])
    for value in _optimizer_state(ours, our_model.trainable_variables):
      self.assertTrue(np.all(np.isfinite(value)))

  @parameterized.named_parameters(
      (f"{family.name}_{name}", family, args) for family in FAMILIES
      for name, args in (
          ("grow_every_2", {"initial_scale": 64., "dynamic_growth_steps": 2}),
          ("grow_every_step", {"initial_scale": 4.,
                               "dynamic_growth_steps": 1})))
  def test_same_trajectory_as_the_familys_own_class(self, family, args):
    ours = mplso.keras.LossScaleOptimizer(family.optimizers.SGD(0.1), **args)
    theirs = family.own(family.optimizers.SGD(0.1), **args)
    protocol = family.own_protocols[0]
    ours_var, theirs_var = family.variable(1.), family.variable(1.)
    for coefficient in (1., INF, 2., 3., NAN, 1., 1., 1., .5, -INF, 1.):
      _variable_step(ours, protocol, ours_var, coefficient)
      _variable_step(theirs, protocol, theirs_var, coefficient)
      self.assertAllEqual(np.asarray(ours_var), np.asarray(theirs_var))
      self.assertEqual(
          (float(ours.loss_scale), int(ours.dynamic_counter)),
          _own_state(family, theirs)[:2])

  @parameterized.named_parameters(keras_families.named_keras_families(
      lambda family: family.own_has_fixed_scale))
  def test_fixed_scale_same_as_the_familys_own_on_finite_steps(self, family):
    ours = mplso.keras.LossScaleOptimizer(family.optimizers.SGD(0.1), False,
                                          8.)
    theirs = family.own(family.optimizers.SGD(0.1), False, 8.)
    ours_var, theirs_var = family.variable(1.), family.variable(1.)
    for coefficient in (1., 2., 0.25):
      _variable_step(ours, TF_2_3, ours_var, coefficient)
      _variable_step(theirs, TF_2_3, theirs_var, coefficient)
    self.assertAllEqual(ours_var, theirs_var)
    self.assertAllEqual(ours.loss_scale, theirs.loss_scale)

  @parameterized.named_parameters(
      (f"{name}_{protocol}", family, protocol)
      for name, family in keras_families.named_keras_families(
          lambda family: family.own_has_fixed_scale)
      for protocol in (TF_2_3, FIT))
  def test_fixed_scale_skips_what_the_familys_own_class_applies(
      self, family, protocol):
    ours = family.wrapper(family.optimizers.Adam(0.01), 8)
    theirs = family.own(family.optimizers.Adam(0.01), dynamic=False,
                        initial_scale=8)
    our_model = keras_families.keras_model(family.keras)
    their_model = keras_families.keras_model(family.keras)
    our_step = keras_families.keras_step(protocol, our_model, ours)
    their_step = keras_families.keras_step(protocol, their_model, theirs)
    for i in range(2):
      our_step(keras_families.keras_batch(i))
      their_step(keras_families.keras_batch(i))
      _assert_same_values(self, our_model.weights, their_model.weights)
    before = _values(our_model.weights)
    our_step(keras_families.keras_batch(2, POISON))
    their_step(keras_families.keras_batch(2, POISON))
    # A deliberate difference: under a fixed scale TF 2.3's and tf_keras's
    # classes apply the non-finite step and ruin the weights for good; ours
    # skips it, as under a dynamic scale. Both count the step.
    _assert_same_values(self, our_model.weights, before)
    self.assertTrue(np.all(np.isnan(their_model.get_layer("hidden").kernel)))
    self.assertEqual(int(ours.iterations), 3)
    self.assertEqual(int(theirs.iterations), 3)
    our_step(keras_families.keras_batch(3))
    self.assertTrue(all(np.isfinite(w).all() for w in our_model.get_weights()))
    self.assertEqual(float(ours.loss_scale()), 8.)


class SkipTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{name}_{kind}", family, loss_scale) for name, family in NAMED_FAMILIES
      for kind, loss_scale in (("fixed", 16), ("dynamic", "dynamic")))
  def test_sparse_nan_skips_every_variable(self, family, loss_scale):
    model = keras_families.keras_model(family.keras)
    opt = family.wrapper(family.optimizers.Adam(0.01), loss_scale)
    variables = model.trainable_variables

    def grads(factor):
      with tf.GradientTape() as tape:
        loss = factor * keras_families.keras_loss(
            model, keras_families.keras_batch(0))
        scaled = opt.get_scaled_loss(loss)
      return opt.get_unscaled_gradients(tape.gradient(scaled, variables))

    def state():  # All but `iterations` and the loss scale.
      return _values(model.weights + _slots(opt, variables))

    opt.apply_gradients(zip(grads(1.0), variables))
    before = state()
    nan_grads = grads(NAN)
    self.assertTrue(any(isinstance(g, tf.IndexedSlices) for g in nan_grads))
    opt.apply_gradients(zip(nan_grads, variables))
    self.assertLen(_slots(opt, variables), 2 * len(variables))  # Adam's two.
    _assert_same_values(self, state(), before)
    self.assertEqual(int(opt.iterations), 2)


class FitTest(tf.test.TestCase, parameterized.TestCase):

  def _fit_mixed_float16(self, family, loss_scale, jit_compile):
    _use_mixed_float16(self, family)
    (x, ids), y = keras_families.keras_data(64)
    model = keras_families.keras_model(family.keras)
    opt = family.wrapper(family.optimizers.Adam(0.01), loss_scale)
    model.compile(optimizer=opt, loss="mse", jit_compile=jit_compile)
    if jit_compile and not model.jit_compile:
      # Keras's compile turns jit_compile off where TensorFlow cannot
      # XLA-compile (tf_keras's can_jit_compile; Keras 3 on Apple silicon):
      # the step would not be the compiled one this case is about.
      self.skipTest("Keras turned jit_compile off: no XLA for this model on "
                    "this platform; the jit_compile=False case still runs.")
    self.assertIs(model.optimizer, opt)
    history = model.fit((x, ids), y, batch_size=16, epochs=4, verbose=0,
                        shuffle=False)
    losses = history.history["loss"]
    self.assertTrue(np.all(np.isfinite(losses)), losses)
    self.assertLess(losses[-1], losses[0])
    self.assertEqual(int(opt.iterations), 16)
    hidden = model.get_layer("hidden")
    self.assertEqual(hidden.compute_dtype, "float16")
    self.assertEqual(hidden.kernel.dtype, "float32")
    return opt

  @parameterized.named_parameters(
      (f"{name}_{mode}", family, mode == "jit")
      for name, family in NAMED_FAMILIES for mode in ("plain", "jit"))
  def test_fit_mixed_float16_keeps_our_wrapper(self, family, jit_compile):
    opt = self._fit_mixed_float16(
        family, mplso.DynamicLossScale(2.**8, increment_period=4),
        jit_compile)
    # 16 finite steps with increment_period=4 grow the scale 4 times.
    self.assertEqual(float(opt.loss_scale()), 2.**12)

  @parameterized.named_parameters(
      (f"{name}_{mode}", family, mode == "jit")
      for name, family in NAMED_FAMILIES for mode in ("plain", "jit"))
  def test_fit_mixed_float16_from_the_default_scale(self, family,
                                                    jit_compile):
    # The default scale, 2**15, may overflow float16 at first: the scale
    # falls on the skipped steps, and the run still converges.
    opt = self._fit_mixed_float16(family, "dynamic", jit_compile)
    self.assertLessEqual(float(opt.loss_scale()), 2.**15)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_fit_skips_a_non_finite_batch(self, family):
    (x, ids), y = keras_families.keras_data(32)
    y[20] = np.inf  # The second batch of 16 has an infinite loss.
    model = keras_families.keras_model(family.keras)
    opt = family.wrapper(family.optimizers.SGD(0.01),
                         mplso.DynamicLossScale(2.**8))
    model.compile(optimizer=opt, loss="mse")
    model.fit((x[:16], ids[:16]), y[:16], batch_size=16, epochs=1, verbose=0)
    before = model.get_weights()
    model.fit((x[16:], ids[16:]), y[16:], batch_size=16, epochs=1, verbose=0)
    _assert_same_values(self, model.get_weights(), before)
    self.assertEqual(int(opt.iterations), 2)
    self.assertEqual(float(opt.loss_scale()), 2.**7)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_fit_with_fixed_scale_matches_unscaled_sgd(self, family):
    inputs, y = keras_families.keras_data(32)
    ours_model = keras_families.keras_model(family.keras)
    plain_model = keras_families.keras_model(family.keras)
    ours_model.compile(family.wrapper(family.optimizers.SGD(0.05), 64),
                       loss="mse")
    plain_model.compile(family.optimizers.SGD(0.05), loss="mse")
    for model in (ours_model, plain_model):
      model.fit(inputs, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
    for a, b in zip(ours_model.get_weights(), plain_model.get_weights()):
      self.assertAllClose(a, b, rtol=1e-6, atol=1e-6)


class CustomLoopTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_tf_function_loop_mixed_float16(self, family):
    _use_mixed_float16(self, family)
    batch = keras_families.keras_data(64)
    model = keras_families.keras_model(family.keras)
    opt = family.wrapper(family.optimizers.Adam(0.01), "dynamic")
    step = keras_families.keras_step(TF_2_3, model, opt, use_function=True)
    losses = []
    for _ in range(30):
      step(batch)
      losses.append(float(keras_families.keras_loss(model, batch)))
    self.assertLess(losses[-1], losses[0] / 2)
    self.assertEqual(int(opt.iterations), 30)


def _trained(family, opt, epochs=1):
  """A model trained by `opt` with `fit`; each epoch's first step skipped."""
  inputs, y = keras_families.keras_data(32)
  y[3] = np.inf
  model = keras_families.keras_model(family.keras)
  model.compile(optimizer=opt, loss="mse")
  _fit(model, inputs, y, epochs)
  return model, inputs, y


def _fit(model, inputs, y, epochs=1):
  model.fit(inputs, y, batch_size=8, epochs=epochs, verbose=0, shuffle=False)


def _adam_with_scale(family, initial=2.**12, period=4):
  return family.wrapper(family.optimizers.Adam(0.01),
                        mplso.DynamicLossScale(initial,
                                               increment_period=period))


class CheckpointTest(tf.test.TestCase, parameterized.TestCase):

  def _save(self, **objects):
    prefix = os.path.join(self.create_tempdir().full_path, "ckpt")
    return tf.train.Checkpoint(**objects).save(prefix)

  def _restored_into(self, family, path, opt, complete=True):
    """A fresh model compiled with `opt`, both restored from `path`.

    `complete`: every object of the model and `opt` is in the checkpoint.
    """
    model = keras_families.keras_model(family.keras, seed=1)
    model.compile(optimizer=opt, loss="mse")
    family.build(opt, model.trainable_variables)
    status = tf.train.Checkpoint(model=model, optimizer=opt).restore(path)
    if complete:
      status.assert_existing_objects_matched()
    return model

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_round_trip(self, family):
    opt = _adam_with_scale(family)
    model, _, _ = _trained(family, opt, epochs=2)
    # 8 steps, the 1st and 5th skipped: 2**12 halved twice, 3 good steps.
    self.assertEqual(_state(opt), (2.**10, 3, 8))
    saved = _optimizer_state(opt, model.trainable_variables)
    saved_variables = _values(keras_families.optimizer_variables(opt))
    path = self._save(model=model, optimizer=opt)
    names = {name for name, _ in tf.train.list_variables(path)}
    for variable in ("current_loss_scale", "good_steps"):
      self.assertIn(f"optimizer/loss_scale/{variable}/.ATTRIBUTES/"
                    "VARIABLE_VALUE", names)
    restored = _adam_with_scale(family)
    restored_model = self._restored_into(family, path, restored)
    self.assertEqual(_state(restored), _state(opt))
    _assert_same_values(
        self, _optimizer_state(restored, restored_model.trainable_variables),
        saved)
    _assert_same_values(self, keras_families.optimizer_variables(restored),
                        saved_variables)
    _assert_same_values(self, restored_model.get_weights(),
                        model.get_weights())

  @parameterized.named_parameters(*NAMED_CHECKPOINTS_AS_OWN)
  def test_layout_is_the_familys_own_classs(self, family):
    keys = []
    for opt in (_adam_with_scale(family, 2.**10, 3), family.own(
        family.optimizers.Adam(0.01), initial_scale=2.**10,
        dynamic_growth_steps=3)):
      model, _, _ = _trained(family, opt)
      keys.append({name for name, _ in tf.train.list_variables(
          self._save(model=model, optimizer=opt))})
    self.assertEqual(keys[0], keys[1])
    self.assertIn("optimizer/loss_scale/good_steps/.ATTRIBUTES/"
                  "VARIABLE_VALUE", keys[0])

  @parameterized.named_parameters(
      (f"{name}_{direction}", family, direction == "ours_to_own")
      for name, family in NAMED_CHECKPOINTS_AS_OWN
      for direction in ("ours_to_own", "own_to_ours"))
  def test_interchangeable_with_the_familys_own_class(self, family,
                                                      ours_first):
    ours = _adam_with_scale(family, 2.**10)
    theirs = family.own(family.optimizers.Adam(0.01), initial_scale=2.**10,
                        dynamic_growth_steps=4)
    source, target = (ours, theirs) if ours_first else (theirs, ours)
    model, _, _ = _trained(family, source)  # 1 skip, 3 good steps.
    self._restored_into(family, self._save(model=model, optimizer=source),
                        target)
    self.assertEqual(_own_state(family, theirs), _state(ours))
    self.assertEqual(_state(ours), (2.**9, 3, 4))
    _assert_same_values(
        self, keras_families.optimizer_variables(target.inner_optimizer),
        keras_families.optimizer_variables(source.inner_optimizer))

  @parameterized.named_parameters(*NAMED_CHECKPOINTS_AS_OWN)
  def test_bare_optimizer_checkpoint_restores_the_wrapped_optimizer(
      self, family):
    adam = family.optimizers.Adam(0.01)
    model, _, _ = _trained(family, adam)
    opt = _adam_with_scale(family)
    # The file has no loss scale.
    self._restored_into(family, self._save(model=model, optimizer=adam), opt,
                        complete=False)
    _assert_same_values(
        self, keras_families.optimizer_variables(opt.inner_optimizer),
        keras_families.optimizer_variables(adam))
    self.assertEqual(_state(opt), (2.**12, 0, 4))

  @parameterized.named_parameters(*NAMED_CHECKPOINTS_AS_OWN)
  def test_optimizer_checkpointed_before_it_was_wrapped(self, family):
    # tf_keras caches an optimizer's checkpoint children on first use.
    adam = family.optimizers.Adam(0.01)
    _trained(family, adam)
    self._save(optimizer=adam)
    opt = family.wrapper(adam, "dynamic")
    names = [name for name, _ in tf.train.list_variables(
        self._save(optimizer=opt))]
    self.assertIn(
        "optimizer/loss_scale/current_loss_scale/.ATTRIBUTES/VARIABLE_VALUE",
        names)


class SaveLoadTest(tf.test.TestCase, parameterized.TestCase):

  FILENAMES = {"keras": "model.keras", "h5": "model.h5",
               "saved_model": "model"}

  def _saved_and_loaded(self, family, model, model_format):
    path = os.path.join(self.create_tempdir().full_path,
                        self.FILENAMES[model_format])
    if model_format == "saved_model":
      model.save(path, save_format="tf")
    else:
      model.save(path)
    # No custom_objects: the class is registered.
    loaded = family.keras.models.load_model(path)
    if model_format == "saved_model":
      # tf_keras's SavedModel loader compiles a fresh optimizer and restores
      # no optimizer's state, its own class's included; the state is in the
      # SavedModel's checkpoint, under the usual layout.
      family.build(loaded.optimizer, loaded.trainable_variables)
      tf.train.Checkpoint(root=loaded).restore(
          os.path.join(path, "variables", "variables")).expect_partial()
    return loaded

  @parameterized.named_parameters(
      (f"{family.name}_{model_format}", family, model_format)
      for family in FAMILIES for model_format in family.model_formats)
  def test_load_model_restores_our_wrapper(self, family, model_format):
    model, _, _ = _trained(family, _adam_with_scale(family))
    loaded = self._saved_and_loaded(family, model, model_format)
    self.assertIs(type(loaded.optimizer), family.wrapper)
    self.assertEqual(loaded.optimizer.get_config(),
                     model.optimizer.get_config())
    _assert_same_values(self, loaded.get_weights(), model.get_weights())

  @parameterized.named_parameters(
      (f"{family.name}_{model_format}", family, model_format)
      for family in FAMILIES for model_format in family.model_formats
      if model_format not in family.formats_without_optimizer_state)
  def test_load_model_resumes_exactly(self, family, model_format):
    opt = _adam_with_scale(family)
    model, inputs, y = _trained(family, opt, epochs=2)
    loaded = self._saved_and_loaded(family, model, model_format)
    loaded_opt = loaded.optimizer
    # An `.h5` file holds the optimizer's `weights`: where they are the
    # wrapped optimizer's alone, the loss scale restarts from its initial
    # value.
    keeps_scale = model_format != "h5" or family.weights_hold_loss_scale
    self.assertEqual(_state(loaded_opt),
                     (2.**10, 3, 8) if keeps_scale else (2.**12, 0, 8))
    self.assertAllClose(loaded_opt.learning_rate, opt.learning_rate)

    def assert_same_state(msg):
      saved = _optimizer_state(opt, model.trainable_variables)
      restored = _optimizer_state(loaded_opt, loaded.trainable_variables)
      if not keeps_scale:  # Then the loss scale's state differs.
        saved, restored = saved[:-2], restored[:-2]
      _assert_same_values(self, restored, saved, msg)
      _assert_same_values(self, loaded.get_weights(), model.get_weights(),
                          msg)

    assert_same_state("loaded")
    _fit(model, inputs, y)
    _fit(loaded, inputs, y)
    # Adam's updates do not depend on the (power of two) scale, so the
    # weights match after a restart of the scale too.
    assert_same_state("trained on")
    self.assertEqual(_state(opt), (2.**9, 3, 12))


if __name__ == "__main__":
  absltest.main()
