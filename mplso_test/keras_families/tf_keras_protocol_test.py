"""tf_keras's own LossScaleOptimizer test, on mplso's tf_keras families.

Learned from tf_keras's `tf_keras/mixed_precision/loss_scale_optimizer_test.py`
(keras-team/tf-keras), rewritten for mplso: each behaviour runs on both
tf_keras families mplso wraps, the legacy `OptimizerV2` family
(`tf_keras.optimizers.legacy.*`, "legacy") and the new-optimizer family
(`tf_keras.optimizers.*`, "new"), and, where a comparison makes sense, runs
the same steps through tf_keras's own `tf_keras.mixed_precision.
LossScaleOptimizer` and asserts that both see the same variables, loss scale
and good-step counter. As in tf_keras's test, the legacy family runs in a TF1
graph (`tf.Graph` and a `Session`) and eagerly, the new family eagerly and in
a `tf.function` (tf_keras's new optimizers have no graph mode), each without
a strategy and under an in-process `MirroredStrategy` (here over two logical
CPUs, so replicas are real; tf_keras's test uses one device without a GPU).
In `function` mode the `tf.function` wraps `strategy.run`, as TF's own error
for a synchronisation point in a nested `tf.function` asks.

Each of tf_keras's test methods, and where mplso tests that behaviour
(ids: tf_keras's parameter combinations):

  testIsInstance (1): base_test.ConstructorTest.
      test_family_class_and_instance_checks.
  testFixedLossScaleAppliedToLossWithMinimize (8): test_fixed_scale_minimize_*
      (the scaled gradient reaching the loss, the step); that `loss_scale` is
      a tensor: test_loss_scale_attribute_*.
  testFixedLossScaleAppliedToLossWithGetGradients (1):
      test_get_gradients_scales_the_loss_in_a_graph.
  testDynamicAttrsWithFixedLossScale (2): arguments_test.DialectTest.
      test_fixed_scale.
  testGetScaledLoss, testGetUnscaledGradients, testGetUnscaledSparseGradients
      (2 each): test_scaled_loss_and_unscaled_gradients_* (float16 included;
      float32 also in base_test.ScalingTest).
  testDynamicLossScale (8): test_dynamic_scale_minimize_*.
  testDynamicLossScaleDefaultValues (2): arguments_test.DialectTest.
      test_defaults_are_tf_keras_dynamic_scale.
  testClipping (8): test_clipping_* (the new family with all three clipping
      arguments; tf_keras's test returns after the first).
  testDynamicUpdate (8): test_dynamic_update_*.
  testDynamicLossScaleWithFloat16Loss (8): test_float16_loss_*.
  testNanOnOneReplicaOnly (8): test_nan_on_one_replica_only_* for the four
      mirrored ids; the four default-strategy ids are not applicable (one
      replica; tf_keras's test skips them too), and no GPU is needed here.
  testCustomAggregater (1): optimizer_v2_test.CustomAggregationTest.
      test_nan_made_by_a_gradient_aggregator_is_skipped_as_tf_keras.
  testDynamicLossScaleWithSlots (8): test_slots_*.
  testIterations (1): test_iterations_set_on_the_wrapper_* (both families).
  testIterationsIncremented (8): test_iterations_incremented_*.
  testWeightMethods (1): base_test.PassthroughTest.test_weights_* and
      optimizer_v2_test.PassthroughTest.
      test_weights_copy_to_a_bare_optimizer.
  testHyperParametersExposedLSOV3 (1): test_hyperparameters_exposed_new.
  testHyperParametersExposed (1): test_hyperparameters_exposed_legacy; its
      last part (`lso.loss_scale = 2.0` raises AttributeError when the
      wrapped optimizer has a `loss_scale` hyperparameter):
      test_loss_scale_cannot_be_set_legacy.
  testArbitraryAttributesNotExposed (2): test_inner_attributes_not_exposed_
      legacy; new family: differs on purpose,
      test_inner_attributes_forwarded_new (mplso's new-family wrapper reads
      and sets the wrapped optimizer's public attributes, so that
      `opt.beta_1 = ...` reaches the optimizer that uses it).
  testDir (1): test_dir_legacy.
  testApplyGradientsGetsUnwrappedTensors (2),
  testApplyGradientsGetsUnwrappedTensorsWithNewOptimizer (2):
      test_overridden_apply_gradients_gets_tensors_*.
  testLossScaleDelegationWithWrapper (2):
      test_learning_rate_of_a_wrapping_optimizer_*.
  testCheckpoint (32): test_checkpoint_* (24 ids). Not applicable: the 8
      with save_with_ls=restore_with_ls=False (no loss scaling; tf_keras
      skips them too), and the 3 of the legacy family in a graph under
      MirroredStrategy, where tf.train.Checkpoint itself cannot save
      (tf_keras's test returns there without checking anything; here they
      skip, saying why).
  testGetConfigFixed (3), testGetConfigDynamic (3): test_config_fixed_*,
      test_config_dynamic_*.
  test_from_config_with_invalid_multiplier (1): differs on purpose,
      test_any_multiplier_is_accepted (TF 2.3's class, which mplso
      reproduces, accepted any multiplier; tf_keras's refuses all but 2).
  testSerializationWithBuiltInOptimizer (3):
      test_serialize_and_deserialize_*.
  testSerializationWithCustomOptimizer (2):
      test_serialize_custom_optimizer_*.
  testConvertToLegacyOptimizer (1): test_convert_to_legacy_optimizer.
      tf_keras 2.21 exports the function as
      `tf_keras.__internal__.optimizers.convert_to_legacy_optimizer` only.
  testUnsupportedStrategy (2): differs on purpose,
      test_central_storage_strategy_is_supported_* (mplso sums gradients
      before its finite check, so every replica skips together under
      CentralStorageStrategy too; docs/distribute.md).
  testInvalidArgsWithFixedLossScale (2), testDynamicMustBeBool (2):
      arguments_test.DialectTest.test_refused_arguments.
  testScalingWarning (2), testScalingNoWarning (2): base_test.
      ApplyGradientsTest.test_warns_as_tf_keras_when_never_scaled.
  testErrorWhenNesting (2): test_error_when_nesting_*.
  testErrorWrappingSameOptimizerMultipleTimes (2):
      test_error_wrapping_the_same_optimizer_twice_* (the wording; the
      error itself also in tf_keras_base_test.ConstructorTest.
      test_optimizer_wrapped_already_is_a_value_error).
  testErrorWhenWrappingNonOptimizer (1):
      test_error_when_wrapping_a_non_optimizer.
  testErrorWhenV3LsoWrapsV2Optimizer (1): tf_keras_optimizer_test.
      BadInputTest.test_wrong_optimizer_kind.
  testErrorWhenV2LsoWrapsV3Optimizer (1):
      test_legacy_family_refuses_a_new_optimizer.
"""

