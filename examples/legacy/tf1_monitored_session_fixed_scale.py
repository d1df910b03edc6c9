"""Corpus: a TF 2.4-era compat.v1 program with MonitoredTrainingSession.

Style reproduced: `import tensorflow as tf` with every TF1 call spelled
`tf.compat.v1...`, as TF 2.x ports of research code were; input from a
`tf.data` one-shot iterator; `tf.compat.v1.mixed_precision.
MixedPrecisionLossScaleOptimizer` (TF 2.4-2.15's spelling) with a fixed
loss scale of 128; `MonitoredTrainingSession` with a `StopAtStepHook`, which
counts `global_step` (a skipped step does not advance it, so the loop runs
one batch more). Run it unmodified with:

  python -m mplso.compat examples/legacy/tf1_monitored_session_fixed_scale.py

`--overflow_step N` multiplies the N-th batch by 1e5 inside the input
pipeline: the float16 forward pass overflows and the step must be skipped,
even under a fixed loss scale.
"""

import argparse
import json

import numpy as np
import tensorflow as tf


def input_fn(overflow_step, batch_size=64):
  rng = np.random.RandomState(11)
  centers = rng.normal(size=(3, 12)).astype(np.float32)
  labels = rng.randint(0, 3, size=2048)
  features = centers[labels] + 0.6 * rng.normal(size=(2048, 12))
  dataset = tf.data.Dataset.from_tensor_slices(
      (features.astype(np.float32), labels)).repeat().batch(batch_size)
  dataset = dataset.enumerate().map(
      lambda i, batch: (tf.where(tf.equal(i, overflow_step), batch[0] * 1e5,
                                 batch[0]),
                        batch[1]))
  return tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--overflow_step", type=int, default=-1)
  args = parser.parse_args()
  tf.compat.v1.disable_eager_execution()
  tf.compat.v1.set_random_seed(11)
  tf.config.optimizer.set_experimental_options({"remapping": False})

  x, y = input_fn(args.overflow_step)
  w = tf.compat.v1.get_variable("w", [12, 3], tf.float32)
  b = tf.compat.v1.get_variable("b", [3], tf.float32,
                                tf.compat.v1.zeros_initializer())
  logits = tf.matmul(tf.cast(x, tf.float16), tf.cast(w, tf.float16))
  logits = tf.cast(logits, tf.float32) + b
  loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(y, logits)
  global_step = tf.compat.v1.train.get_or_create_global_step()
  opt = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
      tf.compat.v1.train.GradientDescentOptimizer(0.5), loss_scale=128)
  train_op = opt.minimize(loss, global_step=global_step)

  def step_fn(step_context):
    # Reads outside the hooks, so that StopAtStepHook counts training steps.
    before = step_context.session.run([w, b, global_step])
    _, loss_value = step_context.run_with_hooks([train_op, loss])
    after = step_context.session.run([w, b, global_step])
    finite = all(np.isfinite(v).all() for v in step_context.session.run(
        tf.compat.v1.global_variables()))
    unchanged = all(np.array_equal(u, v) for u, v in zip(before, after))
    return unchanged, loss_value, finite

  losses, batch, skipped, overflow_loss_finite = [], 0, None, None
  hooks = [tf.compat.v1.train.StopAtStepHook(last_step=args.steps)]
  with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks) as sess:
    while not sess.should_stop():
      unchanged, loss_value, all_finite = sess.run_step_fn(step_fn)
      if batch == args.overflow_step:
        skipped, overflow_loss_finite = unchanged, bool(np.isfinite(loss_value))
      else:
        losses.append(float(loss_value))
      batch += 1
  print("RESULT " + json.dumps({
      "classes": [f"{type(opt).__module__}.{type(opt).__name__}",
                  f"{type(opt.loss_scale).__module__}."
                  f"{type(opt.loss_scale).__name__}"],
      "losses": losses, "skipped": skipped,
      "overflow_loss_finite": overflow_loss_finite, "batches": batch,
      "all_finite": bool(all_finite)}))


if __name__ == "__main__":
  main()
