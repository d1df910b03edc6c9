"""Corpus: a tensor2tensor-style program choosing a contrib loss-scale manager.

Style reproduced: tensor2tensor's `optimize.py` (TF 1.x), where hparams pick
`tf.contrib.mixed_precision.FixedLossScaleManager` or
`ExponentialUpdateLossScaleManager` and `LossScaleOptimizer` wraps the
optimizer; here imported as `from tensorflow.contrib import mixed_precision`,
with the graph spelled `tf.compat.v1` for TF 2.x. A learning-rate schedule on
`global_step` and a `Saver` complete it. TF 2.21 has no tf.contrib; run it
unmodified with:

  python -m mplso.compat examples/legacy/contrib_t2t_loss_scale_manager.py \
      --loss_scaler exponential

`--overflow_step N` multiplies batch N by 1e5: the step must be skipped.
"""

import argparse
import json
import os
import tempfile

import numpy as np
import tensorflow as tf
from tensorflow.contrib import mixed_precision


def loss_scale_manager(name, init_loss_scale=2**12):
  if name == "exponential":
    return mixed_precision.ExponentialUpdateLossScaleManager(
        init_loss_scale=init_loss_scale, incr_every_n_steps=10,
        decr_every_n_nan_or_inf=1, incr_ratio=2, decr_ratio=0.5)
  return mixed_precision.FixedLossScaleManager(init_loss_scale)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--loss_scaler", default="fixed",
                      choices=["fixed", "exponential"])
  parser.add_argument("--overflow_step", type=int, default=-1)
  parser.add_argument("--model_dir", default=tempfile.mkdtemp())
  args = parser.parse_args()
  tf.compat.v1.disable_eager_execution()
  tf.compat.v1.set_random_seed(13)
  tf.config.optimizer.set_experimental_options({"remapping": False})

  rng = np.random.RandomState(13)
  true_w = rng.normal(size=(10, 1)).astype(np.float32)
  features = rng.normal(size=(2048, 10)).astype(np.float32)
  targets = features @ true_w + 0.1 * rng.normal(size=(2048, 1))

  x = tf.compat.v1.placeholder(tf.float32, [None, 10])
  y = tf.compat.v1.placeholder(tf.float32, [None, 1])
  w = tf.compat.v1.get_variable("w", [10, 1], tf.float32,
                                tf.compat.v1.zeros_initializer())
  prediction = tf.matmul(tf.cast(x, tf.float16), tf.cast(w, tf.float16))
  loss = tf.reduce_mean(tf.square(tf.cast(prediction, tf.float32) - y))
  global_step = tf.compat.v1.train.get_or_create_global_step()
  learning_rate = tf.compat.v1.train.exponential_decay(
      0.1, global_step, decay_steps=20, decay_rate=0.5)
  manager = loss_scale_manager(args.loss_scaler)
  opt = mixed_precision.LossScaleOptimizer(
      tf.compat.v1.train.GradientDescentOptimizer(learning_rate), manager)
  train_op = opt.minimize(loss, global_step=global_step)
  saver = tf.compat.v1.train.Saver()

  losses, skipped, overflow_loss_finite, scales = [], None, None, None
  with tf.compat.v1.Session() as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    for step in range(args.steps):
      idx = rng.randint(0, len(features), 64)
      batch = features[idx] * (1e5 if step == args.overflow_step else 1.)
      before = sess.run([w, global_step, manager.get_loss_scale()])
      _, loss_value = sess.run([train_op, loss], {x: batch, y: targets[idx]})
      if step == args.overflow_step:
        after = sess.run([w, global_step, manager.get_loss_scale()])
        skipped = all(np.array_equal(b, a)
                      for b, a in zip(before[:2], after[:2]))
        overflow_loss_finite = bool(np.isfinite(loss_value))
        scales = [float(before[2]), float(after[2])]
      else:
        losses.append(float(loss_value))
    saver.save(sess, os.path.join(args.model_dir, "model.ckpt"), global_step)
    variables = sess.run(tf.compat.v1.global_variables())
  print("RESULT " + json.dumps({
      "classes": [f"{type(o).__module__}.{type(o).__name__}"
                  for o in (opt, manager)],
      "losses": losses, "skipped": skipped,
      "loss_scale_around_overflow": scales,
      "overflow_loss_finite": overflow_loss_finite,
      "all_finite": all(np.isfinite(v).all() for v in variables)}))


if __name__ == "__main__":
  main()
