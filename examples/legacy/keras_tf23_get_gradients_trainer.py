"""Corpus: a TF 2.3-era trainer class that calls `optimizer.get_gradients`.

Style reproduced: trainers written for TF 2.0-2.3 (GAN and seq2seq repos of
the time) that keep the model, optimizer and a `tf.function` step in a class,
wrap the optimizer once with `tf.keras.mixed_precision.experimental.
LossScaleOptimizer(opt, 'dynamic')` when `--mixed_precision` is on, and take
gradients with `optimizer.get_gradients(loss, params)` (graph-mode
`tf.gradients`, so only inside `tf.function`), which scales and unscales by
itself. Run it unmodified (either Keras) with:

  python -m mplso.compat examples/legacy/keras_tf23_get_gradients_trainer.py

`--overflow_step N` multiplies batch N by 1e5: the step must be skipped.
"""

import argparse
import json

import numpy as np
import tensorflow as tf


class Trainer:
  """Owns the model, the optimizer and the compiled training step."""

  def __init__(self, learning_rate, mixed_precision):
    if mixed_precision:
      tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
    self.model = tf.keras.Sequential([
        tf.keras.layers.Dense(32, activation="tanh", input_shape=(8,)),
        tf.keras.layers.Dense(1, dtype="float32")])
    self.optimizer = tf.keras.optimizers.Adam(learning_rate)
    if mixed_precision:
      self.optimizer = (
          tf.keras.mixed_precision.experimental.LossScaleOptimizer(
              self.optimizer, "dynamic"))

  @tf.function
  def train_step(self, x, y):
    loss = tf.reduce_mean(tf.square(self.model(x, training=True) - y))
    params = self.model.trainable_weights
    grads = self.optimizer.get_gradients(loss, params)
    self.optimizer.apply_gradients(zip(grads, params))
    return loss


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--mixed_precision", type=int, default=1)
  parser.add_argument("--overflow_step", type=int, default=-1)
  args = parser.parse_args()
  tf.config.optimizer.set_experimental_options({"remapping": False})

  rng = np.random.RandomState(17)
  features = rng.uniform(-1., 1., size=(2048, 8)).astype(np.float32)
  targets = np.tanh(features.sum(axis=1, keepdims=True) / 2)
  targets = targets.astype(np.float32)
  trainer = Trainer(0.01, args.mixed_precision)

  losses, skipped, overflow_loss_finite = [], None, None
  for step in range(args.steps):
    idx = rng.randint(0, len(features), 64)
    batch = features[idx] * (1e5 if step == args.overflow_step else 1.)
    before = trainer.model.get_weights()
    loss = float(trainer.train_step(batch, targets[idx]))
    if step == args.overflow_step:
      skipped = all(np.array_equal(b, a)
                    for b, a in zip(before, trainer.model.get_weights()))
      overflow_loss_finite = bool(np.isfinite(loss))
    else:
      losses.append(loss)
  opt = trainer.optimizer
  print("RESULT " + json.dumps({
      "classes": [f"{type(o).__module__}.{type(o).__name__}"
                  for o in (opt, getattr(opt, "loss_scale", None))],
      "losses": losses, "skipped": skipped,
      "overflow_loss_finite": overflow_loss_finite,
      "all_finite": all(np.isfinite(v).all() for v in
                        trainer.model.get_weights() +
                        [v.numpy() for v in opt.variables])}))


if __name__ == "__main__":
  main()
