"""Tests of the helpers every mplso optimizer wrapper shares."""

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

import mplso
from mplso._src.loss_scales import loss_scale as loss_scale_lib
from mplso._src.step import wrapping


class UnscaledGradientsTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(("callable", True), ("tensor", False))
  def test_scales_then_unscales(self, callable_loss):
    var = tf.Variable(3.)
    seen = []

    def compute(scaled_loss):
      with tf.GradientTape() as tape:
        value = scaled_loss() if callable(scaled_loss) else None
      if value is None:  # A tensor loss was recorded on the caller's tape.
        grad = outer.gradient(scaled_loss, var)
      else:
        grad = tape.gradient(value, var)
      seen.append(grad)
      return [(grad, var), (None, var)]

    loss_scale = mplso.FixedLossScale(8)
    with tf.GradientTape(persistent=True) as outer:
      loss = var * var if not callable_loss else None
    got = wrapping.unscaled_gradients(
        loss_scale, (lambda: var * var) if callable_loss else loss, compute,
        tape=outer)
    self.assertEqual(float(seen[0]), 48.)  # Scaled: 8 * 2 * 3.
    self.assertEqual(float(got[0][0]), 6.)
    self.assertIsNone(got[1][0])
    self.assertIs(got[0][1], var)


class ReplicaContextTest(tf.test.TestCase):

  def test_cross_replica_context_is_refused_with_the_hint(self):
    wrapping.check_replica_context()  # The default replica context.
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
      with self.assertRaisesRegex(
          ValueError, r"^apply_gradients\(\) must be called in a replica "
          r"context\. Call it inside strategy\.run\(\.\.\.\), or else\.$"):
        wrapping.check_replica_context(", or else")


class HidesSlotNamesTest(tf.test.TestCase):

  def test_get_slot_names_is_hidden_from_dir_only(self):

    class Wrapper(wrapping.HidesSlotNames):

      def get_slot_names(self):
        return ["m"]

    wrapper = Wrapper()
    self.assertNotIn("get_slot_names", dir(wrapper))
    self.assertEqual(wrapper.get_slot_names(), ["m"])


class LossScaleArgTest(tf.test.TestCase):

  def test_none_is_refused_naming_what_is_accepted(self):
    with self.assertRaisesRegex(ValueError,
                                "cannot be None.*" + loss_scale_lib.ACCEPTED):
      wrapping.loss_scale_arg(None)
    self.assertIsInstance(wrapping.loss_scale_arg("dynamic"),
                          mplso.DynamicLossScale)

  def test_error_lists_only_what_a_wrapper_accepts(self):
    # `mplso.loss_scale.get` accepts None; a wrapper's `loss_scale` does not.
    for bad in ("Dynamic", [2.]):
      with self.assertRaises(ValueError) as raised:
        wrapping.loss_scale_arg(bad)
      message = str(raised.exception)
      self.assertStartsWith(message, "Could not interpret loss scale "
                            "identifier: ")
      self.assertEndsWith(message,
                          f"Accepted: {loss_scale_lib.ACCEPTED}.")
      self.assertNotIn("None", message)


if __name__ == "__main__":
  absltest.main()
