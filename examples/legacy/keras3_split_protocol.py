"""Corpus: Keras 3's loss-scale protocol split across a `tf.function`.

Style reproduced: custom loops written for Keras 3 (TF 2.16+) that keep
`tf.keras.mixed_precision.LossScaleOptimizer(optimizer)` from their TF 2.x
days and follow Keras 3's protocol: `optimizer.scale_loss(loss)` and
`tape.gradient` inside a `tf.function` that returns the (scaled) gradients,
then `optimizer.apply_gradients(...)` eagerly, outside it, after host-side
bookkeeping; `apply_gradients` unscales by itself. Run it unmodified with:

  python -m mplso.compat examples/legacy/keras3_split_protocol.py

`--overflow_step N` multiplies batch N by 1e5: the step must be skipped and
the dynamic loss scale halved.
"""

import argparse
import json

import numpy as np
import tensorflow as tf


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--overflow_step", type=int, default=-1)
  args = parser.parse_args()
  tf.config.optimizer.set_experimental_options({"remapping": False})
  tf.keras.mixed_precision.set_global_policy("mixed_float16")

  rng = np.random.RandomState(3)
  features = rng.uniform(-1., 1., size=(2048, 8)).astype(np.float32)
  targets = np.tanh(features.sum(axis=1, keepdims=True) / 2)
  targets = targets.astype(np.float32)
  model = tf.keras.Sequential([
      tf.keras.Input(shape=(8,)),
      tf.keras.layers.Dense(32, activation="tanh"),
      tf.keras.layers.Dense(1, dtype="float32")])
  optimizer = tf.keras.mixed_precision.LossScaleOptimizer(
      tf.keras.optimizers.SGD(0.1, momentum=0.9))

  @tf.function
  def compute_gradients(x, y):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
      scaled_loss = optimizer.scale_loss(loss)
    return loss, tape.gradient(scaled_loss, model.trainable_variables)

  losses, skipped, overflow_loss_finite, scales = [], None, None, None
  for step in range(args.steps):
    idx = rng.randint(0, len(features), 64)
    batch = features[idx] * (1e5 if step == args.overflow_step else 1.)
    before = model.get_weights()
    scale_before = float(optimizer.loss_scale)
    loss, grads = compute_gradients(batch, targets[idx])
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    if step == args.overflow_step:
      skipped = all(np.array_equal(b, a)
                    for b, a in zip(before, model.get_weights()))
      overflow_loss_finite = bool(np.isfinite(float(loss)))
      scales = [scale_before, float(optimizer.loss_scale)]
    else:
      losses.append(float(loss))
  print("RESULT " + json.dumps({
      "classes": [
          f"{type(optimizer).__module__}.{type(optimizer).__name__}"],
      "losses": losses, "skipped": skipped,
      "overflow_loss_finite": overflow_loss_finite,
      "loss_scale_around_overflow": scales,
      "all_finite": all(np.isfinite(v).all() for v in
                        model.get_weights() +
                        [v.numpy() for v in optimizer.variables])}))


if __name__ == "__main__":
  main()