import contextlib
import functools
import os

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tf_keras
from tf_keras.src.mixed_precision import loss_scale_optimizer as tf_keras_lso

import mplso
from mplso._src.keras import optimizer_v2
from mplso._src.keras import tf_keras_optimizer
import mplso.keras
from mplso_test.helpers import strategies

NAN, INF = float("nan"), float("inf")
LEGACY, NEW = "legacy", "new"
GRAPH, EAGER, FUNCTION = "graph", "eager", "function"
DEFAULT, MIRRORED = "default", "mirrored"
REPLICAS = 2  # Of the mirrored strategy, on conftest's logical CPUs.

# The modes tf_keras's test runs each family in.
FAMILY_MODES = {LEGACY: (GRAPH, EAGER), NEW: (EAGER, FUNCTION)}
SGD = {LEGACY: tf_keras.optimizers.legacy.SGD, NEW: tf_keras.optimizers.SGD}
# tf_keras's own classes, by family (its public one picks them).
TF_KERAS_CLASS = {LEGACY: tf_keras_lso.LossScaleOptimizer,
                  NEW: tf_keras_lso.LossScaleOptimizerV3}
OUR_CLASS = {LEGACY: optimizer_v2.LossScaleOptimizer,
             NEW: tf_keras_optimizer.LossScaleOptimizer}


STRATEGIES = {DEFAULT: tf.distribute.get_strategy, MIRRORED: functools.partial(strategies.mirrored, REPLICAS)}


def _family_modes():
  """(id, family, mode) for every family and mode tf_keras's test runs."""
  return [(f"{family}_{mode}", family, mode)
          for family, modes in FAMILY_MODES.items() for mode in modes]


def _combos():
  """(id, family, mode, strategy): `_family_modes`, with and without one."""
  return [(f"{name}_{strategy}", family, mode, strategy)
          for name, family, mode in _family_modes()
          for strategy in (DEFAULT, MIRRORED)]


NAMED_FAMILIES = [(LEGACY, LEGACY), (NEW, NEW)]


def _ours(*args, **kwargs):
  return mplso.keras.LossScaleOptimizer(*args, **kwargs)


def _theirs(*args, **kwargs):
  return tf_keras.mixed_precision.LossScaleOptimizer(*args, **kwargs)


def _current_scale(opt):
  """The current scale as a tensor, whichever `loss_scale` returns."""
  scale = opt.loss_scale
  if isinstance(scale, mplso.LossScale):  # TF 2.3's dialect.
    scale = scale()
  return scale


def _identity_expecting_gradient(expected):
  """An identity whose gradient asserts that `expected` flows into it.

  The loss scale multiplies every gradient on the way back, so for a loss
  `identity(var) / replicas` the gradient reaching `identity` is
  `scale / replicas`. `expected` may be a variable, read when the gradient
  runs.
  """

  @tf.custom_gradient
  def identity(x):

    def grad(dy):
      want = tf.cast(tf.convert_to_tensor(expected), dy.dtype)
      check = tf.debugging.assert_equal(
          dy, tf.broadcast_to(want, tf.shape(dy)),
          message="the gradient reaching the loss is not the scaled one")
      with tf.control_dependencies([check]):
        return tf.identity(dy)

    return tf.identity(x), grad

  return identity


class _Run(contextlib.ExitStack):
  """One run of a scenario: its mode, and its strategy's scope.

  In graph mode everything lives in a fresh `tf.Graph` with a default
  `Session`; a step is built once and run with `session.run`.
  """

  def __init__(self, mode, strategy):
    super().__init__()
    self.mode, self._strategy_name = mode, strategy
    self.session = None
    self._initialized = set()

  def __enter__(self):
    super().__enter__()
    if self.mode == GRAPH:
      graph = self.enter_context(tf.Graph().as_default())
      self.session = self.enter_context(tf.compat.v1.Session(graph=graph))
      self.enter_context(self.session.as_default())
    self.strategy = STRATEGIES[self._strategy_name]()
    self.enter_context(self.strategy.scope())
    return self

  @property
  def replicas(self):
    return self.strategy.num_replicas_in_sync

  def step(self, fn):
    """Returns a callable that runs `fn` once on every replica."""
    if self.mode == GRAPH:
      results = self.strategy.experimental_local_results(self.strategy.run(fn))
      op = tf.group([r for r in results if r is not None])

      def run():
        self.initialize()
        self.session.run(op)

      return run
    if self.mode == FUNCTION:
      function = tf.function(lambda: (self.strategy.run(fn), None)[1])
      return lambda: (function(), None)[1]
    return lambda: (self.strategy.run(fn), None)[1]

  def initialize(self):
    """Initialises the graph's variables not initialised yet (graph mode)."""
    if self.mode != GRAPH:
      return
    new = [v for v in tf.compat.v1.global_variables()
           if id(v) not in self._initialized]
    self.session.run(tf.compat.v1.variables_initializer(new))
    self._initialized.update(id(v) for v in new)

  def assign(self, variable, value):
    """Sets `variable` to `value` between steps."""
    if self.mode == GRAPH:
      self.initialize()
      self.session.run(variable.assign(value))
    else:
      variable.assign(value)

  def read(self, value):
    """`value` as a Python number or list; every replica must agree."""
    if isinstance(value, tf.Variable):
      values = list(self.strategy.experimental_local_results(value))
    else:
      values = [value]
    if self.mode == GRAPH:
      values = self.session.run(values)
    values = [np.asarray(v).tolist() for v in values]
    for other in values[1:]:
      if other != values[0]:
        raise AssertionError(f"Replicas disagree: {values}")
    return values[0]


