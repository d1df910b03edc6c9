"""Records which mplso classes a legacy script built, for the runner's report."""

from __future__ import annotations

import functools

from mplso._src.compat import install as compat_install
from mplso._src.compat import policy as compat_policy
from mplso._src.compat import spellings as compat_spellings
from mplso._src.keras import factory

# Public name of each class built so far, in the order first built.
_used: dict[str, None] = {}


def _watched_classes() -> dict[type, str]:
  """Returns {class: public name} for every mplso class a script can build."""
  watched = {}
  for spelling in compat_spellings.SPELLINGS:
    target = compat_install.resolve_target(spelling.target)
    if isinstance(target, type) and target not in (
        factory.LossScaleOptimizer, compat_policy.Policy):
      watched[target] = spelling.target
  # The two factories return instances of other classes: watch those.
  for cls in factory.wrapper_classes():
    watched[cls] = "mplso.keras.LossScaleOptimizer"
  watched[compat_policy.policy_base_class()] = "mplso.compat.Policy"
  return watched


def _public_name(instance, watched: dict[type, str]) -> str | None:
  for cls in type(instance).__mro__:
    if cls in watched:
      return watched[cls]
  return None


def watch() -> None:
  """Makes each mplso class record its public name when an instance is built.

  Only `python -m mplso.compat` calls this, once, in the process that runs
  the script; the classes keep the recording `__init__` until it exits.
  """
  watched = _watched_classes()
  for cls in watched:
    # Inherited too: the Keras family wrappers take theirs from a shared base.
    original = cls.__init__

    def recording_init(self, *args, __original=original, **kwargs):
      name = _public_name(self, watched)
      if name is not None:
        _used.setdefault(name, None)
      __original(self, *args, **kwargs)

    cls.__init__ = functools.wraps(original)(recording_init)


def report() -> str:
  """Returns the runner's one-line report of the mplso classes used."""
  if not _used:
    return ("mplso.compat: the script used no mplso class (none of the "
            "legacy names it resolves; see python -m mplso.compat --list)")
  return "mplso.compat: used " + ", ".join(_used)
