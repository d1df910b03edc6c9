"""pytest setup shared by every test module."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Logical CPU devices that `pytest_configure` splits the CPU into.
LOGICAL_CPUS = 4


def pytest_collection_modifyitems(config, items):
  # tf.test.TestCase has a helper method named `test_session` (a context
  # manager, not a test) that pytest collects and TF then skips as "Not a
  # test". Deselect it so that every reported skip is one of ours.
  deselected = [i for i in items if i.name == "test_session"]
  if deselected:
    config.hook.pytest_deselected(items=deselected)
    items[:] = [i for i in items if i.name != "test_session"]


def pytest_configure(config):
  del config
  # absltest helpers such as create_tempdir() read absl flags, which pytest
  # (unlike absltest.main) does not parse: take their defaults.
  from absl import flags  # pylint: disable=g-import-not-at-top
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
  # On CPU, Grappler's remapper fuses float16 MatMul+BiasAdd into a path
  # hundreds of times slower; mixed-precision tests turn it off, as the docs
  # tell CPU users to.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  # Four logical CPUs, so MirroredStrategy tests have several replicas on
  # one machine. This must happen before anything initialises the runtime;
  # tests that use one device are unaffected.
  cpu, = tf.config.list_physical_devices("CPU")
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * LOGICAL_CPUS)
  tf.config.optimizer.set_experimental_options({"remapping": False})
