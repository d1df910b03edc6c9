"""Multi-worker fault: a killed and restarted two-worker run ends bit-identical.

Two worker processes (`mplso_test.helpers.workers.multiworker_fault_worker`)
train the TF1 wrapper and the Keras 3 wrapper under MultiWorkerMirroredStrategy,
checkpointing after every step; worker 1's rows of two batches hold a NaN and
an Inf, so both workers skip those steps together. One worker is killed with
SIGKILL once both have saved checkpoint `KILL_AT`; the other one cannot take
a step without its peer, and is killed too after `SURVIVOR_GRACE` seconds if
it has not failed by then, as a cluster manager would restart the job. Both
are restarted with the same `TF_CONFIG` (so on the same ports, which must be
free again), restore the chief's checkpoint and finish. Their weights, slots,
loss scale and counters must equal, after every step and exactly, those of
an uninterrupted two-worker run (started once, alongside the first case),
and no process or listening port may be left.
"""

from __future__ import annotations

from collections.abc import Callable
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

from mplso_test.helpers import distribute_families
from mplso_test.helpers import processes
from mplso_test.helpers import testing

KILL_AT = 3  # Steps done (batch 1's NaN among them) when one worker dies.
# Seconds the other worker gets to fail on its own before it is killed.
SURVIVOR_GRACE = 2.
STEPS = len(distribute_families.BATCHES)


def _saved(worker: processes.Worker) -> dict[int, dict]:
  """The state a worker printed after each checkpoint, by steps done."""
  states = {}
  for line in worker.lines():
    if line.startswith("saved "):
      _, count, state = line.split(" ", 2)
      states[int(count)] = json.loads(state)
  return states


def _port_in_use(port: int) -> bool:
  """Returns whether something listens on `port` of 127.0.0.1.

  Connections left in TIME_WAIT do not count: the probe reuses the address,
  as gRPC's servers do.
  """
  with socket.socket() as s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      s.bind(("127.0.0.1", port))
    except OSError:
      return True
  return False


def _processes_naming(text: str) -> list[str]:
  """The command lines of this machine's live processes that contain `text`."""
  found = []
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        command = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # It ended meanwhile.
      continue
    if text in command:
      found.append(f"{pid}: {command}")
  return found


def _start_cluster(directory: str, ports: list[int],
                   add_cleanup: Callable[..., None],
                   hang: dict[int, int] | None = None
                   ) -> list[processes.Worker]:
  """Starts a two-worker cluster on `ports` that checkpoints to `directory`.

  Args:
    directory: The chief's checkpoint directory.
    ports: Worker 0's and worker 1's.
    add_cleanup: Registers a function to call after the test (or class).
    hang: Maps a worker's index to the step after which it waits to be
      killed.

  Returns:
    The two workers.
  """
  workers = []
  for index in range(2):
    env = testing.worker_env(ports, index)
    env.pop("FAULT_WORKER_HANG_AFTER", None)
    if hang and index in hang:
      env["FAULT_WORKER_HANG_AFTER"] = str(hang[index])
    workers.append(processes.start(
        "mplso_test.helpers.workers.multiworker_fault_worker", directory,
        env=env, add_cleanup=add_cleanup, name=f"worker {index}"))
  return workers


