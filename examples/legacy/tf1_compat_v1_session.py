"""Corpus: a TF 1.x graph program ported with `import tensorflow.compat.v1`.

Style reproduced: the TF 1.15 -> 2.x migration idiom
`import tensorflow.compat.v1 as tf; tf.disable_v2_behavior()`, placeholders
fed from NumPy, `tf.train.experimental.MixedPrecisionLossScaleOptimizer`
(TF 1.14-2.3) around `tf.train.AdamOptimizer`, `minimize(global_step=...)` and
a plain `Session` loop. TF 2.21 lacks the optimizer; run it unmodified with:

  python -m mplso.compat examples/legacy/tf1_compat_v1_session.py

`--overflow_step N` multiplies batch N by 1e5, as a corrupt record would:
the float16 forward pass overflows and the step must be skipped.
"""

import argparse
import json

import numpy as np
import tensorflow.compat.v1 as tf

tf.disable_v2_behavior()


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--overflow_step", type=int, default=-1)
  args = parser.parse_args()
  tf.config.optimizer.set_experimental_options({"remapping": False})
  tf.set_random_seed(10)

  rng = np.random.RandomState(10)
  centers = rng.normal(size=(4, 16)).astype(np.float32)
  labels = rng.randint(0, 4, size=1024)
  features = centers[labels] + 0.5 * rng.normal(size=(1024, 16))

  x = tf.placeholder(tf.float32, [None, 16])
  y = tf.placeholder(tf.int64, [None])
  w1 = tf.get_variable("w1", [16, 32], tf.float32)
  w2 = tf.get_variable("w2", [32, 4], tf.float32)
  hidden = tf.nn.relu(
      tf.matmul(tf.cast(x, tf.float16), tf.cast(w1, tf.float16)))
  logits = tf.cast(tf.matmul(hidden, tf.cast(w2, tf.float16)), tf.float32)
  loss = tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
  global_step = tf.train.get_or_create_global_step()
  opt = tf.train.experimental.MixedPrecisionLossScaleOptimizer(
      tf.train.AdamOptimizer(0.01), loss_scale="dynamic")
  train_op = opt.minimize(loss, global_step=global_step)

  losses, skipped = [], None
  with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for step in range(args.steps):
      idx = rng.randint(0, len(features), 64)
      batch = features[idx] * (1e5 if step == args.overflow_step else 1.)
      before = sess.run([w1, w2, global_step])
      _, loss_value = sess.run([train_op, loss], {x: batch, y: labels[idx]})
      after = sess.run([w1, w2, global_step])
      if step == args.overflow_step:
        skipped = all(np.array_equal(b, a) for b, a in zip(before, after))
        overflow_loss_finite = bool(np.isfinite(loss_value))
      else:
        losses.append(float(loss_value))
    finite = all(np.isfinite(v).all()
                 for v in sess.run(tf.global_variables()))
    print("RESULT " + json.dumps({
        "classes": [f"{type(opt).__module__}.{type(opt).__name__}",
                    f"{type(opt.loss_scale).__module__}."
                    f"{type(opt.loss_scale).__name__}"],
        "losses": losses, "skipped": skipped,
        "overflow_loss_finite": overflow_loss_finite,
        "global_step": int(sess.run(global_step)), "all_finite": finite}))


if __name__ == "__main__":
  main()
