"""What Keras 3's own LossScaleOptimizer test checks, on mplso's Keras 3 family.

Learned from Keras 3's `keras/src/optimizers/loss_scale_optimizer_test.py`
(shipped in the keras package), rewritten for mplso: every step runs through
mplso's wrapper and `keras.optimizers.LossScaleOptimizer` on the same
variables and gradients, and both must end with the same variables, loss
scale and good-step counter. Steps run eagerly, as Keras 3's test does, and
in a `tf.function`, as Keras 3's trainer runs them.

Keras 3's test hands `apply` gradients of a loss scaled by the loss scale
(`grads * optimizer.initial_scale`): Keras 3's class always unscales. mplso's
wrapper serves TF 2.3's protocol too, whose gradients reach `apply_gradients`
already unscaled (`get_unscaled_gradients`), so it unscales only after
`scale_loss`, the call Keras 3's trainer makes on every step. The steps here
therefore go as the trainer's do: `scale_loss` under a tape, then `apply`
with the gradients of the scaled loss. `test_unscales_only_after_scale_loss`
pins the difference itself.

Each of Keras 3's test methods, and where mplso tests that behaviour (ids:
Keras 3's parameters; on the TensorFlow backend its own test skips the 7
`stateless` ids, leaving 22):

  test_config (1): test_class_serialization_round_trip.
  test_apply_with_no_vars (1): test_apply_without_variables_*.
  test_finite_step (2): stateful: test_finite_step_*; stateless: differs on
      purpose, test_stateless_apply_is_refused (mplso refuses
      `stateless_apply` on the TensorFlow backend; Keras 3's class has no
      TensorFlow implementation either, and its test skips it there).
  test_finite_step_with_inner_loss_scale (2): stateful:
      test_finite_step_inner_loss_scale_factor_*; stateless: as above.
  test_infinite_step (2): stateful: test_infinite_step_*; stateless: as
      above.
  test_finite_step_with_overwrite (2): stateful:
      test_overwrite_with_gradient_*; stateless: as above.
  test_downscaling (2): stateful: test_downscaling_*; stateless: as above.
  test_upscaling (2): stateful: test_upscaling_*; stateless: as above.
  test_iterations_update (2): stateful: test_iterations_update_*;
      stateless: as above.
  test_serialization (1): differs on purpose,
      test_get_config_is_tf_2_3_format (mplso's `get_config` writes TF 2.3's
      format, which code and files of the TF 2.3 era read; Keras 3's own
      format is read too).
  test_init_dynamic_arg (1): differs on purpose, test_dynamic_argument
      (`dynamic=False` with `initial_scale` is a fixed scale in mplso, as in
      TF 2.4-2.15; Keras 3's class has no fixed scale).
  test_init_unsupported_arg (1): test_unsupported_arguments.
  test_init_base_optimizer_unsupported_args (9):
      base_test.OtherArgumentsTest.
      test_other_keywords_refused_as_the_familys_own_class for 7 of them;
      ema_momentum and ema_overwrite_frequency:
      test_base_optimizer_argument_refused_*.
  test_deserialization_backwards_compatibility (1):
      test_reads_keras_3_config_with_base_arguments_at_their_defaults.

Beyond Keras 3's test, what TF 2.4-2.15 code relies on in this family:
  test_scaled_gradients_from_a_function_applied_eagerly,
  test_loss_scale_attribute_*,
  test_overridden_apply_gradients_of_the_wrapped_optimizer_is_called_*
      (learned from tf_keras's testApplyGradientsGetsUnwrappedTensors).
"""

import json

from absl.testing import absltest
from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf

import mplso
from mplso._src.keras import keras3_optimizer
import mplso.keras

NAN, INF = float("nan"), float("inf")
EAGER, FUNCTION = "eager", "function"
NAMED_MODES = [(EAGER, EAGER), (FUNCTION, FUNCTION)]
# The gradient of Keras 3's test: var [1, 2, 3, 4] - 0.5 * it.
GRAD = [1., 6., 7., 2.]


