"""Optimizer families' benchmarks, run in a process of their own.

    python -m benchmarks.worker FAMILY[,FAMILY...] [--quick] [--scenarios a,b]

For each family: times its scenarios (`catalog.SCENARIOS`) in every variant
of `catalog.STEP_VARIANTS`, counts the ops of each variant's step graph and
those added at each of `catalog.GROWTH_MODELS`.
Prints `{family: result}` as JSON on one line. `--quick` runs few steps, with
Grappler off.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import platform
import statistics
import sys
import time

from benchmarks import builders
from benchmarks import catalog
from benchmarks import graph_ops
from benchmarks import timing

_START = time.monotonic()


def _log(family: str, message: str) -> None:
  print(f"[{time.monotonic() - _START:6.1f}s {family}] {message}",
        file=sys.stderr, flush=True)


def _executed_ops(built: builders.Built) -> int | None:
  """Nodes that one traced step ran (TF1 family only, else None).

  Unlike the traced graph, the work a step does: after Grappler, each `cond`
  lowered to Switch/Merge (its Switches run at every step), untaken branches
  left out.
  """
  if built.traced_step is None:
    return None
  metadata = built.traced_step()
  return sum(len(d.node_stats) for d in metadata.step_stats.dev_stats)


@contextlib.contextmanager
def built_variants(family, model, jit_compile=False,
                   variants=catalog.VARIANTS, optimizer="sgd"):
  """Yields `{variant: builders.build(...)}`; on leaving, closes them all."""
  built = {v: builders.build(family, model, v, jit_compile, optimizer)
           for v in variants}
  try:
    yield built
  finally:
    for b in built.values():
      b.close()
    built.clear()
    gc.collect()


def time_variants(built: dict, settings: timing.Settings
                  ) -> tuple[dict, dict[str, float]]:
  """Times `built`'s variants interleaved, the first one the baseline.

  Returns:
    `timing.summarize`'s summary, and each wrapper's final loss scale.
  """
  summary, _, scales = _timed(built, settings)
  return summary, scales


def _timed(built: dict, settings: timing.Settings
           ) -> tuple[dict, dict, dict[str, float]]:
  """`time_variants`, with the step times (`timing.interleaved`'s) too."""
  times = timing.interleaved({v: b.step for v, b in built.items()}, settings)
  scales = {v: b.loss_scale() for v, b in built.items()
            if b.loss_scale is not None}
  return timing.summarize(times, baseline=next(iter(built))), times, scales


def ratios(times: dict[str, list[list[float]]],
           block: int | None = None) -> dict:
  """The step-time ratios a scenario reports, each a median over rounds.

  `mplso_over_tf`: mplso's step over TF's wrapper's, block medians. Each of
  `catalog.FEATURES`, and `catalog.CONTROL`, over `"mplso"` (the feature
  off): block means, so that the meter's sampled step counts at its share.
  Where a block is the meter's period (`block`), `meter_sampled_share`:
  the metered variant's sampled step's cost per step, in its own blocks
  (`timing.sampled_share`). Each comes with its value per round.
  """
  pairs = {"mplso_over_tf": ("mplso", "tf", statistics.median)}
  pairs.update({f"{variant}_over_mplso": (variant, "mplso", statistics.fmean)
                for variant in (*catalog.FEATURES, catalog.CONTROL)
                if variant in times})
  per_round = {name: timing.paired_ratios(times, variant, baseline, statistic)
               for name, (variant, baseline, statistic) in pairs.items()}
  if block == catalog.METER_EVERY and "mplso_meter" in times:
    per_round["meter_sampled_share"] = timing.sampled_share(
        times["mplso_meter"], times["mplso"])
  return {name: {"ratio": statistics.median(values),
                 "per_round": [round(v, 5) for v in values]}
          for name, values in per_round.items()}


def run_scenario(scenario: catalog.Scenario, settings: timing.Settings,
                 op_cache: dict) -> dict:
  """Builds, times and counts the ops of `scenario`'s variants.

  The variants are `catalog.STEP_VARIANTS`: bare, both wrappers and mplso's
  with each of its opt-in features on.
  """
  family = scenario.family.name
  _log(family, f"{scenario.name}: building")
  with built_variants(scenario.family, scenario.model, scenario.jit_compile,
                      catalog.STEP_VARIANTS) as built:
    _log(family, f"{scenario.name}: timing")
    summary, times, final_scale = _timed(built, settings)
    ops = {v: b.ops for v, b in built.items()}
    # Under auto-clustering the nodes run are XLA's clusters: not counted.
    executed = {v: None if scenario.jit_compile else _executed_ops(b)
                for v, b in built.items()}
  if not scenario.jit_compile:
    op_cache[scenario.model] = ops
  added = {v: graph_ops.added(ops[v], ops["bare"]) for v in catalog.WRAPPERS}
  # What each feature adds to mplso's step graph (both branches of its conds).
  feature_ops = {f: graph_ops.added(ops[f], ops["mplso"])
                 for f in catalog.FEATURES}
  return {
      "name": scenario.name, "family": family,
      "description": scenario.describe(),
      "tf_wrapper": scenario.family.tf_wrapper,
      "variables": scenario.model.num_variables,
      "jit_compile": scenario.jit_compile, "timing": summary,
      "ratios": ratios(times, settings.block),
      "ops": {v: sum(c.values()) for v, c in ops.items()},
      "executed_ops": executed if None not in executed.values() else None,
      "added_ops": {v: sum(a.values()) for v, a in added.items()},
      "added_op_types": added,
      "feature_added_ops": {f: sum(a.values()) for f, a in feature_ops.items()},
      "feature_added_op_types": feature_ops,
      "host_callback_ops": {v: sum(c[op] for op in graph_ops.HOST_CALLBACK_OPS)
                            for v, c in ops.items()},
      "initial_loss_scale": catalog.INITIAL_SCALE,
      "final_loss_scale": final_scale}


def op_growth(family: catalog.Family, op_cache: dict) -> dict:
  """Added ops at two model sizes, from `op_cache` or traced now."""
  for model in catalog.GROWTH_MODELS:
    if model not in op_cache:
      _log(family.name, f"op growth: tracing {model.num_variables} variables")
      with built_variants(family, model) as built:
        op_cache[model] = {v: b.ops for v, b in built.items()}
  small, large = catalog.GROWTH_MODELS
  extra = large.num_variables - small.num_variables
  added = {m: {v: graph_ops.added(op_cache[m][v], op_cache[m]["bare"])
               for v in catalog.WRAPPERS} for m in (small, large)}
  totals = {m: {v: sum(added[m][v].values()) for v in catalog.WRAPPERS}
            for m in (small, large)}
  per_type = {v: {op: round(n / extra, 3) for op, n in graph_ops.added(
      added[large][v], added[small][v]).items()} for v in catalog.WRAPPERS}
  return {
      "family": family.name, "tf_wrapper": family.tf_wrapper,
      "small_variables": small.num_variables,
      "large_variables": large.num_variables,
      "added_ops_small": totals[small], "added_ops_large": totals[large],
      "added_ops_per_extra_gradient": {
          v: (totals[large][v] - totals[small][v]) / extra
          for v in catalog.WRAPPERS},
      "added_op_types_per_extra_gradient": per_type,
      "host_callback_ops": {
          v: sum(op_cache[m][v][op] for m in (small, large)
                 for op in graph_ops.HOST_CALLBACK_OPS)
          for v in catalog.VARIANTS}}


def versions() -> dict[str, str]:
  """The versions of TensorFlow, Keras, tf_keras and Python."""
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  return {"tensorflow": tf.__version__, "keras": keras.__version__,
          "tf_keras": tf_keras.__version__,
          "python": platform.python_version()}


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("families", help="comma-separated family names")
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--scenarios", help="comma-separated names; default all")
  args = parser.parse_args(argv)
  by_name = {f.name: f for f in catalog.TIMED_FAMILIES}
  names = args.scenarios.split(",") if args.scenarios else None
  settings = timing.QUICK if args.quick else timing.FULL
  families = [by_name[n] for n in args.families.split(",")]
  if any(s.family == catalog.TF1 and s.jit_compile
         for s in catalog.SCENARIOS if s.family in families):
    catalog.let_tf1_sessions_cluster_on_cpu()  # TF1's scenarios with XLA.
  results = {}
  with builders.runtime_settings(grappler=not args.quick):
    for family in families:
      op_cache = {}  # Ops per variant of each model, for `op_growth`.
      scenarios = [run_scenario(s, settings, op_cache)
                   for s in catalog.SCENARIOS if s.family == family and
                   (names is None or s.name in names)]
      # train_on_batch's graph is KERAS3's: its op growth is KERAS3's.
      growth = (op_growth(family, op_cache) if family in catalog.FAMILIES
                else None)
      results[family.name] = {
          "scenarios": scenarios, "op_growth": growth,
          "versions": versions()}
      _log(family.name, "done")
  print(json.dumps(results))
  return 0


if __name__ == "__main__":
  sys.exit(main())
