"""Where a wrapper's added time goes, op type by op type, from TF's profiler.

    python -m benchmarks.op_profile tf_keras_sgd_10vars [--rounds 6]
        [--steps 10] [--top 8] [--quick]

Builds one scenario of `catalog.MATRIX` bare, with TF's wrapper and with
mplso, in this process, and profiles them in turn, round after round
(`tf.profiler.experimental`, host events): each round records `--steps`
steps of each variant. From the trace it sums, per step, the time of every
op type (op events are named `name:Type`; oneDNN's `_Mkl` kernels count as
the op they run) and counts the executor's dispatches
(`ExecutorState::Process` events: each runs a node that was ready, handed
to a thread of the inter-op pool, and the cheap nodes it makes ready,
inline), then reports each wrapper's difference from the bare step, median
over the rounds.

The profiler slows every op, so these are not step times (the benchmarks
time steps without it); they say which op types and how many dispatches a
wrapper adds, and which of its ops cost the most. `--quick` runs two
rounds of two steps: it checks the harness.
"""

from __future__ import annotations

import argparse
import collections
import glob
import importlib
import statistics
import sys
import tempfile

from benchmarks import builders
from benchmarks import catalog
from benchmarks import worker

DISPATCH = "ExecutorState::Process"
VARIANTS = ("bare", "tf", "mplso")
# A call of a traced function is an event named `name:__inference_...`: its
# span holds its ops, which have their own events.
_FUNCTION_PREFIXES = ("__inference_", "__forward_", "__backward_")
FUNCTION_CALL = "(function call)"
# oneDNN builds of TensorFlow run some ops as kernels of their own, named by a
# prefix on the op's type; the reports count them as the op they run.
_KERNEL_PREFIXES = ("_MklNative", "_Mkl")


def op_type(event_name: str) -> str:
  """The op type of a profiler event `name:Type`, whatever kernel ran it."""
  op = event_name.rsplit(":", 1)[1].strip()
  if op.startswith(_FUNCTION_PREFIXES):
    return FUNCTION_CALL  # Its own ops are counted apart.
  for prefix in _KERNEL_PREFIXES:
    if op.startswith(prefix):
      return op[len(prefix):]
  return op


def _xplane_pb2():
  """TF's profiler trace format (private: only this benchmark reads it)."""
  try:
    return importlib.import_module(
        "tensorflow.tsl.profiler.protobuf.xplane_pb2")
  except ImportError as e:
    raise ImportError(
        "benchmarks.op_profile reads TF's profiler trace with "
        "tensorflow.tsl.profiler.protobuf.xplane_pb2, which this TensorFlow "
        "does not have where 2.21 has it.") from e


def read_trace(logdir: str, steps: int) -> dict:
  """Per step: microseconds by op type, and the executor's dispatches."""
  xplane_pb2 = _xplane_pb2()
  op_us, op_runs, dispatches = collections.Counter(), collections.Counter(), 0
  for path in glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True):
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
      space.ParseFromString(f.read())
    for plane in space.planes:
      if "host" not in plane.name.lower():
        continue
      names = plane.event_metadata
      for line in plane.lines:
        for event in line.events:
          name = names[event.metadata_id].name
          if name == DISPATCH:
            dispatches += 1
          elif ":" in name and "::" not in name:
            op = op_type(name)
            op_us[op] += event.duration_ps / 1e6
            op_runs[op] += 1
  return {"op_us": {k: v / steps for k, v in op_us.items()},
          "op_runs": {k: v / steps for k, v in op_runs.items()},
          "dispatches": dispatches / steps}


def _profile(step, steps: int) -> dict:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as logdir:
    tf.profiler.experimental.start(logdir)
    try:
      for _ in range(steps):
        step()
    finally:
      tf.profiler.experimental.stop()
    return read_trace(logdir, steps)


def _median(runs: list[dict]) -> dict:
  medians = {"dispatches": statistics.median(r["dispatches"] for r in runs)}
  for key in ("op_us", "op_runs"):
    types = set().union(*(r[key] for r in runs))
    medians[key] = {t: statistics.median(r[key].get(t, 0.0) for r in runs)
                    for t in types}
  return medians


def _difference(wrapped: dict, bare: dict) -> dict:
  difference = {"dispatches": wrapped["dispatches"] - bare["dispatches"]}
  for key in ("op_us", "op_runs"):
    types = set(wrapped[key]) | set(bare[key])
    difference[key] = {t: wrapped[key].get(t, 0.0) - bare[key].get(t, 0.0)
                       for t in types}
  return difference


def measure(name: str, rounds: int = 6, steps: int = 10,
            warmup: int = 20) -> dict:
  """Profiles scenario `name`; returns each variant's medians and additions."""
  scenario = catalog.MATRIX_BY_NAME[name]
  with builders.runtime_settings():
    built = worker.build_all(scenario.family, scenario.model,
                             scenario.jit_compile, VARIANTS,
                             scenario.optimizer)
    try:
      for b in built.values():
        for _ in range(warmup):
          b.step()
      runs = {v: [] for v in VARIANTS}
      for r in range(rounds):
        order = VARIANTS[r % 3:] + VARIANTS[:r % 3]  # Each starts a round.
        for v in order:
          runs[v].append(_profile(built[v].step, steps))
    finally:
      worker.close_all(built)
  medians = {v: _median(runs[v]) for v in VARIANTS}
  added = {v: _difference(medians[v], medians["bare"]) for v in ("tf", "mplso")}
  return {"scenario": name, "rounds": rounds, "steps": steps,
          "medians": medians, "added": added}


def describe(result: dict, top: int = 8) -> str:
  """A few lines of Markdown for a result of `measure`."""
  m, a = result["medians"], result["added"]
  lines = [f"{result['scenario']} (under the profiler, per step, median of "
           f"{result['rounds']} rounds of {result['steps']} steps):",
           "",
           f"- executor dispatches: bare {m['bare']['dispatches']:.1f}, "
           f"TF's wrapper {a['tf']['dispatches']:+.1f}, "
           f"mplso {a['mplso']['dispatches']:+.1f}"]
  for v, label in (("tf", "TF's wrapper"), ("mplso", "mplso")):
    op_us = {t: us for t, us in a[v]["op_us"].items() if t != FUNCTION_CALL}
    ops = sorted(op_us.items(), key=lambda kv: -abs(kv[1]))[:top]
    runs = sorted(((t, n) for t, n in a[v]["op_runs"].items() if n),
                  key=lambda kv: (-abs(kv[1]), kv[0]))[:top]
    lines.append(f"- {label}: op time {sum(op_us.values()):+.0f} us; " +
                 ", ".join(f"{t} {us:+.0f}" for t, us in ops))
    lines.append("  - ops run: " + ", ".join(f"{t} {n:+.1f}" for t, n in runs))
  return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("scenario", help="a name of catalog.MATRIX")
  parser.add_argument("--rounds", type=int, default=6)
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--top", type=int, default=8,
                      help="how many op types to list per wrapper")
  parser.add_argument("--quick", action="store_true",
                      help="two rounds of two steps: the harness")
  args = parser.parse_args(argv)
  try:
    catalog.check_names([args.scenario], catalog.MATRIX_BY_NAME)
  except ValueError as e:
    parser.error(str(e))
  catalog.let_tf1_sessions_cluster_on_cpu()
  if args.quick:
    result = measure(args.scenario, rounds=2, steps=2, warmup=2)
  else:
    result = measure(args.scenario, args.rounds, args.steps)
  print(describe(result, args.top))
  return 0


if __name__ == "__main__":
  sys.exit(main())
