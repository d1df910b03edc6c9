"""What a star import of a legacy namespace becomes: `plan`.

`from tensorflow.contrib.mixed_precision import *` becomes
`from mplso.contrib import *` (mplso serves that namespace whole, under the
same names). Another namespace of the table, or a private module that held
table names, gives the file the table names it uses unqualified: each is
imported from mplso by name. The star import itself stays where TF 2.21
still has the namespace (it may give other names; the mplso imports follow
it), and goes where it does not: there, when the file uses none of its
table names, it re-exports them, and each is imported from mplso by name;
the other unqualified names the file reads may have come from it, and each
use gets a warning.
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from mplso._src.upgrade import names


@dataclasses.dataclass(frozen=True)
class Star:
  """The plan for one star import.

  Attributes:
    imports: the statements that replace it or follow it, as text.
    keep: whether the star import itself stays.
    why: the report's reason for the edit.
    unknown: the uses of unqualified names it may have given that are not
      table names, where it goes: each gets a warning.
    unknown_why: that warning's reason.
  """
  imports: tuple[str, ...]
  keep: bool
  why: str
  unknown: tuple[cst.Name, ...] = ()
  unknown_why: str = ""

  def new(self, old: str) -> str:
    """The edit's new text, for the star import `old`."""
    return "; ".join([old] * self.keep + list(self.imports))


def _members(namespace: str) -> dict[str, str]:
  """{member: target} of the table names that `namespace` holds."""
  found = {}
  for name, public in [*((n, n) for n in names.TARGETS),
                       *names.PRIVATE.items()]:
    parent, _, member = name.rpartition(".")
    if parent == namespace and public in names.TARGETS:
      found[member] = names.TARGETS[public]
  return found


def handles(namespace: str) -> bool:
  """Whether a star import of `namespace` gives table names."""
  return namespace in names.SERVED_WHOLE or bool(_members(namespace))


def gives(namespace: str, name: str) -> bool:
  """Whether `from <namespace> import *` gives the table name `name`."""
  return (namespace in names.SERVED_WHOLE and
          f"{namespace}.{name}" in names.TARGETS) or name in _members(
              namespace)


def _import_lines(chosen: dict[str, str]) -> tuple[str, ...]:
  """`from mplso.keras import LossScaleOptimizer` per member, in order."""
  by_module: dict[str, list[str]] = {}
  for member, target in sorted(chosen.items()):
    module, _, name = target.rpartition(".")
    by_module.setdefault(module, []).append(
        name if name == member else f"{name} as {member}")
  return tuple(f"from {module} import {', '.join(members)}"
               for module, members in by_module.items())


def plan(namespace: str, module_text: str, unbound: list[cst.Name],
         all_stars: list[str]) -> Star | None:
  """The plan for `from <module_text> import *`; None for other namespaces.

  Args:
    namespace: the namespace imported, canonical (`tf.a.b`).
    module_text: the module as the statement spells it.
    unbound: the names the file reads that nothing in it binds.
    all_stars: the namespaces of every star import of the file (a name
      another one gives is not this one's to warn about).
  """
  unqualified = {name.value for name in unbound}
  if namespace in names.SERVED_WHOLE:
    return Star(("from mplso.contrib import *",), keep=False,
                why=f"mplso.contrib holds every name of `{module_text}`, "
                "under the same names")
  members = _members(namespace)
  if not members:
    return None
  used = {m: t for m, t in members.items() if m in unqualified}
  absent = names.absent_today(namespace)
  if not used and not absent:
    return None  # It stays, and gives what TF 2.21's namespace holds.
  chosen = used or members
  why = (f"the file reads {', '.join(f'`{m}`' for m in sorted(used))} "
         f"from `{module_text}` unqualified: imported from mplso by name"
         if used else
         f"the file reads none of the names of `{module_text}` "
         "unqualified, so it re-exports them: each is imported from mplso "
         "by name")
  if absent:
    why += "; TF 2.21 lacks the namespace, so its star import goes"
  else:
    why += " after it"
  if not absent:
    return Star(_import_lines(chosen), keep=True, why=why)
  return Star(
      _import_lines(chosen), keep=False, why=why,
      unknown=tuple(n for n in unbound if not any(
          gives(other, n.value) for other in all_stars)),
      unknown_why=(
          "nothing in the file binds this name; it may have come from "
          f"`from {module_text} import *`, which TF 2.21 lacks and the "
          "upgrade removed: import it by name from where it lives today"))
