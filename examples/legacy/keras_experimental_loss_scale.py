"""A TF 2.3 Keras script using mixed_precision.experimental, unmodified.

Written against TF 2.3's `tf.keras.mixed_precision.experimental` (`set_policy`
and `LossScaleOptimizer(optimizer, loss_scale)`), which TF 2.4 replaced and
later versions removed. Run it on mplso's implementation with:

  python -m mplso.compat examples/legacy/keras_experimental_loss_scale.py

It works whichever Keras `tf.keras` is (set TF_USE_LEGACY_KERAS=1 for tf_keras).
It trains with `fit`, then once more with a custom GradientTape loop, as the
TF 2.3 mixed precision guide showed.
"""

import argparse

import numpy as np
import tensorflow as tf
from tensorflow.keras.mixed_precision import experimental as mixed_precision


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--epochs", type=int, default=4)
  args = parser.parse_args()

  # On CPU, the float16 MatMul+BiasAdd fusion is very slow; turn it off.
  tf.config.optimizer.set_experimental_options({"remapping": False})
  mixed_precision.set_policy("mixed_float16")

  rng = np.random.RandomState(2)
  centers = rng.normal(size=(4, 16)).astype(np.float32)
  labels = rng.randint(0, 4, size=2048)
  features = centers[labels] + 0.8 * rng.normal(size=(2048, 16)).astype(
      np.float32)

  inputs = tf.keras.Input(shape=(16,))
  hidden = tf.keras.layers.Dense(64, activation="relu")(inputs)
  logits = tf.keras.layers.Dense(4)(hidden)
  outputs = tf.keras.layers.Activation("softmax", dtype="float32")(logits)
  model = tf.keras.Model(inputs, outputs)

  opt = tf.keras.optimizers.Adam(0.003)
  opt = mixed_precision.LossScaleOptimizer(opt, loss_scale="dynamic")
  print(f"optimizer {type(opt).__module__}.{type(opt).__name__}")
  model.compile(optimizer=opt, loss="sparse_categorical_crossentropy",
                metrics=["accuracy"])
  history = model.fit(features, labels, batch_size=64, epochs=args.epochs,
                      verbose=2)
  for epoch, loss in enumerate(history.history["loss"]):
    print(f"epoch {epoch + 1}  loss {loss:.4f}  "
          f"loss scale {float(opt.loss_scale()):.0f}")

  loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()

  @tf.function
  def train_step(x, y):
    with tf.GradientTape() as tape:
      loss = loss_fn(y, model(x))
      scaled_loss = opt.get_scaled_loss(loss)
    scaled_gradients = tape.gradient(scaled_loss, model.trainable_variables)
    gradients = opt.get_unscaled_gradients(scaled_gradients)
    opt.apply_gradients(zip(gradients, model.trainable_variables))
    return loss

  dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(64)
  for x, y in dataset:
    loss = train_step(x, y)
  print(f"custom loop  loss {float(loss):.4f}  "
        f"iterations {int(opt.iterations)}")


if __name__ == "__main__":
  main()
