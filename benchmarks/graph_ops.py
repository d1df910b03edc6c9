"""Counts the ops of a traced training step, function bodies included."""

from __future__ import annotations

import collections
from collections.abc import Iterable
import importlib
import re

import tensorflow as tf

# Ops that call back into Python: each one is a host round trip per step.
HOST_CALLBACK_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})

# The name scope of mplso's overflow log (its test checks that the two
# agree): ops that only a skipped step runs, to record why. They are counted
# apart (`count_ops(skip_only=True)`), so that the counts compare what a
# finite step can run with TF's wrappers, which record nothing.
SKIP_ONLY_SCOPE = "mplso_overflow_log"


def _skip_only(node) -> bool:
  return f"{SKIP_ONLY_SCOPE}/" in node.name or node.name.endswith(
      SKIP_ONLY_SCOPE)


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
  `tf.while_loop` into library functions; their nodes are counted once per
  function (a function called from two places counts once, as its kernels
  are built once). Function arguments and return values are not nodes.

  Args:
    graph_def: the graph, with its function library.
    outputs: names of nodes to count the ancestors of (data and control
      inputs), such as a TF1 `train_op`; all nodes when None.
    skip_only: count only the overflow log's ops (`SKIP_ONLY_SCOPE`), which
      only a skipped step runs; by default they are the ones left out.
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


def graph_ops(graph: tf.Graph, train_op) -> collections.Counter:
  """Returns the op types that running `train_op` in `graph` executes."""
  return count_ops(graph.as_graph_def(), [train_op.name])


def added(counts: collections.Counter,
          baseline: collections.Counter) -> dict[str, int]:
  """Returns, per op type, how many more `counts` has than `baseline`."""
  diff = {op: counts[op] - baseline[op] for op in counts.keys() | baseline}
  return {op: n for op, n in sorted(diff.items()) if n}


# A node inlined from a `tf.cond` branch after lowering: TensorFlow names it
# `<cond>/then/_N/...` or `<cond>/else/_N/...` (`Func/<cond>/else/_N/input/...`
# for the branch's inputs; Grappler's rewrites keep the path).
_BRANCH = re.compile(r"(^|/)(then|else)/_\d+/")


def _eager_context():
  """TensorFlow's eager context (private: only the benchmarks use it)."""
  try:
    return importlib.import_module("tensorflow.python.eager.context").context()
  except (ImportError, AttributeError) as e:
    raise ImportError(
        "benchmarks.graph_ops.lowered_function_ops needs TensorFlow's "
        f"private eager context, which TensorFlow {tf.__version__} does not "
        "have where 2.21 has it.") from e


def lowered_function_ops(function, *args) -> dict[str, collections.Counter]:
  """Returns the op types of the graphs TensorFlow runs for `function(*args)`.

  Traces `function` first (where it has `get_concrete_function`), so that
  the eager ops that tracing runs are not counted, then calls it once, for
  the first time with these arguments, and collects the graphs that
  TensorFlow built to run it: after Grappler, with every `tf.cond` lowered
  to `Switch` / `Merge` and its branches inlined (one partition graph per
  device). This is what the executor runs; unlike the traced graph it holds
  the `Switch` that a lowered `cond` runs per input, at every step,
  whichever branch is taken.

  Args:
    function: a `tf.function` not yet called with these arguments, or a
      callable that calls one, already traced, and runs no other op.
    *args: its arguments.

  Returns:
    Op counts by where the nodes are: "outer" outside every `cond` branch
    (`Switch`, `Merge` and pivots included: every step runs these), "then"
    and "else" inlined from the branches of the `cond`s.
  """
  if hasattr(function, "get_concrete_function"):
    function.get_concrete_function(*args)
  context = _eager_context()
  context.enable_graph_collection()
  try:
    function(*args)
    metadata = context.export_run_metadata()
  finally:
    context.disable_graph_collection()
  counts = {where: collections.Counter() for where in ("outer", "then", "else")}
  for graphs in metadata.function_graphs:
    for partition in graphs.partition_graphs:
      for node in partition.node:
        found = _BRANCH.search(node.name)
        counts[found.group(2) if found else "outer"][node.op] += 1
  return counts
