"""Corpus: a TF 2.4-2.15 `train_step` that asks whether compile wrapped it.

Style reproduced: tensorflow/models' `official/core/base_task.py` and the
"customizing what happens in fit" guide of TF 2.4-2.15: the global policy is
`mixed_float16`, `compile(optimizer="adam")` wraps the optimizer in
`tf.keras.mixed_precision.LossScaleOptimizer` by itself, and the overridden
`train_step` scales the loss and unscales the gradients only
`if isinstance(self.optimizer, tf.keras.mixed_precision.LossScaleOptimizer)`.
On TF 2.21 that check is False for the class compile wraps in (Keras 3's),
and the model silently does not train. Run it unmodified (either Keras):

  python -m mplso.compat examples/legacy/keras_tf24_custom_train_step.py

`--overflow_batch N` multiplies the rows of batch N of the first epoch by
1e5: that step must be skipped and the dynamic loss scale halved.
"""

import argparse
import json

import numpy as np
import tensorflow as tf


class RegressionModel(tf.keras.Model):
  """A small regressor whose `train_step` does its own loss scaling."""

  def __init__(self):
    super().__init__()
    self.hidden = tf.keras.layers.Dense(32, activation="relu")
    self.out = tf.keras.layers.Dense(1, dtype="float32")

  def call(self, inputs, training=False):
    return self.out(self.hidden(inputs))

  def train_step(self, data):
    features, labels = data
    optimizer = self.optimizer
    with tf.GradientTape() as tape:
      outputs = self(features, training=True)
      loss = tf.reduce_mean(tf.square(outputs - labels))
      scaled_loss = loss
      # For mixed precision, when a LossScaleOptimizer is used, the loss is
      # scaled to avoid numeric underflow.
      if isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer):
        scaled_loss = optimizer.get_scaled_loss(loss)
    tvars = self.trainable_variables
    grads = tape.gradient(scaled_loss, tvars)
    if isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer):
      grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(list(zip(grads, tvars)))
    return {"loss": loss}


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
  parser.add_argument("--epochs", type=int, default=3)
  parser.add_argument("--overflow_batch", type=int, default=-1)
  args = parser.parse_args()
  tf.config.optimizer.set_experimental_options({"remapping": False})
  tf.keras.mixed_precision.set_global_policy("mixed_float16")

  rng = np.random.RandomState(24)
  true_w = rng.normal(size=(12, 1)).astype(np.float32)
  features = rng.normal(size=(1024, 12)).astype(np.float32)
  targets = np.tanh(features @ true_w).astype(np.float32)
  train_features = features.copy()
  if args.overflow_batch >= 0:
    start = 64 * args.overflow_batch
    train_features[start:start + 64] *= 1e5

  model = RegressionModel()
  model.compile(optimizer="adam")
  first_loss = float(np.mean(np.square(model.predict(features, verbose=0) -
                                       targets)))
  watch = OverflowWatch(args.overflow_batch)
  model.fit(train_features, targets, batch_size=64, epochs=args.epochs,
            shuffle=False, callbacks=[watch], verbose=0)
  last_loss = float(np.mean(np.square(model.predict(features, verbose=0) -
                                      targets)))
  opt = model.optimizer
  print("RESULT " + json.dumps({
      "classes": [f"{type(opt).__module__}.{type(opt).__name__}"],
      "losses": [first_loss, last_loss], **watch.facts,
      "all_finite": all(np.isfinite(v).all() for v in
                        model.get_weights() +
                        [v.numpy() for v in opt.variables])}))


if __name__ == "__main__":
  main()
