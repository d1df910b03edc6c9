"""One worker of a two-process MultiWorkerMirroredStrategy overflow-log run.

Run as `python -m mplso_test.helpers.workers.overflow_multiworker_worker` with
`TF_CONFIG` naming this worker. Two steps of a TF1-family optimizer and of a
Keras 3 one; in the second, only worker 1's replica makes a NaN gradient for
`a`. Prints, as the last line of stdout, one JSON object: family -> this
worker's `mplso.overflow_log`.
"""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# pylint: disable=g-import-not-at-top,wrong-import-position
import keras
import tensorflow as tf

import mplso
import mplso.keras
from mplso_test.helpers import processes


def _optimizers():
  return {
      "v1": lambda: mplso.MixedPrecisionLossScaleOptimizer(
          tf.compat.v1.train.GradientDescentOptimizer(1.), 8),
      "keras_3": lambda: mplso.keras.LossScaleOptimizer(
          keras.optimizers.SGD(1.), 8),
  }


def main() -> None:
  processes.exit_with_parent()
  strategy = tf.distribute.MultiWorkerMirroredStrategy()
  out = {}
  for name, make in _optimizers().items():
    variable = keras.Variable if name == "keras_3" else tf.Variable
    with strategy.scope():
      a = variable([1., 2.], name="a")
      b = variable(0., name="b")
      opt = make()

    def replica_step(poison, opt=opt, a=a, b=b):
      replica = tf.distribute.get_replica_context().replica_id_in_sync_group
      bad = tf.logical_and(tf.equal(replica, 1), poison)
      grad_a = tf.where(bad, tf.constant([float("nan"), 1.]), tf.ones([2]))
      opt.apply_gradients([(grad_a, a), (tf.ones([]), b)])

    @tf.function
    def step(poison, replica_step=replica_step):
      strategy.run(replica_step, args=(poison,))

    step(tf.constant(False))
    step(tf.constant(True))
    out[name] = mplso.overflow_log(opt)
  print(json.dumps(out), flush=True)


if __name__ == "__main__":
  main()
