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

from mplso._src.upgrade import names
import mplso.contrib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

_FACTS = """
import json
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

  def test_canonical(self):
    self.assertEqual("tf.keras.x", names.canonical("tensorflow.keras.x"))
    self.assertEqual("tf", names.canonical("tensorflow"))
    self.assertIsNone(names.canonical("tensorflow_addons.x"))


if __name__ == "__main__":
  absltest.main()
