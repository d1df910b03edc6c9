"""Builds each variant of a training step, ready to time and to count.

`build(family, model, variant, jit_compile, optimizer)` returns the step of
`variant` (`catalog.STEP_VARIANTS` or `catalog.BARRIER`) for one optimizer family,
with the op types of its traced graph. To compare a change to a step, build
it here as a variant of its own and time it interleaved with the others
(`timing.interleaved`, as `benchmarks.matrix` does).
"""

from __future__ import annotations

from collections.abc import Callable
import contextlib
import dataclasses
import functools

import tensorflow as tf

from benchmarks import catalog
from benchmarks import graph_ops
from benchmarks.catalog import INITIAL_SCALE
from benchmarks.catalog import Model


def _optimizer(classes, kind: str, momentum_class: str = "SGD"):
  """Returns the optimizer `kind` (`catalog.OPTIMIZERS`) of a family's module.

  `classes` holds the family's optimizer classes (TF1's names end in
  `Optimizer`); `momentum_class` names its SGD-with-momentum class.
  """
  rate = catalog.LEARNING_RATE
  if kind == "sgd":
    return getattr(classes, momentum_class)(rate, momentum=catalog.MOMENTUM)
  if kind in ("adam", "adagrad"):
    name = kind.capitalize()
    rate = catalog.ADAM_LEARNING_RATE if kind == "adam" else rate
    return (getattr(classes, name, None) or
            getattr(classes, f"{name}Optimizer"))(rate)
  raise ValueError(f"Unknown optimizer {kind!r}; known: "
                   f"{sorted(catalog.OPTIMIZERS)}.")


@dataclasses.dataclass
class Built:
  """One variant of a scenario, ready to run."""
  step: Callable[[], object]  # Runs one training step.
  ops: dict  # Op types of the step's graph, function bodies included.
  loss_scale: Callable[[], float] | None = None  # None for the bare optimizer.
  close: Callable[[], None] = lambda: None  # Releases its session, if any.
  # TF1 only: runs one fully traced step, returns its `RunMetadata` (with the
  # CPU allocator's per-node memory records).
  traced_step: Callable[[], tf.compat.v1.RunMetadata] | None = None


def _session_config(jit_compile: bool = False) -> tf.compat.v1.ConfigProto:
  """A TF1 session config with the Grappler options `runtime_settings` set.

  With `jit_compile`, XLA auto-clustering (on CPU it also needs
  `catalog.let_tf1_sessions_cluster_on_cpu`).
  """
  config = tf.compat.v1.ConfigProto()
  rewrite = config.graph_options.rewrite_options
  options = tf.config.optimizer.get_experimental_options()
  if not options.get("remapping", True):
    rewrite.remapping = rewrite.OFF
  rewrite.disable_meta_optimizer = options.get("disable_meta_optimizer", False)
  if jit_compile:
    config.graph_options.optimizer_options.global_jit_level = (
        tf.compat.v1.OptimizerOptions.ON_1)
  return config


def mplso_loss_scale(variant: str, initial_loss_scale: float = INITIAL_SCALE):
  """The `mplso.DynamicLossScale` of an mplso variant (`"calibrate"`'s own)."""
  import mplso  # pylint: disable=g-import-not-at-top
  if variant == "mplso_calibrate":
    initial_loss_scale = "calibrate"
  return mplso.DynamicLossScale(initial_loss_scale=initial_loss_scale)


def turn_features_on(opt, variant: str) -> None:
  """Turns on what `variant` asks of mplso's wrapper `opt`, before its step.

  Only the meter is turned on here; the calibrated scale is an argument of
  the loss scale (`mplso_loss_scale`).
  """
  import mplso  # pylint: disable=g-import-not-at-top
  if variant == "mplso_meter":
    mplso.meter_underflow(opt, every=catalog.METER_EVERY)


