"""Corpus: tensorflow/models' `official` helpers around `compile` and `fit`.

Style reproduced: `official/modeling/performance.py` of TF 2.4-2.15:
`set_mixed_precision_policy(tf.float16)` and `configure_optimizer(optimizer,
use_float16=True, loss_scale=...)`, which wraps the optimizer in
`tf.keras.mixed_precision.LossScaleOptimizer(optimizer)` for 'dynamic' or
`LossScaleOptimizer(optimizer, dynamic=False, initial_scale=N)` for a
number, before `model.compile` and `fit`. On Keras 3 that class takes
neither argument; run it unmodified with:

  python -m mplso.compat examples/legacy/keras_tf24_official_compile_fit.py \
      --loss_scale 1024

`--overflow_batch N` multiplies the rows of batch N of the first epoch by
1e5: that step must be skipped, under a fixed loss scale too.
"""

import argparse
import json

import numpy as np
import tensorflow as tf


def configure_optimizer(optimizer, use_float16=False, loss_scale=None):
  """Configures optimizer object with performance options."""
  if use_float16:
    if loss_scale in (None, "dynamic"):
      optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
    else:
      # A number: a fixed loss scale.
      optimizer = tf.keras.mixed_precision.LossScaleOptimizer(
          optimizer, dynamic=False, initial_scale=loss_scale)
  return optimizer


def set_mixed_precision_policy(dtype):
  if dtype == tf.float16:
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
  else:
    tf.keras.mixed_precision.set_global_policy("float32")


class WeightsWatch(tf.keras.callbacks.Callback):
  """Records whether one batch of the first epoch moved any weight."""

  def __init__(self, batch):
    super().__init__()
    self.batch, self.epoch, self.facts = batch, 0, {}

  def on_epoch_begin(self, epoch, logs=None):
    self.epoch = epoch

  def on_train_batch_begin(self, batch, logs=None):
    if (self.epoch, batch) == (0, self.batch):
      self.before = self.model.get_weights()

  def on_train_batch_end(self, batch, logs=None):
    if (self.epoch, batch) == (0, self.batch):
      self.facts = {
          "skipped": all(np.array_equal(b, a) for b, a in
                         zip(self.before, self.model.get_weights())),
          "overflow_loss_finite": bool(np.isfinite(logs["loss"]))}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--epochs", type=int, default=3)
  parser.add_argument("--loss_scale", default="dynamic")
  parser.add_argument("--overflow_batch", type=int, default=-1)
  args = parser.parse_args()
  loss_scale = (args.loss_scale if args.loss_scale == "dynamic"
                else float(args.loss_scale))
  tf.config.optimizer.set_experimental_options({"remapping": False})
  set_mixed_precision_policy(tf.float16)

  rng = np.random.RandomState(20)
  true_w = rng.normal(size=(12, 1)).astype(np.float32)
  features = rng.normal(size=(1024, 12)).astype(np.float32)
  targets = np.tanh(features @ true_w).astype(np.float32)
  train_features = features.copy()
  if args.overflow_batch >= 0:
    start = 64 * args.overflow_batch
    train_features[start:start + 64] *= 1e5

  model = tf.keras.Sequential([
      tf.keras.Input(shape=(12,)),
      tf.keras.layers.Dense(32, activation="relu"),
      tf.keras.layers.Dense(1, dtype="float32")])
  optimizer = configure_optimizer(tf.keras.optimizers.Adam(0.01),
                                  use_float16=True, loss_scale=loss_scale)
  model.compile(optimizer=optimizer, loss="mse")
  first_loss = model.evaluate(features, targets, verbose=0)
  watch = WeightsWatch(args.overflow_batch)
  model.fit(train_features, targets, batch_size=64, epochs=args.epochs,
            shuffle=False, callbacks=[watch], verbose=0)
  last_loss = model.evaluate(features, targets, verbose=0)
  opt = model.optimizer
  print("RESULT " + json.dumps({
      "classes": [f"{type(opt).__module__}.{type(opt).__name__}"],
      "losses": [first_loss, last_loss], **watch.facts,
      "all_finite": all(np.isfinite(v).all() for v in
                        model.get_weights() +
                        [v.numpy() for v in opt.variables])}))


if __name__ == "__main__":
  main()
