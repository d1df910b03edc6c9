"""Which policy call of a file may make a `compile` elsewhere wrap.

A Keras policy is global: set in one file, it reaches every `compile` run
after it, in another file of the program or in a library the tool never
sees. Where the file that sets it has no `compile`, the tool cannot know
whether one wraps an optimizer, so `wrapping_policy` finds the call that may
make one do so:

- a policy setter (TF 2.1-2.3's `set_policy`, mplso's, Keras's
  `set_global_policy`) given `'mixed_float16'`, a policy that may be one,
  or what the file cannot read (a name from elsewhere, an attribute, a
  call);
- TF 2.1-2.3's `Policy(name, loss_scale)` (or mplso's) given a loss scale
  (not `'auto'` or None): under `python -m mplso.compat` any model compiled
  under it wraps its optimizer with that scale, whatever the name.

A setter given another policy name (`'mixed_bfloat16'`, `'float32'`), or a
policy of that name without a loss scale, wraps nothing: under
`python -m mplso.compat` and plain TF 2.21 alike `compile` leaves the
optimizer alone.
"""

from __future__ import annotations

import dataclasses

import libcst as cst
from libcst import metadata

from mplso._src.upgrade import names
from mplso._src.upgrade import planning
from mplso._src.upgrade import reach

# What `kind` calls a call of a setter, of TF 2.3's (or mplso's) `Policy`,
# and of Keras's own policy class.
SETTER, LEGACY_POLICY, KERAS_POLICY = "setter", "legacy", "keras"
_ROOTS = ("tf.", "keras.", "tf_keras.")
_KERAS_POLICIES = ("Policy", "DTypePolicy")
# A loss scale that makes no `compile` wrap by itself (TF 2.3's default
# 'auto' wraps a `mixed_float16` model's only), and one that is Keras's own.
_NO_SCALE = ("auto", None)
_DYNAMIC = "dynamic"
_MIXED = "mixed_float16"


@dataclasses.dataclass(frozen=True)
class Wrapping:
  """A policy call that may make a `compile` elsewhere wrap an optimizer.

  Attributes:
    call: the setter's call, or the `Policy(...)` call.
    policy: the expression that names the policy (the setter's argument,
      the `Policy`'s name), or the callee where the call gives none.
    scale: the source text of a loss scale of a TF 2.3 `Policy` the file
      makes that Keras's own `compile` would not keep (not 'auto',
      'dynamic' or None); '' if none.
  """
  call: cst.Call
  policy: cst.CSTNode
  scale: str = ""


class Kinds:
  """Tells `SETTER`, `LEGACY_POLICY`, `KERAS_POLICY` of one file's calls.

  A call is one by what its callee resolves to (`bindings`), or, for a name
  nothing binds, by what a star import of a TensorFlow namespace gives it
  (`from tensorflow.keras.mixed_precision.experimental import *`, then
  `set_policy(...)`).
  """

  def __init__(self, source: planning.SourceFile):
    self.source = source
    self._stars: list[str] | None = None

  def of(self, call: cst.Call, found=None) -> str | None:
    """The kind of `call` (None: none of them).

    `found`: what `call.func` resolves to, where the caller has it already.
    """
    if found is None:
      found = self.source.bindings.resolve(call.func)
    if found is not None:
      return kind_of(found.path)
    name = call.func
    if not isinstance(name, cst.Name) or self.source.bindings.resolutions(
        name):
      return None
    if self._stars is None:
      self._stars = reach.star_namespaces(self.source.bindings)
    for namespace in self._stars:
      called = kind_of(names.public(f"{namespace}.{name.value}"))
      if called is not None:
        return called
    return None


def kind_of(path: str) -> str | None:
  """`kind` of a call of the canonical path `path` (`bindings`)."""
  target = names.TARGETS.get(path, path)
  if target == "mplso.compat.set_policy":
    return SETTER
  if target == "mplso.compat.Policy":
    return LEGACY_POLICY
  if not path.startswith(_ROOTS) or ".mixed_precision." not in path:
    return None
  member = path.rpartition(".")[2]
  if member == "set_global_policy":
    return SETTER
  if member in _KERAS_POLICIES:
    return KERAS_POLICY
  return None


