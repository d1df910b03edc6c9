"""The skip decision under every configuration TF's own class runs in.

A loss-scale optimizer promises that a step whose gradients hold NaN or Inf
changes no variable, slot or `global_step`, and that a step whose gradients
are finite is applied. This holds whatever the Session or `tf.function`
configuration: every Grappler toggle ON, AGGRESSIVE and OFF, the meta
optimizer off, the single-threaded executor, XLA auto-clustering, the
automatic mixed precision passes.

TF1 cases: one graph per (configuration, optimizer) holds four twins fed the
same gradients: TF's own `MixedPrecisionLossScaleOptimizer`, mplso's, the
optimizer of `mplso.enable_mixed_precision_graph_rewrite` (against TF's class
with TF's default dynamic scale) and contrib's `LossScaleOptimizer`. Every
step feeds one gradient case (`STEPS`) and checks each twin: skipped or
applied as the promise says, and mplso's variables, slots, `global_step` and
scale equal TF's.

Keras cases: one `tf.function` per configuration (each key of
`tf.config.optimizer.set_experimental_options` on and off, and
`jit_compile=True`) steps mplso's wrapper around SGD with momentum for
Keras 3, tf_keras's optimizers and tf_keras's legacy `OptimizerV2`, each in
its family's own protocol. The same checks, against the family's own
`LossScaleOptimizer` stepped eagerly on the same gradients (once per
process: its trajectory does not depend on the configuration).
"""

from __future__ import annotations

import inspect

from absl.testing import absltest
from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.eager import context
import tf_keras

import mplso
import mplso.keras
from mplso_test.helpers import testing

NAN, INF = testing.NAN, testing.INF
# Finite in float32, above float16's largest value (65504) once unscaled by
# any scale these steps reach (at most 2**15).
BIG = 3e9

_RewriterConfig = rewriter_config_pb2.RewriterConfig
TOGGLES = sorted(
    field.name for field in _RewriterConfig.DESCRIPTOR.fields
    if field.enum_type is not None and field.enum_type.name == "Toggle")
_TOGGLE_VALUES = {"on": _RewriterConfig.ON,
                  "aggressive": _RewriterConfig.AGGRESSIVE,
                  "off": _RewriterConfig.OFF}


def _toggle(field, value):

  def configure(config):
    setattr(config.graph_options.rewrite_options, field, value)

  return configure


def _disable_meta_optimizer(config):
  config.graph_options.rewrite_options.disable_meta_optimizer = True


def _single_threaded_executor(config):
  config.experimental.executor_type = "SINGLE_THREADED_EXECUTOR"


def _jit(level):

  def configure(config):
    config.graph_options.optimizer_options.global_jit_level = level

  return configure


SESSION_CONFIGS = dict(
    [(f"{field}_{name}", _toggle(field, value))
     for field in TOGGLES for name, value in _TOGGLE_VALUES.items()] +
    [("disable_meta_optimizer", _disable_meta_optimizer),
     ("single_threaded_executor", _single_threaded_executor),
     ("xla_on_1", _jit(tf.compat.v1.OptimizerOptions.ON_1)),
     ("xla_on_2", _jit(tf.compat.v1.OptimizerOptions.ON_2))])

OPTIMIZERS = {
    "sgd": lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1),
    "adam": lambda: tf.compat.v1.train.AdamOptimizer(0.01),
}

# One training step each: (name, injection into the float32 dense gradient,
# into the sparse gradient's values, into the float16 gradient). None
# injects nothing. A step is finite when every injection is finite.
STEPS = (
    ("finite", None, None, None),
    ("nan", NAN, None, None),
    ("finite_again", None, None, None),
    ("plus_inf", INF, None, None),
    ("minus_inf_sparse", None, -INF, None),
    ("finite_above_float16_range", BIG, None, None),
    ("nan_sparse", None, NAN, None),
    ("nan_float16", None, None, NAN),
    ("inf_float16", None, None, INF),
    ("finite_last", None, None, None),
)

