"""The wrappers' configs: their formats, the loading note, loading afresh.

In every family `get_config` writes TF 2.3's format and `from_config` reads
it and tf_keras's and Keras 3's; every config starts with a note on how to
load it, and files load in a fresh process once mplso.keras is imported.
"""

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
from mplso_test.helpers import keras_families

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
FAMILIES = keras_families.keras_families()
NAMED_FAMILIES = keras_families.named_keras_families()

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


class ConfigTest(tf.test.TestCase, parameterized.TestCase):
  """`get_config` and `from_config` in every family.

  TF 2.3's format is written; TF 2.3's, tf_keras's and Keras 3's are read,
  refusing what the family's own class refuses.
  """

  @parameterized.named_parameters(
      (f"{name}_{kind}", family, loss_scale, config) for name, family in
      NAMED_FAMILIES for kind, loss_scale, config in (
          ("dynamic", mplso.DynamicLossScale(128, increment_period=7,
                                             multiplier=4),
           {"class_name": "DynamicLossScale",
            "config": {"initial_loss_scale": 128., "increment_period": 7,
                       "multiplier": 4.}}),
          ("fixed", 12., {"class_name": "FixedLossScale",
                          "config": {"loss_scale_value": 12.}})))
  def test_config_round_trip(self, family, loss_scale, loss_scale_config):
    opt = family.wrapper(family.optimizers.SGD(0.3, momentum=0.5), loss_scale)
    config = opt.get_config()
    self.assertEqual(set(config), {"how_to_load", "optimizer", "loss_scale",
                                   *family.extra_config_keys})
    self.assertEqual(config["loss_scale"], loss_scale_config)
    json.dumps(config)
    serialized = family.keras.optimizers.serialize(opt)
    self.assertEqual(serialized["registered_name"], family.registered_name)
    for restored in (family.wrapper.from_config(config),
                     mplso.keras.LossScaleOptimizer.from_config(config),
                     family.keras.optimizers.deserialize(serialized)):
      self.assertIs(type(restored), family.wrapper)
      self.assertEqual(restored.get_config(), config)
      self.assertAllClose(restored.learning_rate, 0.3)
      self.assertAllClose(restored.momentum, 0.5)
      self.assertAllClose(restored.inner_optimizer.momentum, 0.5)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_reads_tf_2_3_and_the_familys_own_configs(self, family):
    sgd = family.keras.optimizers.serialize(family.optimizers.SGD(0.1))
    tf_2_3 = {"optimizer": sgd, "loss_scale": {
        "class_name": "FixedLossScale", "config": {"loss_scale_value": 64.0}}}
    opt = family.wrapper.from_config(tf_2_3)
    self.assertIsInstance(opt.inner_optimizer, family.optimizers.SGD)
    self.assertIsInstance(opt.loss_scale, mplso.FixedLossScale)
    self.assertEqual(float(opt.loss_scale()), 64.0)
    opt = family.wrapper.from_config(family.own(
        family.optimizers.SGD(0.3), initial_scale=256.,
        dynamic_growth_steps=9).get_config())
    self.assertIsInstance(opt.inner_optimizer, family.optimizers.SGD)
    self.assertAllClose(opt.learning_rate, 0.3)
    self.assertEqual(opt.loss_scale.get_config(), {
        "initial_loss_scale": 256., "increment_period": 9, "multiplier": 2.})
    if family.own_has_fixed_scale:
      fixed = family.wrapper.from_config(family.own(
          family.optimizers.SGD(0.1), dynamic=False,
          initial_scale=32.).get_config())
      self.assertIsInstance(fixed.loss_scale, mplso.FixedLossScale)
      self.assertEqual(fixed.initial_scale, 32.)

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_config_without_an_optimizer_is_a_value_error(self, family):
    with self.assertRaisesRegex(ValueError, r"Received keys: \['bogus'\]"):
      family.wrapper.from_config({"bogus": 1})
    with self.assertRaisesRegex(ValueError, "'optimizer'"):
      family.wrapper.from_config({"loss_scale": "dynamic"})

  @parameterized.named_parameters(
      (f"{family.name}_{name}", family, extra) for family in FAMILIES
      for name, extra in (("unknown", {"bogus": 1}),
                          ("learning_rate", {"learning_rate": 0.5})))
  def test_from_config_refuses_keys_the_familys_own_class_refuses(
      self, family, extra):
    config = mplso.keras.LossScaleOptimizer(family.sgd(),
                                            "dynamic").get_config()
    own = family.own
    own_config = own(family.sgd()).get_config()
    (key,) = extra
    if family.name == "keras3":
      error = ValueError, f"does not support arguments: `{key}`"
      own_class = own
    else:
      error = TypeError, f"unexpected keyword argument '{key}'"
      own_class = type(own(family.sgd()))  # tf_keras's V2 or V3 class.
    with self.assertRaisesRegex(*error):
      own_class.from_config({**own_config, **extra})
    for wrap in (mplso.keras.LossScaleOptimizer, family.wrapper):
      with self.assertRaisesRegex(*error):
        wrap.from_config({**config, **extra})
      with self.assertRaisesRegex(*error):
        wrap.from_config({**own_config, **extra})
      wrap.from_config(config)  # Without the extra key it loads.

  @parameterized.named_parameters(*NAMED_FAMILIES)
  def test_loss_scale_arithmetic_survives_a_config_round_trip(self, family):
    opt = mplso.keras.LossScaleOptimizer(family.sgd(), dynamic=True,
                                         initial_scale=16.)
    loaded = mplso.keras.LossScaleOptimizer.from_config(opt.get_config())
    for wrapper in (opt, loaded):
      scale = wrapper.loss_scale
      self.assertEqual(32., float(scale * 2))
      self.assertEqual(32., float(2 * scale))
      self.assertEqual(8., float(scale / 2))
      self.assertEqual(0.125, float(2 / scale))
      self.assertEqual(15., float(scale - 1))
      self.assertTrue(bool(scale > 10))
      self.assertFalse(bool(scale <= 10))
      self.assertEqual(48., float(tf.constant(3.) * scale))


if __name__ == "__main__":
  absltest.main()
