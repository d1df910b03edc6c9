"""Corpus: a TF 2.2/2.3 `tf.distribute` custom loop with the Keras loss scale.

Style reproduced: the TF 2.2-2.3 "custom training with tf.distribute"
tutorial with mixed precision added as OpenNMT-tf 2.x and similar trainers
did: model and `tf.keras.mixed_precision.experimental.LossScaleOptimizer(opt,
'dynamic')` built under `MirroredStrategy.scope()`, a per-replica step with
`get_scaled_loss` / `get_unscaled_gradients` run by `strategy.run`, losses
scaled by the global batch size and summed with `strategy.reduce`. Run it
unmodified with:

  python -m mplso.compat examples/legacy/keras_tf23_mirrored_custom_loop.py

`--num_cpu_replicas 2` splits the CPU into that many devices (on a GPU
machine each GPU is a replica). `--overflow_step N` multiplies the first
half of global batch N by 1e5, which lands on one replica only: every
replica must skip that step together.
"""

import argparse
import json

import numpy as np
import tensorflow as tf


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--num_cpu_replicas", type=int, default=2)
  parser.add_argument("--overflow_step", type=int, default=-1)
  args = parser.parse_args()
  cpu, = tf.config.list_physical_devices("CPU")
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * args.num_cpu_replicas)
  tf.config.optimizer.set_experimental_options({"remapping": False})
  tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
  strategy = tf.distribute.MirroredStrategy(
      [d.name for d in tf.config.list_logical_devices("CPU")])

  rng = np.random.RandomState(21)
  centers = rng.normal(size=(4, 16)).astype(np.float32)
  labels = rng.randint(0, 4, size=64 * args.steps)
  features = (centers[labels] + 0.5 * rng.normal(size=(len(labels), 16))
              ).astype(np.float32)
  if args.overflow_step >= 0:
    features[64 * args.overflow_step:64 * args.overflow_step + 32] *= 1e5
  dataset = strategy.experimental_distribute_dataset(
      tf.data.Dataset.from_tensor_slices((features, labels)).batch(64))

  with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(32, activation="relu", input_shape=(16,)),
        tf.keras.layers.Dense(4),
        tf.keras.layers.Activation("linear", dtype="float32")])
    optimizer = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
        tf.keras.optimizers.Adam(0.01), "dynamic")
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="none")

  def step_fn(x, y):
    with tf.GradientTape() as tape:
      per_example = loss_object(y, model(x, training=True))
      loss = tf.nn.compute_average_loss(per_example, global_batch_size=64)
      scaled_loss = optimizer.get_scaled_loss(loss)
    scaled_gradients = tape.gradient(scaled_loss, model.trainable_variables)
    gradients = optimizer.get_unscaled_gradients(scaled_gradients)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss

  @tf.function
  def train_step(x, y):
    per_replica_losses = strategy.run(step_fn, args=(x, y))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses,
                           axis=None)

  def replica_values():
    return [np.stack([t.numpy()
                      for t in strategy.experimental_local_results(v)])
            for v in model.trainable_variables]

  losses, skipped, overflow_loss_finite = [], None, None
  for step, (x, y) in enumerate(dataset):
    before = replica_values()
    loss = float(train_step(x, y))
    if step == args.overflow_step:
      skipped = all(np.array_equal(b, a)
                    for b, a in zip(before, replica_values()))
      overflow_loss_finite = bool(np.isfinite(loss))
    else:
      losses.append(loss)
  values = replica_values()
  print("RESULT " + json.dumps({
      "classes": [f"{type(o).__module__}.{type(o).__name__}"
                  for o in (optimizer, optimizer.loss_scale)],
      "replicas": strategy.num_replicas_in_sync,
      "replicas_agree": all(np.array_equal(v[0], r) for v in values
                            for r in v[1:]),
      "losses": losses, "skipped": skipped,
      "overflow_loss_finite": overflow_loss_finite,
      "all_finite": all(np.isfinite(v).all() for v in values)}))


if __name__ == "__main__":
  main()