DENSE_SHAPE, EMBEDDING_ROWS, SPARSE_SHAPE = (3, 2), 5, (2, 2)


def _feed_value(base, injection, dtype=np.float32):
  value = np.array(base, dtype)
  if injection is not None:
    value.flat[1] = injection
  return value


def _metered(opt, every=2):
  """`opt` with the underflow meter on."""
  mplso.meter_underflow(opt, every=every)
  return opt


class _Twin:
  """A model and its optimizer, in the current graph."""

  def __init__(self, name, wrap, base):
    with tf.compat.v1.variable_scope(name):
      self.dense = tf.compat.v1.get_variable(
          "dense", initializer=np.full(DENSE_SHAPE, 1., np.float32))
      self.embedding = tf.compat.v1.get_variable(
          "embedding", initializer=np.full([EMBEDDING_ROWS, 2], 1., np.float32))
      self.half = tf.compat.v1.get_variable(
          "half", initializer=np.full([4], 1., np.float16))
      self.unused = tf.compat.v1.get_variable(
          "unused", initializer=np.full([2], 1., np.float32))
      self.global_step = tf.compat.v1.get_variable(
          "global_step", initializer=np.int64(0), trainable=False)
    self.base = base
    self.opt = wrap(base)

  def apply(self, gradients):
    dense, sparse, indices, half = gradients
    pairs = [(dense, self.dense),
             (tf.IndexedSlices(sparse, indices,
                               tf.constant([EMBEDDING_ROWS, 2])),
              self.embedding),
             (None, self.unused)]
    if half is not None:
      pairs.append((half, self.half))
    return self.opt.apply_gradients(pairs, global_step=self.global_step)

  def state(self):
    """Every variable the step may change, by role."""
    state = {"global_step": self.global_step}
    for role in ("dense", "embedding", "half", "unused"):
      var = getattr(self, role)
      state[role] = var
      for slot in self.base.get_slot_names():
        state[f"{role}/{slot}"] = self.base.get_slot(var, slot)
    return {k: v for k, v in state.items() if v is not None}


def _loss_scale(opt):
  if isinstance(opt, mplso.MixedPrecisionLossScaleOptimizer):
    return opt.loss_scale
  return opt._loss_scale  # pylint: disable=protected-access  # TF's class.


def _scale_state(loss_scale):
  if isinstance(loss_scale, mplso.LossScale):
    current, good_steps = loss_scale.variables[:2]
  else:  # TF's class has no public accessor for its variables.
    current = loss_scale._current_loss_scale  # pylint: disable=protected-access
    good_steps = loss_scale._num_good_steps  # pylint: disable=protected-access
  return {"scale": current, "good_steps": good_steps}


def _assert_same_state(test, expected, got, msg):
  test.assertEqual(set(expected), set(got), msg)
  for key, value in expected.items():
    np.testing.assert_array_equal(
        value, got[key], err_msg=f"{msg}: {key}", strict=False)


