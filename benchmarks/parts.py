"""What mplso's time beyond the barrier is made of: floor, check and skip.

    python -m benchmarks.parts                  # 24 scenarios, ~15 min
    python -m benchmarks.parts --quick          # a minute; timings are noise
    python -m benchmarks.parts --processes 3 --scenarios tf1_sgd_10vars

For the matrix's 10-variable scenarios (`catalog.MATRIX`: every family with
SGD, Adam and Adagrad, without and with XLA), each fresh process (one family,
with or without XLA, as `benchmarks.matrix` runs them) times six variants
interleaved: bare, barrier, TF's wrapper and mplso, and mplso built with part
of its step taken out (for measurement only; both are wrong on a NaN):

* `unchecked`: no finite check and no skip. The loss is scaled, every
  gradient unscaled, the loss scale updated as after a finite step, and the
  updates wait for every unscaled gradient, then always run: what any
  skipping wrapper pays before it reads a gradient to check it.
* `unskipped`: the check, but no skip: the updates wait for the check's flag,
  then always run.

So, beyond the barrier: *floor* = unchecked - barrier, *check* = unskipped -
unchecked, *skip* = mplso - unskipped. The target of the performance issue
(mplso beyond the barrier at most 0.5x TF's) leaves `0.5 x TF - floor` for
the check and the skip together; the report gives it beside what they take.
Writes `parts.json` and `parts.md` into `docs/benchmarks/` (or `--out`).
"""

from __future__ import annotations

import contextlib
import statistics
import sys

from benchmarks import catalog
from benchmarks import matrix
from benchmarks import run
from benchmarks import timing

TAKEN_OUT = ("unchecked", "unskipped")
VARIANTS = ("bare", catalog.BARRIER, "tf", "mplso") + TAKEN_OUT
SCENARIOS = tuple(s for s in catalog.MATRIX if s.model is catalog.MLP_10)
SETTINGS = timing.Settings(warmup=10, rounds=30, block=10)


def _flag_after_every_gradient(grads):
  """A constant True that waits for every gradient: no check."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  values = [g.values if isinstance(g, tf.IndexedSlices) else g
            for g in grads if g is not None]
  with tf.control_dependencies(values):
    return tf.identity(tf.constant(True))


def _always_apply(should_apply, apply_fn, update_op=None, name=None,
                  skip_fn=None):
  """`apply.apply_or_skip` that applies after `should_apply`, always."""
  del skip_fn  # Never skips.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if tf.executing_eagerly():
    apply_fn()
    return None
  with tf.control_dependencies([should_apply]):
    result = apply_fn()
  ops = [op for op in (result, update_op) if op is not None]
  return tf.group(*ops, should_apply, name=name)


@contextlib.contextmanager
def taken_out(variant: str):
  """Builds mplso's steps without the parts `variant` names, in this block."""
  from mplso._src.core import apply  # pylint: disable=g-import-not-at-top
  from mplso._src.core import finite  # pylint: disable=g-import-not-at-top
  saved = apply.apply_or_skip, finite.all_finite
  apply.apply_or_skip = _always_apply
  if variant == "unchecked":
    finite.all_finite = _flag_after_every_gradient
  try:
    yield
  finally:
    apply.apply_or_skip, finite.all_finite = saved


def build(scenario: catalog.Scenario, variant: str):
  """Returns `variant`'s step of `scenario` (`VARIANTS`)."""
  from benchmarks import builders  # pylint: disable=g-import-not-at-top
  if variant not in TAKEN_OUT:
    return builders.build(scenario.family, scenario.model, variant,
                          scenario.jit_compile, scenario.optimizer)
  with taken_out(variant):
    return builders.build(scenario.family, scenario.model, "mplso",
                          scenario.jit_compile, scenario.optimizer)


def _time(names: list[str], settings: timing.Settings) -> dict:
  """Times every variant of each scenario in this process."""
  from benchmarks import builders  # pylint: disable=g-import-not-at-top
  from benchmarks import worker  # pylint: disable=g-import-not-at-top
  results = {}
  with builders.runtime_settings():
    for name in names:
      scenario = catalog.MATRIX_BY_NAME[name]
      built = {v: build(scenario, v) for v in VARIANTS}
      results[name] = worker.time_and_close(built, settings)
  return results


