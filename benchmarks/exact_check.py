"""The exact check's conditional, kept as one op or lowered, in one process.

    python -m benchmarks.exact_check [--rounds 80] [--block 10]
        [--warmup 20] [--quick] [--cases 0,1,...]

mplso's finite check adds up small gradients of one shape, a sum that can
overflow, so where a model has such a group it runs the exact `IsFinite` +
`All` check when the total is not finite, in a `tf.cond`. In a graph that
`cond` is kept as one `If` op (`tf_seams.cond_as_one_op`); lowered, as
TensorFlow does by default, it would run a `Switch` per gradient at every
step. For every family at 20 and 200 small variables, where each shape has
a group (SGD, no XLA: XLA compiles the `If` itself; a model without a group
has no such `cond`), this builds mplso's step lowered
(`finite.EXACT_CHECK_AS_ONE_OP = False`, "off"), kept as one op ("on") and
kept again ("on_again", the noise floor), and times them interleaved, as
`benchmarks.overflow_log` does (its `measure`). No step overflows, so the
exact check never runs: what is measured is what the conditional costs a
finite step. `--quick` runs the 20-variable cases a few steps each: it
checks the harness, its timings are noise.
"""

from __future__ import annotations

import sys

from benchmarks import catalog
from benchmarks import overflow_log
from benchmarks import timing

# (family, model, jit_compile), in report order.
CASES = tuple((family, model, False)
              for model in (catalog.DEEP_20, catalog.DEEP_200)
              for family in catalog.FAMILIES)
QUICK_CASES = tuple(c for c in CASES if c[1] is catalog.DEEP_20)


def _switch():
  from mplso._src.core import finite  # pylint: disable=g-import-not-at-top
  return finite, "EXACT_CHECK_AS_ONE_OP"


def run(settings: timing.Settings, cases=CASES, report=print) -> list[dict]:
  """Measures every case in `cases` (see `overflow_log.measure`)."""
  return overflow_log.run(settings, cases, report=report, switch=_switch)


def main(argv: list[str] | None = None) -> int:
  return overflow_log.main(argv, doc=__doc__, cases=CASES,
                           quick_cases=QUICK_CASES, switch=_switch)


if __name__ == "__main__":
  sys.exit(main())