def _ours(*args, **kwargs):
  return mplso.keras.LossScaleOptimizer(*args, **kwargs)


def _theirs(*args, **kwargs):
  return keras.optimizers.LossScaleOptimizer(*args, **kwargs)


def _scale(opt):
  """The current loss scale of mplso's wrapper or Keras 3's."""
  if isinstance(opt, keras3_optimizer.LossScaleOptimizer):
    scale = opt.loss_scale
    return float(scale() if isinstance(scale, mplso.LossScale) else scale)
  return float(opt.dynamic_scale.value)


def _counter(opt):
  """The good-step counter of mplso's wrapper or Keras 3's."""
  if isinstance(opt, keras3_optimizer.LossScaleOptimizer):
    return int(opt.dynamic_counter)
  return int(opt.step_counter.value)


def _values(variables):
  return [np.asarray(v).tolist() for v in variables]


def _trainer_step(opt, variables, grad, pass_variables=True):
  """One step as Keras 3's trainer takes it; returns the step's callable part.

  `scale_loss` scales a loss whose gradient is `grad`, and `apply` gets the
  gradients of the scaled loss: `grad * scale`, what Keras 3's test hands it.
  A non-finite `grad` reaches `apply` as it is.
  """
  grad = tf.constant(grad)
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(
        tf.convert_to_tensor(variables[0]) * tf.where(tf.math.is_finite(grad),
                                                      grad, 0.))
    scaled_loss = opt.scale_loss(loss)
  (grads,) = tape.gradient(scaled_loss, variables)
  grads = tf.where(tf.math.is_finite(grad), grads, grad)
  if pass_variables:
    opt.apply([grads], variables)
  else:
    opt.apply([grads])


def _runner(mode, fn):
  return tf.function(fn) if mode == FUNCTION else fn


class _Case(tf.test.TestCase, parameterized.TestCase):

  def assert_as_keras(self, scenario, expected):
    """Runs `scenario(make)` with Keras 3's class and mplso's.

    Both must observe `expected` (a dict of Python values), Keras 3's class
    first, so that `expected` is known to be Keras 3's behaviour.
    """
    # Exact: the values are small integers and powers of two, and tf.test's
    # assertDictEqual would fall back to a tolerance.
    absltest.TestCase.assertDictEqual(self, expected, scenario(_theirs),
                                      "Keras 3's own class")
    absltest.TestCase.assertDictEqual(self, expected, scenario(_ours),
                                      "mplso's class")


