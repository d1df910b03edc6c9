"""Tests for the TF1 MixedPrecisionLossScaleOptimizer."""

import inspect

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

import mplso
from mplso_test.helpers import testing

NAN, INF = testing.NAN, testing.INF
MPLSO = mplso.MixedPrecisionLossScaleOptimizer

LOSS_SCALES = [("fixed", lambda: 64), ("dynamic", lambda: "dynamic")]
POISONS = ["nan_dense", "inf_dense", "minus_inf_dense", "nan_sparse",
           "inf_sparse"]


def adam():
  return tf.compat.v1.train.AdamOptimizer(0.01)


class ComputeGradientsTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*testing.NAMED_MODES)
  def test_unscaled_gradients_match_plain_gradients(self, mode):
    with testing.ModeRunner(mode) as runner:
      model = testing.TinyModel()
      model.feed(runner, testing.TinyModel.batch(0))
      opt = MPLSO(adam(), mplso.DynamicLossScale(initial_loss_scale=2.**12))
      loss = model.loss() if runner.graph_mode else model.loss

      def grads():
        pairs = opt.compute_gradients(loss, var_list=model.trainable)
        self.assertEqual(model.trainable, [v for _, v in pairs])
        return [tf.convert_to_tensor(g) for g, _ in pairs]

      def plain():
        with tf.GradientTape() as tape:
          value = model.loss()
        return [tf.convert_to_tensor(g)
                for g in tape.gradient(value, model.trainable)]

      got = grads() if mode != testing.FUNCTION else tf.function(grads)()
      expected = plain() if not runner.graph_mode else tf.gradients(
          loss, model.trainable)
      expected = [tf.convert_to_tensor(g) for g in expected]
      runner.initialize()
      for e, g in zip(runner.read(expected), runner.read(got)):
        self.assertAllClose(e, g, rtol=1e-6)

  def test_sparse_gradient_stays_indexed_slices_and_none_stays_none(self):
    with tf.Graph().as_default():
      model = testing.TinyModel()
      unused = tf.Variable(1., name="unused")
      pairs = MPLSO(adam(), "dynamic").compute_gradients(
          model.loss(), var_list=model.trainable + [unused])
      grads = dict(zip(("w", "b", "emb", "unused"), (g for g, _ in pairs)))
      self.assertIsInstance(grads["emb"], tf.IndexedSlices)
      self.assertIsInstance(grads["w"], tf.Tensor)
      self.assertIsNone(grads["unused"])

  def test_scaling_rescues_float16_gradients_from_underflow(self):
    # d(loss)/d(var) is 1e-8, below float16's smallest subnormal (6e-8): the
    # float16 backward pass flushes it to zero unless the loss is scaled.
    var = tf.Variable(1.)

    def loss():
      return tf.cast(var, tf.float16) * tf.constant(1e-4, tf.float16) * (
          tf.constant(1e-4, tf.float16))

    sgd = tf.compat.v1.train.GradientDescentOptimizer(1.)
    ((bare, _),) = sgd.compute_gradients(loss, var_list=[var])
    ((scaled, _),) = MPLSO(sgd, 2**15).compute_gradients(loss, var_list=[var])
    self.assertEqual(0., float(bare))
    self.assertAllClose(1e-8, float(scaled), rtol=1e-2)

  @parameterized.named_parameters(("tensor", False), ("callable", True))
  def test_graph_reads_the_loss_scale_once(self, callable_loss):
    # TF's own class reads the scale once for the loss and the gradients.
    with tf.Graph().as_default() as graph:
      var = tf.compat.v1.get_variable("v", initializer=2.)
      loss_scale = mplso.DynamicLossScale()
      opt = MPLSO(adam(), loss_scale)
      built_before = len(graph.get_operations())
      opt.compute_gradients((lambda: var * var) if callable_loss else
                            var * var, var_list=[var])
      handles = {v.handle.op for v in loss_scale.variables}
      reads = [op for op in graph.get_operations()[built_before:]
               if op.type == "ReadVariableOp" and op.inputs[0].op in handles]
      self.assertLen(reads, 1)

  def test_eager_tensor_loss_is_refused_as_by_tf(self):
    var = tf.Variable(1.)
    with self.assertRaisesRegex(RuntimeError, "should be a function"):
      MPLSO(adam(), 8).compute_gradients(var * 2., var_list=[var])


class ApplyGradientsTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*[
      (f"{mode}_{scale}_{poison}", mode, make_scale, poison)
      for mode in testing.MODES for scale, make_scale in LOSS_SCALES
      for poison in POISONS])
  def test_nonfinite_step_changes_nothing_but_the_scale(self, mode, make_scale,
                                                        poison):
    with testing.ModeRunner(mode) as runner:
      model = testing.TinyModel()
      opt = MPLSO(adam(), make_scale())
      global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
      loss = model.loss() if runner.graph_mode else model.loss
      step = runner.step(lambda: opt.minimize(
          loss, var_list=model.trainable, global_step=global_step))
      runner.initialize()
      model.feed(runner, testing.TinyModel.batch(0))
      step()
      slots = [opt.get_slot(v, s) for v in model.trainable for s in ("m", "v")]
      before = runner.read([model.trainable, slots, global_step,
                            opt.variables()])
      scale_before = runner.read(opt.loss_scale())
      model.feed(runner, testing.TinyModel.batch(1, poison))
      step()
      after = runner.read([model.trainable, slots, global_step,
                           opt.variables()])
      self.assertEqual(1, after[2])  # global_step did not move.
      for b, a in zip(tf.nest.flatten(before[:2]), tf.nest.flatten(after[:2])):
        self.assertAllEqual(b, a)
      expected_scale = scale_before / 2 if make_scale() == "dynamic" else 64.
      self.assertEqual(expected_scale, runner.read(opt.loss_scale()))
      # And the next finite step applies again.
      model.feed(runner, testing.TinyModel.batch(2))
      step()
      self.assertEqual(2, runner.read(global_step))

  def test_graph_apply_is_one_op_gated_by_cond(self):
    for loss_scale in (8, "dynamic"):
      with tf.Graph().as_default() as graph:
        model = testing.TinyModel()
        opt = MPLSO(adam(), loss_scale)
        train_op = opt.apply_gradients(
            opt.compute_gradients(model.loss(), var_list=model.trainable))
        self.assertIsInstance(train_op, tf.Operation)
        op_types = {op.type for op in graph.get_operations()}
        self.assertTrue(op_types & {"If", "StatelessIf", "Switch"}, loss_scale)

  def test_none_gradients_are_passed_through(self):
    var, unused = tf.Variable(2.), tf.Variable(5.)
    opt = MPLSO(tf.compat.v1.train.GradientDescentOptimizer(0.5), "dynamic")
    opt.apply_gradients([(tf.constant(2.), var), (None, unused)])
    self.assertEqual((1., 5.), (float(var), float(unused)))

  def test_all_none_gradients_raise_like_tf(self):
    var = tf.Variable(2.)
    opt = MPLSO(tf.compat.v1.train.GradientDescentOptimizer(0.5), "dynamic")
    with self.assertRaisesRegex(ValueError, "No gradients provided"):
      opt.apply_gradients([(None, var)])

  def test_cross_replica_context_is_refused(self):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
      var = tf.Variable(1.)
      opt = MPLSO(tf.compat.v1.train.GradientDescentOptimizer(0.5), "dynamic")
      with self.assertRaisesRegex(ValueError, "replica context"):
        opt.apply_gradients([(tf.constant(1.), var)])
    self.assertEqual(1., float(var))

  def test_graph_minimize_with_global_step_and_name(self):
    with testing.ModeRunner(testing.GRAPH) as runner:
      model = testing.TinyModel()
      opt = MPLSO(tf.compat.v1.train.MomentumOptimizer(0.1, 0.9), "dynamic")
      global_step = tf.compat.v1.train.get_or_create_global_step()
      train_op = opt.minimize(model.loss(), global_step=global_step,
                              name="train")
      self.assertEqual("train", train_op.name)
      runner.initialize()
      model.feed(runner, testing.TinyModel.batch(0))
      w_before = runner.read(model.w)
      for _ in range(3):
        runner.session.run(train_op)
      self.assertEqual(3, runner.read(global_step))
      self.assertNotAllClose(w_before, runner.read(model.w))


