"""Checks `upgrade.names`' facts about TF 2.21 against TensorFlow itself.

The tool imports no TensorFlow, so what it knows of TF 2.21 is written
down; here it is checked under Keras 3 (this process) and tf_keras (a fresh
process, as `tf.keras` is fixed at import).
"""

import json
import os
import subprocess
import sys

from absl.testing import absltest

from mplso._src.compat import spellings as compat_spellings
from mplso._src.upgrade import names
import mplso.contrib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

_FACTS = """
import importlib
import json
import warnings
warnings.simplefilter("ignore")


def importable(module):
  name = "tensorflow" + module[2:] if module.startswith("tf.") else module
  try:
    importlib.import_module(name)
  except ImportError:
    return False
  return True

from mplso._src.upgrade import names
from mplso_test.helpers import spelling_lookup
missing = spelling_lookup.MISSING_NAME
print(json.dumps({
    "absent": sorted(n for n in names.NAMESPACES
                     if spelling_lookup.resolve(n) is missing),
    "native": sorted(n for n in names.TARGETS
                     if spelling_lookup.resolve(n) is not missing and
                     n.endswith("keras.mixed_precision.LossScaleOptimizer")),
    "keras_names": [spelling_lookup.resolve("tf." + n) is not missing
                    for n in [names.NATIVE_OPTIMIZER,
                              *names.NATIVE_POLICY.values()]],
    "private_absent": sorted(m for m in names.PRIVATE_MODULES
                             if not importable(m)),
    "keras_today": sorted(
        n for n in names.KERAS_TODAY
        if spelling_lookup.resolve("tf.keras.mixed_precision." + n)
        is not missing),
    "private_today": sorted(
        p for p in names.PRIVATE_TODAY
        if p.startswith("tf.") and importable(p.rpartition(".")[0]) and
        hasattr(importlib.import_module(
            "tensorflow" + p.rpartition(".")[0][2:]), p.rpartition(".")[2])),
}))
"""


def facts(legacy_keras):
  env = dict(os.environ, TF_USE_LEGACY_KERAS=legacy_keras,
             TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=os.pathsep.join(
                 [ROOT, os.environ.get("PYTHONPATH", "")]))
  proc = subprocess.run([sys.executable, "-c", _FACTS], capture_output=True,
                        text=True, env=env, timeout=300)
  assert proc.returncode == 0, proc.stderr
  return json.loads(proc.stdout.splitlines()[-1])


