"""A one-process ParameterServerStrategy cluster that tries mplso, for tests.

Run as `python -m mplso_test.helpers.workers.parameter_server_worker`. Starts a
parameter server and a worker in this process on free ports of 127.0.0.1, then,
for each optimizer family, (1) builds a dynamic loss scale in the strategy's
scope and (2) runs one step with a fixed loss scale (which has no variables)
through a `ClusterCoordinator`. Prints, as the last line of stdout, one JSON
object: "{family}_{create|step}" -> the error message, or null if nothing was
raised. The process exits with its servers.
"""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# pylint: disable=g-import-not-at-top,wrong-import-position
import keras
import tensorflow as tf
import tf_keras

import mplso
import mplso.keras
from mplso_test.helpers import processes
from mplso_test.helpers import testing

FAMILIES = {
    "v1": lambda loss_scale: mplso.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(1.), loss_scale),
    "keras3": lambda loss_scale: mplso.keras.LossScaleOptimizer(
        keras.optimizers.SGD(1.), loss_scale),
    "optimizer_v2": lambda loss_scale: mplso.keras.LossScaleOptimizer(
        tf_keras.optimizers.legacy.SGD(1.), loss_scale),
    "tf_keras": lambda loss_scale: mplso.keras.LossScaleOptimizer(
        tf_keras.optimizers.SGD(1.), loss_scale),
}


def _error(fn):
  try:
    fn()
  except ValueError as e:
    return str(e)
  return None


def main():
  processes.exit_with_parent()
  ps_port, worker_port = testing.free_ports(2)
  cluster = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{ps_port}"],
                                  "worker": [f"127.0.0.1:{worker_port}"]})
  for job in ("ps", "worker"):
    tf.distribute.Server(cluster, job_name=job, task_index=0,
                         protocol="grpc", start=True)
  strategy = tf.distribute.experimental.ParameterServerStrategy(
      tf.distribute.cluster_resolver.SimpleClusterResolver(
          cluster, rpc_layer="grpc"))
  coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
  out = {}
  for name, make in FAMILIES.items():

    def create(make=make):
      with strategy.scope():
        make("dynamic")

    out[f"{name}_create"] = _error(create)
    with strategy.scope():
      var = tf.Variable([1.])
      opt = make(8)

    @tf.function
    def step(opt=opt, var=var):
      strategy.run(lambda: opt.apply_gradients([(tf.constant([1.]), var)]))

    def schedule(step=step):
      coordinator.schedule(step)
      coordinator.join()

    out[f"{name}_step"] = _error(schedule)
  print(json.dumps(out), flush=True)


if __name__ == "__main__":
  main()
