"""Command line: times the scenarios, counts their ops, measures memory.

    python -m benchmarks.run            # full run, into docs/benchmarks/
    python -m benchmarks.run --quick    # about a minute; timings are noise

A full run times each optimizer family in five fresh processes
(`benchmarks.worker`), taking the median, and measures memory in others
(`benchmarks.memory`), one process at a time, so nothing else of ours
competes with the steps being timed. `--quick` runs two processes side by
side, few steps, Grappler off. Writes `results.json` and `results.md`; a full
run into docs/benchmarks/ also rewrites the block in docs/performance.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import catalog
from benchmarks import memory
from benchmarks import report
from benchmarks import timing

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS_OUT = os.path.join(_REPO, "docs", "benchmarks")
PERFORMANCE_PAGE = os.path.join(_REPO, "docs", "performance.md")
QUICK_OUT = os.path.join(tempfile.gettempdir(), "mplso-benchmarks-quick")


@dataclasses.dataclass(frozen=True)
class MemorySettings:
  steps: int  # Training steps per process.
  repeats: int  # Processes per variant.


FULL_MEMORY = MemorySettings(steps=10, repeats=3)
QUICK_MEMORY = MemorySettings(steps=2, repeats=1)
# Processes that time each family: timings differ more between processes
# than between rounds (thread placement, memory layout).
FULL_PROCESSES, QUICK_PROCESSES = 5, 1


def run_jobs(jobs: dict[str, list[str]], parallel: int) -> dict[str, object]:
  """Runs each job's command line, at most `parallel` at a time.

  Each job prints its result as JSON on the last line of its standard output
  (returned as `{name: result}`, in the order of `jobs`); its standard error
  goes to ours. On failure or interruption the jobs still running are killed.

  Raises:
    RuntimeError: if a job exits with an error.
  """
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  pending, running, results = list(jobs), {}, {}
  with tempfile.TemporaryDirectory() as tmp:
    outputs = {name: os.path.join(tmp, f"{i}.out")
               for i, name in enumerate(jobs)}
    try:
      while pending or running:
        while pending and len(running) < parallel:
          name = pending.pop(0)
          with open(outputs[name], "w") as out:
            running[name] = subprocess.Popen(jobs[name], cwd=_REPO, env=env,
                                             stdout=out)
        time.sleep(0.1)
        for name, process in list(running.items()):
          if process.poll() is not None:
            del running[name]
            if process.returncode:
              raise RuntimeError(
                  f"{name} failed with exit code {process.returncode}: "
                  f"{' '.join(jobs[name])}")
    finally:
      for process in running.values():
        process.kill()
        process.wait()
    for name, path in outputs.items():
      with open(path) as f:
        results[name] = json.loads(f.read().strip().splitlines()[-1])
  return results


def spread(values: list[float]) -> dict:
  """The median, minimum and maximum of `values`, and the values."""
  return {"median": statistics.median(values), "min": min(values),
          "max": max(values), "per_process": [round(v, 5) for v in values]}


def _combine(runs: list[dict]) -> dict:
  """Merges one scenario's results from several processes.

  Timings become the median over the processes of each number, with each
  process's paired overhead kept; each ratio (`worker.ratios`) its median
  over the processes with their minimum and maximum; op counts are the same
  in every process.
  """
  timing = {}
  for variant in catalog.STEP_VARIANTS:
    entries = [r["timing"][variant] for r in runs]
    merged = {key: statistics.median(e[key] for e in entries)
              for key in entries[0] if key != "steps"}
    merged["steps"] = sum(e["steps"] for e in entries)
    if variant != "bare":
      merged["paired_overhead_pct_per_process"] = [
          round(e["paired_overhead_pct"], 2) for e in entries]
    timing[variant] = merged
  ratios = {name: spread([r["ratios"][name]["ratio"] for r in runs])
            for name in runs[0]["ratios"]}
  return dict(runs[0], timing=timing, ratios=ratios, processes=len(runs),
              final_loss_scale={v: min(r["final_loss_scale"][v] for r in runs)
                                for v in runs[0]["final_loss_scale"]})


def _memory_summary(results: dict[str, dict],
                    settings: MemorySettings) -> dict:
  """Medians over the memory processes of `results` (see `run_jobs`)."""
  variants = {}
  for variant in catalog.VARIANTS:
    measured = [results[f"memory {variant} {repeat}"]
                for repeat in range(settings.repeats)]
    added = [m["training_peak_mb"] for m in measured]
    variants[variant] = {
        key: statistics.median(m[key] for m in measured)
        for key in ("allocated_mb", "step_peak_mb", "rss_after_build_mb",
                    "peak_rss_mb", "training_peak_mb")
    } | {"training_peak_mb_min": min(added), "training_peak_mb_max": max(added),
         "runs": measured}
  scenario = catalog.MEMORY_SCENARIO
  return {"scenario": scenario.name, "description": scenario.describe(),
          "steps": settings.steps, "processes_per_variant": settings.repeats,
          "method": memory.METHOD, "variants": variants}


def scenario_list(by_name: dict[str, catalog.Scenario]):
  """An argparse type: comma-separated names of `by_name`'s scenarios."""

  def parse(text: str) -> list[catalog.Scenario]:
    names = text.split(",")
    unknown = sorted(set(names) - by_name.keys())
    if unknown:
      raise argparse.ArgumentTypeError(
          f"unknown scenarios {unknown}; known: {sorted(by_name)}")
    return [by_name[n] for n in names]

  return parse


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true", help="few steps (CI)")
  parser.add_argument("--out", help="output folder (default: docs/benchmarks, "
                      f"or {QUICK_OUT} with --quick)")
  parser.add_argument("--scenarios",
                      type=scenario_list(catalog.SCENARIOS_BY_NAME),
                      help="comma-separated scenario names (default: all)")
  parser.add_argument("--no-memory", action="store_true", help="skip memory")
  parser.add_argument("--jobs", type=int, help="processes at a time "
                      "(default: 1, or 2 with --quick)")
  parser.add_argument("--processes", type=int, help="fresh processes that "
                      f"time each family (default: {FULL_PROCESSES}, or "
                      f"{QUICK_PROCESSES} with --quick)")
  args = parser.parse_args(argv)
  out = args.out or (QUICK_OUT if args.quick else DOCS_OUT)
  settings = timing.QUICK if args.quick else timing.FULL
  memory_settings = QUICK_MEMORY if args.quick else FULL_MEMORY
  processes = args.processes or (QUICK_PROCESSES if args.quick
                                 else FULL_PROCESSES)
  scenarios = args.scenarios or catalog.SCENARIOS

  started = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
  commit = report.commit()  # The code timed: the tree as the run starts.
  load_before = os.getloadavg()
  # A quick run's two processes do about equal work.
  groups = ([[catalog.TF1, catalog.TF_KERAS],
             [catalog.TF_KERAS_LEGACY, catalog.KERAS3,
              catalog.KERAS3_ON_BATCH]] if args.quick else
            [[f] for f in catalog.TIMED_FAMILIES])
  worker_jobs = {
      f"worker {repeat} {i}": [
          sys.executable, "-m", "benchmarks.worker",
          ",".join(f.name for f in group),
          "--scenarios", ",".join(s.name for s in scenarios)]
      + ["--quick"] * args.quick
      for repeat in range(processes) for i, group in enumerate(groups)}
  memory_jobs = {} if args.no_memory else {
      f"memory {v} {repeat}": [sys.executable, "-m", "benchmarks.memory", v,
                               str(memory_settings.steps)]
      for repeat in range(memory_settings.repeats) for v in catalog.VARIANTS}
  results = run_jobs(worker_jobs | memory_jobs,
                     args.jobs or (2 if args.quick else 1))
  first, runs = {}, {}  # Per family its first result; per scenario, all.
  for name in worker_jobs:
    for family, result in results[name].items():
      first.setdefault(family, result)
      for scenario in result["scenarios"]:
        runs.setdefault(scenario["name"], []).append(scenario)
  data = {
      "meta": {
          "command": "python -m benchmarks.run" + " --quick" * args.quick,
          "commit": commit,
          "quick": args.quick,
          "settings": dataclasses.asdict(settings) | {
              "variants": list(catalog.STEP_VARIANTS),
              "features": catalog.FEATURES,
              "meter_every": catalog.METER_EVERY,
              "processes_per_family": processes},
          "versions": first[catalog.FAMILIES[0].name]["versions"],
          "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                     f"{platform.system()}",
          "started_utc": started,
          "load_average_before": [round(x, 2) for x in load_before],
          "load_average_after": [round(x, 2) for x in os.getloadavg()]},
      "scenarios": [_combine(runs[s.name]) for s in scenarios],
      "op_growth": [first[f.name]["op_growth"] for f in catalog.FAMILIES],
      "memory": (None if args.no_memory else
                 _memory_summary(results, memory_settings))}
  paths = report.write(out, "results", data, report.markdown(data))
  if os.path.abspath(out) == DOCS_OUT and not args.quick and not args.scenarios:
    report.update_page(PERFORMANCE_PAGE, data)
    paths.append(PERFORMANCE_PAGE)
  print("\n".join(paths))
  return 0


if __name__ == "__main__":
  sys.exit(main())
