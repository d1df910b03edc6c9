"""One worker of a two-process MultiWorkerMirroredStrategy run, for tests.

Run as `python -m mplso_test.helpers.workers.multiworker_worker FAMILY
[FAMILY ...]` with `TF_CONFIG` naming this worker. Trains each family of
`distribute_families.FAMILIES` on `distribute_families.BATCHES` (one worker's
rows hold the NaN and the Inf) and prints, as the last line of stdout, one JSON
object: family -> state name -> this worker's value.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf

from mplso_test.helpers import distribute_families
from mplso_test.helpers import processes


def main(families: list[str]) -> None:
  processes.exit_with_parent()
  strategy = tf.distribute.MultiWorkerMirroredStrategy()
  out = {}
  for name in families:
    family = distribute_families.FAMILIES[name]()
    with strategy.scope():
      family.build()
    family.train(strategy, distribute_families.BATCHES)
    out[name] = {
        key: [v.tolist() for v in distribute_families.local_values(strategy,
                                                                    value)]
        for key, value in family.state().items()}
  print(json.dumps(out), flush=True)


if __name__ == "__main__":
  main(sys.argv[1:])
