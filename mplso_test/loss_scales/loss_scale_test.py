"""Tests for the LossScale classes and get/serialize/deserialize."""


from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

import mplso
from mplso import loss_scale as loss_scale_module
from mplso_test.helpers import testing

NAN, INF = testing.NAN, testing.INF
F32_MAX = float(np.finfo(np.float32).max)
TF_FIXED = tf.compat.v1.mixed_precision.FixedLossScale
TF_DYNAMIC = tf.compat.v1.mixed_precision.DynamicLossScale

# (name, constructor, kwargs, words the error must contain).
BAD_ARGUMENTS = [
    ("fixed_zero", mplso.FixedLossScale, dict(loss_scale_value=0), "0"),
    ("fixed_negative", mplso.FixedLossScale, dict(loss_scale_value=-8.), "-8.0"),
    ("fixed_below_one", mplso.FixedLossScale, dict(loss_scale_value=.5), "0.5"),
    ("fixed_string", mplso.FixedLossScale, dict(loss_scale_value="8"), "'8'"),
    ("fixed_nan", mplso.FixedLossScale, dict(loss_scale_value=NAN), "nan"),
    ("fixed_inf", mplso.FixedLossScale, dict(loss_scale_value=INF), "inf"),
    ("fixed_bool", mplso.FixedLossScale, dict(loss_scale_value=True), "True"),
    ("fixed_tensor", mplso.FixedLossScale,
     dict(loss_scale_value=tf.constant(8.)), "tf.Tensor"),
    ("initial_below_one", mplso.DynamicLossScale,
     dict(initial_loss_scale=0.), "initial_loss_scale=0.0"),
    ("initial_string", mplso.DynamicLossScale,
     dict(initial_loss_scale="big"), "initial_loss_scale='big'"),
    ("initial_inf", mplso.DynamicLossScale,
     dict(initial_loss_scale=INF), "initial_loss_scale=inf"),
    ("period_zero", mplso.DynamicLossScale, dict(increment_period=0),
     "increment_period=0"),
    ("period_negative", mplso.DynamicLossScale, dict(increment_period=-5),
     "increment_period=-5"),
    ("period_float", mplso.DynamicLossScale, dict(increment_period=2.5),
     "increment_period=2.5"),
    ("period_numpy_fraction", mplso.DynamicLossScale,
     dict(increment_period=np.float32(2.5)),
     "increment_period=np.float32(2.5)"),
    ("period_string", mplso.DynamicLossScale, dict(increment_period="3"),
     "increment_period='3'"),
    # Finite in Python, inf in float32: TF would scale by inf.
    ("fixed_beyond_float32", mplso.FixedLossScale,
     dict(loss_scale_value=2**200), f"loss_scale_value={2**200}"),
    ("initial_beyond_float32", mplso.DynamicLossScale,
     dict(initial_loss_scale=1e39), "initial_loss_scale=1e+39"),
    ("multiplier_beyond_float32", mplso.DynamicLossScale,
     dict(multiplier=1e39), "multiplier=1e+39"),
    # The keyword-only extensions beyond TF's class: min_loss_scale,
    # max_loss_scale, hysteresis, stall_limit.
    ("min_zero", mplso.DynamicLossScale, dict(min_loss_scale=0),
     "min_loss_scale=0"),
    ("min_nan", mplso.DynamicLossScale, dict(min_loss_scale=NAN),
     "min_loss_scale=nan"),
    ("min_above_initial", mplso.DynamicLossScale,
     dict(initial_loss_scale=4, min_loss_scale=8), "initial_loss_scale=4"),
    ("max_below_min", mplso.DynamicLossScale,
     dict(min_loss_scale=8, max_loss_scale=4), "max_loss_scale=4"),
    ("max_inf", mplso.DynamicLossScale, dict(max_loss_scale=INF),
     "max_loss_scale=inf"),
    ("max_beyond_float32", mplso.DynamicLossScale, dict(max_loss_scale=1e39),
     "max_loss_scale=1e+39"),
    ("max_below_initial", mplso.DynamicLossScale,
     dict(initial_loss_scale=64, max_loss_scale=32), "initial_loss_scale=64"),
    # 0 in float32, or a subnormal that TF flushes to 0: every step at that
    # scale would skip. (An initial or maximum scale is >= the minimum.)
    ("min_zero_in_float32", mplso.DynamicLossScale,
     dict(initial_loss_scale=1e-50, min_loss_scale=1e-60),
     "min_loss_scale=1e-60"),
    ("min_subnormal_in_float32", mplso.DynamicLossScale,
     dict(initial_loss_scale=1, min_loss_scale=1e-40), "min_loss_scale=1e-40"),
    # Bounds that leave out the default initial scale, 2**15.
    ("max_below_default_initial", mplso.DynamicLossScale,
     dict(max_loss_scale=1024), "max_loss_scale=1024 given"),
    ("min_above_default_initial", mplso.DynamicLossScale,
     dict(min_loss_scale=2**16), "min_loss_scale=65536 given"),
    ("hysteresis_zero", mplso.DynamicLossScale, dict(hysteresis=0),
     "hysteresis=0"),
    ("hysteresis_fraction", mplso.DynamicLossScale, dict(hysteresis=1.5),
     "hysteresis=1.5"),
    ("stall_limit_zero", mplso.DynamicLossScale, dict(stall_limit=0),
     "stall_limit=0"),
    ("stall_limit_string", mplso.DynamicLossScale, dict(stall_limit="5"),
     "stall_limit='5'"),
    ("multiplier_one", mplso.DynamicLossScale, dict(multiplier=1.),
     "multiplier=1.0"),
    ("multiplier_below_one", mplso.DynamicLossScale, dict(multiplier=.5),
     "multiplier=0.5"),
    ("multiplier_string", mplso.DynamicLossScale, dict(multiplier="2"),
     "multiplier='2'"),
]

