r"""TF's `auto_mixed_precision` rewrite: mplso's TF1 wrapper against TF's.

Grappler's `auto_mixed_precision` pass turns a float32 graph's MatMuls to
float16 on a GPU only: on a machine without one it does nothing, so the
`gpu` tests here skip there, with the reason. The GPU check runs them, then
the configuration matrix on the GPU, then the step times:

    timeout -s INT -k 20 300 python -m pytest -q \
        mplso_test/integration/gpu_test.py \
        mplso_test/integration/config_matrix_test.py; a=$?; \
        python -m benchmarks.gpu; exit $((a | $?))

It takes 9 minutes at most (pytest is stopped after 5, `benchmarks.gpu`
stops itself by 3.5) and exits non-zero when a test or a scenario failed.

Each check trains one TF1 float32 MLP twice under the rewrite, with Adam in
TF's `tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer` and in
mplso's, from the same initial weights, data and dynamic loss scale. A NaN,
an Inf and 1e6 (finite in float32, past float16's largest value) are added
to the first gradient after `compute_gradients` at three steps. Both must
skip the NaN and Inf steps, skip and apply the same steps, hold the same loss
scale after every step and end with the same variables; the graphs the
executor ran must hold float16 Casts or MatMuls that the graph as built did
not (the pass fired). The same check runs everywhere at tiny sizes under the
pass's CPU emulation (`auto_mixed_precision_cpu`), pinned to the CPU.
"""

from __future__ import annotations

import dataclasses
import sys

from absl.testing import absltest
import numpy as np
import pytest
import tensorflow as tf

import mplso

HAS_GPU = bool(tf.config.list_physical_devices("GPU"))
NEEDS_GPU = pytest.mark.skipif(
    not HAS_GPU,
    reason="no GPU: TF's auto_mixed_precision pass rewrites only nodes "
           "placed on a GPU, so there is nothing to check here; the GPU "
           "check runs this test (see this file's docstring)")

LOSS_SCALE = {"initial_loss_scale": 2.0**15, "increment_period": 5,
              "multiplier": 2.0}
# What is added to the first gradient, at which fraction of the run.
INJECTED = {"nan": (0.2, float("nan")), "inf": (0.35, float("inf")),
            "1e6": (0.5, 1e6)}
WRAPPERS = ("tf", "mplso")
_HALF = tf.float16.as_datatype_enum


@dataclasses.dataclass(frozen=True)
class Mlp:
  """Dense float32 layers (relu between) on a mean squared error."""
  inputs: int
  widths: tuple[int, ...]
  batch: int

  def initial_weights(self) -> list[np.ndarray]:
    """`[kernel0, bias0, kernel1, ...]`, Glorot uniform from a fixed seed."""
    rng = np.random.default_rng(0)
    weights, fan_in = [], self.inputs
    for width in self.widths:
      limit = np.sqrt(6.0 / (fan_in + width))
      weights += [rng.uniform(-limit, limit, (fan_in, width)),
                  np.zeros(width)]
      fan_in = width
    return [w.astype(np.float32) for w in weights]

  def data(self) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return (rng.standard_normal((self.batch, self.inputs)).astype(np.float32),
            rng.standard_normal((self.batch, self.widths[-1])).astype(
                np.float32))


def _wrapper(wrapper: str, opt):
  """`wrapper`'s TF1 loss-scale optimizer around `opt`, and its scale."""
  if wrapper == "tf":
    opt = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
        opt, tf.compat.v1.mixed_precision.DynamicLossScale(**LOSS_SCALE))
    return opt, opt._loss_scale()  # pylint: disable=protected-access
  opt = mplso.MixedPrecisionLossScaleOptimizer(
      opt, mplso.DynamicLossScale(**LOSS_SCALE))
  return opt, opt.loss_scale()


def _float16_ops(nodes) -> tuple[int, int]:
  """Casts to float16 and float16 MatMuls (MatMul, _FusedMatMul, ...)."""
  nodes = list(nodes)
  return (sum(n.op == "Cast" and n.attr["DstT"].type == _HALF for n in nodes),
          sum(n.op.endswith("MatMul") and n.attr["T"].type == _HALF
              for n in nodes))


