"""The Keras model of the compile tests, for them and their subprocesses.

`tf.keras` is Keras 3 or tf_keras (`TF_USE_LEGACY_KERAS=1`), whichever the
importing process runs on.
"""

import numpy as np
import tensorflow as tf


class ScalesIfWrapped(tf.keras.Model):
  """TF 2.4-2.15's `train_step`: scales only for a LossScaleOptimizer."""

  def __init__(self):
    super().__init__()
    self.dense = tf.keras.layers.Dense(1, dtype="float32")

  def call(self, inputs):
    return self.dense(inputs)

  def train_step(self, data):
    x, y = data
    wrapped = isinstance(self.optimizer,
                         tf.keras.mixed_precision.LossScaleOptimizer)
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(self(x) - y))
      scaled_loss = self.optimizer.get_scaled_loss(loss) if wrapped else loss
    grads = tape.gradient(scaled_loss, self.trainable_variables)
    if wrapped:
      grads = self.optimizer.get_unscaled_gradients(grads)
    self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
    return {"loss": loss}


def mean_squared_error(model, x):
  """Returns the mean squared error of `model` on `x` against the target 3.

  (Keras 3's history shows the compiled loss metric, which a `train_step`
  returning its own "loss" never updates.)
  """
  return float(np.mean(np.square(model.predict(x, verbose=0) - 3.)))
