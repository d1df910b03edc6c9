"""The public surface: every public name of each module, nothing private."""

import doctest
import importlib
import types

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

import mplso
import mplso.keras

# The public names of each public module.
CONTRACT = {
    "mplso.keras": ["LossScaleMonitor", "LossScaleOptimizer"],
    "mplso.summary": ["loss_scale_scalars"],
    "mplso.compat": ["install", "uninstall", "Policy", "set_policy",
                     "global_policy"],
    "mplso": ["LossScale", "FixedLossScale", "DynamicLossScale",
              "MixedPrecisionLossScaleOptimizer", "contrib", "loss_scale",
              "enable_mixed_precision_graph_rewrite",
              "disable_mixed_precision_graph_rewrite", "overflow_log",
              "import_tensorflow_quietly", "meter_underflow",
              "underflow_log"],
    "mplso.contrib": ["LossScaleOptimizer", "LossScaleManager",
                      "FixedLossScaleManager",
                      "ExponentialUpdateLossScaleManager"],
    "mplso.loss_scale": ["get", "serialize", "deserialize", "LossScale",
                         "FixedLossScale", "DynamicLossScale"],
}
MEMBERS = {
    mplso.MixedPrecisionLossScaleOptimizer: [
        "compute_gradients", "apply_gradients", "minimize", "get_slot",
        "get_slot_names", "variables", "get_name", "_distributed_apply",
        "GATE_NONE", "GATE_OP", "GATE_GRAPH", "loss_scale"],
    mplso.DynamicLossScale: [
        "initial_loss_scale", "increment_period", "multiplier", "update",
        "get_config", "from_config", "__call__", "min_loss_scale",
        "max_loss_scale", "hysteresis", "stall_limit"],
    mplso.FixedLossScale: ["update", "get_config", "from_config", "__call__"],
}
# The API every Keras family's wrapper shares, on the wrapper of each family.
KERAS_MEMBERS = [
    "loss_scale", "get_scaled_loss", "get_unscaled_gradients", "minimize",
    "apply_gradients", "iterations", "learning_rate", "lr", "add_slot",
    "get_slot", "get_slot_names", "weights", "variables", "get_weights",
    "set_weights", "get_config", "from_config"]
# TF 2.4-2.15's attributes and get_gradients, on every family's wrapper.
KERAS_MEMBERS += ["inner_optimizer", "dynamic", "initial_scale",
                  "dynamic_growth_steps", "get_gradients"]
# Modules whose docstrings carry runnable `>>>` examples.
DOCTESTED = ["mplso._src.core.scaling", "mplso._src.core.finite",
             "mplso._src.core.update_rule", "mplso._src.loss_scales.loss_scale",
             "mplso._src.tf1.v1_optimizer", "mplso._src.keras.factory",
             "mplso._src.keras.optimizer_v2",
             "mplso._src.compat.graph_rewrite",
             "mplso._src.compat.policy"]


class PublicApiTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(*[(m.replace(".", "_"), m) for m in CONTRACT])
  def test_contract_names_exist_and_all_is_sorted(self, module_name):
    module = importlib.import_module(module_name)
    for name in CONTRACT[module_name]:
      self.assertTrue(hasattr(module, name), f"{module_name}.{name}")
    self.assertEqual(sorted(module.__all__), list(module.__all__))
    self.assertContainsSubset(CONTRACT[module_name], module.__all__)

  def test_members(self):
    for cls, names in MEMBERS.items():
      for name in names:
        self.assertTrue(hasattr(cls, name), f"{cls.__name__}.{name}")

  @parameterized.named_parameters(
      ("keras_3", "keras3_optimizer", "keras", "optimizers.Adam"),
      ("optimizer_v2", "optimizer_v2", "tf_keras", "optimizers.legacy.Adam"),
      ("tf_keras", "tf_keras_optimizer", "tf_keras", "optimizers.Adam"))
  def test_keras_members(self, family, package, optimizer):
    cls = importlib.import_module(
        f"mplso._src.keras.{family}").LossScaleOptimizer
    for name in KERAS_MEMBERS:
      self.assertTrue(hasattr(cls, name), f"{family}: {name}")
    inner = importlib.import_module(package)
    for part in optimizer.split("."):
      inner = getattr(inner, part)
    for name in KERAS_MEMBERS:  # Also readable on the factory class.
      self.assertTrue(hasattr(mplso.keras.LossScaleOptimizer, name), name)
    opt = mplso.keras.LossScaleOptimizer(inner(), "dynamic")
    self.assertIsInstance(opt, cls)
    self.assertIsInstance(opt, mplso.keras.LossScaleOptimizer)
    self.assertTrue(issubclass(cls, mplso.keras.LossScaleOptimizer))

  @parameterized.named_parameters(*[(m.replace(".", "_"), m) for m in CONTRACT])
  def test_no_private_module_leaks(self, module_name):
    module = importlib.import_module(module_name)
    for name in module.__all__:
      self.assertFalse(name.startswith("_"), name)
      value = getattr(module, name)
      if isinstance(value, types.ModuleType):
        self.assertNotIn("_src", value.__name__)

  def test_import_adds_no_keras_module(self):
    # `import tensorflow` already loads part of Keras 3; `import mplso` must
    # not load any more of it, nor tf_keras (only mplso.keras may).
    import subprocess
    import sys  # pylint: disable=g-import-not-at-top,multiple-imports
    code = (
        "import sys, tensorflow\n"
        "def keras(): return {m for m in sys.modules "
        "if m.split('.')[0] in ('keras', 'tf_keras')}\n"
        "before = keras(); import mplso; print(sorted(keras() - before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, check=True).stdout.strip()
    self.assertEqual("[]", out)

  @parameterized.named_parameters(*[(m.split(".")[-1], m) for m in DOCTESTED])
  def test_docstring_examples(self, module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, extraglobs={"tf": tf}, verbose=False,
                             optionflags=doctest.ELLIPSIS)
    self.assertGreater(result.attempted, 0, "no examples found")
    self.assertEqual(0, result.failed)


if __name__ == "__main__":
  absltest.main()