class NamesTest(absltest.TestCase):

  def test_facts_hold_under_both_keras(self):
    for legacy_keras in ("0", "1"):
      found = facts(legacy_keras)
      # What only install() provides is what TF 2.21 lacks.
      self.assertEqual(sorted(names.INSTALL_ONLY), found["absent"])
      # The TF 2.4-2.15 names --to native keeps are Keras's class today.
      self.assertEqual(sorted(n for n in names.TARGETS
                              if names.canonical_native(n)), found["native"])
      self.assertEqual([True] * 4, found["keras_names"])
      # The private modules an import of which fails on TF 2.21.
      self.assertEqual(sorted(names.PRIVATE_ABSENT), found["private_absent"])
      # Keras's own names under `keras.mixed_precision` (tf_keras has four).
      self.assertContainsSubset(
          ["LossScaleOptimizer", "Policy", "global_policy",
           "set_global_policy"], found["keras_today"])
      self.assertContainsSubset(found["keras_today"], names.KERAS_TODAY)
      # TF 2.21's frozen Keras 2 still has the members a warning names.
      self.assertEqual(
          ["tf.python.keras.mixed_precision.policy.Policy",
           "tf.python.keras.mixed_precision.policy.global_policy",
           "tf.python.keras.mixed_precision.policy.set_global_policy"],
          found["private_today"])

  def test_served_whole(self):
    for namespace, module in names.SERVED_WHOLE.items():
      self.assertEqual("mplso.contrib", module)
      members = {n.rpartition(".")[2] for n in names.TARGETS
                 if n.rpartition(".")[0] == namespace}
      self.assertEqual(set(mplso.contrib.__all__), members)
      for member in members:
        self.assertEqual(f"mplso.contrib.{member}",
                         names.TARGETS[f"{namespace}.{member}"])

  def test_every_spelling_holds_a_word(self):
    # A file with none of these words is not parsed: no spelling, and no
    # namespace only install() provides, may lack them all.
    for name in [*names.TARGETS, *names.INSTALL_ONLY]:
      self.assertTrue(any(w in name for w in names.WORDS), name)

  def test_tf1_names_join_the_table(self):
    # TF 1.14-1.15 spelled its v1 names after `import tensorflow as tf`.
    self.assertEqual(
        {"tf.train.experimental.MixedPrecisionLossScaleOptimizer":
         "mplso.MixedPrecisionLossScaleOptimizer"}, names.TF1_NAMES)
    for name, target in names.TF1_NAMES.items():
      self.assertEqual(target, names.TARGETS[name])

  def test_private_members_are_table_spellings(self):
    for private, public in names.PRIVATE.items():
      self.assertIn(public, names.TARGETS, private)
      self.assertIn(private.rpartition(".")[0], names.PRIVATE_MODULES)
    # Each TF export, as TF's sources named it.
    self.assertEqual(
        "tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer",
        names.PRIVATE["tf.python.training.experimental.loss_scale_optimizer"
                      ".MixedPrecisionLossScaleOptimizer"])
    self.assertEqual(
        "tf.train.experimental.enable_mixed_precision_graph_rewrite",
        names.PRIVATE["tf.python.training.experimental.mixed_precision"
                      ".enable_mixed_precision_graph_rewrite"])
    self.assertEqual(
        "tf.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite",
        names.PRIVATE["tf.python.training.experimental.mixed_precision"
                      ".enable_mixed_precision_graph_rewrite_v1"])
    self.assertEqual(
        "tf.keras.mixed_precision.experimental.LossScaleOptimizer",
        names.PRIVATE["tf.python.keras.mixed_precision.loss_scale_optimizer"
                      ".LossScaleOptimizerV1"])
    self.assertEqual(
        "tf.keras.mixed_precision.LossScaleOptimizer",
        names.PRIVATE["keras.src.mixed_precision.loss_scale_optimizer"
                      ".LossScaleOptimizer"])

  def test_every_table_object_has_a_private_path(self):
    # The coverage table's private-module column has a cell in every row.
    reached = {names.TARGETS[public] for public in names.PRIVATE.values()}
    self.assertEqual({row.target for row in compat_spellings.SPELLINGS},
                     reached)

  def test_public(self):
    self.assertEqual(
        "tf.compat.v2.train.experimental.LossScale",
        names.public("tf.compat.v1.compat.v2.train.experimental.LossScale"))
    self.assertEqual("tf.compat.v1.x", names.public("tf.compat.v2.compat.v1.x"))
    self.assertEqual("tf.compat.v2", names.public("tf.compat.v1.compat.v2"))
    self.assertEqual("tf.keras.mixed_precision.experimental.Policy",
                     names.public("keras.mixed_precision.experimental.Policy"))
    self.assertEqual("tf.keras.optimizers.SGD",
                     names.public("tf.keras.optimizers.SGD"))

  def test_private_member(self):
    self.assertTrue(names.private_member(
        "tf.python.keras.mixed_precision.policy.policy_scope"))
    self.assertTrue(names.private_member(
        "tf.python.keras.mixed_precision.autocast_variable"))
    for path in ("tf.python.keras.mixed_precision.policy.PolicyV1",
                 "tf.python.keras.mixed_precision.policy",
                 "keras.mixed_precision.LossScaleOptimizer",
                 "tf.python.framework.ops.Tensor"):
      self.assertFalse(names.private_member(path), path)

  def test_absent_today(self):
    self.assertTrue(names.absent_today("tf.contrib.mixed_precision"))
    self.assertTrue(names.absent_today(
        "tf.python.keras.mixed_precision.experimental.policy"))
    self.assertFalse(names.absent_today(
        "tf.python.training.experimental.loss_scale"))
    self.assertFalse(names.absent_today("tf.keras.mixed_precision"))

  def test_legacy_members(self):
    self.assertIn("ExponentialUpdateLossScaleManager", names.LEGACY_MEMBERS)
    self.assertIn("enable_mixed_precision_graph_rewrite",
                  names.LEGACY_MEMBERS)
    # Too common a name to warn about wherever it is read.
    self.assertNotIn("Policy", names.LEGACY_MEMBERS)

  def test_every_switch_holds_a_word(self):
    # switches' warnings need the file parsed.
    for text in ("TF_ENABLE_AUTO_MIXED_PRECISION", "auto_mixed_precision",
                 "infer_float32_vars", "bfloat16_with_float32_vars",
                 "auto_mixed_precision_cpu", *names.PRIVATE,
                 *names.PRIVATE_MODULES):
      self.assertTrue(any(w in text for w in names.WORDS), text)

  def test_canonical(self):
    self.assertEqual("tf.keras.x", names.canonical("tensorflow.keras.x"))
    self.assertEqual("tf", names.canonical("tensorflow"))
    self.assertIsNone(names.canonical("tensorflow_addons.x"))


if __name__ == "__main__":
  absltest.main()