BAD_IDENTIFIERS = [
    ("capitalised", "Dynamic", "'Dynamic'"),
    ("numeric_string", "128", "'128'"),
    ("zero", 0, "0"),
    ("negative", -1., "-1.0"),
    ("nan", NAN, "nan"),
    ("list", [8], "[8]"),
    ("bool", True, "True"),
    ("object", object(), "object"),
]


class ConstructorTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*BAD_ARGUMENTS)
  def test_bad_argument(self, constructor, kwargs, shown):
    with self.assertRaises(ValueError) as raised:
      constructor(**kwargs)
    message = str(raised.exception)
    self.assertIn(shown, message)
    self.assertIn("must be", message)  # Says what is accepted.

  def test_dynamic_properties_and_defaults(self):
    loss_scale = mplso.DynamicLossScale()
    self.assertEqual((2.**15, 2000, 2.),
                     (loss_scale.initial_loss_scale, loss_scale.increment_period,
                      loss_scale.multiplier))
    self.assertEqual(2.**15, float(loss_scale()))
    self.assertEqual(tf.float32, loss_scale().dtype)
    scale, good_steps = loss_scale.variables
    self.assertEqual((tf.float32, tf.int64), (scale.dtype, good_steps.dtype))
    self.assertFalse(scale.trainable or good_steps.trainable)

  def test_fixed(self):
    loss_scale = mplso.FixedLossScale(8)
    self.assertEqual(8., float(loss_scale()))
    self.assertEqual(tf.float32, loss_scale().dtype)
    self.assertEqual((), loss_scale.variables)
    update_op, should_apply = loss_scale.update([tf.constant([NAN])])
    self.assertIs(True, should_apply)  # The contract: (no_op, True).
    del update_op
    self.assertEqual("FixedLossScale(8.0)", repr(loss_scale))

  def test_abstract(self):
    with self.assertRaises(TypeError):
      mplso.LossScale()  # pylint: disable=abstract-class-instantiated


