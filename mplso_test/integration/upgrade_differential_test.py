"""The upgrade's differential table: legacy programs run three ways.

`mplso_test/helpers/upgrade_programs.py` generates small legacy Keras
training programs from a covering design over the axes that matter to
`python -m mplso.upgrade` (the constructor's dialect, what sits between
`get_unscaled_gradients` and `apply_gradients`, a restored checkpoint, the
attribute read, module / function / tf.function, a strategy, an overflowing
step, Keras 3 or tf_keras): every pair of axis values is in some program.
`mplso_test/helpers/upgrade_table.py` runs each program

1. unmodified under `python -m mplso.compat` (the reference),
2. converted `--to mplso` and run with plain python: it must equal (1) in
   everything recorded (the weights bit for bit, the loss scale, the
   good-step count, `iterations`, losses, logged gradient norms, the
   attribute read, the optimizer's class);
3. converted `--to native` (under the run's TF_USE_LEGACY_KERAS) and run with
   plain python: it must equal (1), or a report line about the program's
   optimizer must name each quantity that differs (`upgrade_table.unnamed`
   says how); a crash always fails.

The whole table runs once for the class, in six TensorFlow processes (one
per Keras and way) plus three that convert, in a few minutes on 2 cores.
To look at or rerun one program: `python -m
mplso_test.helpers.upgrade_programs --write DIR` (DIR/README.txt says how);
`python -m mplso_test.helpers.upgrade_table` prints every failing cell.
"""

import math
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import pytest

from mplso_test.helpers import upgrade_programs
from mplso_test.helpers import upgrade_table

PROGRAMS = {p.name: p for p in upgrade_programs.programs()}
CASES = [dict(testcase_name=name, name=name) for name in PROGRAMS]


class CoveringDesignTest(parameterized.TestCase):
  """The generator, without running anything."""

  def test_every_pair_of_axis_values_is_in_a_program(self):
    counts = upgrade_programs.pair_counts(list(PROGRAMS.values()))
    axes = upgrade_programs.AXES
    for i, (a, values_a) in enumerate(axes):
      for j, (b, values_b) in enumerate(axes[i + 1:], i + 1):
        for x in values_a:
          for y in values_b:
            self.assertGreater(counts[i, x, j, y], 0, f"{a}={x}, {b}={y}")

  def test_the_design_is_deterministic_and_small(self):
    self.assertEqual(list(PROGRAMS.values()), upgrade_programs.programs())
    # The two biggest axes alone need 10 x 7 programs; then one plain
    # program per Keras and dialect.
    self.assertLen(upgrade_programs.plain_programs(), 12)
    self.assertBetween(len(PROGRAMS), 70 + 12, 80 + 12)

  def test_every_program_and_writer_compiles(self):
    for program in PROGRAMS.values():
      compile(program.text("/checkpoints"), program.name, "exec")
    for keras, dialect in upgrade_programs.writers_needed(
        list(PROGRAMS.values())):
      compile(upgrade_programs.writer_text(keras, dialect, "/checkpoints"),
              dialect, "exec")

  def test_a_bad_axis_value_is_refused(self):
    axes = dict(PROGRAMS[next(iter(PROGRAMS))].axes, dialect="tf22")
    with self.assertRaisesRegex(ValueError, "'dialect': 'tf22'"):
      upgrade_programs.program_text(axes, "/checkpoints")

  def test_differences_compare_every_recorded_quantity(self):
    reference = {"class": "c", "iterations": 5, "loss_scale": 8.,
                 "good_steps": 1, "weights": [[1., "nan"]], "grad_norms": [],
                 "losses": [1.], "reads": {"dynamic": True}}
    self.assertEqual({}, upgrade_table.differences(reference,
                                                   dict(reference)))
    other = dict(reference, iterations=4, weights=[[1., 2.]],
                 reads={"dynamic": False})
    self.assertEqual({"iterations": (5, 4),
                      "weights": ([[1., "nan"]], [[1., 2.]]),
                      "reads.dynamic": (True, False)},
                     upgrade_table.differences(reference, other))
    self.assertEqual(["error"], list(upgrade_table.differences(
        reference, {"error": "Traceback ..."})))

  def test_report_entries_name_quantities(self):
    report = "\n".join([
        "f.py:3: INFO: Changed 'tf.keras.mixed_precision.LossScaleOptimizer'"
        " to 'mplso.keras.LossScaleOptimizer'",
        "    stays on mplso: the program reads `opt.dynamic` (line 9) and a",
        "    checkpoint; Keras 3's class does not advance `iterations`",
        "f.py:4: INFO: Changed 'tf.keras.mixed_precision.set_policy' to 'x'",
        "    the weights"])
    program = PROGRAMS[next(n for n, p in PROGRAMS.items() if p.restores)]
    found = {q: (1, 2) for q in ("iterations", "reads.dynamic", "weights",
                                 "reads.dynamic_counter", "error")}
    self.assertEqual([
        "weights: no report line names it",
        "reads.dynamic_counter: no report line names it",
        "error: the converted program crashed"],
                     upgrade_table.unnamed(program, found, report))


