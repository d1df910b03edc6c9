"""Tests `bindings`: which TensorFlow name an expression stands for."""

import textwrap

from absl.testing import absltest
from absl.testing import parameterized
import libcst as cst
from libcst import metadata

from mplso._src.upgrade import bindings
from mplso._src.upgrade import names


class _Nodes(cst.CSTVisitor):
  """Every node of a module, in the order of the source."""

  def __init__(self):
    super().__init__()
    self.found = []

  def on_visit(self, node):
    self.found.append(node)
    return True


def parse(source):
  wrapper = metadata.MetadataWrapper(cst.parse_module(
      textwrap.dedent(source)))
  return wrapper, bindings.Bindings(wrapper)


def last_chain(wrapper, text):
  """The last chain node (a Name, Attribute or Call) whose code is `text`."""
  visitor = _Nodes()
  wrapper.module.visit(visitor)
  found = [node for node in visitor.found
           if isinstance(node, (cst.Name, cst.Attribute, cst.Call)) and
           wrapper.module.code_for_node(node) == text]
  return found[-1]


def resolve(source, text):
  wrapper, found = parse(source)
  return found.resolve(last_chain(wrapper, text))


class DottedTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("name", "tf", "tf"),
      ("chain", "tf.keras.mixed_precision", "tf.keras.mixed_precision"),
      ("call_in_chain", "make().mixed_precision", None),
      ("subscript", "modules[0].LossScale", None),
  )
  def test_dotted(self, text, expected):
    self.assertEqual(expected, bindings.dotted(cst.parse_expression(text)))


class ImportPathTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("import_as", "import tensorflow.compat.v1 as tf", "tf",
       "tensorflow.compat.v1"),
      ("plain_import_binds_its_top", "import tensorflow.contrib.x",
       "tensorflow", "tensorflow"),
      ("plain_import_binds_no_other_name", "import tensorflow", "tf", None),
      ("second_alias", "import numpy as np, tensorflow as tf", "tf",
       "tensorflow"),
      ("from_import", "from tensorflow.keras import mixed_precision",
       "mixed_precision", "tensorflow.keras.mixed_precision"),
      ("from_import_as", "from tensorflow.keras import mixed_precision as mp",
       "mp", "tensorflow.keras.mixed_precision"),
      ("from_import_as_hides_the_name",
       "from tensorflow.keras import mixed_precision as mp",
       "mixed_precision", None),
      ("relative", "from .tensorflow import keras", "keras", None),
      ("star", "from tensorflow.keras import *", "mixed_precision", None),
      ("not_an_import", "tf = load()", "tf", None),
  )
  def test_import_path(self, statement, bound, expected):
    [small] = cst.parse_statement(statement + "\n").body
    self.assertEqual(expected, bindings.import_path(small, bound))


class ResolveTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("compat_v1_as_tf", """\
          import tensorflow.compat.v1 as tf
          opt = tf.train.experimental.MixedPrecisionLossScaleOptimizer(o, 8)
          """, "tf.train.experimental.MixedPrecisionLossScaleOptimizer",
       "tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer",
       "mplso.MixedPrecisionLossScaleOptimizer"),
      ("module_alias", """\
          from tensorflow.keras import mixed_precision as mp
          opt = mp.experimental.LossScaleOptimizer(o, "dynamic")
          """, "mp.experimental.LossScaleOptimizer",
       "tf.keras.mixed_precision.experimental.LossScaleOptimizer",
       "mplso.keras.LossScaleOptimizer"),
      ("from_compat_import_v1", """\
          from tensorflow.compat import v1
          scale = v1.mixed_precision.DynamicLossScale()
          """, "v1.mixed_precision.DynamicLossScale",
       "tf.compat.v1.mixed_precision.DynamicLossScale",
       "mplso.DynamicLossScale"),
      ("assigned_namespace", """\
          import tensorflow as tf
          def build(o):
            keras_mp = tf.keras.mixed_precision
            return keras_mp.experimental.LossScaleOptimizer(o, 128)
          """, "keras_mp.experimental.LossScaleOptimizer",
       "tf.keras.mixed_precision.experimental.LossScaleOptimizer",
       "mplso.keras.LossScaleOptimizer"),
      ("alias_of_an_alias", """\
          import tensorflow as tf
          mp = tf.keras.mixed_precision
          exp = mp.experimental
          p = exp.Policy("mixed_float16")
          """, "exp.Policy", "tf.keras.mixed_precision.experimental.Policy",
       "mplso.compat.Policy"),
      ("plain_import_of_a_submodule", """\
          import tensorflow.contrib.mixed_precision
          m = tensorflow.contrib.mixed_precision.FixedLossScaleManager(8)
          """, "tensorflow.contrib.mixed_precision.FixedLossScaleManager",
       "tf.contrib.mixed_precision.FixedLossScaleManager",
       "mplso.contrib.FixedLossScaleManager"),
      ("same_import_twice", """\
          import tensorflow as tf
          if old:
            import tensorflow as tf
          s = tf.train.experimental.LossScale
          """, "tf.train.experimental.LossScale",
       "tf.train.experimental.LossScale", "mplso.LossScale"),
      ("getattr_of_a_namespace", """\
          import tensorflow as tf
          LSO = getattr(tf.contrib.mixed_precision, "LossScaleOptimizer")
          """, 'getattr(tf.contrib.mixed_precision, "LossScaleOptimizer")',
       "tf.contrib.mixed_precision.LossScaleOptimizer",
       "mplso.contrib.LossScaleOptimizer"),
      ("getattr_in_a_chain", """\
          import tensorflow as tf
          m = getattr(getattr(tf, "contrib"), "mixed_precision").LossScale
          """, 'getattr(getattr(tf, "contrib"), "mixed_precision")'
       ".LossScale", "tf.contrib.mixed_precision.LossScale", None),
      ("private_module_member", """\
          from tensorflow.python.training.experimental import loss_scale
          s = loss_scale.FixedLossScale(8)
          """, "loss_scale.FixedLossScale",
       "tf.compat.v1.train.experimental.FixedLossScale",
       "mplso.FixedLossScale"),
      ("private_member_imported", """\
          from tensorflow.python.keras.mixed_precision.policy import PolicyV1
          p = PolicyV1("mixed_float16")
          """, "PolicyV1", "tf.keras.mixed_precision.experimental.Policy",
       "mplso.compat.Policy"),
      ("keras_2_package", """\
          import keras
          o = keras.mixed_precision.experimental.LossScaleOptimizer(sgd, 8)
          """, "keras.mixed_precision.experimental.LossScaleOptimizer",
       "tf.keras.mixed_precision.experimental.LossScaleOptimizer",
       "mplso.keras.LossScaleOptimizer"),
      ("compat_of_compat", """\
          import tensorflow.compat.v1 as tf
          s = tf.compat.v2.train.experimental.DynamicLossScale()
          """, "tf.compat.v2.train.experimental.DynamicLossScale",
       "tf.compat.v2.train.experimental.DynamicLossScale",
       "mplso.DynamicLossScale"),
  )
  def test_resolves_through_its_bindings(self, source, text, path, target):
    found = resolve(source, text)
    self.assertEqual(path, found.path)
    self.assertEqual(target, names.TARGETS.get(found.path))

  @parameterized.named_parameters(
      ("parameter_shadows_tf", """\
          import tensorflow as tf
          def build(tf):
            return tf.train.experimental.DynamicLossScale()
          """, "tf.train.experimental.DynamicLossScale"),
      ("attribute_of_an_object", """\
          import tensorflow as tf
          opt = self.tf.train.experimental.DynamicLossScale()
          """, "self.tf.train.experimental.DynamicLossScale"),
      ("bound_to_two_modules", """\
          import tensorflow as tf
          if old:
            import tf_compat as tf
          s = tf.train.experimental.LossScale
          """, "tf.train.experimental.LossScale"),
      ("alias_reassigned", """\
          import tensorflow as tf
          mp = tf.keras.mixed_precision
          mp = other
          opt = mp.LossScaleOptimizer(o)
          """, "mp.LossScaleOptimizer"),
      ("alias_of_a_namespace_outside_the_table", """\
          import tensorflow as tf
          optimizers = tf.keras.optimizers
          opt = optimizers.SGD()
          """, "optimizers.SGD"),
      ("own_class", """\
          import tensorflow as tf
          class LossScaleOptimizer:
            pass
          opt = LossScaleOptimizer()
          """, "LossScaleOptimizer"),
      ("unbound", "opt = mixed_precision.LossScaleOptimizer(o)\n",
       "mixed_precision.LossScaleOptimizer"),
      ("getattr_shadowed", """\
          import tensorflow as tf
          def getattr(x, y):
            return None
          s = getattr(tf.train.experimental, "LossScale")
          """, 'getattr(tf.train.experimental, "LossScale")'),
      ("getattr_of_a_variable_name", """\
          import tensorflow as tf
          s = getattr(tf.train.experimental, name)
          """, "getattr(tf.train.experimental, name)"),
      ("getattr_of_an_f_string", """\
          import tensorflow as tf
          s = getattr(tf.train.experimental, f"LossScale")
          """, 'getattr(tf.train.experimental, f"LossScale")'),
  )
  def test_resolves_to_nothing(self, source, text):
    self.assertIsNone(resolve(source, text))