class DynamicUpdateTest(tf.test.TestCase, parameterized.TestCase):
  """The rule itself is pinned in update_rule_test; here its wiring per mode."""

  @parameterized.named_parameters(*testing.NAMED_MODES)
  def test_update_steps(self, mode):
    with testing.ModeRunner(mode) as runner:
      grads = tf.Variable([1., 2.], trainable=False)
      sparse_values = tf.Variable([[1., 1.]], trainable=False)
      loss_scale = mplso.DynamicLossScale(
          initial_loss_scale=8., increment_period=2, multiplier=2.)
      holder = {}

      def update():
        sparse = tf.IndexedSlices(tf.convert_to_tensor(sparse_values),
                                  tf.constant([0]), tf.constant([4, 2]))
        update_op, holder["should_apply"] = loss_scale.update(
            {"dense": grads, "none": None, "sparse": sparse})
        return update_op

      step = runner.step(update)
      runner.initialize()
      got = []
      for dense, sparse in [([1., 2.], [[1., 1.]]), ([1., 2.], [[1., 1.]]),
                            ([NAN, 2.], [[1., 1.]]), ([1., 2.], [[INF, 1.]]),
                            ([1., 2.], [[1., 1.]])]:
        runner.assign(grads, dense)
        runner.assign(sparse_values, sparse)
        step()
        got.append(tuple(float(v) for v in runner.read(loss_scale.variables)))
      self.assertEqual(
          [(8., 1.), (16., 0.), (8., 0.), (4., 0.), (4., 1.)], got)

  def test_update_returns_flag_eagerly(self):
    loss_scale = mplso.DynamicLossScale(initial_loss_scale=4.)
    _, should_apply = loss_scale.update([tf.constant([NAN])])
    self.assertFalse(bool(should_apply))
    self.assertEqual(2., float(loss_scale()))
    _, should_apply = loss_scale.update([tf.constant([1.])])
    self.assertTrue(bool(should_apply))

  def test_graph_update_returns_what_tfs_returns(self):
    # Legacy code wraps TF's `update_op` in `tf.identity`; TF's is its
    # `tf.cond`'s bool output, True when the step completed the period.
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
      grad = tf.compat.v1.placeholder(tf.float32, [])
      results = {}
      for name, cls in (("theirs", TF_DYNAMIC), ("ours", mplso.DynamicLossScale)):
        loss_scale = cls(initial_loss_scale=4., increment_period=2)
        update_op, should_apply = loss_scale.update([grad])
        self.assertIsInstance(update_op, tf.Tensor)
        self.assertEqual(tf.bool, update_op.dtype)
        results[name] = (tf.identity(update_op), should_apply, loss_scale)
      session.run(tf.compat.v1.global_variables_initializer())
      for value in (1., 1., NAN, 1., INF, 1., 1.):
        got = {name: session.run(fetch[:2], {grad: value})
               for name, fetch in results.items()}
        self.assertEqual(got["theirs"], got["ours"], f"grad={value}")
        self.assertEqual(*[session.run(r[2]()) for r in results.values()])

  def test_fixed_update_returns_what_tfs_returns(self):
    with tf.Graph().as_default():
      for loss_scale in (TF_FIXED(8), mplso.FixedLossScale(8)):
        update_op, should_apply = loss_scale.update([tf.constant(NAN)])
        self.assertIsInstance(update_op, tf.Operation)  # TF's no_op.
        self.assertIs(True, should_apply)
    for loss_scale in (TF_FIXED(8), mplso.FixedLossScale(8)):
      self.assertEqual((None, True), loss_scale.update([tf.constant(1.)]))

  @parameterized.named_parameters(
      ("list_of_floats", [1.0, 2.0], [NAN]),
      ("scalar", 1.0, INF),
      ("numpy", [np.float32(1.)], [np.array([1., NAN], np.float32)]),
      ("with_none", [1.0, None], [None, NAN]),
  )
  def test_eager_python_number_gradients(self, finite, not_finite):
    theirs = TF_DYNAMIC(initial_loss_scale=4., increment_period=1)
    ours = mplso.DynamicLossScale(initial_loss_scale=4., increment_period=1)
    for grads, expected in ((finite, 8.), (not_finite, 4.)):
      for loss_scale in (theirs, ours):
        _, should_apply = loss_scale.update(grads)
        self.assertEqual(expected, float(loss_scale()))
        self.assertEqual(expected == 8., bool(should_apply))

  def test_repr(self):
    self.assertEqual(
        "DynamicLossScale(current_loss_scale=4.0, num_good_steps=0, "
        "initial_loss_scale=4.0, increment_period=3, multiplier=2.0)",
        repr(mplso.DynamicLossScale(4., 3)))


