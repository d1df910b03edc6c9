"""Tests for `reaches`: its "nothing here" is certain, and it saves work.

A file `prefilter` passes but `reaches.may_reach` turns away skips LibCST.
That is right only where the planner, given the whole file, changes
nothing and reports nothing: each case below runs the planner on the whole
file (`rewrite._upgrade_whole`) to show it, in both modes.
"""

from absl.testing import absltest
from absl.testing import parameterized
import hypothesis
from hypothesis import strategies as st

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import parsed as parsed_lib
from mplso._src.upgrade import prefilter
from mplso._src.upgrade import rewrite
from mplso_test.helpers import upgrade_coverage

_MODES = ((edits_lib.MPLSO, edits_lib.KERAS_3),
          (edits_lib.NATIVE, edits_lib.KERAS_3),
          (edits_lib.NATIVE, edits_lib.TF_KERAS))


def _planner_acts(text: str, to=edits_lib.MPLSO,
                  keras=edits_lib.KERAS_3) -> bool:
  """Whether the planner, on the whole file, changes or reports anything."""
  whole = rewrite._upgrade_whole(  # pylint: disable=protected-access
      text, to, keras, None, "this file")
  return whole.code != text or bool(whole.edits)


# Code of TensorFlow's and Keras's own kind: words of the tables, in paths
# and names that hold none of them.
_NOTHING = (
    ("training_modules",
     "from tensorflow.python.training import optimizer\n"
     "from tensorflow.python.training import training_util\n"
     "import tensorflow as tf\n"
     "x = tf.experimental.numpy.ones(3)\n"
     "step = training_util.get_global_step()\n"),
    ("keras_own_optimizer",
     "from keras.src.dtype_policies import dtype_policy\n"
     "from keras.src.optimizers.loss_scale_optimizer import "
     "LossScaleOptimizer\n\n"
     "class Trainer:\n"
     "  def compile(self, optimizer):\n"
     "    if isinstance(optimizer, LossScaleOptimizer):\n"
     "      return optimizer\n"
     "    return dtype_policy.Policy('mixed_float16')\n"),
    ("legacy_member_on_an_imported_module",
     "from keras.src.optimizers import loss_scale_optimizer\n\n"
     "def wrap(opt):\n"
     "  return loss_scale_optimizer.LossScaleOptimizer(opt)\n"),
    ("legacy_member_defined_here",
     "from tensorflow.python.training import training_ops\n\n"
     "class LossScaleOptimizer:\n  experimental = 1\n\n"
     "x = LossScaleOptimizer()\n"),
    ("policy_named_like_tf",
     "from tensorflow.python.distribute import values\n"
     "from tensorflow.python.training import saver\n\n"
     "class Policy:\n  pass\n\n"
     "p = Policy('float32')\n"),
    ("switches_in_other_words",
     "import tensorflow as tf\n"
     "from tensorflow.python.training import server_lib\n"
     "opts = {'layout_optimizer': True}\n"
     "mixed_precision_note = 'see docs'\n"),
)

