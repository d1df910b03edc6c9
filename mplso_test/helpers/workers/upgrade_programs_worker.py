"""Runs many generated upgrade programs in one process, each in isolation.

Run as `python -m mplso_test.helpers.workers.upgrade_programs_worker
[--exit_with_parent] [--repeat INDEX] FILE...` (plain, for upgraded
programs) or under `python -m mplso.compat -m ...` (the legacy programs'
reference); with
`--exit_with_parent` (as the tests start it) it exits when its stdin ends
(`processes.exit_with_parent`). Each FILE runs as `__main__` with
`runpy.run_path`, in a fresh namespace, after a reset of what programs
change for the whole process: Keras's session (layer names, uids), the
global dtype policy, the random seeds, and `mplso.compat.install()` when an
upgraded program calls it (undone after it, in a plain run).

For each FILE it prints one line `RESULT {json}` (upgrade_programs.py says
what a program leaves in `_result`): its path, the error's traceback if it
raised, else the optimizer's class, the model's weights, `iterations`, the
loss scale and good-step count read from whichever class it is, the
program's own losses, gradient norms and attribute reads, made JSON
(non-finite floats as "nan", "inf", "-inf"; other objects by class name),
and the seconds it took.
Last, it runs FILE number `--repeat` (default 0, the first) once more and
prints it as `REPEAT {json}`: run after all the others, it must equal its
first run, or state leaks from one program into the next.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import runpy
import sys
import time
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np
import tensorflow as tf

from mplso_test.helpers import processes


def to_json(value):
  """`value` as JSON-ready data; objects other than data by class name."""
  if value is None or isinstance(value, (bool, str)):
    return value
  if isinstance(value, (int, np.integer)):
    return int(value)
  if isinstance(value, (float, np.floating)):
    value = float(value)
    return value if math.isfinite(value) else repr(value)
  if isinstance(value, np.ndarray):
    return to_json(value.tolist())
  if isinstance(value, dict):
    return {str(k): to_json(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [to_json(v) for v in value]
  if hasattr(value, "numpy") and hasattr(value, "dtype"):  # Tensors, vars.
    return to_json(np.asarray(value.numpy()))
  return f"<{type(value).__module__}.{type(value).__qualname__}>"


def loss_scale(opt):
  """The current loss scale, whichever class `opt` is."""
  value = getattr(opt, "loss_scale", None)  # mplso's, tf_keras's.
  if value is None and hasattr(opt, "dynamic_scale"):  # Keras 3's.
    value = opt.dynamic_scale if opt.built else opt.initial_scale
  return value() if callable(value) else value


def good_steps(opt):
  """The good steps counted towards growing the scale (None: fixed)."""
  if hasattr(opt, "dynamic_counter"):  # mplso's, tf_keras's.
    return opt.dynamic_counter
  if getattr(opt, "built", False) and hasattr(opt, "step_counter"):
    return opt.step_counter  # Keras 3's.
  return None


def describe(result) -> dict:
  """What the table compares, from a program's `_result`."""
  model, opt = result["model"], result["optimizer"]
  return {
      "class": f"{type(opt).__module__}.{type(opt).__qualname__}",
      "weights": to_json(model.get_weights()),
      "iterations": to_json(opt.iterations),
      "loss_scale": to_json(loss_scale(opt)),
      "good_steps": to_json(good_steps(opt)),
      "losses": to_json(result["losses"]),
      "grad_norms": to_json(result["grad_norms"]),
      "reads": to_json(result["reads"]),
  }


def _compat_installed() -> bool:
  install = sys.modules.get("mplso._src.compat.install")
  return install is not None and install.installed()


def _reset() -> None:
  gc.collect()
  tf.keras.backend.clear_session()
  tf.keras.mixed_precision.set_global_policy("float32")
  tf.keras.utils.set_random_seed(0)


def run(path: str) -> dict:
  """Runs the program at `path`; returns its JSON-ready result."""
  _reset()
  installed = _compat_installed()
  out = {"path": path}
  start = time.perf_counter()
  try:
    namespace = runpy.run_path(path, run_name="__main__")
    out.update(describe(namespace["_result"]))
  except BaseException:  # pylint: disable=broad-except
    out["error"] = traceback.format_exc()[-4000:]
  finally:
    if not installed and _compat_installed():
      sys.modules["mplso._src.compat.install"].uninstall()
  out["seconds"] = round(time.perf_counter() - start, 2)
  return out


def main(argv) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m mplso_test.helpers.workers.upgrade_programs_worker")
  parser.add_argument("--exit_with_parent", action="store_true",
                      help="exit when stdin ends (the test is gone)")
  parser.add_argument("--repeat", type=int, default=0, metavar="INDEX",
                      help="the FILE to run again at the end (default 0)")
  parser.add_argument("paths", nargs="+", metavar="FILE")
  args = parser.parse_args(argv)
  if args.exit_with_parent:
    processes.exit_with_parent()
  for path in args.paths:
    print("RESULT " + json.dumps(run(path)), flush=True)
  print("REPEAT " + json.dumps(run(args.paths[args.repeat])), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
