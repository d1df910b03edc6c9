"""Corpus: a BERT-style `optimization.py`, manual fp16 with contrib's optimizer.

Style reproduced: the BERT pretraining scripts of TF 1.x days (NVIDIA's
`manual_fp16` path): `import tensorflow.compat.v1 as tf`, an embedding table
(sparse gradients), `create_optimizer` with a polynomial learning-rate decay,
`tf.contrib.mixed_precision.LossScaleOptimizer` with an
`ExponentialUpdateLossScaleManager`, `compute_gradients`, an all-finite flag
that guards `tf.clip_by_global_norm`, `apply_gradients` without
`global_step`, and `global_step` advanced by hand only on finite steps.
TF 2.21 has no tf.contrib; run it unmodified with:

  python -m mplso.compat examples/legacy/contrib_bert_manual_fp16.py

`--overflow_step N` multiplies batch N's dense features by 1e5: the step
must be skipped.
"""

import argparse
import json

import numpy as np
import tensorflow.compat.v1 as tf


def create_optimizer(loss, init_lr, num_train_steps, init_loss_scale=2**15):
  global_step = tf.train.get_or_create_global_step()
  learning_rate = tf.train.polynomial_decay(
      init_lr, global_step, num_train_steps, end_learning_rate=0.0, power=1.0)
  optimizer = tf.train.AdamOptimizer(learning_rate, epsilon=1e-6)
  mixed_precision = tf.contrib.mixed_precision
  loss_scale_manager = mixed_precision.ExponentialUpdateLossScaleManager(
      init_loss_scale=init_loss_scale, incr_every_n_steps=1000,
      decr_every_n_nan_or_inf=2, decr_ratio=0.5)
  optimizer = mixed_precision.LossScaleOptimizer(optimizer, loss_scale_manager)
  tvars = tf.trainable_variables()
  grads_and_vars = optimizer.compute_gradients(loss, tvars)
  grads, tvars = list(zip(*grads_and_vars))
  all_are_finite = tf.reduce_all(
      [tf.reduce_all(tf.is_finite(tf.convert_to_tensor(g))) for g in grads])
  # Clipping by a non-finite norm would zero every gradient: use 1 instead.
  clipped_grads, _ = tf.clip_by_global_norm(
      grads, clip_norm=1.0,
      use_norm=tf.cond(all_are_finite, lambda: tf.global_norm(grads),
                       lambda: tf.constant(1.0)))
  train_op = optimizer.apply_gradients(list(zip(clipped_grads, tvars)))
  new_global_step = tf.cond(all_are_finite, lambda: global_step + 1,
                            lambda: global_step)
  train_op = tf.group(train_op, [global_step.assign(new_global_step)])
  return train_op, optimizer, loss_scale_manager


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--num_train_steps", type=int, default=40)
  parser.add_argument("--overflow_step", type=int, default=-1)
  args = parser.parse_args()
  tf.disable_eager_execution()
  tf.set_random_seed(14)
  tf.config.optimizer.set_experimental_options({"remapping": False})

  rng = np.random.RandomState(14)
  tokens = rng.randint(0, 50, size=(2048, 6))
  dense = rng.normal(size=(2048, 4)).astype(np.float32)
  labels = ((tokens < 25).sum(axis=1) + (dense[:, 0] > 0) > 3).astype(np.int64)

  ids = tf.placeholder(tf.int32, [None, 6])
  x = tf.placeholder(tf.float32, [None, 4])
  y = tf.placeholder(tf.int64, [None])
  table = tf.get_variable("word_embeddings", [50, 16], tf.float32)
  w = tf.get_variable("output_weights", [20, 2], tf.float32)
  pooled = tf.reduce_mean(tf.nn.embedding_lookup(table, ids), axis=1)
  inputs = tf.cast(tf.concat([pooled, x], axis=1), tf.float16)
  logits = tf.cast(tf.matmul(inputs, tf.cast(w, tf.float16)), tf.float32)
  loss = tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
  train_op, optimizer, manager = create_optimizer(loss, 0.05,
                                                  args.num_train_steps)
  global_step = tf.train.get_or_create_global_step()

  losses, skipped, overflow_loss_finite = [], None, None
  with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for step in range(args.num_train_steps):
      idx = rng.randint(0, len(tokens), 64)
      feed = {ids: tokens[idx], y: labels[idx],
              x: dense[idx] * (1e5 if step == args.overflow_step else 1.)}
      before = sess.run([table, w, global_step])
      _, loss_value = sess.run([train_op, loss], feed)
      if step == args.overflow_step:
        after = sess.run([table, w, global_step])
        skipped = all(np.array_equal(b, a) for b, a in zip(before, after))
        overflow_loss_finite = bool(np.isfinite(loss_value))
      else:
        losses.append(float(loss_value))
    variables = sess.run(tf.global_variables())
  print("RESULT " + json.dumps({
      "classes": [f"{type(o).__module__}.{type(o).__name__}"
                  for o in (optimizer, manager)],
      "losses": losses, "skipped": skipped,
      "overflow_loss_finite": overflow_loss_finite,
      "all_finite": all(np.isfinite(v).all() for v in variables)}))


if __name__ == "__main__":
  main()
