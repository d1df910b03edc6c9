"""Adding loss scaling to a run whose checkpoints predate it (docs/migration.md).

Each test writes a checkpoint without loss scaling, restores it into the
loss-scaled model with the recipe of docs/migration.md, checks that every
saved value came back (the wrapped optimizer's state included) while the loss
scale starts at its initial value, and trains on.
"""

import os

from absl.testing import absltest
from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf

import mplso
import mplso.keras

_X = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)


def _graph_model(loss_scaling):
  """A float16 regression in the current graph; returns its parts."""
  w = tf.compat.v1.get_variable("w", initializer=tf.ones([4, 1]))
  logits = tf.matmul(tf.cast(_X, tf.float16), tf.cast(w, tf.float16))
  loss = tf.reduce_mean(tf.square(tf.cast(logits, tf.float32) - 1.))
  global_step = tf.compat.v1.train.get_or_create_global_step()
  inner = tf.compat.v1.train.AdamOptimizer(0.1)
  opt = (mplso.MixedPrecisionLossScaleOptimizer(inner, "dynamic")
         if loss_scaling else inner)
  train_op = opt.minimize(loss, global_step=global_step)
  return opt, inner, train_op, global_step


class SaverTest(tf.test.TestCase):
  """TF1 graph mode, `tf.compat.v1.train.Saver`."""

  def _write_old_checkpoint(self):
    with tf.Graph().as_default():
      _, _, train_op, global_step = _graph_model(loss_scaling=False)
      saver = tf.compat.v1.train.Saver()
      with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for _ in range(3):
          sess.run(train_op)
        path = saver.save(sess, os.path.join(self.get_temp_dir(), "old"),
                          global_step=global_step)
        values = {v.op.name: sess.run(v)
                  for v in tf.compat.v1.global_variables()}
    return path, values

  def test_plain_saver_restore_fails_without_the_recipe(self):
    path, _ = self._write_old_checkpoint()
    with tf.Graph().as_default():
      _graph_model(loss_scaling=True)
      with tf.compat.v1.Session() as sess:
        with self.assertRaisesRegex(tf.errors.NotFoundError,
                                    "current_loss_scale|good_steps"):
          tf.compat.v1.train.Saver().restore(sess, path)

  def test_restore_all_but_the_loss_scale_then_train_on(self):
    path, old = self._write_old_checkpoint()
    with tf.Graph().as_default():
      opt, inner, train_op, global_step = _graph_model(loss_scaling=True)
      # The recipe: the loss scale's variables are the wrapper's, not the
      # wrapped optimizer's; restore everything else.
      loss_scale_names = ({v.op.name for v in opt.variables()} -
                          {v.op.name for v in inner.variables()})
      restorer = tf.compat.v1.train.Saver(var_list=[
          v for v in tf.compat.v1.global_variables()
          if v.op.name not in loss_scale_names])
      saver = tf.compat.v1.train.Saver()
      self.assertEqual({"current_loss_scale", "good_steps"}, loss_scale_names)
      with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        restorer.restore(sess, path)
        for v in tf.compat.v1.global_variables():
          if v.op.name in old:
            self.assertAllEqual(old[v.op.name], sess.run(v), v.op.name)
        self.assertEqual(2.**15, sess.run(opt.loss_scale()))
        sess.run(train_op)
        self.assertEqual(4, sess.run(global_step))  # Trained on: applied.
        self.assertNotAllEqual(old["w"], sess.run("w:0"))
        # From now on every checkpoint holds the loss scale too.
        new_path = saver.save(sess, os.path.join(self.get_temp_dir(), "new"),
                              global_step=global_step)
    saved = {name for name, _ in tf.train.list_variables(new_path)}
    self.assertContainsSubset({"current_loss_scale", "good_steps"}, saved)


def _keras_model():
  return keras.Sequential([keras.Input((4,)), keras.layers.Dense(
      1, kernel_initializer="ones")])


