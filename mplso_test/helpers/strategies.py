"""The mirrored strategy the tests build, on conftest's logical CPUs."""

from __future__ import annotations

import tensorflow as tf


def mirrored(replicas: int = 2) -> tf.distribute.MirroredStrategy:
  """Returns a `MirroredStrategy` over `replicas` logical CPUs.

  Its values are reduced through one device: collective all-reduce groups
  and instances are numbered per process, so a strategy of another size than
  an earlier test's would clash with them.

  Args:
    replicas: how many replicas, on `/cpu:0` to `/cpu:{replicas - 1}`.
  """
  return tf.distribute.MirroredStrategy(
      [f"/cpu:{i}" for i in range(replicas)],
      cross_device_ops=tf.distribute.ReductionToOneDevice())
