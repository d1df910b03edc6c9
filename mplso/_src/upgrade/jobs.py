"""Converts the files of a tree in several processes: `upgrade_in_processes`.

Each file is converted as `rewrite.upgrade_sources` converts it with the
others: `--to mplso` looks at one file at a time, and `--to native` first
gathers what every file shows at once (`rewrite.facts_now`), then converts
each file with all of it, a worker reading what a decision asks of another
file when it asks (`rewrite.read_later`). Both steps run file by file in
worker processes; the results are the same, file for file, as in one
process.

A file whose conversion raises is reported alone: its facts are left out,
the others are converted, as `cli` does in one process.
"""

from __future__ import annotations

from collections.abc import Callable
import concurrent.futures
import dataclasses
import multiprocessing

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import optimizer_uses
from mplso._src.upgrade import parsed as parsed_lib
from mplso._src.upgrade import rewrite

# Set in each worker before it starts: what every task of the run shares.
_SHARED: dict = {}
# In each worker: the facts it has read of other files (`_read_later`).
_READ: dict[str, optimizer_uses.Facts] = {}


def upgrade_in_processes(
    texts: dict[str, str], to: str, keras: str, processes: int,
    deep: Callable, failure: Callable
) -> dict[str, edits_lib.Upgraded]:
  """`rewrite.upgrade_sources(texts, to, keras)` in `processes` processes.

  Args:
    texts: {path: source text}.
    to: `edits.MPLSO` or `edits.NATIVE`.
    keras: the Keras the program runs with (`--to native`).
    processes: how many worker processes.
    deep: runs a function with room for deep recursion (`cli`'s).
    failure: (text, exception's class name, its message) -> the result
      that reports a file whose conversion raised.

  Returns:
    {path: what the upgrade did to that file}, in the order of `texts`.
  """
  # Forked workers share the texts without copying them; a worker started
  # another way gets them once, with the rest of what its tasks share.
  context = multiprocessing.get_context(
      "fork" if "fork" in multiprocessing.get_all_start_methods()
      else None)
  shared = {"texts": texts, "to": to, "keras": keras, "deep": deep}
  with concurrent.futures.ProcessPoolExecutor(
      processes, mp_context=context, initializer=_share,
      initargs=(shared,)) as pool:
    facts, raised = None, {}
    paths = list(texts)
    chunk = max(1, len(paths) // (processes * 32))
    if to == edits_lib.NATIVE:
      facts = optimizer_uses.Facts(reader=_read_later, shows=_shows)
      for path, found in zip(paths, pool.map(_facts, paths,
                                             chunksize=chunk)):
        if isinstance(found, _Raised):
          raised[path] = found
        else:
          facts.merge(found)
    pool_paths = [p for p in paths if p not in raised]
    results = dict(zip(pool_paths, pool.map(
        _upgrade, pool_paths, [facts] * len(pool_paths), chunksize=chunk)))
  out = {}
  for path in paths:
    result = raised.get(path) or results[path]
    out[path] = (failure(texts[path], result.kind, result.message)
                 if isinstance(result, _Raised) else result)
  return out


@dataclasses.dataclass(frozen=True)
class _Raised:
  """What a task raised, as it travels back from its worker."""
  kind: str
  message: str


def _share(shared: dict) -> None:
  _SHARED.update(shared)


def _facts(path: str):
  """`rewrite.facts_now` of one file, or what it raised."""
  try:
    return _SHARED["deep"](lambda: rewrite.facts_now(
        parsed_lib.parse(_SHARED["texts"][path], path, facts=True), path))
  except Exception as e:  # pylint: disable=broad-except
    return _Raised(type(e).__name__, str(e))


def _shows(path: str) -> tuple[bool, bool]:
  """`optimizer_uses.may_show` of a file of the tree."""
  return optimizer_uses.may_show(_SHARED["texts"][path])


def _read_later(path: str) -> optimizer_uses.Facts:
  """`rewrite.read_later` of a file of the tree, once in each worker."""
  if path not in _READ:
    _READ[path] = rewrite.read_later(_SHARED["texts"][path],
                                     _SHARED["keras"], path)
  return _READ[path]


def _upgrade(path: str, facts: optimizer_uses.Facts | None):
  """`rewrite.upgrade_source` of one file with every file's facts."""
  try:
    return _SHARED["deep"](lambda: rewrite.upgrade_source(
        _SHARED["texts"][path], to=_SHARED["to"], keras=_SHARED["keras"],
        facts=facts, path=path))
  except Exception as e:  # pylint: disable=broad-except
    return _Raised(type(e).__name__, str(e))