class NumbersAsTfAcceptedThemTest(tf.test.TestCase, parameterized.TestCase):
  """NumPy scalars and integral floats, as TF's classes accepted them."""

  @parameterized.named_parameters(
      ("numpy_float32_initial", dict(initial_loss_scale=np.float32(64.))),
      ("numpy_quarter_of_max", dict(initial_loss_scale=F32_MAX / 4)),
      ("numpy_float64_initial", dict(initial_loss_scale=np.float64(64.))),
      ("numpy_int64_initial", dict(initial_loss_scale=np.int64(64))),
      ("numpy_int_period", dict(increment_period=np.int64(2))),
      ("integral_float_period", dict(increment_period=2.)),
      ("numpy_float_period", dict(increment_period=np.float32(2.))),
      ("numpy_multiplier", dict(multiplier=np.float32(3.))),
  )
  def test_dynamic_matches_tf(self, kwargs):
    kwargs = {"initial_loss_scale": 2., "increment_period": 2, **kwargs}
    theirs, ours = TF_DYNAMIC(**kwargs), mplso.DynamicLossScale(**kwargs)
    self.assertEqual(theirs.get_config(), ours.get_config())
    for key, value in ours.get_config().items():  # Plain Python numbers.
      self.assertIn(type(value), (int, float), key)
    for grad in (1., 1., NAN, 1., 1., 1., INF):
      for loss_scale in (theirs, ours):
        loss_scale.update([tf.constant(grad)])
      self.assertEqual(float(theirs()), float(ours()))
      self.assertEqual(int(theirs._num_good_steps), int(ours._num_good_steps))  # pylint: disable=protected-access

  @parameterized.named_parameters(
      ("float32", np.float32(8.)),
      ("float64", np.float64(8.)),
      ("int64", np.int64(8)),
      ("int8", np.int8(8)),
  )
  def test_fixed_and_get_accept_numpy(self, value):
    # TF's FixedLossScale refused np.float32 and np.int64 ("must be a Python
    # int or float") though np.float64, a float subclass, passed; mplso
    # accepts every NumPy real scalar alike.
    for loss_scale in (mplso.FixedLossScale(value), loss_scale_module.get(value)):
      self.assertIsInstance(loss_scale, mplso.FixedLossScale)
      self.assertEqual(8., float(loss_scale()))
      self.assertIs(float, type(loss_scale.get_config()["loss_scale_value"]))

  def test_keep_increasing_until_capped_at_float32_max(self):
    # TF's own test: a scale grows only while the product is finite.
    start = F32_MAX / 4
    loss_scale = mplso.DynamicLossScale(start, increment_period=1)
    got = []
    for _ in range(3):
      loss_scale.update([tf.constant(1.)])
      got.append(float(loss_scale()))
    self.assertEqual([float(start * 2), F32_MAX, F32_MAX], got)


class TfWordingTest(tf.test.TestCase, parameterized.TestCase):
  """Where TF raised, its type and wording come first; our guidance follows."""

  @parameterized.named_parameters(
      ("fixed_type", lambda: mplso.FixedLossScale("8"),
       "loss_scale_value must be a Python int or float."),
      ("fixed_below_one", lambda: mplso.FixedLossScale(0.5),
       "loss_scale_value must be at least 1."),
      ("get_string", lambda: loss_scale_module.get("static"),
       "Could not interpret loss scale identifier: static"),
      ("get_below_one", lambda: loss_scale_module.get(0),
       "loss_scale_value must be at least 1."),
  )
  def test_same_text_as_tf(self, make, tf_text):
    with self.assertRaises(ValueError) as raised:
      make()
    message = str(raised.exception)
    self.assertTrue(message.startswith(tf_text), message)
    self.assertGreater(len(message), len(tf_text) + 20, "no guidance")


