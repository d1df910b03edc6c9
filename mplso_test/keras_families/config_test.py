"""The wrappers' configs: the loading note, and loading in a fresh process."""

import json
import os
import subprocess
import sys
import textwrap

from absl.testing import absltest
from absl.testing import parameterized
import keras
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import mplso
from mplso._src.keras import config as config_lib
import mplso.keras

# Saved files: (name, Keras family, file name). Keras 3 saves optimizers in
# `.keras` files only. tf_keras's `.keras` loader imports mplso itself, so its
# files come last: the loads before them run without mplso imported.
_FILES = (
    ("keras_3", "keras", "keras_3.keras"),
    ("tf_keras_h5", "tf_keras", "tf_keras.h5"),
    ("tf_keras_saved_model", "tf_keras", "tf_keras_saved_model"),
    ("legacy_h5", "tf_keras", "legacy.h5"),
    ("legacy_saved_model", "tf_keras", "legacy_saved_model"),
    ("tf_keras", "tf_keras", "tf_keras.keras"),
    ("legacy", "tf_keras", "legacy.keras"),
)

# Loads every file twice (compile=True, compile=False) and prints one JSON
# line: per file and mode, the optimizer's class or the loader's error.
_LOADER = """
import json, sys
{prelude}
import keras
import tf_keras
results = {{}}
# compile=False first, for every file: does any of them import mplso?
for compile_ in (False, True):
  for name, family, path in {files!r}:
    load_model = (keras if family == "keras" else tf_keras).models.load_model
    imported_before = "mplso" in sys.modules
    try:
      model = load_model(path, compile=compile_)
      optimizer = getattr(model, "optimizer", None)
      outcome = ["loaded", type(optimizer).__module__ + "." +
                 type(optimizer).__name__]
      if compile_:
        outcome.append(float(optimizer.loss_scale()))
    except Exception as e:  # What the user sees.
      outcome = ["failed", type(e).__name__, str(e)]
    outcome.insert(0, imported_before)
    results[name + ("" if compile_ else "/compile=False")] = outcome
  if not compile_:
    results["mplso_imported_by_compile_false"] = "mplso" in sys.modules
print(json.dumps(results))
"""


def _save_all(directory):
  """Saves one compiled model per family and format; returns the files."""
  x, y = np.ones((8, 2), np.float32), np.ones((8, 1), np.float32)
  inner = {"keras_3": keras.optimizers.Adam,
           "tf_keras": tf_keras.optimizers.Adam,
           "legacy": tf_keras.optimizers.legacy.Adam}
  files = []
  for name, family, file_name in _FILES:
    k = keras if family == "keras" else tf_keras
    model = k.Sequential([k.Input((2,)), k.layers.Dense(1)])
    model.compile(optimizer=mplso.keras.LossScaleOptimizer(
        inner[name.split("_h5")[0].split("_saved")[0]](),
        mplso.DynamicLossScale(256)), loss="mse")
    model.fit(x, y, verbose=0)
    path = os.path.join(directory, file_name)
    if file_name.endswith("saved_model"):
      model.save(path, save_format="tf")
    else:
      model.save(path)
    files.append((name, family, path))
  return files


def _load_in_fresh_process(files, import_mplso):
  code = _LOADER.format(
      prelude="import mplso.keras" if import_mplso else "", files=files)
  result = subprocess.run(
      [sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
      text=True, timeout=300, check=False,
      env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
  if result.returncode:
    raise AssertionError(result.stderr[-3000:])
  return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
class FreshProcessLoadTest(tf.test.TestCase, parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    directory = absltest.get_default_test_tmpdir()
    directory = os.path.join(directory, "config_test")
    os.makedirs(directory, exist_ok=True)
    cls.files = _save_all(directory)
    cls.without_mplso = _load_in_fresh_process(cls.files, import_mplso=False)
    cls.with_mplso = _load_in_fresh_process(cls.files, import_mplso=True)

  def test_keras_3_error_says_what_to_import(self):
    imported_before, *outcome = self.without_mplso["keras_3"]
    self.assertFalse(imported_before)
    self.assertEqual(outcome[:2], ["failed", "TypeError"])
    self.assertIn("Could not locate class 'LossScaleOptimizer'", outcome[2])
    self.assertIn("`import mplso.keras`", outcome[2])
    self.assertIn(config_lib.HINT, outcome[2])

  @parameterized.parameters("tf_keras", "legacy")
  def test_tf_keras_dot_keras_loads_without_importing_mplso(self, name):
    # tf_keras's `.keras` loader imports the module its config names.
    outcome = self.without_mplso[name]
    self.assertEqual(outcome[:2], [name == "legacy", "loaded"], outcome)
    outcome = outcome[1:]
    self.assertStartsWith(outcome[1], "mplso._src.keras.")
    self.assertEqual(outcome[2], 256.)

  @parameterized.parameters("tf_keras_h5", "tf_keras_saved_model",
                            "legacy_h5", "legacy_saved_model")
  def test_tf_keras_h5_and_saved_model_name_the_registered_class(self, name):
    # tf_keras's legacy loaders look optimizers up by registered name only
    # and print nothing of the config: the error names mplso's class, and
    # README and docs/saving.md say to import mplso.keras first.
    imported_before, *outcome = self.without_mplso[name]
    self.assertFalse(imported_before)
    self.assertEqual(outcome[:2], ["failed", "ValueError"])
    self.assertRegex(outcome[2],
                     r"^Unknown optimizer: 'mplso>LossScaleOptimizer(V3)?'")

  @parameterized.parameters(name for name, _, _ in _FILES)
  def test_compile_false_loads_without_mplso(self, name):
    imported_before, *outcome = self.without_mplso[name + "/compile=False"]
    self.assertFalse(imported_before)
    self.assertEqual(outcome[0], "loaded", outcome)
    self.assertNotIn("mplso", outcome[1])
    self.assertFalse(self.without_mplso["mplso_imported_by_compile_false"])

  @parameterized.parameters(name for name, _, _ in _FILES)
  def test_loads_after_import_mplso_keras(self, name):
    _, *outcome = self.with_mplso[name]
    self.assertEqual(outcome[0], "loaded", outcome)
    self.assertStartsWith(outcome[1], "mplso._src.keras.")
    if not name.endswith("saved_model"):
      # tf_keras's SavedModel loader restores no optimizer state.
      self.assertEqual(outcome[2], 256.)


class WithHintTest(tf.test.TestCase):

  def test_hint_comes_first_and_from_config_ignores_it(self):
    opt = mplso.keras.LossScaleOptimizer(keras.optimizers.SGD(0.5),
                                         mplso.DynamicLossScale(64))
    config = opt.get_config()
    self.assertEqual(next(iter(config)), config_lib.HINT_KEY)
    restored = mplso.keras.LossScaleOptimizer.from_config(config)
    self.assertEqual(float(restored.loss_scale()), 64.)
    self.assertEqual(restored.get_config(), config)

  def test_an_old_note_is_replaced(self):
    opt = mplso.keras.LossScaleOptimizer(keras.optimizers.SGD(0.5))
    config = {**opt.get_config(), config_lib.HINT_KEY: "old"}
    restored = mplso.keras.LossScaleOptimizer.from_config(config)
    self.assertEqual(config_lib.HINT,
                     restored.get_config()[config_lib.HINT_KEY])


if __name__ == "__main__":
  absltest.main()
