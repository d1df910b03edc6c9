"""Trains with checkpoints, for the resume tests; run in a subprocess and killed.

Run as `python -m mplso_test.helpers.workers.resume_worker KIND DIR`. Restores
the latest checkpoint in DIR if there is one, trains up to `resume_kinds.STEPS`
steps (`resume_kinds.EPOCHS` epochs for `keras3_fit`), checkpoints after each,
prints `saved N` after each checkpoint and, as the last line, the final state
as JSON: name -> value. With `RESUME_WORKER_HANG_AFTER=N` it stops after
printing `saved N` and waits to be killed, so that a test kills it at a known
checkpoint. It exits when the test process is gone
(`processes.exit_with_parent`).

Kinds (`resume_kinds.KINDS`): `keras3` (Keras 3 wrapper, eager,
`tf.train.CheckpointManager`), `tf1_function` (TF1 wrapper under
`tf.function`, `CheckpointManager`), `tf1_graph` (TF1 wrapper in graph mode,
`tf.compat.v1.train.Saver`), `keras3_fit` (Keras 3 wrapper, `fit` with
`BackupAndRestore`).
"""

from __future__ import annotations

import json
import os
import sys
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np
import tensorflow as tf

import mplso
import mplso.keras
from mplso_test.helpers import processes
from mplso_test.helpers import resume_kinds

W0 = np.array([[0.5], [-1.], [2.]], np.float32)
POISONED = (2, 6)  # Steps whose batch holds a NaN: skipped.


def batch(step: int) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(step)
  x = rng.normal(size=(4, 3)).astype(np.float32)
  t = rng.normal(size=(4, 1)).astype(np.float32)
  if step in POISONED:
    x[1, 1] = np.nan
  return x, t


def _loss(w, x, t):
  return tf.reduce_sum(tf.square(tf.matmul(x, w) - t))


def _saved(step: int) -> None:
  print(f"saved {step}", flush=True)
  if step == int(os.environ.get("RESUME_WORKER_HANG_AFTER", "-1")):
    threading.Event().wait()  # Until the test kills it.


def _loss_scale():
  return mplso.DynamicLossScale(initial_loss_scale=4., increment_period=2,
                                multiplier=2.)


def _values(variables) -> dict[str, list]:
  return {f"{i}:{v.name}": np.asarray(v).tolist()
          for i, v in enumerate(variables)}


def run_keras3(directory: str) -> dict[str, list]:
  import keras
  w = keras.Variable(W0, name="w")
  opt = mplso.keras.LossScaleOptimizer(keras.optimizers.Adam(0.1),
                                       _loss_scale())
  opt.build([w])
  step = tf.Variable(0, dtype=tf.int64)
  ckpt = tf.train.Checkpoint(w=w, optimizer=opt, step=step)
  manager = tf.train.CheckpointManager(ckpt, directory, max_to_keep=2)
  ckpt.restore(manager.latest_checkpoint)

  @tf.function
  def train(x, t):
    with tf.GradientTape() as tape:
      scaled = opt.get_scaled_loss(_loss(w.value, x, t))
    grads = opt.get_unscaled_gradients(tape.gradient(scaled, [w.value]))
    opt.apply_gradients(zip(grads, [w]))

  while int(step) < resume_kinds.STEPS:
    train(*batch(int(step)))
    step.assign_add(1)
    manager.save()
    _saved(int(step))
  return _values([w, step, *opt.variables])


