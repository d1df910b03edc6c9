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

# TF 1.14-1.15 code wrote its `tf.train.experimental` names after `import
# tensorflow as tf` (the v1 API was `tf`); the table has them as
# `tf.compat.v1.`. The one TF 2.0-2.3 never had under `tf.` joins the table.
TF1_NAMES: dict[str, str] = {
    "tf." + name[len("tf.compat.v1."):]: target
    for name, target in TARGETS.items()
    if name.startswith("tf.compat.v1.train.experimental.") and
    "tf." + name[len("tf.compat.v1."):] not in TARGETS}
TARGETS.update(TF1_NAMES)

# Where TF, contrib and Keras 2 defined the table's objects, as code imported
# them (`tf.` stands for `tensorflow.`): module -> {member: the public
# spelling its `tf_export` or `keras_export` gave it}.
_TRAIN = "tf.compat.v1.train.experimental"
_KERAS_EXPERIMENTAL = "tf.keras.mixed_precision.experimental"
_KERAS_LSO = "tf.keras.mixed_precision.LossScaleOptimizer"
_KERAS_2_LSO = {  # Keras 2.6-2.15's loss_scale_optimizer module.
    "LossScaleOptimizer": _KERAS_LSO,
    "BaseLossScaleOptimizer": _KERAS_LSO,  # Keras 2.11-2.15
    "LossScaleOptimizerV3": _KERAS_LSO,  # Keras 2.11-2.15
    "LossScaleOptimizerV1": f"{_KERAS_EXPERIMENTAL}.LossScaleOptimizer",
}
_PRIVATE_MEMBERS: dict[str, dict[str, str]] = {
    # TF 1.14-2.21 (TF 2.21 still has them, behind the v1 API).
    "tf.python.training.experimental.loss_scale_optimizer": {
        "MixedPrecisionLossScaleOptimizer":
            f"{_TRAIN}.MixedPrecisionLossScaleOptimizer"},
    "tf.python.training.experimental.loss_scale": {
        n: f"{_TRAIN}.{n}"
        for n in ("LossScale", "FixedLossScale", "DynamicLossScale")},
    # TF 1.14-1.15's functions had the plain name; TF 2.0-2.3 exported the
    # plain name as v2 and `_v1` as v1.
    "tf.python.training.experimental.mixed_precision": {
        f"{verb}_mixed_precision_graph_rewrite{suffix}":
            f"{root}.{verb}_mixed_precision_graph_rewrite"
        for verb in ("enable", "disable")
        for suffix, root in (("", "tf.train.experimental"), ("_v1", _TRAIN))},
    # TF 1.15-2.3's Keras.
    "tf.python.keras.mixed_precision.experimental.loss_scale_optimizer": {
        "LossScaleOptimizer": f"{_KERAS_EXPERIMENTAL}.LossScaleOptimizer"},
    "tf.python.keras.mixed_precision.experimental.policy": {
        n: f"{_KERAS_EXPERIMENTAL}.{n}"
        for n in ("Policy", "global_policy", "set_policy")},
    # TF 2.4's Keras, of which TF 2.21 keeps a copy that Keras 3 never uses.
    "tf.python.keras.mixed_precision.loss_scale_optimizer": {
        "LossScaleOptimizer": _KERAS_LSO,
        "LossScaleOptimizerV1": f"{_KERAS_EXPERIMENTAL}.LossScaleOptimizer"},
    "tf.python.keras.mixed_precision.policy": {
        "PolicyV1": f"{_KERAS_EXPERIMENTAL}.Policy",
        "set_policy": f"{_KERAS_EXPERIMENTAL}.set_policy",
        "global_policy": f"{_KERAS_EXPERIMENTAL}.global_policy"},
    # TF 1.5-1.15's contrib.
    "tf.contrib.mixed_precision.python.loss_scale_optimizer": {
        "LossScaleOptimizer": "tf.contrib.mixed_precision.LossScaleOptimizer"},
    "tf.contrib.mixed_precision.python.loss_scale_manager": {
        n: f"tf.contrib.mixed_precision.{n}"
        for n in ("LossScaleManager", "FixedLossScaleManager",
                  "ExponentialUpdateLossScaleManager")},
    # Keras 2.6-2.15's own package (Keras 3 has none of these modules).
    "keras.mixed_precision.experimental": {
        n: f"{_KERAS_EXPERIMENTAL}.{n}"
        for n in ("LossScaleOptimizer", "Policy", "global_policy",
                  "set_policy")},
    "keras.mixed_precision.loss_scale_optimizer": _KERAS_2_LSO,
    "keras.src.mixed_precision.loss_scale_optimizer": _KERAS_2_LSO,
    "keras.mixed_precision.policy": {
        "PolicyV1": f"{_KERAS_EXPERIMENTAL}.Policy"},
}

# Such a member -> the table's spelling of the same object.
PRIVATE: dict[str, str] = {
    f"{module}.{member}": public
    for module, members in _PRIVATE_MEMBERS.items()
    for member, public in members.items()}

# Members of those modules that TF never exported, and mplso's function
# that does the same (a warning names it).
PRIVATE_MPLSO: dict[str, str] = {
    "tf.python.training.experimental.loss_scale.get": "mplso.loss_scale.get",
    **{f"tf.python.keras.mixed_precision{sub}.loss_scale.{n}":
       f"mplso.loss_scale.{n}"
       for sub in ("", ".experimental") for n in ("serialize", "deserialize")},
}

