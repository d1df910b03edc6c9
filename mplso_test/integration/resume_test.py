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
import subprocess
import sys
import time

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

from mplso_test.helpers import resume_kinds

TIMEOUT = 60  # Seconds for one worker; it takes a few.
KILL_AFTER = 3  # Checkpoints saved before the SIGKILL.
ROOT = os.path.abspath(os.path.join(__file__, "..", "..", ".."))


class ResumeTest(tf.test.TestCase, parameterized.TestCase):

  def _start(self, kind: str, directory: str, pause: float = 0.):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
           "CUDA_VISIBLE_DEVICES": "", "RESUME_WORKER_PAUSE": str(pause)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "mplso_test.helpers.workers.resume_worker", kind,
         directory],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    # Killed whatever happens (a no-op once it has exited), then reaped.
    self.addCleanup(worker.wait, TIMEOUT)
    self.addCleanup(worker.kill)
    self.addCleanup(worker.stdout.close)
    self.addCleanup(worker.stderr.close)
    return worker

  def _result(self, worker) -> tuple[dict, list[int]]:
    try:
      stdout, stderr = worker.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
      worker.kill()
      self.fail(f"Worker did not finish in {TIMEOUT} s; it was killed.")
    self.assertEqual(worker.returncode, 0, stderr[-4000:])
    lines = stdout.strip().splitlines()
    saved = [int(line.split()[1]) for line in lines if line.startswith(
        "saved ")]
    return json.loads(lines[-1]), saved

  def _kill_after_saves(self, worker, count: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    seen = 0
    while seen < count:
      self.assertLess(time.monotonic(), deadline, "Worker never checkpointed.")
      line = worker.stdout.readline()
      if not line:
        self.fail(f"Worker exited before {count} checkpoints: "
                  f"{worker.stderr.read()[-4000:]}")
      seen += line.startswith("saved ")
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(TIMEOUT)
    self.assertEqual(worker.returncode, -signal.SIGKILL)

  @parameterized.named_parameters([(kind, kind)
                                   for kind in resume_kinds.KINDS])
  def test_killed_run_resumes_bit_identical(self, kind):
    reference_dir = self.create_tempdir().full_path
    resumed_dir = self.create_tempdir().full_path
    # The uninterrupted run and the run to kill go side by side.
    reference = self._start(kind, reference_dir)
    doomed = self._start(kind, resumed_dir, pause=0.3)
    self._kill_after_saves(doomed, KILL_AFTER)
    expected, expected_saved = self._result(reference)
    resumed, saved = self._result(self._start(kind, resumed_dir))
    # The fresh process restored a checkpoint: it did not start over.
    total = resume_kinds.EPOCHS if kind == "keras3_fit" else (
        resume_kinds.STEPS)
    self.assertEqual(expected_saved, list(range(1, total + 1)))
    self.assertGreater(saved[0], KILL_AFTER - 1)
    self.assertEqual(saved[-1], total)
    # Bit-identical: JSON holds each float32 value exactly.
    self.assertEqual(sorted(resumed), sorted(expected))
    for name in expected:
      self.assertEqual(resumed[name], expected[name], msg=name)


if __name__ == "__main__":
  absltest.main()
