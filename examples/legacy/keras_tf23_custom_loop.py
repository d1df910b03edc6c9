"""Corpus: a TF 2.2/2.3 custom training loop with an explicit loss-scale object.

Style reproduced: the TF 2.2-2.3 mixed precision guide's custom loop, as
research code wrote it: `from tensorflow.keras.mixed_precision import
experimental as mixed_precision`, `set_policy('mixed_float16')`, a
`tf.mixed_precision.experimental.DynamicLossScale` passed to
`mixed_precision.LossScaleOptimizer(opt, loss_scale)`, and a `tf.function`
step with `get_scaled_loss` / `get_unscaled_gradients`. TF 2.21 has none of
these names; run it unmodified (either Keras; TF_USE_LEGACY_KERAS=1 for
tf_keras) with:

  python -m mplso.compat examples/legacy/keras_tf23_custom_loop.py

`--overflow_step N` multiplies batch N by 1e5: the step must be skipped and
the loss scale halved.
"""

import argparse
import json

import numpy as np
import tensorflow as tf
from tensorflow.keras.mixed_precision import experimental as mixed_precision


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--overflow_step", type=int, default=-1)
  args = parser.parse_args()
  tf.config.optimizer.set_experimental_options({"remapping": False})
  mixed_precision.set_policy("mixed_float16")

  rng = np.random.RandomState(16)
  centers = rng.normal(size=(4, 16)).astype(np.float32)
  labels = rng.randint(0, 4, size=2048)
  features = (centers[labels] + 0.5 * rng.normal(size=(2048, 16))).astype(
      np.float32)

  model = tf.keras.Sequential([
      tf.keras.layers.Dense(32, activation="relu", input_shape=(16,)),
      tf.keras.layers.Dense(4),
      tf.keras.layers.Activation("linear", dtype="float32")])
  loss_scale = tf.mixed_precision.experimental.DynamicLossScale(
      initial_loss_scale=2**10, increment_period=20, multiplier=2.)
  opt = mixed_precision.LossScaleOptimizer(
      tf.keras.optimizers.SGD(0.1, momentum=0.9), loss_scale=loss_scale)
  loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

  @tf.function
  def train_step(x, y):
    with tf.GradientTape() as tape:
      loss = loss_fn(y, model(x, training=True))
      scaled_loss = opt.get_scaled_loss(loss)
    scaled_gradients = tape.gradient(scaled_loss, model.trainable_variables)
    gradients = opt.get_unscaled_gradients(scaled_gradients)
    opt.apply_gradients(zip(gradients, model.trainable_variables))
    return loss

  losses, skipped, overflow_loss_finite, scales = [], None, None, None
  for step in range(args.steps):
    idx = rng.randint(0, len(features), 64)
    batch = features[idx] * (1e5 if step == args.overflow_step else 1.)
    before, scale_before = model.get_weights(), float(opt.loss_scale())
    loss = float(train_step(batch, labels[idx]))
    if step == args.overflow_step:
      skipped = all(np.array_equal(b, a)
                    for b, a in zip(before, model.get_weights()))
      overflow_loss_finite = bool(np.isfinite(loss))
      scales = [scale_before, float(opt.loss_scale())]
    else:
      losses.append(loss)
  print("RESULT " + json.dumps({
      "classes": [f"{type(o).__module__}.{type(o).__name__}"
                  for o in (opt, opt.loss_scale)],
      "losses": losses, "skipped": skipped,
      "loss_scale_around_overflow": scales,
      "overflow_loss_finite": overflow_loss_finite,
      "iterations": int(opt.iterations),
      "all_finite": all(np.isfinite(v).all() for v in
                        model.get_weights() + [v.numpy() for v in opt.variables]
                        )}))


if __name__ == "__main__":
  main()
