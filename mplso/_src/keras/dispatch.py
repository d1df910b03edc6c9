"""A public class that stands for classes built per Keras family.

Keras 3 and tf_keras each want an object of their own base class (an
optimizer, a callback, a dtype policy), so mplso's public class cannot be
that object's class. Its metaclass, `Dispatch`, makes calling it build the
family's class instead, and makes every such class count as it for
`isinstance` and `issubclass`.
"""

from __future__ import annotations


class Dispatch(type):
  """Metaclass of a public class whose call builds a family's class.

  The public class defines two static methods: `_build(*args, **kwargs)`,
  which builds the object, and `_family_classes()`, the classes that count
  as the public class. `mplso.compat.install()` adds to `_also_counts` the
  classes that the names it points at the public class held before (Keras's
  own `LossScaleOptimizer`), so that `isinstance` against such a name holds
  for what it held before, and takes them back on `uninstall()`.
  """

  _also_counts: tuple[type, ...] = ()

  def __call__(cls, *args, **kwargs):
    return cls._build(*args, **kwargs)

  def _counted(cls) -> tuple[type, ...]:
    return tuple(cls._family_classes()) + cls._also_counts

  def __instancecheck__(cls, instance):
    return isinstance(instance, cls._counted())

  def __subclasscheck__(cls, subclass):
    return cls is subclass or issubclass(subclass, cls._counted())