class Tf1MatrixTest(tf.test.TestCase, parameterized.TestCase):

  def _run_matrix(self, configure, make_base, strategy=None):
    """Steps the twins through STEPS; under `strategy`, on its replicas.

    Under a strategy, each step's injection lands on the last replica only
    (the others see the plain gradients), and every replica must end in the
    same state. There, no gradient is float16: TF's class cannot all-reduce
    float16 and float32 gradients together.
    """
    with_half = strategy is None
    strategy = strategy or tf.distribute.get_strategy()
    with tf.Graph().as_default() as graph:
      dense = tf.compat.v1.placeholder(tf.float32, DENSE_SHAPE)
      sparse = tf.compat.v1.placeholder(tf.float32, SPARSE_SHAPE)
      half = tf.compat.v1.placeholder(tf.float16, [4])
      tf_dynamic = tf.compat.v1.mixed_precision.DynamicLossScale
      tf_class = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer
      wrappers = {
          "tf": lambda opt: tf_class(opt, tf_dynamic(4., 2, 2.)),
          "mplso": lambda opt: mplso.MixedPrecisionLossScaleOptimizer(
              opt, mplso.DynamicLossScale(4., 2, 2.)),
          # The underflow meter's sample beside the update, every 2 steps:
          # the training must stay TF's, bit for bit.
          "mplso_metered": lambda opt: _metered(
              mplso.MixedPrecisionLossScaleOptimizer(
                  opt, mplso.DynamicLossScale(4., 2, 2.))),
          "tf_default": lambda opt: tf_class(opt, "dynamic"),
          "rewrite": mplso.enable_mixed_precision_graph_rewrite,
          "contrib": lambda opt: mplso.contrib.LossScaleOptimizer(
              opt, mplso.contrib.ExponentialUpdateLossScaleManager(4., 2)),
      }
      try:
        with strategy.scope():
          twins = {name: _Twin(name, wrap, make_base())
                   for name, wrap in wrappers.items()}
      finally:
        mplso.disable_mixed_precision_graph_rewrite()

      def replica_step():
        context = tf.distribute.get_replica_context()
        last = tf.equal(context.replica_id_in_sync_group,
                        context.num_replicas_in_sync - 1)
        gradients = (
            tf.where(last, dense, np.full(DENSE_SHAPE, 0.5, np.float32)),
            tf.where(last, sparse, np.full(SPARSE_SHAPE, 0.25, np.float32)),
            tf.constant([1, 3]),
            tf.where(last, half, np.full([4], 0.5, np.float16))
            if with_half else None)
        return [twin.apply(gradients) for twin in twins.values()]

      train_op = tf.group(strategy.experimental_local_results(
          strategy.run(replica_step)))
      # Each optimizer's own scale, to compare the dynamic ones with TF's.
      scales = {name: _scale_state(_loss_scale(twin.opt))
                for name, twin in twins.items() if name != "contrib"}
      states = {name: twin.state() for name, twin in twins.items()}
      init = tf.compat.v1.global_variables_initializer()
    # What a Session without a config gets (the logical CPUs that
    # conftest.py makes, among others), then the configuration under test.
    config = context.context().config
    configure(config)

    def read(session, fetches):
      """Every replica's values; they must agree: replica 0's."""
      flat = tf.nest.flatten(fetches)
      replicas = session.run(
          [list(strategy.experimental_local_results(v)) for v in flat])
      return tf.nest.pack_sequence_as(
          fetches, [self._same_on_every_replica(v) for v in replicas])

    with tf.compat.v1.Session(graph=graph, config=config) as session:
      session.run(init)
      before = read(session, states)
      for step, (name, dense_in, sparse_in, half_in) in enumerate(STEPS):
        if half_in is not None and not with_half:
          continue
        session.run(train_op, {
            dense: _feed_value(np.full(DENSE_SHAPE, 0.5), dense_in),
            sparse: _feed_value(np.full(SPARSE_SHAPE, 0.25), sparse_in),
            half: _feed_value(np.full([4], 0.5), half_in, np.float16)})
        after = read(session, states)
        finite = all(v is None or np.isfinite(v)
                     for v in (dense_in, sparse_in, half_in))
        for twin in twins:
          msg = f"step {step} ({name}), {twin}"
          if finite:
            self.assertEqual(before[twin]["global_step"] + 1,
                             after[twin]["global_step"], msg)
            self.assertFalse(np.array_equal(before[twin]["dense"],
                                            after[twin]["dense"]), msg)
          else:
            _assert_same_state(self, before[twin], after[twin], msg)
        # TF's classes against the same optimizers of mplso, bit for bit.
        got = read(session, scales)
        for ours, theirs in (("mplso", "tf"), ("mplso_metered", "tf"),
                             ("rewrite", "tf_default")):
          _assert_same_state(self, after[theirs], after[ours],
                             f"step {step} ({name}), {ours} against TF")
          _assert_same_state(self, got[theirs], got[ours],
                             f"step {step} ({name}), {ours}'s scale")
        before = after
      # The meter sampled: its rows are there, each at an even step.
      samples = mplso.underflow_log(twins["mplso_metered"].opt, session)
      self.assertNotEmpty(samples)
      self.assertEqual([0] * len(samples), [s["step"] % 2 for s in samples])

  def _same_on_every_replica(self, values):
    for value in values[1:]:
      np.testing.assert_array_equal(values[0], value)
    return values[0]

  @parameterized.named_parameters(
      (f"{config}_{opt}", config, opt)
      for config in SESSION_CONFIGS for opt in OPTIMIZERS)
  def test_skips_exactly_the_non_finite_steps(self, config, opt):
    self._run_matrix(SESSION_CONFIGS[config], OPTIMIZERS[opt])

  @parameterized.named_parameters(("sgd", "sgd"), ("adam", "adam"))
  def test_replicas_of_a_mirrored_strategy_skip_together(self, opt):
    strategy = testing.STRATEGIES[testing.MIRRORED_2]()
    self._run_matrix(lambda config: None, OPTIMIZERS[opt], strategy)


