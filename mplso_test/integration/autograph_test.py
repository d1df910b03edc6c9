"""A user's `@tf.function` step converts mplso's code without AutoGraph warnings.

AutoGraph converts every function a `tf.function` calls, mplso's included;
code it cannot parse (a walrus operator, say) makes it log "AutoGraph could
not transform ... Please report this to the TensorFlow team" in the user's
output, about mplso's code.
"""

import io
import logging

from absl.testing import absltest
from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf
import tf_keras

import mplso
import mplso.keras

NAN = float("nan")


def _tf1_step():
  var = tf.Variable([1., 2.])
  opt = mplso.MixedPrecisionLossScaleOptimizer(
      tf.compat.v1.train.AdamOptimizer(0.1), "dynamic")

  def step(x):
    opt.minimize(lambda: tf.reduce_sum(var * x), var_list=[var])

  return step, var


def _keras_step(make_inner, make_variable, keras3):
  var = make_variable(np.array([1., 2.], np.float32))
  opt = mplso.keras.LossScaleOptimizer(make_inner(), dynamic=True)

  def step(x):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(tf.convert_to_tensor(var) * x)
      scaled = opt.scale_loss(loss) if keras3 else opt.get_scaled_loss(loss)
    grads = tape.gradient(scaled, [var])
    if not keras3:
      grads = opt.get_unscaled_gradients(grads)
    opt.apply_gradients(zip(grads, [var]))

  return step, var


STEPS = {
    "tf1": _tf1_step,
    "keras3": lambda: _keras_step(lambda: keras.optimizers.Adam(0.1),
                                  keras.Variable, keras3=True),
    "tf_keras": lambda: _keras_step(lambda: tf_keras.optimizers.Adam(0.1),
                                    tf.Variable, keras3=False),
    "optimizer_v2": lambda: _keras_step(
        lambda: tf_keras.optimizers.legacy.Adam(0.1), tf.Variable,
        keras3=False),
}


class AutoGraphTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters((name, name) for name in STEPS)
  def test_no_autograph_warning(self, family):
    step, var = STEPS[family]()
    captured = io.StringIO()
    handler = logging.StreamHandler(captured)
    logger = tf.get_logger()
    logger.addHandler(handler)
    self.addCleanup(logger.removeHandler, handler)
    # Converted with AutoGraph, as a user's step is by default.
    function = tf.function(step, autograph=True)
    function(tf.constant([1., 1.]))
    function(tf.constant([NAN, 1.]))  # Skipped: the variable keeps its value.
    self.assertNotIn("could not transform", captured.getvalue())
    self.assertTrue(np.isfinite(np.asarray(tf.convert_to_tensor(var))).all())


if __name__ == "__main__":
  absltest.main()
