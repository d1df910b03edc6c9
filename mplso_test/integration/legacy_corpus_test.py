"""Runs the corpus of legacy programs in examples/legacy through mplso.compat.

Each program is run unmodified, in a subprocess, as a user would run it:
`python -m mplso.compat examples/legacy/PROGRAM.py --overflow_step N ...`.
The flag makes the program multiply one batch by a huge factor (as a corrupt
record would) so that its gradients overflow. Every program ends by printing
one line `RESULT {json}` with what it saw:

- `classes`: the optimizer (and loss scale or manager) it trained with,
- `losses`: its losses on clean batches (or before and after `fit`),
- `skipped`: whether the overflowing step left every weight (and, in TF1,
  `global_step`) exactly as it was,
- `overflow_loss_finite`: whether the loss of that batch was finite (it
  must not be: the injection is real),
- `all_finite`: whether every variable is finite at the end,
- for some, `loss_scale_around_overflow`: the scale before and after it,
- under a `tf.distribute` strategy, `replicas` and `replicas_agree`.

Each program is also upgraded once with `python -m mplso.upgrade --to mplso`
and run with plain `python`: it must print the same RESULT as the unmodified
program under the runner (same losses, scales, skips and classes).

docs/legacy-corpus.md lists the programs and the idiom each reproduces.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

ROOT = os.path.abspath(os.path.join(__file__, "..", "..", ".."))
LEGACY = os.path.join(ROOT, "examples", "legacy")
KERAS_3, TF_KERAS = "0", "1"


def case(name, script, *args, keras=KERAS_3, scale_factor=None, expect=None):
  """One run of the corpus.

  Args:
    name: the test id.
    script: the program's file name under examples/legacy.
    *args: its command line (the overflow flag included).
    keras: TF_USE_LEGACY_KERAS for the run: which Keras `tf.keras` is.
    scale_factor: the loss scale after the overflow over the one before
      (0.5 dynamic, 1 fixed), where the program reports it.
    expect: other keys of the program's RESULT and the values they must
      have.

  Returns:
    The parameters of `test_program`, named `name`.
  """
  return dict(testcase_name=name, script=script, args=list(args),
              keras=keras, scale_factor=scale_factor, expect=expect or {})


CORPUS = [
    case("tf1_compat_v1_session", "tf1_compat_v1_session.py",
         "--overflow_step", "10"),
    case("tf1_monitored_session_fixed_scale",
         "tf1_monitored_session_fixed_scale.py", "--overflow_step", "10"),
    case("horovod_wrapping_order", "horovod_wrapping_order.py",
         "--overflow_step", "10"),
    case("contrib_t2t_fixed_manager", "contrib_t2t_loss_scale_manager.py",
         "--loss_scaler", "fixed", "--overflow_step", "10", scale_factor=1.),
    case("contrib_bert_manual_fp16", "contrib_bert_manual_fp16.py",
         "--overflow_step", "10"),
    case("amp_graph_rewrite", "amp_graph_rewrite.py", "--overflow_step", "10"),
    # These start as real TF1 programs do: eager calls (GPU setup, a seed, a
    # library's tf.function) before `disable_eager_execution()`.
    case("tf1_bert_style_gpu_setup", "tf1_bert_style_gpu_setup.py",
         "--overflow_step", "10", expect={"global_step": 39}),
    # BERT's AdamWeightDecayOptimizer makes its moments with get_variable in
    # apply_gradients; its global_step is advanced by hand on every step.
    case("tf1_bert_style_gpu_setup_adamw", "tf1_bert_style_gpu_setup.py",
         "--optimizer", "adamw", "--overflow_step", "10",
         expect={"global_step": 40}),
    case("tf1_towers_traced_preamble", "tf1_towers_traced_preamble.py",
         "--overflow_step", "10", expect={"global_step": 39, "towers": 2}),
    case("keras_tf23_custom_loop", "keras_tf23_custom_loop.py",
         "--overflow_step", "10", scale_factor=.5),
    # tf_keras only: on Keras 3 any optimizer (mplso's or not, float32 too)
    # fails to create its variables inside `strategy.run` in a tf.function
    # unless the program calls `optimizer.build` first, as no TF 2.3
    # program did (docs/legacy-corpus.md).
    case("keras_tf23_mirrored_custom_loop_tf_keras",
         "keras_tf23_mirrored_custom_loop.py", "--overflow_step", "5",
         keras=TF_KERAS),
    case("keras_tf23_get_gradients_keras_3",
         "keras_tf23_get_gradients_trainer.py", "--overflow_step", "10"),
    case("keras_tf23_get_gradients_tf_keras",
         "keras_tf23_get_gradients_trainer.py", "--overflow_step", "10",
         keras=TF_KERAS),
    case("keras_tf22_policy_loss_scale", "keras_tf22_policy_loss_scale.py",
         "--overflow_batch", "3", scale_factor=.5),
    case("keras_tf24_custom_loop", "keras_tf24_custom_loop.py",
         "--overflow_step", "10"),
    case("keras_tf24_official_fixed_scale",
         "keras_tf24_official_compile_fit.py", "--loss_scale", "1024",
         "--overflow_batch", "3"),
    # compile wraps by itself; train_step asks isinstance(optimizer,
    # tf.keras.mixed_precision.LossScaleOptimizer) before scaling.
    case("keras_tf24_custom_train_step_keras_3",
         "keras_tf24_custom_train_step.py", "--overflow_batch", "3",
         scale_factor=.5),
    case("keras_tf24_custom_train_step_tf_keras",
         "keras_tf24_custom_train_step.py", "--overflow_batch", "3",
         keras=TF_KERAS, scale_factor=.5),
    # apply_gradients(grads_and_vars, 1.0): the 1.0 is the wrapped
    # optimizer's clip_norm. tf_keras only: the program's override calls
    # Keras 2's `super().apply_gradients(..., name=name)`, which Keras 3's
    # optimizers do not take, wrapped or not.
    case("keras_tf24_tts_clip_norm_tf_keras",
         "keras_tf24_tts_clip_norm_loop.py", "--overflow_step", "10",
         keras=TF_KERAS, expect={"clip_norms": [1.0]}),
    case("keras_tf24_tts_clip_norm_legacy_optimizer_tf_keras",
         "keras_tf24_tts_clip_norm_loop.py", "--legacy_optimizer",
         "--overflow_step", "10", keras=TF_KERAS,
         expect={"clip_norms": [1.0]}),
    case("keras_tf24_translation_get_gradients_tf_keras",
         "keras_tf24_translation_get_gradients.py", "--overflow_step", "10",
         keras=TF_KERAS),
    # Batch 3 ends an accumulation window: without the skip it would apply.
    case("keras3_gradient_accumulation_fit",
         "keras3_gradient_accumulation_fit.py", "--overflow_batch", "3",
         scale_factor=.5),
    case("keras3_split_protocol", "keras3_split_protocol.py",
         "--overflow_step", "10", scale_factor=.5),
]


# `--to native`: the Keras programs, and whose class each trains on after
# it: Keras's own (the family's module prefix), or mplso's where the report
# must say why it stays.
KERAS_CLASS = {KERAS_3: "keras.", TF_KERAS: "tf_keras."}
NATIVE = {
    "keras_tf23_custom_loop": "mplso.",  # its DynamicLossScale is an object
    # reads TF 2.3's `optimizer.loss_scale` object (its class)
    "keras_tf23_mirrored_custom_loop_tf_keras": "mplso.",
    "keras_tf23_get_gradients_keras_3": "mplso.",  # get_gradients
    "keras_tf23_get_gradients_tf_keras": "mplso.",
    "keras_tf22_policy_loss_scale": "mplso.",  # reads policy.loss_scale
    # unscales under `if self.mixed_precision:`, which the tool cannot tie
    # to the `if` that wraps: not known on every path into `apply_gradients`
    "keras_tf24_custom_loop": "mplso.",
    "keras_tf24_official_fixed_scale": "mplso.",  # fixed scale on Keras 3
    "keras_tf24_custom_train_step_keras_3": "native",
    "keras_tf24_custom_train_step_tf_keras": "native",
    "keras_tf24_tts_clip_norm_tf_keras": "mplso.",  # apply_gradients(g, 1.0)
    "keras_tf24_tts_clip_norm_legacy_optimizer_tf_keras": "mplso.",
    "keras_tf24_translation_get_gradients_tf_keras": "mplso.",
    "keras3_gradient_accumulation_fit": "native",
    "keras3_split_protocol": "native",
}
NATIVE_CASES = [dict(c, expected=NATIVE[c["testcase_name"]])
                for c in CORPUS if c["testcase_name"] in NATIVE]


def _env(keras):
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_USE_LEGACY_KERAS=keras,
              PYTHONPATH=os.pathsep.join(
                  [ROOT, os.environ.get("PYTHONPATH", "")]))


def run_program(script, args, keras):
  """Runs the unmodified program under `python -m mplso.compat`."""
  return subprocess.run(
      [sys.executable, "-m", "mplso.compat", os.path.join(LEGACY, script),
       *args], capture_output=True, text=True, env=_env(keras), timeout=300)


def upgrade_corpus(folder, to="mplso", keras=KERAS_3):
  """Upgrades examples/legacy into `folder`/tree; returns the report text."""
  tree = os.path.join(folder, "tree")
  report = os.path.join(folder, "report.txt")
  proc = subprocess.run(
      [sys.executable, "-m", "mplso.upgrade", "--intree", LEGACY,
       "--outtree", tree, "--reportfile", report, "--to", to],
      capture_output=True, text=True, env=_env(keras), timeout=300)
  if proc.returncode:
    raise AssertionError(proc.stderr)
  with open(report, encoding="utf-8") as f:
    return f.read()


def run_plain(folder, script, args, keras):
  """Runs an upgraded program with plain `python` (no runner)."""
  return subprocess.run(
      [sys.executable, os.path.join(folder, "tree", script), *args],
      capture_output=True, text=True, env=_env(keras), timeout=300)


def result_of(proc):
  """The program's RESULT line, parsed; None when it printed none."""
  lines = [line for line in proc.stdout.splitlines()
           if line.startswith("RESULT ")]
  return json.loads(lines[-1][len("RESULT "):]) if lines else None