# `tf.config.optimizer.set_experimental_options` keys: Grappler toggles
# and the two booleans (which turn pruning or the whole meta optimizer off).
EXPERIMENTAL_OPTIONS = (
    "arithmetic_optimization", "auto_mixed_precision",
    "auto_mixed_precision_mkl", "auto_mixed_precision_onednn_bfloat16",
    "constant_folding", "debug_stripper", "dependency_optimization",
    "disable_meta_optimizer", "disable_model_pruning", "function_optimization",
    "implementation_selector", "layout_optimizer", "loop_optimization",
    "pin_to_host_optimization", "remapping", "scoped_allocator_optimization",
    "shape_optimization", "use_plugin_optimizers")
KERAS_CONFIGS = [(f"{key}_{'on' if on else 'off'}", {key: on}, False)
                 for key in EXPERIMENTAL_OPTIONS for on in (True, False)]
KERAS_CONFIGS.append(("jit_compile", {}, True))

# name: (the family's SGD, its own loss-scale class, its variable class).
KERAS_FAMILIES = {
    "keras3": (keras.optimizers.SGD, keras.optimizers.LossScaleOptimizer,
               keras.Variable),
    "tf_keras": (tf_keras.optimizers.SGD,
                 tf_keras.mixed_precision.LossScaleOptimizer, tf.Variable),
    "optimizer_v2": (tf_keras.optimizers.legacy.SGD,
                     tf_keras.mixed_precision.LossScaleOptimizer, tf.Variable),
}


class _KerasTwin:
  """A family's model variables and a loss-scale optimizer around SGD."""

  def __init__(self, family, own, momentum=0.9):
    make_sgd, own_class, make_variable = KERAS_FAMILIES[family]
    self.family = family
    self.inner = make_sgd(0.1, momentum=momentum)
    # High enough that no skip takes it below 1, where Keras 3's own class
    # and mplso differ on purpose (docs/differences.md).
    settings = dict(initial_scale=64., dynamic_growth_steps=2)
    if own:
      self.opt = own_class(self.inner, **settings)
    else:
      self.opt = mplso.keras.LossScaleOptimizer(self.inner, **settings)
    self.dense = make_variable(np.full(DENSE_SHAPE, 1., np.float32))
    self.embedding = make_variable(np.full([EMBEDDING_ROWS, 2], 1., np.float32))
    self.unused = make_variable(np.full([2], 1., np.float32))
    self.trainable = [self.dense, self.embedding, self.unused]
    if family != "optimizer_v2":
      self.opt.build(self.trainable)

  def step(self, dense, sparse, indices):
    """One step in the family's own protocol; gradients: dense and sparse."""
    with tf.GradientTape() as tape:
      loss = (tf.reduce_sum(tf.convert_to_tensor(self.dense) * dense) +
              tf.reduce_sum(tf.gather(self.embedding, indices) * sparse))
      if self.family == "keras3":  # Keras 3's trainer applies scaled ones.
        scaled_loss = self.opt.scale_loss(loss)
      else:
        scaled_loss = self.opt.get_scaled_loss(loss)
    grads = tape.gradient(scaled_loss, self.trainable)  # `unused`: None.
    if self.family != "keras3":
      grads = self.opt.get_unscaled_gradients(grads)
    self.opt.apply_gradients(zip(grads, self.trainable))

  def state(self):
    """The model's variables, the inner optimizer's, the scale: numpy."""
    inner = self.inner.variables
    if inspect.ismethod(inner):  # `OptimizerV2.variables()`.
      inner = inner()
    # Ours (either dialect's `loss_scale` converts to the current scale),
    # Keras 3's, tf_keras's.
    if (isinstance(self.opt, keras.optimizers.LossScaleOptimizer) and
        not isinstance(self.opt, mplso.keras.LossScaleOptimizer)):
      scale = self.opt.dynamic_scale
    else:
      scale = self.opt.loss_scale
    iterations = self.inner.iterations
    values = {"dense": self.dense, "embedding": self.embedding,
              "unused": self.unused, "scale": scale, "iterations": iterations}
    values.update({f"inner_{i}": v for i, v in enumerate(inner)
                   if v is not iterations})
    return {k: np.array(tf.convert_to_tensor(v)) for k, v in values.items()}


