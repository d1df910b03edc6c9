"""Reads TensorBoard event files back, for the tests of the summaries."""

import glob
import os

import tensorflow as tf


def read_events(log_dir):
  """Returns {tag: [(step, value), ...]} from every event file under log_dir.

  Reads both kinds of scalar record: TF1's `simple_value` and TF2's tensor
  summaries (`tf.summary.write`).
  """
  found = {}
  for path in sorted(glob.glob(os.path.join(log_dir, "**", "events.*"),
                               recursive=True)):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        number = (float(tf.make_ndarray(value.tensor))
                  if value.HasField("tensor") else value.simple_value)
        found.setdefault(value.tag, []).append((event.step, number))
  return found
