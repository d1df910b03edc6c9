"""The step's `tf.cond`, however a TF1 program entered graph mode.

Real TF1 programs run something eagerly (list the GPUs, seed, build a
`tf.data` pipeline, call a library's `tf.function`) before they call
`disable_eager_execution()`. From inside a `cond` branch, `init_scope` then
lifts to that eager context, and a wrapped optimizer's slots, created on its
first apply, would be made eagerly: the `If` op could not capture them.
Each case runs in a fresh interpreter (eager execution is off for the whole
process) and must train exactly as TF's own class trains in a program that
ran nothing eagerly first: same weights, `global_step` and scale, the Inf
step skipped.
"""

import json

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

from mplso_test.helpers import testing

# {preamble} runs before `disable_eager_execution()`; {optimizer} wraps
# `inner`. Steps 0-2 are finite, step 3 is Inf, step 4 finite again.
_PROGRAM = """
import json
import numpy as np
import tensorflow as tf
import mplso
v1 = tf.compat.v1
{preamble}
v1.disable_eager_execution()
inner = v1.train.{inner}
opt = {optimizer}
x = v1.placeholder(tf.float32, [None, 8])
w = v1.get_variable("w", [8, 1], initializer=v1.ones_initializer())
global_step = v1.train.get_or_create_global_step()
loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
train_op = opt.minimize(loss, global_step=global_step)
scale = [v for v in v1.global_variables()
         if v.name == "current_loss_scale:0"][0]
with v1.Session() as sess:
  sess.run(v1.global_variables_initializer())
  for value in (1., 2., 3., np.inf, 1.):
    sess.run(train_op, {{x: np.full((2, 8), value)}})
  print(json.dumps({{
      "w": sess.run(w).ravel().tolist(), "global_step": int(
          sess.run(global_step)), "scale": float(sess.run(scale)),
      "variables": [v.name for v in v1.global_variables()]}}))
"""

_PREAMBLES = {
    "function": "tf.function(lambda: tf.constant(1.0))()",
    "seed": "tf.random.set_seed(1)",
    "gpu_setup": ("for gpu in tf.config.list_physical_devices('GPU'):\n"
                  "  tf.config.experimental.set_memory_growth(gpu, True)\n"
                  "tf.constant(0.)"),
    "dataset": "tf.data.Dataset.range(3).map(lambda i: i + 1)",
}

_MPLSO = "mplso.MixedPrecisionLossScaleOptimizer(inner, 'dynamic')"
_GRAPH_REWRITE = ("mplso.enable_mixed_precision_graph_rewrite(inner, "
                  "loss_scale='dynamic')")
_TF = "v1.mixed_precision.MixedPrecisionLossScaleOptimizer(inner, 'dynamic')"


def _run(preamble: str, inner: str, optimizer: str) -> dict:
  code = _PROGRAM.format(preamble=preamble, inner=inner, optimizer=optimizer)
  return json.loads(testing.printed_in_fresh_interpreter(
      code, TF_CPP_MIN_LOG_LEVEL="3"))


class GraphEntryTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.product(
      preamble=sorted(_PREAMBLES),
      wrapper=["class", "graph_rewrite"],
  )
  def test_adam_trains_as_tf_after_an_eager_start(self, preamble, wrapper):
    inner = "AdamOptimizer(0.05)"
    ours = _run(_PREAMBLES[preamble], inner,
                _MPLSO if wrapper == "class" else _GRAPH_REWRITE)
    theirs = _run("", inner, _TF)  # TF's class fails after an eager start.
    self.assertEqual(theirs, ours)
    self.assertEqual(4, ours["global_step"])  # The Inf step was skipped.
    self.assertEqual(2.**14, ours["scale"])  # And halved the scale.

  def test_momentum_trains_as_tf_after_a_traced_function(self):
    inner = "MomentumOptimizer(0.05, 0.9)"
    self.assertEqual(_run("", inner, _TF),
                     _run(_PREAMBLES["function"], inner, _MPLSO))


if __name__ == "__main__":
  absltest.main()
