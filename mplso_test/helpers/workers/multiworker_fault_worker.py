"""One worker of a two-worker MultiWorkerMirroredStrategy run that checkpoints.

Run as `python -m mplso_test.helpers.workers.multiworker_fault_worker DIR` with
`TF_CONFIG` naming this worker. Restores the latest checkpoint in DIR, if there
is one, and prints `restored N` (N steps were done before). Then, for each batch
of `distribute_families.BATCHES` left (worker 1's rows of two of them hold a NaN
and an Inf), trains one step of every family of
`distribute_families.MOMENTUM_FAMILIES` and checkpoints with
`tf.train.CheckpointManager`: the chief into DIR, worker 1 into its own
temporary directory, deleted after each save, as TF's multi-worker checkpoint
guide does. After each checkpoint it prints `saved N STATE`: N steps are done,
and STATE, as JSON, is family -> name -> this worker's value.

With `FAULT_WORKER_HANG_AFTER=N` it stops after printing `saved N` and waits
to be killed, so that a test can kill it at a known checkpoint. A collective
whose peer died waits until the test kills its worker; every worker exits
when the test process is gone (`processes.exit_with_parent`).
"""

from __future__ import annotations

import json
import os
import sys
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf

from mplso_test.helpers import distribute_families
from mplso_test.helpers import processes


def state(strategy, family) -> dict[str, list]:
  """This worker's weights, slots, loss scale and counters of `family`."""
  opt = family.opt
  named = {**family.state(),
           **{f"slot:{name}": opt.get_slot(family.w, name)
              for name in opt.get_slot_names()}}
  return {name: distribute_families.local_values(strategy, value)[0].tolist()
          for name, value in named.items()}


def _step_function(strategy, family):

  @tf.function(autograph=False)
  def step(x, t):
    strategy.run(
        lambda x, t: family.replica_step(
            *distribute_families.replica_slice(x, t)),
        args=(x, t))

  return step


def main(directory: str) -> None:
  processes.exit_with_parent()
  strategy = tf.distribute.MultiWorkerMirroredStrategy()
  families = {name: make() for name, make in
              distribute_families.MOMENTUM_FAMILIES.items()}
  with strategy.scope():
    for family in families.values():
      family.build()
    done = tf.Variable(0, dtype=tf.int64, trainable=False, name="done")
  checkpoint = tf.train.Checkpoint(
      done=done, **{name: tf.train.Checkpoint(**family.trackables())
                    for name, family in families.items()})
  resolver = strategy.cluster_resolver
  chief = resolver.task_id == 0
  write_directory = directory if chief else os.path.join(
      directory, f"workertemp_{resolver.task_id}")
  manager = tf.train.CheckpointManager(checkpoint, write_directory,
                                       max_to_keep=2)
  # Every worker restores the chief's checkpoint. The TF1 slots, made by the
  # first step, get their values when they are created.
  latest = tf.train.latest_checkpoint(directory)
  if latest:
    checkpoint.restore(latest).assert_existing_objects_matched()
  print(f"restored {int(done.numpy())}", flush=True)
  hang_after = int(os.environ.get("FAULT_WORKER_HANG_AFTER", "-1"))
  steps = [_step_function(strategy, family) for family in families.values()]
  for index in range(int(done.numpy()), len(distribute_families.BATCHES)):
    x, t = distribute_families.BATCHES[index]
    for step in steps:
      step(tf.constant(x), tf.constant(t))
    done.assign_add(1)
    manager.save()
    if not chief:
      tf.io.gfile.rmtree(write_directory)
    states = {name: {**state(strategy, family), "done": int(done.numpy())}
              for name, family in families.items()}
    print(f"saved {index + 1} {json.dumps(states)}", flush=True)
    if index + 1 == hang_after:
      threading.Event().wait()  # Until the test kills it.

if __name__ == "__main__":
  main(*sys.argv[1:])