def tf1_wrapper(opt, variant: str, initial_loss_scale: float = INITIAL_SCALE):
  """Returns `variant`'s TF1 wrapper of `opt` and its loss-scale tensor.

  A variant that is not a wrapper returns `opt` itself and None.
  """
  import mplso  # pylint: disable=g-import-not-at-top
  if variant == "tf":
    opt = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
        opt, tf.compat.v1.mixed_precision.DynamicLossScale(
            initial_loss_scale=initial_loss_scale))
    return opt, opt._loss_scale()  # pylint: disable=protected-access
  if catalog.wraps(variant):
    opt = mplso.MixedPrecisionLossScaleOptimizer(
        opt, mplso_loss_scale(variant, initial_loss_scale))
    turn_features_on(opt, variant)
    return opt, opt.loss_scale()
  return opt, None


def tf1_layers(model: Model, x, dtype=tf.float16):
  """`model`'s layers on `x` in the current TF1 graph, computing in `dtype`.

  Returns:
    The output, the float32 variables, and the feed that initialises them:
    initial values are fed once, not stored in the graph as constants (which
    would inflate the process's memory by copies of the weights).
  """
  initial = {tf.compat.v1.placeholder(tf.float32, w.shape): w
             for w in model.initial_weights()}
  weights = [tf.Variable(p) for p in initial]
  pairs = list(zip(weights[::2], weights[1::2]))
  return _dense(tf.cast(x, dtype), pairs, model, dtype), weights, initial


def _dense(h, pairs, model: Model, dtype):
  """`h` through the dense layers of (kernel, bias) `pairs`, in `dtype`."""
  for i, (kernel, bias) in enumerate(pairs):
    h = tf.nn.bias_add(tf.matmul(h, tf.cast(kernel, dtype)),
                       tf.cast(bias, dtype))
    if i + 1 < len(pairs):
      h = getattr(tf.nn, model.activation)(h)
  return h


def _build_tf1(model: Model, variant: str, jit_compile: bool,
               optimizer: str = "sgd") -> Built:
  """A TF1 graph: `minimize(loss, global_step)` run by a `Session`."""
  x_data, y_data = model.data()
  graph = tf.Graph()
  with graph.as_default():
    h, _, initial = tf1_layers(model, tf.constant(x_data))
    loss = tf.reduce_mean(tf.square(tf.cast(h, tf.float32) - y_data))
    opt, scale = tf1_wrapper(
        _optimizer(tf.compat.v1.train, optimizer, "MomentumOptimizer"),
        variant, initial_loss_scale=INITIAL_SCALE)
    global_step = tf.compat.v1.train.get_or_create_global_step()
    grads_and_vars = opt.compute_gradients(loss)  # As `minimize` does.
    with tf.control_dependencies([g for g, _ in grads_and_vars]
                                 if variant == catalog.BARRIER else []):
      train_op = opt.apply_gradients(grads_and_vars, global_step=global_step)
    init = tf.compat.v1.global_variables_initializer()
  graph.finalize()
  session = tf.compat.v1.Session(graph=graph,
                                 config=_session_config(jit_compile))
  session.run(init, initial)

  def traced_step():
    metadata = tf.compat.v1.RunMetadata()
    session.run(train_op, options=tf.compat.v1.RunOptions(
        trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
                run_metadata=metadata)
    return metadata

  return Built(
      step=session.make_callable(train_op),
      ops=graph_ops.count_ops(graph.as_graph_def(), [train_op.name]),
      loss_scale=(None if scale is None else
                  lambda: float(session.run(scale))),
      close=session.close,
      traced_step=traced_step)


def _dense_stack_layer(keras_module, model: Model):
  """One layer holding every kernel and bias of `model`, as a loop of matmuls.

  For the many-variable models: the variables and ops of a stack of `Dense`
  layers, without tracing one Keras layer call per dense layer.
  """

  class DenseStack(keras_module.layers.Layer):

    def build(self, input_shape):
      del input_shape
      fan_ins = (model.inputs,) + model.widths[:-1]
      self._pairs = [
          (self.add_weight(name=f"kernel_{i}", shape=(fan_in, width),
                           initializer="zeros"),
           self.add_weight(name=f"bias_{i}", shape=(width,),
                           initializer="zeros"))
          for i, (fan_in, width) in enumerate(zip(fan_ins, model.widths))]

    def call(self, inputs):
      return _dense(inputs, self._pairs, model, self.compute_dtype)

  return DenseStack(dtype="mixed_float16")


def _keras_model(keras_module, model: Model):
  layers = [keras_module.Input((model.inputs,))]
  if len(model.widths) > 3:
    layers.append(_dense_stack_layer(keras_module, model))
  else:
    activations = [model.activation] * (len(model.widths) - 1) + [None]
    layers += [keras_module.layers.Dense(w, activation=a, dtype="mixed_float16")
               for w, a in zip(model.widths, activations)]
  # Outputs float32, as the mixed-precision guides recommend.
  layers.append(keras_module.layers.Activation("linear", dtype="float32"))
  net = keras_module.Sequential(layers)
  net.set_weights(model.initial_weights())
  return net


def _custom_loop(net, opt, variant: str, model: Model,
                 jit_compile: bool) -> tuple[Callable[[], object], dict]:
  """TF 2.3's protocol: get_scaled_loss, tape, get_unscaled_gradients."""
  wrapped = catalog.wraps(variant)
  x_data, y_data = model.data()
  x, y = tf.constant(x_data), tf.constant(y_data)
  variables = net.trainable_variables

  # autograph=False: the step has no Python control flow on tensors, so the
  # graph is the same, and tracing is faster.
  @tf.function(jit_compile=jit_compile, autograph=False)
  def train_step(x, y):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(net(x, training=True) - y))
      scaled_loss = opt.get_scaled_loss(loss) if wrapped else loss
    grads = tape.gradient(scaled_loss, variables)
    if wrapped:
      grads = opt.get_unscaled_gradients(grads)
    # The barrier (catalog.BARRIER) adds no op.
    with tf.control_dependencies(grads if variant == catalog.BARRIER else []):
      opt.apply_gradients(zip(grads, variables))
    return loss

  # The optimizer's state exists before the step is traced, so it is traced
  # once (a trace that creates variables is followed by a second one).
  if hasattr(opt, "_create_all_weights"):  # OptimizerV2 and its wrappers.
    opt._create_all_weights(variables)  # pylint: disable=protected-access
  else:
    opt.build(variables)
  ops = graph_ops.function_ops(train_step, x, y)
  return (lambda: train_step(x, y)), ops


