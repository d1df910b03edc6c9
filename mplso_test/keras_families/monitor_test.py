"""`mplso.keras.LossScaleMonitor`: logs, History and TensorBoard agree."""

import contextlib
import glob
import importlib
import io
import json
import os

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mplso
from mplso._src.diagnostics import record
import mplso.keras
from mplso_test.helpers.events import read_events

FAMILIES = (("keras_3", "keras"), ("tf_keras", "tf_keras"))
BATCHES, BATCH_SIZE = 4, 4


def build(package, increment_period=3):
  keras = importlib.import_module(package)
  opt = mplso.keras.LossScaleOptimizer(
      keras.optimizers.SGD(0.01),
      mplso.DynamicLossScale(64, increment_period=increment_period))
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
  model.compile(optimizer=opt, loss="mse")
  return keras, model, opt


def default_package():
  """The Keras package that `tf.keras` is, so a plain monitor's family."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  legacy = isinstance(mplso.keras.LossScaleMonitor(),
                      tf_keras.callbacks.Callback)
  return "tf_keras" if legacy else "keras"


def data(bad_batches=(0,), nan_batches=()):
  """Regression data whose listed batches hold an Inf (or NaN) target."""
  x = np.ones((BATCHES * BATCH_SIZE, 3), np.float32)
  y = np.ones((BATCHES * BATCH_SIZE, 1), np.float32)
  for batch in bad_batches:
    y[batch * BATCH_SIZE] = np.inf
  for batch in nan_batches:
    y[batch * BATCH_SIZE] = np.nan
  return x, y


class LossScaleMonitorTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*FAMILIES)
  def test_history_and_events_show_scale_and_skips(self, package):
    keras, model, opt = build(package)
    log_dir = self.create_tempdir().full_path
    monitor = mplso.keras.LossScaleMonitor(log_dir=log_dir, optimizer=opt)
    self.assertIsInstance(monitor, keras.callbacks.Callback)
    self.assertIsInstance(monitor, mplso.keras.LossScaleMonitor)

    class Record(keras.callbacks.Callback):
      """Reads the loss scale after each epoch, the slow way, to compare."""

      def __init__(self):
        super().__init__()
        self.scales = []

      def on_epoch_end(self, epoch, logs=None):
        self.scales.append(float(opt.loss_scale()))

    record = Record()
    epochs = 3
    x, y = data(bad_batches=(0, 2))
    history = model.fit(x, y, batch_size=BATCH_SIZE, epochs=epochs,
                        shuffle=False, verbose=0, callbacks=[monitor, record])
    # Two Inf batches per epoch: two skips per epoch, counted cumulatively.
    self.assertEqual([2 * (e + 1) for e in range(epochs)],
                     history.history["skipped_steps"])
    self.assertEqual(record.scales, history.history["loss_scale"])
    self.assertEqual(epochs * BATCHES, int(opt.iterations))
    events = read_events(log_dir)
    self.assertEqual(
        [(e, s) for e, s in enumerate(history.history["loss_scale"])],
        events["epoch_loss_scale"])
    self.assertEqual(
        [(e, float(s)) for e, s in enumerate(history.history["skipped_steps"])],
        events["epoch_skipped_steps"])
    self.assertTrue(all(
        os.path.basename(os.path.dirname(p)) == "train"
        for p in glob.glob(os.path.join(log_dir, "**", "events.*"),
                           recursive=True)))

  @parameterized.named_parameters(*FAMILIES)
  def test_nan_and_inf_steps_apart(self, package):
    _, model, opt = build(package)
    log_dir = self.create_tempdir().full_path
    monitor = mplso.keras.LossScaleMonitor(log_dir=log_dir, optimizer=opt)
    x, y = data(bad_batches=(1,), nan_batches=(0, 3))
    history = model.fit(x, y, batch_size=BATCH_SIZE, epochs=2, shuffle=False,
                        verbose=0, callbacks=[monitor])
    self.assertEqual([2, 4], history.history["nan_steps"])
    self.assertEqual([1, 2], history.history["inf_steps"])
    self.assertEqual([3, 6], history.history["skipped_steps"])
    # Counts are ints for History's users, as JSON writes them.
    counts = {key: history.history[key]
              for key in ("nan_steps", "inf_steps", "skipped_steps")}
    self.assertEqual('{"nan_steps": [2, 4], "inf_steps": [1, 2], '
                     '"skipped_steps": [3, 6]}', json.dumps(counts))
    self.assertTrue(all(isinstance(value, int)
                        for values in counts.values() for value in values))
    events = read_events(log_dir)
    self.assertEqual([(0, 2.), (1, 4.)], events["epoch_nan_steps"])
    self.assertEqual([(0, 1.), (1, 2.)], events["epoch_inf_steps"])
    log = mplso.overflow_log(opt)
    self.assertEqual([0, 1, 3, 4, 5, 7], [e["step"] for e in log])
    self.assertEqual([["nan"], ["inf"], ["nan"]] * 2,
                     [[k for k in ("nan", "inf") if e[k]] for e in log])
    names = sorted(record.variable_name(v)
                   for v in model.trainable_variables)
    self.assertEqual(names, sorted(log[0]["nan"]))

  @parameterized.named_parameters(*FAMILIES)
  def test_wrapper_of_the_tf_2_4_dialect(self, package):
    # Its `loss_scale` is a tensor; the monitor and the overflow log still
    # find the loss scale.
    keras = importlib.import_module(package)
    opt = mplso.keras.LossScaleOptimizer(keras.optimizers.SGD(0.01),
                                         initial_scale=64.)
    self.assertIsInstance(opt.loss_scale, tf.Tensor)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=opt, loss="mse")
    monitor = mplso.keras.LossScaleMonitor(optimizer=opt)
    x, y = data(bad_batches=(1,))
    history = model.fit(x, y, batch_size=BATCH_SIZE, epochs=1, shuffle=False,
                        verbose=0, callbacks=[monitor])
    self.assertEqual([32.], history.history["loss_scale"])
    self.assertEqual([1], history.history["skipped_steps"])
    self.assertEqual([1], [e["step"] for e in mplso.overflow_log(opt)])

  @parameterized.named_parameters(*FAMILIES)
  def test_progress_bar_shows_counts_as_ints(self, package):
    _, model, opt = build(package)
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
      model.fit(*data(bad_batches=(0, 2)), batch_size=BATCH_SIZE, epochs=1,
                shuffle=False, verbose=1,
                callbacks=[mplso.keras.LossScaleMonitor(optimizer=opt)])
    text = output.getvalue()
    self.assertIn("skipped_steps: 2", text)
    self.assertIn("inf_steps: 2", text)
    self.assertNotRegex(text, r"(skipped|nan|inf)_steps: \d+\.")

  @parameterized.named_parameters(*FAMILIES)
  def test_batch_events_at_iterations(self, package):
    _, model, opt = build(package, increment_period=1000)
    log_dir = self.create_tempdir().full_path
    monitor = mplso.keras.LossScaleMonitor(log_dir=log_dir, update_freq=2,
                                           optimizer=opt)
    model.fit(*data(bad_batches=(1,)), batch_size=BATCH_SIZE, epochs=2,
              shuffle=False, verbose=0, callbacks=[monitor])
    events = read_events(log_dir)
    # Written after batches 2 and 4 of each epoch; one skip per epoch, in
    # batch 2, so the scale halves once per epoch and never grows back.
    self.assertEqual([(2, 1.), (4, 1.), (6, 2.), (8, 2.)],
                     events["batch_skipped_steps"])
    self.assertEqual([(2, 32.), (4, 32.), (6, 16.), (8, 16.)],
                     events["batch_loss_scale"])
    self.assertEqual(8, int(opt.iterations))

  @parameterized.named_parameters(*FAMILIES)
  def test_counts_from_the_first_step_when_added_after_a_first_fit(
      self, package):
    _, model, opt = build(package)
    x, y = data()
    model.fit(x, y, batch_size=BATCH_SIZE, epochs=1, shuffle=False, verbose=0)
    scale_before = float(opt.loss_scale())
    history = model.fit(x, y, batch_size=BATCH_SIZE, epochs=1, shuffle=False,
                        verbose=0,
                        callbacks=[mplso.keras.LossScaleMonitor(optimizer=opt)])
    # Both fits skipped their Inf batch; the counts are the optimizer's.
    self.assertEqual([2], history.history["skipped_steps"])
    self.assertEqual([2], history.history["inf_steps"])
    self.assertLess(history.history["loss_scale"][0], 2 * scale_before)

  def test_keras_3_batch_logs_carry_the_values(self):
    keras, model, opt = build("keras")
    seen = []

    class Record(keras.callbacks.Callback):

      def on_train_batch_end(self, batch, logs=None):
        seen.append((float(logs["loss_scale"]), int(logs["skipped_steps"])))

    # Without optimizer= the monitor is of tf.keras's family.
    monitor = (mplso.keras.LossScaleMonitor() if default_package() == "keras"
               else mplso.keras.LossScaleMonitor(optimizer=opt))
    model.fit(*data(), batch_size=BATCH_SIZE, epochs=1, shuffle=False,
              verbose=0, callbacks=[monitor, Record()])
    self.assertEqual([(32., 1), (32., 1), (32., 1), (64., 1)], seen)

  @parameterized.named_parameters(*FAMILIES)
  def test_counter_is_not_checkpointed(self, package):
    _, model, opt = build(package)
    model.fit(*data(), batch_size=BATCH_SIZE, epochs=1, verbose=0,
              callbacks=[mplso.keras.LossScaleMonitor(optimizer=opt)])
    path = tf.train.Checkpoint(optimizer=opt).save(
        self.create_tempdir().full_path + "/ckpt")
    names = [name for name, _ in tf.train.list_variables(path)]
    self.assertNotEmpty([n for n in names if "current_loss_scale" in n])
    self.assertEmpty([n for n in names if "skipped" in n])

  def test_optimizer_picks_the_family(self):
    import tf_keras  # pylint: disable=g-import-not-at-top
    _, _, opt = build("tf_keras")
    monitor = mplso.keras.LossScaleMonitor(optimizer=opt)
    self.assertIsInstance(monitor, tf_keras.callbacks.Callback)

  def test_model_of_another_family_is_refused(self):
    other = "keras" if default_package() == "tf_keras" else "tf_keras"
    _, model, _ = build(other)
    with self.assertRaisesRegex(TypeError, "keras callback.*optimizer=opt"):
      mplso.keras.LossScaleMonitor().set_model(model)

  def test_optimizer_without_loss_scale_is_refused(self):
    keras = importlib.import_module(default_package())
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(), loss="mse")
    with self.assertRaisesRegex(ValueError, "mplso.keras.LossScaleOptimizer"):
      model.fit(*data(bad_batches=()), verbose=0,
                callbacks=[mplso.keras.LossScaleMonitor()])

  @parameterized.named_parameters(("zero", 0), ("string", "batch"),
                                  ("bool", True))
  def test_bad_update_freq(self, update_freq):
    with self.assertRaisesRegex(ValueError, f"update_freq={update_freq!r}"):
      mplso.keras.LossScaleMonitor(update_freq=update_freq)

  def test_bad_optimizer(self):
    with self.assertRaisesRegex(ValueError, "optimizer='adam'"):
      mplso.keras.LossScaleMonitor(optimizer="adam")


if __name__ == "__main__":
  absltest.main()
