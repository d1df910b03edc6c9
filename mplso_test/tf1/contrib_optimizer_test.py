"""Tests for the TF 1.x contrib LossScaleOptimizer (after TF 1.x's own tests)."""

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

from mplso import contrib
from mplso_test.helpers import testing

NAN, INF = testing.NAN, testing.INF


class AddOnFinite(contrib.LossScaleManager):
  """A custom manager from TF 1.x's tests: +1 on a finite step, -1 otherwise."""

  def __init__(self):
    super().__init__()
    self.scale = self._add_weight("scale", 8., tf.float32)

  def get_loss_scale(self):
    return self.scale

  def update_loss_scale(self, finite_grads):
    return self.scale.assign_add(tf.where(finite_grads, 1., -1.),
                                 read_value=False)


class NoSuperInit(contrib.LossScaleManager):
  """TF 1.x's tests subclass without `super().__init__()` (TF's had none)."""

  def __init__(self, loss_scale):  # pylint: disable=super-init-not-called
    self._scale = tf.Variable(loss_scale, dtype=tf.float32, trainable=False)

  def get_loss_scale(self):
    return self._scale

  def update_loss_scale(self, finite_grads):
    return tf.cond(finite_grads, lambda: self._scale.assign_add(1.),
                   lambda: self._scale.assign_sub(1.))


def sgd(lr=1.):
  return tf.compat.v1.train.GradientDescentOptimizer(lr)


