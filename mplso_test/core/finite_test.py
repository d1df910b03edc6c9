"""Tests for the all-finite check."""


from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mplso._src.core import finite
from mplso_test import testing

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


def _graph_ops(fn, specs, jit_compile=False):
  """Op types of `fn`'s traced graph, its `tf.cond` branches included."""
  from benchmarks import graph_ops  # pylint: disable=g-import-not-at-top
  graph = tf.function(fn, jit_compile=jit_compile).get_concrete_function(
      *specs).graph
  return graph_ops.count_ops(graph.as_graph_def())


class StructureTest(tf.test.TestCase):

  def test_small_gradients_of_a_shape_share_one_sum(self):
    specs = ([tf.TensorSpec([8, 8], tf.float32)] * 5 +
             [tf.TensorSpec([8], tf.float32)] * 3 +
             [tf.TensorSpec([8], tf.float16)] * 2 +  # float16: one Sum each.
             [tf.TensorSpec([300, 300], tf.float32)] * 2)  # Large: the same.
    ops = _graph_ops(lambda *g: finite.all_finite(g), specs)
    self.assertEqual(2 + 2 + 2, ops["Sum"])
    self.assertEqual(2 + 1, ops["AddN"])  # Two groups, then the total.
    # The exact check: one IsFinite per gradient, plus one on the total.
    self.assertEqual(len(specs) + 1, ops["IsFinite"])

  def test_exact_check_runs_only_when_the_total_is_not_finite(self):
    with tf.Graph().as_default():
      placeholders = [tf.compat.v1.placeholder(tf.float32, [50])
                      for _ in range(10)]
      flag = finite.all_finite(placeholders)
      feed = {p: np.ones(50, np.float32) for p in placeholders}
      with tf.compat.v1.Session() as session:
        ran = testing.executed_op_types(session, flag, feed)
        self.assertEqual(1, ran["IsFinite"])  # Of the total only.
        self.assertEqual(0, ran["All"])
        feed[placeholders[3]] = np.full(50, np.nan, np.float32)
        ran = testing.executed_op_types(session, flag, feed)
        self.assertEqual(11, ran["IsFinite"])

  def test_exact_check_is_one_if_op_with_no_switch_per_gradient(self):
    # Lowered to Switch/Merge, the exact check's `cond` would run a Switch
    # per gradient at every step.
    with tf.Graph().as_default() as graph:
      placeholders = [tf.compat.v1.placeholder(tf.float32, [50])
                      for _ in range(10)]
      flag = finite.all_finite(placeholders)
      (if_op,) = [op for op in graph.get_operations()
                  if op.type in ("If", "StatelessIf")]
      self.assertFalse(if_op.get_attr("_lower_using_switch_merge"))
      feed = {p: np.ones(50, np.float32) for p in placeholders}
      with tf.compat.v1.Session() as session:
        ran = testing.executed_op_types(session, flag, feed)
        self.assertEqual(0, ran["Switch"] + ran["Merge"])
        self.assertTrue(session.run(flag, feed))
        feed[placeholders[3]] = np.full(50, 3e38, np.float32)  # Sum: inf.
        self.assertTrue(session.run(flag, feed))
        feed[placeholders[7]] = np.full(50, np.nan, np.float32)
        self.assertFalse(session.run(flag, feed))

  def test_under_xla_a_cond_not_a_gate(self):
    # XLA compiles `If` itself and cannot take a Switch/Merge gate.
    specs = [tf.TensorSpec([8, 8], tf.float32)] * 5
    ops = _graph_ops(lambda *g: finite.all_finite(g), specs, jit_compile=True)
    self.assertEqual(1, ops["Sum"])  # One group.
    self.assertEqual(0, ops["Switch"] + ops["Merge"])
    self.assertEqual(1, ops["If"] + ops["StatelessIf"])


if __name__ == "__main__":
  absltest.main()
