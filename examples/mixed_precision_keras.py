"""Mixed-precision Keras training with `fit` and mplso's LossScaleOptimizer.

Trains a classifier on the handwritten digits shipped with mplso
(`mplso.datasets.load_digits`) under the `mixed_float16` policy: float16
compute, float32 variables. The optimizer is TF 2.3's API,

    opt = mplso.keras.LossScaleOptimizer(tf.keras.optimizers.Adam(...),
                                         "dynamic")

and `model.compile(optimizer=opt)` keeps it as it is. After each epoch the
script prints the loss, the accuracy, the loss scale and how many steps were
skipped because their gradients overflowed. The dynamic scale starts at
2**15, TF's default, and doubles after each run of `--increment_period`
finite steps until the scaled gradients overflow float16; each overflowing
step is skipped and halves the scale, so it settles just under the largest
scale the gradients allow.

It uses whichever Keras `tf.keras` is: Keras 3 by default, tf_keras with
TF_USE_LEGACY_KERAS=1.

Usage:
  python examples/mixed_precision_keras.py [--epochs N] [--quick] [--json PATH]
      [--logdir DIR [--update_freq N]]
"""

import argparse
import json
import sys

# A quiet start: TensorFlow's C++ start-up logs (CUDA probing on a machine
# without a GPU, oneDNN notices) are held to TF_CPP_MIN_LOG_LEVEL, 3 unless
# set (TF_CPP_MIN_LOG_LEVEL=0 shows them). `import mplso` loads no TensorFlow.
import mplso  # noqa: E402

mplso.import_tensorflow_quietly()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

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
  parser.add_argument("--logdir", metavar="DIR",
                      help="write TensorBoard summaries (loss scale, skipped "
                      "steps) to DIR/train")
  parser.add_argument("--update_freq", type=int, default=None,
                      help="with --logdir, also write every N steps")
  args = parser.parse_args(argv)
  if args.quick:
    args.epochs = 4
  args.update_freq = args.update_freq or "epoch"
  return args


class EpochReport(tf.keras.callbacks.Callback):
  """Prints one line per epoch, with what `LossScaleMonitor` put in the logs."""

  def __init__(self, optimizer):
    super().__init__()
    self.optimizer = optimizer
    self.history = []

  def on_epoch_end(self, epoch, logs=None):
    logs = logs or {}
    row = {"epoch": epoch + 1, "loss": float(logs["loss"]),
           "accuracy": float(logs["accuracy"]),
           "val_accuracy": float(logs["val_accuracy"]),
           "loss_scale": float(logs["loss_scale"]),
           "skipped_steps": int(logs["skipped_steps"]),
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
  # Adds `loss_scale` and `skipped_steps` to the logs (and to TensorBoard
  # with --logdir); EpochReport, after it in the list, prints them.
  monitor = mplso.keras.LossScaleMonitor(
      log_dir=args.logdir, update_freq=args.update_freq, optimizer=opt)
  report = EpochReport(opt)
  model.fit(x[:split], labels[:split], batch_size=32, epochs=args.epochs,
            validation_data=(x[split:], labels[split:]), verbose=0,
            callbacks=[monitor, report])
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump(report.history, f, indent=2)


if __name__ == "__main__":
  main(sys.argv[1:])
