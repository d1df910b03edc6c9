"""Corpus: a TF1 tower trainer whose feature library traced a tf.function first.

Style reproduced: DeepSpeech-like speech-recognition trainers of TF 1.x days.
The features come from a module-level `tf.function` (as a feature-extraction
library ships one), traced and called eagerly on the audio before the trainer
calls `tf.compat.v1.disable_eager_execution()`. Then the graph: one tower per
device (`with tf.device('/cpu:0')`, here twice), each under
`tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=i > 0)`
and `tf.name_scope('tower_%d' % i)`, a float16 forward pass, per-tower
`compute_gradients`, the towers' gradients averaged, and one
`apply_gradients(avg_grads, global_step=global_step)` through
`tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer(
tf.compat.v1.train.AdamOptimizer(...), "dynamic")`; a `Session` loop. TF 2.21
lacks the optimizer; run it unmodified with:

  python -m mplso.compat examples/legacy/tf1_towers_traced_preamble.py

`--overflow_step N` multiplies the second tower's half of batch N by 1e5, as
a corrupt record would: its float16 forward pass overflows, and the averaged
step must be skipped.
"""

import argparse
import json

import numpy as np
import tensorflow as tf

NUM_SAMPLES = 256
NUM_FEATURES = 32
NUM_CLASSES = 4
NUM_TOWERS = 2


@tf.function(input_signature=[
    tf.TensorSpec([None, NUM_SAMPLES], tf.float32)])
def audio_to_features(samples):
  """Log-magnitude spectrum of each clip: the feature library's function."""
  spectrum = tf.abs(tf.signal.rfft(samples))[:, :NUM_FEATURES]
  return tf.math.log1p(spectrum)


def synthetic_audio(rng, count):
  labels = rng.randint(0, NUM_CLASSES, size=count)
  t = np.arange(NUM_SAMPLES) / NUM_SAMPLES
  tones = np.sin(2 * np.pi * (4 + 6 * labels[:, None]) * t +
                 rng.uniform(0, 2 * np.pi, size=(count, 1)))
  noise = rng.normal(scale=0.5, size=(count, NUM_SAMPLES))
  return (tones + noise).astype(np.float32), labels


def create_model(x):
  w1 = tf.compat.v1.get_variable("layer_1/weights", [NUM_FEATURES, 32],
                                 tf.float32)
  b1 = tf.compat.v1.get_variable("layer_1/bias", [32], tf.float32,
                                 initializer=tf.compat.v1.zeros_initializer())
  w2 = tf.compat.v1.get_variable("layer_2/weights", [32, NUM_CLASSES],
                                 tf.float32)
  hidden = tf.nn.relu(tf.matmul(tf.cast(x, tf.float16),
                                tf.cast(w1, tf.float16)) +
                      tf.cast(b1, tf.float16))
  return tf.cast(tf.matmul(hidden, tf.cast(w2, tf.float16)), tf.float32)


def average_gradients(tower_gradients):
  average_grads = []
  for grad_and_vars in zip(*tower_gradients):
    grads = [tf.expand_dims(g, 0) for g, _ in grad_and_vars]
    grad = tf.reduce_mean(tf.concat(grads, 0), 0)
    average_grads.append((grad, grad_and_vars[0][1]))
  return average_grads


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--learning_rate", type=float, default=0.01)
  parser.add_argument("--overflow_step", type=int, default=-1)
  args = parser.parse_args()
  rng = np.random.RandomState(17)
  audio, labels = synthetic_audio(rng, 2048)
  features = audio_to_features(audio).numpy()  # Eagerly, as the library does.
  features = (features - features.mean(0)) / features.std(0)

  tf.compat.v1.disable_eager_execution()
  tf.compat.v1.set_random_seed(17)
  tf.config.optimizer.set_experimental_options({"remapping": False})
  x = tf.compat.v1.placeholder(tf.float32, [None, NUM_FEATURES])
  y = tf.compat.v1.placeholder(tf.int64, [None])
  global_step = tf.compat.v1.train.get_or_create_global_step()
  optimizer = tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer(
      tf.compat.v1.train.AdamOptimizer(args.learning_rate), "dynamic")

  tower_gradients, tower_losses = [], []
  for i, (tower_x, tower_y) in enumerate(zip(tf.split(x, NUM_TOWERS),
                                             tf.split(y, NUM_TOWERS))):
    with tf.device("/cpu:0"):
      with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(),
                                       reuse=i > 0):
        with tf.name_scope("tower_%d" % i):
          logits = create_model(tower_x)
          avg_loss = tf.reduce_mean(
              tf.nn.sparse_softmax_cross_entropy_with_logits(
                  labels=tower_y, logits=logits))
          tower_gradients.append(optimizer.compute_gradients(avg_loss))
          tower_losses.append(avg_loss)
  avg_grads = average_gradients(tower_gradients)
  loss = tf.reduce_mean(tower_losses)
  train_op = optimizer.apply_gradients(avg_grads, global_step=global_step)

  watched = tf.compat.v1.trainable_variables() + [global_step]
  losses, skipped, overflow_loss_finite = [], None, None
  with tf.compat.v1.Session() as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    for step in range(args.steps):
      idx = rng.randint(0, len(features), 64)
      batch = features[idx].copy()
      if step == args.overflow_step:
        batch[len(batch) // NUM_TOWERS:] *= 1e5
      before = sess.run(watched)
      _, loss_value = sess.run([train_op, loss], {x: batch, y: labels[idx]})
      if step == args.overflow_step:
        after = sess.run(watched)
        skipped = all(np.array_equal(b, a) for b, a in zip(before, after))
        overflow_loss_finite = bool(np.isfinite(loss_value))
      else:
        losses.append(float(loss_value))
    variables = sess.run(tf.compat.v1.global_variables())
    steps_counted = int(sess.run(global_step))
  print("RESULT " + json.dumps({
      "classes": [f"{type(optimizer).__module__}.{type(optimizer).__name__}"],
      "losses": losses, "skipped": skipped,
      "overflow_loss_finite": overflow_loss_finite,
      "global_step": steps_counted,
      "towers": len(tower_gradients),
      "all_finite": all(np.isfinite(v).all() for v in variables)}))


if __name__ == "__main__":
  main()
