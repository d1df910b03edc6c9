"""Points TensorFlow's legacy loss-scale spellings at mplso, and back.

Every spelling comes from the one table in `compat.spellings`; install()
records what each name held before (or that it was absent) and uninstall()
puts exactly that back, in reverse order. The same record covers what
install() patches in the Keras `tf.keras` is: `Model.compile`, which honours
TF 2.3's policy loss scale (`compat.policy`), and the globals in which
`compile` finds the class it wraps a `mixed_float16` model's optimizer in
(`compat.compile`).
"""

from __future__ import annotations

import importlib
import re
import sys
import types

import tensorflow as tf

from mplso._src.compat import compile as compat_compile
from mplso._src.compat import policy as compat_policy
from mplso._src.compat import spellings as compat_spellings
from mplso._src.keras import dispatch

_MISSING = object()

# Paths whose `import` statement gives another module object than the
# attribute path does.
_IMPORTED_ALIASES = {
    "tf.compat.v1": "tensorflow.compat.v1",
    "tf.compat.v2": "tensorflow.compat.v2",
    "tf.keras.mixed_precision": "tensorflow.keras.mixed_precision",
}

# What install() replaced: (namespace, name, original or _MISSING), in order.
_saved: list[tuple[object, str, object]] | None = None


def keras_is_keras_3() -> bool:
  """Whether `tf.keras` is Keras 3 (not tf_keras) in this process."""
  return tf.keras.optimizers.SGD.__module__.startswith("keras")


def resolve_target(target: str):
  """Returns the mplso object a table target such as `mplso.keras.X` names."""
  module_name, _, attribute = target.rpartition(".")
  return getattr(importlib.import_module(module_name), attribute)


def _get(namespace, name):
  if isinstance(namespace, dict):
    return namespace.get(name, _MISSING)
  if isinstance(namespace, type):  # Only what the class itself defines.
    return vars(namespace).get(name, _MISSING)
  return getattr(namespace, name, _MISSING)


def _set(namespace, name, value):
  if isinstance(namespace, dict):
    if value is _MISSING:
      namespace.pop(name, None)
    else:
      namespace[name] = value
  elif value is _MISSING:
    if hasattr(namespace, name):
      delattr(namespace, name)
  else:
    setattr(namespace, name, value)


class _Installer:
  """Applies the table, remembering each original value."""

  def __init__(self):
    self.saved: list[tuple[object, str, object]] = []
    self._created: dict[str, types.ModuleType] = {}

  def put(self, namespace, name, value) -> None:
    self.saved.append((namespace, name, _get(namespace, name)))
    _set(namespace, name, value)

  def parents(self, path: str) -> list[object]:
    """Returns the objects a script reaches as `path`, creating it if absent.

    Some paths are two objects: `tf.compat.v1` differs from what
    `import tensorflow.compat.v1` gives (and becomes that afterwards), and so
    do `tf.keras.mixed_precision` and its import (TF's lazy Keras loader).
    Both are returned, each given the same members.
    """
    if path == "tf":
      return [tf]
    parent_path, _, name = path.rpartition(".")
    found = []
    for parent in self.parents(parent_path):
      child = getattr(parent, name, None)
      if child is None:
        # One namespace per name: `tf.compat.v1.contrib` is `tf.contrib`.
        canonical = re.sub(r"^tf\.compat\.v[12]\.", "tf.", path)
        child = self._created.get(canonical)
        if child is None:
          child = types.ModuleType(
              "tensorflow" + canonical[2:],
              f"`{canonical}`, as far as mplso.compat provides it.")
          self._created[canonical] = child
        self.put(parent, name, child)
      found.append(child)
    if path in _IMPORTED_ALIASES:
      found.append(importlib.import_module(_IMPORTED_ALIASES[path]))
    unique = []
    for namespace in found:
      if all(namespace is not seen for seen in unique):
        unique.append(namespace)
    return unique

  def apply(self, rows) -> None:
    for row in rows:
      parent, _, name = row.name.rpartition(".")
      value = resolve_target(row.target)
      for namespace in self.parents(parent):
        original = _get(namespace, name)
        if original is value:
          continue
        if (isinstance(value, dispatch.Dispatch) and
            isinstance(original, type) and original not in value._also_counts):  # pylint: disable=protected-access
          # `isinstance(x, tf.keras.mixed_precision.LossScaleOptimizer)`
          # keeps holding for Keras's own class's instances.
          self.put(value, "_also_counts", value._also_counts + (original,))  # pylint: disable=protected-access
        self.put(namespace, name, value)
    for module_name, spelling in compat_spellings.IMPORTABLE:
      self.put(sys.modules, module_name, self.parents(spelling)[0])
    for cls, name, method in compat_policy.compile_patches():
      self.put(cls, name, method)
    for module, name, value in compat_compile.patches(keras_is_keras_3()):
      self.put(module, name, value)


def install() -> None:
  """Makes TensorFlow's legacy loss-scale names resolve to mplso.

  Every spelling TF 1.14-2.15 exported for the loss-scale optimizers, the
  loss scales, the contrib managers, the graph rewrite functions and the
  Keras mixed-precision names resolves to mplso afterwards (the table:
  `python -m mplso.compat --list`), among them
  `tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer`,
  `tf.compat.v1.mixed_precision.*`, `tf.contrib.mixed_precision.*` (also
  importable), `tf.train.experimental.enable_mixed_precision_graph_rewrite`,
  `tf.keras.mixed_precision.experimental.{LossScaleOptimizer, Policy}` and
  `tf.keras.mixed_precision.LossScaleOptimizer`, under Keras 3 and tf_keras
  alike. Keras models compiled under a policy with a loss scale wrap their
  optimizer in `mplso.keras.LossScaleOptimizer`, as TF 2.1-2.3 did, and so
  do models compiled under `mixed_float16`, as TF 2.4-2.15 did. Calling it
  again changes nothing; `uninstall()` restores what was there.
  """
  global _saved
  if _saved is not None:
    return
  installer = _Installer()
  try:
    installer.apply(compat_spellings.SPELLINGS)
  except BaseException:
    for namespace, name, original in reversed(installer.saved):
      _set(namespace, name, original)
    raise
  _saved = installer.saved


def uninstall() -> None:
  """Restores every name `install()` replaced; a no-op when not installed."""
  global _saved
  if _saved is None:
    return
  for namespace, name, original in reversed(_saved):
    _set(namespace, name, original)
  _saved = None


def installed() -> bool:
  """Whether `install()` is in effect."""
  return _saved is not None
