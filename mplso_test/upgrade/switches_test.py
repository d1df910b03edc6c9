"""Tests `switches`: the warning for each switch that does nothing on TF 2.21."""

import textwrap

from absl.testing import absltest
from absl.testing import parameterized
import libcst as cst
from libcst import metadata

from mplso._src.upgrade import bindings
from mplso._src.upgrade import edits
from mplso._src.upgrade import switches
from mplso_test.helpers import upgrade_cases


def warnings(source):
  wrapper = metadata.MetadataWrapper(cst.parse_module(
      textwrap.dedent(source)))
  return switches.warnings(bindings.Bindings(wrapper))


class WarningsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("grappler_option",
       'tf.config.optimizer.set_experimental_options('
       '{"auto_mixed_precision": True})',
       '"auto_mixed_precision": True', "Grappler's `auto_mixed_precision`"),
      ("grappler_cpu_option", 'opts = {"auto_mixed_precision_cpu": on}',
       '"auto_mixed_precision_cpu": on', "`auto_mixed_precision_cpu`"),
      ("rewriter_config_field",
       "config.graph_options.rewrite_options.auto_mixed_precision = ON",
       "config.graph_options.rewrite_options.auto_mixed_precision = ON",
       "no loss scaling"),
      ("rewriter_config_argument",
       "RewriterConfig(auto_mixed_precision=RewriterConfig.ON)",
       "auto_mixed_precision=RewriterConfig.ON", "no loss scaling"),
      ("environ_item", 'os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "1"',
       'os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "1"', "NGC"),
      ("environ_setdefault",
       'os.environ.setdefault("TF_ENABLE_AUTO_MIXED_PRECISION", "1")',
       'os.environ.setdefault("TF_ENABLE_AUTO_MIXED_PRECISION", "1")', "NGC"),
      ("putenv", "os.putenv('TF_ENABLE_AUTO_MIXED_PRECISION', '1')",
       "os.putenv('TF_ENABLE_AUTO_MIXED_PRECISION', '1')", "NGC"),
      ("environ_update", "os.environ.update(TF_ENABLE_AUTO_MIXED_PRECISION=1)",
       "TF_ENABLE_AUTO_MIXED_PRECISION=1", "NGC"),
      ("child_environment",
       'run(cmd, env={"TF_ENABLE_AUTO_MIXED_PRECISION_GRAPH_REWRITE": "1"})',
       '"TF_ENABLE_AUTO_MIXED_PRECISION_GRAPH_REWRITE": "1"',
       "`TF_ENABLE_AUTO_MIXED_PRECISION_GRAPH_REWRITE`"),
      ("environ_read", 'on = os.environ.get("TF_ENABLE_AUTO_MIXED_PRECISION")',
       'os.environ.get("TF_ENABLE_AUTO_MIXED_PRECISION")', "NGC"),
      ("infer_float32_vars", 'Policy("infer_float32_vars")',
       '"infer_float32_vars"', "'mixed_float16' or 'mixed_bfloat16'"),
      ("infer_with_float32_vars", 'set_policy("infer_with_float32_vars")',
       '"infer_with_float32_vars"', "'mixed_float16' or 'mixed_bfloat16'"),
      ("with_float32_vars", 'Dense(4, dtype="bfloat16_with_float32_vars")',
       '"bfloat16_with_float32_vars"', "use 'mixed_bfloat16'"),
      ("infer_policy", 'mp.experimental.set_policy("infer")', '"infer"',
       "a dtype name ('float32')"),
  )
  def test_warned(self, line, old, why):
    [found] = warnings(line + "\n")
    self.assertEqual((1, old, old), (found.line, found.old, found.new))
    self.assertIn(why, found.why)

  @parameterized.named_parameters(
      # A module constant, as public trainers write it (s19 tester's N2).
      ("constant_off", "USE_AMP = False\n", 0),
      ("constant_on", "USE_AMP = True\n", 1),
      # Set twice (a flag may turn it on): not known to be off.
      ("assigned_twice", "USE_AMP = False\nUSE_AMP = flags.amp\n", 1),
      ("a_parameter", "def f(USE_AMP):\n  pass\n", 1))
  def test_a_name_assigned_once_is_read(self, before, expected):
    found = warnings(before + "tf.config.optimizer.set_experimental_options("
                     "{'auto_mixed_precision': USE_AMP})\n")
    self.assertLen(found, expected)

  @parameterized.named_parameters(
      ("grappler_off",
       'set_experimental_options({"auto_mixed_precision": False})'),
      ("grappler_bfloat16",
       'set_experimental_options({"auto_mixed_precision_onednn_bfloat16": 1})'),
      ("rewriter_config_off",
       "options.auto_mixed_precision = RewriterConfig.OFF"),
      ("rewriter_config_default",
       "RewriterConfig(auto_mixed_precision=RewriterConfig.DEFAULT)"),
      ("environ_zero", 'os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "0"'),
      ("environ_deleted", 'del os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"]'),
      ("environ_popped", 'os.environ.pop("TF_ENABLE_AUTO_MIXED_PRECISION")'),
      ("a_comment", "x = 1  # TF_ENABLE_AUTO_MIXED_PRECISION=1"),
      ("infer_elsewhere", 'mode = "infer"'),
      ("a_flag_named_so", "if flags.auto_mixed_precision:\n  pass"),
      ("mixed_float16", 'Policy("mixed_float16")'),
      # An assignment to the setter's name replaces it: nothing turned on.
      ("assigned_to_the_setter",
       'tf.config.optimizer.set_experimental_options=({\n'
       '    "auto_mixed_precision": True,\n})'),
      ("assigned_to_the_setter_by_name",
       'set_experimental_options = {"auto_mixed_precision": True}'),
      ("annotated_setter",
       'set_experimental_options: dict = {"auto_mixed_precision": True}'),
  )
  def test_not_warned(self, source):
    self.assertEmpty(warnings(source + "\n"))

  def test_each_on_its_line(self):
    found = warnings("""\
        import os
        os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "1"

        set_policy("float16_with_float32_vars")
        """)
    self.assertEqual([2, 4], [w.line for w in found])


