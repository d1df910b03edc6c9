"""What the tf_keras new-optimizer family alone does.

family_contract_test.py has what every family does. Here: tf_keras's
`apply_gradients` signature, `.keras` files of tf_keras's class or of the
bare optimizer, slots found by name, `name` and configs of the new
optimizers, and `TF_USE_LEGACY_KERAS`.
"""

import json
import os
import subprocess
import sys
import textwrap

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf
import tf_keras

import mplso
from mplso._src.keras import tf_keras_optimizer
import mplso.keras
from mplso_test.helpers import keras_families
from mplso_test.helpers import testing

LSO = tf_keras_optimizer.LossScaleOptimizer
# tf_keras's own wrapper: gives a LossScaleOptimizerV3 for a new optimizer.
TfKerasLSO = tf_keras.mixed_precision.LossScaleOptimizer

NAN = testing.NAN


def _adam():
  return tf_keras.optimizers.Adam(0.01)


def _trained(opt, steps):
  """A model trained `steps` finite steps by `opt` with `fit`."""
  model = keras_families.keras_model(tf_keras)
  step = keras_families.keras_step(keras_families.FIT, model, opt)
  for i in range(steps):
    step(keras_families.keras_batch(i))
  return model


class ApplyGradientsTest(tf.test.TestCase, parameterized.TestCase):
  """tf_keras's signature: `skip_gradients_aggregation` third."""

  @parameterized.named_parameters(
      ("experimental_aggregate_gradients",
       {"experimental_aggregate_gradients": False}),
      ("skip_gradients_aggregation", {"skip_gradients_aggregation": True}),
      ("name", {"name": "step"}))
  def test_apply_gradients_arguments(self, kwargs):
    var = tf.Variable(1.)
    opt = LSO(tf_keras.optimizers.SGD(1.), 4)
    result = opt.apply_gradients([(tf.constant(0.5), var)], **kwargs)
    self.assertAllClose(var, 0.5)
    self.assertIs(result, opt.iterations)
    opt.apply_gradients([(tf.constant(NAN), var)], **kwargs)
    self.assertAllClose(var, 0.5)
    self.assertEqual(int(opt.iterations), 2)

  @parameterized.named_parameters(("no_strategy", None),
                                  ("mirrored4", testing.MIRRORED_4))
  def test_an_override_written_for_tf_2_3_trains_as_the_bare_optimizer(
      self, strategy):
    # AdamWeightDecay of public pretraining code: TF 2.3's keyword, which
    # tf_keras's optimizers still take. Under a strategy the gradients are
    # summed once, by the wrapper.

    class AdamWeightDecay(tf_keras.optimizers.Adam):

      def apply_gradients(self, grads_and_vars, name=None,
                          experimental_aggregate_gradients=True):
        return super().apply_gradients(
            grads_and_vars, name=name,
            experimental_aggregate_gradients=experimental_aggregate_gradients)

    scope = (testing.STRATEGIES[strategy]() if strategy else
             tf.distribute.get_strategy())
    with scope.scope():
      ours, theirs = tf.Variable([1., 2.]), tf.Variable([1., 2.])
      opt = LSO(AdamWeightDecay(0.1), dynamic=True)
      bare = AdamWeightDecay(0.1)

    @tf.function
    def step(grad):

      def replica_step():
        opt.apply_gradients(
            [(opt.get_unscaled_gradients([grad * opt.loss_scale])[0], ours)])
        bare.apply_gradients([(grad, theirs)])

      scope.run(replica_step)

    for grad in ([1., -2.], [0.5, 0.25]):
      step(tf.constant(grad))
    self.assertAllClose(theirs, ours)
    self.assertNotAllClose([1., 2.], ours)

  def test_no_name_for_a_wrapped_optimizer_without_one(self):
    # tf_keras's new optimizers: `name` is passed on only when given.

    class NoNameSGD(tf_keras.optimizers.SGD):

      def apply_gradients(self, grads_and_vars,
                          skip_gradients_aggregation=False):
        return super().apply_gradients(
            grads_and_vars,
            skip_gradients_aggregation=skip_gradients_aggregation)

    var = tf.Variable(1.)
    opt = mplso.keras.LossScaleOptimizer(NoNameSGD(0.5), "dynamic")
    opt.apply_gradients([(tf.constant(1.), var)])
    self.assertEqual(0.5, float(var))


class SaveLoadTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ("bare", _adam),
      ("tf_keras", lambda: TfKerasLSO(_adam(), initial_scale=16.,
                                      dynamic_growth_steps=2)))
  def test_keras_file_without_loss_scale_restores_the_wrapped_optimizer(
      self, make):
    source = make()
    model = _trained(source, steps=3)
    path = os.path.join(self.create_tempdir().full_path, "model.keras")
    model.save(path)
    target = keras_families.keras_model(tf_keras, seed=1)
    ours = LSO(_adam(), mplso.DynamicLossScale(16., increment_period=2))
    target.compile(optimizer=ours, loss="mse")
    ours.build(target.trainable_variables)
    target.load_weights(path)
    source_inner = getattr(source, "inner_optimizer", source)
    self.assertEqual(len(ours.inner_optimizer.variables),
                     len(source_inner.variables))
    for got, want in zip(ours.inner_optimizer.variables,
                         source_inner.variables):
      self.assertAllEqual(got, want)
    self.assertEqual(int(ours.iterations), 3)
    # Not in the file.
    self.assertEqual((float(ours.loss_scale()), int(ours.dynamic_counter)),
                     (16., 0))


class CheckpointTest(tf.test.TestCase):

  def test_saved_model_of_a_module_holding_the_optimizer(self):
    # The trap: forwarding get_slot_names while the wrapped optimizer's
    # state is a dependency too fails with "A slot variable was re-used as
    # a dependency" (TF's checkpointer looks for get_slot_names in dir()).
    opt = LSO(_adam(), mplso.DynamicLossScale(64.))
    model = _trained(opt, steps=2)
    self.assertNotIn("get_slot_names", dir(opt))
    self.assertEqual(opt.get_slot_names(), ["m", "v"])
    module = tf.Module()
    module.optimizer = opt
    module.variables_ = model.trainable_variables
    path = self.create_tempdir().full_path
    tf.saved_model.save(module, path)
    loaded = tf.saved_model.load(path)
    self.assertEqual(int(loaded.optimizer._iterations), 2)  # pylint: disable=protected-access
    self.assertEqual(
        float(loaded.optimizer.loss_scale.current_loss_scale), 64.)


class PassthroughTest(tf.test.TestCase):

  def test_name_is_the_wrapped_optimizers(self):
    inner = _adam()
    self.assertEqual(LSO(inner, "dynamic").name, inner.name)

  def test_variables_is_a_list_and_a_method(self):
    # tf_keras's new optimizers have a list, OptimizerV2 a method: code
    # written for either reads the wrapper's.
    opt = LSO(_adam(), "dynamic")
    _trained(opt, steps=1)
    self.assertEqual(list(opt.variables()), list(opt.variables))

  def test_slots_found_when_the_first_step_runs_in_a_name_scope(self):
    var = tf.Variable([1.], name="w")
    opt = LSO(_adam(), "dynamic")
    with tf.name_scope("outer"):
      opt.apply_gradients([(tf.constant([1.]), var)])
    self.assertEqual(opt.get_slot_names(), ["m", "v"])
    self.assertEqual(opt.get_slot(var, "m").name, "m/w:0")