class _Case(tf.test.TestCase, parameterized.TestCase):

  def assert_as_tf_keras(self, scenario, expected):
    """Runs `scenario(make)` with tf_keras's class and mplso's.

    Both must observe `expected` (a dict of Python values), tf_keras's class
    first, so that `expected` is known to be tf_keras's behaviour.
    """
    # Exact: the values are small integers and powers of two, and tf.test's
    # assertDictEqual would fall back to a tolerance.
    absltest.TestCase.assertDictEqual(self, expected, scenario(_theirs),
                                      "tf_keras's own class")
    absltest.TestCase.assertDictEqual(self, expected, scenario(_ours),
                                      "mplso's class")


class StepTest(_Case):
  """The update tf_keras's test checks, in every family, mode and strategy."""

  @parameterized.named_parameters(_combos())
  def test_fixed_scale_minimize(self, family, mode, strategy):

    def scenario(make):
      with _Run(mode, strategy) as run:
        var = tf.Variable([5.])
        opt = make(SGD[family](2.), dynamic=False, initial_scale=10.)
        identity = _identity_expecting_gradient(10. / run.replicas)
        step = run.step(lambda: opt.minimize(
            lambda: identity(var) / run.replicas, var_list=[var]))
        step()
        # Gradient 1, so var = 5 - 2 * 1.
        return {"var": run.read(var),
                "scale": run.read(_current_scale(opt))}

    self.assert_as_tf_keras(scenario, {"var": [3.], "scale": 10.})

  @parameterized.named_parameters(_combos())
  def test_dynamic_scale_minimize(self, family, mode, strategy):

    def scenario(make):
      with _Run(mode, strategy) as run:
        expected_gradient = tf.Variable(2. / run.replicas)
        var = tf.Variable([5.])
        opt = make(SGD[family](2.), initial_scale=2, dynamic_growth_steps=1)
        types = (type(opt.initial_scale), type(opt.dynamic_growth_steps))
        identity = _identity_expecting_gradient(expected_gradient)
        step = run.step(lambda: opt.minimize(
            lambda: identity(var) / run.replicas, var_list=[var]))
        step()
        first = run.read(var)
        # The scale doubled, so the gradient reaching the loss doubles too.
        run.assign(expected_gradient, 4. / run.replicas)
        step()
        return {"initial_scale": opt.initial_scale, "types": types,
                "growth": opt.dynamic_growth_steps, "first": first,
                "second": run.read(var),
                "scale": run.read(_current_scale(opt)),
                "counter": run.read(opt.dynamic_counter)}

    self.assert_as_tf_keras(scenario, {
        "initial_scale": 2., "types": (float, int), "growth": 1,
        "first": [3.], "second": [1.], "scale": 8., "counter": 0})

  @parameterized.named_parameters(_combos())
  def test_clipping(self, family, mode, strategy):
    for clip in ("clipnorm", "global_clipnorm", "clipvalue"):
      with self.subTest(clip=clip):

        def scenario(make, clip=clip):
          with _Run(mode, strategy) as run:
            var = tf.Variable([5.])
            # The loss is var * factor: one step (one trace) for every factor.
            factor = tf.Variable(4.)
            opt = make(SGD[family](2., **{clip: 2.}), initial_scale=2,
                       dynamic_growth_steps=1)
            seen = {}
            if family == LEGACY:  # Only OptimizerV2 exposes them.
              seen["attribute"] = getattr(opt, clip)

            def minimize():
              return opt.minimize(lambda: var * factor / run.replicas,
                                  var_list=[var])

            step = run.step(minimize)
            step()  # Gradient 4, clipped to 2: var = 5 - 2 * 2.
            seen["clipped"] = (run.read(var), run.read(_current_scale(opt)))
            if family == LEGACY:  # Eager or a graph: the step reads it anew.
              setattr(opt, clip, 3.)  # Clipped to 3: var = 1 - 3 * 2.
              step = run.step(minimize)
              step()
              seen["reclipped"] = (run.read(var),
                                   run.read(_current_scale(opt)))
            run.assign(factor, INF * run.replicas)
            step()  # Inf is skipped, not clipped.
            seen["inf"] = (run.read(var), run.read(_current_scale(opt)))
            return seen

        if family == LEGACY:
          expected = {"attribute": 2., "clipped": ([1.], 4.),
                      "reclipped": ([-5.], 8.), "inf": ([-5.], 4.)}
        else:
          expected = {"clipped": ([1.], 4.), "inf": ([1.], 2.)}
        self.assert_as_tf_keras(scenario, expected)

  @parameterized.named_parameters(_combos())
  def test_dynamic_update(self, family, mode, strategy):

    def scenario(make):
      with _Run(mode, strategy) as run:
        var = tf.Variable([1., 2.])
        opt = make(SGD[family](1.), initial_scale=2, dynamic_growth_steps=1)
        run.step(lambda: opt.minimize(
            lambda: var * 2. / run.replicas, var_list=[var]))()
        finite = (run.read(var), run.read(_current_scale(opt)))
        run.step(lambda: opt.minimize(lambda: var * NAN, var_list=[var]))()
        return {"finite": finite,
                "nan": (run.read(var), run.read(_current_scale(opt)))}

    # Gradient 2: var - 2, the scale doubles; NaN: var stays, it halves.
    self.assert_as_tf_keras(scenario, {"finite": ([-1., 0.], 4.),
                                       "nan": ([-1., 0.], 2.)})

  @parameterized.named_parameters(_combos())
  def test_float16_loss(self, family, mode, strategy):

    def scenario(make):
      with _Run(mode, strategy) as run:
        var = tf.Variable([5.])
        opt = make(SGD[family](2.), initial_scale=2, dynamic_growth_steps=1)
        run.step(lambda: opt.minimize(
            lambda: tf.cast(var / run.replicas, tf.float16), var_list=[var]))()
        return {"var": run.read(var), "scale": run.read(_current_scale(opt))}

    self.assert_as_tf_keras(scenario, {"var": [3.], "scale": 4.})

  @parameterized.named_parameters(_family_modes())
  def test_nan_on_one_replica_only(self, family, mode):

    def scenario(make):
      with _Run(mode, MIRRORED) as run:
        var = tf.Variable([1., 2.])
        opt = make(SGD[family](1.), initial_scale=2, dynamic_growth_steps=2)

        def loss():
          replica = tf.distribute.get_replica_context().replica_id_in_sync_group
          # Only the last replica's gradient holds a NaN.
          return tf.cond(tf.equal(replica, run.replicas - 1),
                         lambda: var * tf.constant([1., NAN]),
                         lambda: var * 2.)

        run.step(lambda: opt.minimize(loss, var_list=[var]))()
        return {"var": run.read(var), "scale": run.read(_current_scale(opt)),
                "iterations": run.read(opt.iterations)}

    # Every replica skips, and the scale halves once.
    self.assert_as_tf_keras(scenario, {"var": [1., 2.], "scale": 1.,
                                       "iterations": 1})

  @parameterized.named_parameters(_combos())
  def test_slots(self, family, mode, strategy):

    def scenario(make):
      with _Run(mode, strategy) as run:
        var = tf.Variable([1., 2.])
        # Momentum 1: each step moves by the sum of all gradients so far.
        opt = make(SGD[family](1., momentum=1.), initial_scale=2.,
                   dynamic_growth_steps=1)
        step = run.step(lambda: opt.minimize(lambda: var / run.replicas,
                                             var_list=[var]))
        step()
        seen = {"first": (run.read(var), run.read(_current_scale(opt)))}
        step()
        seen["second"] = (run.read(var), run.read(_current_scale(opt)))
        if family == LEGACY:
          seen["slots"] = opt.get_slot_names()
          seen["momentum"] = run.read(opt.get_slot(var, "momentum"))
        return seen

    expected = {"first": ([0., 1.], 4.), "second": ([-2., -1.], 8.)}
    if family == LEGACY:
      expected.update(slots=["momentum"], momentum=[-2., -2.])
    self.assert_as_tf_keras(scenario, expected)

  @parameterized.named_parameters(_combos())
  def test_iterations_incremented(self, family, mode, strategy):

    def scenario(make):
      with _Run(mode, strategy) as run:
        opt = make(SGD[family](1.))
        var = tf.Variable([5.])
        run.step(lambda: opt.minimize(lambda: var * 2. / run.replicas,
                                      [var]))()
        finite = (run.read(var), run.read(opt.iterations))
        # A skipped step still counts, as TF 2.3 documents.
        run.step(lambda: opt.minimize(lambda: var * NAN, [var]))()
        return {"finite": finite,
                "nan": (run.read(var), run.read(opt.iterations))}

    self.assert_as_tf_keras(scenario, {"finite": ([3.], 1),
                                       "nan": ([3.], 2)})

  @parameterized.named_parameters(_family_modes())
  def test_overridden_apply_gradients_gets_tensors(self, family, mode):
    # Optimizers that override apply_gradients expect plain tensors, not a
    # strategy's PerReplica values, even though the base class takes both.
    calls = []

    def scenario(make):
      del calls[:]
      if family == LEGACY:

        class Recording(tf_keras.optimizers.legacy.SGD):

          def apply_gradients(self, grads_and_vars, name=None,
                              experimental_aggregate_gradients=True):
            grads_and_vars = list(grads_and_vars)
            calls.append([type(g) for g, _ in grads_and_vars])
            return super().apply_gradients(grads_and_vars, name,
                                           experimental_aggregate_gradients)
      else:

        class Recording(tf_keras.optimizers.SGD):

          def apply_gradients(self, grads_and_vars, name=None,
                              skip_gradients_aggregation=False, **kwargs):
            grads_and_vars = list(grads_and_vars)
            calls.append([type(g) for g, _ in grads_and_vars])
            return super().apply_gradients(
                grads_and_vars, name=name,
                skip_gradients_aggregation=skip_gradients_aggregation,
                **kwargs)

      with _Run(mode, MIRRORED) as run:
        var = tf.Variable([5.])
        opt = make(Recording(learning_rate=1.), dynamic=False, initial_scale=1)
        run.step(lambda: opt.minimize(lambda: var * 2. / run.replicas,
                                      [var]))()
        types = {t for call in calls for t in call}
        return {"var": run.read(var), "called": len(calls) >= 1,
                "plain_tensors": all(issubclass(t, tf.Tensor) for t in types)}

    self.assert_as_tf_keras(scenario, {"var": [3.], "called": True,
                                       "plain_tensors": True})


