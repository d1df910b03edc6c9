"""Warnings for legacy names the upgrade cannot resolve for certain.

The plan rewrites what `bindings` names for certain. What it cannot name
gets a `WARNING` line here, with what to do, so that no use of a legacy
name passes without a report line:

- a name bound in more than one way (`try: import tensorflow.compat.v1 as
  tf` / `except ImportError: import tensorflow as tf`): `agreed` gives the
  path when every binding leads to the same mplso name, `two_ways_why` the
  warning otherwise;
- a member of a private module that mplso does not serve (`unserved_why`);
- a legacy member, or a `mixed_precision` namespace's, reached through
  something the tool cannot follow (a helper's result, a parameter, an
  object's attribute, a name nothing binds): `warnings`, which also adds
  `switches`' warnings. Not a chain that ends as TF 2.21's own
  `keras.mixed_precision` API (`LossScaleOptimizer`, `Policy`,
  `set_global_policy`, ...), nor one whose first name is a class or
  function of the file or an import of another module (Keras 3's
  `keras.mixed_precision`, a project's own module: the upgrade of a whole
  tree rewrites that module itself).
"""

from __future__ import annotations

import libcst as cst
from libcst import metadata
from libcst.helpers import get_full_name_for_node

from mplso._src.upgrade import bindings as bindings_lib
from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import names
from mplso._src.upgrade import stars
from mplso._src.upgrade import switches


def _meaning(path: str | None) -> str | None:
  """The mplso name a path is rewritten to, or None."""
  if path is None:
    return None
  return names.TARGETS.get(path) or names.SERVED_WHOLE.get(path)


def _considered(bindings: bindings_lib.Bindings, node, rebound):
  """The (binding, path) pairs that decide for `node`.

  Not a binding the upgrade makes mplso's (an import it rewrites), nor an
  assignment of None (`except ImportError: tf = None`: a use through it
  fails either way).
  """
  found = []
  for binding, path in bindings.resolutions(node):
    if binding in rebound:
      continue
    if isinstance(binding, metadata.Assignment):
      value = bindings.assigned_value(binding.node)
      if isinstance(value, cst.Name) and value.value == "None":
        continue
    found.append((binding, path))
  return found


def agreed(bindings: bindings_lib.Bindings, node: cst.BaseExpression,
           rebound) -> bindings_lib.Resolved | None:
  """The path of `node` when each of its bindings leads to one mplso name.

  Args:
    bindings: the module's bindings.
    node: a chain whose first name is bound more than once.
    rebound: the bindings the upgrade makes name mplso's objects.
  """
  found = _considered(bindings, node, rebound)
  meanings = {_meaning(path) for _, path in found}
  if not found or len(meanings) != 1 or None in meanings:
    return None
  binding, path = found[0]
  return bindings_lib.Resolved(path, binding)


def legacy(path: str | None) -> bool:
  """Whether `path`, or a chain it begins, is a legacy name.

  That is, whether the planner acts on a chain that reaches `path`.
  """
  if path is None:
    return False
  parts = path.split(".")
  return any(
      _meaning(prefix) or names.made_by_install(prefix) or
      names.unserved_member(prefix) or unserved_why(prefix)
      for prefix in (".".join(parts[:i]) for i in range(2, len(parts) + 1)))


def _binding_text(bindings: bindings_lib.Bindings, binding,
                  path: str | None) -> str:
  """What one binding makes of a name, for a warning."""
  where = f"the binding at line {bindings.line(binding.node)}"
  meaning = _meaning(path)
  if meaning:
    return f"`{meaning}` through {where}"
  if path is None:
    return f"unknown through {where}"
  if path.startswith("tf."):
    return f"`{path}`, which mplso does not serve, through {where}"
  return f"`{path}`, not TensorFlow's, through {where}"


def two_ways_why(bindings: bindings_lib.Bindings, node: cst.BaseExpression,
                 rebound) -> str:
  """Why `node`, bound in ways that disagree, is left as it is; or "".

  "" unless one of its bindings makes it (or a chain inside it) a legacy
  name, and none of the chains inside it is `agreed`.
  """
  found = _considered(bindings, node, rebound)
  if len(found) < 2 or not any(legacy(path) for _, path in found):
    return ""
  inner = node
  while inner is not None:
    if agreed(bindings, inner, rebound) is not None:
      return ""
    inner = (inner.value if isinstance(inner, cst.Attribute) else
             None)
  first = bindings.chain(node)[0].value
  ways = "; ".join(_binding_text(bindings, b, p) for b, p in found)
  return (f"kept: `{first}` is bound in more than one way, and they make "
          f"this a different name: {ways}. Rewrite it by hand to the "
          "name of the binding that runs on TF 2.21")