def _argument(call: cst.Call, position: int, keyword: str) -> cst.Arg | None:
  """The argument passed at `position` or as `keyword`, or None."""
  positional = [a for a in call.args if a.keyword is None and not a.star]
  if position < len(positional):
    return positional[position]
  return next((a for a in call.args if a.keyword is not None and
               a.keyword.value == keyword), None)


def _literal(node: cst.BaseExpression):
  """A string literal's value, None for `None`; `...` for anything else."""
  if isinstance(node, cst.SimpleString):
    return node.evaluated_value
  if isinstance(node, cst.Name) and node.value == "None":
    return None
  return ...


def _scale(call: cst.Call) -> cst.Arg | None:
  """The loss scale a TF 2.3 `Policy(name, loss_scale)` call is given."""
  return _argument(call, 1, "loss_scale")


def _policy_wraps(call: cst.Call, called: str) -> bool:
  """Whether a policy call makes a policy `compile` may wrap under."""
  if any(arg.star for arg in call.args):
    return True
  name = _argument(call, 0, "name")
  value = _literal(name.value) if name is not None else ...
  if value == _MIXED or not isinstance(value, str):
    return True
  scale = _scale(call) if called == LEGACY_POLICY else None
  return scale is not None and _literal(scale.value) not in _NO_SCALE


class _Finder:
  """Reads the file's policy calls for `wrapping_policy`."""

  def __init__(self, source: planning.SourceFile):
    self.source = source
    self.kinds = Kinds(source)

  def value(self, node: cst.BaseExpression) -> cst.BaseExpression:
    """What a name bound once, by `name = value`, holds; else `node`."""
    if not isinstance(node, cst.Name):
      return node
    assignment = self.source.bindings.only_assignment(node)
    if not (isinstance(assignment, metadata.Assignment) and
            isinstance(assignment.node, cst.Name)):
      return node
    value = self.source.bindings.assigned_value(assignment.node)
    return node if value is None else value

  def setter_wraps(self, call: cst.Call) -> tuple[bool, cst.CSTNode]:
    """Whether a setter's policy may wrap, and what names that policy.

    A policy name (in the call, or in a name bound once to it) wraps if it
    is `'mixed_float16'`; a policy call, as `_policy_wraps` says; anything
    else the file cannot read, may.
    """
    if any(arg.star for arg in call.args) or not call.args:
      return True, call.func
    given = (_argument(call, 0, "policy") or call.args[0]).value
    value = self.value(given)
    text = _literal(value)
    if isinstance(text, str) or text is None:
      return text == _MIXED, given
    if isinstance(value, cst.Call):
      called = self.kinds.of(value)
      if called in (LEGACY_POLICY, KERAS_POLICY):
        return _policy_wraps(value, called), given
    return True, given

  def scale(self) -> str:
    """The first loss scale of a TF 2.3 `Policy` Keras would not keep."""
    for node in self.source.parents:
      if (isinstance(node, cst.Call) and
          self.kinds.of(node) == LEGACY_POLICY and
          not any(arg.star for arg in node.args)):
        scale = _scale(node)
        if scale is not None and _literal(scale.value) not in (
            *_NO_SCALE, _DYNAMIC):
          return self.source.code(scale.value)
    return ""


def wrapping_policy(source: planning.SourceFile) -> Wrapping | None:
  """The file's first policy call that may make a `compile` wrap, or None.

  Asked of a file without a `compile` of its own: the `compile` the policy
  reaches is elsewhere.
  """
  finder = _Finder(source)
  for node in source.parents:
    if not isinstance(node, cst.Call):
      continue
    called = finder.kinds.of(node)
    if called == SETTER:
      wraps, policy = finder.setter_wraps(node)
    elif called == LEGACY_POLICY:
      scale = _scale(node)
      wraps = (any(arg.star for arg in node.args) or
               (scale is not None and
                _literal(scale.value) not in _NO_SCALE))
      name = _argument(node, 0, "name")
      policy = name.value if name is not None else node.func
    else:
      continue
    if wraps:
      return Wrapping(node, policy, finder.scale())
  return None