def _loss_scale_reader(*optimizers):
  """Returns `(kinds, read)`: `read()` reads each `loss_scale`, noting its type.

  `read` returns the current scales, also where `loss_scale` is a
  `mplso.LossScale`, so that a `tf.function` of it still returns tensors.
  """
  kinds = []

  def read():
    values = [opt.loss_scale for opt in optimizers]
    kinds.extend(type(v) for v in values)
    return [v() if isinstance(v, mplso.LossScale) else v for v in values]

  return kinds, read


class LossScaleAttributeTest(_Case):
  """TF 2.4's dialect reads `loss_scale` as the current scale."""

  @parameterized.named_parameters(_family_modes())
  def test_loss_scale_attribute_is_the_current_scale(self, family, mode):
    for make in (_theirs, _ours):
      with self.subTest(make=make.__name__), _Run(mode, DEFAULT) as run:
        fixed = make(SGD[family](1.), dynamic=False, initial_scale=10.)
        dynamic = make(inner_optimizer=SGD[family](1.), initial_scale=64.)
        kinds, read = _loss_scale_reader(fixed, dynamic)
        values = tf.function(read)() if mode == FUNCTION else read()
        self.assertLen(kinds, 2)
        for kind in kinds:
          self.assertTrue(issubclass(kind, tf.Tensor), kind)
        run.initialize()
        self.assertEqual([10., 64.], [run.read(v) for v in values])

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_tf_2_3_dialect_keeps_the_loss_scale_object(self, family):
    opt = _ours(SGD[family](1.), 10.)
    self.assertIsInstance(opt.loss_scale, mplso.FixedLossScale)
    self.assertEqual(10., float(opt.loss_scale()))
    self.assertIsInstance(_ours(SGD[family](1.), "dynamic").loss_scale,
                          mplso.DynamicLossScale)


