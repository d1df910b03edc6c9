"""mplso's one-`Switch` gate on and off, interleaved in one process.

    python -m benchmarks.gates [--rounds 80] [--block 10] [--warmup 20]
        [--order on,off]

For the TF1 Session step and the tf_keras `tf.function` loop, at 10 and 200
variables, builds mplso's step twice, with `gates.ENABLED` on and off, and
times the two in interleaved rounds (`timing.interleaved`). A `tf.function`
builds no gate, so there the two steps are the same graph: their difference
is the noise floor of the machine and the method. Prints, per case, the
nodes one TF1 step executes, the median step times, and the quartiles over
rounds of (gated / ungated median in the same round) - 1 with the share of
rounds where the gated step was faster.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from benchmarks import builders
from benchmarks import catalog
from benchmarks import timing

CASES = ((catalog.TF1, catalog.DEEP_10), (catalog.TF1, catalog.DEEP_200),
         (catalog.TF_KERAS, catalog.DEEP_10),
         (catalog.TF_KERAS, catalog.DEEP_200))


def _executed_nodes(built: builders.Built) -> int | None:
  if built.traced_step is None:
    return None
  metadata = built.traced_step()
  return sum(len(d.node_stats) for d in metadata.step_stats.dev_stats)


def measure(family, model, settings: timing.Settings,
            order=("off", "on")) -> dict:
  """Times mplso's step of `model` with the gate on and off."""
  from mplso._src.core import gates  # pylint: disable=g-import-not-at-top
  before = gates.ENABLED
  built = {}
  try:
    for name in order:
      gates.ENABLED = name == "on"
      built[name] = builders.build(family, model, "mplso")
  finally:
    gates.ENABLED = before
  try:
    nodes = {name: _executed_nodes(b) for name, b in built.items()}
    times = timing.interleaved({n: b.step for n, b in built.items()},
                               settings)
  finally:
    for b in built.values():
      b.close()
  ratios = [statistics.median(on) / statistics.median(off) - 1
            for on, off in zip(times["on"], times["off"])]
  q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
  return {
      "case": f"{family.name}, {model.num_variables} variables",
      "executed_nodes": nodes,
      "median_ms": {n: statistics.median(t for block in blocks for t in block)
                    * 1e3 for n, blocks in times.items()},
      "paired_pct": (100 * q1, 100 * median, 100 * q3),
      "gated_faster_pct": 100 * sum(r < 0 for r in ratios) / len(ratios),
  }


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--warmup", type=int, default=20)
  parser.add_argument("--rounds", type=int, default=80)
  parser.add_argument("--block", type=int, default=10)
  parser.add_argument("--order", default="off,on",
                      help="which step runs first in each round")
  args = parser.parse_args(argv)
  settings = timing.Settings(args.warmup, args.rounds, args.block)
  with builders.runtime_settings():
    for family, model in CASES:
      result = measure(family, model, settings, tuple(args.order.split(",")))
      q1, median, q3 = result["paired_pct"]
      times = ", ".join(f"{n} {t:.3f} ms"
                        for n, t in result["median_ms"].items())
      print(f"{result['case']}: executed nodes {result['executed_nodes']}; "
            f"median {times}; gated/ungated - 1 per round: median "
            f"{median:+.1f}% (quartiles {q1:+.1f}%, {q3:+.1f}%), gated "
            f"faster in {result['gated_faster_pct']:.0f}% of rounds",
            flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
