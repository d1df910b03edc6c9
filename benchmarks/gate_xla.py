"""A TF1 gate's branches kept out of XLA's auto-clusters or not, in one process.

    python -m benchmarks.gate_xla [--rounds 80] [--block 10] [--warmup 20]
        [--quick] [--cases 0,1,...]

In a TF1 graph mplso gates the apply with one `Switch` (`gates.run_either`).
Under XLA auto-clustering (the Session's `global_jit_level`; on CPU also
`TF_XLA_FLAGS=--tf_xla_cpu_global_jit`, which this sets) the gated ops
cannot join the step's cluster, and XLA compiled them as a second one. Each
op of a gate's branches is marked to stay out of XLA's clusters
(`gates.KEEP_BRANCHES_OUT_OF_XLA`). This builds mplso's TF1 step without the
marks ("off"), with them ("on") and again with them ("on_again", the noise
floor), and times them interleaved, as `benchmarks.overflow_log` does (its
`measure`): SGD, Adam and Adagrad at 10 and 200 variables under XLA, and
SGD without XLA, where the marks should change nothing. `--quick` runs the
10-variable SGD cases a few steps each: it checks the harness.
"""

from __future__ import annotations

import sys

from benchmarks import catalog
from benchmarks import overflow_log

# (family, model, jit_compile, optimizer), in report order.
CASES = tuple((catalog.TF1, model, True, optimizer)
              for optimizer in catalog.OPTIMIZERS
              for model in (catalog.MLP_10, catalog.DEEP_200)) + tuple(
                  (catalog.TF1, model, False, "sgd")
                  for model in (catalog.MLP_10, catalog.DEEP_200))
QUICK_CASES = tuple(c for c in CASES
                    if c[1] is catalog.MLP_10 and c[3] == "sgd")


def _switch():
  from mplso._src.core import gates  # pylint: disable=g-import-not-at-top
  return gates, "KEEP_BRANCHES_OUT_OF_XLA"


def main(argv: list[str] | None = None) -> int:
  catalog.let_tf1_sessions_cluster_on_cpu()
  return overflow_log.main(argv, doc=__doc__, cases=CASES,
                           quick_cases=QUICK_CASES, switch=_switch)


if __name__ == "__main__":
  sys.exit(main())