class GradientsTest(_Case):

  def test_get_gradients_scales_the_loss_in_a_graph(self):

    def scenario(make):
      with _Run(GRAPH, DEFAULT) as run:
        var = tf.Variable([2.])
        opt = make(SGD[LEGACY](1.), dynamic=False, initial_scale=10.)
        identity = _identity_expecting_gradient(10.)
        (grad,) = opt.get_gradients(identity(var), [var])
        run.initialize()
        return {"grad": run.session.run(grad).tolist()}

    self.assert_as_tf_keras(scenario, {"grad": [1.]})

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_scaled_loss_and_unscaled_gradients(self, family):

    def scenario(make):
      opt = make(SGD[family](), dynamic=False, initial_scale=2)
      seen = {}
      for dtype in (tf.float32, tf.float16):
        loss = tf.constant(5., dtype)
        scaled = opt.get_scaled_loss(loss)
        scaled_fn = opt.get_scaled_loss(lambda loss=loss: loss)
        seen[dtype.name] = (scaled.dtype.name, float(scaled),
                            scaled_fn().dtype.name, float(scaled_fn()))
      grads = opt.get_unscaled_gradients(
          [tf.constant(3.), None, tf.constant(-4., tf.float16)])
      seen["grads"] = [None if g is None else (g.dtype.name, float(g))
                       for g in grads]
      sparse = tf.IndexedSlices(
          tf.constant([[4., 2.], [8., 5.]]), tf.constant([1, 3]),
          dense_shape=tf.constant([5, 2]))
      (unscaled,) = opt.get_unscaled_gradients([sparse])
      seen["sparse"] = (type(unscaled).__name__,
                        unscaled.values.numpy().tolist(),
                        unscaled.indices.numpy().tolist())
      return seen

    self.assert_as_tf_keras(scenario, {
        "float32": ("float32", 10., "float32", 10.),
        "float16": ("float16", 10., "float16", 10.),
        "grads": [("float32", 1.5), None, ("float16", -2.)],
        "sparse": ("IndexedSlices", [[2., 1.], [4., 2.5]], [1, 3])})


class PassthroughTest(_Case):

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_iterations_set_on_the_wrapper(self, family):

    def scenario(make):
      inner = SGD[family](2.)
      lso = make(inner, dynamic=False, initial_scale=10.)
      lso.iterations = 7
      return {"wrapper": int(lso.iterations), "inner": int(inner.iterations)}

    self.assert_as_tf_keras(scenario, {"wrapper": 7, "inner": 7})

  def test_hyperparameters_exposed_new(self):

    def scenario(make):
      inner = tf_keras.optimizers.Adam(learning_rate=1., beta_1=.5, beta_2=.9)
      lso = make(inner)
      lso.learning_rate = tf.Variable(0.005)
      seen = {"learning_rate": float(lso.learning_rate),
              "same": lso.learning_rate is inner.learning_rate}
      lso.use_ema = True
      lso.ema_momentum = 0.88
      seen["ema"] = (lso.use_ema, inner.use_ema, lso.ema_momentum,
                     inner.ema_momentum)
      return seen

    self.assert_as_tf_keras(scenario, {
        "learning_rate": float(np.float32(0.005)), "same": True,
        "ema": (True, True, .88, .88)})

  def test_hyperparameters_exposed_legacy(self):

    def scenario(make):
      inner = tf_keras.optimizers.legacy.Adam(learning_rate=1., beta_1=.5,
                                              beta_2=.9)
      lso = make(inner)
      _ = inner.lr  # Creates the hyperparameter variables.
      seen = {"beta_1": float(lso.beta_1),
              "variable": isinstance(lso.beta_1, tf.Variable),
              "lr": float(lso.lr), "lr_is_inner": lso.lr is inner.lr,
              "lr_is_learning_rate": lso.lr is lso.learning_rate}
      lso.beta_1 = 0.25
      seen["set_on_wrapper"] = (float(lso.beta_1), float(inner.beta_1),
                                lso.beta_1 is inner.beta_1)
      inner.beta_1 = 0.75
      seen["set_on_inner"] = (float(lso.beta_1), float(inner.beta_1),
                              lso.beta_1 is inner.beta_1)
      lso.lr = 2.
      seen["lr_set"] = (float(lso.lr), float(lso.learning_rate),
                        float(inner.lr), float(inner.learning_rate),
                        lso.lr is inner.lr)
      return seen

    self.assert_as_tf_keras(scenario, {
        "beta_1": .5, "variable": True, "lr": 1., "lr_is_inner": True,
        "lr_is_learning_rate": True, "set_on_wrapper": (.25, .25, True),
        "set_on_inner": (.75, .75, True),
        "lr_set": (2., 2., 2., 2., True)})

  def test_loss_scale_cannot_be_set_legacy(self):
    # The wrapped optimizer has a hyperparameter named `loss_scale`; setting
    # the wrapper's must not reach it.

    class WithLossScaleHyper(tf_keras.optimizers.legacy.SGD):

      def __init__(self):
        super().__init__()
        self._set_hyper("loss_scale", 123.)

    for make in (_theirs, _ours):
      with self.subTest(make=make.__name__):
        inner = WithLossScaleHyper()
        lso = make(inner)
        raised = False
        try:
          lso.loss_scale = 2.
        except AttributeError:
          raised = True
        # The wrapped optimizer's hyperparameter stays as it was.
        hyper = inner._get_hyper("loss_scale")  # pylint: disable=protected-access
        self.assertEqual(123., float(hyper))
        self.assertTrue(raised, "lso.loss_scale = 2. raised no AttributeError")

  def test_inner_attributes_not_exposed_legacy(self):

    def scenario(make):
      inner = SGD[LEGACY]()
      lso = make(inner)
      with self.assertRaisesRegex(
          AttributeError, "'LossScaleOptimizer' object has no attribute "
          "'nesterov'"):
        _ = lso.nesterov
      lso.nesterov = True
      return {"wrapper": lso.nesterov, "inner": inner.nesterov}

    self.assert_as_tf_keras(scenario, {"wrapper": True, "inner": False})

  def test_inner_attributes_forwarded_new(self):
    # Differs on purpose: tf_keras's LossScaleOptimizerV3 hides the wrapped
    # optimizer's attributes. mplso's new-family wrapper reads and sets them
    # on the wrapped optimizer (its class docstring), because the wrapped
    # optimizer is the one that uses them: `opt.beta_1 = 0.8` on a wrapper
    # that kept its own copy would silently change nothing.
    theirs = _theirs(SGD[NEW]())
    with self.assertRaisesRegex(AttributeError, "has no attribute 'nesterov'"):
      _ = theirs.nesterov
    inner = SGD[NEW]()
    ours = _ours(inner)
    self.assertFalse(ours.nesterov)
    ours.nesterov = True
    self.assertTrue(inner.nesterov)
    self.assertNotIn("nesterov", vars(ours))

  def test_dir_legacy(self):
    for make in (_theirs, _ours):
      with self.subTest(make=make.__name__):
        lso = make(SGD[LEGACY]())
        names = dir(lso)
        for name in ("learning_rate", "lr", "minimize", "loss_scale"):
          self.assertIn(name, names)
        self.assertNotIn("nesterov", names)  # The wrapped optimizer's.
        self.assertIn("nesterov", dir(lso.inner_optimizer))

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_learning_rate_of_a_wrapping_optimizer(self, family):
    base_class = (tf_keras.optimizers.legacy.Optimizer if family == LEGACY
                  else tf_keras.optimizers.Optimizer)

    class Wrapping(base_class):
      """An optimizer that wraps another and exposes its learning rate."""

      def __init__(self):
        super().__init__("Wrapping")
        self.inner_optimizer = SGD[family](learning_rate=1.)

      @property
      def learning_rate(self):
        return self.inner_optimizer.learning_rate

      @learning_rate.setter
      def learning_rate(self, value):
        self.inner_optimizer.learning_rate = value

      def get_config(self):
        return {}

    def scenario(make):
      opt = make(Wrapping())
      innermost = opt.inner_optimizer.inner_optimizer
      seen = {"before": (float(opt.learning_rate),
                         float(innermost.learning_rate))}
      opt.learning_rate = 2.
      seen["after"] = (float(opt.learning_rate),
                       float(innermost.learning_rate))
      return seen

    self.assert_as_tf_keras(scenario, {"before": (1., 1.),
                                       "after": (2., 2.)})