def train(wrapper: str, model: Mlp, steps: int, rewrite: str,
          injected: dict[int, float], cpu_only: bool = False) -> dict:
  """Trains `model` with `wrapper` in a Session with `rewrite` on.

  Args:
    wrapper: "tf" or "mplso".
    model: the MLP, float32 variables and compute.
    steps: how many steps.
    rewrite: the `RewriterConfig` field turned on.
    injected: step: the value added to the first gradient at that step.
    cpu_only: every op on the CPU, and the Session makes no GPU device;
      else TensorFlow places the ops (on a GPU where there is one).

  Returns:
    Per step whether it was applied and the loss scale after it; the float16
    ops of the graph as built and of the graphs run (after Grappler); the
    initial and final variables.
  """
  x_data, y_data = model.data()
  initial_weights = model.initial_weights()
  graph = tf.Graph()
  with graph.as_default(), tf.device("/device:CPU:0" if cpu_only else None):
    x = tf.compat.v1.placeholder(tf.float32, x_data.shape)
    y = tf.compat.v1.placeholder(tf.float32, y_data.shape)
    added = tf.compat.v1.placeholder_with_default(0.0, [])
    feeds = {tf.compat.v1.placeholder(tf.float32, w.shape): w
             for w in initial_weights}
    weights = [tf.Variable(p) for p in feeds]
    h = x
    for i, (kernel, bias) in enumerate(zip(weights[::2], weights[1::2])):
      h = tf.nn.bias_add(tf.matmul(h, kernel), bias)
      if i + 1 < len(model.widths):
        h = tf.nn.relu(h)
    loss = tf.reduce_mean(tf.square(h - y))
    opt, scale = _wrapper(wrapper, tf.compat.v1.train.AdamOptimizer(1e-3))
    global_step = tf.compat.v1.train.get_or_create_global_step()
    (first, variable), *rest = opt.compute_gradients(loss)
    train_op = opt.apply_gradients([(first + added, variable)] + rest,
                                   global_step=global_step)
    init = tf.compat.v1.global_variables_initializer()
  config = tf.compat.v1.ConfigProto()
  config.gpu_options.allow_growth = True
  if cpu_only:
    config.device_count["GPU"] = 0
  rewrites = config.graph_options.rewrite_options
  setattr(rewrites, rewrite, rewrites.ON)
  if cpu_only:
    # The remapper's fused float16 MatMul+BiasAdd is slow on CPU.
    rewrites.remapping = rewrites.OFF
  history, metadata = [], tf.compat.v1.RunMetadata()
  with tf.compat.v1.Session(graph=graph, config=config) as session:
    session.run(init, feeds)
    for i in range(steps):
      feed = {x: x_data, y: y_data, added: injected.get(i, 0.0)}
      keep = i == 0  # The graphs the executor ran, after Grappler.
      session.run(train_op, feed,
                  options=tf.compat.v1.RunOptions(
                      output_partition_graphs=keep),
                  run_metadata=metadata if keep else None)
      history.append(session.run((global_step, scale)))
    final = session.run(weights)
  done = [int(s) for s, _ in history]
  return {
      "applied": [now > before for before, now in zip([0] + done, done)],
      "loss_scale": [float(s) for _, s in history],
      "built_float16": _float16_ops(graph.as_graph_def().node),
      "run_float16": _float16_ops(
          n for g in metadata.partition_graphs for n in g.node),
      "initial": initial_weights, "final": final}


class _ParityTest(absltest.TestCase):
  """The check; a subclass names the rewrite, the sizes and the device."""

  rewrite: str
  model: Mlp
  steps: int
  cpu_only = False

  def test_same_steps_scales_and_variables_as_tfs_wrapper(self):
    at = {name: round(f * self.steps) for name, (f, _) in INJECTED.items()}
    values = {at[name]: value for name, (_, value) in INJECTED.items()}
    runs = {w: train(w, self.model, self.steps, self.rewrite, values,
                     self.cpu_only) for w in WRAPPERS}
    tf_run, mplso_run = runs["tf"], runs["mplso"]
    summary = {w: {k: r[k] for k in ("applied", "loss_scale", "run_float16")}
               for w, r in runs.items()}
    for wrapper, run in runs.items():
      with self.subTest(wrapper):
        # Nothing float16 was built: whatever is float16 now, the pass made.
        self.assertEqual((0, 0), run["built_float16"])
        self.assertGreater(sum(run["run_float16"]), 0,
                           f"{self.rewrite} did not fire: {summary}")
        for name in ("nan", "inf"):
          step = at[name]
          self.assertFalse(run["applied"][step],
                           f"the {name} step {step} was applied: {summary}")
          before = (LOSS_SCALE["initial_loss_scale"] if step == 0 else
                    run["loss_scale"][step - 1])
          self.assertLess(run["loss_scale"][step], before, summary)
        # Some steps trained, so the comparison of variables says something.
        self.assertTrue(any(run["applied"]), summary)
        self.assertTrue(any(not np.array_equal(a, b) for a, b in zip(
            run["initial"], run["final"])))
    self.assertEqual(tf_run["applied"], mplso_run["applied"], summary)
    self.assertEqual(tf_run["loss_scale"], mplso_run["loss_scale"], summary)
    self.assertLen(mplso_run["final"], len(tf_run["final"]))
    for i, (theirs, ours) in enumerate(zip(tf_run["final"],
                                           mplso_run["final"])):
      np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=1e-5,
                                 err_msg=f"variable {i}")


@pytest.mark.gpu
@NEEDS_GPU
class GpuAutoMixedPrecisionTest(_ParityTest):
  """The real pass, on the GPU, at sizes where MatMuls are worth converting."""

  rewrite = "auto_mixed_precision"
  model = Mlp(inputs=1024, widths=(2048, 2048, 256), batch=128)
  steps = 30


class CpuEmulatedAutoMixedPrecisionTest(_ParityTest):
  """The pass's CPU emulation, tiny, on any machine: the check itself runs."""

  rewrite = "auto_mixed_precision_cpu"
  model = Mlp(inputs=32, widths=(64, 64, 8), batch=16)
  steps = 12
  cpu_only = True


del _ParityTest  # Its test runs in the subclasses only.


if __name__ == "__main__":
  # Through pytest, whose mark skips the GPU test where there is no GPU.
  sys.exit(pytest.main(["-q", "-rs", __file__]))
