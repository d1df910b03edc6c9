"""The first call of a `tf.function` training step: trace, build, one step.

    python -m benchmarks.first_call            # 10, 400 and 1,000 variables
    python -m benchmarks.first_call --quick    # 10 variables, one process

A large model pays its step's trace on every new input signature and every
process start, and a wrapper adds to it with every op it builds per
gradient, also in a branch that never runs. For each family (Keras 3's
`Model.train_step`, the step `fit` runs; a TF1 optimizer's `minimize` in a
`tf.function`), each model size and each variant (`catalog.VARIANTS`), a
fresh process builds the model and the optimizer, then times the first call
of the step, AutoGraph on as users run it. At `FEATURE_SIZES` mplso's
opt-in features (`catalog.FEATURES`: the underflow meter, the calibrated
scale) are timed too, each on mplso's wrapper. Each is repeated in
`--processes` processes (3), one at a time, the variants taking turns; the
table keeps each variant's minimum (the least disturbed run) and, for each
wrapper over TF's, the ratio of those minima beside the median, minimum and
maximum of the per-round ratios (one process of each, run back to back).
Writes `first_call.json` and `first_call.md` to `--out`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks import catalog
from benchmarks import report

FAMILIES = ("keras3", "tf1_function")
SIZES = (10, 400, 1000)
# The sizes at which the features are timed too.
FEATURE_SIZES = (400, 1000)
# The target: a first call at most this many times TF's wrapper's.
TARGET = 1.2


def variants_at(variables: int) -> tuple[str, ...]:
  """The variants timed at `variables` variables."""
  if variables in FEATURE_SIZES:
    return catalog.STEP_VARIANTS
  return catalog.VARIANTS


def model_of(variables: int) -> catalog.Model:
  """A stack of small dense layers with `variables` variables (even)."""
  return dataclasses.replace(catalog.DEEP_200, widths=(8,) * (variables // 2),
                             inputs=8, batch=8)


def _keras3_step(model: catalog.Model, variant: str):
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from benchmarks import builders  # pylint: disable=g-import-not-at-top
  net = builders._keras_model(keras, model)  # pylint: disable=protected-access
  opt, _ = builders.compile_keras3(net, "sgd", variant, jit_compile=False)
  opt.build(net.trainable_variables)  # As fit does before its first step.
  x, y = model.data()
  data = (tf.constant(x), tf.constant(y))
  train_step = tf.function(net.train_step)
  return lambda: train_step(data)


def _tf1_function_step(model: catalog.Model, variant: str):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from benchmarks import builders  # pylint: disable=g-import-not-at-top
  weights = [tf.Variable(w) for w in model.initial_weights()]
  pairs = list(zip(weights[::2], weights[1::2]))
  x, y = (tf.constant(a) for a in model.data())
  opt, _ = builders.tf1_wrapper(
      builders._optimizer(tf.compat.v1.train, "sgd", "MomentumOptimizer"),  # pylint: disable=protected-access
      variant, initial_loss_scale=catalog.INITIAL_SCALE)

  def loss():
    h = builders._dense(tf.cast(x, tf.float16), pairs, model, tf.float16)  # pylint: disable=protected-access
    return tf.reduce_mean(tf.square(tf.cast(h, tf.float32) - y))

  @tf.function
  def train_step():
    opt.minimize(loss, var_list=weights)

  return train_step


_STEPS = {"keras3": _keras3_step, "tf1_function": _tf1_function_step}


def worker(family: str, variant: str, variables: int) -> dict:
  """In this process: builds `family`'s step and times its first call."""
  from benchmarks import builders  # pylint: disable=g-import-not-at-top
  with builders.runtime_settings():
    step = _STEPS[family](model_of(variables), variant)
    start = time.perf_counter()
    step()
    first = time.perf_counter() - start
    start = time.perf_counter()
    step()
  return {"first_call_s": first, "second_call_s": time.perf_counter() - start}