@pytest.mark.multiworker
class MultiWorkerFaultTest(tf.test.TestCase, parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # One uninterrupted run serves every case; it runs alongside the first.
    cls.reference_dir = tempfile.mkdtemp()
    cls.addClassCleanup(shutil.rmtree, cls.reference_dir, ignore_errors=True)
    # Four distinct ports; every case restarts its cluster on the same two.
    ports = testing.free_ports(4)
    cls.reference_ports, cls.fault_ports = ports[:2], ports[2:]
    cls.reference = _start_cluster(cls.reference_dir, cls.reference_ports,
                                   cls.addClassCleanup)
    cls.reference_states = None

  def _reference_states(self) -> dict[int, dict]:
    """Returns the uninterrupted run's states, by steps done.

    Waits for the run the first time, and checks that both workers went
    through the same states.
    """
    cls = type(self)
    if cls.reference_states is None:
      saved = self._finish(cls.reference)
      for worker in cls.reference:
        self.assertEqual(worker.lines()[0], "restored 0")
      for states in saved:
        self.assertEqual(sorted(states), list(range(1, STEPS + 1)))
      for count, state in saved[1].items():
        self.assertEqual(state, saved[0][count], msg=f"worker 1, {count}")
      self.assertEmpty(_processes_naming(cls.reference_dir))
      self._assert_free(cls.reference_ports)
      cls.reference_states = saved[0]
    return cls.reference_states

  def _wait_for_checkpoint(self, workers: list[processes.Worker],
                           count: int) -> None:
    """Waits until every worker has saved the checkpoint of step `count`."""
    processes.wait_for(workers,
                       lambda: all(count in _saved(w) for w in workers),
                       f"checkpoint {count}")

  def _finish(self, workers: list[processes.Worker]) -> list[dict[int, dict]]:
    """Waits for both workers to end well; returns what each one saved."""
    processes.finish(workers)
    return [_saved(worker) for worker in workers]

  def _assert_free(self, ports: list[int]) -> None:
    for port in ports:
      self.assertFalse(_port_in_use(port),
                       f"Port {port} is still listened on.")

  @parameterized.named_parameters(("chief_killed", 0), ("worker_killed", 1))
  def test_restarted_cluster_resumes_bit_identical(self, victim):
    fault_dir = self.create_tempdir().full_path
    ports = self.fault_ports
    self._assert_free(ports)
    doomed = _start_cluster(fault_dir, ports, self.addCleanup,
                            hang={victim: KILL_AT})
    # Both have saved checkpoint KILL_AT, so it is the chief's latest.
    self._wait_for_checkpoint(doomed, KILL_AT)
    victim_worker, survivor = doomed[victim], doomed[1 - victim]
    self.assertTrue(_port_in_use(ports[victim]))
    os.kill(victim_worker.process.pid, signal.SIGKILL)
    victim_worker.process.wait()
    self.assertEqual(victim_worker.process.returncode, -signal.SIGKILL)
    try:
      survivor.process.wait(SURVIVOR_GRACE)
    except subprocess.TimeoutExpired:
      survivor.kill()
    # Killed, or failed in its collective: it took no step alone.
    self.assertNotEqual(survivor.process.returncode, 0)
    self.assertEqual(max(_saved(survivor)), KILL_AT)
    self.assertEmpty(_processes_naming(fault_dir))
    self._assert_free(ports)

    # The same TF_CONFIG, so the same ports.
    resumed = _start_cluster(fault_dir, ports, self.addCleanup)
    resumed_saved = self._finish(resumed)
    expected = self._reference_states()
    # It really resumed: from the checkpoint, not from scratch.
    for worker, saved in zip(resumed, resumed_saved):
      self.assertEqual(worker.lines()[0], f"restored {KILL_AT}")
      self.assertEqual(sorted(saved), list(range(KILL_AT + 1, STEPS + 1)))
    # Bit-identical (JSON holds each float32 value exactly) after every
    # step, on each worker, before the kill and after the restart: the
    # first step after the restart shows the restored state.
    for worker, saved in [("resumed 0", resumed_saved[0]),
                          ("resumed 1", resumed_saved[1]),
                          ("killed run's survivor", _saved(survivor))]:
      for count, state in saved.items():
        self.assertEqual(state, expected[count], msg=f"{worker}, {count}")

    final = expected[STEPS]
    self.assertEqual(sorted(final),
                     sorted(distribute_families.MOMENTUM_FAMILIES))
    for family, state in final.items():
      with self.subTest(family=family):
        # Not vacuous: the run trained, skipped two steps and has slots.
        for name, value in distribute_families.EXPECTED.items():
          if name in state:
            self.assertEqual(state[name], value, msg=name)
        self.assertEqual(state["done"], STEPS)
        self.assertTrue(np.any(state["slot:momentum"]))

    # Nothing left: every worker exited, and its port is free.
    self.assertEmpty(_processes_naming(fault_dir))
    self._assert_free(ports)

if __name__ == "__main__":
  absltest.main()
