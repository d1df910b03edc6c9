"""Tests for the validation of numeric constructor arguments."""

import doctest

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from mplso._src.loss_scales import arguments

F32_MAX = float(np.finfo(np.float32).max)


class CheckNumberTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ("int", 8, 8.),
      ("float", 8.5, 8.5),
      ("numpy_float32", np.float32(8.5), 8.5),
      ("numpy_float64", np.float64(8.5), 8.5),
      ("numpy_int64", np.int64(8), 8.),
      ("numpy_uint8", np.uint8(8), 8.),
      ("float32_max", F32_MAX, F32_MAX),
      ("rounds_to_float32_max", 3.4028235e38, 3.4028235e38),
      ("numpy_quarter_of_max", np.finfo(np.float32).max / 4, F32_MAX / 4),
  )
  def test_accepted_as_float(self, value, expected):
    got = arguments.check_number("x", value, minimum=1, float32=True)
    self.assertIs(float, type(got))
    self.assertEqual(expected, got)

  @parameterized.named_parameters(
      ("int", 3, 3),
      ("integral_float", 3., 3),
      ("numpy_int", np.int32(3), 3),
      ("numpy_integral_float", np.float32(3.), 3),
  )
  def test_accepted_as_int(self, value, expected):
    got = arguments.check_number("n", value, minimum=1, integer=True)
    self.assertIs(int, type(got))
    self.assertEqual(expected, got)

  @parameterized.named_parameters(
      ("bool", True, {}, r"not bool\. Received: x=True\."),
      ("numpy_bool", np.bool_(True), {}, r"not bool.*Received: x="),
      ("string", "8", {}, r"not str\. Received: x='8'\."),
      ("none", None, {}, r"not NoneType\. Received: x=None\."),
      ("tensor", tf.constant(8.), {}, r"not EagerTensor"),
      ("nan", float("nan"), {}, r"a finite number >= 1\. Received: x=nan\."),
      ("inf", float("inf"), {}, r"a finite number >= 1\. Received: x=inf\."),
      ("below", .5, {}, r"`x` must be a real number >= 1\. Received: x=0\.5"),
      ("exclusive", 1., dict(inclusive=False), r"> 1\. Received: x=1\.0"),
      ("above_maximum", 9., dict(maximum=8.), r"in \[1, 8\]\. Received: x=9"),
      ("fraction", 2.5, dict(integer=True),
       r"an integer >= 1; a fractional value would be truncated\. "
       r"Received: x=2\.5\. Pass 2 or 3\."),
      ("beyond_float32_int", 2**200, dict(float32=True),
       r"float32 limit 3\.40282e\+38 .*Received: x=" + str(2**200)),
      ("just_beyond_float32", 3.40283e38, dict(float32=True),
       r"float32 limit .*Received: x=3\.40283e\+38"),
      ("beyond_float32_huge_int", 10**400, dict(float32=True),
       r"float32 limit"),
      ("beyond_float32_float", 1e39, dict(float32=True),
       r"float32 limit .*Received: x=1e\+39\. Pass a smaller value"),
      # 0 in float32, or a subnormal that TF flushes to 0.
      ("zero_in_float32", 1e-50, dict(minimum=0, inclusive=False,
                                      float32=True),
       r"^`x` must be nonzero in float32, at least its smallest normal value "
       r"1\.17549e-38 .*would be 0: .*Received: x=1e-50\. Pass a larger"),
      ("numpy_zero_in_float32", np.float64(1e-46),
       dict(minimum=0, inclusive=False, float32=True),
       r"1\.17549e-38 .*would be 0: .*Received: x=np\.float64\(1e-46\)"),
      ("subnormal_in_float32", 1e-40, dict(minimum=0, inclusive=False,
                                           float32=True),
       r"1\.17549e-38 .*a subnormal that TF flushes to 0.*Received: x=1e-40"),
      ("just_below_smallest_normal", 1.1754942e-38,
       dict(minimum=0, inclusive=False, float32=True), r"subnormal"),
      ("zero_with_inclusive_minimum", 0., dict(minimum=0, float32=True),
       r"nonzero in float32.*Received: x=0\.0\."),
      # Out of range first: 0 and negatives are not "too small for float32".
      ("zero_below_exclusive_minimum", 0, dict(minimum=0, inclusive=False,
                                              float32=True),
       r"^`x` must be a real number > 0\. Received: x=0\.$"),
      ("negative_tiny", -1e-50, dict(minimum=0, inclusive=False,
                                     float32=True),
       r"^`x` must be a real number > 0\. Received: x=-1e-50\.$"),
  )
  def test_refused(self, value, kwargs, regex):
    with self.assertRaisesRegex(ValueError, regex):
      arguments.check_number("x", value, **{"minimum": 1, **kwargs})

  @parameterized.named_parameters(
      ("smallest_normal", float(np.finfo(np.float32).tiny)),
      ("numpy_smallest_normal", np.finfo(np.float32).tiny),
      ("small", 1e-30),
  )
  def test_smallest_normal_float32_accepted(self, value):
    self.assertEqual(float(value), arguments.check_number(
        "x", value, minimum=0, inclusive=False, float32=True))

  def test_python_big_int_without_float32_limit(self):
    # Step counts are int64 variables, not float32 ones.
    self.assertEqual(2**40, arguments.check_number("n", 2**40, minimum=1,
                                                   integer=True))

  @parameterized.named_parameters(
      ("type", "8", "TF's type words.", "TF's type words. `x` must be"),
      ("range", .5, "TF's range words.", "TF's range words. `x` must be"),
  )
  def test_tf_clause_comes_first(self, value, clause, start):
    with self.assertRaises(ValueError) as raised:
      arguments.check_number("x", value, minimum=1, type_clause=clause,
                             range_clause=clause)
    self.assertTrue(str(raised.exception).startswith(start),
                    str(raised.exception))

  def test_docstring_example(self):
    result = doctest.testmod(arguments, verbose=False)
    self.assertGreater(result.attempted, 0)
    self.assertEqual(0, result.failed)


if __name__ == "__main__":
  absltest.main()
