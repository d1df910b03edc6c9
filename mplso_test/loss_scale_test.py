"""Tests for the LossScale classes and get/serialize/deserialize."""


from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

import mplso
from mplso import loss_scale as loss_scale_module
from mplso_test import testing

NAN, INF = testing.NAN, testing.INF

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

  def test_graph_update_is_an_op(self):
    with tf.Graph().as_default():
      loss_scale = mplso.DynamicLossScale()
      update_op, should_apply = loss_scale.update([tf.constant([1.])])
      self.assertIsInstance(update_op, tf.Operation)
      self.assertIsInstance(should_apply, tf.Tensor)

  def test_repr(self):
    self.assertEqual(
        "DynamicLossScale(current_loss_scale=4.0, num_good_steps=0, "
        "initial_loss_scale=4.0, increment_period=3, multiplier=2.0)",
        repr(mplso.DynamicLossScale(4., 3)))


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
