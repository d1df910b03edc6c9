"""Tests `cst_metadata`: LibCST's metadata, the same at less cost."""

import textwrap
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import libcst as cst
from libcst import metadata

from mplso._src.upgrade import cst_metadata

# Sources whose positions, parents, contexts and scopes are compared.
_SOURCES = {
    "plain": """\
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD())
        """,
    "header_comments_and_blank_lines": """\
        #!/usr/bin/env python
        # A header comment.

        \"\"\"Docstring.\"\"\"

        # Leads the import.
        import tensorflow as tf


        def f(x, *args, y=1, **kw):  # trailing
          '''Doc.'''
          global g
          g = [i for i in x if i]
          return lambda z: z + y
        """,
    "decorators_classes_and_multiline": """\
        import functools

        @functools.lru_cache(
            maxsize=None)
        # between
        @staticmethod
        def cached(a,
                   b):
          return (a +
                  b)

        class A(object, metaclass=type):
          x: int = 1
          def m(self):
            s = '''one
        two
        three'''
            return s; pass
          @property
          def p(self):
            return self.x
        a = 1; b = 2
        if a:
          pass
        elif b:
          c = {k: v for k, v in {}.items()}
        else:
          del a
        for i in range(3):
          while i:
            i -= 1
        try:
          import os
        except ImportError as e:
          raise
        finally:
          pass
        with open("f") as f, open("g") as g:
          print(f"{f!r:>10} {g}")
        """,
    "continuations_and_strings": """\
        x = 1 + \\
            2
        y = ("a"
             "b")
        z = r'''\\
        '''
        """,
    "no_trailing_newline": "import tensorflow as tf\nx = tf.add(1, 2)",
    "crlf": "import os\r\n\r\ndef f():\r\n  return os.sep\r\n",
    "mixed_line_breaks_inside_a_string": (
        "a = 1\n"
        "b = '''x\r\ny\n'''\n"
        "c = b\n"),
    "only_comments": "# nothing\n\n# at all\n",
    "empty": "",
}

_PROVIDERS = (metadata.ParentNodeProvider, metadata.PositionProvider,
              metadata.ExpressionContextProvider, metadata.ScopeProvider)


def _source(name):
  text = _SOURCES[name]
  return textwrap.dedent(text) if text.startswith(" ") else text


def _both(text):
  """(LibCST's resolved metadata, `cst_metadata`'s), on two parses."""
  eager = metadata.MetadataWrapper(cst.parse_module(text),
                                   unsafe_skip_copy=True)
  fast = cst_metadata.wrap(cst.parse_module(text))
  return ({p: eager.resolve(p) for p in _PROVIDERS}, eager.module,
          {p: fast.resolve(p) for p in _PROVIDERS}, fast.module)


def _same_node(eager_parents, fast_parents, eager_module, fast_module):
  """Each node of the eager tree -> the same node of the fast tree."""
  found = {id(a): b for a, b in zip(eager_parents, fast_parents)}
  found[id(eager_module)] = fast_module
  return found


