"""A TF 1.x training script using tf.contrib.mixed_precision, unmodified.

TF 2.21 has no tf.contrib; run it with mplso:

  python -m mplso.compat examples/legacy/contrib_loss_scale.py --steps 300

Softmax regression in float16 on synthetic clusters, graph mode with a
Session, global_step and a Saver, as TF 1.x scripts were written (with the
tf.compat.v1 spellings TF 2.21 requires).
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
  rng = np.random.RandomState(0)
  centers = rng.normal(size=(4, 16)).astype(np.float32)
  labels = rng.randint(0, 4, size=2048)
  features = centers[labels] + 0.5 * rng.normal(size=(2048, 16)).astype(
      np.float32)

  x = tf.compat.v1.placeholder(tf.float32, [None, 16])
  y = tf.compat.v1.placeholder(tf.int64, [None])
  w = tf.compat.v1.get_variable("w", [16, 4], tf.float32,
                                tf.compat.v1.zeros_initializer())
  logits = tf.matmul(tf.cast(x, tf.float16), tf.cast(w, tf.float16))
  loss = tf.reduce_mean(tf.compat.v1.nn.sparse_softmax_cross_entropy_with_logits(
      labels=y, logits=tf.cast(logits, tf.float32)))
  global_step = tf.compat.v1.train.get_or_create_global_step()
  opt = tf.contrib.mixed_precision.LossScaleOptimizer(
      tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
      tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager(
          init_loss_scale=2**15, incr_every_n_steps=100))
  train_op = opt.minimize(loss, global_step=global_step)
  saver = tf.compat.v1.train.Saver()

  with tf.compat.v1.Session() as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    for _ in range(args.steps):
      idx = rng.randint(0, len(features), 128)
      _, loss_value = sess.run([train_op, loss],
                               {x: features[idx], y: labels[idx]})
      # Read after the step: fetched with train_op, global_step could be
      # read before or after its increment.
      step = sess.run(global_step)
      if step % 50 == 0 or step == 1:
        print(f"step {step:4d}  loss {loss_value:.4f}", flush=True)
    path = saver.save(sess, os.path.join(args.model_dir, "model.ckpt"),
                      global_step=global_step)
    print(f"final loss {sess.run(loss, {x: features, y: labels}):.4f}, "
          f"saved {path}")


if __name__ == "__main__":
  main()
