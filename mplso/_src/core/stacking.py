"""Small gradients of one shape stacked, so a branch builds ops per shape.

The underflow meter's sample and the calibrating step each reduce every
gradient in a branch that runs rarely, but is built on every trace: ops per
gradient there cost trace and first-call time at every model size (a model
of 1,000 variables builds thousands of them). Most of a model's gradients
are small ones of a few shapes (biases, normalization scales, the kernels
of layers alike). Stacking the gradients of one dtype and shape makes the
reduction one set of ops per shape. Only gradients up to `SMALL_ELEMENTS`
elements are stacked: the stack is a copy, made only when the branch runs,
and it stays small; a larger gradient is reduced on its own.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

# The most elements a gradient may have to be stacked with others (256 KB
# of float32).
SMALL_ELEMENTS = 1 << 16


@dataclasses.dataclass(frozen=True)
class Stack:
  """Gradients of one dtype and shape, stacked on a new first axis."""
  indices: list[int]  # Their places in the list given to `stacked`.
  values: tf.Tensor  # [len(indices), *shape].


def stacked(tensors: list) -> tuple[list[Stack], list[int]]:
  """Groups `tensors` (dense tensors, or anything else) for reduction.

  Args:
    tensors: tensors, IndexedSlices or None.

  Returns:
    `(stacks, alone)`: a `Stack` for each dtype and shape that two or more
    small dense tensors share, in the order of their first tensor; and the
    places of every other entry, in order.
  """
  groups: dict[tuple, list[int]] = {}
  alone = []
  for i, tensor in enumerate(tensors):
    key = _key(tensor)
    if key is None:
      alone.append(i)
    else:
      groups.setdefault(key, []).append(i)
  stacks = []
  for indices in groups.values():
    if len(indices) == 1:
      alone.append(indices[0])
      continue
    stacks.append(Stack(indices=indices,
                        values=tf.stack([tensors[i] for i in indices])))
  alone.sort()
  return stacks, alone


def _key(tensor) -> tuple | None:
  """The group of a small dense tensor of known shape; None for others."""
  if not isinstance(tensor, tf.Tensor):
    return None
  shape = tensor.shape
  if not shape.is_fully_defined():
    return None
  if shape.num_elements() > SMALL_ELEMENTS:
    return None
  return tensor.dtype, tuple(shape.as_list())
