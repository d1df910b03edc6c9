"""The one table of TensorFlow's legacy mixed-precision spellings mplso serves.

Plain data, importing nothing, so that `python -m mplso.compat --help` can
name the families without loading TensorFlow. `compat.install` builds
`install()` and `uninstall()` from it, `python -m mplso.compat --list` prints
it and docs/legacy-names.md shows it (a test keeps the page equal to it).

Each row is `Spelling(name, target, since)`: `name` is the legacy spelling,
as a script writes it after `import tensorflow as tf`; `target` is the public
mplso name it resolves to after `install()`, whichever Keras `tf.keras` is;
`since` the TF releases that exported it.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Spelling:
  name: str
  target: str
  since: str


_LOSS_SCALES = ("LossScale", "FixedLossScale", "DynamicLossScale")
_REWRITE = ("enable_mixed_precision_graph_rewrite",
            "disable_mixed_precision_graph_rewrite")
_CONTRIB = ("LossScaleOptimizer", "LossScaleManager", "FixedLossScaleManager",
            "ExponentialUpdateLossScaleManager")
_KERAS_EXPERIMENTAL = {"LossScaleOptimizer": "mplso.keras.LossScaleOptimizer",
                       "Policy": "mplso.compat.Policy",
                       "global_policy": "mplso.compat.global_policy",
                       "set_policy": "mplso.compat.set_policy"}

# TF 2.4+ kept (deprecated) only `enable` in v2's `tf.train.experimental`.
_V2_TRAIN_SINCE = {"enable_mixed_precision_graph_rewrite": "2.0-2.x"}


def _rows() -> tuple[Spelling, ...]:
  rows = []
  # TF 1.14-1.15 `tf.train.experimental`, kept as `tf.compat.v1` in TF 2.x.
  for prefix in ("tf.compat.v1.train.experimental",
                 "tf.compat.v1.mixed_precision"):
    since = ("1.14-2.21" if "train" in prefix else "2.4-2.21 (v1)")
    rows.append(Spelling(f"{prefix}.MixedPrecisionLossScaleOptimizer",
                         "mplso.MixedPrecisionLossScaleOptimizer", since))
    rows += [Spelling(f"{prefix}.{n}", f"mplso.{n}", since)
             for n in _LOSS_SCALES + _REWRITE]
  rows += [Spelling(f"tf.compat.v1.mixed_precision.experimental.{n}",
                    f"mplso.{n}", "2.1-2.21 (v1)") for n in _LOSS_SCALES]
  # TF 2.0-2.3 `tf.train.experimental` and TF 2.1-2.4
  # `tf.mixed_precision.experimental`, also reached through `tf.compat.v2`.
  for root in ("tf", "tf.compat.v2"):
    rows += [Spelling(f"{root}.train.experimental.{n}", f"mplso.{n}",
                      _V2_TRAIN_SINCE.get(n, "2.0-2.3"))
             for n in _LOSS_SCALES + _REWRITE]
    rows += [Spelling(f"{root}.mixed_precision.experimental.{n}",
                      f"mplso.{n}", "2.1-2.4") for n in _LOSS_SCALES]
  # TF 1.x contrib.
  for root in ("tf", "tf.compat.v1"):
    rows += [Spelling(f"{root}.contrib.mixed_precision.{n}",
                      f"mplso.contrib.{n}", "1.5-1.15") for n in _CONTRIB]
  # TF 1.15-2.8 `tf.keras.mixed_precision.experimental` (LossScaleOptimizer
  # from TF 2.1; `Policy(name, loss_scale)` as TF 2.1-2.3 had it).
  for root in ("tf", "tf.compat.v1", "tf.compat.v2"):
    rows += [Spelling(f"{root}.keras.mixed_precision.experimental.{n}",
                      target, "1.15-2.8")
             for n, target in _KERAS_EXPERIMENTAL.items()]
  # TF 2.4-2.15 `tf.keras.mixed_precision.LossScaleOptimizer`: Keras 3's own
  # class takes neither that dialect nor TF 2.3's, and tf_keras's lacks what
  # TF 2.4-2.10 code calls on today's optimizers (`get_gradients`).
  for root in ("tf", "tf.compat.v1", "tf.compat.v2"):
    rows.append(Spelling(f"{root}.keras.mixed_precision.LossScaleOptimizer",
                         "mplso.keras.LossScaleOptimizer", "2.4-2.15"))
  return tuple(rows)


SPELLINGS: tuple[Spelling, ...] = _rows()

# The Keras class each target that builds Keras objects builds an instance
# of (mplso's subclass), under each Keras `tf.keras` can be:
# {target: (Keras 3's, tf_keras's)}. Every other target does the same under
# both.
PER_KERAS: dict[str, tuple[str, str]] = {
    "mplso.keras.LossScaleOptimizer": (
        "keras.optimizers.LossScaleOptimizer",
        "tf_keras.mixed_precision.LossScaleOptimizer"),
    "mplso.compat.Policy": ("keras.DTypePolicy",
                            "tf_keras.mixed_precision.Policy"),
}


def _namespaces() -> tuple[str, ...]:
  namespaces = {}
  for row in SPELLINGS:
    parts = row.name.split(".")[:-1]
    for end in range(2, len(parts) + 1):
      namespaces.setdefault(".".join(parts[:end]), None)
  return tuple(namespaces)


# Every namespace a spelling lies in, each after the one it lies in
# (`tf.contrib`, then `tf.contrib.mixed_precision`); not `tf` itself.
# install() makes each importable by its module path (`import
# tensorflow.contrib.mixed_precision`, `from tensorflow.keras.mixed_precision
# .experimental import LossScaleOptimizer`).
NAMESPACES: tuple[str, ...] = _namespaces()


def module_name(namespace: str) -> str:
  """Returns the module path of a namespace: `tf.a.b` -> `tensorflow.a.b`."""
  return "tensorflow" + namespace[len("tf"):]


def import_forms() -> tuple[tuple[str, str, str], ...]:
  """Returns `(module path, namespace, TF releases)` per namespace of names.

  One for each namespace that holds spellings, in the table's order; the
  releases are those of its spellings. The namespaces above them are
  importable too, but hold no names of their own.
  """
  forms = []
  for namespace in NAMESPACES:
    releases = [row.since for row in SPELLINGS
                if row.name.rpartition(".")[0] == namespace]
    if releases:
      forms.append((module_name(namespace), namespace,
                    ", ".join(dict.fromkeys(releases))))
  return tuple(forms)


# What `python -m mplso.compat --help` names, one family a line.
FAMILIES: tuple[str, ...] = (
    "tf.compat.v1.train.experimental.* and tf.compat.v1.mixed_precision.*: "
    "MixedPrecisionLossScaleOptimizer, LossScale, FixedLossScale, "
    "DynamicLossScale, enable/disable_mixed_precision_graph_rewrite",
    "tf.train.experimental.* and tf.mixed_precision.experimental.* "
    "(TF 2.0-2.4, also under tf.compat.v2): the loss scales and the graph "
    "rewrite functions",
    "tf.contrib.mixed_precision.* (also tf.compat.v1.contrib): "
    "LossScaleOptimizer, LossScaleManager, FixedLossScaleManager, "
    "ExponentialUpdateLossScaleManager",
    "tf.keras.mixed_precision.experimental.*: LossScaleOptimizer, "
    "Policy(name, loss_scale), set_policy, global_policy",
    "tf.keras.mixed_precision.LossScaleOptimizer (TF 2.4-2.15), also the "
    "class Model.compile wraps a mixed_float16 model's optimizer in",
    "each namespace above by its module path too: `import "
    "tensorflow.contrib.mixed_precision`, `from "
    "tensorflow.keras.mixed_precision.experimental import "
    "LossScaleOptimizer`",
)


def per_keras(row: Spelling) -> str:
  """Returns what `row`'s target builds under each Keras ("" if the same)."""
  if row.target not in PER_KERAS:
    return ""
  keras_3, tf_keras = PER_KERAS[row.target]
  return f"builds a {keras_3} on Keras 3, a {tf_keras} on tf_keras"


def markdown_table() -> str:
  """Returns the table as docs/legacy-names.md shows it (a test compares)."""
  lines = ["| Legacy spelling | After `install()` | TF releases | Note |",
           "| --- | --- | --- | --- |"]
  for row in SPELLINGS:
    lines.append(f"| `{row.name}` | `{row.target}` | {row.since} | "
                 f"{per_keras(row)} |")
  for module, namespace, since in import_forms():
    lines.append(f"| `import {module}` | `{namespace}` | {since} | "
                 "import form |")
  return "\n".join(lines) + "\n"
