"""A conditional update that costs one `Switch` in a TF1 graph, however large.

`tf.cond` in a graph becomes an `If` op that TensorFlow lowers to
`Switch`/`Merge` before running it: one `Switch` for every tensor the
branches read (every gradient, variable and slot, for an optimizer step), run
at every step whichever branch is taken.

`run_either` builds the lowered form directly, with one `Switch` on the
predicate. The executor marks an op *dead*, and does not run it, when any of
its inputs is dead, through control edges too. So a branch's ops need only a
control edge from a *pivot*, an `Identity` of the `Switch` output that is
dead when the branch is not taken; everything computed from them is dead in
turn, and a `Merge` takes the live result. TensorFlow's own control flow v1
works this way, with a `Switch` per input besides.

Measured (docs/performance.md, "The gates, measured"): a TF1 Session step
with 200 variables runs about 800 fewer nodes and 6-8% faster; at 10
variables the gain is within the noise. A gate for the finite check's exact
fallback, and gates in a `tf.function` (where only stateless branches could
be gated), gained nothing clear and were removed: those are `tf.cond`.

Where a gate is built (the checks of `_allows_gates`, else callers fall back
to `tf.cond`):

* a TF1 graph (not eager, not a `tf.function`, not XLA, not inside a control
  flow v1 context);
* every op of the branches built in this thread: outside any
  `tf.distribute` strategy but `OneDeviceStrategy` (a mirrored strategy builds
  each replica's ops in a thread of its own, which the pivot's control
  dependency does not reach);
* gates switched on: `MPLSO_GATES=0` in the environment (read at import) or
  `gates.ENABLED = False` builds `tf.cond` instead.

Under XLA auto-clustering (a TF1 Session whose config sets
`global_jit_level`) the branches' ops cannot join the step's cluster (their
deadness differs), and XLA compiled them as a second cluster, launched after
the first. Each op a branch builds is therefore marked to stay out of XLA's
clusters (`_XlaCompile` False) and runs as TensorFlow's own kernel. On this
project's CPU a TF1 step under XLA ran 10 to 14% faster at 10 variables and
23 to 45% at 200 (SGD, Adam, Adagrad); without XLA the mark changes nothing
(docs/performance.md, "Gates under XLA"). `KEEP_BRANCHES_OUT_OF_XLA = False`
leaves the marks out, to measure them.

A gated graph needs TensorFlow's default executor: a Session configured with
`experimental.executor_type = "SINGLE_THREADED_EXECUTOR"` refuses its
`Switch` ("Single-threaded executor does not support switch op"); build such
graphs with `MPLSO_GATES=0`.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
import os

import tensorflow as tf

from mplso._src.core import tf_seams

# Off with MPLSO_GATES=0 (read once, at import); benchmarks flip it to compare.
ENABLED = os.environ.get("MPLSO_GATES", "1") != "0"

# Whether a branch's ops are kept out of XLA's auto-clusters; benchmarks
# flip it to compare.
KEEP_BRANCHES_OUT_OF_XLA = True


def _builds_in_this_thread() -> bool:
  """Whether a branch's ops are built in the calling thread.

  The default strategy and `OneDeviceStrategy` call replica functions in the
  calling thread; every other strategy may build them in threads of its own.
  """
  if not tf.distribute.has_strategy():
    return True
  return isinstance(tf.distribute.get_strategy(),
                    tf.distribute.OneDeviceStrategy)


def _allows_gates() -> bool:
  if not ENABLED or tf.executing_eagerly():
    return False
  if tf.compat.v1.get_default_graph().building_function:
    # A dead stateful op would make the function's outputs dead (they wait
    # for every stateful op).
    return False
  if tf_seams.in_xla_context() or tf_seams.in_control_flow_v1_context():
    return False
  return _builds_in_this_thread()


def _ops_of(result) -> list[tf.Operation]:
  ops = []
  for item in tf.nest.flatten(result, expand_composites=True):
    if isinstance(item, tf.Operation):
      ops.append(item)
    elif hasattr(item, "op"):
      ops.append(item.op)
  return ops


def _branch_ops(outputs: Iterable[tf.Operation],
                existing: set[tf.Operation]) -> set[tf.Operation]:
  """The ops a branch added that compute what its outputs need.

  Walks back from the branch's outputs through data and control inputs,
  over ops that did not exist before the branch ran. Ops without inputs
  (constants, variable handles) are left out: they are shared with the rest
  of the graph (a new slot's handle is read by its initializer too) and
  compute nothing.
  """
  branch, stack = set(), list(outputs)
  while stack:
    op = stack.pop()
    if (op in branch or op in existing or
        not (op.inputs or op.control_inputs)):
      continue
    branch.add(op)
    stack.extend(t.op for t in op.inputs)
    stack.extend(op.control_inputs)
  return branch


def _roots(branch: set[tf.Operation]) -> list[tf.Operation]:
  """The ops of `branch` that read nothing else of it.

  Every other op of the branch reads a root, directly or not, so once the
  roots are dead the branch is.
  """
  return [op for op in branch
          if not any(t.op in branch for t in op.inputs) and
          not any(c in branch for c in op.control_inputs)]


def _gated_branch(fn: Callable[[], object], pivot: tf.Tensor
                  ) -> list[tf.Operation]:
  """Runs `fn` so that everything it adds is dead unless `pivot` is live.

  Returns the ops the branch must run: its outputs' ops, and every op `fn`
  built (a branch may return nothing, and in a graph only what the returned
  op depends on runs).
  """
  graph = tf.compat.v1.get_default_graph()
  existing = set(graph.get_operations())
  # Every op `fn` builds gets the pivot from the context, but those built
  # under `init_scope` (variables and their initializers, which must run
  # without the predicate) or `control_dependencies(None)`; of these, the
  # ones the outputs read are gated through the roots.
  with tf.control_dependencies([pivot]):
    outputs = _ops_of(fn())
  branch = _branch_ops(outputs, existing)
  for root in _roots(branch):
    tf_seams.add_control_input(root, pivot.op)
  built = [op for op in graph.get_operations()
           if op not in existing and pivot.op in op.control_inputs]
  if KEEP_BRANCHES_OUT_OF_XLA:
    for op in branch.union(built):
      tf_seams.keep_out_of_xla_clusters(op)
  return outputs + built


def run_either(pred: tf.Tensor, true_fn: Callable[[], object],
               false_fn: Callable[[], object]) -> tf.Operation | None:
  """Returns an op that runs what `true_fn` or `false_fn` builds, by `pred`.

  The functions may build stateful ops (an optimizer's update). None when
  the current graph cannot be gated; see the module docstring.
  """
  if not _allows_gates():
    return None
  pred = tf.convert_to_tensor(pred, tf.bool)
  if_false, if_true = tf.raw_ops.Switch(data=pred, pred=pred)
  ends = []
  for fn, pivot in ((false_fn, tf.identity(if_false)),
                    (true_fn, tf.identity(if_true))):
    with tf.control_dependencies(_gated_branch(fn, pivot)):
      ends.append(tf.identity(pivot))
  return tf.raw_ops.Merge(inputs=ends).output.op