class WholeFileTest(parameterized.TestCase):
  """The file stays byte for byte; the report lines are checked whole."""

  def test_a_dict_assigned_to_the_setter_gets_no_line(self):
    source = """\
        import tensorflow as tf

        tf.config.optimizer.set_experimental_options=({
            'layout_optimizer': True,
            'auto_mixed_precision': True,
        })
        """
    upgrade_cases.assert_upgrade(source, source, [])

  def test_the_setter_called_warns(self):
    source = """\
        import tensorflow as tf
        from tensorflow.config import optimizer as grappler

        grappler.set_experimental_options({
            'auto_mixed_precision': True,
            'layout_optimizer': True,
        })
        """
    upgrade_cases.assert_upgrade(source, source, [
        "a.py:5: WARNING: Kept \"'auto_mixed_precision': True\""])

  def test_a_switch_is_quoted_without_its_comma(self):
    # The comma and the line break after it are no part of the switch: the
    # report line quotes the switch alone, on one line.
    source = """\
        config = RewriterConfig(
            auto_mixed_precision=RewriterConfig.ON,
            layout_optimizer=RewriterConfig.ON)
        options = {
            "auto_mixed_precision_cpu": True,
            "layout_optimizer": True,
        }
        """
    upgrade_cases.assert_upgrade(source, source, [
        "a.py:2: WARNING: Kept 'auto_mixed_precision=RewriterConfig.ON'",
        "a.py:5: WARNING: Kept '\"auto_mixed_precision_cpu\": True'"])

  def test_a_file_that_wraps_its_optimizer_gets_an_info_line(self):
    # The advice is followed already: the rewrite and a loss-scale wrapper.
    # The line stays in the report, as INFO, so --check passes.
    source = """\
        import tensorflow as tf

        tf.config.optimizer.set_experimental_options(
            {"auto_mixed_precision": True})
        opt = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9)
        opt = tf.compat.v1.train.experimental.enable_mixed_precision_graph_rewrite(
            opt)
        """
    after = """\
        import tensorflow as tf
        import mplso

        tf.config.optimizer.set_experimental_options(
            {"auto_mixed_precision": True})
        opt = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9)
        opt = mplso.enable_mixed_precision_graph_rewrite(
            opt)
        """
    upgrade_cases.assert_upgrade(source, after, [
        "a.py: INFO: Added 'import mplso'",
        "a.py:4: INFO: Kept '\"auto_mixed_precision\": True' as written",
        "    Grappler's `auto_mixed_precision` rewrite casts to float16 on TF "
        "2.21 with no loss scaling of its own; the optimizer wrapped at line "
        "6 (`enable_mixed_precision_graph_rewrite`) scales the loss",
        "a.py:6: INFO: Renamed 'tf.compat.v1.train.experimental."
        "enable_mixed_precision_graph_rewrite' to "
        "'mplso.enable_mixed_precision_graph_rewrite'"], reasons=True)

  @parameterized.named_parameters(
      ("keras", "keras.mixed_precision.LossScaleOptimizer(opt)"),
      ("mplso_keras", "mplso.keras.LossScaleOptimizer(opt)"),
      ("mplso_rewrite", "mplso.enable_mixed_precision_graph_rewrite(opt)"),
      ("mplso_tf1_class",
       "mplso.MixedPrecisionLossScaleOptimizer(opt, 'dynamic')"))
  def test_the_advice_followed_passes(self, wrapped):
    # A file the upgrade wrote, or one written by hand after the advice: no
    # WARNING line is left for --check to fail on.
    source = f"""\
        import keras
        import mplso
        import tensorflow as tf

        tf.config.optimizer.set_experimental_options(
            {{"auto_mixed_precision": True}})
        opt = {wrapped}
        """
    result = upgrade_cases.assert_upgrade(source, source)
    self.assertEqual([edits.KEPT], [e.kind for e in result.edits])

  def test_no_wrapper_still_warns(self):
    source = """\
        import tensorflow as tf

        tf.config.optimizer.set_experimental_options(
            {"auto_mixed_precision": True})
        opt = tf.keras.optimizers.SGD(0.1)
        """
    upgrade_cases.assert_upgrade(source, source, [
        "a.py:4: WARNING: Kept '\"auto_mixed_precision\": True'"])


if __name__ == "__main__":
  absltest.main()
