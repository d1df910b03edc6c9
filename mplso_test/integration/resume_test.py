"""Exact resume: a run killed with SIGKILL and restored ends bit-identical.

For each kind of `resume_worker` (Keras 3 wrapper with `CheckpointManager`,
TF1 wrapper under `tf.function` with `CheckpointManager`, TF1 wrapper in
graph mode with `Saver`, Keras 3 `fit` with `BackupAndRestore`), three
worker processes run: an uninterrupted one; one that is killed with SIGKILL
once it has saved a few checkpoints; and a fresh one that restores the last
checkpoint and finishes. The resumed run's weights, slots, loss scale and
counters must equal the uninterrupted run's exactly. The training includes
skipped (NaN) steps, so the loss scale and its counters move.
"""

from __future__ import annotations

import json
import os
import signal

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

from mplso_test.helpers import processes
from mplso_test.helpers import resume_kinds

KILL_AFTER = 3  # Checkpoints saved before the SIGKILL.


class ResumeTest(tf.test.TestCase, parameterized.TestCase):

  def _start(self, kind: str, directory: str,
             hang_after: int = -1) -> processes.Worker:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
           "CUDA_VISIBLE_DEVICES": "",
           "RESUME_WORKER_HANG_AFTER": str(hang_after)}
    return processes.start("mplso_test.helpers.workers.resume_worker", kind,
                           directory, env=env, add_cleanup=self.addCleanup)

  def _result(self, worker: processes.Worker) -> tuple[dict, list[int]]:
    processes.finish([worker])
    return json.loads(processes.last_line(worker.output())), _saved(worker)

  def _kill_after_saves(self, worker: processes.Worker, count: int) -> None:
    processes.wait_for([worker], lambda: count in _saved(worker),
                       f"checkpoint {count}")
    os.kill(worker.process.pid, signal.SIGKILL)
    worker.process.wait()
    self.assertEqual(worker.returncode(), -signal.SIGKILL)

  @parameterized.named_parameters([(kind, kind)
                                   for kind in resume_kinds.KINDS])
  def test_killed_run_resumes_bit_identical(self, kind):
    reference_dir = self.create_tempdir().full_path
    resumed_dir = self.create_tempdir().full_path
    # The uninterrupted run and the run to kill go side by side.
    reference = self._start(kind, reference_dir)
    doomed = self._start(kind, resumed_dir, hang_after=KILL_AFTER)
    self._kill_after_saves(doomed, KILL_AFTER)
    expected, expected_saved = self._result(reference)
    resumed, saved = self._result(self._start(kind, resumed_dir))
    # The fresh process restored a checkpoint: it did not start over.
    total = resume_kinds.EPOCHS if kind == "keras3_fit" else (
        resume_kinds.STEPS)
    self.assertEqual(expected_saved, list(range(1, total + 1)))
    self.assertEqual(saved, list(range(KILL_AFTER + 1, total + 1)))
    # Bit-identical: JSON holds each float32 value exactly.
    self.assertEqual(sorted(resumed), sorted(expected))
    for name in expected:
      self.assertEqual(resumed[name], expected[name], msg=name)


def _saved(worker: processes.Worker) -> list[int]:
  """The steps (epochs) after which it printed `saved`."""
  return [int(line.split()[1]) for line in worker.lines()
          if line.startswith("saved ")]


if __name__ == "__main__":
  absltest.main()