def shares(added_pct: dict) -> dict:
  """One process's parts, each as a fraction of TF's beyond the barrier."""
  barrier = added_pct[catalog.BARRIER]
  tf_beyond = added_pct["tf"] - barrier
  if tf_beyond <= 0:
    return {}
  return {
      "floor": (added_pct["unchecked"] - barrier) / tf_beyond,
      "check": (added_pct["unskipped"] - added_pct["unchecked"]) / tf_beyond,
      "skip": (added_pct["mplso"] - added_pct["unskipped"]) / tf_beyond,
      "mplso": (added_pct["mplso"] - barrier) / tf_beyond,
  }


def combine(runs: list[dict]) -> dict:
  """Medians over processes of each variant's added time and each share."""
  combined = {}
  for name in runs[0]:
    per_process = [r[name] for r in runs]
    added = {v: statistics.median(p["added_pct"][v] for p in per_process)
             for v in VARIANTS[1:]}
    each = [shares(p["added_pct"]) for p in per_process]
    each = [s for s in each if s]
    combined[name] = {
        "bare_ms": statistics.median(p["bare_ms"] for p in per_process),
        "added_pct": added,
        "shares_of_tf_beyond": {
            k: statistics.median(s[k] for s in each) for k in each[0]
        } if each else {},
        "per_process_added_pct": [p["added_pct"] for p in per_process]}
  return combined


def markdown(data: dict) -> str:
  lines = [
      "# Beyond the barrier: floor, check and skip",
      "",
      f"Generated by `{data['command']}`; {data['processes']} fresh "
      "process(es), every scenario's six variants interleaved "
      f"({data['rounds']} rounds of {data['block']} steps). Each part as a "
      "fraction of TF's wrapper's time beyond the barrier, median over the "
      "processes: *floor* (scale, unscale, loss-scale update, the wait for "
      "every unscaled gradient), *check* (mplso's finite check), *skip* "
      "(mplso's conditional). *Left* is what the target of 0.5 leaves for "
      "the check and the skip: 0.5 - floor.",
      "",
      "| scenario | bare | TF beyond the barrier | floor | check | skip "
      "| mplso | left for check + skip |",
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  ]
  for name, r in data["scenarios"].items():
    a, s = r["added_pct"], r["shares_of_tf_beyond"]
    if not s:
      lines.append(f"| {name} | {r['bare_ms']:.2f} ms | TF adds nothing "
                   "beyond the barrier | | | | | |")
      continue
    tf_beyond = a["tf"] - a[catalog.BARRIER]
    lines.append(
        f"| {name} | {r['bare_ms']:.2f} ms | {tf_beyond:+.1f}% | "
        f"{s['floor']:.2f} | {s['check']:.2f} | {s['skip']:.2f} | "
        f"{s['mplso']:.2f} | {0.5 - s['floor']:.2f} |")
  rows = [r["shares_of_tf_beyond"] for r in data["scenarios"].values()
          if r["shares_of_tf_beyond"]]
  if rows:
    medians = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    lines.append(
        f"| median of the scenarios | | | {medians['floor']:.2f} | "
        f"{medians['check']:.2f} | {medians['skip']:.2f} | "
        f"{medians['mplso']:.2f} | {0.5 - medians['floor']:.2f} |")
  return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
  parser = run.side_parser(__doc__)
  parser.add_argument("--scenarios", help="comma-separated; default: all")
  args = parser.parse_args(argv)
  settings = timing.QUICK if args.quick else SETTINGS
  if run.serve_worker(args, _time, settings):
    return 0
  names = (args.scenarios.split(",") if args.scenarios else
           [s.name for s in SCENARIOS])
  catalog.check_names(names, {s.name: s for s in SCENARIOS})
  processes = args.processes or (1 if args.quick else 3)
  catalog.let_tf1_sessions_cluster_on_cpu()  # Inherited by the workers.
  groups = [[group] for group in matrix.process_groups(
      [catalog.MATRIX_BY_NAME[name] for name in names])]
  results = run.run_workers("benchmarks.parts", groups * processes,
                            args.quick)
  runs = [{name: merged[name] for name in names}  # In the order asked.
          for merged in ({k: v for result in results[i:i + len(groups)]
                          for k, v in result.items()}
                         for i in range(0, len(results), len(groups)))]
  command = "python -m benchmarks.parts" + " --quick" * args.quick
  data = {"command": command, "processes": processes,
          "rounds": settings.rounds, "block": settings.block,
          "scenarios": combine(runs)}
  run.write_reports(args.out, "parts", data, markdown(data))
  return 0


if __name__ == "__main__":
  sys.exit(main())
