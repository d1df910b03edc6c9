"""Tests for the all-finite check."""


import collections

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mplso._src.core import finite
from mplso_test.helpers import testing

NAN, INF = testing.NAN, testing.INF


def sparse(values):
  values = tf.constant(values)
  return tf.IndexedSlices(values, tf.range(tf.shape(values)[0]),
                          tf.constant([10] + values.shape.as_list()[1:]))


class AllFiniteTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ("finite", [1., -2.], True),
      ("nan", [1., NAN], False),
      ("inf", [INF, 1.], False),
      ("minus_inf", [1., -INF], False),
      ("inf_and_minus_inf", [INF, -INF], False),
      ("zeros", [0., -0.], True),
  )
  def test_dense(self, values, expected):
    self.assertEqual(expected, bool(finite.all_finite([tf.constant(values)])))

  @parameterized.named_parameters(
      ("float16", tf.float16), ("bfloat16", tf.bfloat16),
      ("float32", tf.float32), ("float64", tf.float64))
  def test_dtypes(self, dtype):
    ok = tf.constant([1., 2.], dtype)
    bad = tf.constant([1., NAN], dtype)
    self.assertTrue(bool(finite.all_finite([ok, ok])))
    self.assertFalse(bool(finite.all_finite([ok, bad])))

  @parameterized.named_parameters(
      ("float16", tf.float16, 60000.), ("float32", tf.float32, 3e38))
  def test_large_finite_values_whose_sum_overflows_are_finite(self, dtype, big):
    # The fast path's sum overflows to inf; the exact check must say finite.
    grads = [tf.constant([big, big, big], dtype), tf.constant([big], dtype)]
    self.assertTrue(bool(finite.all_finite(grads)))

  def test_indexed_slices_values_count(self):
    self.assertTrue(bool(finite.all_finite([sparse([[1., 2.]])])))
    self.assertFalse(bool(finite.all_finite([sparse([[1., INF]])])))

  def test_none_and_empty(self):
    self.assertTrue(bool(finite.all_finite([])))
    self.assertTrue(bool(finite.all_finite([None, None])))
    self.assertFalse(
        bool(finite.all_finite([None, tf.constant([NAN]), None])))
    self.assertTrue(bool(finite.all_finite([tf.zeros([0])])))

  def test_many_gradients_one_bad(self):
    grads = [tf.fill([3, 3], float(i)) for i in range(50)]
    self.assertTrue(bool(finite.all_finite(grads)))
    grads[37] = tf.tensor_scatter_nd_update(grads[37], [[1, 2]], [NAN])
    self.assertFalse(bool(finite.all_finite(grads)))

  def test_in_graph(self):
    with tf.Graph().as_default():
      ph = tf.compat.v1.placeholder(tf.float32, [None])
      flag = finite.all_finite([ph, tf.constant([1.])])
      with tf.compat.v1.Session() as sess:
        self.assertTrue(sess.run(flag, {ph: [1., 2.]}))
        self.assertFalse(sess.run(flag, {ph: [1., NAN]}))
        self.assertTrue(sess.run(flag, {ph: np.full([4], 3e38, np.float32)}))

  def test_in_graph_with_v1_shapes(self):
    # TF1 programs ported with `tf.compat.v1.disable_v2_behavior()` get
    # TensorShapes whose dimensions are (unhashable) Dimension objects.
    tf.compat.v1.disable_v2_tensorshape()
    self.addCleanup(tf.compat.v1.enable_v2_tensorshape)
    with tf.Graph().as_default():
      ph = tf.compat.v1.placeholder(tf.float32, [2, 3])
      flag = finite.all_finite([ph, tf.ones([2, 3]), tf.ones([2, 3])])
      with tf.compat.v1.Session() as sess:
        self.assertTrue(sess.run(flag, {ph: np.ones([2, 3])}))
        self.assertFalse(sess.run(flag, {ph: np.full([2, 3], NAN)}))


_BIG = 3e38  # Finite; a few of them sum to inf in float32.


def _gradients(bad, where):
  """40 small gradients of two shapes, and one large one; `bad` at `where`."""
  grads = [np.full([3, 2], 0.5, np.float32) for _ in range(20)]
  grads += [np.full([4], -0.25, np.float32) for _ in range(19)]
  grads.append(np.full([300, 300], 0.125, np.float32))  # Not grouped.
  if bad == _BIG:
    grads[where][:] = _BIG
  elif bad is not None:
    grads[where].flat[1] = bad
  return grads


class KindsTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ("mixed", [[1., NAN], None, [INF, NAN], [-INF], [2.]], [1, 0, 1, 2, 0]),
      ("one", [[INF, 1.]], [2]),
      ("one_nan", [[NAN]], [1]),
      ("finite", [[1.], [2., 3.]], [0, 0]),
      ("none", [None, None], [0, 0]),
      ("sparse", ["sparse_inf", [1.]], [2, 0]),
  )
  def test_with_the_checks_verdict_as_without(self, values, expected):
    grads = []
    for value in values:
      if value == "sparse_inf":
        grads.append(tf.IndexedSlices(tf.constant([[INF, 1.]]),
                                      tf.constant([0]), tf.constant([2, 2])))
      else:
        grads.append(None if value is None else tf.constant(value))
    all_finite, per_gradient = finite.check(grads)
    self.assertEqual(bool(finite.all_finite(grads)), bool(all_finite))
    self.assertEqual(expected, finite.kinds(grads).numpy().tolist())
    self.assertEqual(expected,
                     finite.kinds(grads, per_gradient).numpy().tolist())


