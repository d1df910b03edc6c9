"""`mplso._src.compat.usage`: which mplso classes a legacy script built.

The runner's report end to end is in install_test; here the module's parts.
`watch()` patches classes for the rest of its process, so it runs in a
subprocess.
"""

import os
import subprocess
import sys
import textwrap
from unittest import mock

from absl.testing import absltest

import mplso
from mplso._src.compat import policy as compat_policy
from mplso._src.compat import usage
from mplso._src.keras import factory

ROOT = os.path.abspath(os.path.join(__file__, "..", "..", ".."))


class WatchedClassesTest(absltest.TestCase):

  def test_public_classes_map_to_their_public_names(self):
    watched = usage._watched_classes()  # pylint: disable=protected-access
    self.assertEqual("mplso.FixedLossScale", watched[mplso.FixedLossScale])
    self.assertEqual("mplso.DynamicLossScale",
                     watched[mplso.DynamicLossScale])
    self.assertEqual("mplso.MixedPrecisionLossScaleOptimizer",
                     watched[mplso.MixedPrecisionLossScaleOptimizer])

  def test_factories_are_replaced_by_the_classes_they_build(self):
    watched = usage._watched_classes()  # pylint: disable=protected-access
    self.assertNotIn(factory.LossScaleOptimizer, watched)
    self.assertNotIn(compat_policy.Policy, watched)
    wrappers = factory.wrapper_classes()
    self.assertNotEmpty(wrappers)
    for cls in wrappers:
      self.assertEqual("mplso.keras.LossScaleOptimizer", watched[cls])
    self.assertEqual("mplso.compat.Policy",
                     watched[compat_policy.policy_base_class()])

  def test_public_name_follows_the_mro(self):
    watched = {mplso.LossScale: "mplso.LossScale",
               mplso.FixedLossScale: "mplso.FixedLossScale"}
    fixed = mplso.FixedLossScale(2.)
    # pylint: disable=protected-access
    self.assertEqual("mplso.FixedLossScale",
                     usage._public_name(fixed, watched))
    # A subclass with no name of its own reports its nearest public base.
    self.assertEqual("mplso.LossScale", usage._public_name(
        fixed, {mplso.LossScale: "mplso.LossScale"}))
    self.assertIsNone(usage._public_name(object(), watched))


class ReportTest(absltest.TestCase):

  def test_nothing_used(self):
    with mock.patch.dict(usage._used, clear=True):  # pylint: disable=protected-access
      self.assertStartsWith(usage.report(),
                            "mplso.compat: the script used no mplso class")

  def test_names_in_the_order_first_used(self):
    with mock.patch.dict(usage._used, clear=True):  # pylint: disable=protected-access
      usage._used.update(dict.fromkeys(  # pylint: disable=protected-access
          ["mplso.DynamicLossScale", "mplso.FixedLossScale"]))
      self.assertEqual(
          "mplso.compat: used mplso.DynamicLossScale, mplso.FixedLossScale",
          usage.report())


class WatchTest(absltest.TestCase):

  def test_records_each_class_once_and_keeps_init_working(self):
    code = textwrap.dedent("""
        import mplso
        from mplso._src.compat import usage
        usage.watch()
        print(usage.report())
        dynamic = mplso.DynamicLossScale(initial_loss_scale=16.)
        mplso.FixedLossScale(2.)
        mplso.DynamicLossScale()
        print(usage.report())
        print(mplso.DynamicLossScale.__init__.__name__,
              float(dynamic.initial_loss_scale))
        """)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True,
        text=True, timeout=240,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
             "CUDA_VISIBLE_DEVICES": ""})
    self.assertEqual(0, proc.returncode, proc.stderr[-4000:])
    lines = proc.stdout.strip().splitlines()[-3:]
    self.assertStartsWith(lines[0],
                          "mplso.compat: the script used no mplso class")
    self.assertEqual(
        "mplso.compat: used mplso.DynamicLossScale, mplso.FixedLossScale",
        lines[1])
    self.assertEqual("__init__ 16.0", lines[2])


if __name__ == "__main__":
  absltest.main()
