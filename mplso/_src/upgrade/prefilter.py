"""Which files can hold a legacy loss-scale name: `may_hold_legacy`.

Parsing with LibCST and resolving its metadata costs a hundred times what
reading and `ast`-parsing a file does, so a file goes through it only when
its text can hold something the upgrade acts on. The test is on the
identifiers the text spells (words of code, comments and strings alike):

- a name of the tables in `names` (a spelling, a private module or member,
  a namespace only `install()` makes, ...) can only be reached by spelling
  every part of its dotted path below `tf`, in an import or an attribute
  chain: the file must spell all of them;
- the words `names.WORDS` gives for the legacy names themselves and the
  switches (`mixed_precision`, `LossScale`, ...) pass a file as before,
  wherever they occur;
- a policy call (`set_global_policy`, `Policy`) that makes `compile` wrap,
  a TF 2.4 loss-scaling method, a star import of a namespace of the tables,
  or an import of a namespace TF 2.21 has as an attribute only passes it
  too.

So a file that says "experimental" or "contrib" (most of TensorFlow's own)
but spells no path of the tables is only checked to parse. Most files it
passes are then read with `ast` for what the planner can act on
(`for_reaches`, `reaches`).
"""

from __future__ import annotations

import re

from mplso._src.upgrade import names
from mplso._src.upgrade import optimizer_uses

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Both patterns start with a letter, not `\b`, so that `re` can look for
# that letter first; a match counts where no word character comes before it
# (`_found`).
_STAR = re.compile(r"from\s+([\w.]+)\s+import\s*\(?\s*\*")
# An import of a namespace TF 2.21 has as an attribute only
# (`names.ATTRIBUTES_ONLY`: `import tensorflow.compat.v1.keras`); generous.
ATTRIBUTE_IMPORT = re.compile(
    r"v[12](?:\s*\.\s*keras\b|\s+import\b[^)]*?\bkeras\b)")

# Words that pass a file wherever they occur in its text (substrings).
WORDS = tuple(w for w in names.WORDS if w not in ("experimental", "contrib"))
# Identifiers that pass a file: calls the planner and `switches` act on by
# their name alone, whatever module they come from.
CALLS = frozenset({"set_global_policy", "set_policy", "Policy", "PolicyV1",
                    *optimizer_uses.SCALING, *names.LEGACY_MEMBERS})
# Calls the planner acts on by their name alone, wherever they are: a policy
# setter (a `compile` then wraps) and TF 2.4's loss-scaling methods.
BY_NAME = frozenset({"set_global_policy", "set_policy",
                     *optimizer_uses.SCALING})


def _paths() -> frozenset[str]:
  """Every dotted name of the tables the planner can act on."""
  return frozenset({
      *names.TARGETS, *names.PRIVATE, *names.PRIVATE_MPLSO,
      *names.PRIVATE_TODAY, *names.PRIVATE_MODULES, *names.INSTALL_ONLY,
      *names.SERVED_WHOLE,
      *names.SERVED_WHOLE.values(), *names.TARGETS.values()})


def _needs(paths) -> tuple[frozenset[str], ...]:
  """For each path the words a file must spell to reach it.

  Paths that one of `WORDS` already passes, and paths whose parts another
  path's parts include, are left out (they add nothing).
  """
  parts = set()
  for path in paths:
    if any(word in path for word in WORDS):
      continue
    words = path.split(".")
    if words[0] == "tf":
      words = words[1:]
    parts.add(frozenset(words))
  return tuple(sorted((p for p in parts if not any(q < p for q in parts)),
                      key=sorted))


# Every dotted name of the tables the planner can act on.
PATHS: frozenset[str] = _paths()
# Each entry: a set of identifiers that, all spelled, may reach a table name.
NEEDS: tuple[frozenset[str], ...] = _needs(PATHS)


def identifiers(source: str) -> list[str]:
  """Every identifier `source` spells (in code, comments and strings)."""
  return _IDENTIFIER.findall(source)


def may_hold_legacy(source: str) -> bool:
  """Whether the upgrade can find anything to act on in `source`.

  False only where no legacy name, switch, policy call or loss-scaling
  method can be spelled: such a file needs no LibCST pass.
  """
  if any(word in source for word in WORDS):
    return True
  # An identifier is spelled only where its text is: most files spell no
  # call's name, nor every part of a needed path, even within other words.
  if any(call in source for call in CALLS) or any(
      all(part in source for part in need) for need in NEEDS):
    spelled = set(identifiers(source))
    if not spelled.isdisjoint(CALLS):
      return True
    if any(need <= spelled for need in NEEDS):
      return True
  if _found(ATTRIBUTE_IMPORT, source):
    return True
  return star_of_table(source)


def for_reaches(source: str) -> bool:
  """Whether `reaches.may_reach` can tell if the planner acts on `source`.

  True where it names no call of `BY_NAME`, nothing of mplso's, and no
  namespace of the tables in a star import: the planner can then act only
  on what `reaches` models.
  """
  return ("mplso" not in source and
          set(identifiers(source)).isdisjoint(BY_NAME) and
          not star_of_table(source))


def star_of_table(source: str) -> bool:
  """Whether `source` has a star import that can bind a name of the tables."""
  return any(_star_of_table(match.group(1))
             for match in _found(_STAR, source))


def _found(pattern: re.Pattern[str], source: str) -> list[re.Match[str]]:
  """The matches of `pattern` in `source` that no word character precedes."""
  return [m for m in pattern.finditer(source)
          if not m.start() or not (source[m.start() - 1].isalnum() or
                                   source[m.start() - 1] == "_")]


def _star_of_table(module: str) -> bool:
  """Whether `from MODULE import *` can bind a name of the tables."""
  path = names.canonical(module) or module
  return (path in names.NAMESPACES or path in names.PRIVATE_MODULES or
          path in names.INSTALL_ONLY or path in names.SERVED_WHOLE)
