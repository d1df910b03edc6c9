r"""Step times on a GPU: the bare optimizer, TF's wrapper and mplso.

    python -m benchmarks.gpu                # on a GPU machine, under 3.5 minutes
    python -m benchmarks.gpu --out DIR      # results elsewhere
    python -m benchmarks.gpu --cpu          # no GPU needed: the harness, tiny

Times, interleaved, a TF1 `Session` MLP in float16 with Adam and with SGD,
and Keras 3 `fit` of a transformer block under `mixed_float16`; each scenario
runs only if `Sizes.scenario_s` is left of `--budget-s`. Writes `gpu.json`
and `gpu.md` after each scenario; exits 1 when one failed. Without a GPU it
says so and exits 0, writing nothing; `--cpu` runs the scenarios on the CPU
at tiny sizes (the harness; its timings are noise).

What must hold on a GPU is tested, not timed:
`mplso_test/integration/gpu_test.py` (TF's `auto_mixed_precision` rewrite,
mplso against TF's wrapper; the `gpu` marker) and
`mplso_test/integration/config_matrix_test.py`. The GPU check runs them and
then this, from the repository root, with mplso's test extras installed; it
takes 9 minutes at most (pytest is stopped after 5, this stops itself by
3.5) and exits non-zero when a test or a scenario failed:

    timeout -s INT -k 20 300 python -m pytest -q \
        mplso_test/integration/gpu_test.py \
        mplso_test/integration/config_matrix_test.py; a=$?; \
        python -m benchmarks.gpu; exit $((a | $?))
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
import dataclasses
import faulthandler
import os
import platform
import sys
import tempfile
import time
import traceback

import numpy as np

if not __package__:  # Run as a file, `python benchmarks/gpu.py`.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

from benchmarks import catalog  # noqa: E402
from benchmarks import report  # noqa: E402
from benchmarks import run  # noqa: E402
from benchmarks import timing  # noqa: E402

DOCS_OUT = os.path.join(run.DOCS_OUT, "gpu")
CPU_OUT = os.path.join(tempfile.gettempdir(), "mplso-benchmarks-gpu-cpu")
SCENARIOS = ("tf1_mlp_adam", "tf1_mlp_sgd", "keras3_fit_transformer")
_START = time.monotonic()


@dataclasses.dataclass(frozen=True)
class Transformer:
  """One transformer block (attention, feed-forward, two layer norms)."""
  batch: int
  sequence: int
  width: int
  heads: int
  hidden: int


@dataclasses.dataclass(frozen=True)
class Sizes:
  mlp: catalog.Model  # TF1, float16 compute.
  transformer: Transformer  # Keras 3 fit.
  settings: timing.Settings
  scenario_s: float  # What one scenario may take; skipped if less left.


GPU = Sizes(
    mlp=catalog.Model(4096, (4096,) * 4, "relu", batch=256),
    transformer=Transformer(batch=64, sequence=256, width=512, heads=8,
                            hidden=2048),
    settings=timing.FULL, scenario_s=40.0)
CPU = Sizes(
    mlp=catalog.Model(32, (32, 32, 8), "relu", batch=8),
    transformer=Transformer(batch=4, sequence=8, width=16, heads=2, hidden=32),
    settings=timing.QUICK, scenario_s=0.0)


def _log(message: str) -> None:
  print(f"[{time.monotonic() - _START:6.1f}s gpu] {message}", file=sys.stderr,
        flush=True)


def _left(budget_s: float) -> float:
  return budget_s - (time.monotonic() - _START)


def _error() -> str:
  """The exception being handled, its last lines: the run goes on."""
  return "".join(traceback.format_exc().strip().splitlines(True)[-12:])


def _row(name: str, description: str, summary: dict, scales: dict) -> dict:
  """One scenario's result from `timing.summarize`'s `summary`."""
  median = {v: summary[v]["median_ms"] for v in catalog.VARIANTS}
  added = {v: summary[v]["paired_added_ms"] for v in catalog.WRAPPERS}
  return {
      "scenario": name, "description": description,
      "steps_per_variant": summary["bare"]["steps"],
      "median_ms": median, "paired_added_ms": added,
      "mplso_over_tf": median["mplso"] / median["tf"],
      # (mplso - bare) / (TF - bare), from the paired added times.
      "overhead_ratio": report.ratio(added["mplso"], added["tf"]),
      "final_loss_scale": scales}


def _tf1_scenario(sizes: Sizes, optimizer: str) -> dict:
  """The TF1 Session MLP (float16 compute) of `builders`, interleaved."""
  from benchmarks import worker  # pylint: disable=g-import-not-at-top
  with worker.built_variants(catalog.TF1, sizes.mlp,
                             optimizer=optimizer) as built:
    summary, scales = worker.time_variants(built, sizes.settings)
  return _row(f"tf1_mlp_{optimizer}",
              f"TF1 Session, {catalog.OPTIMIZERS[optimizer]}; "
              f"{sizes.mlp.describe()}, float16 compute", summary, scales)


def _transformer_block(keras, size: Transformer):
  inputs = keras.Input((size.sequence, size.width))
  attended = keras.layers.MultiHeadAttention(
      size.heads, size.width // size.heads)(inputs, inputs)
  x = keras.layers.LayerNormalization()(keras.layers.Add()([inputs,
                                                             attended]))
  h = keras.layers.Dense(size.hidden, activation="gelu")(x)
  h = keras.layers.Dense(size.width)(h)
  x = keras.layers.LayerNormalization()(keras.layers.Add()([x, h]))
  # Outputs float32, as the mixed-precision guides recommend.
  outputs = keras.layers.Activation("linear", dtype="float32")(x)
  return keras.Model(inputs, outputs)


def _keras3_scenario(sizes: Sizes) -> dict:
  """Keras 3 `fit` of a transformer block, each batch timed by a callback.

  Each round runs one `fit` of `settings.block` steps per variant, in turn.
  A callback that handles every batch's end makes Keras wait for the step's
  result there (it converts the logs), so a batch's time is the step's.
  """
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from benchmarks import builders  # pylint: disable=g-import-not-at-top
  size, settings = sizes.transformer, sizes.settings
  x, y = np.random.default_rng(1).standard_normal(
      (2, size.batch, size.sequence, size.width)).astype(np.float32)
  data = tf.data.Dataset.from_tensors((x, y)).repeat()
  before = keras.config.dtype_policy()
  keras.config.set_dtype_policy("mixed_float16")
  models, scales, weights = {}, {}, None
  try:
    for variant in catalog.VARIANTS:
      net = _transformer_block(keras, size)
      weights = weights or net.get_weights()
      net.set_weights(weights)
      _, scales[variant] = builders.compile_keras3(net, "adam", variant)
      models[variant] = net
  finally:
    keras.config.set_dtype_policy(before)

  def fit(net, steps: int) -> list[float]:
    marks = []  # The time at each batch's begin and end.

    def mark(batch, logs):
      del batch, logs  # Unused.
      marks.append(time.perf_counter())

    net.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False,
            callbacks=[keras.callbacks.LambdaCallback(
                on_train_batch_begin=mark, on_train_batch_end=mark)])
    return [end - begin for begin, end in zip(marks[::2], marks[1::2])]

  for net in models.values():
    fit(net, settings.warmup)  # Traces and compiles.
  times = {v: [] for v in models}
  for _ in range(settings.rounds):
    for variant, net in models.items():
      times[variant].append(fit(net, settings.block))
  return _row("keras3_fit_transformer",
              f"Keras 3 model.fit under mixed_float16, Adam; transformer "
              f"block, sequence {size.sequence} x width {size.width}, "
              f"{size.heads} heads, feed-forward {size.hidden}, batch "
              f"{size.batch}; jit_compile={models['mplso'].jit_compile}",
              timing.summarize(times, baseline="bare"),
              {v: scales[v]() for v in catalog.WRAPPERS})


def step_times(sizes: Sizes, budget_s: float,
               progress: Callable[[dict], object] = lambda result: None
               ) -> dict:
  """Every scenario (`SCENARIOS`) there is time left for.

  `progress` is called with the result so far after each scenario.
  """
  scenarios = {"tf1_mlp_adam": lambda: _tf1_scenario(sizes, "adam"),
               "tf1_mlp_sgd": lambda: _tf1_scenario(sizes, "sgd"),
               "keras3_fit_transformer": lambda: _keras3_scenario(sizes)}
  assert tuple(scenarios) == SCENARIOS
  result = {"settings": dataclasses.asdict(sizes.settings), "rows": [],
            "skipped_for_time": [], "errors": {}}
  for name, measure in scenarios.items():
    if _left(budget_s) < sizes.scenario_s:
      result["skipped_for_time"].append(name)
      _log(f"{name}: skipped, {_left(budget_s):.0f} s left")
      continue
    _log(name)
    try:
      result["rows"].append(measure())
    except Exception:  # pylint: disable=broad-exception-caught
      result["errors"][name] = _error()
      _log(f"{name} failed:\n{result['errors'][name]}")
    progress(result)
  return result


def markdown(data: dict) -> str:
  """The results as Markdown."""
  settings = data["settings"]
  lines = [
      "# Step times on a GPU", "",
      f"Measured at commit {data['commit']} by `{data['command']}` "
      f"({data['started_utc']}) on {data['device']} ({data['versions']}).",
      "",
      f"Median ms per step; {settings['warmup']} warm-up steps, then "
      f"{settings['rounds']} rounds of {settings['block']} steps of each "
      "variant in turn; the wrappers' added ms, paired per round, in "
      "brackets. *Overhead ratio*: (mplso - bare) / (TF - bare), from the "
      "paired added times.", ""]
  lines += report.table(
      ["scenario", "bare", "TF's wrapper", "mplso", "mplso/TF",
       "overhead ratio"],
      [[r["scenario"], f"{r['median_ms']['bare']:.3f} ms"] + [
          f"{r['median_ms'][v]:.3f} ms ({r['paired_added_ms'][v]:+.3f})"
          for v in catalog.WRAPPERS] + [
              f"{r['mplso_over_tf']:.3f}",
              report.ratio_text(r["overhead_ratio"])]
       for r in data["rows"]])
  lines += [""] + [f"- `{r['scenario']}`: {r['description']}; final loss "
                   f"scale {r['final_loss_scale']}" for r in data["rows"]]
  if data["skipped_for_time"]:
    lines.append("- not run, no time left: "
                 + ", ".join(data["skipped_for_time"]))
  for name, error in data["errors"].items():
    lines += [f"- `{name}` **failed**:", "", f"```text\n{error}\n```"]
  return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--cpu", action="store_true",
                      help="tiny sizes on the CPU, even where a GPU is")
  parser.add_argument("--out", help=f"output folder (default: {DOCS_OUT}, "
                      f"or {CPU_OUT} with --cpu)")
  parser.add_argument("--budget-s", type=float, default=180.0,
                      help="seconds the run plans to take; on a GPU a "
                      f"scenario starts only if {GPU.scenario_s:g} s are left "
                      "(default: %(default)s)")
  args = parser.parse_args(argv)
  # A hang (PTX compilation, a stuck step) must not outlast the budget.
  faulthandler.dump_traceback_later(args.budget_s + 25, exit=True)
  # Kernels compiled from PTX are cached for the scenarios after the first.
  os.environ.setdefault("CUDA_CACHE_MAXSIZE", str(4 * 2**30))
  os.environ.setdefault("CUDA_MODULE_LOADING", "LAZY")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  gpus = tf.config.list_physical_devices("GPU")
  on_gpu = bool(gpus) and not args.cpu
  if on_gpu:
    # Before the GPU runtime starts, so this process holds only what it uses.
    for gpu in gpus:
      tf.config.experimental.set_memory_growth(gpu, True)
    details = tf.config.experimental.get_device_details(gpus[0])
    capability = details.get("compute_capability")
    device = details.get("device_name", "GPU") + (
        f" (compute capability {capability[0]}.{capability[1]})"
        if capability else "")
  elif not args.cpu:
    print("No GPU present: nothing timed, nothing written. `--cpu` runs the "
          "scenarios on the CPU at tiny sizes.")
    return 0
  else:
    if gpus:
      print("A GPU is present, but --cpu runs on the CPU.")
    tf.config.set_visible_devices([], "GPU")
    # The remapper's fused float16 MatMul+BiasAdd is slow on CPU.
    tf.config.optimizer.set_experimental_options({"remapping": False})
    device = (f"CPU only ({platform.machine()}, {os.cpu_count()} cores): "
              "--cpu, tiny sizes, timings are noise")
  from benchmarks import worker  # pylint: disable=g-import-not-at-top
  out = args.out or (DOCS_OUT if on_gpu else CPU_OUT)
  data = {
      "commit": report.commit(),  # The code timed: the tree as the run starts.
      "command": "python -m benchmarks.gpu" + " --cpu" * args.cpu,
      "started_utc": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
      "device": device,
      "versions": ", ".join(f"{k} {v}" for k, v in worker.versions().items())}
  print(f"Device: {device}", flush=True)

  def write(result: dict) -> list[str]:  # After each: a run cut short keeps
    data.update(result)                  # what it measured.
    return report.write(out, "gpu", data, markdown(data))

  paths = write(step_times(GPU if on_gpu else CPU, args.budget_s, write))
  faulthandler.cancel_dump_traceback_later()
  print(markdown(data))
  failed = list(data["errors"])
  print(f"Results: {', '.join(paths)}. "
        + (f"FAILED: {', '.join(failed)}." if failed else "Every scenario "
           "that had time ran."), flush=True)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