# One thing the planner acts on, beside words of the tables.
_ACTS = (
    ("private_package_import",
     "from tensorflow.python.training import experimental\n"),
    ("chain_through_tf",
     "import tensorflow as tf\n"
     "x = tf.python.training.experimental.loss_scale.get('dynamic')\n"),
    ("alias_of_a_namespace",
     "import tensorflow as tf\nv1 = tf.compat.v1\ncontrib = v1.contrib\n"),
    ("getattr_literal",
     "import tensorflow as tf\nc = getattr(tf, 'contrib')\n"),
    ("namespace_imported_in_a_function",
     "def f():\n  import tensorflow.contrib as c\n  return c\n"),
    ("legacy_member_on_a_parameter",
     "from tensorflow.python.training import optimizer\n\n"
     "def f(m):\n  return m.LossScaleOptimizer\n"),
    ("legacy_member_on_a_relative_import",
     "from . import mp\nx = mp.LossScaleOptimizer\n"),
    ("legacy_member_on_a_name_bound_elsewhere",
     "def f():\n  from keras import mixed_precision as mp\n  return mp\n\n"
     "def g():\n  return mp.LossScaleOptimizer\n"),
    ("legacy_member_on_a_reassigned_name",
     "import keras as k\nk = make()\nx = k.LossScaleOptimizer\n"),
    ("legacy_path_through_a_project_import",
     "from pkg.models import tf\n\n"
     "def f(o, m):\n"
     "  return tf.contrib.mixed_precision.LossScaleOptimizer(o, m)\n"),
    ("unbound_legacy_name", "x = LossScaleOptimizer(opt)\n"),
    ("legacy_name_bound_in_a_function_only",
     "def f():\n  from foo import LossScaleOptimizer\n"
     "  return LossScaleOptimizer\n\nx = LossScaleOptimizer\n"),
    ("mixed_precision_experimental_on_anything",
     "def f(k):\n  return k.mixed_precision.experimental.global_policy()\n"),
    ("grappler_dict", "opts = {'auto_mixed_precision': True}\n"),
    ("grappler_keyword", "f(auto_mixed_precision_cpu=True)\n"),
    ("grappler_attribute", "config.auto_mixed_precision = 1\n"),
    ("environment",
     "import os\nos.environ['TF_ENABLE_AUTO_MIXED_PRECISION'] = '1'\n"),
    ("environment_keyword",
     "run(TF_ENABLE_AUTO_MIXED_PRECISION_GRAPH_REWRITE='1')\n"),
    ("policy_name", "p = make('infer_float32_vars')\n"),
    ("policy_infer", "p = Policy('infer')\n"),
    ("policy_infer_keyword", "p = PolicyV1(name='infer')\n"),
    ("absent_module_import", "import tensorflow.contrib.mixed_precision\n"),
    ("attribute_only_import", "from tensorflow.compat.v2 import keras\n"),
)


class ReachesTest(parameterized.TestCase):

  @parameterized.named_parameters(*_NOTHING)
  def test_nothing_here(self, text):
    self.assertTrue(prefilter.may_hold_legacy(text))
    self.assertFalse(parsed_lib.parse(text).legacy)
    for to, keras in _MODES:
      with self.subTest(to=to, keras=keras):
        self.assertFalse(_planner_acts(text, to, keras))
        self.assertEqual(rewrite.upgrade_source(text, to, keras).code, text)

  @parameterized.named_parameters(*_ACTS)
  def test_what_the_planner_acts_on_goes_to_it(self, text):
    self.assertTrue(_planner_acts(text))
    self.assertTrue(parsed_lib.parse(text).legacy)

  def test_every_use_of_every_spelling_goes_to_the_planner(self):
    missed = [(column, text)
              for column, text in upgrade_coverage.single_uses()
              if not parsed_lib.parse(text).legacy]
    self.assertEmpty(missed)

  # Statements whose mixes may or may not hold what the planner acts on.
  _POOL = (
      "import tensorflow as tf", "import tensorflow.compat.v1 as tf",
      "import keras", "from tensorflow import keras",
      "from tensorflow.python.training import optimizer",
      "from tensorflow.python.training import experimental",
      "from tensorflow.python import training",
      "from keras.src.optimizers import loss_scale_optimizer as lso",
      "from . import lso", "from tensorflow.python.training import *",
      "x = tf.experimental.numpy", "y = tf.train.experimental",
      "z = y.LossScale", "m = tf.compat.v1", "n = m.contrib",
      "e = training.experimental", "g = getattr(tf, 'contrib')",
      "h = getattr(tf.python.training, 'experimental')",
      "o = lso.LossScaleOptimizer(o)", "lso = None",
      "t = keras.mixed_precision.LossScaleOptimizer(o)",
      "u = keras.mixed_precision", "v = u.experimental",
      "def f(tf):\n  return tf.LossScaleOptimizer",
      "def f():\n  import tensorflow.contrib as tc\n  return tc",
      "class LossScaleOptimizer:\n  pass",
      "w = LossScaleOptimizer()", "for keras in ():\n  pass",
      "p = Policy('infer')", "q = Policy('mixed_float16')",
      "c = {'auto_mixed_precision': 0}", "d = 'TF_ENABLE_AUTO_MIXED'",
      "tf.compat.v1.disable_eager_execution()",
  )

  @hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
  @hypothesis.given(st.lists(st.sampled_from(_POOL), min_size=1,
                             max_size=6))
  def test_no_is_certain_on_mixes(self, statements):
    text = "".join(s + "\n" for s in statements)
    if parsed_lib.parse(text).legacy:
      return
    for to, keras in _MODES[:2]:
      self.assertFalse(_planner_acts(text, to, keras), msg=text)


if __name__ == "__main__":
  absltest.main()
