"""What the OptimizerV2 family alone does; family_contract_test.py has the rest.

The wrapped optimizer's gradient aggregation, OptimizerV2's hyperparameter
hooks and TF1-graph methods, `weights` that are the wrapped optimizer's
alone, slots that TF's checkpointer reaches through the wrapper, and
TF 2.3's own configs.
"""

import json
import os

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tf_keras

import mplso
from mplso._src.keras import optimizer_v2
import mplso.keras
from mplso_test.helpers import keras_families
from mplso_test.helpers import testing

# The tests reach OptimizerV2's hooks, as tf_keras's loaders do.
# pylint: disable=protected-access

NAN = testing.NAN
legacy = tf_keras.optimizers.legacy
TfKerasLossScaleOptimizer = tf_keras.mixed_precision.LossScaleOptimizer


def _built_adam(**kwargs):
  """A wrapped Adam with its slots for a model's variables, and the model."""
  model = keras_families.keras_model(tf_keras)
  opt = mplso.keras.LossScaleOptimizer(legacy.Adam(0.01, **kwargs),
                                       mplso.DynamicLossScale(2.0**10))
  opt._create_all_weights(model.trainable_variables)
  return model, opt


class CustomAggregationTest(tf.test.TestCase, parameterized.TestCase):
  """What the wrapped optimizer applies is checked, after its aggregation."""

  def _nan_aggregator(self, grads_and_vars):
    return [(g * float("nan"), v) for g, v in grads_and_vars]

  @parameterized.named_parameters(("eager", False), ("function", True))
  def test_nan_made_by_a_gradient_aggregator_is_skipped_as_tf_keras(
      self, use_function):
    results = []
    for make in (lambda o: mplso.keras.LossScaleOptimizer(o, "dynamic"),
                 TfKerasLossScaleOptimizer):
      var = tf.Variable([1., 2.])
      opt = make(tf_keras.optimizers.legacy.SGD(
          0.1, gradient_aggregator=self._nan_aggregator))

      def step(opt=opt, var=var):
        with tf.GradientTape() as tape:
          loss = opt.get_scaled_loss(tf.reduce_sum(var))
        grads = opt.get_unscaled_gradients(tape.gradient(loss, [var]))
        opt.apply_gradients(zip(grads, [var]))

      (tf.function(step) if use_function else step)()
      results.append((var.numpy().tolist(), float(tf.convert_to_tensor(
          opt.loss_scale() if callable(opt.loss_scale) else opt.loss_scale))))
    ours, theirs = results
    self.assertEqual(theirs, ours)
    self.assertEqual([1., 2.], ours[0])  # Skipped.
    self.assertEqual(2.**14, ours[1])  # And the scale halved.

  def test_an_overridden_aggregation_hook_is_checked_too(self):

    class NanSGD(tf_keras.optimizers.legacy.SGD):

      def _aggregate_gradients(self, grads_and_vars):
        return [(g * float("nan"), v) for g, v in grads_and_vars]

    var = tf.Variable([1., 2.])
    opt = mplso.keras.LossScaleOptimizer(NanSGD(0.1), "dynamic")
    opt.minimize(lambda: tf.reduce_sum(var), [var])
    self.assertEqual([1., 2.], var.numpy().tolist())

  def test_default_aggregation_is_left_to_the_wrapped_optimizer(self):
    opt = mplso.keras.LossScaleOptimizer(tf_keras.optimizers.legacy.SGD(0.1),
                                         "dynamic")
    self.assertFalse(opt._aggregates_its_own_way())  # pylint: disable=protected-access


class CustomLoopTest(tf.test.TestCase):

  def test_minimize_takes_one_variable_as_tf_2_3s_example(self):
    # The TF 2.3 page passes `var_list=var`: OptimizerV2 takes a variable
    # for a list (tf_keras's new optimizers, bare or wrapped, do not).
    opt = mplso.keras.LossScaleOptimizer(legacy.SGD(0.25), "dynamic")
    var = tf.Variable(1.0)
    opt.minimize(lambda: var**2, var_list=var)
    self.assertEqual(float(var), 0.5)

  def test_get_gradients_and_get_updates_in_a_v1_graph(self):
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
      var = tf.Variable(2.0)
      x = tf.compat.v1.placeholder(tf.float32, [])
      opt = mplso.keras.LossScaleOptimizer(legacy.SGD(0.5),
                                           mplso.DynamicLossScale(2.0**10))
      loss = var * var * x
      (grad,) = opt.get_gradients(loss, [var])
      updates = opt.get_updates(loss, [var])
      session.run(tf.compat.v1.global_variables_initializer())
      self.assertEqual(session.run(grad, {x: 1.0}), 4.0)
      session.run(updates, {x: 1.0})
      self.assertEqual(session.run(var), 0.0)
      session.run(updates, {x: NAN})
      self.assertEqual(session.run(var), 0.0)
      self.assertEqual(session.run(opt.iterations), 2)
      self.assertEqual(session.run(opt.loss_scale()), 2.0**9)