def _eager_step(model, opt):
  """One custom-loop step; TF 2.3's protocol when `opt` scales the loss."""
  scaling = isinstance(opt, mplso.keras.LossScaleOptimizer)
  with tf.GradientTape() as tape:
    loss = tf.reduce_mean(tf.square(model(_X) - 1.))
    if scaling:
      loss = opt.get_scaled_loss(loss)
  grads = tape.gradient(loss, model.trainable_variables)
  if scaling:
    grads = opt.get_unscaled_gradients(grads)
  opt.apply_gradients(zip(grads, model.trainable_variables))


def _matmul_loss(w):
  def loss():
    return tf.reduce_mean(tf.square(tf.matmul(_X, w) - 1.))
  return loss


class CheckpointTest(tf.test.TestCase, parameterized.TestCase):
  """Eager, `tf.train.Checkpoint`."""

  def _write_old_checkpoint(self):
    model, adam = _keras_model(), keras.optimizers.Adam(0.1)
    for _ in range(3):
      _eager_step(model, adam)
    path = tf.train.Checkpoint(model=model, optimizer=adam).save(
        os.path.join(self.get_temp_dir(), "old"))
    return path, [v.numpy() for v in adam.variables + model.weights]

  def test_restore_through_the_wrapped_optimizer_then_train_on(self):
    path, old = self._write_old_checkpoint()
    model, adam = _keras_model(), keras.optimizers.Adam(0.1)
    opt = mplso.keras.LossScaleOptimizer(adam, "dynamic")
    adam.build(model.trainable_variables)
    # The recipe: the old checkpoint's `optimizer` is the wrapped one.
    tf.train.Checkpoint(model=model, optimizer=adam).restore(
        path).assert_consumed()
    for saved, restored in zip(old, adam.variables + model.weights):
      self.assertAllEqual(saved, restored)
    self.assertEqual(2.**15, float(opt.loss_scale()))
    _eager_step(model, opt)
    self.assertEqual(4, int(opt.iterations))
    # New checkpoints hold the wrapper, loss scale included.
    new_path = tf.train.Checkpoint(model=model, optimizer=opt).save(
        os.path.join(self.get_temp_dir(), "new"))
    names = [name for name, _ in tf.train.list_variables(new_path)]
    self.assertTrue(any("loss_scale/current_loss_scale" in n for n in names))

  def test_tf1_optimizer_in_eager_mode(self):
    w = tf.Variable(tf.ones([4, 1]))
    old_adam = tf.compat.v1.train.AdamOptimizer(0.1)
    loss = _matmul_loss(w)
    for _ in range(3):
      old_adam.minimize(loss, var_list=[w])
    path = tf.train.Checkpoint(w=w, optimizer=old_adam).save(
        os.path.join(self.get_temp_dir(), "old"))
    new_w = tf.Variable(tf.zeros([4, 1]))
    adam = tf.compat.v1.train.AdamOptimizer(0.1)
    opt = mplso.MixedPrecisionLossScaleOptimizer(adam, "dynamic")
    status = tf.train.Checkpoint(w=new_w, optimizer=adam).restore(path)
    new_loss = _matmul_loss(new_w)
    # The old run's fourth step, and the loss-scaled run's first: the same
    # update when the slots came back (float32 here: no overflow, no skip).
    old_adam.minimize(loss, var_list=[w])
    opt.minimize(new_loss, var_list=[new_w])
    status.assert_consumed()
    self.assertAllClose(w, new_w)
    for name in ("m", "v"):
      self.assertAllClose(old_adam.get_slot(w, name),
                          adam.get_slot(new_w, name))

  def test_expect_partial_on_the_wrapper_drops_the_optimizer_state(self):
    # Why the recipe restores through the wrapped optimizer: the wrapper
    # nests it one level down, so the old optimizer's values match nothing.
    path, old = self._write_old_checkpoint()
    model, adam = _keras_model(), keras.optimizers.Adam(0.1)
    opt = mplso.keras.LossScaleOptimizer(adam, "dynamic")
    adam.build(model.trainable_variables)
    status = tf.train.Checkpoint(model=model, optimizer=opt).restore(path)
    status.expect_partial()
    with self.assertRaises(AssertionError):
      status.assert_consumed()
    self.assertEqual(0, int(adam.iterations))
    for saved, restored in zip(old[-len(model.weights):], model.weights):
      self.assertAllEqual(saved, restored)  # The model itself did restore.


if __name__ == "__main__":
  absltest.main()
