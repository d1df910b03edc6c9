"""Worker processes of multi-process tests, waited on by events.

A test waits for what its workers print, or for their exit: a loaded
machine makes workers slow, never wrong, so no step of a test has a time
limit of its own. One bound stays, against a hang: `HANG` seconds in which
no worker printed anything (stdout or stderr) and none exited. Then every
worker is killed and the test fails, saying so.

Workers get a pipe as stdin and call `exit_with_parent()`: at the pipe's end
(the test process exited, or was killed) they exit, so none outlives it.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

# Seconds in which no worker printed or exited: they hang.
HANG = 600.
# Seconds between two looks at the workers.
_POLL = 0.05
ROOT = os.path.abspath(os.path.join(__file__, "..", "..", ".."))


def exit_with_parent() -> None:
  """In a worker: exits the process when the test process is gone.

  A thread reads stdin, the test's pipe, to its end; the end comes when the
  test process exits, however it exits.
  """

  def watch():
    sys.stdin.read()
    os._exit(3)  # pylint: disable=protected-access

  threading.Thread(target=watch, daemon=True).start()


class Worker:
  """A worker process (`python -m MODULE ARGS`) whose output goes to files."""

  def __init__(self, module: str, *args: str, env: dict[str, str],
               name: str = "worker"):
    self.name = name
    self._directory = tempfile.mkdtemp()
    self._stdout = os.path.join(self._directory, "out")
    self._stderr = os.path.join(self._directory, "err")
    with open(self._stdout, "wb") as out, open(self._stderr, "wb") as err:
      self.process = subprocess.Popen(
          [sys.executable, "-m", module, *args], cwd=ROOT, env=env,
          stdin=subprocess.PIPE, stdout=out, stderr=err)

  def output(self) -> str:
    """What it printed to stdout so far."""
    with open(self._stdout, encoding="utf-8", errors="replace") as f:
      return f.read()

  def lines(self) -> list[str]:
    """The complete lines it printed to stdout so far."""
    return self.output().split("\n")[:-1]

  def errors(self) -> str:
    """The end of what it printed to stderr."""
    with open(self._stderr, encoding="utf-8", errors="replace") as f:
      return f.read()[-4000:]

  def returncode(self) -> int | None:
    """Its exit status, or None while it runs."""
    return self.process.poll()

  def progress(self) -> tuple[int, int, int | None]:
    """What changes while it does anything that shows: output and exit."""
    return (os.path.getsize(self._stdout), os.path.getsize(self._stderr),
            self.returncode())

  def kill(self) -> None:
    """Kills it (a no-op once it has exited) and reaps it."""
    self.process.kill()
    self.process.wait()

  def close(self) -> None:
    """Kills it if it runs, and removes its files."""
    self.kill()
    self.process.stdin.close()
    shutil.rmtree(self._directory, ignore_errors=True)


def start(module: str, *args: str, env: dict[str, str],
          add_cleanup: Callable[..., None], name: str = "worker") -> Worker:
  """Starts a `Worker`, closed by `add_cleanup` whatever happens."""
  worker = Worker(module, *args, env=env, name=name)
  add_cleanup(worker.close)
  return worker


def wait_for(workers: Sequence[Worker], condition: Callable[[], bool],
             what: str, may_exit: bool = False) -> None:
  """Returns once `condition()` holds; fails if it cannot come.

  It cannot come once a worker failed (exited with an error), once a worker
  exited while `condition` does not hold (unless `may_exit`), or when the
  workers hang (`HANG`). Then every worker is killed first.

  Args:
    workers: The workers `condition` depends on.
    condition: What to wait for, from their output or exit.
    what: Says what was waited for, in a failure's message.
    may_exit: Whether a worker may end well before `condition` holds.

  Raises:
    AssertionError: If `condition` cannot come.
  """
  seen, since = None, time.monotonic()
  while not condition():
    for worker in workers:
      code = worker.returncode()
      if code is not None and (code != 0 or not may_exit):
        _fail(workers, f"{worker.name} exited with {code} before {what}:\n"
              f"{worker.errors()}")
    progress = [worker.progress() for worker in workers]
    if progress != seen:
      seen, since = progress, time.monotonic()
    elif time.monotonic() - since > HANG:
      _fail(workers, f"While waiting for {what}, no worker printed or "
            f"exited for {HANG:.0f} s: they hang.")
    time.sleep(_POLL)


def finish(workers: Sequence[Worker]) -> list[str]:
  """Waits until every worker ended well; returns what each one printed.

  A worker that fails fails the test at once, and the others are killed:
  none of them waits for a peer that is gone.
  """
  wait_for(workers, lambda: all(w.returncode() == 0 for w in workers),
           "the workers' end", may_exit=True)
  return [worker.output() for worker in workers]


def last_line(output: str) -> str:
  """The last line a worker printed: where workers print their result."""
  return output.strip().splitlines()[-1]


def _fail(workers: Sequence[Worker], message: str) -> None:
  for worker in workers:
    worker.kill()
  raise AssertionError(message)
