"""The stall guard's check: passes below the limit, names everything at it."""

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

from mplso._src.diagnostics import stall_guard


def _check(stall, limit=3, nan=(True, False, False), minimum=1.0):
  return stall_guard.check(
      tf.constant(float(stall)), limit, names=["dense/kernel", "emb", "b"],
      nan=tf.constant(nan), inf=tf.constant([False, True, False]),
      scale=tf.constant(max(minimum, 1.)), min_loss_scale=minimum)


class StallGuardTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(("none", 0), ("below", 2))
  def test_passes_below_the_limit(self, stall):
    _check(stall)  # Eagerly an Assert that holds returns None, raises nothing.

  @parameterized.named_parameters(("at", 3), ("above", 4))
  def test_message_names_variables_scale_count_and_cure(self, stall):
    with self.assertRaises(tf.errors.InvalidArgumentError) as raised:
      _check(stall)
    message = raised.exception.message
    self.assertStartsWith(message, f"mplso: {stall} consecutive steps")
    self.assertIn("minimum (1; min_loss_scale=1, stall_limit=3)", message)
    self.assertIn("NaN gradients: [dense/kernel]", message)
    self.assertIn("Inf gradients: [emb]", message)
    self.assertIn("cannot be fixed by loss scaling", message)
    self.assertIn("float32", message)

  @parameterized.named_parameters(("eager", False), ("function", True))
  def test_inf_only_at_a_raised_minimum_names_min_loss_scale(self, function):

    def check():
      _check(3, nan=(False, False, False), minimum=128.)

    check = tf.function(check) if function else check
    with self.assertRaises(tf.errors.InvalidArgumentError) as raised:
      check()
    message = raised.exception.message
    self.assertIn("minimum (128; min_loss_scale=128, stall_limit=3)", message)
    self.assertIn("NaN gradients: []; with Inf gradients: [emb]", message)
    self.assertIn("a smaller loss scale could make them finite", message)
    self.assertIn("lower min_loss_scale", message)
    self.assertNotIn("cannot help", message)

  def test_inf_only_at_one_says_the_gradients_overflow_unscaled(self):
    with self.assertRaises(tf.errors.InvalidArgumentError) as raised:
      _check(3, nan=(False, False, False))
    self.assertIn("overflow without any loss scaling",
                  raised.exception.message)

  def test_raises_in_a_function(self):
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                r"NaN gradients: \[dense/kernel\]"):
      tf.function(lambda: (_check(5), None)[1])()


if __name__ == "__main__":
  absltest.main()
