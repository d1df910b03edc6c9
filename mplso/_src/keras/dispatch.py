"""A public class that stands for classes built per Keras family.

Keras 3 and tf_keras each want an object of their own base class (an
optimizer, a callback, a dtype policy), so mplso's public class cannot be
that object's class. Its metaclass, `Dispatch`, makes calling it build the
family's class instead, and makes every such class count as it for
`isinstance` and `issubclass`. A user's subclass of the public class (TF
2.3 code subclassed Keras's `LossScaleOptimizer`) builds a class that
derives from both the subclass and the family's class, so the subclass's
methods run and `super()` reaches the family's.
"""

from __future__ import annotations

from mplso._src.core import tf_seams

# The classes built for a user's subclass, by (subclass, family class).
_COMBINED: dict[tuple[type, type], type] = {}


class Dispatch(type):
  """Metaclass of a public class whose call builds a family's class.

  The public class defines three static methods: `_build(*args, **kwargs)`,
  which builds the object; `_family_for(*args, **kwargs)`, the family class
  that a subclass's call with these arguments (which follow the subclass's
  signature) combines with; and `_family_classes()`, the classes that count
  as the public class. `mplso.compat.install()` adds to `_also_counts` the
  classes that the names it points at the public class held before (Keras's
  own `LossScaleOptimizer`), so that `isinstance` against such a name holds
  for what it held before, and takes them back on `uninstall()`.

  A call of a user's subclass builds an object of the subclass combined
  with the family's class (see `_dispatch_class`):

      class Sub(Public): ...
      Sub(*args)  # -> Combined(*args), where
                  # Combined.__mro__ == (Combined, Sub, Public, Family, ...)

  `isinstance` and `issubclass` against a subclass are Python's own checks;
  against the public class, they also count the family classes.
  """

  _also_counts: tuple[type, ...] = ()

  def __init__(cls, name, bases, namespace, **kwargs):
    super().__init__(name, bases, namespace, **kwargs)
    if not any(isinstance(base, Dispatch) for base in bases):
      cls._dispatch_public = cls  # Inherited by the subclasses.

  def __call__(cls, *args, **kwargs):
    if cls is cls._dispatch_public:
      return cls._build(*args, **kwargs)
    return cls._dispatch_class(cls._family_for(*args, **kwargs))(*args,
                                                                 **kwargs)

  def _dispatch_class(cls, family: type) -> type:
    """Returns the class whose objects `cls` builds in `family`.

    For the public class, `family` itself; for a user's subclass, a class
    deriving from the subclass and then `family`, made once, with the
    subclass's name, module and docstring. A class deriving from `family`
    already (one made so, or a class derived from such, as Horovod's
    `DistributedOptimizer` derives from an optimizer's class) is itself.

    Args:
      family: a family class, as `_family_for` returns it.
    """
    if cls is cls._dispatch_public:
      return family
    if family in cls.__mro__:
      return cls
    # One made so, for another family: the one of its user's subclass.
    user_class = vars(cls).get("_dispatch_user_class", cls)
    key = (user_class, family)
    if key not in _COMBINED:
      # setdefault: of two threads making it at once, both get the first.
      _COMBINED.setdefault(key, _combine(user_class, family))
    return _COMBINED[key]

  def _counted(cls) -> tuple[type, ...]:
    return tuple(cls._family_classes()) + cls._also_counts

  def __instancecheck__(cls, instance):
    if type.__instancecheck__(cls, instance):
      return True
    return cls is cls._dispatch_public and isinstance(instance, cls._counted())

  def __subclasscheck__(cls, subclass):
    if type.__subclasscheck__(cls, subclass):
      return True
    return cls is cls._dispatch_public and issubclass(subclass, cls._counted())


def _combine(user_class: type, family: type) -> type:
  """Returns a new class deriving from `user_class`, then from `family`.

  Its metaclass derives from both classes' metaclasses. It builds objects as
  `type` does: the family's metaclass may dispatch calls of its own base
  class (tf_keras's `LossScaleOptimizerMetaclass` does), never a subclass's,
  and `Dispatch` would dispatch again. The arguments are those of
  `user_class.__init__`, which TF 2.3's classes, without a metaclass, took
  by position or by keyword alike.
  """
  metaclasses = [type(user_class)]
  if not issubclass(metaclasses[0], type(family)):
    metaclasses.append(type(family))

  def call(cls, *args, **kwargs):
    return type.__call__(cls, *args, **kwargs)

  metaclass = type(metaclasses[0].__name__, tuple(metaclasses),
                   {"__module__": __name__, "__call__": call})
  combined = metaclass(user_class.__name__, (user_class, family), {
      "__module__": user_class.__module__,
      "__qualname__": user_class.__qualname__,
      "__doc__": user_class.__doc__,
      "_dispatch_user_class": user_class,
  })
  # A model file names `user_class` (registered or not): loading calls its
  # `from_config`, which builds the combined class again.
  tf_seams.keras_save_as(combined, user_class)
  return combined