class ConfigTest(tf.test.TestCase):

  def test_get_config_writes_the_new_optimizers_config(self):
    opt = LSO(tf_keras.optimizers.Adam(0.05, beta_1=0.8, amsgrad=True),
              "dynamic")
    config = opt.get_config()
    self.assertIs(config["optimizer"]["config"]["is_legacy_optimizer"],
                  False)
    restored = LSO.from_config(config)
    self.assertEqual(restored.get_config(), config)
    self.assertEqual(restored.beta_1, 0.8)
    self.assertTrue(restored.amsgrad)


def _run_python(code, **env):
  return subprocess.run(
      [sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
      text=True, timeout=120, check=False,
      env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env})


class SubprocessTest(tf.test.TestCase):
  """Tests that need a fresh process: an environment variable, or devices."""

  def _json(self, result):
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])

  def test_mirrored_replicas_skip_together(self):
    # Two CPU replicas; only the first one's gradient is NaN on the second
    # step. Gradients are summed across replicas before the finite check,
    # so both replicas skip, and the scale halves once.
    out = self._json(_run_python("""
        import json
        import tensorflow as tf
        import tf_keras
        import mplso
        from mplso._src.keras import tf_keras_optimizer

        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
          var = tf.Variable([1., 1.])
          opt = tf_keras_optimizer.LossScaleOptimizer(
              tf_keras.optimizers.SGD(1.), mplso.DynamicLossScale(4.))

        @tf.function
        def step(poison_first):
          def replica_fn():
            replica = tf.distribute.get_replica_context()
            first = tf.equal(replica.replica_id_in_sync_group, 0)
            grad = tf.constant([.25, .5]) * tf.cast(
                replica.replica_id_in_sync_group + 1, tf.float32)
            grad = tf.where(tf.logical_and(poison_first, first),
                            float("nan"), grad)
            opt.apply_gradients([(grad, var)])
          strategy.run(replica_fn)

        out = {}
        for poison in (False, True):
          step(tf.constant(poison))
          out[str(poison)] = {
              "var": [v.numpy().tolist()
                      for v in strategy.experimental_local_results(var)],
              "scale": float(opt.loss_scale()),
              "iterations": int(opt.iterations.numpy())}
        print(json.dumps(out))
        """))
    # Summed: 1 - (0.25 + 0.5), 1 - (0.5 + 1.0), on both replicas.
    self.assertEqual(out["False"], {"var": [[0.25, -0.5]] * 2, "scale": 4.,
                                    "iterations": 1})
    self.assertEqual(out["True"], {"var": [[0.25, -0.5]] * 2, "scale": 2.,
                                   "iterations": 2})

  def test_tf_keras_under_tf_use_legacy_keras(self):
    out = self._json(_run_python("""
        import json
        import numpy as np
        import tensorflow as tf
        import mplso.keras
        from mplso._src.keras import tf_keras_optimizer

        opt = mplso.keras.LossScaleOptimizer(tf.keras.optimizers.Adam(0.05),
                                             "dynamic")
        model = tf.keras.Sequential(
            [tf.keras.layers.Dense(1, input_shape=(2,))])
        model.compile(optimizer=opt, loss="mse")
        x = np.random.default_rng(0).normal(size=(32, 2)).astype("float32")
        history = model.fit(x, x.sum(1, keepdims=True), epochs=3,
                            verbose=0)
        again = mplso.keras.LossScaleOptimizer.from_config(opt.get_config())
        print(json.dumps({
            "ours": type(opt) is tf_keras_optimizer.LossScaleOptimizer,
            "kept": model.optimizer is opt,
            "from_config": type(again).__name__ + "/" + type(again).__module__,
            "losses": history.history["loss"],
            "iterations": int(opt.iterations)}))
        """, TF_USE_LEGACY_KERAS="1"))
    self.assertTrue(out["ours"])
    self.assertTrue(out["kept"])
    self.assertEqual(out["from_config"],
                     "LossScaleOptimizer/" + tf_keras_optimizer.__name__)
    self.assertLess(out["losses"][-1], out["losses"][0])
    self.assertEqual(out["iterations"], 3)


if __name__ == "__main__":
  absltest.main()
