"""The stall guard's check: passes below the limit, names everything at it."""

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

from mplso._src.core import stall_guard


def _check(stall, limit=3):
  return stall_guard.check(
      tf.constant(float(stall)), limit, names=["dense/kernel", "emb", "b"],
      nan=tf.constant([True, False, False]),
      inf=tf.constant([False, True, False]), scale=tf.constant(0.5))


class StallGuardTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(("none", 0), ("below", 2))
  def test_passes_below_the_limit(self, stall):
    _check(stall)  # Eagerly an Assert that holds returns None, raises nothing.

  @parameterized.named_parameters(("at", 3), ("above", 4))
  def test_message_names_variables_scale_count_and_cure(self, stall):
    with self.assertRaises(tf.errors.InvalidArgumentError) as raised:
      _check(stall)
    message = raised.exception.message
    self.assertIn(f"{stall} consecutive steps", message)
    self.assertIn("minimum (0.5; stall_limit=3)", message)
    self.assertIn("NaN gradients: [dense/kernel]", message)
    self.assertIn("Inf gradients: [emb]", message)
    self.assertIn("cannot be fixed by loss scaling", message)
    self.assertIn("float32", message)

  def test_raises_in_a_function(self):
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                r"NaN gradients: \[dense/kernel\]"):
      tf.function(lambda: (_check(5), None)[1])()


if __name__ == "__main__":
  absltest.main()