def _with_tracked_variable(family):
  """The family's SGD with one more checkpointed variable, `my_var`."""

  class TrackingSGD(SGD[family]):

    def __init__(self, *args, **kwargs):
      super().__init__(*args, **kwargs)
      self.my_var = tf.Variable(0.)
      self._track_trackable(self.my_var, "my_var")

  return TrackingSGD


class CheckpointTest(_Case):

  @parameterized.named_parameters(
      (f"{name}_{ls_name}", family, mode, strategy, save_ls, restore_ls)
      for name, family, mode, strategy in _combos()
      for ls_name, save_ls, restore_ls in (
          ("both_scaled", True, True), ("scaled_to_bare", True, False),
          ("bare_to_scaled", False, True)))
  def test_checkpoint(self, family, mode, strategy, save_ls, restore_ls):
    if mode == GRAPH and strategy == MIRRORED:
      self.skipTest(
          "tf.train.Checkpoint cannot save in a TF1 graph under "
          "MirroredStrategy (its save counter is mirrored: \"Distributed"
          "Variable.handle is not available outside the replica context\"), "
          "with tf_keras's class as with mplso's; tf_keras's test returns "
          "there too (b/121381184).")
    prefix = os.path.join(self.create_tempdir().full_path, "ckpt")

    def scenario(make):
      seen = {}
      with _Run(mode, strategy) as run:
        sgd = _with_tracked_variable(family)

        def build(with_ls):
          var = tf.Variable([2.])
          inner = sgd(1., momentum=1.)
          opt = (make(inner, initial_scale=1., dynamic_growth_steps=2.)
                 if with_ls else inner)
          step = run.step(lambda: opt.minimize(
              lambda: var / run.replicas + 1., var_list=[var]))
          return var, inner, opt, step

        var, inner, opt, step = build(save_ls)
        step()
        seen["trained"] = [run.read(var), run.read(opt.iterations)]
        if save_ls:
          seen["trained"] += [run.read(_current_scale(opt)),
                              run.read(opt.dynamic_counter)]
        if family == LEGACY:
          seen["trained"].append(run.read(opt.get_slot(var, "momentum")))
        run.assign(inner.my_var, 1.)
        path = tf.train.Checkpoint(optimizer=opt, var=var).save(prefix)

        var, inner, opt, step = build(restore_ls)
        checkpoint = tf.train.Checkpoint(optimizer=opt, var=var)
        status = checkpoint.restore(path)
        if save_ls:
          status.assert_existing_objects_matched()
        else:
          status.assert_nontrivial_match()
        if mode != GRAPH:  # In a graph nothing is restored before it runs.
          seen["restored"] = [run.read(var), run.read(opt.iterations)]
          if restore_ls:
            seen["restored"] += [run.read(_current_scale(opt)),
                                 run.read(opt.dynamic_counter)]
        run.initialize()
        status.run_restore_ops()
        step()
        seen["stepped"] = [run.read(var), run.read(opt.iterations),
                           run.read(inner.my_var)]
        if family == LEGACY:
          slot = opt.get_slot(var, "momentum")
          seen["stepped"].append(run.read(slot))

        # Restoring again, now that the slots exist.
        status = checkpoint.restore(path)
        if save_ls and restore_ls:
          status.assert_consumed()
        elif save_ls:
          status.assert_existing_objects_matched()
        else:
          status.assert_nontrivial_match()
        status.run_restore_ops()
        seen["again"] = [run.read(var)]
        if family == LEGACY:
          seen["again"].append(run.read(slot))
      return seen

    # One step on var / replicas + 1 (gradient 1 in all): var 2 -> 1,
    # momentum -1; good steps 1; after the restore, 1 -> -1, momentum -2.
    expected = {"trained": [[1.], 1] + ([1., 1] if save_ls else []),
                "stepped": [[-1.], 2, 1.], "again": [[1.]]}
    if mode != GRAPH:
      expected["restored"] = [[1.], 1]
      if restore_ls:
        expected["restored"] += [1., 1 if save_ls else 0]
    if family == LEGACY:
      expected["trained"].append([-1.])
      expected["stepped"].append([-2.])
      expected["again"].append([-1.])
    self.assert_as_tf_keras(scenario, expected)