def unserved_why(path: str) -> str:
  """Why a private module's member (or the module) stays; "" for others."""
  parts = path.split(".")
  for i in range(2, len(parts) + 1):
    prefix = ".".join(parts[:i])
    if prefix in names.PRIVATE_TODAY:
      return (f"kept: `{prefix}` is private; its public name "
              f"`{names.PRIVATE_TODAY[prefix]}` is TF 2.21's own and acts "
              "on the Keras `tf.keras` is (the private one acts on TF's "
              "frozen copy of Keras 2, or is gone): use that")
    if prefix in names.PRIVATE_MPLSO:
      return (f"kept: `{prefix}` is private, and TF never exported it; "
              f"`{names.PRIVATE_MPLSO[prefix]}` does the same: use that")
    if names.private_member(prefix):
      return (f"kept: `{prefix}` is a private member of legacy loss-scale "
              "code, not one of the names mplso serves"
              + ("; TF 2.21 lacks its module" if
                 names.absent_today(prefix.rpartition(".")[0]) else "")
              + ": rewrite it by hand")
  if path in names.PRIVATE_MODULES:
    return (f"kept: the private module `{path}` is used itself, not one "
            "of its members: the upgrade cannot rewrite what is read from "
            "it elsewhere"
            + ("; TF 2.21 lacks it" if names.absent_today(path) else ""))
  return ""


# Why a reach through what the tool cannot resolve gets a warning.
_UNRESOLVED_WHY = (
    "the upgrade cannot tell what `{base}` is, and `{name}`, read through "
    "it, is a legacy loss-scale name: if it is TensorFlow's (a helper that "
    "returns `tf`, `tf.compat.v1`, `tf.contrib.mixed_precision`...), "
    "change it by hand to mplso's name (`python -m mplso.compat --list`) "
    "or make the helper return mplso's module")
_UNBOUND_WHY = (
    "nothing in the file binds `{name}`, a legacy loss-scale name (a star "
    "import of another module may give it): if it is TensorFlow's, import "
    "mplso's by name (`python -m mplso.compat --list`)")


_IMPORTED_WHY = (
    "`{base}` is imported from another module (`{path}`), which the "
    "upgrade does not follow; spelled from TensorFlow, this is "
    "`{spelled}`, a legacy loss-scale name TF 2.21 lacks: if `{path}` is "
    "TensorFlow (re-exported), change it by hand to mplso's `{target}`")

# The TensorFlow modules a project's own module may re-export (`from utils
# import tf`).
_TF_ROOTS = ("tensorflow", "tensorflow.compat.v1")


def _through_import(bindings: bindings_lib.Bindings, steps, last: int
                    ) -> tuple[str, str] | None:
  """(the import's path, the TF name) for a legacy name read as TF's.

  A chain whose first name every binding imports from a module that is no
  library (`from utils import tf`), and whose attributes up to `last`,
  read from TensorFlow, spell a legacy name
  (`tf.contrib.mixed_precision.LossScaleOptimizer`). None otherwise.
  """
  base = steps[0][0].value
  if not isinstance(base, cst.Name):
    return None
  resolutions = bindings.resolutions(base)
  if not resolutions or not all(
      isinstance(binding, metadata.ImportAssignment) and path and
      not names.is_library(path) for binding, path in resolutions):
    return None
  spelled = spelled_from_tf([name for _, name in steps[:last + 1]])
  return None if spelled is None else (resolutions[0][1], spelled)


def spelled_from_tf(attributes) -> str | None:
  """The legacy TF name `attributes` spell read from TensorFlow, or None.

  `["contrib", "mixed_precision", "LossScaleOptimizer"]` read from
  `tensorflow` (or `tensorflow.compat.v1`) is a legacy loss-scale name.
  """
  for root in _TF_ROOTS:
    spelled = ".".join((root, *attributes))
    if _meaning(names.canonical(spelled)):
      return spelled
  return None


def _chain_steps(node: cst.BaseExpression):
  """The attributes of a maximal chain, innermost first: (node, name)."""
  steps = []
  while isinstance(node, cst.Attribute):
    steps.append((node, node.attr.value))
    node = node.value
  return steps[::-1]


