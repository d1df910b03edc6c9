"""Tests `native_rules`: when Keras's own class takes a legacy call's place."""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized
import libcst as cst

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import names
from mplso._src.upgrade import native_rules

KERAS_3, TF_KERAS = edits_lib.KERAS_3, edits_lib.TF_KERAS


def code(node):
  return cst.Module(body=[]).code_for_node(node)


def is_dynamic_loss_scale(node):
  return (isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and
          node.func.value == "DynamicLossScale")


def optimizer_call(text, tf23, keras):
  return native_rules.optimizer_call(
      cst.parse_expression(text), tf23, keras, code, is_dynamic_loss_scale)


class OptimizerCallTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("tf24_default", "LossScaleOptimizer(sgd)", False, KERAS_3,
       ((None, "sgd"),), "(no `dynamic`)"),
      ("tf24_dynamic_true", "LossScaleOptimizer(sgd, dynamic=True, "
       "initial_scale=8, dynamic_growth_steps=5)", False, KERAS_3,
       ((None, "sgd"), ("initial_scale", "8"), ("dynamic_growth_steps", "5")),
       "(no `dynamic`)"),
      ("tf24_keywords_keep_their_text", "LossScaleOptimizer("
       "inner_optimizer=make(lr=0.1), dynamic_growth_steps=n * 2)", False,
       KERAS_3, ((None, "make(lr=0.1)"), ("dynamic_growth_steps", "n * 2")),
       "(no `dynamic`)"),
      ("tf23_dynamic", "LossScaleOptimizer(sgd, 'dynamic')", True, KERAS_3,
       ((None, "sgd"),), "Keras's default"),
      ("tf23_dynamic_loss_scale", "LossScaleOptimizer(sgd, DynamicLossScale("
       "initial_loss_scale=2**10, increment_period=20, multiplier=2.))", True,
       KERAS_3, ((None, "sgd"), ("initial_scale", "2**10"),
                 ("dynamic_growth_steps", "20")), "with multiplier 2"),
      # DynamicLossScale's own defaults: 2**15, and 2,000 steps (Keras's).
      ("tf23_default_dynamic_loss_scale", "LossScaleOptimizer("
       "optimizer=sgd, loss_scale=DynamicLossScale())", True, KERAS_3,
       ((None, "sgd"), ("initial_scale", "2**15")), "with multiplier 2"),
  )
  def test_converted(self, text, tf23, keras, arguments, why):
    decision = optimizer_call(text, tf23, keras)
    self.assertEqual("", decision.stays)
    self.assertEqual(arguments, decision.arguments)
    self.assertIn(why, decision.why)

  @parameterized.named_parameters(
      ("fixed_keras_3", "LossScaleOptimizer(sgd, dynamic=False, "
       "initial_scale=8)", False, KERAS_3, "a fixed loss scale, which Keras 3"),
      # tf_keras's class applies a step with Inf/NaN gradients under a fixed
      # scale; mplso's skips it.
      ("tf24_fixed_tf_keras", "LossScaleOptimizer(sgd, False, 8)", False,
       TF_KERAS, "applies a step whose gradients hold Inf or NaN"),
      ("tf23_fixed_tf_keras", "LossScaleOptimizer(sgd, loss_scale=128)", True,
       TF_KERAS, "applies a step whose gradients hold Inf or NaN"),
      ("tf23_fixed_power_tf_keras", "LossScaleOptimizer(sgd, 2**10)", True,
       TF_KERAS, "applies a step whose gradients hold Inf or NaN"),
      ("tf24_dynamic_at_run_time_tf_keras", "LossScaleOptimizer(sgd, "
       "dynamic=flags.dynamic)", False, TF_KERAS, "decided at run time"),
      ("dynamic_at_run_time", "LossScaleOptimizer(sgd, dynamic=flags.dynamic)",
       False, KERAS_3, "decided at run time"),
      ("no_inner_optimizer", "LossScaleOptimizer(dynamic=True)", False,
       KERAS_3, "no inner_optimizer argument"),
      ("unpacked", "LossScaleOptimizer(*args)", False, KERAS_3, "unpacked"),
      ("unpacked_tf_keras", "LossScaleOptimizer(sgd, **kwargs)", False,
       TF_KERAS, "unpacked"),
      ("tf23_fixed_keras_3", "LossScaleOptimizer(sgd, 128)", True, KERAS_3,
       "fixed loss scale"),
      ("tf23_multiplier_3", "LossScaleOptimizer(sgd, DynamicLossScale("
       "multiplier=3))", True, KERAS_3, "multiplier 3"),
      ("tf23_loss_scale_object", "LossScaleOptimizer(sgd, scale)", True,
       KERAS_3, "`scale`, is known only at run time"),
      ("tf23_other_string", "LossScaleOptimizer(sgd, 'auto')", True, KERAS_3,
       "`loss_scale='auto'`: TF 2.3 refused it ('dynamic' was the only "
       "string"),
      ("tf23_other_call", "LossScaleOptimizer(sgd, FixedLossScale(8))", True,
       TF_KERAS, "is not 'dynamic' or a `DynamicLossScale(...)`"),
      ("tf23_unpacked_loss_scale", "LossScaleOptimizer(sgd, "
       "DynamicLossScale(**config))", True, TF_KERAS,
       "the loss scale's arguments are unpacked"),
  )
  def test_stays_with_its_reason(self, text, tf23, keras, reason):
    decision = optimizer_call(text, tf23, keras)
    self.assertEqual((), decision.arguments)
    self.assertIn(reason, decision.stays)

  @parameterized.named_parameters(
      ("none", "LossScaleOptimizer(sgd, loss_scale=None)",
       "TF 2.3's class refused it (\"loss_scale cannot be None\")"),
      ("true", "LossScaleOptimizer(sgd, True)",
       "TF 2.3 took a bool as a number, a fixed scale of 1; mplso refuses"),
      ("false", "LossScaleOptimizer(sgd, False)",
       "`loss_scale=False`: TF 2.3 refused it (a fixed scale must be at "
       "least 1)"),
      ("below_1", "LossScaleOptimizer(sgd, 0.5)",
       "`loss_scale=0.5`: TF 2.3 refused it"),
  )
  def test_tf23_literal_stays_with_what_tf23_did(self, text, reason):
    # A literal is no name known only at run time; on tf_keras, where a
    # fixed scale converts, these stay.
    for keras in (KERAS_3, TF_KERAS):
      decision = optimizer_call(text, True, keras)
      self.assertEqual((), decision.arguments)
      self.assertIn(reason, decision.stays)