# TF 2.3's config of an SGD wrapper, as TF 2.3 wrote it.
def _tf_2_3_config(loss_scale):
  return {"optimizer": {"class_name": "SGD", "config": {
      "learning_rate": 2., "momentum": .5, "decay": 0., "nesterov": False,
      "name": "SGD"}}, "loss_scale": loss_scale}


class ConfigTest(_Case):

  def _configured(self, source, make_kwargs, tf_2_3_loss_scale):
    """Returns `scenario(make)`: a wrapper from a config, used for a step."""

    def scenario(make):
      if source == "tf_2_3":
        config = _tf_2_3_config(tf_2_3_loss_scale)
        family = LEGACY
      else:
        family = source
        opt = make(SGD[family](2., momentum=.5), **make_kwargs)
        config = opt.get_config()
      if make is _ours:
        opt = mplso.keras.LossScaleOptimizer.from_config(config)
        self.assertIsInstance(opt, OUR_CLASS[family])
      else:
        opt = TF_KERAS_CLASS[family].from_config(config)
      momentum = opt.inner_optimizer.momentum
      seen = {"learning_rate": float(opt.learning_rate),
              "inner_learning_rate": float(opt.inner_optimizer.learning_rate),
              "momentum": float(momentum),
              "scale": float(_current_scale(opt)),
              "initial_scale": opt.initial_scale,
              "growth": opt.dynamic_growth_steps, "dynamic": opt.dynamic}
      var = tf.Variable([5.])
      identity = _identity_expecting_gradient(2.)
      opt.minimize(lambda: identity(var), var_list=[var])  # Still usable.
      seen["var"] = var.numpy().tolist()
      seen["counter"] = (None if opt.dynamic_counter is None
                         else int(opt.dynamic_counter))
      return seen

    return scenario

  @parameterized.named_parameters(("legacy", LEGACY), ("tf_2_3", "tf_2_3"),
                                  ("new", NEW))
  def test_config_fixed(self, source):
    self.assert_as_tf_keras(
        self._configured(source, {"dynamic": False, "initial_scale": 2},
                         {"class_name": "FixedLossScale",
                          "config": {"loss_scale_value": 2.}}),
        {"learning_rate": 2., "inner_learning_rate": 2., "momentum": .5,
         "scale": 2., "initial_scale": 2., "growth": None, "dynamic": False,
         "var": [3.], "counter": None})

  @parameterized.named_parameters(("legacy", LEGACY), ("tf_2_3", "tf_2_3"),
                                  ("new", NEW))
  def test_config_dynamic(self, source):
    self.assert_as_tf_keras(
        self._configured(source, {"initial_scale": 2,
                                  "dynamic_growth_steps": 3},
                         {"class_name": "DynamicLossScale",
                          "config": {"initial_loss_scale": 2.,
                                     "increment_period": 3,
                                     "multiplier": 2.}}),
        {"learning_rate": 2., "inner_learning_rate": 2., "momentum": .5,
         "scale": 2., "initial_scale": 2., "growth": 3, "dynamic": True,
         "var": [3.], "counter": 1})

  def test_any_multiplier_is_accepted(self):
    # Differs on purpose: tf_keras refuses a TF 2.3 config whose dynamic
    # loss scale has a multiplier other than 2, because its own class has no
    # multiplier. TF 2.3's class, which mplso reproduces, had one, so such a
    # config, saved by TF 2.3, loads with its multiplier.
    config = _tf_2_3_config({"class_name": "DynamicLossScale", "config": {
        "initial_loss_scale": 2., "increment_period": 1, "multiplier": 4.}})
    with self.assertRaisesRegex(
        ValueError, "Cannot deserialize LossScaleOptimizer with a "
        "DynamicLossScale whose multiplier is not 2"):
      TF_KERAS_CLASS[LEGACY].from_config(dict(config))
    opt = mplso.keras.LossScaleOptimizer.from_config(dict(config))
    self.assertEqual(4., opt.loss_scale.multiplier)
    var = tf.Variable([5.])
    opt.minimize(lambda: var, var_list=[var])
    self.assertEqual([3.], var.numpy().tolist())
    self.assertEqual(8., float(_current_scale(opt)))  # Grew by 4.

  @parameterized.named_parameters(("legacy", LEGACY, False),
                                  ("legacy_v1_class_name", LEGACY, True),
                                  ("new", NEW, False))
  def test_serialize_and_deserialize(self, family, v1_class_name):

    def scenario(make):
      # tf_keras's test passes the growth steps as 3. to the legacy class.
      opt = make(SGD[family](2., momentum=.5), initial_scale=2.,
                 dynamic_growth_steps=3. if family == LEGACY else 3)
      config = tf_keras.optimizers.serialize(opt)
      if v1_class_name:
        # An early experimental class's name; its configs still load.
        config["class_name"] = "LossScaleOptimizerV1"
      restored = tf_keras.optimizers.deserialize(config)
      self.assertIs(type(restored), type(opt))
      seen = {"learning_rate": float(restored.learning_rate),
              "momentum": float(restored.inner_optimizer.momentum),
              "scale": float(_current_scale(restored)),
              "growth": restored.dynamic_growth_steps,
              "dynamic": restored.dynamic}
      var = tf.Variable([5.])
      identity = _identity_expecting_gradient(2.)
      restored.minimize(lambda: identity(var), var_list=[var])
      seen["var"] = var.numpy().tolist()
      seen["counter"] = int(restored.dynamic_counter)
      return seen

    self.assert_as_tf_keras(scenario, {
        "learning_rate": 2., "momentum": .5, "scale": 2., "growth": 3,
        "dynamic": True, "var": [3.], "counter": 1})

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_serialize_custom_optimizer(self, family):

    class CustomSGD(SGD[family]):

      def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.my_attribute = 123

    def scenario(make):
      opt = make(CustomSGD(2., momentum=.5), initial_scale=2.,
                 dynamic_growth_steps=3.)
      restored = tf_keras.optimizers.deserialize(
          tf_keras.optimizers.serialize(opt),
          custom_objects={"CustomSGD": CustomSGD})
      return {"inner": type(restored.inner_optimizer).__name__,
              "my_attribute": restored.inner_optimizer.my_attribute,
              "learning_rate": float(restored.learning_rate),
              "momentum": float(restored.inner_optimizer.momentum),
              "scale": float(_current_scale(restored)),
              "growth": restored.dynamic_growth_steps}

    self.assert_as_tf_keras(scenario, {
        "inner": "CustomSGD", "my_attribute": 123, "learning_rate": 2.,
        "momentum": .5, "scale": 2., "growth": 3})

  def test_convert_to_legacy_optimizer(self):
    # tf_keras converts its new-family wrapper to its legacy
    # one, wrapping the legacy counterpart of the wrapped optimizer; mplso's
    # converts to mplso's legacy-family wrapper, its loss scale kept.
    convert = tf_keras.__internal__.optimizers.convert_to_legacy_optimizer

    class HalvingSchedule(
        tf_keras.optimizers.schedules.LearningRateSchedule):

      def __init__(self, initial_learning_rate):
        self.initial_learning_rate = initial_learning_rate

      def __call__(self, step):
        return self.initial_learning_rate / (tf.cast(step, tf.float32) + 1.)

      def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate}

    for name, make_lr in (("constant", lambda: 1.),
                          ("schedule", lambda: HalvingSchedule(1.))):
      for make, legacy_class in ((_theirs, TF_KERAS_CLASS[LEGACY]),
                                 (_ours, OUR_CLASS[LEGACY])):
        with self.subTest(learning_rate=name, make=make.__name__):
          converted = convert(make(SGD[NEW](make_lr()), initial_scale=8.,
                                   dynamic_growth_steps=3))
          self.assertIs(type(converted), legacy_class)
          reference = make(SGD[LEGACY](make_lr()), initial_scale=8.,
                           dynamic_growth_steps=3)
          self.assertEqual(reference.get_config(), converted.get_config())
          self.assertIsInstance(converted.inner_optimizer, SGD[LEGACY])
          self.assertEqual((True, 8., 3), (converted.dynamic,
                                           converted.initial_scale,
                                           converted.dynamic_growth_steps))