def _keras_wrapper(opt, variant: str, tf_class, tf_scale: str):
  """Returns `variant`'s Keras wrapper of `opt` and a reader of its scale.

  `tf_scale` is the attribute of TF's wrapper `tf_class` that holds the
  scale; a variant that is not a wrapper returns `opt` itself and None.
  """
  import mplso.keras  # pylint: disable=g-import-not-at-top
  if variant == "tf":
    opt = tf_class(opt, initial_scale=INITIAL_SCALE)
    return opt, lambda: float(getattr(opt, tf_scale))
  if catalog.wraps(variant):
    opt = mplso.keras.LossScaleOptimizer(opt, mplso_loss_scale(variant))
    turn_features_on(opt, variant)
    return opt, lambda: float(opt.loss_scale())
  return opt, None


def _build_tf_keras(legacy: bool, model: Model, variant: str,
                    jit_compile: bool, optimizer: str = "sgd") -> Built:
  """`_custom_loop` with tf_keras's optimizers (`legacy`: OptimizerV2)."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  optimizers = tf_keras.optimizers.legacy if legacy else tf_keras.optimizers
  net = _keras_model(tf_keras, model)
  # tf_keras's wrappers hold the scale as a tensor, mplso's as a LossScale.
  opt, scale = _keras_wrapper(
      _optimizer(optimizers, optimizer), variant,
      tf_keras.mixed_precision.LossScaleOptimizer, "loss_scale")
  step, ops = _custom_loop(net, opt, variant, model, jit_compile)
  return Built(step=step, ops=ops, loss_scale=scale)


def _wait_for_every_gradient(opt) -> None:
  """Makes Keras 3 `opt.apply` wait for every gradient (the barrier)."""
  apply = opt.apply

  def apply_after_every_gradient(grads, trainable_variables=None):
    with tf.control_dependencies([g for g in grads if g is not None]):
      return apply(grads, trainable_variables)

  opt.apply = apply_after_every_gradient


def compile_keras3(net, optimizer: str, variant: str, jit_compile="auto"):
  """Compiles the Keras 3 model `net` with `variant`'s `optimizer`.

  Returns:
    The optimizer `net` was compiled with, and a reader of its loss scale
    (None for the bare optimizer).
  """
  import keras  # pylint: disable=g-import-not-at-top
  opt = _optimizer(keras.optimizers, optimizer)
  if variant == catalog.BARRIER:
    _wait_for_every_gradient(opt)
  opt, scale = _keras_wrapper(
      opt, variant, keras.optimizers.LossScaleOptimizer, "dynamic_scale")
  # Under the mixed_float16 policy `compile` wraps a bare optimizer in Keras's
  # LossScaleOptimizer unless told not to; the two wrappers are kept as is.
  net.compile(optimizer=opt, loss="mse", jit_compile=jit_compile,
              auto_scale_loss=catalog.wraps(variant))
  if net.optimizer is not opt:
    raise AssertionError(f"compile replaced {opt!r} by {net.optimizer!r}.")
  return opt, scale


def _build_keras3(model: Model, variant: str, jit_compile: bool,
                  optimizer: str = "sgd") -> Built:
  """`Model.train_step`, the step `fit` runs per batch, in a `tf.function`."""
  import keras  # pylint: disable=g-import-not-at-top
  net = _keras_model(keras, model)
  opt, scale = compile_keras3(net, optimizer, variant, jit_compile)
  opt.build(net.trainable_variables)  # As fit does before its first step.
  x_data, y_data = model.data()
  data = (tf.constant(x_data), tf.constant(y_data))
  train_step = tf.function(net.train_step, jit_compile=jit_compile,
                           autograph=False)
  ops = graph_ops.function_ops(train_step, data)
  return Built(step=lambda: train_step(data), ops=ops, loss_scale=scale)


def _build_keras3_on_batch(model: Model, variant: str, jit_compile: bool,
                           optimizer: str = "sgd") -> Built:
  """`Model.train_on_batch(x, y)` on NumPy arrays: Keras's Python work too.

  Its graph is `Model.train_step`'s (as in `_build_keras3`), counted on a
  trace of its own; the step timed is the whole call, which also converts
  the arrays, runs Keras's train function and reads the metrics back.
  """
  import keras  # pylint: disable=g-import-not-at-top
  net = _keras_model(keras, model)
  opt, scale = compile_keras3(net, optimizer, variant, jit_compile)
  opt.build(net.trainable_variables)
  x, y = model.data()
  ops = graph_ops.function_ops(
      tf.function(net.train_step, jit_compile=jit_compile, autograph=False),
      (tf.constant(x), tf.constant(y)))
  return Built(step=lambda: net.train_on_batch(x, y), ops=ops,
               loss_scale=scale)


_BUILDERS = {
    catalog.TF1.name: _build_tf1,
    catalog.TF_KERAS.name: functools.partial(_build_tf_keras, False),
    catalog.TF_KERAS_LEGACY.name: functools.partial(_build_tf_keras, True),
    catalog.KERAS3.name: _build_keras3,
    catalog.KERAS3_ON_BATCH.name: _build_keras3_on_batch,
}


def build(family: catalog.Family, model: Model, variant: str,
          jit_compile: bool = False, optimizer: str = "sgd") -> Built:
  """Returns `variant`'s training step of `model` in `family`."""
  return _BUILDERS[family.name](model, variant, jit_compile, optimizer)


@contextlib.contextmanager
def runtime_settings(grappler: bool = True):
  """Sets TF's graph optimizer for the benchmarks, then restores it.

  The remapper's float16 MatMul+BiasAdd fusion is slow on CPU, so it is
  always off, as mplso's README tells CPU users. `grappler=False` turns
  Grappler off altogether, which saves seconds per large graph when only op
  counts matter (`--quick`); the traced graphs, and so the op counts, are
  the same either way.
  """
  before = tf.config.optimizer.get_experimental_options()
  tf.config.optimizer.set_experimental_options(
      {"remapping": False, "disable_meta_optimizer": not grappler})
  try:
    yield
  finally:
    tf.config.optimizer.set_experimental_options(
        {"remapping": before.get("remapping", True),
         "disable_meta_optimizer": before.get("disable_meta_optimizer",
                                              False)})