class StepTest(_Case):

  @parameterized.named_parameters(*NAMED_MODES)
  def test_apply_without_variables(self, mode):

    def scenario(make):
      opt = make(keras.optimizers.SGD(learning_rate=0.5))
      variables = [keras.Variable([1., 2., 3., 4.])]
      opt.build(variables)  # `apply` then steps the built variables.
      _runner(mode, lambda: _trainer_step(opt, variables, GRAD,
                                          pass_variables=False))()
      return {"var": _values(variables)}

    self.assert_as_keras(scenario, {"var": [[0.5, -1., -0.5, 3.]]})

  @parameterized.named_parameters(*NAMED_MODES)
  def test_finite_step(self, mode):

    def scenario(make):
      opt = make(keras.optimizers.SGD(learning_rate=0.5))
      variables = [keras.Variable([1., 2., 3., 4.])]
      _runner(mode, lambda: _trainer_step(opt, variables, GRAD))()
      return {"var": _values(variables), "scale": _scale(opt),
              "counter": _counter(opt)}

    self.assert_as_keras(scenario, {"var": [[0.5, -1., -0.5, 3.]],
                                    "scale": 2.**15, "counter": 1})

  @parameterized.named_parameters(*NAMED_MODES)
  def test_finite_step_inner_loss_scale_factor(self, mode):
    # The wrapped optimizer's own scaling is turned off: no second unscale.

    def scenario(make):
      opt = make(keras.optimizers.SGD(learning_rate=0.5,
                                      loss_scale_factor=100))
      variables = [keras.Variable([1., 2., 3., 4.])]
      _runner(mode, lambda: _trainer_step(opt, variables, GRAD))()
      return {"var": _values(variables),
              "inner_factor": opt.inner_optimizer.loss_scale_factor}

    self.assert_as_keras(scenario, {"var": [[0.5, -1., -0.5, 3.]],
                                    "inner_factor": None})

  @parameterized.named_parameters(*NAMED_MODES)
  def test_infinite_step(self, mode):

    def scenario(make):
      opt = make(keras.optimizers.SGD(learning_rate=0.5))
      variables = [keras.Variable([1., 2., 3., 4.])]
      _runner(mode, lambda: _trainer_step(opt, variables, [INF] * 4))()
      return {"var": _values(variables), "scale": _scale(opt)}

    self.assert_as_keras(scenario, {"var": [[1., 2., 3., 4.]],
                                    "scale": 2.**14})

  @parameterized.named_parameters(*NAMED_MODES)
  def test_overwrite_with_gradient(self, mode):
    # A variable that takes its "gradient" as its new value (float8 scaling
    # histories) gets it as it is, never divided by the loss scale.

    def scenario(make):
      opt = make(keras.optimizers.SGD(learning_rate=0.5))
      var = keras.Variable([1., 2., 3., 4.])
      var.overwrite_with_gradient = True

      def step():
        opt.scale_loss(tf.constant(1.))  # As the trainer, every step.
        opt.apply([tf.constant(GRAD)], [var])

      _runner(mode, step)()
      return {"var": _values([var])}

    self.assert_as_keras(scenario, {"var": [GRAD]})

  @parameterized.named_parameters(*NAMED_MODES)
  def test_downscaling(self, mode):

    def scenario(make):
      opt = make(keras.optimizers.SGD(learning_rate=0.5), initial_scale=400.)
      variables = [keras.Variable([1., 2., 3., 4.])]
      opt.build(variables)
      step = _runner(mode, lambda: _trainer_step(opt, variables, [INF] * 4))
      for _ in range(4):
        step()
      return {"var": _values(variables),
              "scaled_one": float(opt.scale_loss(1.)),
              "counter": _counter(opt)}

    self.assert_as_keras(scenario, {"var": [[1., 2., 3., 4.]],
                                    "scaled_one": 25., "counter": 0})

  @parameterized.named_parameters(*NAMED_MODES)
  def test_upscaling(self, mode):

    def scenario(make):
      opt = make(keras.optimizers.SGD(learning_rate=0.5), initial_scale=2.,
                 dynamic_growth_steps=2)
      variables = [keras.Variable([1., 2., 3., 4.])]
      opt.build(variables)
      step = _runner(mode, lambda: _trainer_step(opt, variables, GRAD))
      for _ in range(8):
        step()
      return {"var": _values(variables),
              "scaled_one": float(opt.scale_loss(1.)),
              "counter": _counter(opt)}

    # Eight steps of -0.5 * GRAD; the scale doubles every second step.
    self.assert_as_keras(scenario, {
        "var": [[x - 4. * g for x, g in zip((1., 2., 3., 4.), GRAD)]],
        "scaled_one": 32., "counter": 0})

  @parameterized.named_parameters(*NAMED_MODES)
  def test_iterations_update(self, mode):

    def scenario(make):
      opt = make(keras.optimizers.SGD(learning_rate=0.5))
      variables = [keras.Variable([1., 2., 3., 4.])]
      opt.build(variables)
      seen = [int(opt.iterations.value)]
      step = _runner(mode, lambda: _trainer_step(opt, variables, GRAD))
      for _ in range(3):
        step()
        seen.append(int(opt.iterations.value))
      return {"iterations": seen}

    self.assert_as_keras(scenario, {"iterations": [0, 1, 2, 3]})

  def test_stateless_apply_is_refused(self):
    # Differs on purpose: Keras 3's class implements stateless_apply for
    # JAX; on the TensorFlow backend its own test skips it, and mplso's
    # wrapper refuses it rather than half-support it.
    opt = _ours(keras.optimizers.SGD(learning_rate=0.5))
    variables = [keras.Variable([1., 2., 3., 4.])]
    opt.build(variables)
    with self.assertRaisesRegex(ValueError, "stateless_apply is not supported"):
      opt.stateless_apply([v.value for v in opt.variables],
                          [tf.constant(GRAD)], [v.value for v in variables])
    self.assertEqual([[1., 2., 3., 4.]], _values(variables))

  def test_unscales_only_after_scale_loss(self):
    # Differs on purpose: Keras 3's class divides whatever reaches `apply`
    # by the scale. mplso's wrapper also serves TF 2.3's protocol, whose
    # gradients are unscaled by `get_unscaled_gradients` before
    # `apply_gradients`, so it divides only gradients of a loss scaled by
    # `scale_loss` (Keras 3's trainer calls it on every step).
    scaled = [g * 2.**15 for g in GRAD]
    results = {}
    for name, make in (("theirs", _theirs), ("ours", _ours)):
      opt = make(keras.optimizers.SGD(learning_rate=0.5))
      var = keras.Variable([1., 2., 3., 4.])
      opt.apply([tf.constant(scaled)], [var])
      results[name] = _values([var])
    self.assertEqual([[0.5, -1., -0.5, 3.]], results["theirs"])
    self.assertEqual([[x - 0.5 * g for x, g in zip((1., 2., 3., 4.), scaled)]],
                     results["ours"])
    # TF 2.3's protocol: unscaled gradients applied as they are.
    opt = _ours(keras.optimizers.SGD(learning_rate=0.5))
    var = keras.Variable([1., 2., 3., 4.])
    (grad,) = opt.get_unscaled_gradients([tf.constant(scaled)])
    opt.apply_gradients([(grad, var)])
    self.assertEqual([[0.5, -1., -0.5, 3.]], _values([var]))

  def test_scaled_gradients_from_a_function_applied_eagerly(self):
    # The trainer's protocol split between a tf.function, which
    # scales the loss and differentiates, and eager code, which applies.

    def scenario(make):
      opt = make(keras.optimizers.SGD(learning_rate=0.5), initial_scale=4.,
                 dynamic_growth_steps=2)
      var = keras.Variable([1., 2., 3., 4.])
      opt.build([var])  # Keras 3's scale_loss reads the scale once built.

      @tf.function
      def gradients(grad):
        with tf.GradientTape() as tape:
          scaled_loss = opt.scale_loss(
              tf.reduce_sum(tf.convert_to_tensor(var) * grad))
        return tape.gradient(scaled_loss, [var])

      seen = []
      for grad in (GRAD, GRAD, [NAN] * 4, GRAD):
        opt.apply(gradients(tf.constant(grad)), [var])
        seen.append((_values([var]), _scale(opt)))
      return {"steps": seen}

    self.assert_as_keras(scenario, {"steps": [
        ([[0.5, -1., -0.5, 3.]], 4.), ([[0., -4., -4., 2.]], 8.),
        ([[0., -4., -4., 2.]], 4.), ([[-0.5, -7., -7.5, 1.]], 4.)]})