class StrategyTest(_Case):

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_central_storage_strategy_is_supported(self, family):
    # Differs on purpose: tf_keras refuses CentralStorageStrategy. mplso sums
    # the gradients across replicas before its one finite check, so every
    # replica applies or skips together there too (docs/distribute.md).
    strategy = tf.distribute.experimental.CentralStorageStrategy(
        compute_devices=[f"/cpu:{i}" for i in range(REPLICAS)],
        parameter_device="/cpu:0")
    with strategy.scope(), self.assertRaisesRegex(
        ValueError, "Loss scaling is not supported with the "
        "tf.distribute.Strategy: CentralStorageStrategy"):
      _theirs(SGD[family]())
    with strategy.scope():
      var = tf.Variable([5.])
      opt = _ours(SGD[family](1.), initial_scale=2, dynamic_growth_steps=1)

    @tf.function
    def step(factor):
      strategy.run(lambda: opt.minimize(
          lambda: var * factor / REPLICAS, var_list=[var]))

    step(tf.constant(2.))
    self.assertEqual([3.], var.numpy().tolist())
    self.assertEqual(4., float(_current_scale(opt)))
    step(tf.constant(NAN))
    self.assertEqual([3.], var.numpy().tolist())
    self.assertEqual(2., float(_current_scale(opt)))
    self.assertEqual(2, int(opt.iterations))


class ErrorTest(_Case):

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_error_when_nesting(self, family):
    # tf_keras's wording, whichever wrapper is nested. (tf_keras's class
    # recognises only its own wrappers here: it is the reference.)
    for make, inner in ((_theirs, _theirs(SGD[family]())),
                        (_ours, _ours(SGD[family]())),
                        (_ours, _theirs(SGD[family]()))):
      with self.subTest(inner=type(inner).__module__, make=make.__name__):
        with self.assertRaisesRegex(
            TypeError,
            "LossScaleOptimizer cannot wrap another LossScaleOptimizer"):
          make(inner)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_error_wrapping_the_same_optimizer_twice(self, family):
    for make in (_theirs, _ours):
      with self.subTest(make=make.__name__):
        inner = SGD[family]()
        make(inner)
        with self.assertRaisesRegex(
            ValueError,
            '"inner_optimizer" is already wrapped by a LossScaleOptimizer.'):
          make(inner)

  def test_error_when_wrapping_a_non_optimizer(self):
    # tf_keras's wording.
    for make in (_theirs, _ours):
      with self.subTest(make=make.__name__):
        with self.assertRaisesRegex(
            TypeError, '"inner_optimizer" must be an instance of '
            "`tf.keras.optimizers.Optimizer` or "
            "`tf.keras.optimizers.experimental.Optimizer`, but got: 1"):
          make(1)

  def test_legacy_family_refuses_a_new_optimizer(self):
    with self.assertRaisesRegex(TypeError, "only the classic optimizers"):
      TF_KERAS_CLASS[LEGACY](SGD[NEW]())
    with self.assertRaisesRegex(TypeError, "OptimizerV2"):
      OUR_CLASS[LEGACY](SGD[NEW](), "dynamic")


if __name__ == "__main__":
  absltest.main()
