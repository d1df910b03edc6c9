"""A TF 1.15 / 2.x-compat.v1 script using train.experimental, unmodified.

Written against `tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer`
(TF 1.14 to 2.3). Run it on mplso's implementation with:

  python -m mplso.compat examples/legacy/train_experimental_loss_scale.py

A two-layer float16 network on synthetic clusters, graph mode with a Session,
global_step and a Saver that restores and continues, as TF 1.x scripts were
written.
"""

import argparse
import os
import tempfile

import numpy as np
import tensorflow as tf


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--model_dir", default=tempfile.mkdtemp())
  args = parser.parse_args()

  tf.compat.v1.disable_eager_execution()
  tf.config.optimizer.set_experimental_options({"remapping": False})
  rng = np.random.RandomState(1)
  centers = rng.normal(size=(5, 20)).astype(np.float32)
  labels = rng.randint(0, 5, size=4096)
  features = centers[labels] + 0.7 * rng.normal(size=(4096, 20)).astype(
      np.float32)

  x = tf.compat.v1.placeholder(tf.float32, [None, 20])
  y = tf.compat.v1.placeholder(tf.int64, [None])
  w1 = tf.compat.v1.get_variable("w1", [20, 32], tf.float32)
  w2 = tf.compat.v1.get_variable("w2", [32, 5], tf.float32)
  hidden = tf.nn.relu(tf.matmul(tf.cast(x, tf.float16), tf.cast(w1, tf.float16)))
  logits = tf.matmul(hidden, tf.cast(w2, tf.float16))
  loss = tf.reduce_mean(tf.compat.v1.nn.sparse_softmax_cross_entropy_with_logits(
      labels=y, logits=tf.cast(logits, tf.float32)))
  global_step = tf.compat.v1.train.get_or_create_global_step()
  opt = tf.compat.v1.train.AdamOptimizer(0.01)
  opt = tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer(
      opt, loss_scale="dynamic")
  print(f"optimizer {type(opt).__module__}.{type(opt).__name__}")
  train_op = opt.minimize(loss, global_step=global_step)
  saver = tf.compat.v1.train.Saver()
  checkpoint = os.path.join(args.model_dir, "model.ckpt")

  with tf.compat.v1.Session() as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    half = args.steps // 2
    for _ in range(half):
      idx = rng.randint(0, len(features), 128)
      _, loss_value = sess.run([train_op, loss],
                               {x: features[idx], y: labels[idx]})
      # Read after the step: fetched with train_op, global_step could be
      # read before or after its increment.
      step = sess.run(global_step)
      if step % 50 == 0 or step == 1:
        print(f"step {step:4d}  loss {loss_value:.4f}", flush=True)
    path = saver.save(sess, checkpoint, global_step=global_step)
    print(f"saved {path}")

  with tf.compat.v1.Session() as sess:
    saver.restore(sess, tf.compat.v1.train.latest_checkpoint(args.model_dir))
    print(f"restored at step {sess.run(global_step)}")
    for _ in range(args.steps - half):
      idx = rng.randint(0, len(features), 128)
      _, loss_value = sess.run([train_op, loss],
                               {x: features[idx], y: labels[idx]})
      # Read after the step: fetched with train_op, global_step could be
      # read before or after its increment.
      step = sess.run(global_step)
      if step % 50 == 0:
        print(f"step {step:4d}  loss {loss_value:.4f}", flush=True)
    print(f"final loss {sess.run(loss, {x: features, y: labels}):.4f}")


if __name__ == "__main__":
  main()
