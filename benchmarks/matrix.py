"""Every family x optimizer x size, with and without XLA, against the targets.

    python -m benchmarks.matrix                 # the full matrix, ~40 min
    python -m benchmarks.matrix --quick         # a minute; timings are noise
    python -m benchmarks.matrix --scenarios tf1_adam_10vars,...
    python -m benchmarks.matrix --processes 3 --filter adam

Times `catalog.MATRIX`: the TF1, tf_keras, tf_keras legacy and Keras 3
families, with SGD (momentum), Adam and Adagrad, at 10 and 200 variables,
without and with XLA. In each fresh process (one per family, with or
without XLA) every scenario runs four variants interleaved (bare, barrier, TF's wrapper, mplso; see `catalog`),
so each wrapper's added time and its time beyond the barrier (the wait for
every gradient that any skipping wrapper pays) come from steps run moments
apart. Medians over the processes are checked against the targets:

* mplso's added time is at most 0.75x TF's wrapper's;
* beyond the barrier, at most 0.5x TF's.

For TF1 scenarios the report also gives the bandwidth floor: one read of
every gradient byte for the check plus one read and one write for the
unscale, at the bandwidth measured in the same process (a scaled copy of as
many bytes). mplso's added time within 2x of it is a target for the TF1
MLP (10 variables, 3.7 MB of gradients); at 200 small variables (0.3 MB)
the floor is reported only, the step's cost there being its ops. Writes `matrix.json` and `matrix.md` into `docs/benchmarks/`
(or `--out`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

from benchmarks import catalog
from benchmarks import report
from benchmarks import run
from benchmarks import timing

VARIANTS = ("bare", catalog.BARRIER, "tf", "mplso")
SETTINGS = timing.Settings(warmup=10, rounds=12, block=10)
# Targets of mplso's added time, as fractions of TF's wrapper's.
ADDED_TARGET, BEYOND_BARRIER_TARGET = 0.75, 0.5


def _bandwidth_floor_ms(model: catalog.Model) -> tuple[float, float]:
  """Returns (GB/s of a scaled copy, the floor in ms) for `model`'s gradients.

  The floor is three passes over the float32 gradient bytes: a read for the
  finite check, a read and a write for the unscale.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  grad_bytes = sum(w.nbytes for w in model.initial_weights())
  x = tf.ones([grad_bytes // 4])
  scale = tf.constant(0.5)
  times = []
  for _ in range(200):
    start = time.perf_counter()
    y = x * scale
    times.append(time.perf_counter() - start)
  del y
  seconds = float(np.median(times))
  gbps = 2 * grad_bytes / seconds / 1e9  # One read and one write.
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
      results[name] = worker.time_and_close(built, settings)
      if scenario.family is catalog.TF1:
        gbps, floor = _bandwidth_floor_ms(scenario.model)
        results[name].update(bandwidth_gbps=gbps, floor_ms=floor)
  return results


def process_groups(scenarios) -> list[str]:
  """The scenarios one fresh process times: one family, with or without XLA.

  Steps run after an XLA scenario in the same process are slower and noisier
  (TF1 SGD at 200 variables: bare 2.31 against 1.73 ms, mplso's added time
  +29% against +15%), so XLA and non-XLA scenarios never share a process.
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
        "family": scenario.family.name,
        "optimizer": scenario.optimizer,
        "variables": scenario.model.num_variables,
        "xla": scenario.jit_compile,
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
      # The issue's floor is for the TF1 MLP, whose step moves megabytes of
      # gradients; 200 small ones (0.3 MB) cost their ops, not their bytes.
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


def _within(entry: dict) -> str:
  """The floor column: yes or no, in brackets where it is no target."""
  within = entry["mplso_added_ms"] <= 2 * entry["floor_ms"]
  text = "yes" if within else "no"
  return text if entry.get("floor_is_a_target") else f"({text})"


def markdown(data: dict) -> str:
  lines = [
      "# The optimizer matrix",
      "",
      f"Generated by `{data['command']}`: {data['processes']} fresh "
      f"process(es) per family and XLA setting; each scenario's four variants interleaved "
      f"({data['settings']['warmup']} warm-up steps, "
      f"{data['settings']['rounds']} rounds of {data['settings']['block']} "
      "steps). *Added*: paired per round over the bare step, median over "
      "processes. *Beyond the barrier*: added minus the barrier's, in the "
      "same process. Ratios: mplso's over TF's wrapper's (targets: at most "
      f"{ADDED_TARGET} added, {BEYOND_BARRIER_TARGET} beyond the barrier). "
      f"{data['machine']}; load average before {data['load_before']}, "
      f"after {data['load_after']}." +
      "".join(f" {note}" for note in data.get("updated", [])),
      "",
      "| scenario | bare | barrier | TF adds | mplso adds | mplso/TF | "
      "TF beyond | mplso beyond | mplso/TF beyond | targets |",
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
  ]
  met = 0
  for name, r in data["scenarios"].items():
    a, b = r["added_pct"], r["beyond_barrier_pct"]
    ok = all(r["targets"].values())
    met += ok
    lines.append(
        f"| {name} | {r['bare_ms']:.2f} ms | {a['barrier']:+.1f}% | "
        f"{a['tf']:+.1f}% | {a['mplso']:+.1f}% | "
        f"{report.ratio_text(r['added_ratio'])} | {b['tf']:+.1f}% | "
        f"{b['mplso']:+.1f}% | {report.ratio_text(r['beyond_barrier_ratio'])} | "
        f"{'met' if ok else 'missed: ' + ', '.join(k for k, v in r['targets'].items() if not v)} |")
  lines += ["", f"Scenarios meeting every target: {met} of "
            f"{len(data['scenarios'])}.", ""]
  floors = {n: r for n, r in data["scenarios"].items() if "floor_ms" in r}
  if floors:
    lines += [
        "TF1 bandwidth floor (three passes over the float32 gradient bytes "
        "at the bandwidth of a scaled copy measured in the same process):",
        "",
        "| scenario | bandwidth | floor | mplso adds | within 2x (no target "
        "in brackets) |",
        "| --- | ---: | ---: | ---: | --- |"]
    for name, r in floors.items():
      lines.append(
          f"| {name} | {r['bandwidth_gbps']:.1f} GB/s | {r['floor_ms']:.3f} "
          f"ms | {r['mplso_added_ms']:.3f} ms | "
          f"{_within(r)} |")
    lines.append("")
  return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--out", default=run.DOCS_OUT)
  parser.add_argument("--processes", type=int, default=3)
  parser.add_argument("--scenarios", help="comma-separated names")
  parser.add_argument("--filter", help="only names containing this")
  parser.add_argument("--combine", help="comma-separated matrix.json files "
                      "of earlier runs: report their processes together")
  parser.add_argument("--update", help="a matrix.json of an earlier run: "
                      "the scenarios run now replace theirs in its processes "
                      "(as many as --processes), the others are kept")
  run.add_worker_flag(parser)
  args = parser.parse_args(argv)
  settings = timing.QUICK if args.quick else SETTINGS
  if run.serve_worker(args, _time, settings):
    return 0
  if args.combine:
    earlier = []
    for path in args.combine.split(","):
      with open(path) as f:
        earlier.append(json.load(f))
    merged = [process for data in earlier for process in data["runs"]]
    return _write(args.out, {
        **earlier[0], "processes": len(merged),
        "command": "python -m benchmarks.matrix, runs combined",
        "load_after": earlier[-1]["load_after"], "runs": merged,
        "scenarios": _combine(merged)})
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
  groups = [[names] for names in process_groups(scenarios)]
  results = run.run_workers("benchmarks.matrix", groups * args.processes,
                            args.quick)
  merged = [{k: v for result in results[i:i + len(groups)]
             for k, v in result.items()}
            for i in range(0, len(results), len(groups))]
  if args.update:
    return _update(args.update, merged, [s.name for s in scenarios], parser)
  data = {
      "command": "python -m benchmarks.matrix" + " --quick" * args.quick,
      "processes": args.processes,
      "settings": dataclasses.asdict(settings),
      "machine": f"{os.cpu_count()} CPUs",
      "load_before": load_before,
      "load_after": [round(x, 2) for x in os.getloadavg()],
      "scenarios": _combine(merged),
      "runs": merged,  # Each process's own results, for --combine.
  }
  return _write(args.out, data)


def _update(path: str, runs: list[dict], names: list[str], parser) -> int:
  """Puts `runs` (process by process) in place of theirs in `path`'s run."""
  with open(path) as f:
    earlier = json.load(f)
  if len(earlier["runs"]) != len(runs):
    parser.error(f"--update {path} has {len(earlier['runs'])} processes; "
                 f"this run has {len(runs)} (--processes)")
  merged = [{**old, **new} for old, new in zip(earlier["runs"], runs)]
  day = time.strftime("%Y-%m-%d", time.gmtime())
  return _write(os.path.dirname(path) or ".", {
      **earlier,
      "updated": (earlier.get("updated", []) +
                  [f"{len(names)} scenario(s) re-run on {day} with `--update` "
                   f"({', '.join(names)})."]),
      "load_after": [round(x, 2) for x in os.getloadavg()],
      "runs": merged, "scenarios": _combine(merged)})


def _write(out: str, data: dict) -> int:
  run.write_reports(out, "matrix", data, markdown(data))
  return 0


if __name__ == "__main__":
  sys.exit(main())