_CACHE = {}


class KerasMatrixTest(tf.test.TestCase, parameterized.TestCase):

  def _set_options(self, options):
    before = dict(context.context()._optimizer_experimental_options)  # pylint: disable=protected-access
    tf.config.optimizer.set_experimental_options(options)

    def restore():
      # set_experimental_options only adds keys: put the old dict back.
      current = context.context()._optimizer_experimental_options  # pylint: disable=protected-access
      current.clear()
      current.update(before)
      tf.config.optimizer.set_experimental_options(before)

    self.addCleanup(restore)

  def _keras_steps(self):
    """(name, dense, sparse) of each step; no float16 variable here."""
    return [(name, _feed_value(np.full(DENSE_SHAPE, 0.5), dense_in),
             _feed_value(np.full(SPARSE_SHAPE, 0.25), sparse_in))
            for name, dense_in, sparse_in, half_in in STEPS if half_in is None]

  def _own_states(self, family, momentum):
    """The family's own class's state after each step, stepped eagerly."""
    key = ("own_states", family, momentum)
    if key not in _CACHE:
      twin = _KerasTwin(family, own=True, momentum=momentum)
      indices = tf.constant([1, 3])
      states = []
      for _, dense, sparse in self._keras_steps():
        twin.step(tf.constant(dense), tf.constant(sparse), indices)
        states.append(twin.state())
      _CACHE[key] = states
    return _CACHE[key]

  @parameterized.named_parameters(KERAS_CONFIGS)
  def test_skips_exactly_the_non_finite_steps(self, options, jit_compile):
    # XLA has no kernel for tf_keras's sparse momentum update (with the
    # family's own class too): plain SGD there.
    momentum = 0. if jit_compile else 0.9
    own_states = {family: self._own_states(family, momentum)
                  for family in KERAS_FAMILIES}
    self._set_options(options)
    twins = {family: _KerasTwin(family, own=False, momentum=momentum)
             for family in KERAS_FAMILIES}
    indices = tf.constant([1, 3])

    @tf.function(jit_compile=jit_compile)
    def train_step(dense, sparse):
      for twin in twins.values():
        twin.step(dense, sparse, indices)

    before = {family: twin.state() for family, twin in twins.items()}
    for step, (name, dense, sparse) in enumerate(self._keras_steps()):
      train_step(tf.constant(dense), tf.constant(sparse))
      after = {family: twin.state() for family, twin in twins.items()}
      finite = np.isfinite(dense).all() and np.isfinite(sparse).all()
      for family, state in after.items():
        msg = f"step {step} ({name}), {family}"
        model = ("dense", "embedding", "unused")
        if finite:
          self.assertFalse(np.array_equal(before[family]["dense"],
                                          state["dense"]), msg)
        else:
          _assert_same_state(self, {k: before[family][k] for k in model},
                             {k: state[k] for k in model}, msg)
        theirs, ours = dict(own_states[family][step]), dict(state)
        if family == "keras3":
          # On purpose (docs/differences.md): a skipped step
          # advances `iterations` in every family, as TF 2.3 documented;
          # Keras 3's own class leaves it.
          del theirs["iterations"], ours["iterations"]
        _assert_same_state(self, theirs, ours,
                           f"{msg} against the family's own class")
      before = after


  @parameterized.named_parameters((family, family) for family in KERAS_FAMILIES)
  def test_replicas_of_a_mirrored_strategy_skip_together(self, family):
    """Under 2 replicas, the injection on the last: all skip or apply.

    The reference is the family's own class without a strategy, stepped on
    the replicas' summed gradients. Reduced through one device: eager
    collective all-reduces share instance keys within a process.
    """
    strategy = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"],
        cross_device_ops=tf.distribute.ReductionToOneDevice())
    steps = self._keras_steps()
    plain = (np.full(DENSE_SHAPE, 0.5, np.float32),
             np.full(SPARSE_SHAPE, 0.25, np.float32))
    reference = _KerasTwin(family, own=True)
    with strategy.scope():
      twin = _KerasTwin(family, own=False)
    indices = tf.constant([1, 3])

    @tf.function
    def train_step(dense, sparse):

      def replica_step():
        context = tf.distribute.get_replica_context()
        last = tf.equal(context.replica_id_in_sync_group,
                        context.num_replicas_in_sync - 1)
        twin.step(tf.where(last, dense, plain[0]),
                  tf.where(last, sparse, plain[1]), indices)

      strategy.run(replica_step)

    before = twin.state()
    for step, (name, dense, sparse) in enumerate(steps):
      train_step(tf.constant(dense), tf.constant(sparse))
      reference.step(tf.constant(dense + plain[0]),
                     tf.constant(sparse + plain[1]), indices)
      after = twin.state()
      msg = f"step {step} ({name}), {family}"
      if np.isfinite(dense).all() and np.isfinite(sparse).all():
        self.assertFalse(np.array_equal(before["dense"], after["dense"]), msg)
      else:
        for key in ("dense", "embedding", "unused"):
          np.testing.assert_array_equal(before[key], after[key], msg)
      theirs, ours = reference.state(), dict(after)
      if family == "keras3":  # As in the test above.
        del theirs["iterations"], ours["iterations"]
      self.assertEqual(set(theirs), set(ours), msg)
      for key, value in theirs.items():
        # A sum of the replicas' scaled gradients, against a scaled sum.
        np.testing.assert_allclose(ours[key], value, rtol=1e-6,
                                   err_msg=f"{msg}: {key}")
      before = after


class PythonNumbersTest(tf.test.TestCase, parameterized.TestCase):
  """TF's eager `DynamicLossScale.update` took Python numbers as gradients."""

  @parameterized.named_parameters(("no_strategy", False), ("mirrored", True))
  def test_update_as_tfs(self, mirrored):
    strategy = tf.distribute.get_strategy()
    if mirrored:  # Reduced through one device, as above.
      strategy = tf.distribute.MirroredStrategy(
          ["/cpu:0", "/cpu:1"],
          cross_device_ops=tf.distribute.ReductionToOneDevice())
    with strategy.scope():
      ours = mplso.DynamicLossScale(4., 2, 2.)
      theirs = tf.compat.v1.mixed_precision.DynamicLossScale(4., 2, 2.)
      for grads in ([1.], [NAN], [1., 2.], [INF, None], [-INF], [BIG], [3.]):
        got = [loss_scale.update(grads)[1] for loss_scale in (ours, theirs)]
        self.assertEqual(bool(got[1]), bool(got[0]), grads)
        self.assertEqual(float(theirs()), float(ours()), grads)


if __name__ == "__main__":
  absltest.main()
