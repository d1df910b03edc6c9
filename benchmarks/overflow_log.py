"""mplso's overflow log on and off, interleaved in one process.

    python -m benchmarks.overflow_log [--rounds 80] [--block 10] [--warmup 20]
        [--quick]

For the TF1 Session step and the tf_keras `tf.function` loop (also compiled
with XLA), at 10 and 200 variables, builds mplso's step three times: with
the overflow log off (`overflow_log.ENABLED = False`, what
`MPLSO_OVERFLOW_LOG=0` sets), on, and on again, and times the three in
interleaved rounds (`timing.interleaved`, each round starting with the
next variant). No step of the benchmark
overflows, so the log's record never runs: what is measured is what the
log costs a finite step. The two "on" steps are the same graph: their
difference is the noise floor of the machine and the method.

Prints, per case, the ops a finite step runs (TF1: the nodes one traced
`Session.run` executed; `tf.function`: the nodes TensorFlow runs outside the
untaken branches, after lowering, and among them the `Switch`es; nothing
under XLA, where the step is one compiled cluster), the median step times,
and over rounds the quartiles of (on / off) - 1 and of the noise floor
(on again / on) - 1, with the share of rounds where the first was faster.
`--quick` runs the 10-variable cases without XLA, a few steps each: it
checks the harness, its timings are noise.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from benchmarks import builders
from benchmarks import catalog
from benchmarks import graph_ops
from benchmarks import timing

# (family, model, jit_compile[, optimizer]), in report order.
CASES = ((catalog.TF1, catalog.DEEP_10, False),
         (catalog.TF1, catalog.DEEP_200, False),
         (catalog.TF_KERAS, catalog.DEEP_10, False),
         (catalog.TF_KERAS, catalog.DEEP_200, False),
         (catalog.TF_KERAS, catalog.DEEP_10, True),
         (catalog.TF_KERAS, catalog.DEEP_200, True))
QUICK_CASES = tuple(c for c in CASES if c[1] is catalog.DEEP_10 and not c[2])
# Each round runs a block of each, in this order.
VARIANTS = ("off", "on", "on_again")


def _step_ops(built: builders.Built, jit_compile: bool) -> dict | None:
  """Runs one step of `built`, its first; returns the ops it ran.

  TF1: `{"nodes": n}` executed by a traced `Session.run`. `tf.function`:
  `{"nodes": n, "Switch": s}`, the nodes of the lowered graphs outside
  every `else` branch (all of the step's `cond`s take their `then` branch
  on a finite step: the finite check's fast path, the apply). None under
  XLA.
  """
  if built.traced_step is not None:
    metadata = built.traced_step()
    return {"nodes": sum(len(d.node_stats)
                         for d in metadata.step_stats.dev_stats)}
  if jit_compile:
    return None
  counts = graph_ops.lowered_function_ops(built.step)
  runs = counts["outer"] + counts["then"]
  return {"nodes": sum(runs.values()), "Switch": runs["Switch"]}


def _paired(first: list[list[float]], second: list[list[float]]) -> dict:
  """(first / second) - 1 per round, from each round's medians, in %."""
  ratios = [statistics.median(a) / statistics.median(b) - 1
            for a, b in zip(first, second)]
  q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
  return {"median_pct": 100 * median, "quartiles_pct": (100 * q1, 100 * q3),
          "first_faster_pct": 100 * sum(r < 0 for r in ratios) / len(ratios)}


def _log_switch():
  from mplso._src.core import overflow_log  # pylint: disable=g-import-not-at-top
  return overflow_log, "ENABLED"


def measure(family, model, settings: timing.Settings,
            jit_compile: bool = False, switch=_log_switch,
            optimizer: str = "sgd") -> dict:
  """Times mplso's step of `model` with a switch off, on, on again.

  `switch()` returns the module and the name of its boolean switch, which
  is read when a step is built: by default the overflow log's.
  """
  module, name_of_switch = switch()
  before = getattr(module, name_of_switch)
  built = {}
  try:
    for name in VARIANTS:
      setattr(module, name_of_switch, name != "off")
      built[name] = builders.build(family, model, "mplso", jit_compile,
                                   optimizer)
  finally:
    setattr(module, name_of_switch, before)
  try:
    ops = {name: _step_ops(b, jit_compile) for name, b in built.items()}
    times = timing.interleaved({n: b.step for n, b in built.items()},
                               settings, rotate=True)
    scales = {n: b.loss_scale() for n, b in built.items()}
  finally:
    for b in built.values():
      b.close()
  xla = ", XLA" if jit_compile else ""
  named = f", {optimizer}" if optimizer != "sgd" else ""
  return {
      "case": f"{family.name}{xla}{named}, {model.num_variables} variables",
      "ops": ops,
      "median_ms": {n: statistics.median(t for block in blocks for t in block)
                    * 1e3 for n, blocks in times.items()},
      "on_vs_off": _paired(times["on"], times["off"]),
      "noise": _paired(times["on_again"], times["on"]),
      "loss_scale": scales,
  }


def run(settings: timing.Settings, cases=CASES, report=print,
        switch=_log_switch) -> list[dict]:
  """Measures every case in `cases`; `report`s a line for each."""
  results = []
  with builders.runtime_settings():
    for family, model, jit_compile, *optimizer in cases:
      result = measure(family, model, settings, jit_compile, switch,
                       *optimizer)
      results.append(result)
      report(describe(result))
  return results


def describe(result: dict) -> str:
  """One line for a result of `measure`."""

  def paired(stats):
    q1, q3 = stats["quartiles_pct"]
    return (f"median {stats['median_pct']:+.1f}% (quartiles {q1:+.1f}%, "
            f"{q3:+.1f}%), first faster in {stats['first_faster_pct']:.0f}% "
            "of rounds")

  times = ", ".join(f"{n} {t:.3f} ms" for n, t in result["median_ms"].items())
  return (f"{result['case']}: ops a finite step runs {result['ops']}; "
          f"median {times}; on/off - 1 per round: "
          f"{paired(result['on_vs_off'])}; "
          f"noise floor, on again/on - 1: {paired(result['noise'])}")


def main(argv: list[str] | None = None, *, doc: str = __doc__,
         cases=CASES, quick_cases=QUICK_CASES, switch=_log_switch) -> int:
  """The command line; another switch's benchmark passes its own cases."""
  parser = argparse.ArgumentParser(description=doc.splitlines()[0])
  parser.add_argument("--warmup", type=int, default=20)
  parser.add_argument("--rounds", type=int, default=80)
  parser.add_argument("--block", type=int, default=10)
  parser.add_argument("--quick", action="store_true",
                      help="the quick cases, a few steps each: the harness")
  parser.add_argument("--cases", default=None,
                      help=f"comma-separated case numbers (0-{len(cases) - 1})"
                      " to run")
  args = parser.parse_args(argv)
  settings = timing.Settings(args.warmup, args.rounds, args.block)
  if args.quick:
    settings, cases = timing.QUICK, quick_cases
  if args.cases:
    cases = [cases[int(i)] for i in args.cases.split(",")]
  run(settings, cases, report=lambda line: print(line, flush=True),
      switch=switch)
  return 0


if __name__ == "__main__":
  sys.exit(main())
