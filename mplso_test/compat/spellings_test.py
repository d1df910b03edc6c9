"""Tests for the legacy spelling table: sound, and shown as it is in the docs."""

import importlib
import os
import re

from absl.testing import absltest
import keras
import tensorflow as tf
import tf_keras

from mplso import compat
from mplso._src.compat import install as compat_install
from mplso._src.compat import spellings as compat_spellings
import mplso.keras

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DOCS_PAGE = os.path.join(ROOT, "docs", "legacy-names.md")


class SpellingTableTest(tf.test.TestCase):

  def test_docs_page_shows_the_table(self):
    with open(DOCS_PAGE, encoding="utf-8") as f:
      page = f.read()
    shown = re.search(r"<!-- spellings:begin -->\n(.*?)<!-- spellings:end -->",
                      page, re.S)
    self.assertIsNotNone(shown, "markers missing in docs/legacy-names.md")
    self.assertEqual(compat_spellings.markdown_table(), shown.group(1))

  def test_each_spelling_once_and_each_target_is_public_mplso(self):
    names = [row.name for row in compat_spellings.SPELLINGS]
    self.assertCountEqual(set(names), names)
    for row in compat_spellings.SPELLINGS:
      self.assertTrue(row.name.startswith("tf."), row.name)
      self.assertNotIn("._", row.target)
      self.assertIsNotNone(compat_install.resolve_target(row.target))

  def test_the_families_of_the_brief_are_all_there(self):
    names = {row.name for row in compat_spellings.SPELLINGS}
    for prefix in ("tf.train.experimental", "tf.compat.v1.train.experimental",
                   "tf.compat.v1.mixed_precision",
                   "tf.compat.v2.train.experimental"):
      for member in ("LossScale", "FixedLossScale", "DynamicLossScale",
                     "enable_mixed_precision_graph_rewrite",
                     "disable_mixed_precision_graph_rewrite"):
        self.assertIn(f"{prefix}.{member}", names)
    for prefix in ("tf.mixed_precision.experimental",
                   "tf.compat.v1.mixed_precision.experimental"):
      self.assertIn(f"{prefix}.DynamicLossScale", names)
    for prefix in ("tf.contrib.mixed_precision",
                   "tf.compat.v1.contrib.mixed_precision"):
      self.assertIn(f"{prefix}.ExponentialUpdateLossScaleManager", names)
    for member in ("LossScaleOptimizer", "Policy", "set_policy",
                   "global_policy"):
      self.assertIn(f"tf.keras.mixed_precision.experimental.{member}", names)
    self.assertIn("tf.keras.mixed_precision.LossScaleOptimizer", names)

  def test_namespaces_each_once_below_the_one_they_lie_in(self):
    namespaces = compat_spellings.NAMESPACES
    self.assertCountEqual(set(namespaces), namespaces)
    self.assertNotIn("tf", namespaces)
    for index, namespace in enumerate(namespaces):
      above = namespace.rpartition(".")[0]
      if above != "tf":
        self.assertIn(above, namespaces[:index])
    for row in compat_spellings.SPELLINGS:
      self.assertIn(row.name.rpartition(".")[0], namespaces)
    # The module and the packages a program imports to reach it.
    self.assertContainsSubset(
        ["tf.keras", "tf.keras.mixed_precision",
         "tf.keras.mixed_precision.experimental", "tf.compat.v1.keras",
         "tf.compat.v1.keras.mixed_precision.experimental", "tf.contrib",
         "tf.compat.v1.contrib.mixed_precision", "tf.mixed_precision",
         "tf.compat.v2.mixed_precision.experimental", "tf.train.experimental"],
        namespaces)

  def test_import_forms_name_each_namespace_of_names_once(self):
    forms = compat_spellings.import_forms()
    self.assertEqual(
        [n for n in compat_spellings.NAMESPACES
         if any(row.name.rpartition(".")[0] == n
                for row in compat_spellings.SPELLINGS)],
        [namespace for _, namespace, _ in forms])
    by_module = {module: (namespace, since)
                 for module, namespace, since in forms}
    self.assertEqual(("tf.keras.mixed_precision.experimental", "1.15-2.8"),
                     by_module["tensorflow.keras.mixed_precision.experimental"])
    # The releases of every name in it, each once.
    self.assertEqual(("tf.train.experimental", "2.0-2.3, 2.0-2.x"),
                     by_module["tensorflow.train.experimental"])
    self.assertNotIn("tensorflow.contrib", by_module)  # Holds no names.
    self.assertEqual("tensorflow.compat.v1.contrib",
                     compat_spellings.module_name("tf.compat.v1.contrib"))

  def test_per_keras_names_the_classes_the_targets_build(self):
    # Keras 3 is `tf.keras` here; tf_keras's optimizers are wrapped all the
    # same (the factory follows the optimizer), its policies are tested by
    # compat/policy_test in a tf_keras process.
    self.assertContainsSubset(
        compat_spellings.PER_KERAS,
        {row.target for row in compat_spellings.SPELLINGS})
    classes = {target: [keras_class(name) for name in names]
               for target, names in compat_spellings.PER_KERAS.items()}
    keras_3, tf_keras_class = classes["mplso.keras.LossScaleOptimizer"]
    self.assertIsInstance(
        mplso.keras.LossScaleOptimizer(keras.optimizers.SGD()), keras_3)
    for optimizer in (tf_keras.optimizers.SGD(),
                      tf_keras.optimizers.legacy.SGD()):
      self.assertIsInstance(mplso.keras.LossScaleOptimizer(optimizer),
                            tf_keras_class)
    keras_3, _ = classes["mplso.compat.Policy"]
    self.assertIsInstance(compat.Policy("mixed_float16"), keras_3)


def keras_class(name):
  """Returns the class `name` (`package.module.Class`) names."""
  module_name, _, attribute = name.rpartition(".")
  return getattr(importlib.import_module(module_name), attribute)


if __name__ == "__main__":
  absltest.main()