class ManyGradientsTest(tf.test.TestCase, parameterized.TestCase):
  """Every way the check is built gives TF's flag, wherever the value is."""

  @parameterized.product(
      mode=("eager", "function", "xla", "graph"),
      bad=(None, NAN, INF, -INF, _BIG),
      where=(5, 25, 39))  # In a group of [3, 2], of [4], the large one.
  def test_flag(self, mode, bad, where):
    grads = _gradients(bad, where)
    expected = bad is None or bad == _BIG
    if mode == "graph":
      with tf.Graph().as_default():
        placeholders = [tf.compat.v1.placeholder(tf.float32, g.shape)
                        for g in grads]
        flag = finite.all_finite(placeholders)
        with tf.compat.v1.Session() as session:
          got = session.run(flag, dict(zip(placeholders, grads)))
    elif mode == "eager":
      got = finite.all_finite([tf.constant(g) for g in grads])
    else:
      got = tf.function(lambda *g: finite.all_finite(g),
                        jit_compile=mode == "xla")(*grads)
    self.assertEqual(expected, bool(got))


def _tf_flag(values):
  """TF's own check: IsFinite and All of every element."""
  return all(bool(tf.reduce_all(tf.math.is_finite(tf.constant(v))))
             for v in values)


def _one_gradient(dtype, shape, bad):
  """A gradient of `shape` with `bad` as its last element (if it has one)."""
  value = np.full(shape, 0.5, dtype.as_numpy_dtype)
  if value.size and bad is not None:
    value.flat[-1] = dtype.max if bad == "max" else bad
  return value


class EveryDtypeAndShapeTest(tf.test.TestCase, parameterized.TestCase):
  """The flag is TF's for every dtype, shape and mode."""

  @parameterized.product(
      dtype=(tf.float16, tf.bfloat16, tf.float32, tf.float64),
      shape=((), (0,), (7,), (3, 0), (4, 5), (2, 3, 4), (1, 2, 1, 3)),
      bad=(None, NAN, INF, -INF, "max"),
      mode=("eager", "function", "xla"))
  def test_flag_is_tfs(self, dtype, shape, bad, mode):
    grads = [_one_gradient(dtype, shape, bad),
             _one_gradient(dtype, (6, 2), "max")]  # Finite, large values.
    check = finite.all_finite
    if mode != "eager":
      check = tf.function(check, jit_compile=mode == "xla")
    got = check([tf.constant(g) for g in grads])
    self.assertEqual(_tf_flag(grads), bool(got))

  @parameterized.named_parameters(
      ("known", [6, 4]), ("rows_unknown", [None, 4]),
      ("last_unknown", [6, None]), ("rank_unknown", None))
  def test_shapes_known_when_the_graph_runs_only(self, shape):
    # A TF1 placeholder's unknown dimensions, any of them.
    cases = [(np.full([6, 4], 3e38), np.ones([2, 3])),
             (np.ones([6, 4]), np.zeros([0, 3])),  # No rows at all.
             (np.full([6, 4], NAN), np.ones([2, 3])),
             (np.ones([6, 4]), np.full([2, 3], -INF))]
    expected = [_tf_flag(case) for case in cases]  # Eagerly, before the graph.
    with tf.Graph().as_default():
      ph = tf.compat.v1.placeholder(tf.float32, shape)
      rows = tf.compat.v1.placeholder(tf.float32, [None, 3])
      flag = finite.all_finite([ph, tf.IndexedSlices(rows, tf.range(2))])
      with tf.compat.v1.Session() as sess:
        got = [sess.run(flag, {ph: value, rows: row}) for value, row in cases]
    self.assertEqual(expected, got)


# Ops that compute with a gradient's values: a rewriter may fold them
# (constant folding turns `x * 0` into 0) or run them in a narrower type (the
# automatic mixed precision pass runs MatMul in float16), and either could
# change the verdict. The check must use none of them.
_ARITHMETIC = ("MatMul", "BatchMatMulV2", "Mul", "Add", "AddV2", "AddN",
               "Sum", "Mean", "Cast", "Sub", "RealDiv")


class StructureTest(tf.test.TestCase, parameterized.TestCase):

  def _op_types(self, specs):
    graph = tf.function(lambda *g: finite.all_finite(g)).get_concrete_function(
        *specs).graph
    return collections.Counter(op.type for op in graph.get_operations())

  def test_one_is_finite_per_gradient_and_no_arithmetic(self):
    specs = ([tf.TensorSpec([8, 8], tf.float32)] * 9 +
             [tf.TensorSpec([3], tf.float16), tf.TensorSpec([], tf.float64),
              tf.TensorSpec([2, 3, 4], tf.bfloat16)])
    ops = self._op_types(specs)
    self.assertEqual(len(specs), ops["IsFinite"])
    self.assertEqual(len(specs) + 1, ops["All"])  # Each, then all of them.
    for op_type in _ARITHMETIC:
      self.assertEqual(0, ops[op_type], op_type)
    # No conditional: the flag is the same at every step, whatever it is.
    self.assertEqual(0, ops["If"] + ops["StatelessIf"] + ops["Switch"])

  def test_one_gradient_needs_no_stack(self):
    ops = self._op_types([tf.TensorSpec([4, 4], tf.float32)])
    self.assertEqual(1, ops["IsFinite"])
    self.assertEqual(1, ops["All"])
    self.assertEqual(0, ops["Pack"])

  @parameterized.named_parameters(
      ("finite", [1., 2.5], True), ("nan", [1., NAN], False),
      ("inf", [INF], False), ("minus_inf", [1., -INF], False),
      ("none", [None, 2.], True))
  def test_python_numbers(self, values, expected):
    # TF's `LossScale.update` took Python numbers as gradients eagerly.
    self.assertEqual(expected, bool(finite.all_finite(values)))
    self.assertEqual(expected, bool(tf.function(
        lambda: finite.all_finite(values))()))


if __name__ == "__main__":
  absltest.main()