class ExtensionsTest(tf.test.TestCase, parameterized.TestCase):
  """mplso's keyword-only arguments of `DynamicLossScale` beyond TF's.

  `min_loss_scale`, `max_loss_scale`, `hysteresis` and `stall_limit`.
  """

  def test_defaults_and_properties(self):
    default = mplso.DynamicLossScale()
    self.assertEqual((1., None, 1, None),
                     (default.min_loss_scale, default.max_loss_scale,
                      default.hysteresis, default.stall_limit))
    custom = mplso.DynamicLossScale(
        8, 3, 2, min_loss_scale=np.float32(.25), max_loss_scale=1024,
        hysteresis=2., stall_limit=np.int64(5))
    self.assertEqual((.25, 1024., 2, 5),
                     (custom.min_loss_scale, custom.max_loss_scale,
                      custom.hysteresis, custom.stall_limit))

  @parameterized.named_parameters(
      ("max", dict(max_loss_scale=1024),
       r"^The default initial_loss_scale 32768 \(2\*\*15\) exceeds the "
       r"max_loss_scale=1024 given; initial_loss_scale must be <= "
       r"max_loss_scale\. Pass initial_loss_scale too, a value <= "
       r"max_loss_scale \(for example initial_loss_scale=1024\)\.$"),
      ("numpy_max", dict(max_loss_scale=np.float32(1024)),
       r"exceeds the max_loss_scale=np\.float32\(1024\.0\) given"),
      ("min", dict(min_loss_scale=2.**16),
       r"^The default initial_loss_scale 32768 \(2\*\*15\) is below the "
       r"min_loss_scale=65536\.0 given; initial_loss_scale must be >= "
       r"min_loss_scale\. Pass initial_loss_scale too, a value >= "
       r"min_loss_scale \(for example initial_loss_scale=65536\.0\)\.$"),
      # Written by the user, 2**15 gets the ordinary message.
      ("max_explicit_initial",
       dict(initial_loss_scale=2**15, max_loss_scale=1024),
       r"^`initial_loss_scale` must be a real number in \[1, 1024\]\. "
       r"Received: initial_loss_scale=32768\.$"),
  )
  def test_bound_that_leaves_out_the_initial_scale(self, kwargs, regex):
    with self.assertRaisesRegex(ValueError, regex):
      mplso.DynamicLossScale(**kwargs)

  @parameterized.named_parameters(
      ("max_at_default", dict(max_loss_scale=2**15), 2.**15),
      ("min_at_default", dict(min_loss_scale=2**15), 2.**15),
      ("initial_given", dict(initial_loss_scale=512, max_loss_scale=1024),
       512.),
  )
  def test_bound_that_keeps_the_initial_scale(self, kwargs, initial):
    self.assertEqual(initial, mplso.DynamicLossScale(**kwargs)())

  def test_keyword_only(self):
    with self.assertRaises(TypeError):
      mplso.DynamicLossScale(8, 3, 2, 1)  # pylint: disable=too-many-function-args

  def test_default_config_and_checkpoint_are_tfs(self):
    ours, theirs = mplso.DynamicLossScale(), TF_DYNAMIC()
    self.assertEqual(theirs.get_config(), ours.get_config())
    # So TF's class loads our default config, and ours TF's.
    TF_DYNAMIC.from_config(ours.get_config())
    names = {}
    for name, loss_scale in (("ours", ours), ("theirs", theirs)):
      path = tf.train.Checkpoint(ls=loss_scale).save(
          self.create_tempdir().full_path + "/ckpt")
      names[name] = {n for n, _ in tf.train.list_variables(path)
                     if n.startswith("ls/")}
    self.assertEqual(names["theirs"], names["ours"])

  @parameterized.named_parameters(
      ("min", dict(min_loss_scale=.5)),
      ("max", dict(max_loss_scale=2.**20)),
      ("hysteresis", dict(hysteresis=3)),
      ("stall_limit", dict(stall_limit=7)),
      ("all", dict(min_loss_scale=2., max_loss_scale=2.**20, hysteresis=2,
                   stall_limit=4)),
  )
  def test_config_round_trip(self, extensions):
    original = mplso.DynamicLossScale(64., 5, 3., **extensions)
    config = original.get_config()
    self.assertEqual({"initial_loss_scale": 64., "increment_period": 5,
                      "multiplier": 3., **extensions}, config)
    for restored in (mplso.DynamicLossScale.from_config(config),
                     loss_scale_module.deserialize(
                         loss_scale_module.serialize(original))):
      self.assertEqual(config, restored.get_config())
      for name in extensions:
        self.assertEqual(getattr(original, name), getattr(restored, name))

  def test_hysteresis_variable_only_when_needed(self):
    self.assertLen(mplso.DynamicLossScale(hysteresis=1).variables, 2)
    loss_scale = mplso.DynamicLossScale(16., hysteresis=2)
    self.assertEqual(["current_loss_scale", "good_steps",
                      "consecutive_nonfinite_steps"],
                     [v.name.split(":")[0] for v in loss_scale.variables])
    self.assertEqual(tf.int64, loss_scale.variables[2].dtype)
    for grad in (NAN, 1., NAN, NAN):
      loss_scale.update([tf.constant(grad)])
    path = tf.train.Checkpoint(ls=loss_scale).save(
        self.create_tempdir().full_path + "/ckpt")
    restored = mplso.DynamicLossScale(16., hysteresis=2)
    restored.update([tf.constant(NAN)])  # Its counter is 1 before restoring.
    tf.train.Checkpoint(ls=restored).restore(path).assert_consumed()
    self.assertAllEqual((8., 0, 0), restored.variables)

  @parameterized.named_parameters(*testing.NAMED_MODES)
  def test_trajectory_per_mode(self, mode):
    # The arithmetic is pinned in update_rule_test and property_test; this
    # checks the wiring in each mode: floor .5, ceiling 12, hysteresis 2.
    with testing.ModeRunner(mode) as runner:
      grad = tf.Variable(1., trainable=False)
      loss_scale = mplso.DynamicLossScale(
          2., 1, 2., min_loss_scale=.5, max_loss_scale=12., hysteresis=2)
      step = runner.step(lambda: loss_scale.update([grad])[0])
      runner.initialize()
      got = []
      for value in (1., 1., 1., NAN, 1.) + (NAN,) * 10:
        runner.assign(grad, value)
        step()
        got.append(float(runner.read(loss_scale.variables[0])))
      self.assertEqual([4., 8., 12., 12., 12., 12., 6., 6., 3., 3., 1.5, 1.5,
                        .75, .75, .5], got)


