"""Memory of a training run: allocator bytes per step and peak resident set.

    python -m benchmarks.memory VARIANT STEPS    # prints one JSON line

Runs `catalog.MEMORY_SCENARIO` (96 MB of float32 gradients, so a wrapper
that copied them would show) in this fresh process and measures what
`METHOD` says. TF's `get_memory_info` has no CPU support, so the allocator's
bytes come from fully traced TF1 steps (deterministic for a graph: a copy of
a gradient adds its size).
"""

from __future__ import annotations

import json
import resource
import statistics
import sys

_TRACED_STEPS = 3
# For the report; the medians are `benchmarks.run`'s.
METHOD = ("median over fresh processes. allocated_mb: bytes the step "
          "allocated, from TF's CPU allocator in fully traced steps. "
          "step_peak_mb: most bytes the step's own allocations held at once, "
          "from the trace's allocation records (the worst of the traced "
          "steps). training_peak_mb: ru_maxrss after the steps minus "
          "ru_maxrss once the model and optimizer state were built")


def _maxrss_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB.


def _allocator_stats(metadata) -> tuple[float, float]:
  """Returns one step's bytes allocated and its own peak, in MB."""
  allocated, records = 0, []
  for device in metadata.step_stats.dev_stats:
    for node in device.node_stats:
      for memory in node.memory:
        allocated += memory.total_bytes
        records.extend((r.alloc_micros, r.alloc_bytes)
                       for r in memory.allocation_records)
  held = own_peak = 0
  for _, change in sorted(records):
    held += change
    own_peak = max(own_peak, held)
  return allocated / 2**20, own_peak / 2**20


def measure(variant: str, steps: int) -> dict[str, float]:
  """Builds `variant` of the memory scenario, runs it; returns its memory."""
  from benchmarks import builders  # pylint: disable=g-import-not-at-top
  from benchmarks import catalog  # pylint: disable=g-import-not-at-top
  scenario = catalog.MEMORY_SCENARIO
  with builders.runtime_settings():
    built = builders.build(scenario.family, scenario.model, variant)
    after_build = _maxrss_mb()
    for _ in range(steps):
      built.step()
    peak = _maxrss_mb()
    traced = [_allocator_stats(built.traced_step())
              for _ in range(_TRACED_STEPS)]
    built.close()
  return {"rss_after_build_mb": round(after_build, 1),
          "peak_rss_mb": round(peak, 1),
          "training_peak_mb": round(peak - after_build, 1),
          "allocated_mb": round(statistics.median(a for a, _ in traced), 1),
          "step_peak_mb": round(max(s for _, s in traced), 1)}


if __name__ == "__main__":
  print(json.dumps(measure(sys.argv[1], int(sys.argv[2]))))