class CstMetadataTest(parameterized.TestCase):

  @parameterized.named_parameters((name, name) for name in _SOURCES)
  def test_the_same_parents_in_the_same_order(self, name):
    eager, eager_module, fast, fast_module = _both(_source(name))
    eager_parents = eager[metadata.ParentNodeProvider]
    fast_parents = fast[metadata.ParentNodeProvider]
    self.assertEqual([type(n).__name__ for n in eager_parents],
                     [type(n).__name__ for n in fast_parents])
    same = _same_node(eager_parents, fast_parents, eager_module, fast_module)
    for node, parent in eager_parents.items():
      self.assertIs(fast_parents[same[id(node)]], same[id(parent)])

  @parameterized.named_parameters((name, name) for name in _SOURCES)
  def test_every_position_the_same_asked_in_any_order(self, name):
    eager, eager_module, fast, fast_module = _both(_source(name))
    same = _same_node(eager[metadata.ParentNodeProvider],
                      fast[metadata.ParentNodeProvider], eager_module,
                      fast_module)
    positions = fast[metadata.PositionProvider]
    nodes = list(eager[metadata.ParentNodeProvider])
    # Last statement first, so that each is computed before those above it.
    for node in reversed(nodes):
      self.assertEqual(positions[same[id(node)]],
                       eager[metadata.PositionProvider][node],
                       type(node).__name__)
    self.assertEqual(positions[fast_module],
                     eager[metadata.PositionProvider][eager_module])
    self.assertLen(positions, len(eager[metadata.PositionProvider]))

  def test_positions_are_computed_for_the_statements_asked_about_only(self):
    text = "import os\n" + "".join(f"x{i} = os.sep\n" for i in range(50))
    wrapper = cst_metadata.wrap(cst.parse_module(text))
    positions = wrapper.resolve(metadata.PositionProvider)
    last = wrapper.module.body[-1]
    self.assertEqual(positions[last].start, metadata.CodePosition(51, 0))
    first_name = wrapper.module.body[0].body[0].names[0].name
    self.assertEqual(positions[first_name].start, metadata.CodePosition(1, 7))
    # Two statements' nodes, not the module's 500 or so.
    self.assertLess(len(positions._computed), 30)
    self.assertGreater(len(positions), 500)

  def test_a_node_outside_the_module_has_no_position(self):
    wrapper = cst_metadata.wrap(cst.parse_module("x = 1\n"))
    positions = wrapper.resolve(metadata.PositionProvider)
    with self.assertRaises(KeyError):
      positions[cst.Name("y")]  # pylint: disable=pointless-statement
    self.assertIsNone(positions.get(cst.Name("y")))

  @parameterized.named_parameters((name, name) for name in _SOURCES)
  def test_the_same_expression_contexts_and_scopes(self, name):
    eager, eager_module, fast, fast_module = _both(_source(name))
    same = _same_node(eager[metadata.ParentNodeProvider],
                      fast[metadata.ParentNodeProvider], eager_module,
                      fast_module)
    contexts = fast[metadata.ExpressionContextProvider]
    self.assertEqual(
        [(id(same[id(n)]), c)
         for n, c in eager[metadata.ExpressionContextProvider].items()],
        [(id(n), c) for n, c in contexts.items()])
    scopes = fast[metadata.ScopeProvider]
    self.assertEqual(
        [id(same[id(n)]) for n in eager[metadata.ScopeProvider]],
        [id(n) for n in scopes])

    def summary(scope):
      if scope is None:
        return None
      return (type(scope).__name__,
              sorted((a.name, type(a).__name__, len(a.references))
                     for a in scope.assignments),
              sorted(a.node.value if isinstance(a.node, cst.Name) else
                     type(a.node).__name__ for a in scope.accesses))

    self.assertEqual(
        [summary(s) for s in eager[metadata.ScopeProvider].values()],
        [summary(s) for s in scopes.values()])

  def test_other_providers_resolve_as_in_libcst(self):
    text = "import os\nx = os.sep\n"
    fast = cst_metadata.wrap(cst.parse_module(text))
    eager = metadata.MetadataWrapper(cst.parse_module(text))
    self.assertEqual(
        list(fast.resolve(
            metadata.WhitespaceInclusivePositionProvider).values()),
        list(eager.resolve(
            metadata.WhitespaceInclusivePositionProvider).values()))



class FallbackTest(absltest.TestCase):
  """`wrap` checks the LibCST internals `Wrapper` uses, once a process."""

  def tearDown(self):
    super().tearDown()
    cst_metadata.agrees_with_libcst.cache_clear()

  def test_the_installed_libcst_agrees(self):
    # Fails when a LibCST release changes what `Wrapper` relies on; users
    # then get LibCST's own wrapper (below), and the same output, slower.
    cst_metadata.agrees_with_libcst.cache_clear()
    self.assertTrue(cst_metadata.agrees_with_libcst())
    self.assertIsInstance(cst_metadata.wrap(cst.parse_module("x = 1\n")),
                          cst_metadata.Wrapper)

  def test_libcst_s_own_wrapper_where_the_internals_differ(self):
    module = cst.parse_module("x = 1\ny = 2\n")
    for broken in (mock.patch.object(cst_metadata, "internal", None),
                   mock.patch.object(cst_metadata, "parents",
                                     lambda module: {})):
      with self.subTest(str(broken)), broken:
        cst_metadata.agrees_with_libcst.cache_clear()
        self.assertFalse(cst_metadata.agrees_with_libcst())
        wrapper = cst_metadata.wrap(module)
        self.assertNotIsInstance(wrapper, cst_metadata.Wrapper)
        self.assertEqual(
            2, wrapper.resolve(metadata.PositionProvider)[
                module.body[1]].start.line)


if __name__ == "__main__":
  absltest.main()
