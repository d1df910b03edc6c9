"""The optimizer matrix: every family x optimizer x size, with and without XLA.

    python -m benchmarks.matrix                 # all 48 scenarios, ~50 min
    python -m benchmarks.matrix --quick         # minutes; timings are noise
    python -m benchmarks.matrix --filter adam --processes 1
    python -m benchmarks.matrix --scenarios tf1_adam_10vars,keras3_sgd_200vars

Times `catalog.MATRIX` in fresh processes, one at a time (`process_groups`).
Each scenario's `VARIANTS` run interleaved, so each wrapper's added time, and
its time beyond the barrier (`catalog.BARRIER`), come from steps run moments
apart. Medians over the processes are checked against `ADDED_TARGET` and
`BEYOND_BARRIER_TARGET`. Writes `matrix.json` and `matrix.md`, which name
the commit measured, into `--out` (default: a folder in the temporary
directory; the matrix has no published results).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile

from benchmarks import catalog
from benchmarks import report
from benchmarks import run
from benchmarks import timing

VARIANTS = ("bare", catalog.BARRIER, "tf", "mplso")
SETTINGS = timing.Settings(warmup=10, rounds=12, block=10)
# Goals for mplso's added time, as fractions of TF's wrapper's.
ADDED_TARGET, BEYOND_BARRIER_TARGET = 0.75, 0.5
DEFAULT_OUT = os.path.join(tempfile.gettempdir(), "mplso-benchmarks-matrix")


def _time(names: list[str], settings: timing.Settings) -> dict:
  """Times every variant of each scenario in this process."""
  from benchmarks import builders  # pylint: disable=g-import-not-at-top
  from benchmarks import worker  # pylint: disable=g-import-not-at-top
  results = {}
  with builders.runtime_settings():
    for name in names:
      scenario = catalog.MATRIX_BY_NAME[name]
      print(f"[matrix] {name}", file=sys.stderr, flush=True)
      with worker.built_variants(scenario.family, scenario.model,
                                 scenario.jit_compile, VARIANTS,
                                 scenario.optimizer) as built:
        summary, scales = worker.time_variants(built, settings)
      results[name] = {
          "bare_ms": summary["bare"]["median_ms"],
          "added_pct": {v: summary[v]["paired_overhead_pct"]
                        for v in VARIANTS[1:]},
          "final_loss_scale": scales}
  return results


def process_groups(scenarios) -> list[str]:
  """The scenarios one fresh process times: one family, with or without XLA.

  Steps run after an XLA scenario in the same process are slower and
  noisier, so XLA and non-XLA scenarios never share a process.
  """
  groups = (",".join(s.name for s in scenarios
                     if s.family is family and s.jit_compile == xla)
            for family in catalog.FAMILIES for xla in (False, True))
  return [g for g in groups if g]


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
    entry = {
        "description": scenario.describe(),
        "bare_ms": statistics.median(p["bare_ms"] for p in per_process),
        "added_pct": added, "beyond_barrier_pct": beyond,
        "added_ratio": report.ratio(added["mplso"], added["tf"]),
        "beyond_barrier_ratio": report.ratio(beyond["mplso"], beyond["tf"]),
        "per_process_added_pct": [p["added_pct"] for p in per_process],
        "final_loss_scale": {
            v: min(p["final_loss_scale"][v] for p in per_process)
            for v in catalog.WRAPPERS}}
    entry["targets"] = _targets(entry)
    combined[name] = entry
  return combined


def _targets(entry: dict) -> dict[str, bool]:
  """Whether `entry` meets each target.

  Where TF's wrapper added no time, mplso meets a target only if it added
  none either.
  """

  def at_most(key: str, fraction: float) -> bool:
    mplso, tf = entry[key]["mplso"], entry[key]["tf"]
    return mplso <= fraction * tf if tf > 0 else mplso <= 0

  return {"added_at_most_0.75_of_tf": at_most("added_pct", ADDED_TARGET),
          "beyond_barrier_at_most_0.5_of_tf": at_most(
              "beyond_barrier_pct", BEYOND_BARRIER_TARGET)}


def markdown(data: dict) -> str:
  """Returns the matrix as a Markdown table."""
  settings = data["settings"]
  lines = [
      "# The optimizer matrix", "",
      f"Measured at commit {data['commit']} by `{data['command']}`: "
      f"{data['processes']} fresh "
      "process(es) per family and XLA setting; each scenario's four variants "
      f"interleaved ({settings['warmup']} warm-up steps, {settings['rounds']}"
      f" rounds of {settings['block']} steps). *Adds*: paired per round over "
      "the bare step, median over processes. *Beyond*: added minus the "
      "barrier's, in the same process. Ratios: mplso's over TF's wrapper's "
      f"(targets: at most {ADDED_TARGET} added, {BEYOND_BARRIER_TARGET} "
      f"beyond the barrier). {data['machine']}; load average before "
      f"{data['load_before']}, after {data['load_after']}.", ""]
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
  return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--out", default=DEFAULT_OUT,
                      help=f"output folder (default: {DEFAULT_OUT})")
  parser.add_argument("--processes", type=int, default=3)
  parser.add_argument("--scenarios", help="comma-separated names",
                      type=run.scenario_list(catalog.MATRIX_BY_NAME))
  parser.add_argument("--filter", help="only names containing this")
  parser.add_argument("--worker", metavar="SCENARIOS",
                      help=argparse.SUPPRESS)  # The processes of a run.
  args = parser.parse_args(argv)
  settings = timing.QUICK if args.quick else SETTINGS
  if args.worker:
    print(json.dumps(_time(args.worker.split(","), settings)))
    return 0
  scenarios = args.scenarios or catalog.MATRIX
  if args.filter:
    scenarios = [s for s in scenarios if args.filter in s.name]
  catalog.let_tf1_sessions_cluster_on_cpu()  # Inherited by the workers.
  commit = report.commit()
  load_before = [round(x, 2) for x in os.getloadavg()]
  groups = process_groups(scenarios)
  results = list(run.run_jobs({
      f"matrix process {i}": [sys.executable, "-m", "benchmarks.matrix",
                              "--worker", names] + ["--quick"] * args.quick
      for i, names in enumerate(groups * args.processes)}, parallel=1).values())
  runs = [{k: v for result in results[i:i + len(groups)]
           for k, v in result.items()}
          for i in range(0, len(results), len(groups))]  # One per repeat.
  data = {
      "command": "python -m benchmarks.matrix" + " --quick" * args.quick,
      "commit": commit,
      "processes": args.processes,
      "settings": dataclasses.asdict(settings),
      "machine": f"{os.cpu_count()} CPUs",
      "load_before": load_before,
      "load_after": [round(x, 2) for x in os.getloadavg()],
      "scenarios": _combine(runs)}
  text = markdown(data)
  report.write(args.out, "matrix", data, text)
  print(text)
  return 0


if __name__ == "__main__":
  sys.exit(main())