class OverriddenApplyGradientsTest(_Case):

  @parameterized.named_parameters(*NAMED_MODES)
  def test_overridden_apply_gradients_of_the_wrapped_optimizer_is_called(
      self, mode):
    # TF 2.3's wrapper applied through the wrapped optimizer's
    # `apply_gradients`, so an override there (clipping, logging) ran; Keras
    # 3's class calls the wrapped optimizer's `apply` and skips it.
    calls = []

    class ClippingSGD(keras.optimizers.SGD):

      def apply_gradients(self, grads_and_vars):
        grads, variables = zip(*grads_and_vars)
        calls.append([type(g) for g in grads])
        grads, _ = tf.clip_by_global_norm(grads, 1.)
        return super().apply_gradients(zip(grads, variables))

    opt = _ours(ClippingSGD(learning_rate=1.), "dynamic")
    var = keras.Variable([0., 0.])
    _runner(mode, lambda: opt.apply_gradients(
        [(tf.constant([30., 40.]), var)]))()
    self.assertNotEmpty(calls)
    for kinds in calls:
      for kind in kinds:
        self.assertTrue(issubclass(kind, tf.Tensor), kind)
    self.assertAllClose([-0.6, -0.8], np.asarray(var))  # Clipped to norm 1.


class LossScaleAttributeTest(_Case):

  @parameterized.named_parameters(*NAMED_MODES)
  def test_loss_scale_attribute(self, mode):
    # Built with Keras 3's (TF 2.4's) keywords, `loss_scale` is
    # the current scale, a tensor; in TF 2.3's dialect, the LossScale.
    opt = _ours(keras.optimizers.SGD(), initial_scale=64.,
                dynamic_growth_steps=3)
    kinds = []

    def read():
      scale = opt.loss_scale
      kinds.append(type(scale))
      return scale() if isinstance(scale, mplso.LossScale) else scale

    self.assertEqual(64., float(_runner(mode, read)()))
    self.assertLen(kinds, 1)
    self.assertTrue(issubclass(kinds[0], tf.Tensor), kinds[0])
    self.assertIsInstance(
        _ours(keras.optimizers.SGD(), "dynamic").loss_scale,
        mplso.DynamicLossScale)