class ContribOptimizerTest(tf.test.TestCase, parameterized.TestCase):

  def test_fixed_manager_rescues_float16_gradients(self):
    # TF 1.x's test: d(loss)/dx = 1e-4 in float16 arithmetic of 1e-8 parts.
    x = tf.Variable(1.)

    def loss():
      return (tf.cast(x, tf.float16) * tf.constant(1e4, tf.float16) *
              tf.constant(1e-4, tf.float16) * tf.constant(1e-4, tf.float16))

    sgd().minimize(loss, var_list=[x])
    self.assertEqual(1., float(x))  # Underflow: the bare optimizer is stuck.
    opt = contrib.LossScaleOptimizer(sgd(), contrib.FixedLossScaleManager(1e4))
    ((grad, var),) = opt.compute_gradients(loss, var_list=[x])
    self.assertIs(x, var)
    self.assertAllClose(1e-4, float(grad), rtol=1e-2)
    opt.minimize(loss, var_list=[x])
    self.assertAllClose(1. - 1e-4, float(x), atol=1e-6)

  @parameterized.named_parameters(*testing.NAMED_MODES)
  def test_nonfinite_gradients_are_not_applied(self, mode):
    # TF 1.x's test: gradients [nan, inf, 0.1] leave x at [1, 1, 0.9]; here
    # each gradient is applied in its own step.
    with testing.ModeRunner(mode) as runner:
      x = tf.Variable([1., 1., 1.])
      grad = tf.Variable(0., trainable=False)
      global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
      opt = contrib.LossScaleOptimizer(sgd(), contrib.FixedLossScaleManager(1e4))
      index = tf.Variable(0, trainable=False)
      step = runner.step(lambda: opt.apply_gradients(
          [(tf.one_hot(index, 3) * grad, x)], global_step=global_step))
      runner.initialize()
      for i, g in enumerate([NAN, INF, .1]):
        runner.assign(index, i)
        runner.assign(grad, g)
        step()
      self.assertAllClose([1., 1., .9], runner.read(x))
      self.assertEqual(1, runner.read(global_step))

  @parameterized.named_parameters(*testing.NAMED_MODES)
  def test_custom_manager_is_updated(self, mode):
    with testing.ModeRunner(mode) as runner:
      x = tf.Variable(1.)
      grad = tf.Variable(0., trainable=False)
      manager = AddOnFinite()
      opt = contrib.LossScaleOptimizer(sgd(), manager)
      step = runner.step(lambda: opt.apply_gradients(
          [(tf.convert_to_tensor(grad), x)]))
      runner.initialize()
      scales, xs = [], []
      for g in [NAN, INF, .1]:
        runner.assign(grad, g)
        step()
        scales.append(float(runner.read(manager.scale)))
        xs.append(float(runner.read(x)))
      self.assertEqual([7., 6., 7.], scales)
      self.assertAllClose([1., 1., .9], xs)

  @parameterized.named_parameters(*testing.NAMED_MODES)
  def test_exponential_manager_trains_and_skips(self, mode):
    with testing.ModeRunner(mode) as runner:
      model = testing.TinyModel()
      manager = contrib.ExponentialUpdateLossScaleManager(
          256, incr_every_n_steps=2, decr_every_n_nan_or_inf=1, decr_ratio=.5)
      opt = contrib.LossScaleOptimizer(tf.compat.v1.train.AdamOptimizer(.01),
                                       manager)
      global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
      loss = model.loss() if runner.graph_mode else model.loss
      step = runner.step(lambda: opt.minimize(
          loss, var_list=model.trainable, global_step=global_step))
      runner.initialize()
      for i, poison in enumerate([None, None, "nan_sparse", None]):
        model.feed(runner, testing.TinyModel.batch(i, poison))
        before = runner.read(model.trainable)
        step()
        after = runner.read(model.trainable)
        changed = any((b != a).any() for b, a in zip(before, after))
        self.assertEqual(poison is None, changed, f"step {i}")
      self.assertEqual(3, runner.read(global_step))
      self.assertEqual([256., 1, 0], [float(v) for v in runner.read(
          list(manager.variables))])

  def test_subclass_reads_tf1_attribute_names(self):
    # Subclasses written for TF 1.x's class read `_opt` and
    # `_loss_scale_manager`; checkpoints keep their two children.
    class Subclass(contrib.LossScaleOptimizer):

      def compute_gradients(self, loss, var_list=None, **kwargs):
        scale = self._loss_scale_manager.get_loss_scale()
        grads = self._opt.compute_gradients(lambda: loss() * scale, var_list)
        return [(g / scale, v) for g, v in grads]

    var = tf.Variable(3.)
    manager = contrib.FixedLossScaleManager(8)
    opt = Subclass(sgd(), manager)
    self.assertIs(manager, opt._loss_scale_manager)
    ((grad, _),) = opt.compute_gradients(lambda: var * 2., [var])
    self.assertEqual(2., float(grad))
    self.assertEqual(["base_optimizer", "loss_scale"],
                     sorted(opt._trackable_children()))

  def test_slots_and_checkpoint(self):
    var = tf.Variable([1., 2.])
    manager = contrib.ExponentialUpdateLossScaleManager(16, 1)
    opt = contrib.LossScaleOptimizer(tf.compat.v1.train.AdamOptimizer(.1),
                                     manager)
    opt.minimize(lambda: tf.reduce_sum(var**2), var_list=[var])
    self.assertEqual(["m", "v"], sorted(opt.get_slot_names()))
    path = tf.train.Checkpoint(opt=opt, var=var).save(
        self.create_tempdir().full_path + "/ckpt")
    manager2 = contrib.ExponentialUpdateLossScaleManager(16, 1)
    opt2 = contrib.LossScaleOptimizer(tf.compat.v1.train.AdamOptimizer(.1),
                                      manager2)
    tf.train.Checkpoint(opt=opt2, var=tf.Variable([0., 0.])).restore(path)
    self.assertEqual(32., float(manager2.get_loss_scale()))

  @parameterized.named_parameters(
      ("none", None, "loss_scale_manager=None"),
      ("number", 128, "loss_scale_manager=128"),
      ("loss_scale", "dynamic", "loss_scale_manager='dynamic'"),
  )
  def test_bad_manager(self, manager, shown):
    with self.assertRaises(ValueError) as raised:
      contrib.LossScaleOptimizer(sgd(), manager)
    self.assertIn(shown, str(raised.exception))

  def test_bad_opt(self):
    with self.assertRaisesRegex(ValueError, "opt='sgd'"):
      contrib.LossScaleOptimizer("sgd", contrib.FixedLossScaleManager(8))

  def test_refuses_tfs_own_wrapper(self):
    # Its scale would stack on the manager's.
    tf_wrapper = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
        sgd(), "dynamic")
    with self.assertRaisesRegex(ValueError,
                                "stack two loss scales.*Pass the optimizer"):
      contrib.LossScaleOptimizer(tf_wrapper, contrib.FixedLossScaleManager(8))

  @parameterized.named_parameters(*testing.NAMED_MODES)
  def test_manager_without_super_init(self, mode):
    with testing.ModeRunner(mode) as runner:
      var = tf.Variable(1.)
      grad = tf.Variable(NAN, trainable=False)
      manager = NoSuperInit(8.)
      opt = contrib.LossScaleOptimizer(sgd(), manager)
      self.assertEqual((), manager.variables)  # None were registered.
      step = runner.step(lambda: opt.apply_gradients(
          [(tf.convert_to_tensor(grad), var)]))
      runner.initialize()
      got = []
      for value in (NAN, INF, .1):
        runner.assign(grad, value)
        step()
        got.append(runner.read([var, manager.get_loss_scale()]))
      self.assertAllClose([[1., 7.], [1., 6.], [.9, 7.]], got)


if __name__ == "__main__":
  absltest.main()
