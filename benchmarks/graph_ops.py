"""Counts the ops of a traced training step, function bodies included."""

from __future__ import annotations

import collections
from collections.abc import Iterable
from collections.abc import Mapping

import tensorflow as tf

# Ops that call back into Python: each one is a host round trip per step.
HOST_CALLBACK_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})

# The name scope of mplso's overflow log (its test checks that the two agree):
# ops that only a skipped step runs, to record why. Counted apart, so that the
# counts compare a finite step with TF's wrappers, which record nothing.
SKIP_ONLY_SCOPE = "mplso_overflow_log"


def _skip_only(node) -> bool:
  return (f"{SKIP_ONLY_SCOPE}/" in node.name or
          node.name.endswith(SKIP_ONLY_SCOPE))


def _called_functions(node_defs: Iterable, library: dict) -> set[str]:
  """Names of the library functions that `node_defs` call, directly."""
  names = set()
  for node in node_defs:
    if node.op in library:  # A function called as an op of its own name.
      names.add(node.op)
    for attr in node.attr.values():
      if attr.HasField("func"):
        names.add(attr.func.name)
      names.update(f.name for f in attr.list.func)
  return names & library.keys()


def count_ops(graph_def: tf.compat.v1.GraphDef,
              outputs: list[str] | None = None,
              skip_only: bool = False) -> collections.Counter:
  """Returns the op types of a graph and of every function it reaches.

  Control-flow v2 puts the branches of a `tf.cond` and the body of a
  `tf.while_loop` into library functions; each function counts once (its
  kernels are built once), wherever it is called from.

  Args:
    graph_def: the graph, with its function library.
    outputs: names of nodes to count the ancestors of (data and control
      inputs), such as a TF1 `train_op`; all nodes when None.
    skip_only: count only the overflow log's ops (`SKIP_ONLY_SCOPE`); by
      default they are the ones left out.
  """
  if outputs is not None:
    graph_def = tf.compat.v1.graph_util.extract_sub_graph(graph_def, outputs)
  library = {f.signature.name: f for f in graph_def.library.function}

  def counted(nodes):
    return (node.op for node in nodes if _skip_only(node) == skip_only)

  counts = collections.Counter(counted(graph_def.node))
  pending = _called_functions(graph_def.node, library)
  seen = set()
  while pending:
    name = pending.pop()
    seen.add(name)
    body = library[name].node_def
    counts.update(counted(body))
    pending |= _called_functions(body, library) - seen
  return counts


def function_ops(function: tf.types.experimental.PolymorphicFunction,
                 *args) -> collections.Counter:
  """Returns the op types of `function`'s graph traced for `args`."""
  concrete = function.get_concrete_function(*args)
  return count_ops(concrete.graph.as_graph_def())


def added(counts: Mapping[str, int],
          baseline: Mapping[str, int]) -> dict[str, int]:
  """Returns, per op type, how many more `counts` has than `baseline`."""
  diff = {op: counts.get(op, 0) - baseline.get(op, 0)
          for op in counts.keys() | baseline}
  return {op: n for op, n in sorted(diff.items()) if n}
