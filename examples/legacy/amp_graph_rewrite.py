"""Corpus: automatic mixed precision through the TF 1.14-2.3 graph rewrite.

Style reproduced: NVIDIA's and tensorflow/models' TF1 scripts with an
`--amp` switch: a float32 model, `tf.train.experimental.DynamicLossScale`
handed to `tf.train.experimental.enable_mixed_precision_graph_rewrite(opt,
loss_scale)`, which wraps the optimizer and lets Grappler turn the graph to
float16 on GPUs; `import tensorflow.compat.v1 as tf`, `tf.data` input and
`minimize(global_step=...)`. TF 2.21 lacks both functions; run it unmodified:

  python -m mplso.compat examples/legacy/amp_graph_rewrite.py

`--overflow_step N` multiplies batch N by 1e38, beyond even float32's range
(on CPU TF leaves the graph in float32; on a GPU the rewritten graph would
overflow float16 long before): the step must be skipped.
"""

import argparse
import json

import numpy as np
import tensorflow.compat.v1 as tf


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--amp", type=int, default=1)
  parser.add_argument("--overflow_step", type=int, default=-1)
  args = parser.parse_args()
  tf.disable_eager_execution()
  tf.set_random_seed(15)
  tf.config.optimizer.set_experimental_options({"remapping": False})

  rng = np.random.RandomState(15)
  centers = rng.normal(size=(4, 16)).astype(np.float32)
  labels = rng.randint(0, 4, size=2048)
  features = (centers[labels] + 0.5 * rng.normal(size=(2048, 16))).astype(
      np.float32)
  dataset = tf.data.Dataset.from_tensor_slices((features, labels))
  dataset = dataset.repeat().batch(64).enumerate().map(
      lambda i, batch: (batch[0] * tf.where(tf.equal(i, args.overflow_step),
                                            1e38, 1.), batch[1]))
  x, y = tf.data.make_one_shot_iterator(dataset).get_next()

  hidden = tf.nn.relu(tf.matmul(x, tf.get_variable("w1", [16, 32])))
  logits = tf.matmul(hidden, tf.get_variable("w2", [32, 4]))
  loss = tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
  global_step = tf.train.get_or_create_global_step()
  opt = tf.train.MomentumOptimizer(0.05, 0.9)
  if args.amp:
    loss_scale = tf.train.experimental.DynamicLossScale(
        initial_loss_scale=2**15, increment_period=1000, multiplier=2.)
    opt = tf.train.experimental.enable_mixed_precision_graph_rewrite(
        opt, loss_scale)
  train_op = opt.minimize(loss, global_step=global_step)

  losses, skipped, overflow_loss_finite = [], None, None
  with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for step in range(args.steps):
      before = sess.run(tf.trainable_variables() + [global_step])
      _, loss_value = sess.run([train_op, loss])
      if step == args.overflow_step:
        after = sess.run(tf.trainable_variables() + [global_step])
        skipped = all(np.array_equal(b, a) for b, a in zip(before, after))
        overflow_loss_finite = bool(np.isfinite(loss_value))
      else:
        losses.append(float(loss_value))
    variables = sess.run(tf.global_variables())
  print("RESULT " + json.dumps({
      "classes": [f"{type(opt).__module__}.{type(opt).__name__}"] + (
          [f"{type(loss_scale).__module__}.{type(loss_scale).__name__}"]
          if args.amp else []),
      "losses": losses, "skipped": skipped,
      "overflow_loss_finite": overflow_loss_finite,
      "all_finite": all(np.isfinite(v).all() for v in variables)}))


if __name__ == "__main__":
  main()
