"""Mixed-precision Keras training with `fit` and mplso's LossScaleOptimizer.

Trains a classifier on the handwritten digits shipped with mplso
(`mplso.datasets.load_digits`) under the `mixed_float16` policy: float16
compute, float32 variables. The optimizer is TF 2.3's API,

    opt = mplso.keras.LossScaleOptimizer(tf.keras.optimizers.Adam(...),
                                         "dynamic")

and `model.compile(optimizer=opt)` keeps it as it is. After each epoch the
script prints the loss, the accuracy, the loss scale and how many steps were
skipped because their gradients overflowed. The dynamic scale starts high
(2**15 here, TF's default), so the first steps overflow float16 and are
skipped while the scale halves; then it settles, and grows again after each
run of `--increment_period` finite steps.

It uses whichever Keras `tf.keras` is: Keras 3 by default, tf_keras with
TF_USE_LEGACY_KERAS=1.

Usage:
  python examples/mixed_precision_keras.py [--epochs N] [--quick] [--json PATH]
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import mplso  # noqa: E402
from mplso import datasets  # noqa: E402
import mplso.keras  # noqa: E402


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--epochs", type=int, default=10,
                      help="training epochs (default 10)")
  parser.add_argument("--increment_period", type=int, default=20,
                      help="finite steps before the loss scale doubles")
  parser.add_argument("--quick", action="store_true",
                      help="a short run for CI (4 epochs)")
  parser.add_argument("--json", metavar="PATH",
                      help="also write the per-epoch results as JSON to PATH")
  args = parser.parse_args(argv)
  if args.quick:
    args.epochs = 4
  return args


class LossScaleReport(tf.keras.callbacks.Callback):
  """Prints the loss scale and the skipped steps after each epoch.

  A step was skipped when the optimizer's good-step counter went back to 0
  without the scale growing. Reading the two scalars after each batch costs a
  host read, as `fit`'s own per-batch logs do.
  """

  def __init__(self, optimizer):
    super().__init__()
    self.optimizer = optimizer
    self.scale, self.good_steps = optimizer.loss_scale.variables
    self.skipped = 0
    self.history = []

  def on_train_begin(self, logs=None):
    self._last_scale = float(self.scale.numpy())

  def on_train_batch_end(self, batch, logs=None):
    scale = float(self.scale.numpy())
    if int(self.good_steps.numpy()) == 0 and scale <= self._last_scale:
      self.skipped += 1
    self._last_scale = scale

  def on_epoch_end(self, epoch, logs=None):
    logs = logs or {}
    row = {"epoch": epoch + 1, "loss": float(logs["loss"]),
           "accuracy": float(logs["accuracy"]),
           "val_accuracy": float(logs["val_accuracy"]),
           "loss_scale": self._last_scale, "skipped_steps": self.skipped,
           "iterations": int(self.optimizer.iterations.numpy())}
    self.history.append(row)
    print(f"epoch {row['epoch']:3d}  loss {row['loss']:.4f}  "
          f"accuracy {row['accuracy']:.3f}  "
          f"val_accuracy {row['val_accuracy']:.3f}  "
          f"loss scale {row['loss_scale']:8.0f}  "
          f"skipped {row['skipped_steps']:3d} of {row['iterations']} steps",
          flush=True)


def main(argv=None):
  args = parse_args(argv)
  # On CPU, Grappler fuses float16 MatMul+BiasAdd into a very slow kernel.
  tf.config.optimizer.set_experimental_options({"remapping": False})
  tf.keras.utils.set_random_seed(0)
  tf.keras.mixed_precision.set_global_policy("mixed_float16")

  images, labels = datasets.load_digits()
  x = images.reshape(len(images), -1).astype(np.float32) / 16.
  split = int(0.8 * len(x))

  inputs = tf.keras.Input(shape=(64,))
  hidden = tf.keras.layers.Dense(256, activation="relu")(inputs)
  hidden = tf.keras.layers.Dense(128, activation="relu")(hidden)
  logits = tf.keras.layers.Dense(10)(hidden)
  # Softmax and loss in float32, as the mixed precision guide advises.
  outputs = tf.keras.layers.Activation("softmax", dtype="float32")(logits)
  model = tf.keras.Model(inputs, outputs)

  opt = mplso.keras.LossScaleOptimizer(
      tf.keras.optimizers.Adam(1e-3),
      mplso.DynamicLossScale(2**15, increment_period=args.increment_period))
  model.compile(optimizer=opt, loss="sparse_categorical_crossentropy",
                metrics=["accuracy"])
  print(f"policy {model.layers[1].dtype_policy.name}, optimizer "
        f"{type(model.optimizer).__module__}", flush=True)
  report = LossScaleReport(opt)
  model.fit(x[:split], labels[:split], batch_size=32, epochs=args.epochs,
            validation_data=(x[split:], labels[split:]), verbose=0,
            callbacks=[report])
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump(report.history, f, indent=2)


if __name__ == "__main__":
  main(sys.argv[1:])