def policy_call(text):
  return native_rules.policy_call(cst.parse_expression(text), code,
                                  is_dynamic_loss_scale)


class PolicyCallTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("default", 'Policy("mixed_float16")', "as TF 2.3's 'auto' did"),
      ("auto_keywords", 'Policy(name="mixed_float16", loss_scale="auto")',
       "as TF 2.3's 'auto' did"),
      ("auto_other_policy", 'Policy("float32")',
       "leaves other models' optimizers alone"),
      ("dynamic", 'Policy("mixed_float16", loss_scale="dynamic")',
       "as TF 2.3's 'dynamic' did"),
      ("dynamic_name_at_run_time", 'Policy(name, loss_scale="dynamic")',
       "the name, `name`, is known only at run time: for another policy, "
       "TF 2.3 scaled the loss too"),
  )
  def test_converted_without_its_loss_scale(self, text, why):
    # The name stays as the call's one argument: nothing is added.
    decision = policy_call(text)
    self.assertEqual("", decision.stays)
    self.assertStartsWith(decision.why, "it has no loss scale; Keras's "
                          "`compile` wraps the optimizer of a `mixed_float16` "
                          "model")
    self.assertIn(why, decision.why)

  def test_decision_is_why_or_stays(self):
    # No argument to add: a policy call keeps its name and loses the rest.
    self.assertEqual(
        ["why", "stays"],
        [f.name for f in dataclasses.fields(native_rules.PolicyDecision)])
    self.assertIsInstance(policy_call('Policy("float32")'),
                          native_rules.PolicyDecision)

  @parameterized.named_parameters(
      ("fixed", 'Policy("mixed_float16", loss_scale=128)',
       "its loss scale, `128`, is fixed; Keras's policies have none"),
      ("fixed_power", 'Policy("mixed_float16", loss_scale=2**10)',
       "its loss scale, `2**10`, is fixed"),
      # TF 2.3's None: no loss scale; today's compile scales anyway.
      ("none", 'Policy("mixed_float16", loss_scale=None)',
       "TF 2.3's `loss_scale=None` turned loss scaling off, but today's "
       "`compile` scales the loss of a `mixed_float16` model whatever the "
       "policy says"),
      ("true", 'Policy("mixed_float16", loss_scale=True)',
       "TF 2.3 took a bool as a number, a fixed scale of 1"),
      ("false", 'Policy("mixed_float16", False)',
       "`loss_scale=False`: TF 2.3 refused it"),
      ("below_1", 'Policy("mixed_float16", loss_scale=0.5)',
       "`loss_scale=0.5`: TF 2.3 refused it"),
      ("other_string", 'Policy("mixed_float16", loss_scale="fixed")',
       "`loss_scale=\"fixed\"`: TF 2.3 refused it"),
      ("dynamic_other_policy", 'Policy("mixed_bfloat16", loss_scale='
       '"dynamic")', "scale the loss of a 'mixed_bfloat16' model; Keras's "
       "`compile` scales only a `mixed_float16` model's"),
      ("dynamic_loss_scale", 'Policy("mixed_float16", loss_scale='
       'DynamicLossScale(2**10))', "its loss scale is the object "
       "`DynamicLossScale(2**10)`; Keras's policies take none"),
      ("name", 'Policy("mixed_float16", loss_scale=scale)',
       "its loss scale, `scale`, is known only at run time"),
      ("unpacked", "Policy(*args)", "unpacked"),
      ("no_name", 'Policy(loss_scale="dynamic")', "no policy name"),
  )
  def test_stays_with_its_reason(self, text, reason):
    decision = policy_call(text)
    self.assertEqual("", decision.why)
    self.assertIn(reason, decision.stays)
    self.assertNotIn("not dynamic", decision.stays)


class StaysWhyTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("v1_optimizer", "mplso.MixedPrecisionLossScaleOptimizer",
       "TF1 graph code"),
      ("contrib_optimizer", "mplso.contrib.LossScaleOptimizer",
       "contrib optimizer and managers"),
      ("contrib_manager", "mplso.contrib.FixedLossScaleManager",
       "contrib optimizer and managers"),
      ("graph_rewrite", "mplso.enable_mixed_precision_graph_rewrite",
       "graph rewrite"),
      ("loss_scale", "mplso.DynamicLossScale", "loss-scale object"),
      ("loss_scale_base", "mplso.LossScale", "loss-scale object"),
  )
  def test_reason(self, target, reason):
    self.assertIn(reason, native_rules.stays_why(target))

  def test_every_name_without_a_keras_counterpart_has_a_reason(self):
    # What `--to native` neither converts nor renames to Keras's stays on
    # mplso, and the report says why.
    for target in set(names.TARGETS.values()):
      if (target == "mplso.keras.LossScaleOptimizer" or
          target in names.NATIVE_POLICY):
        continue
      self.assertNotEqual("", native_rules.stays_why(target), target)


if __name__ == "__main__":
  absltest.main()
