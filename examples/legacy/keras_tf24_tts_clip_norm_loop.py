"""Corpus: a TTS trainer passing `clip_norm` positionally to apply_gradients.

Style reproduced: TensorFlowTTS-style trainers of TF 2.4-2.15. The optimizer
is an `AdamWeightDecay`, a subclass of the Keras Adam whose
`apply_gradients(grads_and_vars, clip_norm=0.5, name=None, **kwargs)` clips
by global norm first; in mixed precision the trainer wraps it once in
`tf.keras.mixed_precision.LossScaleOptimizer(opt, dynamic=True)`, and the
step, run through `strategy.run` in a `tf.function`, ends with
`optimizer.apply_gradients(zip(gradients, variables), 1.0)`: the 1.0 lands
in the wrapper's second parameter and must reach the wrapped optimizer's
`clip_norm`. With `--legacy_optimizer` the subclass derives from
`tf.keras.optimizers.legacy.Adam`, as such trainers did on TF 2.11+. Run it
unmodified with tf_keras:

  TF_USE_LEGACY_KERAS=1 python -m mplso.compat \\
      examples/legacy/keras_tf24_tts_clip_norm_loop.py

`--overflow_step N` multiplies batch N by 1e5: the step must be skipped.
"""

import argparse
import json

import numpy as np
import tensorflow as tf

# The clip norms AdamWeightDecay.apply_gradients was given (when traced).
CLIP_NORMS = set()


def adam_weight_decay_class(legacy):
  """Returns AdamWeightDecay on the Adam the trainer is configured with."""
  base = tf.keras.optimizers.legacy.Adam if legacy else tf.keras.optimizers.Adam

  class AdamWeightDecay(base):
    """Adam that clips the gradients by global norm before applying them."""

    def apply_gradients(self, grads_and_vars, clip_norm=0.5, name=None,
                        **kwargs):
      CLIP_NORMS.add(float(clip_norm))
      grads, tvars = list(zip(*grads_and_vars))
      (grads, _) = tf.clip_by_global_norm(grads, clip_norm=clip_norm)
      return super().apply_gradients(zip(grads, tvars), name=name, **kwargs)

  return AdamWeightDecay


class Trainer:
  """Holds the strategy, model and optimizer; one `tf.function` step."""

  def __init__(self, config):
    self.config = config
    self._strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    self._is_mixed_precision = config["is_mixed_precision"]
    if self._is_mixed_precision:
      tf.keras.mixed_precision.set_global_policy("mixed_float16")
    with self._strategy.scope():
      self._model = tf.keras.Sequential([
          tf.keras.layers.Dense(64, activation="relu", input_shape=(16,)),
          tf.keras.layers.Dense(8, dtype="float32")])
      self._optimizer = adam_weight_decay_class(config["legacy_optimizer"])(
          learning_rate=config["learning_rate"])
      if self._is_mixed_precision:
        self._optimizer = tf.keras.mixed_precision.LossScaleOptimizer(
            self._optimizer, dynamic=True)
    self._trainable_variables = self._model.trainable_variables

  @tf.function
  def _one_step_forward(self, batch):
    per_replica_losses = self._strategy.run(
        self._one_step_forward_per_replica, args=(batch,))
    return self._strategy.reduce(tf.distribute.ReduceOp.SUM,
                                 per_replica_losses, axis=None)

  def _one_step_forward_per_replica(self, batch):
    features, mels = batch
    with tf.GradientTape() as tape:
      outputs = self._model(features, training=True)
      per_example_losses = tf.reduce_mean(tf.abs(outputs - mels), axis=-1)
      loss = tf.nn.compute_average_loss(
          per_example_losses, global_batch_size=self.config["batch_size"])
      if self._is_mixed_precision:
        scaled_loss = self._optimizer.get_scaled_loss(loss)
    if self._is_mixed_precision:
      scaled_gradients = tape.gradient(scaled_loss, self._trainable_variables)
      gradients = self._optimizer.get_unscaled_gradients(scaled_gradients)
    else:
      gradients = tape.gradient(loss, self._trainable_variables)
    self._optimizer.apply_gradients(
        zip(gradients, self._trainable_variables), 1.0)
    return loss


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--legacy_optimizer", action="store_true")
  parser.add_argument("--overflow_step", type=int, default=-1)
  args = parser.parse_args()
  tf.config.optimizer.set_experimental_options({"remapping": False})
  config = {"batch_size": 32, "learning_rate": 3e-3,
            "is_mixed_precision": True,
            "legacy_optimizer": args.legacy_optimizer}

  rng = np.random.RandomState(7)
  projection = rng.normal(size=(16, 8)).astype(np.float32) / 4
  features = rng.normal(size=(1024, 16)).astype(np.float32)
  mels = np.tanh(features @ projection).astype(np.float32)
  trainer = Trainer(config)

  losses, skipped, overflow_loss_finite = [], None, None
  for step in range(args.steps):
    idx = rng.randint(0, len(features), config["batch_size"])
    batch = features[idx] * (1e5 if step == args.overflow_step else 1.)
    before = trainer._model.get_weights()
    loss = float(trainer._one_step_forward((batch, mels[idx])))
    if step == args.overflow_step:
      skipped = all(np.array_equal(b, a)
                    for b, a in zip(before, trainer._model.get_weights()))
      overflow_loss_finite = bool(np.isfinite(loss))
    else:
      losses.append(loss)
  opt = trainer._optimizer
  variables = opt.variables() if callable(opt.variables) else opt.variables
  print("RESULT " + json.dumps({
      "classes": [f"{type(opt).__module__}.{type(opt).__name__}"],
      "losses": losses, "skipped": skipped,
      "overflow_loss_finite": overflow_loss_finite,
      "clip_norms": sorted(CLIP_NORMS),
      "all_finite": all(np.isfinite(v).all() for v in
                        trainer._model.get_weights() +
                        [v.numpy() for v in variables])}))


if __name__ == "__main__":
  main()