def _in_fresh_process(family: str, variant: str, variables: int) -> dict:
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  out = subprocess.run(
      [sys.executable, "-m", "benchmarks.first_call", "--worker", family,
       variant, str(variables)], check=True, capture_output=True, text=True,
      env=env, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  return json.loads(out.stdout.strip().splitlines()[-1])


def summarize(runs: dict[str, list[float]]) -> dict:
  """One size's result from each variant's seconds, one per round.

  Returns:
    `seconds`: each variant's minimum; `runs`: the seconds per round; and
    `over_tf`, for each wrapper but TF's: `min_ratio` (its minimum over
    TF's) and the `median`, `min` and `max` of its per-round ratios.
  """
  over_tf = {}
  for variant, seconds in runs.items():
    if variant in ("bare", "tf"):
      continue
    paired = [own / tf for own, tf in zip(seconds, runs["tf"])]
    over_tf[variant] = {
        "min_ratio": min(seconds) / min(runs["tf"]),
        "median": statistics.median(paired), "min": min(paired),
        "max": max(paired)}
  return {"seconds": {v: min(s) for v, s in runs.items()},
          "runs": {v: [round(x, 4) for x in s] for v, s in runs.items()},
          "over_tf": over_tf}


def measure(sizes, processes: int) -> dict:
  """`{family: {variables: summarize(...)}}` over `processes` rounds.

  The variants of a size take turns, one process each per round, so that a
  slower stretch of the machine does not fall on one variant alone.
  """
  results = {}
  for family in FAMILIES:
    for variables in sizes:
      variants = variants_at(variables)
      runs = {variant: [] for variant in variants}
      for _ in range(processes):
        for variant in variants:
          runs[variant].append(
              _in_fresh_process(family, variant, variables)["first_call_s"])
      for variant, seconds in runs.items():
        print(f"{family} {variables} {variant}: "
              f"{[round(s, 2) for s in seconds]}", file=sys.stderr,
              flush=True)
      results.setdefault(family, {})[str(variables)] = summarize(runs)
  return results


def _over_tf(entry: dict) -> list[str]:
  """A wrapper's ratio to TF's: of the minima, and per round with spread."""
  return [report.ratio_text(entry["min_ratio"]),
          report.spread_text(entry, digits=2)]


def markdown(data: dict) -> str:
  """The tables: the three variants at every size, then the features."""
  rows, features = [], []
  for family, by_size in data["results"].items():
    for variables, result in by_size.items():
      seconds = result["seconds"]
      rows.append([family, variables] + [f"{seconds[v]:.2f}"
                                         for v in catalog.VARIANTS]
                  + _over_tf(result["over_tf"]["mplso"]))
      for variant in (*catalog.FEATURES, catalog.CONTROL):
        entry = result["over_tf"].get(variant)
        if entry is None:
          continue
        worst = max(entry["min_ratio"], entry["median"])
        features.append(
            [family, variables, variant, f"{seconds[variant]:.2f}",
             f"{seconds['mplso']:.2f}", *_over_tf(entry),
             "control" if variant == catalog.CONTROL else
             "yes" if worst <= TARGET else "**no**"])
  processes = data["meta"]["processes"]
  header = ["step", "variables"] + [f"{v} (s)" for v in catalog.VARIANTS] + [
      "mplso / tf", "per round: median (min-max)"]
  lines = [f"First call (trace, build, one step), minimum of {processes} "
           f"fresh processes, measured at commit {data['meta']['commit']}. "
           "*mplso / tf*: the ratio of the minima; *per round*: the "
           f"ratios of the {processes} rounds (one process of each variant, "
           "back to back), their median, minimum and maximum:", ""]
  lines += report.table(header, rows)
  if features:
    lines += [
        "", f"mplso's opt-in features ({', '.join(catalog.FEATURES)}: "
        f"{'; '.join(catalog.FEATURES.values())}), same processes, measured "
        f"at commit {data['meta']['commit']}. Target: at most {TARGET}x "
        "TF's wrapper, for the ratio of the minima and the median per "
        f"round. `{catalog.CONTROL}`: mplso's wrapper, features off, timed "
        "again in processes of its own, to show what two sets of processes "
        "of the same step differ by:", ""]
    lines += report.table(
        ["step", "variables", "variant", "seconds", "mplso (s)",
         "over tf", "per round: median (min-max)",
         f"within {TARGET}x"], features)
  return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--worker", nargs=3, metavar=("FAMILY", "VARIANT", "N"))
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--processes", type=int, default=3)
  parser.add_argument("--out", default=os.path.join("docs", "benchmarks"))
  args = parser.parse_args(argv)
  if args.worker:
    family, variant, variables = args.worker
    print(json.dumps(worker(family, variant, int(variables))))
    return 0
  sizes = (10,) if args.quick else SIZES
  processes = 1 if args.quick else args.processes
  data = {"meta": {"commit": report.commit(), "processes": processes,
                   "quick": args.quick},
          "results": measure(sizes, processes)}
  os.makedirs(args.out, exist_ok=True)
  report.write(args.out, "first_call", data, markdown(data))
  print(markdown(data))
  return 0


if __name__ == "__main__":
  sys.exit(main())
