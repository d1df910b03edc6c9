"""Tests for `prefilter`: every reach form of every spelling passes it."""

from absl.testing import absltest
from absl.testing import parameterized

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import names
from mplso._src.upgrade import prefilter
from mplso._src.upgrade import rewrite
from mplso_test.helpers import upgrade_coverage


class PrefilterTest(parameterized.TestCase):

  def test_every_use_of_every_spelling_passes(self):
    missed = [(column, text) for column, text in upgrade_coverage.single_uses()
              if not prefilter.may_hold_legacy(text)]
    self.assertEmpty(missed)

  def test_every_table_path_passes_spelled_alone(self):
    paths = {*names.TARGETS, *names.PRIVATE, *names.PRIVATE_MPLSO,
             *names.PRIVATE_TODAY, *names.PRIVATE_MODULES,
             *names.INSTALL_ONLY, *names.SERVED_WHOLE}
    for path in sorted(paths):
      module = names.canonical(path) and path
      text = f"import {path.replace('tf.', 'tensorflow.', 1)}\n"
      with self.subTest(path=path, module=module):
        self.assertTrue(prefilter.may_hold_legacy(text))

  @parameterized.named_parameters(
      ("switch", "import os\nos.environ['TF_ENABLE_AUTO_MIXED_PRECISION']"),
      ("grappler", "opts = {'auto_mixed_precision': True}\n"),
      ("policy_call", "import keras\nkeras.config.set_global_policy(p)\n"),
      ("scaling", "loss = opt.get_scaled_loss(loss)\n"),
      ("attribute_only", "import tensorflow.compat.v1.keras\n"),
      ("attribute_only_from", "from tensorflow.compat.v2 import (\n"
       "    keras)\n"),
      ("star", "from tensorflow.compat.v1 import *\n"),
      ("private_package", "from tensorflow.python.training import "
       "experimental\nexperimental.x\n"),
      ("contrib", "from tensorflow import contrib\n"),
  )
  def test_passes(self, text):
    self.assertTrue(prefilter.may_hold_legacy(text))

  @parameterized.named_parameters(
      ("data_experimental", "import tensorflow as tf\n"
       "x = tf.data.experimental.AUTOTUNE\n"),
      ("other_star", "from tensorflow.python.ops.math_ops import *\n"),
      ("compat_v1", "import tensorflow as tf\nk = tf.keras\n"
       "tf.compat.v1.disable_eager_execution()\n"),
      ("experimental_comment", "# experimental, see contrib_utils\nx = 1\n"),
      ("keras_after_a_longer_name", "x = tfv1.keras\n"),
      ("star_import_after_a_longer_name",
       "x = 'notfrom tensorflow.compat.v1 import *'\n"),
  )
  def test_rejects(self, text):
    self.assertFalse(prefilter.may_hold_legacy(text))
    for to in (edits_lib.MPLSO, edits_lib.NATIVE):
      self.assertEqual(rewrite.upgrade_source(text, to=to).code, text)


if __name__ == "__main__":
  absltest.main()