class SaveAndLoadTest(tf.test.TestCase):

  def test_saved_model_with_tf_saved_model_save(self):
    # TF's checkpointer collects slots from every object with
    # `get_slot_names`; ours forwards them without saving them twice.
    inputs, y = keras_families.keras_data(16)
    model = keras_families.keras_model(tf_keras)
    model.compile(optimizer=mplso.keras.LossScaleOptimizer(legacy.Adam(0.01),
                                                           "dynamic"),
                  loss="mse")
    model.fit(inputs, y, batch_size=8, verbose=0)
    path = self.create_tempdir().full_path
    tf.saved_model.save(model, path)
    names = {name for name, _ in tf.train.list_variables(
        os.path.join(path, "variables", "variables"))}
    self.assertLen([n for n in names if ".OPTIMIZER_SLOT" in n],
                   2 * len(model.trainable_variables))  # Adam's m and v.
    self.assertIn("optimizer/loss_scale/current_loss_scale/.ATTRIBUTES/"
                  "VARIABLE_VALUE", names)


class ConfigTest(tf.test.TestCase):

  def test_reads_a_config_written_by_tf_2_3(self):
    # TF 2.3 wrote OptimizerV2 configs without a module or a legacy mark.
    sgd = {"class_name": "SGD", "config": {"name": "SGD",
                                           "learning_rate": 0.1}}
    tf_2_3 = {"optimizer": sgd, "loss_scale": {
        "class_name": "FixedLossScale", "config": {"loss_scale_value": 64.0}}}
    for read in (optimizer_v2.LossScaleOptimizer.from_config,
                 mplso.keras.LossScaleOptimizer.from_config):
      opt = read(tf_2_3)
      self.assertIsInstance(opt, optimizer_v2.LossScaleOptimizer)
      self.assertIsInstance(opt.inner_optimizer, legacy.SGD)
      self.assertAllClose(opt.learning_rate, 0.1)
      self.assertIsInstance(opt.loss_scale, mplso.FixedLossScale)
      self.assertEqual(float(opt.loss_scale()), 64.0)


class PassthroughTest(tf.test.TestCase):

  def test_hyperparameter_hooks_are_the_wrapped_optimizers(self):
    _, opt = _built_adam(beta_1=0.8)
    inner = opt.inner_optimizer
    self.assertAllClose(opt._get_hyper("beta_1"), 0.8)
    opt._set_hyper("beta_2", 0.9)
    self.assertAllClose(inner.beta_2, 0.9)
    self.assertAllClose(opt._get_hyper("beta_2"), 0.9)
    self.assertIn("beta_1", dir(opt))

  def test_weights_copy_to_a_bare_optimizer(self):
    # The wrapper's weights are the wrapped optimizer's alone, as TF 2.3's
    # and tf_keras's wrappers' are, so code that copies optimizer weights
    # between a wrapper and a bare optimizer keeps working.
    model, opt = _built_adam()
    values = opt.get_weights()
    values[0] = np.array(7, np.int64)
    opt.set_weights(values)
    bare = legacy.Adam()
    bare._create_all_weights(model.trainable_variables)
    bare.set_weights(opt.get_weights())
    self.assertEqual(int(bare.iterations), 7)
    self.assertEqual(float(opt.loss_scale()), 2.0**10)  # Untouched.

  def test_optimizer_v2_family_says_its_wrapped_optimizers_names_stay_there(
      self):
    # tf_keras's OptimizerV2 wrapper forwards none; its wording comes first.
    opt = mplso.keras.LossScaleOptimizer(tf_keras.optimizers.legacy.SGD())
    with self.assertRaisesRegex(
        AttributeError, "^'LossScaleOptimizer' object has no attribute "
        "'nesterov'. The wrapped SGD has it, as `inner_optimizer.nesterov`"):
      _ = opt.nesterov


# A tf_keras model trained by `fit` in TF1 graph mode (eager execution off,
# which holds for the whole process), with ours and with tf_keras's class.
_TF1_MODE_FIT = """
import json
import numpy as np
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
import tf_keras
import mplso.keras

x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
y[5] = np.inf  # One batch of eight overflows.
result = {}
for name, wrap in (("ours", mplso.keras.LossScaleOptimizer),
                   ("theirs", tf_keras.mixed_precision.LossScaleOptimizer)):
  tf_keras.utils.set_random_seed(0)
  model = tf_keras.Sequential([tf_keras.layers.Dense(1, input_shape=(4,))])
  opt = wrap(tf_keras.optimizers.legacy.SGD(0.05), initial_scale=8.,
             dynamic_growth_steps=2)
  model.compile(opt, "mse")
  model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
  session = tf.compat.v1.keras.backend.get_session()
  result[name] = {"weights": [w.tolist() for w in model.get_weights()],
                  "scale": float(session.run(opt.loss_scale))}
print(json.dumps(result))
"""


class Tf1ModeFitTest(tf.test.TestCase):

  def test_fit_in_graph_mode_as_tf_keras(self):
    # tf_keras's TF1-mode `fit` initializes only the variables it is told
    # of: the loss scale's must be among them.
    result = json.loads(testing.printed_in_fresh_interpreter(
        _TF1_MODE_FIT, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3"))
    self.assertEqual(result["ours"], result["theirs"])
    self.assertTrue(np.all(np.isfinite(result["ours"]["weights"][0])))


if __name__ == "__main__":
  absltest.main()