@pytest.mark.slow
class LegacyCorpusTest(tf.test.TestCase, parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls._upgraded = tempfile.mkdtemp()
    cls.report = upgrade_corpus(cls._upgraded)
    cls._native, cls.native_report = {}, {}
    for keras in (KERAS_3, TF_KERAS):
      cls._native[keras] = tempfile.mkdtemp()
      cls.native_report[keras] = upgrade_corpus(cls._native[keras], "native",
                                                keras)

  def test_native_cases_are_the_keras_programs(self):
    self.assertLen(NATIVE_CASES, len(NATIVE))
    # docs/upgrade.md gives the split that test_native checks.
    moved = sum(expected == "native" for expected in NATIVE.values())
    with open(os.path.join(ROOT, "docs", "upgrade.md"),
              encoding="utf-8") as f:
      page = " ".join(f.read().split())
    self.assertIn(f"moves {moved} of the {len(NATIVE)} Keras runs", page)
    self.assertIn(f"the other {len(NATIVE) - moved} reports its reason", page)
    for case_ in CORPUS:
      if case_["script"].startswith("keras"):
        self.assertIn(case_["testcase_name"], NATIVE)

  def test_corpus_is_listed_and_legacy(self):
    # Every program of the corpus runs here, the docs list each one, and
    # each is legacy code as written then: it names its idiom in its header
    # and never mentions mplso (only the runner brings it in).
    scripts = {c["script"] for c in CORPUS}
    with open(os.path.join(ROOT, "docs", "legacy-corpus.md"),
              encoding="utf-8") as f:
      page = f.read()
    self.assertGreaterEqual(len(scripts), 10)
    for script in sorted(scripts):
      self.assertIn(f"examples/legacy/{script}", page)
      with open(os.path.join(LEGACY, script), encoding="utf-8") as f:
        code = f.read()
      self.assertStartsWith(code, '"""Corpus: ', script)
      self.assertIn("Style reproduced:", code, script)
      self.assertNotIn("mplso", code.replace("python -m mplso.compat", ""),
                       script)

  def check_result(self, result, scale_factor, expect, context,
                   family="mplso."):
    """The checks every run of a corpus program must pass."""
    self.assertIsNotNone(result, context)
    # It trained with mplso's classes (or, upgraded --to native, with the
    # optimizer class of `family`).
    classes = [c for c in result["classes"] if c != "builtins.NoneType"]
    self.assertNotEmpty(classes)
    if family != "mplso.":
      classes = classes[:1]
    for name in classes:
      self.assertStartsWith(name, family, context)
    # The injected batch overflowed, its step was skipped, and every
    # variable stayed finite.
    self.assertIs(False, result["overflow_loss_finite"], result)
    self.assertIs(True, result["skipped"], result)
    self.assertIs(True, result["all_finite"], result)
    if "replicas" in result:  # Every replica skipped that step together.
      self.assertGreater(result["replicas"], 1)
      self.assertIs(True, result["replicas_agree"], result)
    if scale_factor is not None:
      before, after = result["loss_scale_around_overflow"]
      self.assertEqual(before * scale_factor, after)
    for key, value in expect.items():
      self.assertEqual(value, result[key], context)
    # The loss fell.
    losses = result["losses"]
    self.assertTrue(np.isfinite(losses).all(), losses)
    first = np.mean(losses[:3]) if len(losses) > 2 else losses[0]
    last = np.mean(losses[-3:]) if len(losses) > 2 else losses[-1]
    self.assertLess(last, 0.6 * first, losses)

  @parameterized.named_parameters(*CORPUS)
  def test_program(self, script, args, keras, scale_factor, expect):
    proc = run_program(script, args, keras)
    context = (f"{script} {' '.join(args)} (TF_USE_LEGACY_KERAS={keras})\n"
               f"{proc.stderr[-3000:]}")
    self.assertEqual(0, proc.returncode, context)
    result = result_of(proc)
    self.check_result(result, scale_factor, expect,
                      context + proc.stdout[-2000:])
    report = re.search(r"^mplso\.compat: (.*)$", proc.stderr, re.M)
    if report is not None:  # The runner's report at exit names them too.
      self.assertStartsWith(report.group(1), "used mplso.", context)
    # Upgraded with `python -m mplso.upgrade`, the program runs with plain
    # python, builds the same classes and skips, scales and counts steps as
    # it did under the runner. Losses pass the same checks but are not
    # compared: several programs draw their first weights unseeded, as the
    # originals did, so no two runs of them share a loss curve.
    upgraded = run_plain(self._upgraded, script, args, keras)
    upgraded_context = f"upgraded {context}\n{upgraded.stderr[-3000:]}"
    self.assertEqual(0, upgraded.returncode, upgraded_context)
    upgraded_result = result_of(upgraded)
    self.check_result(upgraded_result, scale_factor, expect,
                      upgraded_context)
    self.assertEqual({k: v for k, v in result.items() if k != "losses"},
                     {k: v for k, v in upgraded_result.items()
                      if k != "losses"}, upgraded_context)
    self.assertLen(upgraded_result["losses"], len(result["losses"]))

  @parameterized.named_parameters(*NATIVE_CASES)
  def test_native(self, script, args, keras, scale_factor, expect, expected):
    # Upgraded --to native for the Keras it runs on, the program runs with
    # plain python: on Keras's own class where the tool converted it, on
    # mplso's where the report says why not.
    proc = run_plain(self._native[keras], script, args, keras)
    context = (f"native {script} {' '.join(args)} (TF_USE_LEGACY_KERAS="
               f"{keras})\n{proc.stderr[-3000:]}")
    self.assertEqual(0, proc.returncode, context)
    family = KERAS_CLASS[keras] if expected == "native" else expected
    self.check_result(result_of(proc), scale_factor, expect, context, family)
    section = self.native_report[keras].split(
        f"Processing file '{os.path.join(LEGACY, script)}'")[1].split(
            "Processing file")[0]
    if expected == "native":
      self.assertIn("Keras's own", section)
      if keras == KERAS_3:  # Every move to Keras 3's class says what differs.
        self.assertIn("does not advance `iterations`", section)
    else:
      self.assertIn("stays on mplso: ", section)


if __name__ == "__main__":
  absltest.main()
