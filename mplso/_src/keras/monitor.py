"""`mplso.keras.LossScaleMonitor`: shows the loss scale and skipped steps in `fit`.

Keras 3 and tf_keras have different `Callback` base classes, and each one's
`fit` wants its own. `LossScaleMonitor(...)` returns a callback of the family
of the optimizer it is given or, without one, of the family `tf.keras` is
(Keras 3 unless `TF_USE_LEGACY_KERAS=1`); its class is built once per family
from the family-free `_MonitorMixin` and that family's `Callback`.
"""

from __future__ import annotations

import importlib
import os

import numpy as np
import tensorflow as tf

from mplso._src.diagnostics import log_state
from mplso._src.diagnostics import overflow
from mplso._src.diagnostics import underflow
from mplso._src.keras import dispatch
from mplso._src.keras import factory

_CLASSES: dict[str, type] = {}

# The logged values that count steps (shown as ints, not as 1.0000).
_COUNTS = ("skipped_steps", "nan_steps", "inf_steps")


class _Count(np.lib.mixins.NDArrayOperatorsMixin, int):
  """A step count in `fit`'s logs: an int that the progress bars print as one.

  Both progress bars average every logged value (`*`, `/`, `np.mean`) and
  print the result as `f"{value:.4f}"`. NumPy's operator mixin routes that
  arithmetic through `__array_ufunc__`, which computes it as NumPy does and
  keeps a whole result a count, so the bar prints `3`, not `3.0000`;
  History, JSON and `isinstance(x, int)` see an int.
  """

  __hash__ = int.__hash__  # The mixin's `__eq__` would drop it.

  def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
    plain = [int(x) if isinstance(x, _Count) else x for x in inputs]
    result = getattr(ufunc, method)(*plain, **kwargs)
    if isinstance(result, (np.integer, np.floating)) and (
        float(result).is_integer()):
      return _Count(int(result))
    return result

  def mean(self, *args, **kwargs):
    del args, kwargs
    return self

  def __format__(self, spec):
    del spec
    return str(int(self))


class _TensorCount:
  """A count tensor in a batch's logs, read only when the progress bar prints.

  Keras 3 keeps the last value of each log and reads it back (`np.mean`)
  only when it prints, as it does for the loss tensor.
  """

  def __init__(self, tensor: tf.Tensor):
    self._tensor = tensor

  def mean(self, *args, **kwargs):
    del args, kwargs
    return _Count(int(self._tensor))

  def __int__(self):
    return int(self._tensor)

  def __float__(self):
    return float(self._tensor)

  def __repr__(self):
    return repr(int(self))


def _scalar_metadata() -> tf.compat.v1.SummaryMetadata:
  """What TensorBoard's scalars dashboard looks for in a summary.

  `tf.summary.scalar` lives in the `tensorboard` package, which TensorFlow
  does not install; `tf.summary.write` with this metadata writes the same
  record without it.
  """
  metadata = tf.compat.v1.SummaryMetadata()
  metadata.plugin_data.plugin_name = "scalars"
  return metadata


