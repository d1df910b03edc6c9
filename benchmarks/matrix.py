"""The optimizer matrix: every family x optimizer x size, with and without XLA.

    python -m benchmarks.matrix                 # all 48 scenarios, ~50 min
    python -m benchmarks.matrix --quick         # minutes; timings are noise
    python -m benchmarks.matrix --filter adam --processes 1
    python -m benchmarks.matrix --scenarios tf1_adam_10vars,keras3_sgd_200vars

Times `catalog.MATRIX` in fresh processes, one at a time, each holding one
family with or without XLA (`process_groups`). Every scenario runs four
variants interleaved: bare, barrier (the bare optimizer made to wait for every
gradient, which skipping needs), TF's wrapper and mplso; so each wrapper's
added time, and its time beyond the barrier, come from steps run moments
apart. Medians over the processes are checked against three goals: mplso's
added time at most 0.75x TF's wrapper's; beyond the barrier, at most 0.5x
TF's; for the TF1 MLP, within 2x of the bandwidth floor (one read of the
gradient bytes for the check, one read and one write for the unscale, at the
bandwidth of a scaled copy measured in the same process). Writes
`matrix.json` and `matrix.md` into `docs/benchmarks/` (or `--out`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time

from benchmarks import catalog
from benchmarks import report
from benchmarks import run
from benchmarks import timing

VARIANTS = ("bare", catalog.BARRIER, "tf", "mplso")
SETTINGS = timing.Settings(warmup=10, rounds=12, block=10)
# Goals for mplso's added time, as fractions of TF's wrapper's.
ADDED_TARGET, BEYOND_BARRIER_TARGET = 0.75, 0.5


def _bandwidth_floor_ms(model: catalog.Model) -> tuple[float, float]:
  """Returns (GB/s of a scaled copy, the floor in ms) for `model`'s gradients.

  The floor is three passes over the float32 gradient bytes: a read for the
  finite check, a read and a write for the unscale.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  grad_bytes = sum(w.nbytes for w in model.initial_weights())
  x, scale, times = tf.ones([grad_bytes // 4]), tf.constant(0.5), []
  for _ in range(200):
    start = time.perf_counter()
    _ = x * scale
    times.append(time.perf_counter() - start)
  gbps = 2 * grad_bytes / statistics.median(times) / 1e9  # A read, a write.
  return gbps, 3 * grad_bytes / (gbps * 1e9) * 1e3


def _time(names: list[str], settings: timing.Settings) -> dict:
  """Times every variant of each scenario in this process."""
  from benchmarks import builders  # pylint: disable=g-import-not-at-top
  from benchmarks import worker  # pylint: disable=g-import-not-at-top
  results = {}
  with builders.runtime_settings():
    for name in names:
      scenario = catalog.MATRIX_BY_NAME[name]
      print(f"[matrix] {name}", file=sys.stderr, flush=True)
      built = worker.build_all(scenario.family, scenario.model,
                               scenario.jit_compile, VARIANTS,
                               scenario.optimizer)
      try:
        summary, scales = worker.time_variants(built, settings)
      finally:
        worker.close_all(built)
      results[name] = {
          "bare_ms": summary["bare"]["median_ms"],
          "added_pct": {v: summary[v]["paired_overhead_pct"]
                        for v in VARIANTS[1:]},
          "final_loss_scale": scales}
      if scenario.family is catalog.TF1:
        gbps, floor = _bandwidth_floor_ms(scenario.model)
        results[name].update(bandwidth_gbps=gbps, floor_ms=floor)
  return results


def process_groups(scenarios) -> list[str]:
  """The scenarios one fresh process times: one family, with or without XLA.

  Steps run after an XLA scenario in the same process are slower and
  noisier, so XLA and non-XLA scenarios never share a process.
  """
  groups = []
  for family in catalog.FAMILIES:
    for xla in (False, True):
      names = [s.name for s in scenarios
               if s.family is family and s.jit_compile == xla]
      if names:
        groups.append(",".join(names))
  return groups


def _ratio(numerator: float, denominator: float) -> float | None:
  return numerator / denominator if denominator > 0 else None


def _combine(runs: list[dict]) -> dict:
  """Medians over processes, ratios of the medians, and the targets."""
  combined = {}
  for name in runs[0]:
    scenario = catalog.MATRIX_BY_NAME[name]
    per_process = [r[name] for r in runs]
    added = {v: statistics.median(p["added_pct"][v] for p in per_process)
             for v in VARIANTS[1:]}
    beyond = {v: statistics.median(
        p["added_pct"][v] - p["added_pct"][catalog.BARRIER]
        for p in per_process) for v in catalog.WRAPPERS}
    bare_ms = statistics.median(p["bare_ms"] for p in per_process)
    entry = {
        "description": scenario.describe(),
        "bare_ms": bare_ms,
        "added_pct": added,
        "beyond_barrier_pct": beyond,
        "added_ratio": _ratio(added["mplso"], added["tf"]),
        "beyond_barrier_ratio": _ratio(beyond["mplso"], beyond["tf"]),
        "per_process_added_pct": [p["added_pct"] for p in per_process],
        "final_loss_scale": {
            v: min(p["final_loss_scale"][v] for p in per_process)
            for v in catalog.WRAPPERS},
    }
    if "floor_ms" in per_process[0]:
      entry["bandwidth_gbps"] = statistics.median(
          p["bandwidth_gbps"] for p in per_process)
      entry["floor_ms"] = statistics.median(p["floor_ms"] for p in per_process)
      entry["mplso_added_ms"] = added["mplso"] / 100 * bare_ms
      # The MLP's step moves megabytes of gradients; 200 small ones (0.3 MB)
      # cost their ops, not their bytes.
      entry["floor_is_a_target"] = scenario.model is catalog.MLP_10
    entry["targets"] = _targets(entry)
    combined[name] = entry
  return combined


def _targets(entry: dict) -> dict[str, bool]:
  """Whether `entry` meets each target; a ratio over a non-positive TF time
  counts as met only if mplso's time is not positive either."""

  def at_most(mplso: float, tf: float, fraction: float) -> bool:
    return mplso <= fraction * tf if tf > 0 else mplso <= 0

  targets = {
      "added_at_most_0.75_of_tf": at_most(
          entry["added_pct"]["mplso"], entry["added_pct"]["tf"],
          ADDED_TARGET),
      "beyond_barrier_at_most_0.5_of_tf": at_most(
          entry["beyond_barrier_pct"]["mplso"],
          entry["beyond_barrier_pct"]["tf"], BEYOND_BARRIER_TARGET),
  }
  if entry.get("floor_is_a_target"):
    targets["added_within_2x_bandwidth_floor"] = (
        entry["mplso_added_ms"] <= 2 * entry["floor_ms"])
  return targets


def markdown(data: dict) -> str:
  settings = data["settings"]
  lines = [
      "# The optimizer matrix",
      "",
      f"Generated by `{data['command']}`: {data['processes']} fresh "
      "process(es) per family and XLA setting; each scenario's four variants "
      f"interleaved ({settings['warmup']} warm-up steps, {settings['rounds']}"
      f" rounds of {settings['block']} steps). *Adds*: paired per round over "
      "the bare step, median over processes. *Beyond*: added minus the "
      "barrier's, in the same process. Ratios: mplso's over TF's wrapper's "
      f"(targets: at most {ADDED_TARGET} added, {BEYOND_BARRIER_TARGET} "
      f"beyond the barrier). {data['machine']}; load average before "
      f"{data['load_before']}, after {data['load_after']}.",
      "",
  ]
  rows, met = [], 0
  for name, r in data["scenarios"].items():
    a, b = r["added_pct"], r["beyond_barrier_pct"]
    missed = [k for k, ok in r["targets"].items() if not ok]
    met += not missed
    rows.append([name, f"{r['bare_ms']:.2f} ms", f"{a['barrier']:+.1f}%",
                 f"{a['tf']:+.1f}%", f"{a['mplso']:+.1f}%",
                 report.ratio_text(r["added_ratio"]), f"{b['tf']:+.1f}%",
                 f"{b['mplso']:+.1f}%",
                 report.ratio_text(r["beyond_barrier_ratio"]),
                 "missed: " + ", ".join(missed) if missed else "met"])
  lines += report.table(
      ["scenario", "bare", "barrier adds", "TF adds", "mplso adds", "mplso/TF",
       "TF beyond", "mplso beyond", "mplso/TF beyond", "targets"], rows)
  lines += ["", f"Scenarios meeting every target: {met} of {len(rows)}."]
  floors = {n: r for n, r in data["scenarios"].items() if "floor_ms" in r}
  if floors:
    lines += ["", "TF1 bandwidth floor (no target in brackets):", ""]
    lines += report.table(
        ["scenario", "bandwidth", "floor", "mplso adds", "within 2x"],
        [[n, f"{r['bandwidth_gbps']:.1f} GB/s", f"{r['floor_ms']:.3f} ms",
          f"{r['mplso_added_ms']:.3f} ms",
          ("{}" if r["floor_is_a_target"] else "({})").format(
              "yes" if r["mplso_added_ms"] <= 2 * r["floor_ms"] else "no")]
         for n, r in floors.items()])
  return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--out", default=run.DOCS_OUT)
  parser.add_argument("--processes", type=int, default=3)
  parser.add_argument("--scenarios", help="comma-separated names")
  parser.add_argument("--filter", help="only names containing this")
  parser.add_argument("--worker", nargs=2, metavar=("SCENARIOS", "JSON"),
                      help=argparse.SUPPRESS)  # The processes of a run.
  args = parser.parse_args(argv)
  settings = timing.QUICK if args.quick else SETTINGS
  if args.worker:
    names, path = args.worker
    with open(path, "w") as f:
      json.dump(_time(names.split(","), settings), f)
    return 0
  scenarios = list(catalog.MATRIX)
  if args.scenarios:
    wanted = args.scenarios.split(",")
    try:
      catalog.check_names(wanted, catalog.MATRIX_BY_NAME)
    except ValueError as e:
      parser.error(str(e))
    scenarios = [s for s in scenarios if s.name in wanted]
  if args.filter:
    scenarios = [s for s in scenarios if args.filter in s.name]
  catalog.let_tf1_sessions_cluster_on_cpu()  # Inherited by the workers.
  load_before = [round(x, 2) for x in os.getloadavg()]
  groups = process_groups(scenarios)
  with tempfile.TemporaryDirectory() as tmp:
    paths = [os.path.join(tmp, f"{i}.json")
             for i in range(len(groups) * args.processes)]
    run.run_jobs([
        run.Job(f"matrix process {i}",
                [sys.executable, "-m", "benchmarks.matrix", "--worker", names,
                 path] + ["--quick"] * args.quick, path + ".out")
        for i, (names, path) in enumerate(zip(groups * args.processes,
                                              paths))], parallel=1)
    results = []
    for path in paths:
      with open(path) as f:
        results.append(json.load(f))
  runs = [{k: v for result in results[i:i + len(groups)]
           for k, v in result.items()}
          for i in range(0, len(results), len(groups))]  # One per repeat.
  data = {
      "command": "python -m benchmarks.matrix" + " --quick" * args.quick,
      "processes": args.processes,
      "settings": dataclasses.asdict(settings),
      "machine": f"{os.cpu_count()} CPUs",
      "load_before": load_before,
      "load_after": [round(x, 2) for x in os.getloadavg()],
      "scenarios": _combine(runs),
  }
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, "matrix.json"), "w") as f:
    json.dump(data, f, indent=1)
  with open(os.path.join(args.out, "matrix.md"), "w") as f:
    f.write(markdown(data))
  print(markdown(data))
  return 0


if __name__ == "__main__":
  sys.exit(main())
