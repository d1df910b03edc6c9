"""Corpus: a TF1 launcher that sets up GPUs eagerly, then builds its graph.

Style reproduced: NVIDIA's BERT and UNet-3D TF1 launchers. They start as real
programs do, with eager calls before any graph: the GPUs listed by
`tf.config.experimental.list_physical_devices('GPU')` each get
`set_memory_growth` (there are none on a CPU: the call still runs eagerly),
`tf.random.set_seed`, and a `tf.function` helper called once, as an imported
library would. Only then `tf.compat.v1.disable_eager_execution()`, a float32
graph, `tf.compat.v1.train.AdamOptimizer` handed to
`tf.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite(opt,
loss_scale="dynamic")`, `minimize(loss, global_step=...)` and a `Session`
loop. `--optimizer adamw` uses BERT's `optimization.py` instead: an
`AdamWeightDecayOptimizer(tf.compat.v1.train.Optimizer)` whose
`apply_gradients` makes its `adam_m` / `adam_v` with
`tf.compat.v1.get_variable`, gradients clipped by `tf.clip_by_global_norm`,
and `global_step` advanced by hand on every step,
`tf.group(train_op, global_step.assign(global_step + 1))`. TF 2.21 lacks the
rewrite function; run it unmodified:

  python -m mplso.compat examples/legacy/tf1_bert_style_gpu_setup.py

`--overflow_step N` multiplies batch N by 1e38, beyond even float32's range
(on CPU TF leaves the graph in float32; on a GPU the rewritten graph would
overflow float16 long before): the step must be skipped. With `adamw`,
`global_step` counts it anyway, as BERT's does: only the weights and the
Adam moments must stay as they were.
"""

import argparse
import json
import re

import numpy as np
import tensorflow as tf


class AdamWeightDecayOptimizer(tf.compat.v1.train.Optimizer):
  """A basic Adam optimizer that includes "correct" L2 weight decay."""

  def __init__(self, learning_rate, weight_decay_rate=0.0, beta_1=0.9,
               beta_2=0.999, epsilon=1e-6, exclude_from_weight_decay=None,
               name="AdamWeightDecayOptimizer"):
    super().__init__(False, name)
    self.learning_rate = learning_rate
    self.weight_decay_rate = weight_decay_rate
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.exclude_from_weight_decay = exclude_from_weight_decay

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    assignments = []
    for (grad, param) in grads_and_vars:
      if grad is None or param is None:
        continue
      param_name = self._get_variable_name(param.name)
      m = tf.compat.v1.get_variable(
          name=param_name + "/adam_m", shape=param.shape.as_list(),
          dtype=tf.float32, trainable=False,
          initializer=tf.compat.v1.zeros_initializer())
      v = tf.compat.v1.get_variable(
          name=param_name + "/adam_v", shape=param.shape.as_list(),
          dtype=tf.float32, trainable=False,
          initializer=tf.compat.v1.zeros_initializer())
      next_m = (tf.multiply(self.beta_1, m) +
                tf.multiply(1.0 - self.beta_1, grad))
      next_v = (tf.multiply(self.beta_2, v) +
                tf.multiply(1.0 - self.beta_2, tf.square(grad)))
      update = next_m / (tf.sqrt(next_v) + self.epsilon)
      if self._do_use_weight_decay(param_name):
        update += self.weight_decay_rate * param
      next_param = param - self.learning_rate * update
      assignments.extend(
          [param.assign(next_param), m.assign(next_m), v.assign(next_v)])
    return tf.group(*assignments, name=name)

  def _do_use_weight_decay(self, param_name):
    if not self.weight_decay_rate:
      return False
    for r in self.exclude_from_weight_decay or []:
      if re.search(r, param_name) is not None:
        return False
    return True

  def _get_variable_name(self, param_name):
    m = re.match("^(.*):\\d+$", param_name)
    return m.group(1) if m is not None else param_name


@tf.function
def _count_finite(x):
  """A library's input check, traced and called eagerly at start-up."""
  return tf.reduce_sum(tf.cast(tf.math.is_finite(x), tf.int32))


def setup_devices(seed):
  gpus = tf.config.experimental.list_physical_devices("GPU")
  for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
  tf.random.set_seed(seed)
  return gpus


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--optimizer", default="adam", choices=["adam", "adamw"])
  parser.add_argument("--overflow_step", type=int, default=-1)
  args = parser.parse_args()
  gpus = setup_devices(seed=16)
  rng = np.random.RandomState(16)
  centers = rng.normal(size=(4, 16)).astype(np.float32)
  labels = rng.randint(0, 4, size=2048)
  features = (centers[labels] + 0.5 * rng.normal(size=(2048, 16))).astype(
      np.float32)
  assert int(_count_finite(features)) == features.size
  print(f"{len(gpus)} GPU(s), {len(features)} finite records")

  tf.compat.v1.disable_eager_execution()
  tf.compat.v1.set_random_seed(16)
  tf.config.optimizer.set_experimental_options({"remapping": False})
  x = tf.compat.v1.placeholder(tf.float32, [None, 16], name="input_ids")
  y = tf.compat.v1.placeholder(tf.int64, [None], name="labels")
  with tf.compat.v1.variable_scope("bert/encoder"):
    kernel = tf.compat.v1.get_variable("dense/kernel", [16, 32])
    bias = tf.compat.v1.get_variable(
        "dense/bias", [32], initializer=tf.compat.v1.zeros_initializer())
  output_weights = tf.compat.v1.get_variable("output_weights", [32, 4])
  hidden = tf.nn.relu(tf.matmul(x, kernel) + bias)
  logits = tf.matmul(hidden, output_weights)
  loss = tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
  global_step = tf.compat.v1.train.get_or_create_global_step()

  if args.optimizer == "adam":
    opt = tf.compat.v1.train.AdamOptimizer(0.01)
    opt = tf.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite(
        opt, loss_scale="dynamic")
    train_op = opt.minimize(loss, global_step=global_step)
  else:
    opt = AdamWeightDecayOptimizer(
        learning_rate=0.01, weight_decay_rate=0.01,
        exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])
    opt = tf.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite(
        opt, loss_scale="dynamic")
    tvars = tf.compat.v1.trainable_variables()
    grads_and_vars = opt.compute_gradients(loss, tvars)
    grads = [g for g, _ in grads_and_vars]
    (grads, _) = tf.clip_by_global_norm(grads, clip_norm=1.0)
    train_op = opt.apply_gradients(zip(grads, tvars), global_step=global_step)
    # AdamWeightDecayOptimizer doesn't advance the global step: do it here.
    train_op = tf.group(train_op, global_step.assign(global_step + 1))

  # What a skipped step must leave alone: the weights and the Adam moments,
  # and `global_step` where the optimizer advances it.
  watched = tf.compat.v1.trainable_variables() + [
      v for v in tf.compat.v1.global_variables()
      if "/adam_" in v.name or "/Adam" in v.name]
  if args.optimizer == "adam":
    watched.append(global_step)

  losses, skipped, overflow_loss_finite = [], None, None
  with tf.compat.v1.Session() as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    for step in range(args.steps):
      idx = rng.randint(0, len(features), 64)
      batch = features[idx] * (1e38 if step == args.overflow_step else 1.)
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
      "classes": [f"{type(opt).__module__}.{type(opt).__name__}"],
      "losses": losses, "skipped": skipped,
      "overflow_loss_finite": overflow_loss_finite,
      "global_step": steps_counted,
      "all_finite": all(np.isfinite(v).all() for v in variables)}))


if __name__ == "__main__":
  main()