@pytest.mark.slow
class UpgradeDifferentialTest(parameterized.TestCase):
  """Slow: every program three ways (the class's set-up runs them all)."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    folder = tempfile.mkdtemp()
    cls.addClassCleanup(shutil.rmtree, folder, ignore_errors=True)
    cls.table = upgrade_table.run(folder, cls.addClassCleanup)

  def cell(self, name, way):
    program = PROGRAMS[name]
    messages = upgrade_table.failures(self.table, program).get(way)
    return program, messages

  @parameterized.named_parameters(*CASES)
  def test_reference(self, name):
    program, messages = self.cell(name, upgrade_table.REFERENCE)
    if messages:
      self.fail(upgrade_table.describe_cell(self.table, program,
                                            upgrade_table.REFERENCE, messages))
    result = self.table.result(upgrade_table.REFERENCE, program)
    # The overflow is real (a non-finite loss) and the only one: a dynamic
    # scale that restored nothing and met no overflow has not fallen.
    finite = [not isinstance(v, str) and math.isfinite(v)
              for v in result["losses"]]
    self.assertEqual(program.overflows, not all(finite), result["losses"])
    if not program.overflows and not program.restores:
      self.assertGreaterEqual(result["loss_scale"],
                              program.dialect.initial_scale)
    self.assertLen(result["reads"], 1)

  @parameterized.named_parameters(*CASES)
  def test_to_mplso(self, name):
    program, messages = self.cell(name, upgrade_table.MPLSO)
    if messages:
      self.fail(upgrade_table.describe_cell(self.table, program,
                                            upgrade_table.MPLSO, messages))

  @parameterized.named_parameters(*CASES)
  def test_to_native(self, name):
    program, messages = self.cell(name, upgrade_table.NATIVE)
    if messages:
      self.fail(upgrade_table.describe_cell(self.table, program,
                                            upgrade_table.NATIVE, messages))

  def test_batches_leak_nothing(self):
    # Each worker ran one program again after all the others: the same
    # result as its first run, in a fresh process. (The --to mplso batch
    # also runs in the reverse order: test_to_mplso compares across orders.)
    self.assertLen(self.table.batches, 6)
    for (way, keras), batch in self.table.batches.items():
      first = dict(batch.results[batch.repeated], seconds=None)
      self.assertIsNotNone(batch.repeat, (way, keras))
      self.assertEqual(first, dict(batch.repeat, seconds=None), (way, keras))

  def test_writers_changed_the_scale(self):
    # The checkpoints restored hold a scale moved from its initial value
    # (two overflows halved it) and good steps counted.
    self.assertNotEmpty(self.table.writers)
    for (keras, dialect), result in self.table.writers.items():
      context = (keras, dialect, result.get("error"))
      self.assertNotIn("error", result, context)
      self.assertEqual(len(upgrade_programs.WRITER_FACTORS),
                       result["iterations"], context)
      if upgrade_programs.DIALECTS[dialect].dynamic:
        self.assertNotEqual(upgrade_programs.DIALECTS[dialect].initial_scale,
                            result["loss_scale"], context)
        self.assertGreater(result["good_steps"], 0, context)


if __name__ == "__main__":
  absltest.main()
