"""Corpus: TF 2.1-2.3 Keras, the loss scale given to the dtype policy.

Style reproduced: TF 2.1-2.3's `tf.keras.mixed_precision.experimental.
Policy('mixed_float16', loss_scale='dynamic')` set with `set_policy`, then
`model.compile(optimizer='adam', ...)` and `fit`: `compile` wrapped the
optimizer in a `LossScaleOptimizer` with the policy's loss scale by itself,
and scripts read `model.optimizer.loss_scale()` in a callback. TF 2.21 has
neither the `loss_scale` argument nor the wrapping; run it unmodified with:

  python -m mplso.compat examples/legacy/keras_tf22_policy_loss_scale.py

`--overflow_batch N` multiplies the rows of batch N of the first epoch by
1e5: that step must be skipped and the loss scale halved.
"""

import argparse
import json

import numpy as np
import tensorflow as tf


class OverflowWatch(tf.keras.callbacks.Callback):
  """Records what one batch did to the weights and the loss scale."""

  def __init__(self, batch):
    super().__init__()
    self.batch, self.epoch, self.facts = batch, 0, {}

  def on_epoch_begin(self, epoch, logs=None):
    self.epoch = epoch

  def on_train_batch_begin(self, batch, logs=None):
    if (self.epoch, batch) == (0, self.batch):
      self.before = self.model.get_weights()
      self.scale = float(self.model.optimizer.loss_scale())

  def on_train_batch_end(self, batch, logs=None):
    if (self.epoch, batch) == (0, self.batch):
      after = self.model.get_weights()
      self.facts = {
          "skipped": all(np.array_equal(b, a)
                         for b, a in zip(self.before, after)),
          "overflow_loss_finite": bool(np.isfinite(logs["loss"])),
          "loss_scale_around_overflow": [
              self.scale, float(self.model.optimizer.loss_scale())]}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--epochs", type=int, default=6)
  parser.add_argument("--overflow_batch", type=int, default=-1)
  args = parser.parse_args()
  tf.config.optimizer.set_experimental_options({"remapping": False})
  policy = tf.keras.mixed_precision.experimental.Policy(
      "mixed_float16", loss_scale="dynamic")
  tf.keras.mixed_precision.experimental.set_policy(policy)

  rng = np.random.RandomState(18)
  centers = rng.normal(size=(4, 16)).astype(np.float32)
  labels = rng.randint(0, 4, size=1024)
  features = (centers[labels] + 0.7 * rng.normal(size=(1024, 16))).astype(
      np.float32)
  train_features = features.copy()
  if args.overflow_batch >= 0:
    start = 64 * args.overflow_batch
    train_features[start:start + 64] *= 1e5

  inputs = tf.keras.Input(shape=(16,))
  hidden = tf.keras.layers.Dense(32, activation="relu")(inputs)
  outputs = tf.keras.layers.Activation("softmax", dtype="float32")(
      tf.keras.layers.Dense(4)(hidden))
  model = tf.keras.Model(inputs, outputs)
  model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
  first_loss = model.evaluate(features, labels, verbose=0)
  watch = OverflowWatch(args.overflow_batch)
  model.fit(train_features, labels, batch_size=64, epochs=args.epochs,
            shuffle=False, callbacks=[watch], verbose=0)
  last_loss = model.evaluate(features, labels, verbose=0)
  opt = model.optimizer
  print("RESULT " + json.dumps({
      "classes": [f"{type(o).__module__}.{type(o).__name__}"
                  for o in (opt, opt.loss_scale)],
      "policy_loss_scale": type(policy.loss_scale).__name__,
      "losses": [first_loss, last_loss], **watch.facts,
      "all_finite": all(np.isfinite(v).all() for v in
                        model.get_weights() +
                        [v.numpy() for v in opt.variables])}))


if __name__ == "__main__":
  main()
