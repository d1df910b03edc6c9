"""One worker of a two-process MultiWorkerMirroredStrategy underflow-meter run.

Run as `python -m mplso_test.helpers.workers.underflow_multiworker_worker`
with `TF_CONFIG` naming this worker. One metered step of a TF1-family
optimizer and of a Keras 3 one: worker 0's replica's gradient for `a` is
[0, 1], worker 1's is [0, 0]. Prints, as the last line of stdout, one JSON
object: family -> this worker's `mplso.underflow_log`.
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
    mplso.meter_underflow(opt, every=1)

    def replica_step(opt=opt, a=a, b=b):
      replica = tf.distribute.get_replica_context().replica_id_in_sync_group
      grad_a = tf.where(tf.equal(replica, 0), tf.constant([0., 1.]),
                        tf.zeros([2]))
      opt.apply_gradients([(grad_a, a), (tf.ones([]), b)])

    @tf.function
    def step(replica_step=replica_step):
      strategy.run(replica_step)

    step()
    out[name] = mplso.underflow_log(opt)
  print(json.dumps(out), flush=True)


if __name__ == "__main__":
  main()
