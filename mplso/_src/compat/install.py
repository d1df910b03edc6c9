"""Points TensorFlow's legacy loss-scale spellings at mplso, and back.

Every spelling comes from the one table in `compat.spellings`; install()
records what each name held before (or that it was absent) and uninstall()
puts exactly that back, in reverse order. Every namespace the spellings lie
in becomes importable by its module path (`from
tensorflow.keras.mixed_precision.experimental import LossScaleOptimizer`):
TF's own module imported where TF 2.21 has one, the namespace put in
`sys.modules` where it has none, both in the record. The same record covers
what install() patches in the Keras `tf.keras` is: `Model.compile`, which
honours TF 2.3's policy loss scale (`compat.policy`), and the globals in
which `compile` finds the class it wraps a `mixed_float16` model's optimizer
in (`compat.compile`).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types

import tensorflow as tf

from mplso._src.compat import compile as compat_compile
from mplso._src.compat import policy as compat_policy
from mplso._src.compat import spellings as compat_spellings
from mplso._src.keras import dispatch

_MISSING = object()

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


def _attribute_path(path: str):
  """Returns what `path` (`tf.a.b`) gives as attributes, from `tf` down."""
  value = tf
  for name in path.split(".")[1:]:
    value = getattr(value, name)
  return value


class _Installer:
  """Applies the table, remembering each original value."""

  def __init__(self):
    self.saved: list[tuple[object, str, object]] = []
    self._created: dict[str, types.ModuleType] = {}
    self._namespaces: dict[str, list[object]] = {"tf": [tf]}
    # Module paths of TensorFlow's own modules (imported already, or by
    # install()), and the namespaces only install() makes importable.
    self._native: set[str] = {"tensorflow"}
    self._imported: list[str] = []
    self._served: list[str] = []

  def put(self, namespace, name, value) -> None:
    self.saved.append((namespace, name, _get(namespace, name)))
    _set(namespace, name, value)

  def namespaces(self, path: str) -> list[object]:
    """Returns the objects a script reaches as `path`, creating it if absent.

    Where TF 2.21 has the module `tensorflow.<path>`, importing it gives
    another object than `tf.<path>` did, and puts it there: TF's API modules
    are also found as files under `tensorflow`'s own path
    (`import tensorflow.compat.v1`, `import tensorflow.train.experimental`),
    and `tf.keras` is a lazy loader. install() imports each such module as
    the program would, and returns what the path gave before as well, for
    code that holds it already: each is given the same members. A path
    that TF 2.21 lacks is one namespace, whether reached from `tf` or
    `tf.compat.v1`: `tf.compat.v1.contrib` is `tf.contrib`.
    """
    if path in self._namespaces:
      return self._namespaces[path]
    parent_path, _, name = path.rpartition(".")
    parents = self.namespaces(parent_path)
    found = [_get(parent, name) for parent in parents]  # Before the import.
    module = self._import_natively(path)
    for parent in parents:
      if _get(parent, name) is _MISSING:
        self.put(parent, name,
                 self._create(path) if module is None else module)
      found.append(_get(parent, name))
    if module is None:
      self._served.append(path)
    else:
      found.append(module)
    unique = []
    for namespace in found:
      if namespace is not _MISSING and all(namespace is not seen
                                           for seen in unique):
        unique.append(namespace)
    self._namespaces[path] = unique
    return unique

  def _import_natively(self, path: str):
    """Returns TF's module `tensorflow.<path>`, imported; None if it has none.

    The import is recorded (the module, and the attribute it sets on the
    module above), so that uninstall() takes it back. Below a namespace
    that only install() serves, TF has no module.
    """
    module_name = compat_spellings.module_name(path)
    if module_name in sys.modules:
      self._native.add(module_name)
      return sys.modules[module_name]
    parent_name, _, name = module_name.rpartition(".")
    if parent_name not in self._native:
      return None
    try:
      spec = importlib.util.find_spec(module_name)
    except ImportError:  # The module above is no package.
      spec = None
    if spec is None:
      return None
    parent = sys.modules[parent_name]
    self.saved.append((sys.modules, module_name, _MISSING))
    self.saved.append((parent, name, _get(parent, name)))
    self._native.add(module_name)
    self._imported.append(module_name)
    return importlib.import_module(module_name)

  def _create(self, path: str) -> types.ModuleType:
    canonical = re.sub(r"^tf\.compat\.v[12]\.", "tf.", path)
    if canonical not in self._created:
      self._created[canonical] = types.ModuleType(
          compat_spellings.module_name(canonical),
          f"`{canonical}`, as far as mplso.compat provides it.")
    return self._created[canonical]

  def apply(self) -> None:
    """Puts every spelling of the table in place, and makes it importable."""
    for path in compat_spellings.NAMESPACES:
      self.namespaces(path)
    # A lazy loader that loaded after such an import (`tf.keras`) put what
    # it loaded in its own place, over the imported module; a program's
    # `import` leaves that module there.
    for module_name in self._imported:
      parent_name, _, name = module_name.rpartition(".")
      parent = sys.modules[parent_name]
      if _get(parent, name) is not sys.modules[module_name]:
        self.put(parent, name, sys.modules[module_name])
    # What a path gives once TF's lazy loaders have loaded what they load.
    for path in self._served:
      self.put(sys.modules, compat_spellings.module_name(path),
               _attribute_path(path))
    for row in compat_spellings.SPELLINGS:
      parent, _, name = row.name.rpartition(".")
      value = resolve_target(row.target)
      for namespace in self.namespaces(parent):
        original = _get(namespace, name)
        if original is value:
          continue
        if (isinstance(value, dispatch.Dispatch) and
            isinstance(original, type) and original not in value._also_counts):  # pylint: disable=protected-access
          # `isinstance(x, tf.keras.mixed_precision.LossScaleOptimizer)`
          # keeps holding for Keras's own class's instances.
          self.put(value, "_also_counts", value._also_counts + (original,))  # pylint: disable=protected-access
        self.put(namespace, name, value)
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
  `tf.compat.v1.mixed_precision.*`, `tf.contrib.mixed_precision.*`,
  `tf.train.experimental.enable_mixed_precision_graph_rewrite`,
  `tf.keras.mixed_precision.experimental.{LossScaleOptimizer, Policy}` and
  `tf.keras.mixed_precision.LossScaleOptimizer`, under Keras 3 and tf_keras
  alike; every namespace they lie in is importable by its module path
  (`import tensorflow.contrib.mixed_precision`). Keras models compiled under
  a policy with a loss scale wrap their optimizer in
  `mplso.keras.LossScaleOptimizer`, as TF 2.1-2.3 did, and so do models
  compiled under `mixed_float16`, as TF 2.4-2.15 did. Calling it again
  changes nothing; `uninstall()` restores what was there.
  """
  global _saved
  if _saved is not None:
    return
  installer = _Installer()
  try:
    installer.apply()
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