class PassthroughAndTrackingTest(tf.test.TestCase):

  def make_trained(self):
    var = tf.Variable([1., 2.])
    opt = MPLSO(adam(), mplso.DynamicLossScale(initial_loss_scale=16.,
                                               increment_period=4))
    opt.minimize(lambda: tf.reduce_sum(var**2), var_list=[var])
    return var, opt

  def test_slots_pass_through(self):
    var, opt = self.make_trained()
    self.assertEqual(["m", "v"], sorted(opt.get_slot_names()))
    m = opt.get_slot(var, "m")
    self.assertIsInstance(m, tf.Variable)
    self.assertAllClose([0.2, 0.4], m)  # (1 - beta1) * grad, grad = [2, 4].
    self.assertIsNone(opt.get_slot(var, "nonexistent"))

  def test_variables_are_wrapped_plus_loss_scale(self):
    _, opt = self.make_trained()
    wrapped = opt._optimizer.variables()  # pylint: disable=protected-access
    self.assertLen(wrapped, 4)  # beta1_power, beta2_power, m, v.
    self.assertEqual(wrapped + list(opt.loss_scale.variables), opt.variables())

  def test_names_and_constants(self):
    opt = MPLSO(tf.compat.v1.train.AdamOptimizer(0.1, name="MyAdam"), 8)
    self.assertEqual("MyAdam", opt.get_name())
    self.assertEqual((0, 1, 2), (opt.GATE_NONE, opt.GATE_OP, opt.GATE_GRAPH))
    self.assertIsInstance(opt.loss_scale, mplso.FixedLossScale)
    self.assertIsInstance(opt, tf.compat.v1.train.Optimizer)

  def test_checkpoint_saves_slots_once_and_restores_everything(self):
    var, opt = self.make_trained()
    opt.apply_gradients([(tf.constant([NAN, 1.]), var)])  # Scale 16 -> 8.
    path = tf.train.Checkpoint(optimizer=opt, var=var).save(
        self.create_tempdir().full_path + "/ckpt")
    names = [name for name, _ in tf.train.list_variables(path)]
    self.assertIn("optimizer/loss_scale/current_loss_scale/.ATTRIBUTES/"
                  "VARIABLE_VALUE", names)
    self.assertIn("optimizer/base_optimizer/beta1_power/.ATTRIBUTES/"
                  "VARIABLE_VALUE", names)
    self.assertIn("var/.OPTIMIZER_SLOT/optimizer/base_optimizer/m/"
                  ".ATTRIBUTES/VARIABLE_VALUE", names)

    var2, opt2 = self.make_trained()
    tf.train.Checkpoint(optimizer=opt2, var=var2).restore(path).assert_consumed()
    self.assertAllEqual(var, var2)
    self.assertAllEqual(opt.get_slot(var, "m"), opt2.get_slot(var2, "m"))
    self.assertAllEqual(opt.loss_scale.variables, opt2.loss_scale.variables)
    self.assertIn("get_slot_names", type(opt).__dict__)  # Still a method.

  def test_saved_model_saves_and_its_variables_restore(self):
    # tf.saved_model.load cannot revive any TF1 optimizer that has slots (a
    # bare tf.compat.v1.train.AdamOptimizer fails the same way: "'_UserObject'
    # object has no attribute 'add_slot'"), so the SavedModel's variables are
    # restored into fresh Python objects instead. Saving is where forwarded
    # slots can break ("A slot variable was re-used").
    var, opt = self.make_trained()
    module = tf.Module()
    module.var, module.opt = var, opt
    path = self.create_tempdir().full_path
    tf.saved_model.save(module, path)

    var2, opt2 = self.make_trained()
    # Diverge first: a skipped step (scale) and an applied one (var, slots).
    opt2.apply_gradients([(tf.constant([NAN, 1.]), var2)])
    opt2.minimize(lambda: tf.reduce_sum(var2**2), var_list=[var2])
    self.assertNotAllEqual(var, var2)
    fresh = tf.Module()
    fresh.var, fresh.opt = var2, opt2
    tf.train.Checkpoint(fresh).restore(
        path + "/variables/variables").expect_partial()
    self.assertAllEqual(var, var2)
    self.assertAllEqual(opt.get_slot(var, "v"), opt2.get_slot(var2, "v"))
    self.assertAllEqual(opt.loss_scale.variables, opt2.loss_scale.variables)


class BadInputTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ("none", None, "opt=None"),
      ("string", "adam", "opt='adam'"),
      ("keras_optimizer", "keras_sgd", "mplso.keras.LossScaleOptimizer"),
      ("wrapped_twice", "wrapped",
       "already a loss-scale optimizer (MixedPrecisionLossScaleOptimizer)"),
      # TF's own wrapper would stack its scale on ours.
      ("tf_wrapper", "tf_wrapped", "would scale the loss twice and stack"),
  )
  def test_bad_opt(self, opt, shown):
    if opt == "keras_sgd":
      opt = tf.keras.optimizers.SGD()
    elif opt == "wrapped":
      opt = MPLSO(adam(), 8)
    elif opt == "tf_wrapped":
      opt = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
          adam(), 8)
    with self.assertRaises(ValueError) as raised:
      MPLSO(opt, "dynamic")
    self.assertIn(shown, str(raised.exception))

  def test_errors_start_with_tf_wording(self):
    # Legacy tests match TF's messages with assertRaisesRegex.
    with self.assertRaisesRegex(
        ValueError,
        r'^"opt" must be an instance of Optimizer, but got: <class \'int\'>'):
      MPLSO(3, "dynamic")
    with self.assertRaisesRegex(ValueError, r"^loss_scale cannot be None"):
      MPLSO(adam(), None)
    with self.assertRaisesRegex(
        ValueError, r"^Could not interpret loss scale identifier: static"):
      MPLSO(adam(), "static")
    with self.assertRaisesRegex(RuntimeError,
                                "^This function should never be called"):
      MPLSO(adam(), 8)._apply_dense(None, None)  # pylint: disable=protected-access

  def test_distributed_apply_signature_is_tfs(self):
    # `merge_call` passes the strategy positionally; the name is TF's.
    self.assertEqual(
        ["self", "distribution", "grads_and_vars", "global_step", "name"],
        list(inspect.signature(MPLSO._distributed_apply).parameters))  # pylint: disable=protected-access

  @parameterized.named_parameters(
      ("none", None, "cannot be None"),
      ("zero", 0, "loss_scale_value=0"),
      ("negative", -128., "loss_scale_value=-128.0"),
      ("non_numeric", [1], "[1]"),
      ("unknown_string", "dynamc", "'dynamc'"),
  )
  def test_bad_loss_scale(self, loss_scale, shown):
    with self.assertRaises(ValueError) as raised:
      MPLSO(adam(), loss_scale)
    self.assertIn(shown, str(raised.exception))


if __name__ == "__main__":
  absltest.main()
