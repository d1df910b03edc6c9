"""Corpus: a translation trainer taking gradients with `get_gradients`.

Style reproduced: the trainers of TF 2.4-2.10 translation toolkits: the
optimizer is wrapped once in `tf.keras.mixed_precision.LossScaleOptimizer(
optimizer)`, a `tf.function` computes each batch's gradients with
`optimizer.get_gradients(loss, variables)` (which scales and unscales by
itself) and adds them to accumulator variables, and another `tf.function`
applies the accumulated gradients every `--accum_steps` batches. On TF 2.21
with tf_keras the optimizer is a new-style `tf.keras.optimizers.Adam`, and
tf_keras's own `LossScaleOptimizer` has no `get_gradients`
(AttributeError). Run it unmodified with:

  TF_USE_LEGACY_KERAS=1 python -m mplso.compat \\
      examples/legacy/keras_tf24_translation_get_gradients.py

`--overflow_step N` multiplies the batches of update N by 1e5: that update
must be skipped.
"""

import argparse
import json

import numpy as np
import tensorflow as tf


class GradientAccumulator:
  """Sums gradients over several batches, in one variable per gradient."""

  def __init__(self, variables):
    self.gradients = [tf.Variable(tf.zeros_like(v), trainable=False)
                      for v in variables]

  def __call__(self, gradients):
    for accum, grad in zip(self.gradients, gradients):
      accum.assign_add(grad)

  def reset(self):
    for accum in self.gradients:
      accum.assign(tf.zeros_like(accum))


class Trainer:
  """Accumulates gradients with `get_gradients`, then applies them."""

  def __init__(self, model, optimizer, mixed_precision=True):
    if mixed_precision:
      optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
    self._model = model
    self._optimizer = optimizer
    self._gradient_accumulator = GradientAccumulator(model.trainable_weights)

  def _run_model(self, source, target):
    logits = self._model(source, training=True)
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(target, logits))

  @tf.function
  def _accumulate_gradients(self, source, target):
    loss = self._run_model(source, target)
    gradients = self._optimizer.get_gradients(loss,
                                              self._model.trainable_weights)
    self._gradient_accumulator(gradients)
    return loss

  @tf.function
  def _apply_gradients(self, accum_steps):
    gradients = [g / accum_steps for g in self._gradient_accumulator.gradients]
    self._optimizer.apply_gradients(
        list(zip(gradients, self._model.trainable_weights)))
    self._gradient_accumulator.reset()

  def __call__(self, batches):
    """Runs one update on `batches`; returns their mean loss."""
    losses = [float(self._accumulate_gradients(source, target))
              for source, target in batches]
    self._apply_gradients(float(len(batches)))
    return float(np.mean(losses))


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=30)
  parser.add_argument("--accum_steps", type=int, default=2)
  parser.add_argument("--overflow_step", type=int, default=-1)
  args = parser.parse_args()
  tf.config.optimizer.set_experimental_options({"remapping": False})
  tf.keras.mixed_precision.set_global_policy("mixed_float16")

  rng = np.random.RandomState(11)
  vocab, dim = 16, 24
  embeddings = rng.normal(size=(vocab, dim)).astype(np.float32)
  model = tf.keras.Sequential([
      tf.keras.layers.Dense(64, activation="relu", input_shape=(dim,)),
      tf.keras.layers.Dense(vocab, dtype="float32")])
  trainer = Trainer(model, tf.keras.optimizers.Adam(3e-3))

  losses, skipped, overflow_loss_finite = [], None, None
  for step in range(args.steps):
    batches = []
    for _ in range(args.accum_steps):
      target = rng.randint(0, vocab, 32)
      source = embeddings[target] + 0.1 * rng.normal(size=(32, dim))
      source *= 1e5 if step == args.overflow_step else 1.
      batches.append((source.astype(np.float32), target.astype(np.int32)))
    before = model.get_weights()
    loss = trainer(batches)
    if step == args.overflow_step:
      skipped = all(np.array_equal(b, a)
                    for b, a in zip(before, model.get_weights()))
      overflow_loss_finite = bool(np.isfinite(loss))
    else:
      losses.append(loss)
  opt = trainer._optimizer
  print("RESULT " + json.dumps({
      "classes": [f"{type(opt).__module__}.{type(opt).__name__}"],
      "losses": losses, "skipped": skipped,
      "overflow_loss_finite": overflow_loss_finite,
      "all_finite": all(np.isfinite(v).all() for v in
                        model.get_weights() +
                        [v.numpy() for v in opt.variables])}))


if __name__ == "__main__":
  main()
