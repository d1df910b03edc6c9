"""Tests `stars`: what a star import of a legacy namespace becomes."""

from absl.testing import absltest
from absl.testing import parameterized
import libcst as cst

from mplso._src.upgrade import stars


def _names(*values):
  return [cst.Name(v) for v in values]


class PlanTest(parameterized.TestCase):

  def test_served_whole(self):
    found = stars.plan("tf.contrib.mixed_precision",
                       "tensorflow.contrib.mixed_precision",
                       _names("LossScaleOptimizer"), [])
    self.assertEqual(("from mplso.contrib import *",), found.imports)
    self.assertFalse(found.keep)
    self.assertEqual((), found.unknown)

  def test_names_used_from_a_namespace_tf_lacks(self):
    unbound = _names("Policy", "LossScaleOptimizer", "get_layer_policy")
    found = stars.plan("tf.keras.mixed_precision.experimental",
                       "tensorflow.keras.mixed_precision.experimental",
                       unbound, ["tf.keras.mixed_precision.experimental"])
    self.assertEqual(("from mplso.keras import LossScaleOptimizer",
                      "from mplso.compat import Policy"), found.imports)
    self.assertFalse(found.keep)
    self.assertEqual([unbound[2]], list(found.unknown))
    self.assertIn("may have come from `from tensorflow.keras.mixed_precision"
                  ".experimental import *`", found.unknown_why)

  def test_a_name_another_star_gives_is_not_unknown(self):
    found = stars.plan(
        "tf.keras.mixed_precision.experimental", "x",
        _names("Policy", "FixedLossScaleManager"),
        ["tf.keras.mixed_precision.experimental",
         "tf.contrib.mixed_precision"])
    self.assertEqual((), found.unknown)

  def test_reexport_of_a_namespace_tf_lacks(self):
    found = stars.plan("tf.mixed_precision.experimental", "x", [], [])
    self.assertEqual(
        ("from mplso import DynamicLossScale, FixedLossScale, LossScale",),
        found.imports)
    self.assertIn("re-exports them", found.why)

  def test_a_namespace_tf_has_stays(self):
    found = stars.plan("tf.compat.v1.mixed_precision", "x",
                       _names("LossScale"), [])
    self.assertTrue(found.keep)
    self.assertEqual(("from mplso import LossScale",), found.imports)
    self.assertEqual("x; from mplso import LossScale", found.new("x"))
    # Nothing used: it stays, and gives what TF 2.21 has there.
    self.assertIsNone(
        stars.plan("tf.compat.v1.mixed_precision", "x", [], []))

  def test_private_module(self):
    found = stars.plan("tf.python.keras.mixed_precision.loss_scale_optimizer",
                       "x", _names("LossScaleOptimizerV1"), [])
    self.assertEqual(
        ("from mplso.keras import LossScaleOptimizer as "
         "LossScaleOptimizerV1",), found.imports)

  @parameterized.parameters("tf", "tf.keras", "numpy", "tf.contrib")
  def test_other_namespaces(self, namespace):
    self.assertIsNone(stars.plan(namespace, "x", _names("LossScale"), []))
    self.assertFalse(stars.handles(namespace))

  def test_gives(self):
    self.assertTrue(stars.gives("tf.contrib.mixed_precision",
                                "LossScaleManager"))
    self.assertTrue(stars.gives("tf.train.experimental", "LossScale"))
    self.assertFalse(stars.gives("tf.train.experimental", "PythonState"))


if __name__ == "__main__":
  absltest.main()
