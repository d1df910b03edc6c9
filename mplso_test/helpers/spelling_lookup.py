"""Looks up a dotted `tf.a.b` spelling on TensorFlow as it is now.

Used by `install_test`, in its own process and in the fresh processes it
starts.
"""

import tensorflow as tf

MISSING_NAME = "<missing>"


def resolve(spelling):
  """What `spelling` (`tf.a.b`) gives now, or MISSING_NAME."""
  value = tf
  for part in spelling.split(".")[1:]:
    try:
      value = getattr(value, part)
    except AttributeError:
      return MISSING_NAME
  return value