class _MonitorMixin:
  """The callback's behaviour, common to Keras 3 and tf_keras."""

  def __init__(self, log_dir=None, update_freq="epoch", optimizer=None):
    super().__init__()
    if update_freq != "epoch" and not (
        isinstance(update_freq, int) and not isinstance(update_freq, bool)
        and update_freq >= 1):
      raise ValueError(
          "`update_freq` must be 'epoch' or a positive int (write every N "
          f"batches). Received: update_freq={update_freq!r}.")
    self.log_dir = None if log_dir is None else os.fspath(log_dir)
    self.update_freq = update_freq
    self._given_optimizer = optimizer
    self._optimizer = None
    self._loss_scale = None
    self._writer = None

  # Keras hooks.

  def set_model(self, model):
    super().set_model(model)
    if not isinstance(model, importlib.import_module(self._PACKAGE).Model):
      raise TypeError(
          f"This LossScaleMonitor is a {self._PACKAGE} callback, but the "
          f"model is a {type(model).__module__}.{type(model).__name__}. "
          "Pass the model's optimizer, LossScaleMonitor(optimizer=opt), so "
          "the callback is built for its Keras.")
    optimizer = self._given_optimizer or getattr(model, "optimizer", None)
    try:
      loss_scale = overflow.loss_scale_of(optimizer)
    except ValueError:
      raise ValueError(
          "LossScaleMonitor needs a model compiled with an "
          "mplso.keras.LossScaleOptimizer. Received: "
          f"optimizer={optimizer!r}. Wrap the optimizer: "
          "mplso.keras.LossScaleOptimizer(opt).") from None
    self._optimizer, self._loss_scale = optimizer, loss_scale

  def on_train_begin(self, logs=None):
    if self.log_dir is not None and self._writer is None:
      self._writer = tf.summary.create_file_writer(
          os.path.join(self.log_dir, "train"))

  def on_train_batch_end(self, batch, logs=None):
    if self._optimizer is None:
      return
    write = self._writer is not None and self.update_freq != "epoch" and (
        (batch + 1) % self.update_freq == 0)
    to_log = logs is not None and self._PER_BATCH_LOGS
    if not (write or to_log):
      return
    values = self._tensors()
    if to_log:
      # Tensors, not numbers: reading them back is left to whoever displays
      # them (the progress bar), as for the loss itself.
      logs.update({key: _TensorCount(value) if key in _COUNTS else value
                   for key, value in values.items()})
    if write:
      self._write("batch_", self._optimizer.iterations,
                  {**values, **self._underflow()})

  def on_epoch_end(self, epoch, logs=None):
    if self._optimizer is None:
      return
    if logs is None and self._writer is None:
      return
    values = self._tensors()
    if logs is not None:
      # One host read per epoch; History and the progress bar show these.
      logs["loss_scale"] = float(values["loss_scale"])
      for key in _COUNTS:
        logs[key] = _Count(int(values[key]))
    metered = self._underflow()
    if logs is not None:
      logs.update({key: value for key, value in metered.items()
                   if key.startswith("max_")})
    if self._writer is not None:
      self._write("epoch_", epoch, {**values, **metered})

  def on_train_end(self, logs=None):
    if self._writer is not None:
      self._writer.close()
      self._writer = None

  # Helpers.

  def _tensors(self) -> dict[str, tf.Tensor]:
    counts = log_state.counts(self._loss_scale)
    return {"loss_scale": tf.convert_to_tensor(self._loss_scale()),
            **{key: tf.cast(count, tf.int64) for key, count in counts.items()}}

  def _underflow(self) -> dict[str, float]:
    """The underflow meter's newest sample; {} when the meter is off.

    `max_zero_fraction` (the largest over the variables) and, with a
    float16 gradient, `max_subnormal_fraction`; per variable
    `zero_fraction/<variable>` and `subnormal_fraction/<variable>`. NaN
    maxima before the first sample.
    """
    if not underflow.is_metered(self._loss_scale):
      return {}
    sample = underflow.latest(self._loss_scale)
    if sample is None:
      return {"max_zero_fraction": float("nan")}
    values = {"max_zero_fraction": max(sample["zero"].values(),
                                       default=float("nan"))}
    if sample["subnormal"]:
      values["max_subnormal_fraction"] = max(sample["subnormal"].values())
    for kind in ("zero", "subnormal"):
      values.update({f"{kind}_fraction/{name}": value
                     for name, value in sample[kind].items()})
    return values

  def _write(self, prefix: str, step, values: dict[str, tf.Tensor]) -> None:
    with self._writer.as_default():
      for key, value in values.items():
        tf.summary.write(prefix + key, tf.cast(value, tf.float32), step=step,
                         metadata=_scalar_metadata())


def _monitor_class(package: str) -> type:
  """Returns the `LossScaleMonitor` class of one Keras family, built once."""
  if package not in _CLASSES:
    base = importlib.import_module(package).callbacks.Callback
    _CLASSES[package] = type("LossScaleMonitor", (_MonitorMixin, base), {
        "__module__": __name__,
        "__doc__": LossScaleMonitor.__doc__,
        "_PACKAGE": package,
        # tf_keras's progress bar averages any log that is not one of the
        # model's metrics; Keras 3's shows each batch's value as it is.
        "_PER_BATCH_LOGS": package == "keras",
        # tf_keras: take logs as tensors, so no per-batch conversion is made
        # for this callback.
        "_supports_tf_logs": True,
    })
  return _CLASSES[package]


