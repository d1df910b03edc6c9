"""Conditionals that cost one `Switch`, however many tensors they read.

`tf.cond` in a graph becomes an `If` op that TensorFlow lowers to
`Switch`/`Merge` before running it: one `Switch` for every tensor the
branches read (every gradient, variable and slot, for an optimizer step), run
at every step whichever branch is taken. Not lowering it costs a function
call per step instead.

A gate here builds the lowered form directly, with one `Switch` on the
predicate. The executor marks an op *dead*, and does not run it, when any of
its inputs is dead, through control edges too. So a branch's ops need only a
control edge from a *pivot*, an `Identity` of the `Switch` output that is
dead when the branch is not taken; everything computed from them is dead in
turn, and a `Merge` takes the live result. TensorFlow's own control flow v1
works this way, with a `Switch` per input besides.

Only graphs run by TensorFlow's executor can use this: a TF1 graph (Session)
or a `tf.function`, outside XLA and outside control flow v1 contexts. In a
`tf.function`, a dead stateful op would make the function's outputs dead
(they wait for every stateful op), so there only branches without stateful
ops are gated. Everywhere else the functions return None and callers fall
back to `tf.cond`.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable

import tensorflow as tf

from mplso._src.core import tf_seams


def _graph_allows_gates(stateful: bool) -> bool:
  if tf.executing_eagerly():
    return False
  if tf_seams.in_xla_context() or tf_seams.in_control_flow_v1_context():
    return False
  return not (stateful and tf.compat.v1.get_default_graph().building_function)


def _ops_of(result) -> list[tf.Operation]:
  ops = []
  for item in tf.nest.flatten(result, expand_composites=True):
    if isinstance(item, tf.Operation):
      ops.append(item)
    elif hasattr(item, "op"):
      ops.append(item.op)
  return ops


def _branch_roots(outputs: Iterable[tf.Operation],
                  existing: set[tf.Operation]) -> list[tf.Operation]:
  """The ops a branch added that read only what existed before it.

  Walks back from the branch's outputs through data and control inputs,
  over ops that did not exist before the branch ran. Ops without inputs
  (constants, variable handles) are left out: they are shared with the rest
  of the graph (a new slot's handle is read by its initializer too) and
  compute nothing. Every other op of the branch reads a root, directly or
  not, so once the roots are dead the branch is.
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
  return [op for op in branch
          if not any(t.op in branch for t in op.inputs) and
          not any(c in branch for c in op.control_inputs)]


def _gated_branch(fn: Callable[[], object], pivot: tf.Tensor
                  ) -> tuple[object, list[tf.Operation]]:
  """Runs `fn` so that everything it adds is dead unless `pivot` is live.

  Returns `fn`'s result and the ops the branch must run: its outputs' ops,
  and every op `fn` built in this thread (a branch may return nothing, and
  in a graph only what the returned op depends on runs).
  """
  graph = tf.compat.v1.get_default_graph()
  existing = set(graph.get_operations())
  # Ops `fn` builds in this thread get the pivot from the context (variables
  # and their initializers are built under `init_scope`, which clears it);
  # ops built in other threads (a strategy's replica threads) are found from
  # the branch's outputs.
  with tf.control_dependencies([pivot]):
    result = fn()
  outputs = _ops_of(result)
  for root in _branch_roots(outputs, existing):
    tf_seams.add_control_input(root, pivot.op)
  built_here = [op for op in graph.get_operations()
                if op not in existing and pivot.op in op.control_inputs]
  return result, outputs + built_here


def _switch(pred: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """Returns the pivots: live only when `pred` is False, and only when True."""
  pred = tf.convert_to_tensor(pred, tf.bool)
  if_false, if_true = tf.raw_ops.Switch(data=pred, pred=pred)
  return tf.identity(if_false), tf.identity(if_true)


def run_either(pred: tf.Tensor, true_fn: Callable[[], object],
               false_fn: Callable[[], object]) -> tf.Operation | None:
  """Returns an op that runs what `true_fn` or `false_fn` builds, by `pred`.

  The functions may build stateful ops (an optimizer's update). None when
  the current graph cannot be gated; see the module docstring.
  """
  if not _graph_allows_gates(stateful=True):
    return None
  if_false, if_true = _switch(pred)
  ends = []
  for fn, pivot in ((false_fn, if_false), (true_fn, if_true)):
    _, done = _gated_branch(fn, pivot)
    with tf.control_dependencies(done):
      ends.append(tf.identity(pivot))
  return tf.raw_ops.Merge(inputs=ends).output.op


def value_or(pred: tf.Tensor, fallback_fn: Callable[[], tf.Tensor]
             ) -> tf.Tensor | None:
  """Returns `pred` when it is True, else what `fallback_fn` computes.

  `fallback_fn` builds only stateless ops, which run only when `pred` is
  False; the result is a bool scalar. None when the current graph cannot be
  gated; see the module docstring.
  """
  if not _graph_allows_gates(stateful=False):
    return None
  if_false, if_true = _switch(pred)
  fallback, _ = _gated_branch(fallback_fn, if_false)
  with tf.control_dependencies([if_false]):
    # Dead with the pivot, also when `fallback_fn` returned an existing value.
    fallback = tf.identity(fallback)
  return tf.raw_ops.Merge(inputs=[fallback, if_true]).output
