"""Corpus: a TF 2.4-2.15 custom training loop with the non-experimental API.

Style reproduced: code written after TF 2.4 made the API stable: `from
tensorflow.keras import mixed_precision`, `set_global_policy('mixed_float16')`,
an hparams-driven `Optimizer` helper class wrapping Adam in
`mixed_precision.LossScaleOptimizer(opt, dynamic=True)`, and a `tf.function`
step with `get_scaled_loss` / `get_unscaled_gradients` and a float32 output
layer. On Keras 3 (TF 2.16+) that class has neither the `dynamic` argument
nor those methods; run it unmodified with:

  python -m mplso.compat examples/legacy/keras_tf24_custom_loop.py

`--overflow_step N` multiplies batch N by 1e5: the step must be skipped.
"""

import argparse
import json

import numpy as np
import tensorflow as tf
from tensorflow.keras import mixed_precision
from tensorflow.keras.optimizers import Adam


class Optimizer:
  """The optimizer as the hparams ask for it."""

  def __init__(self, hparams):
    self.mixed_precision = hparams.mixed_precision
    self.optimizer = Adam(hparams.learning_rate, beta_1=0.5)
    if self.mixed_precision:
      self.optimizer = mixed_precision.LossScaleOptimizer(
          self.optimizer, dynamic=True)

  def minimize(self, loss_fn, model):
    with tf.GradientTape() as tape:
      loss = loss_fn()
      scaled_loss = (self.optimizer.get_scaled_loss(loss)
                     if self.mixed_precision else loss)
    gradients = tape.gradient(scaled_loss, model.trainable_variables)
    if self.mixed_precision:
      gradients = self.optimizer.get_unscaled_gradients(gradients)
    self.optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--learning_rate", type=float, default=0.01)
  parser.add_argument("--mixed_precision", type=int, default=1)
  parser.add_argument("--overflow_step", type=int, default=-1)
  hparams = parser.parse_args()
  tf.config.optimizer.set_experimental_options({"remapping": False})
  if hparams.mixed_precision:
    mixed_precision.set_global_policy("mixed_float16")

  rng = np.random.RandomState(19)
  labels = rng.randint(0, 2, size=1024)
  images = rng.uniform(size=(1024, 8, 8, 1)).astype(np.float32)
  images[labels == 1, :4] += 0.5  # Class 1: the upper half is brighter.
  model = tf.keras.Sequential([
      tf.keras.Input(shape=(8, 8, 1)),
      tf.keras.layers.Conv2D(8, 3, activation="relu"),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(2),
      tf.keras.layers.Activation("linear", dtype="float32")])
  optimizer = Optimizer(hparams)
  loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

  @tf.function
  def train_step(x, y):
    return optimizer.minimize(lambda: loss_object(y, model(x, training=True)),
                              model)

  losses, skipped, overflow_loss_finite = [], None, None
  for step in range(hparams.steps):
    idx = rng.randint(0, len(images), 64)
    batch = images[idx] * (1e5 if step == hparams.overflow_step else 1.)
    before = model.get_weights()
    loss = float(train_step(batch, labels[idx]))
    if step == hparams.overflow_step:
      skipped = all(np.array_equal(b, a)
                    for b, a in zip(before, model.get_weights()))
      overflow_loss_finite = bool(np.isfinite(loss))
    else:
      losses.append(loss)
  opt = optimizer.optimizer
  print("RESULT " + json.dumps({
      "classes": [f"{type(opt).__module__}.{type(opt).__name__}"],
      "losses": losses, "skipped": skipped,
      "overflow_loss_finite": overflow_loss_finite,
      "all_finite": all(np.isfinite(v).all() for v in
                        model.get_weights() +
                        [v.numpy() for v in opt.variables])}))


if __name__ == "__main__":
  main()
