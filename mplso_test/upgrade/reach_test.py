"""Tests `reach`: warnings for legacy names the upgrade cannot resolve."""

import textwrap

from absl.testing import absltest
from absl.testing import parameterized
import libcst as cst
from libcst import metadata

from mplso._src.upgrade import bindings
from mplso._src.upgrade import edits
from mplso._src.upgrade import reach


def parse(source):
  wrapper = metadata.MetadataWrapper(cst.parse_module(
      textwrap.dedent(source)))
  return wrapper, bindings.Bindings(wrapper)


def chain(wrapper, text):
  """The last Name or Attribute node whose code is `text`."""
  found = []

  class Visitor(cst.CSTVisitor):

    def on_visit(self, node):
      if (isinstance(node, (cst.Name, cst.Attribute)) and
          wrapper.module.code_for_node(node) == text):
        found.append(node)
      return True

  wrapper.module.visit(Visitor())
  return found[-1]


TWO_WAYS = """\
    try:
      import tensorflow.compat.v1 as tf
    except ImportError:
      import tensorflow as tf
    a = tf.train.experimental.MixedPrecisionLossScaleOptimizer
    b = tf.mixed_precision.MixedPrecisionLossScaleOptimizer
    c = tf.keras.optimizers.SGD
    """


class AgreedTest(absltest.TestCase):

  def test_one_target_through_both_bindings(self):
    wrapper, found = parse(TWO_WAYS)
    node = chain(wrapper,
                 "tf.train.experimental.MixedPrecisionLossScaleOptimizer")
    agreed = reach.agreed(found, node, set())
    self.assertEqual(
        "tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer",
        agreed.path)
    self.assertEqual("", reach.two_ways_why(found, node, set()))

  def test_targets_that_differ(self):
    wrapper, found = parse(TWO_WAYS)
    node = chain(wrapper, "tf.mixed_precision.MixedPrecisionLossScaleOptimizer")
    self.assertIsNone(reach.agreed(found, node, set()))
    self.assertEqual(
        "kept: `tf` is bound in more than one way, and they make this a "
        "different name: `mplso.MixedPrecisionLossScaleOptimizer` through "
        "the binding at line 2; "
        "`tf.mixed_precision.MixedPrecisionLossScaleOptimizer`, which mplso "
        "does not serve, through the binding at line 4. Rewrite it by hand "
        "to the name of the binding that runs on TF 2.21",
        reach.two_ways_why(found, node, set()))

  def test_not_a_legacy_name_either_way(self):
    wrapper, found = parse(TWO_WAYS)
    node = chain(wrapper, "tf.keras.optimizers.SGD")
    self.assertIsNone(reach.agreed(found, node, set()))
    self.assertEqual("", reach.two_ways_why(found, node, set()))

  def test_a_binding_to_none_is_left_out(self):
    wrapper, found = parse("""\
        try:
          import tensorflow as tf
        except ImportError:
          tf = None
        s = tf.train.experimental.LossScale
        """)
    node = chain(wrapper, "tf.train.experimental.LossScale")
    self.assertEqual("tf.train.experimental.LossScale",
                     reach.agreed(found, node, set()).path)

  def test_rebound_bindings_are_left_out(self):
    wrapper, found = parse("""\
        try:
          from tensorflow.contrib.mixed_precision import LossScaleOptimizer
        except ImportError:
          LossScaleOptimizer = load()
        o = LossScaleOptimizer
        """)
    node = chain(wrapper, "LossScaleOptimizer")
    rebound = {b for b, _ in found.resolutions(node)
               if isinstance(b, metadata.ImportAssignment)}
    # The import becomes mplso's; only the assignment is left, unknown.
    self.assertIsNone(reach.agreed(found, node, rebound))
    self.assertEqual("", reach.two_ways_why(found, node, rebound))


class UnservedWhyTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("today", "tf.python.keras.mixed_precision.policy.Policy",
       "its public name `tf.keras.mixed_precision.Policy` is TF 2.21's own"),
      ("a_chain_on_it",
       "tf.python.keras.mixed_precision.policy.Policy.from_config",
       "`tf.python.keras.mixed_precision.policy.Policy` is private"),
      ("mplso_has_it", "tf.python.training.experimental.loss_scale.get",
       "`mplso.loss_scale.get` does the same"),
      ("unserved", "tf.python.keras.mixed_precision.experimental.policy"
       ".policy_scope", "not one of the names mplso serves; TF 2.21 lacks "
       "its module"),
      ("module_itself", "tf.python.training.experimental.loss_scale",
       "is used itself, not one of its members"),
  )
  def test_why(self, path, part):
    self.assertIn(part, reach.unserved_why(path))

  @parameterized.parameters(
      "tf.keras.mixed_precision.Policy",
      "tf.python.training.experimental.loss_scale.DynamicLossScale",
      "keras.mixed_precision.LossScaleOptimizer")
  def test_none(self, path):
    self.assertEqual("", reach.unserved_why(path))


class WarningsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("helper_result", "get_tf().mixed_precision.DynamicLossScale()",
       "get_tf().mixed_precision.DynamicLossScale", "get_tf().mixed_precision",
       "DynamicLossScale"),
      ("helper_namespace", "mp = get_tf().mixed_precision.experimental",
       "get_tf().mixed_precision.experimental", "get_tf().mixed_precision",
       "experimental"),
      ("parameter", "def f(tf):\n  return tf.train.experimental.LossScale",
       "tf.train.experimental.LossScale", "tf.train.experimental",
       "LossScale"),
      ("assigned_call", "mp = load()\nm = mp.ExponentialUpdateLossScaleManager",
       "mp.ExponentialUpdateLossScaleManager", "mp",
       "ExponentialUpdateLossScaleManager"),
      ("object_attribute", "o = self.mp.LossScaleOptimizer(sgd)",
       "self.mp.LossScaleOptimizer", "self.mp", "LossScaleOptimizer"),
      ("keras_experimental",
       "o = helper().keras.mixed_precision.experimental.LossScaleOptimizer",
       "helper().keras.mixed_precision.experimental.LossScaleOptimizer",
       "helper().keras.mixed_precision", "LossScaleOptimizer"),
  )
  def test_unresolved(self, source, old, base, name):
    _, found = parse(source + "\n")
    [warning] = reach.warnings(found, [])
    self.assertEqual(old, warning.old)
    self.assertEqual(old, warning.new)
    self.assertStartsWith(
        warning.why, f"the upgrade cannot tell what `{base}` is, and "
        f"`{name}`, read through it, is a legacy loss-scale name")

  @parameterized.named_parameters(
      ("a_flag", "if flags.mixed_precision:\n  pass"),
      ("a_config", "on = config.mixed_precision.enabled"),
      ("keras_today", "o = get_tf().keras.mixed_precision.LossScaleOptimizer"),
      ("keras_policy_today", "p = K().keras.mixed_precision.Policy('a')"),
      ("keras_3", "import keras\no = keras.mixed_precision.LossScaleOptimizer"),
      ("own_class", "class W:\n  LossScale = 1\nx = W.LossScale"),
      ("own_module", "from mylib import mp\no = mp.LossScaleOptimizer(o)"),
      ("alias_of_a_module",
       "import mplso.contrib\nc = mplso.contrib\no = c.LossScaleOptimizer"),
      ("assigned", "x.LossScaleOptimizer = mine"),
      ("imported", "import a.LossScale"),
  )
  def test_not_warned(self, source):
    _, found = parse(source + "\n")
    self.assertEmpty(reach.warnings(found, []))

  def test_unbound_name(self):
    _, found = parse("from common import *\nopt = LossScaleOptimizer(sgd)\n")
    [warning] = reach.warnings(found, [])
    self.assertEqual((2, "LossScaleOptimizer"), (warning.line, warning.old))
    self.assertStartsWith(warning.why, "nothing in the file binds "
                          "`LossScaleOptimizer`, a legacy loss-scale name")

  def test_unbound_name_a_legacy_star_import_gives(self):
    _, found = parse("from tensorflow.train.experimental import *\n"
                     "s = LossScale\n")
    self.assertEmpty(reach.warnings(found, []))

  def test_not_twice_for_what_the_plan_reported(self):
    _, found = parse("o = self.mp.LossScaleOptimizer(sgd)\n")
    planned = [edits.renamed(1, "self.mp.LossScaleOptimizer(sgd)", "x")]
    self.assertEmpty(reach.warnings(found, planned))

  def test_switches_too(self):
    _, found = parse('os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "1"\n')
    [warning] = reach.warnings(found, [])
    self.assertIn("NGC", warning.why)


if __name__ == "__main__":
  absltest.main()