class ConfigTest(_Case):

  def test_class_serialization_round_trip(self):
    # Keras 3's `run_class_serialization_test`: get_config / from_config and
    # serialize / deserialize give the same config and the same attributes.

    def scenario(make):
      opt = make(keras.optimizers.SGD(learning_rate=0.5, momentum=0.06,
                                      nesterov=True, weight_decay=0.004))
      config = json.dumps(opt.get_config(), sort_keys=True)
      names = set(dir(opt)) - {"__annotations__"}
      seen = {}
      revived = type(opt).from_config(opt.get_config())
      seen["from_config"] = (
          json.dumps(revived.get_config(), sort_keys=True) == config,
          set(dir(revived)) - {"__annotations__"} == names)
      serialized = json.loads(json.dumps(
          keras.saving.serialize_keras_object(opt)))
      revived = keras.saving.deserialize_keras_object(serialized)
      seen["deserialized"] = (
          type(revived) is type(opt),
          json.dumps(revived.get_config(), sort_keys=True) == config,
          set(dir(revived)) - {"__annotations__"} == names)
      inner = revived.inner_optimizer
      seen["inner"] = (float(inner.learning_rate), inner.momentum,
                       inner.nesterov, inner.weight_decay)
      return seen

    self.assert_as_keras(scenario, {"from_config": (True, True),
                                    "deserialized": (True, True, True),
                                    "inner": (0.5, 0.06, True, 0.004)})

  def test_get_config_is_tf_2_3_format(self):
    # Differs on purpose: Keras 3's config is {name, inner_optimizer,
    # initial_scale, dynamic_growth_steps}; mplso writes TF 2.3's
    # {optimizer, loss_scale}, which TF 2.3-era code and saved files read,
    # with Keras 3's `name` and a note on how to load it.
    theirs = _theirs(keras.optimizers.SGD(learning_rate=0.5),
                     initial_scale=3., dynamic_growth_steps=2,
                     name="test_opt").get_config()
    self.assertEqual({"name", "inner_optimizer", "initial_scale",
                      "dynamic_growth_steps"}, set(theirs))
    opt = _ours(keras.optimizers.SGD(learning_rate=0.5), initial_scale=3.,
                dynamic_growth_steps=2, name="test_opt")
    config = opt.get_config()
    self.assertEqual({"how_to_load", "optimizer", "loss_scale", "name"},
                     set(config))
    self.assertEqual("test_opt", config["name"])
    self.assertEqual({"class_name": "DynamicLossScale", "config": {
        "initial_loss_scale": 3., "increment_period": 2,
        "multiplier": 2.}}, config["loss_scale"])
    restored = type(opt).from_config(config)
    self.assertEqual(config, restored.get_config())
    self.assertEqual("test_opt", restored.name)
    # Keras 3's own format, name included, is read too.
    from_theirs = type(opt).from_config(theirs)
    self.assertEqual(("test_opt", 3., 2), (
        from_theirs.name, from_theirs.initial_scale,
        from_theirs.dynamic_growth_steps))

  def test_dynamic_argument(self):
    # `dynamic=True` is accepted by both. `dynamic=False` differs on purpose:
    # Keras 3's class has no fixed scale; mplso's, as TF 2.4-2.15's, takes
    # one with `initial_scale` (and asks for it without).
    self.assertIsInstance(_theirs(keras.optimizers.SGD(), dynamic=True),
                          keras.optimizers.LossScaleOptimizer)
    self.assertTrue(_ours(keras.optimizers.SGD(), dynamic=True).dynamic)
    with self.assertRaisesRegex(ValueError, "set `loss_scale_factor`"):
      _theirs(keras.optimizers.SGD(), dynamic=False)
    with self.assertRaisesRegex(
        ValueError, '"initial_scale" must be specified if "dynamic" is False'):
      _ours(keras.optimizers.SGD(), dynamic=False)
    fixed = _ours(keras.optimizers.SGD(learning_rate=0.5), dynamic=False,
                  initial_scale=8.)
    self.assertFalse(fixed.dynamic)
    var = keras.Variable([1., 2., 3., 4.])
    _trainer_step(fixed, [var], GRAD)
    self.assertEqual([[0.5, -1., -0.5, 3.]], _values([var]))
    self.assertEqual(8., _scale(fixed))

  def test_unsupported_arguments(self):
    for make in (_theirs, _ours):
      with self.subTest(make=make.__name__):
        with self.assertRaisesRegex(ValueError, "arguments: `foo`, `bar`"):
          make(keras.optimizers.SGD(learning_rate=0.5), foo=True, bar=3)

  @parameterized.named_parameters(
      ("ema_momentum", "ema_momentum", 0.5),
      ("ema_overwrite_frequency", "ema_overwrite_frequency", 2))
  def test_base_optimizer_argument_refused(self, name, value):
    for make in (_theirs, _ours):
      with self.subTest(make=make.__name__):
        with self.assertRaisesRegex(ValueError, "on the `inner_optimizer`"):
          make(keras.optimizers.SGD(learning_rate=0.5), **{name: value})

  def test_reads_keras_3_config_with_base_arguments_at_their_defaults(self):
    # Older Keras 3 configs wrote the base optimizer's arguments, unused.
    base_defaults = {
        "weight_decay": None, "clipnorm": None, "global_clipnorm": None,
        "clipvalue": None, "use_ema": False, "ema_momentum": 0.99,
        "ema_overwrite_frequency": None, "loss_scale_factor": None,
        "gradient_accumulation_steps": None}

    def config():
      return {"name": "loss_scale_optimizer", **base_defaults,
              "inner_optimizer": {
                  "module": "keras.optimizers", "class_name": "SGD",
                  "config": {"name": "SGD", "learning_rate": 0.5,
                             **base_defaults, "momentum": 0.,
                             "nesterov": False},
                  "registered_name": None},
              "initial_scale": 2., "dynamic_growth_steps": 2}

    for from_config in (keras.optimizers.LossScaleOptimizer.from_config,
                        keras3_optimizer.LossScaleOptimizer.from_config,
                        mplso.keras.LossScaleOptimizer.from_config):
      with self.subTest(from_config=from_config.__qualname__):
        opt = from_config(config())
        var = keras.Variable([1., 2., 3., 4.])
        for _ in range(2):
          _trainer_step(opt, [var], GRAD)
        self.assertEqual("loss_scale_optimizer", opt.name)
        self.assertEqual(0.5, float(opt.learning_rate))
        self.assertEqual(4., _scale(opt))  # 2, grown after 2 steps.
        self.assertEqual([[0., -4., -4., 2.]], _values([var]))


if __name__ == "__main__":
  absltest.main()