class ResolutionsTest(absltest.TestCase):

  def test_path_through_each_binding(self):
    wrapper, found = parse("""\
        try:
          import tensorflow.compat.v1 as tf
        except ImportError:
          tf = load()
        s = tf.train.experimental.LossScale
        """)
    chain = last_chain(wrapper, "tf.train.experimental.LossScale")
    self.assertIsNone(found.resolve(chain))
    self.assertEqual(
        [(2, "tf.compat.v1.train.experimental.LossScale"), (4, None)],
        [(found.line(b.node), path) for b, path in found.resolutions(chain)])

  def test_none_for_what_is_not_a_chain(self):
    wrapper, found = parse("x = make()[0].LossScale\n")
    self.assertEqual([], found.resolutions(
        last_chain(wrapper, "make()[0].LossScale")))

  def test_unbound_names(self):
    wrapper, found = parse("""\
        from tensorflow.keras.mixed_precision.experimental import *
        import os
        opt = LossScaleOptimizer(len(os.sep))
        def f():
          return Policy("mixed_float16")
        """)
    self.assertEqual([("LossScaleOptimizer", 3), ("Policy", 5)],
                     [(n.value, found.line(n)) for n in found.unbound()])

  def test_above(self):
    wrapper, found = parse("""\
        import tensorflow as tf
        a = getattr(tf.contrib, "mixed_precision").LossScaleOptimizer
        b = getattr(tf, name)
        """)
    inner = last_chain(wrapper, "tf.contrib")
    call = found.above(inner)
    self.assertIsInstance(call, cst.Call)
    self.assertEqual(
        'getattr(tf.contrib, "mixed_precision").LossScaleOptimizer',
        wrapper.module.code_for_node(found.above(call)))
    self.assertIsNone(found.above(found.above(call)))
    self.assertIsNone(found.above(last_chain(wrapper, "tf")))  # b's


class BindingTest(absltest.TestCase):

  def test_import_bindings_and_their_references(self):
    wrapper, found = parse("""\
        import tensorflow as tf, numpy as np
        x = tf.contrib.mixed_precision
        y = tf.train
        """)
    statement = wrapper.module.body[0].body[0]
    made = found.made_by(statement)
    self.assertCountEqual(["tf", "np"], [b.name for b in made])
    self.assertEmpty(found.made_by(wrapper.module.body[1].body[0]))
    resolved = found.resolve(last_chain(wrapper, "tf.contrib.mixed_precision"))
    [tf_binding] = [b for b in made if b.name == "tf"]
    self.assertIs(tf_binding, resolved.binding)
    self.assertEqual("tf", found.bound_path(tf_binding))
    references = found.references(tf_binding)
    self.assertLen(references, 2)
    for name in references:
      self.assertIsInstance(name, cst.Name)
      self.assertEqual("tf", name.value)

  def test_only_assignment_and_its_value(self):
    wrapper, found = parse("""\
        opt = make(sgd)
        lr = 1
        lr = 2
        a, b = pair()
        use(opt, lr, a)
        """)
    opt = found.only_assignment(last_chain(wrapper, "opt"))
    self.assertIsInstance(opt, metadata.Assignment)
    self.assertEqual("make(sgd)",
                     wrapper.module.code_for_node(
                         found.assigned_value(opt.node)))
    self.assertIsNone(found.only_assignment(last_chain(wrapper, "lr")))
    # One assignment, but not a plain `name = value`: no value to follow.
    a = found.only_assignment(last_chain(wrapper, "a"))
    self.assertIsNotNone(a)
    self.assertIsNone(found.assigned_value(a.node))

  def test_aliases_hold_only_tensorflow_namespaces(self):
    wrapper, found = parse("""\
        import tensorflow as tf
        mp = tf.keras.mixed_precision
        optimizers = tf.keras.optimizers
        count = 3
        """)
    self.assertEqual(
        {"mp": "tf.keras.mixed_precision"},
        {wrapper.module.code_for_node(target): path
         for target, path in found.aliases.items()})

  def test_module_scope(self):
    wrapper, found = parse("import tensorflow as tf\ndef f():\n  x = 1\n")
    scope = found.module_scope(wrapper.module)
    self.assertIsInstance(scope, metadata.GlobalScope)
    self.assertIn("tf", scope)
    self.assertIn("f", scope)
    self.assertNotIn("x", scope)

  def test_every_public_method_has_a_docstring(self):
    for name, member in vars(bindings.Bindings).items():
      if callable(member) and not name.startswith("_"):
        self.assertTrue(member.__doc__, name)


if __name__ == "__main__":
  absltest.main()
