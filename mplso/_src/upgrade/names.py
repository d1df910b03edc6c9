"""What `mplso.upgrade` knows about the legacy names, as plain data.

Derived from the one spelling table (`compat.spellings`), plus what TF 2.21
itself provides, so that the tool imports no TensorFlow. A test checks the
facts about TF 2.21 here against TensorFlow under both Keras.
"""

from __future__ import annotations

from mplso._src.compat import spellings as compat_spellings

# Legacy spelling, as `tf.` + the path below `tensorflow` -> mplso's name.
TARGETS: dict[str, str] = {row.name: row.target
                           for row in compat_spellings.SPELLINGS}

# Namespaces that mplso serves whole, under the same member names, and that
# held nothing else: a binding of one becomes a binding of the mplso module.
SERVED_WHOLE: dict[str, str] = {
    "tf.contrib.mixed_precision": "mplso.contrib",
    "tf.compat.v1.contrib.mixed_precision": "mplso.contrib",
}

# Namespaces of the table that TF 2.21 lacks under either Keras: only
# `mplso.compat.install()` makes them exist.
INSTALL_ONLY: frozenset[str] = frozenset({
    "tf.contrib",
    "tf.contrib.mixed_precision",
    "tf.compat.v1.contrib",
    "tf.compat.v1.contrib.mixed_precision",
    "tf.mixed_precision",
    "tf.mixed_precision.experimental",
    "tf.compat.v2.mixed_precision",
    "tf.compat.v2.mixed_precision.experimental",
    "tf.keras.mixed_precision.experimental",
    "tf.compat.v1.keras.mixed_precision.experimental",
    "tf.compat.v2.keras.mixed_precision.experimental",
})

# Every namespace a table spelling lies in (`tf.a.b` for `tf.a.b.Name`).
NAMESPACES: frozenset[str] = frozenset(
    ".".join(name.split(".")[:i])
    for name in TARGETS for i in range(1, name.count(".") + 1))

# One of these is in the text of every spelling of the table, of every
# namespace it lies in below `tensorflow`, and of every import of one.
WORDS = ("mixed_precision", "experimental", "contrib", "LossScale",
         "graph_rewrite")

# The Keras class Keras's own code names in TF 2.21, under either Keras.
NATIVE_OPTIMIZER = "keras.mixed_precision.LossScaleOptimizer"
NATIVE_POLICY = {
    "mplso.compat.Policy": "keras.mixed_precision.Policy",
    "mplso.compat.set_policy": "keras.mixed_precision.set_global_policy",
    "mplso.compat.global_policy": "keras.mixed_precision.global_policy",
}


def made_by_install(path: str) -> bool:
  """Whether `path` is a namespace that only `install()` makes exist."""
  return path in INSTALL_ONLY


def unserved_member(path: str) -> bool:
  """Whether `path` is a legacy mixed-precision name mplso does not serve.

  That is a member of a mixed-precision namespace that TF 2.21 lacks, other
  than the table's (`tf.keras.mixed_precision.experimental.get_layer_policy`):
  it fails on TF 2.21, and under `install()` too. Other members of
  `tf.contrib` (`tf.contrib.layers`) are not mixed precision's at all.
  """
  parent = path.rpartition(".")[0]
  return (parent in INSTALL_ONLY and "mixed_precision" in parent and
          path not in TARGETS and path not in NAMESPACES)


def canonical(qualified: str) -> str | None:
  """`tensorflow.a.b` -> `tf.a.b`; None for a name outside TensorFlow."""
  if qualified == "tensorflow":
    return "tf"
  if qualified.startswith("tensorflow."):
    return "tf." + qualified[len("tensorflow."):]
  return None


def canonical_native(name: str) -> bool:
  """Whether TF 2.21 itself still has `name` (Keras's own class)."""
  return name in ("tf.keras.mixed_precision.LossScaleOptimizer",
                  "tf.compat.v1.keras.mixed_precision.LossScaleOptimizer",
                  "tf.compat.v2.keras.mixed_precision.LossScaleOptimizer")


def is_keras_optimizer(name: str) -> bool:
  return TARGETS.get(name) == "mplso.keras.LossScaleOptimizer"


def is_tf23_dialect(name: str) -> bool:
  """Whether `name` is TF 2.1-2.3's `experimental.LossScaleOptimizer`."""
  return is_keras_optimizer(name) and ".experimental." in name


def target_module(target: str) -> str:
  """`mplso.keras.LossScaleOptimizer` -> `mplso.keras`."""
  return target.rpartition(".")[0]