def _known(bindings: bindings_lib.Bindings,
           base: cst.BaseExpression) -> bool:
  """Whether the tool knows what `base` is, or that it is not TF's.

  Known: a chain whose first name each binding makes a path (an import, an
  alias of a TF namespace, a name assigned an imported module's name such
  as `contrib = mplso.contrib`), or a class or function of the file.
  """
  resolutions = bindings.resolutions(base)
  if not resolutions:
    return False
  return all(_known_binding(bindings, binding, path)
             for binding, path in resolutions)


def _known_binding(bindings: bindings_lib.Bindings, binding, path) -> bool:
  """Whether the tool knows what `binding` holds."""
  if path is not None or isinstance(binding.node, (cst.ClassDef,
                                                   cst.FunctionDef)):
    return True
  if isinstance(binding, metadata.Assignment) and isinstance(
      binding.node, cst.Name):
    value = bindings.assigned_value(binding.node)
    return value is not None and bindings.resolve(value) is not None
  return False


def _today(steps, index: int) -> bool:
  """Whether the chain is TF 2.21's `keras.mixed_precision.<member>`."""
  names_read = [name for _, name in steps]
  return (index >= 2 and names_read[index] in names.KERAS_TODAY and
          names_read[index - 1] == "mixed_precision" and
          names_read[index - 2] == "keras")


def _stored(parents, node) -> bool:
  """Whether the maximal chain `node` is assigned, deleted or imported."""
  parent = parents.get(node)
  if isinstance(parent, (cst.Del, cst.ImportAlias, cst.ImportFrom)):
    return True
  return isinstance(parent, (cst.AssignTarget, cst.AugAssign,
                             cst.AnnAssign)) and parent.target is node


def warnings(bindings: bindings_lib.Bindings,
             planned: list[edits_lib.Edit]) -> list[edits_lib.Edit]:
  """The warnings for legacy names reached through what is unresolved.

  Plus the warnings of `switches`. A chain on a line where the plan
  already has an edit of its text gets none.

  Args:
    bindings: the module's bindings.
    planned: the plan's edits so far.
  """
  module = bindings.wrapper.module
  parents = bindings.wrapper.resolve(metadata.ParentNodeProvider)
  covered = {(e.line, e.old) for e in planned}
  star_imports = star_namespaces(bindings)
  found = []

  def add(node, why):
    """Warns of `node`, once per line and text the plan has not covered."""
    line = bindings.line(node)
    text = module.code_for_node(node)
    if any(at == line and text in old for at, old in covered):
      return
    covered.add((line, text))
    found.append(edits_lib.warned(line, text, why))

  for node in parents:
    if not isinstance(node, cst.Attribute) or isinstance(
        parents.get(node), cst.Attribute) and parents[node].value is node:
      continue
    if _stored(parents, node):
      continue
    steps = _chain_steps(node)
    legacy = [
        index for index, (_, name) in enumerate(steps)
        if (name in names.LEGACY_MEMBERS and not _today(steps, index)) or (
            name == "experimental" and index and
            steps[index - 1][1] == "mixed_precision")]
    if legacy and not _known(bindings, steps[legacy[0]][0].value):
      add(node, _UNRESOLVED_WHY.format(
          base=module.code_for_node(steps[legacy[0]][0].value),
          name=steps[legacy[-1]][1]))
    elif legacy:
      found_through = _through_import(bindings, steps, legacy[-1])
      if found_through is not None:
        add(node, _IMPORTED_WHY.format(
            base=steps[0][0].value.value, path=found_through[0],
            spelled=found_through[1],
            target=_meaning(names.canonical(found_through[1]))))
  for name in bindings.unbound():
    if name.value in names.LEGACY_MEMBERS and not any(
        stars.gives(namespace, name.value) for namespace in star_imports):
      add(name, _UNBOUND_WHY.format(name=name.value))
  return found + switches.warnings(bindings)


def star_namespace(statement: cst.ImportFrom) -> str:
  """The namespace `from <module> import *` imports, canonical."""
  text = get_full_name_for_node(statement.module)
  return names.public(names.canonical(text) or text)


def star_namespaces(bindings: bindings_lib.Bindings) -> list[str]:
  """The namespaces of the module's (absolute) star imports."""
  return [star_namespace(node)
          for node in bindings.wrapper.resolve(metadata.ParentNodeProvider)
          if isinstance(node, cst.ImportFrom) and not node.relative and
          isinstance(node.names, cst.ImportStar)]
