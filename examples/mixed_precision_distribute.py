"""Mixed-precision training under tf.distribute.MirroredStrategy, on 2 CPUs.

Splits the CPU into two logical devices so that MirroredStrategy has two
replicas on any machine, then trains the digits classifier shipped with
mplso twice, in float16 compute with float32 variables:

1. with Keras `fit` and `mplso.keras.LossScaleOptimizer`, watched by
   `mplso.keras.LossScaleMonitor`;
2. with a custom loop (`strategy.run`) and TF 2.3's
   `get_scaled_loss` / `get_unscaled_gradients` protocol.

Each replica computes its own gradients; the optimizer sums them across
replicas before it checks that they are finite, so both replicas apply or
skip every step together and the loss scale stays the same on both. The
script prints, per epoch, the loss, the loss scale and the skipped steps,
and checks that the two replicas' weights are identical at the end.

Usage:
  python examples/mixed_precision_distribute.py [--epochs N] [--quick]
      [--json PATH]
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

REPLICAS = 2
GLOBAL_BATCH = 64


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--epochs", type=int, default=8,
                      help="epochs per run (default 8)")
  parser.add_argument("--quick", action="store_true",
                      help="a short run for CI (3 epochs)")
  parser.add_argument("--json", metavar="PATH",
                      help="also write the per-epoch results as JSON to PATH")
  args = parser.parse_args(argv)
  if args.quick:
    args.epochs = 3
  return args


def two_cpus():
  """Splits the CPU into REPLICAS logical devices (before TF initialises)."""
  cpu, = tf.config.list_physical_devices("CPU")
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * REPLICAS)
  return [d.name for d in tf.config.list_logical_devices("CPU")]


def build_model():
  model = tf.keras.Sequential([
      tf.keras.Input((64,)),
      tf.keras.layers.Dense(128, activation="relu"),
      tf.keras.layers.Dense(10),
      tf.keras.layers.Activation("softmax", dtype="float32"),
  ])
  return model


def dynamic_scale():
  return mplso.DynamicLossScale(2**15, increment_period=20)


def report(run, epoch, loss, scale, skipped, steps):
  print(f"{run:6s} epoch {epoch:2d}  loss {loss:.4f}  loss scale "
        f"{scale:8.0f}  skipped {skipped:3d} of {steps} steps", flush=True)
  return {"run": run, "epoch": epoch, "loss": loss, "loss_scale": scale,
          "skipped_steps": skipped, "iterations": steps}


class EpochReport(tf.keras.callbacks.Callback):
  """Prints what LossScaleMonitor put in the epoch's logs."""

  def __init__(self, rows):
    super().__init__()
    self.rows = rows

  def on_epoch_end(self, epoch, logs=None):
    self.rows.append(report(
        "fit", epoch + 1, float(logs["loss"]), float(logs["loss_scale"]),
        int(logs["skipped_steps"]),
        int(self.model.optimizer.iterations.numpy())))


def train_with_fit(strategy, x, y, epochs, rows):
  with strategy.scope():
    model = build_model()
    opt = mplso.keras.LossScaleOptimizer(tf.keras.optimizers.Adam(1e-3),
                                         dynamic_scale())
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
  model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=epochs, verbose=0,
            callbacks=[mplso.keras.LossScaleMonitor(optimizer=opt),
                       EpochReport(rows)])
  return model


def train_custom_loop(strategy, x, y, epochs, rows):
  with strategy.scope():
    model = build_model()
    opt = mplso.keras.LossScaleOptimizer(tf.keras.optimizers.Adam(1e-3),
                                         dynamic_scale())
    # Creates the optimizer's slots now, not inside the first traced step.
    opt.build(model.trainable_variables)
  loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(
      reduction="sum_over_batch_size")
  data = tf.data.Dataset.from_tensor_slices((x, y)).batch(
      GLOBAL_BATCH, drop_remainder=True)
  data = strategy.experimental_distribute_dataset(data)

  def replica_step(features, labels):
    with tf.GradientTape() as tape:
      # Each replica's loss is its share of the global batch's mean.
      loss = loss_fn(labels, model(features, training=True)) / REPLICAS
      scaled_loss = opt.get_scaled_loss(loss)
    grads = opt.get_unscaled_gradients(
        tape.gradient(scaled_loss, model.trainable_variables))
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  @tf.function
  def train_step(features, labels):
    per_replica = strategy.run(replica_step, args=(features, labels))
    return strategy.reduce("SUM", per_replica, axis=None)

  scale_before, skipped = float(opt.loss_scale()), 0
  for epoch in range(1, epochs + 1):
    losses = []
    for features, labels in data:
      losses.append(float(train_step(features, labels)))
      # A skip halves the scale; this loop reads it anyway for the loss.
      scale = float(opt.loss_scale())
      skipped += scale < scale_before
      scale_before = scale
    rows.append(report("custom", epoch, float(np.mean(losses)), scale,
                       skipped, int(opt.iterations.numpy())))
  return model


def replicas_agree(model):
  """True if every variable is the same on both replicas."""
  for var in model.weights:
    values = [v.numpy() for v in getattr(var, "values", [var])]
    if any(not np.array_equal(values[0], v) for v in values[1:]):
      return False
  return True


def main(argv=None):
  args = parse_args(argv)
  devices = two_cpus()
  # On CPU, Grappler fuses float16 MatMul+BiasAdd into a very slow kernel.
  tf.config.optimizer.set_experimental_options({"remapping": False})
  tf.keras.utils.set_random_seed(0)
  tf.keras.mixed_precision.set_global_policy("mixed_float16")
  strategy = tf.distribute.MirroredStrategy(devices)
  print(f"MirroredStrategy with {strategy.num_replicas_in_sync} replicas: "
        f"{', '.join(devices)}", flush=True)

  images, labels = datasets.load_digits()
  x = images.reshape(len(images), -1).astype(np.float32) / 16.
  y = labels.astype(np.int32)

  rows = []
  agree = {}
  for run, train in (("fit", train_with_fit), ("custom", train_custom_loop)):
    model = train(strategy, x, y, args.epochs, rows)
    agree[run] = replicas_agree(model)
    print(f"{run}: replicas hold identical weights: {agree[run]}", flush=True)
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump({"epochs": rows, "replicas_agree": agree}, f, indent=2)


if __name__ == "__main__":
  main(sys.argv[1:])