def run_tf1_function(directory: str) -> dict[str, list]:
  w = tf.Variable(W0, name="w")
  global_step = tf.Variable(0, dtype=tf.int64, name="global_step")
  step = tf.Variable(0, dtype=tf.int64)
  opt = mplso.MixedPrecisionLossScaleOptimizer(
      tf.compat.v1.train.AdamOptimizer(0.1), _loss_scale())
  ckpt = tf.train.Checkpoint(w=w, optimizer=opt, step=step,
                             global_step=global_step)
  manager = tf.train.CheckpointManager(ckpt, directory, max_to_keep=2)
  # Restored lazily: the slots, created by the first step, get their
  # checkpointed values then.
  ckpt.restore(manager.latest_checkpoint)

  @tf.function
  def train(x, t):
    opt.minimize(lambda: _loss(w, x, t), var_list=[w],
                 global_step=global_step)

  while int(step) < resume_kinds.STEPS:
    train(*batch(int(step)))
    step.assign_add(1)
    manager.save()
    _saved(int(step))
  return _values([w, step, global_step, *opt.variables()])


def run_tf1_graph(directory: str) -> dict[str, list]:
  with tf.Graph().as_default():
    x = tf.compat.v1.placeholder(tf.float32, [4, 3])
    t = tf.compat.v1.placeholder(tf.float32, [4, 1])
    w = tf.compat.v1.Variable(W0, name="w")
    global_step = tf.compat.v1.train.get_or_create_global_step()
    step = tf.compat.v1.Variable(0, dtype=tf.int64, name="step")
    opt = mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.AdamOptimizer(0.1), _loss_scale())
    train_op = opt.minimize(_loss(w, x, t), global_step=global_step)
    increment = step.assign_add(1)
    saver = tf.compat.v1.train.Saver(max_to_keep=2)
    variables = [w, step, global_step, *opt.variables()]
    with tf.compat.v1.Session() as session:
      latest = tf.train.latest_checkpoint(directory)
      if latest:
        saver.restore(session, latest)
      else:
        session.run(tf.compat.v1.global_variables_initializer())
      while session.run(step) < resume_kinds.STEPS:
        xs, ts = batch(int(session.run(step)))
        session.run(train_op, {x: xs, t: ts})
        done = session.run(increment)
        saver.save(session, os.path.join(directory, "ckpt"), global_step=done)
        _saved(int(done))
      values = session.run(variables)
      return {f"{i}:{v.name}": np.asarray(value).tolist()
              for i, (v, value) in enumerate(zip(variables, values))}


def run_keras3_fit(directory: str) -> dict[str, list]:
  import keras
  keras.utils.set_random_seed(0)
  model = keras.Sequential([
      keras.Input((3,)),
      keras.layers.Dense(1, use_bias=False,
                         kernel_initializer=keras.initializers.Constant(W0)),
  ])
  opt = mplso.keras.LossScaleOptimizer(keras.optimizers.Adam(0.1),
                                       _loss_scale())
  model.compile(optimizer=opt, loss="mse")
  # Each epoch: one good batch and one with a NaN (skipped), the same every
  # epoch, so that a resumed epoch sees what the uninterrupted one saw.
  (x0, t0), (x1, t1) = batch(0), batch(POISONED[0])
  dataset = tf.data.Dataset.from_tensor_slices(
      (np.concatenate([x0, x1]), np.concatenate([t0, t1]))).batch(4)

  class Saved(keras.callbacks.Callback):

    def on_epoch_end(self, epoch, logs=None):
      _saved(epoch + 1)

  # BackupAndRestore saves after each epoch, before `Saved` reports it.
  model.fit(dataset, epochs=resume_kinds.EPOCHS, shuffle=False, verbose=0,
            callbacks=[keras.callbacks.BackupAndRestore(directory),
                       Saved()])
  return _values([*model.weights, *opt.variables])


# One for each of `resume_kinds.KINDS`.
RUNS = {
    "keras3": run_keras3,
    "tf1_function": run_tf1_function,
    "tf1_graph": run_tf1_graph,
    "keras3_fit": run_keras3_fit,
}
assert tuple(RUNS) == resume_kinds.KINDS, "resume_kinds.KINDS lists the runs"


def main(kind: str, directory: str) -> None:
  processes.exit_with_parent()
  state = RUNS[kind](directory)
  print(json.dumps(state), flush=True)


if __name__ == "__main__":
  main(*sys.argv[1:])
