"""Corpus: a Horovod TF1 program, the loss scale wrapped around hvd's optimizer.

Style reproduced: Horovod's TF1 examples (`hvd.init()`, learning rate times
`hvd.size()`, `hvd.DistributedOptimizer(opt)`, a per-rank seed, output only
on rank 0) with mixed precision added the way NVIDIA's examples ordered it:
the loss-scale optimizer wraps the distributed one, so the allreduce sees
the scaled gradients. When Horovod is not installed a
one-process stand-in with the same names takes its place. Run it with:

  python -m mplso.compat examples/legacy/horovod_wrapping_order.py

`--overflow_step N` multiplies batch N by 1e5: the step must be skipped.
"""

import argparse
import json

import numpy as np
import tensorflow as tf

try:
  import horovod.tensorflow as hvd
except ImportError:

  class hvd:  # A stand-in for `horovod.tensorflow`.
    """The few Horovod names this program uses, for one process."""

    @staticmethod
    def init():
      pass

    @staticmethod
    def size():
      return 1

    @staticmethod
    def rank():
      return 0

    @staticmethod
    def allreduce(tensor):
      return tensor / hvd.size()  # Average over one process.

    class DistributedOptimizer(tf.compat.v1.train.Optimizer):
      """Averages gradients across processes before they are applied."""

      def __init__(self, optimizer, name="DistributedOptimizer"):
        super().__init__(use_locking=False, name=name)
        self._optimizer = optimizer

      def compute_gradients(self, *args, **kwargs):
        return [(None if g is None else hvd.allreduce(g), v)
                for g, v in self._optimizer.compute_gradients(*args, **kwargs)]

      def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

      def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

      def get_slot_names(self):
        return self._optimizer.get_slot_names()

      def variables(self):
        return self._optimizer.variables()


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--overflow_step", type=int, default=-1)
  args = parser.parse_args()
  tf.compat.v1.disable_eager_execution()
  tf.compat.v1.set_random_seed(12)
  tf.config.optimizer.set_experimental_options({"remapping": False})
  hvd.init()

  rng = np.random.RandomState(12 + hvd.rank())
  centers = rng.normal(size=(4, 16)).astype(np.float32)
  labels = rng.randint(0, 4, size=1024)
  features = centers[labels] + 0.5 * rng.normal(size=(1024, 16))

  x = tf.compat.v1.placeholder(tf.float32, [None, 16])
  y = tf.compat.v1.placeholder(tf.int64, [None])
  w = tf.compat.v1.get_variable("w", [16, 4], tf.float32)
  logits = tf.matmul(tf.cast(x, tf.float16), tf.cast(w, tf.float16))
  loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=y, logits=tf.cast(logits, tf.float32)))
  global_step = tf.compat.v1.train.get_or_create_global_step()
  opt = tf.compat.v1.train.MomentumOptimizer(0.05 * hvd.size(), 0.9)
  opt = hvd.DistributedOptimizer(opt)
  opt = tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer(
      opt, loss_scale="dynamic")
  train_op = opt.minimize(loss, global_step=global_step)

  losses, skipped, overflow_loss_finite = [], None, None
  with tf.compat.v1.Session() as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    for step in range(args.steps):
      idx = rng.randint(0, len(features), 64)
      batch = features[idx] * (1e5 if step == args.overflow_step else 1.)
      before = sess.run([w, global_step])
      _, loss_value = sess.run([train_op, loss], {x: batch, y: labels[idx]})
      if step == args.overflow_step:
        after = sess.run([w, global_step])
        skipped = all(np.array_equal(b, a) for b, a in zip(before, after))
        overflow_loss_finite = bool(np.isfinite(loss_value))
      else:
        losses.append(float(loss_value))
    variables = sess.run(tf.compat.v1.global_variables())
  if hvd.rank() == 0:
    print("RESULT " + json.dumps({
        "classes": [f"{type(opt).__module__}.{type(opt).__name__}",
                    f"{type(opt.loss_scale).__module__}."
                    f"{type(opt.loss_scale).__name__}"],
        "losses": losses, "skipped": skipped,
        "overflow_loss_finite": overflow_loss_finite,
        "all_finite": all(np.isfinite(v).all() for v in variables)}))


if __name__ == "__main__":
  main()
