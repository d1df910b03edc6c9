"""Times training steps of several variants, interleaved, in one process."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
import dataclasses
import gc
import statistics
import time


@dataclasses.dataclass(frozen=True)
class Settings:
  """How much to run."""
  warmup: int  # Untimed steps per variant first (tracing, Grappler, XLA).
  rounds: int  # Timed rounds; each runs one block of every variant in turn.
  block: int  # Timed steps per variant per round.


# A full run, for the published numbers; a quick one, to check the harness.
# A full run's block is the underflow meter's period
# (`catalog.METER_EVERY`): each block of the metered variant holds exactly
# one sampled step, so its mean is the step's cost with the sample's share.
# Its rounds are as many as `catalog.STEP_VARIANTS`, so that each variant
# takes each place in the order once.
FULL = Settings(warmup=20, rounds=6, block=100)
QUICK = Settings(warmup=2, rounds=3, block=3)


def interleaved(steps: Mapping[str, Callable[[], object]],
                settings: Settings) -> dict[str, list[list[float]]]:
  """Times each step in A B C, B C A, C A B ... blocks; seconds per step.

  Interleaving makes drift of the machine's speed (another process, CPU
  frequency) reach every variant alike. Each round starts one variant
  later than the one before, so that over as many rounds as variants each
  variant takes each place in the order once (a block can run faster or
  slower for what ran before it). Python's garbage collector is off while
  timing.

  Returns:
    For each variant, one list of step times (seconds) per round.
  """
  for step in steps.values():
    for _ in range(settings.warmup):
      step()
  times = {name: [] for name in steps}
  gc.collect()
  gc.disable()
  try:
    names = list(steps)
    for r in range(settings.rounds):
      start_at = r % len(names)
      for name in names[start_at:] + names[:start_at]:
        step = steps[name]
        block = []
        for _ in range(settings.block):
          start = time.perf_counter()
          step()
          block.append(time.perf_counter() - start)
        times[name].append(block)
  finally:
    gc.enable()
  return times


def _quartiles(values: list[float]) -> list[float]:
  if len(values) < 2:
    return values * 3
  return statistics.quantiles(values, n=4, method="inclusive")


def paired_ratios(times: Mapping[str, list[list[float]]], variant: str,
                  baseline: str, statistic: Callable[[list[float]], float]
                  = statistics.median) -> list[float]:
  """Per round: `statistic` of `variant`'s block over the baseline's.

  The two blocks of a round ran one after the other, so drift of the
  machine between rounds cancels in each ratio. `statistics.median` leaves
  out a rare slow step; `statistics.fmean` counts it at its share (the
  meter's sampled step, one in a block of `catalog.METER_EVERY`).
  """
  return [statistic(own) / statistic(base)
          for own, base in zip(times[variant], times[baseline])]


def sampled_share(blocks: list[list[float]],
                  baseline: list[list[float]]) -> list[float]:
  """Per round: what one step in a block costs above the others, per step.

  For a variant that does extra work on one step of every block, at the
  same place in each (the meter's sampled step, when a block is its
  period). A step's slowness is its time over its block's median, less the
  same for the baseline's step at that place in the same round (the first
  step of any block can be slow for what ran before). The place is where
  the median round's slowness is largest; each round's share is the
  slowness there spread over the block's steps. Each step is measured
  against steps of the same build, so what separates two builds (where
  their memory landed) does not enter it; a slow step elsewhere can only
  move the place, and then the share is that of the slowest place.
  """

  def slowness(block, base, i):
    return (block[i] / statistics.median(block) -
            base[i] / statistics.median(base))

  places = range(len(blocks[0]))
  by_place = [statistics.median(slowness(block, base, i)
                                for block, base in zip(blocks, baseline))
              for i in places]
  place = by_place.index(max(by_place))
  return [slowness(block, base, place) / len(block)
          for block, base in zip(blocks, baseline)]


def summarize(times: Mapping[str, list[list[float]]],
              baseline: str) -> dict[str, dict[str, float]]:
  """Returns median step times and overheads against `baseline`.

  For every variant: `median_ms`, `q1_ms`, `q3_ms` over all its timed steps
  and `steps`. For every variant but the baseline also:

  * `paired_overhead_pct`: the median over rounds of (this variant's median /
    the baseline's median in the same round) - 1, the number the report uses:
    drift of the machine between rounds cancels.
  * `paired_added_ms`: the same as a time, on the baseline's median step.
  * `added_ms`, `overhead_pct`: from the medians over all rounds, which drift
    between rounds can move.
  """
  flat = {name: [t for block in blocks for t in block]
          for name, blocks in times.items()}
  base_median = statistics.median(flat[baseline])
  summary = {}
  for name, values in flat.items():
    q1, median, q3 = _quartiles(values)
    entry = {"median_ms": median * 1e3, "q1_ms": q1 * 1e3, "q3_ms": q3 * 1e3,
             "steps": len(values)}
    if name != baseline:
      paired = statistics.median(paired_ratios(times, name, baseline)) - 1
      entry.update(
          paired_overhead_pct=paired * 100,
          paired_added_ms=paired * base_median * 1e3,
          added_ms=(median - base_median) * 1e3,
          overhead_pct=(median / base_median - 1) * 100)
    summary[name] = entry
  return summary