class ReadAsTensorTest(tf.test.TestCase, parameterized.TestCase):
  """TF 2.4+ code read `optimizer.loss_scale` as a tensor; TF 2.3 called it."""

  @parameterized.named_parameters(
      ("fixed", lambda: mplso.FixedLossScale(128), 128.),
      ("dynamic", lambda: mplso.DynamicLossScale(2.**10), 1024.))
  def test_every_era_reads_the_scale(self, make, expected):
    loss_scale = make()
    self.assertEqual(expected, float(loss_scale()))  # TF 2.3.
    self.assertEqual(expected, float(loss_scale))  # TF 2.4+.
    self.assertEqual(expected, loss_scale.numpy())
    self.assertEqual(tf.float32, tf.convert_to_tensor(loss_scale).dtype)
    self.assertEqual(3 * expected, float(tf.constant(3.) * loss_scale))
    self.assertEqual(3 * expected, float(loss_scale * tf.constant(3.)))

  def test_conversion_follows_the_scale_in_a_function(self):
    loss_scale = mplso.DynamicLossScale(4., increment_period=1)

    @tf.function
    def scaled(x):
      return x * loss_scale

    self.assertEqual(8., float(scaled(tf.constant(2.))))
    loss_scale.update([tf.constant(1.)])  # Grows to 8.
    self.assertEqual(16., float(scaled(tf.constant(2.))))


