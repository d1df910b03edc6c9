"""Runs the loss-scale update tests in a fresh process, eager collectives.

Run as `python -m mplso_test.helpers.workers.tf_behaviour_worker Class.test
[...]`. With `tf_behaviour_cases.IN_WORKER` set in its environment, eager
MirroredStrategy all-reduces with collective ops, its default
(integration/tf_loss_scale_behaviour_test reduces through one device in a
shared process). The classes are `tf_behaviour_cases`'s, which that test
imports: no test module is imported here. Splits the CPU into 2 logical
devices and prints, as the last line of stdout, one JSON object:
"Class.test" -> None if it passed, else its traceback or skip reason.
"""

import json
import os
import sys
import unittest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags
import tensorflow as tf

from mplso_test.helpers import processes


def main(test_ids: list[str]) -> None:
  processes.exit_with_parent()
  cpu, = tf.config.list_physical_devices("CPU")
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  # absltest helpers read flags that absltest.main would have parsed.
  flags.FLAGS.mark_as_parsed()
  from mplso_test.helpers import tf_behaviour_cases
  os.environ.setdefault(tf_behaviour_cases.IN_WORKER, "1")

  suite = unittest.defaultTestLoader.loadTestsFromNames(
      [f"{tf_behaviour_cases.__name__}.{test_id}" for test_id in test_ids])
  result = unittest.TestResult()
  suite.run(result)
  out = {test_id: None for test_id in test_ids}
  prefix = f"{tf_behaviour_cases.__name__}."
  for test, text in result.failures + result.errors:
    out[test.id().removeprefix(prefix)] = text
  for test, reason in result.skipped:
    out[test.id().removeprefix(prefix)] = f"skipped: {reason}"
  print(json.dumps(out), flush=True)


if __name__ == "__main__":
  main(sys.argv[1:])