# Members of those modules that TF 2.21 has a public name for, which works
# with the Keras `tf.keras` is (the private one sets TF's frozen Keras 2).
PRIVATE_TODAY: dict[str, str] = {
    f"{module}.{member}": f"tf.keras.mixed_precision.{member}"
    for module in ("tf.python.keras.mixed_precision.policy",
                   "keras.mixed_precision.policy",
                   "keras.src.mixed_precision.policy")
    for member in ("Policy", "global_policy", "set_global_policy")}

# The private modules (and the packages that hold them) whose members are
# legacy loss-scale code: a member not mapped above is one mplso does not
# serve.
PRIVATE_MODULES: frozenset[str] = frozenset(
    ".".join(module.split(".")[:i])
    for module in [*_PRIVATE_MEMBERS, "keras.src.mixed_precision.policy",
                   "tf.python.keras.mixed_precision.experimental.loss_scale",
                   "tf.python.keras.mixed_precision.loss_scale"]
    for i in range(3 if module.startswith("keras.") else 4,
                   module.count(".") + 2))

# Those TF 2.21 (under either Keras) lacks: an import of one fails.
PRIVATE_ABSENT: frozenset[str] = frozenset(
    module for module in PRIVATE_MODULES
    if module.startswith(("keras.", "tf.contrib.",
                          "tf.python.keras.mixed_precision.experimental")))

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

# The table's member names that are legacy loss-scale names wherever they
# appear (not `Policy` and the like, which many libraries have): reached
# through something the tool cannot resolve, they get a warning.
LEGACY_MEMBERS: frozenset[str] = frozenset(
    row.name.rpartition(".")[2] for row in compat_spellings.SPELLINGS
    if "LossScale" in row.name or "graph_rewrite" in row.name)

# What `keras.mixed_precision` holds in TF 2.21 (Keras 3; tf_keras has the
# first four): a chain that ends so is today's API.
KERAS_TODAY: frozenset[str] = frozenset({
    "LossScaleOptimizer", "Policy", "global_policy", "set_global_policy",
    "DTypePolicy", "dtype_policy", "set_dtype_policy"})

# One of these is in the text of every spelling of the table, of every
# namespace it lies in below `tensorflow`, of every import of one, and of
# every switch `switches` warns about.
WORDS = ("mixed_precision", "experimental", "contrib", "LossScale",
         "graph_rewrite", "MIXED_PRECISION", "float32_vars")

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


# Namespaces TF 2.21 has as attributes only under Keras 3: `tf.compat.v1.keras`
# works, `import tensorflow.compat.v1.keras` fails (ModuleNotFoundError).
ATTRIBUTES_ONLY: frozenset[str] = frozenset({
    "tf.compat.v1.keras", "tf.compat.v1.keras.mixed_precision",
    "tf.compat.v2.keras", "tf.compat.v2.keras.mixed_precision",
})


def absent_today(path: str) -> bool:
  """Whether an import of the module `path` fails on TF 2.21.

  Under either Keras: a namespace only `install()` makes, a private module
  TF 2.21 lacks, or a namespace it has as an attribute only (Keras 3).
  """
  return (made_by_install(path) or path in PRIVATE_ABSENT or
          path in ATTRIBUTES_ONLY)


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


def public(path: str) -> str:
  """The table's spelling of `path`, where it has another; else `path`.

  A private module's member is the public name it was exported as, and
  `tf.compat.v1.compat.v2.X` (either API's `compat`) is `tf.compat.v2.X`.
  """
  for api in ("tf.compat.v1.compat.", "tf.compat.v2.compat."):
    if path.startswith(api):
      path = "tf.compat." + path[len(api):]
  return PRIVATE.get(path, path)


def private_member(path: str) -> bool:
  """Whether `path` is a member of a private legacy module, not mapped.

  Such a member (`tf.python.keras.mixed_precision.policy.policy_scope`) is
  one mplso does not serve.
  """
  parent = path.rpartition(".")[0]
  return (parent in PRIVATE_MODULES and path not in PRIVATE and
          path not in TARGETS and path not in PRIVATE_MODULES)


# The libraries whose imports the planner reads itself; a project's own
# module is any other. No file of a tree the tool converts is one of their
# modules: every file in scope imports them, and their parts (`keras`,
# `mixed_precision`, `experimental`, `layers`) would join unrelated files
# named so (`optimizer_uses.imported_names`).
LIBRARIES = frozenset({"tensorflow", "keras", "tf_keras", "mplso"})


def is_library(path: str) -> bool:
  """Whether a module path (`tensorflow.x`, or canonical `tf.x`) is one."""
  root = path.split(".")[0]
  return root in LIBRARIES or root == "tf"


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
  """Whether `name` is a legacy Keras LossScaleOptimizer class."""
  return TARGETS.get(name) == "mplso.keras.LossScaleOptimizer"


def is_tf23_dialect(name: str) -> bool:
  """Whether `name` is TF 2.1-2.3's `experimental.LossScaleOptimizer`."""
  return is_keras_optimizer(name) and ".experimental." in name


def target_module(target: str) -> str:
  """`mplso.keras.LossScaleOptimizer` -> `mplso.keras`."""
  return target.rpartition(".")[0]