class CheckpointTest(tf.test.TestCase):

  def test_names_and_round_trip(self):
    loss_scale = mplso.DynamicLossScale(initial_loss_scale=64.,
                                        increment_period=5)
    loss_scale.update([tf.constant([1.])])
    loss_scale.update([tf.constant([NAN])])
    loss_scale.update([tf.constant([1.])])
    path = tf.train.Checkpoint(ls=loss_scale).save(
        self.create_tempdir().full_path + "/ckpt")
    names = {name for name, _ in tf.train.list_variables(path)}
    self.assertContainsSubset(
        {"ls/current_loss_scale/.ATTRIBUTES/VARIABLE_VALUE",
         "ls/good_steps/.ATTRIBUTES/VARIABLE_VALUE"}, names)
    restored = mplso.DynamicLossScale(initial_loss_scale=64.,
                                      increment_period=5)
    tf.train.Checkpoint(ls=restored).restore(path).assert_consumed()
    self.assertAllEqual((32., 1), restored.variables)


class GetTest(tf.test.TestCase, parameterized.TestCase):

  def test_accepted(self):
    self.assertIsNone(loss_scale_module.get(None))
    fixed = mplso.FixedLossScale(4)
    self.assertIs(fixed, loss_scale_module.get(fixed))
    self.assertEqual(128., float(loss_scale_module.get(128)()))
    self.assertEqual(2.5, float(loss_scale_module.get(2.5)()))
    dynamic = loss_scale_module.get("dynamic")
    self.assertIsInstance(dynamic, mplso.DynamicLossScale)
    self.assertEqual(mplso.DynamicLossScale().get_config(), dynamic.get_config())

  @parameterized.named_parameters(*BAD_IDENTIFIERS)
  def test_rejected(self, identifier, shown):
    with self.assertRaises(ValueError) as raised:
      loss_scale_module.get(identifier)
    self.assertIn(shown, str(raised.exception))


class SerializationTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ("fixed", lambda: mplso.FixedLossScale(3.5)),
      ("dynamic", lambda: mplso.DynamicLossScale(256., 7, 3.)),
  )
  def test_round_trip(self, make):
    original = make()
    config = loss_scale_module.serialize(original)
    self.assertEqual(type(original).__name__, config["class_name"])
    restored = loss_scale_module.deserialize(config)
    self.assertIs(type(original), type(restored))
    self.assertEqual(original.get_config(), restored.get_config())
    self.assertEqual(original.get_config(),
                     type(original).from_config(original.get_config()).get_config())

  def test_dynamic_config_keys(self):
    self.assertEqual(
        {"initial_loss_scale": 256., "increment_period": 7, "multiplier": 3.},
        mplso.DynamicLossScale(256, 7, 3).get_config())

  def test_custom_objects(self):

    class Halved(mplso.FixedLossScale):
      pass

    restored = loss_scale_module.deserialize(
        {"class_name": "Halved", "config": {"loss_scale_value": 2.}},
        custom_objects={"Halved": Halved})
    self.assertIsInstance(restored, Halved)

  @parameterized.named_parameters(
      ("not_a_dict", "dynamic", "'dynamic'"),
      ("no_class_name", {"config": {}}, "class_name"),
      ("unknown_class", {"class_name": "Magic", "config": {}}, "'Magic'"),
      ("unknown_key", {"class_name": "FixedLossScale",
                       "config": {"value": 2.}}, "value"),
      ("bad_value", {"class_name": "FixedLossScale",
                     "config": {"loss_scale_value": 0}}, "loss_scale_value=0"),
  )
  def test_bad_config(self, config, shown):
    with self.assertRaises(ValueError) as raised:
      loss_scale_module.deserialize(config)
    self.assertIn(shown, str(raised.exception))

  def test_serialize_rejects_non_loss_scale(self):
    with self.assertRaisesRegex(ValueError, "mplso.LossScale.*'dynamic'"):
      loss_scale_module.serialize("dynamic")


if __name__ == "__main__":
  absltest.main()
