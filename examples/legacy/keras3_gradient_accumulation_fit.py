"""Corpus: Keras 3's gradient accumulation under the TF 2.4+ loss-scale name.

Style reproduced: a TF 2.4-2.15 `compile`/`fit` program carried to Keras 3
(TF 2.16+): it still wraps its optimizer with
`tf.keras.mixed_precision.LossScaleOptimizer(optimizer)` under the
`mixed_float16` policy, and gained Keras 3's
`gradient_accumulation_steps=2` on the wrapped optimizer, so that each
update averages two batches. Run it unmodified with:

  python -m mplso.compat examples/legacy/keras3_gradient_accumulation_fit.py

`--overflow_batch N` multiplies the rows of batch N of the first epoch by
1e5: no weight may move in that step, the dynamic loss scale halves, and
nothing of that batch may reach the accumulated gradients.
"""

import argparse
import json

import numpy as np
import tensorflow as tf


class OverflowWatch(tf.keras.callbacks.Callback):
  """Records what one batch of the first epoch did to weights and scale."""

  def __init__(self, batch):
    super().__init__()
    self.batch, self.epoch, self.facts = batch, 0, {}

  def on_epoch_begin(self, epoch, logs=None):
    self.epoch = epoch

  def on_train_batch_begin(self, batch, logs=None):
    if (self.epoch, batch) == (0, self.batch):
      self.before = self.model.get_weights()
      self.scale_before = float(self.model.optimizer.loss_scale)

  def on_train_batch_end(self, batch, logs=None):
    if (self.epoch, batch) == (0, self.batch):
      self.facts = {
          "skipped": all(np.array_equal(b, a) for b, a in
                         zip(self.before, self.model.get_weights())),
          "overflow_loss_finite": bool(np.isfinite(logs["loss"])),
          "loss_scale_around_overflow": [
              self.scale_before, float(self.model.optimizer.loss_scale)]}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--epochs", type=int, default=4)
  parser.add_argument("--overflow_batch", type=int, default=-1)
  args = parser.parse_args()
  tf.config.optimizer.set_experimental_options({"remapping": False})
  tf.keras.mixed_precision.set_global_policy("mixed_float16")

  rng = np.random.RandomState(16)
  true_w = rng.normal(size=(12, 1)).astype(np.float32)
  features = rng.normal(size=(1024, 12)).astype(np.float32)
  targets = np.tanh(features @ true_w).astype(np.float32)
  train_features = features.copy()
  if args.overflow_batch >= 0:
    start = 32 * args.overflow_batch
    train_features[start:start + 32] *= 1e5

  model = tf.keras.Sequential([
      tf.keras.Input(shape=(12,)),
      tf.keras.layers.Dense(32, activation="relu"),
      tf.keras.layers.Dense(1, dtype="float32")])
  optimizer = tf.keras.mixed_precision.LossScaleOptimizer(
      tf.keras.optimizers.Adam(0.01, gradient_accumulation_steps=2))
  model.compile(optimizer=optimizer, loss="mse")
  first_loss = model.evaluate(features, targets, verbose=0)
  watch = OverflowWatch(args.overflow_batch)
  model.fit(train_features, targets, batch_size=32, epochs=args.epochs,
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