def _family_package(optimizer) -> str:
  """The Keras package of `optimizer`'s family, or of `tf.keras`."""
  if optimizer is None:
    return tf.keras.callbacks.Callback.__module__.split(".")[0]
  for family in factory.families():
    if isinstance(optimizer, family):
      return factory.package_of(family)
  raise ValueError(
      "`optimizer` must be an mplso.keras.LossScaleOptimizer. Received: "
      f"optimizer={optimizer!r}.")


def _build(log_dir=None, update_freq="epoch", optimizer=None):
  """`LossScaleMonitor(...)`: builds the callback of the right family."""
  monitor_class = _monitor_class(_family_package(optimizer))
  return monitor_class(log_dir=log_dir, update_freq=update_freq,
                       optimizer=optimizer)


def _family_for(*args, **kwargs) -> type:
  """The callback class a user's subclass, called so, combines with.

  The arguments are the subclass's: the family of the first
  `mplso.keras.LossScaleOptimizer` among them, else of `tf.keras`.
  """
  wrappers = tuple(factory.families())
  optimizer = next((value for value in (*args, *kwargs.values())
                    if isinstance(value, wrappers)), None)
  return _monitor_class(_family_package(optimizer))


def _family_classes() -> tuple[type, ...]:
  return tuple(_CLASSES.values())


class LossScaleMonitor(metaclass=dispatch.Dispatch):
  """A Keras callback that logs the loss scale and the skipped steps.

  Add it to `fit`'s callbacks. After each epoch it adds `loss_scale`,
  `skipped_steps`, `nan_steps` (skipped steps with a NaN gradient) and
  `inf_steps` (skipped with an Inf gradient and no NaN) to the epoch's logs,
  so the progress bar (counts as ints) and the `History` show them, and,
  with `log_dir`, writes them to TensorBoard as `epoch_loss_scale`,
  `epoch_skipped_steps`, `epoch_nan_steps` and `epoch_inf_steps` under
  `log_dir/train` (where `keras.callbacks.TensorBoard(log_dir)` writes the
  loss), at step = epoch. With `update_freq=N` it also writes them as
  `batch_...` every N batches, at step = `optimizer.iterations`.
  `mplso.overflow_log(optimizer)` tells which variables they were.
  With the underflow meter on (`mplso.meter_underflow(optimizer)`), the
  epoch's logs also hold the newest sample's `max_zero_fraction` (the
  largest share of exactly-zero elements in any variable's gradient) and,
  with float16 gradients, `max_subnormal_fraction`; TensorBoard gets them
  and, per variable, `zero_fraction/<variable>` and
  `subnormal_fraction/<variable>` (`epoch_...` and `batch_...` as above).
  On Keras 3 the two values also go into every batch's logs, so the progress
  bar shows them during the epoch (tf_keras's progress bar would average
  them over the epoch, so there they appear at the end of each epoch).

      monitor = mplso.keras.LossScaleMonitor(log_dir="/tmp/logs")
      history = model.fit(x, y, epochs=5, callbacks=[monitor])
      history.history["loss_scale"], history.history["skipped_steps"]
      history.history["nan_steps"], history.history["inf_steps"]

  The three counts come from the overflow log, which every step keeps in
  the graph (a skipped step writes it; nothing is read back to the host
  during a step). It is not checkpointed, so checkpoints are unchanged: the
  counts are of the steps skipped in this process since the optimizer's
  first step (`skipped_steps = nan_steps + inf_steps`). The logs read them
  once per epoch.

  Args:
    log_dir: directory for the TensorBoard event files; None writes none.
    update_freq: `"epoch"`, or an int N to also write every N batches.
    optimizer: the `mplso.keras.LossScaleOptimizer` to watch; by default the
      model's optimizer. It also picks the callback's Keras family.

  Raises:
    ValueError: for a bad `update_freq`; or, when `fit` starts, if the
      model's optimizer is not an `mplso.keras.LossScaleOptimizer`.
    TypeError: when `fit` starts, if the model is of another Keras family
      than the callback.
  """

  _build = staticmethod(_build)
  _family_for = staticmethod(_family_for)
  _family_classes = staticmethod(_family_classes)
