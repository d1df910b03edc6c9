"""The GPU check: the configuration matrix, TF's real AMP rewrite, step times.

    python -m benchmarks.gpu                # on a GPU machine, under 8 minutes
    python -m benchmarks.gpu --out DIR      # results elsewhere
    python -m benchmarks.gpu --cpu          # no GPU needed: the harness, tiny

Three parts (`PARTS`), each run only if the time it needs is left of
`--budget-s`:

a. `pytest -q mplso_test/config_matrix_test.py` in a subprocess, before this
   process touches the GPU.
b. TensorFlow's `auto_mixed_precision` Grappler pass on a TF1 float32 MLP,
   trained with mplso's and TF's TF1 wrappers side by side (a NaN added to a
   gradient at one step, 1e6 at another): both must skip and apply the same
   steps and end with the same variables and loss scale.
c. Step times of the bare optimizer, TF's wrapper and mplso, interleaved: a
   TF1 `Session` MLP in float16 with Adam and with SGD, and Keras 3 `fit` of
   a transformer block under `mixed_float16`.

Without a GPU it names the parts it skipped and exits 0, writing nothing;
`--cpu` runs b (the pass's CPU emulation) and c there at tiny sizes. Writes
`gpu.json` and `gpu.md` after each part; exits 1 when a check failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

from benchmarks import catalog
from benchmarks import report
from benchmarks import run
from benchmarks import timing

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS_OUT = os.path.join(run.DOCS_OUT, "gpu")
CPU_OUT = os.path.join(tempfile.gettempdir(), "mplso-benchmarks-gpu-cpu")
CONFIG_MATRIX_TEST = os.path.join("mplso_test", "config_matrix_test.py")
PARTS = {
    "config_matrix": f"a. pytest -q {CONFIG_MATRIX_TEST} on the GPU",
    "amp_parity": "b. TF's auto_mixed_precision rewrite: mplso against TF's "
                  "TF1 wrapper",
    "step_time": "c. step times: bare, TF's wrapper, mplso",
}
# What b and c need at most on a GPU, kept from part a's time.
_RESERVED_S = 180
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
  parity_model: catalog.Model  # b: float32 variables, the pass's MatMuls.
  parity_steps: int
  mlp: catalog.Model  # c: TF1, float16 compute.
  transformer: Transformer  # c: Keras 3 fit.
  settings: timing.Settings
  scenario_s: float  # What one scenario of c may take; skipped if less left.


GPU = Sizes(
    parity_model=catalog.Model(1024, (2048, 2048, 256), "relu", batch=128),
    parity_steps=30,
    mlp=catalog.Model(4096, (4096,) * 4, "relu", batch=256),
    transformer=Transformer(batch=64, sequence=256, width=512, heads=8,
                            hidden=2048),
    settings=timing.FULL, scenario_s=40.0)
CPU = Sizes(
    parity_model=catalog.Model(32, (64, 64, 8), "relu", batch=16),
    parity_steps=12,
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


# a. The configuration matrix test, in a subprocess.
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|"
                    r"deselected|errors?|warnings?)\b")


def pytest_counts(output: str) -> dict[str, int]:
  """The counts of pytest's last summary line ("3 passed, 1 failed in 2s")."""
  for line in reversed(output.strip().splitlines()):
    counts = {{"error": "errors", "warning": "warnings"}.get(kind, kind):
              int(number) for number, kind in _COUNT.findall(line)}
    if counts and re.search(r"\bin [\d.]+s", line):
      return counts
  return {}


def config_matrix(timeout_s: float, path: str = CONFIG_MATRIX_TEST) -> dict:
  """Runs a test module (`path`, from the repository) in pytest.

  Returns:
    Its `status` ("passed", "failed", "timed out" or "missing"), the counts
    of pytest's summary line and the last lines of its output.
  """
  if not os.path.exists(os.path.join(_REPO, path)):
    return {"status": "missing", "note": f"{path} does not exist; nothing run."}
  command = [sys.executable, "-m", "pytest", "-q", path]
  started = time.monotonic()
  # A session of its own: on a timeout its whole group is killed, so no
  # process that pytest started keeps the GPU.
  proc = subprocess.Popen(command, cwd=_REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True,
                          start_new_session=True)
  try:
    output, _ = proc.communicate(timeout=timeout_s)
    status = "passed" if proc.returncode == 0 else "failed"
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    output, _ = proc.communicate()
    status = "timed out"
  return {"status": status, "command": " ".join(command[1:]),
          "returncode": proc.returncode, "timeout_s": round(timeout_s),
          "seconds": round(time.monotonic() - started, 1),
          "counts": pytest_counts(output),
          "tail": output.strip().splitlines()[-25:]}


# b. TF's auto_mixed_precision rewrite, both wrappers side by side.
# What is added to the first gradient, and at which fraction of the run.
_INJECTED = {"nan": (0.2, float("nan")), "1e6": (0.45, 1e6)}
PARITY_LOSS_SCALE = {"initial_loss_scale": 2.0**15, "increment_period": 5,
                     "multiplier": 2.0}


def _parity_run(wrapper: str, model: catalog.Model, steps: int, rewrite: str,
                injected: dict[int, float]) -> dict:
  """Trains `model` under the rewrite with `wrapper`'s TF1 optimizer."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from benchmarks import builders  # pylint: disable=g-import-not-at-top
  x_data, y_data = model.data()
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, x_data.shape)
    y = tf.compat.v1.placeholder(tf.float32, y_data.shape)
    added = tf.compat.v1.placeholder_with_default(0.0, [])
    # float32: the pass decides what runs in float16.
    h, weights, initial = builders.tf1_layers(model, x, tf.float32)
    loss = tf.reduce_mean(tf.square(h - y))
    opt, scale = builders.tf1_wrapper(tf.compat.v1.train.AdamOptimizer(1e-3),
                                      wrapper, **PARITY_LOSS_SCALE)
    global_step = tf.compat.v1.train.get_or_create_global_step()
    (first, variable), *rest = opt.compute_gradients(loss)
    train_op = opt.apply_gradients([(first + added, variable)] + rest,
                                   global_step=global_step)
    init = tf.compat.v1.global_variables_initializer()
  config = tf.compat.v1.ConfigProto()
  config.gpu_options.allow_growth = True
  options = config.graph_options.rewrite_options
  setattr(options, rewrite, options.ON)
  history, metadata = [], tf.compat.v1.RunMetadata()
  with tf.compat.v1.Session(graph=graph, config=config) as session:
    session.run(init, initial)
    for i in range(steps):
      feed = {x: x_data, y: y_data, added: injected.get(i, 0.0)}
      first = i == 0  # Keeps the graphs the executor ran, after Grappler.
      options = tf.compat.v1.RunOptions(output_partition_graphs=first)
      session.run(train_op, feed, options=options,
                  run_metadata=metadata if first else None)
      history.append(session.run((global_step, scale)))
    final = session.run(weights)
  half = tf.float16.as_datatype_enum
  nodes = [n for g in metadata.partition_graphs for n in g.node]
  done = [int(s) for s, _ in history]
  return {
      "applied": [now > before for before, now in zip([0] + done, done)],
      "loss_scale": [float(s) for _, s in history],
      "float16_casts": sum(n.op == "Cast" and n.attr["DstT"].type == half
                           for n in nodes),
      # Every kernel's name: MatMul, _MklMatMul, _FusedMatMul, ...
      "float16_matmuls": sum(n.op.endswith("MatMul") and
                             n.attr["T"].type == half for n in nodes),
      "weights": final}


def amp_parity(model: catalog.Model, steps: int, on_gpu: bool) -> dict:
  """Part b: both wrappers under the rewrite; whether they agree."""
  rewrite = "auto_mixed_precision" if on_gpu else "auto_mixed_precision_cpu"
  at = {name: round(f * steps) for name, (f, _) in _INJECTED.items()}
  values = {at[name]: value for name, (_, value) in _INJECTED.items()}
  runs = {w: _parity_run(w, model, steps, rewrite, values)
          for w in catalog.WRAPPERS}
  pairs = list(zip(runs["tf"]["weights"], runs["mplso"]["weights"]))
  result = {
      "rewrite": rewrite, "model": model.describe(), "steps": steps,
      "loss_scale_settings": PARITY_LOSS_SCALE,
      "injected": {str(i): name for name, i in at.items()},
      "fired": all(r["float16_casts"] + r["float16_matmuls"] > 0
                   for r in runs.values()),
      **{key: {w: r[key] for w, r in runs.items()} for key in (
          "float16_casts", "float16_matmuls", "applied", "loss_scale")},
      "same_steps": runs["tf"]["applied"] == runs["mplso"]["applied"],
      "same_loss_scale": runs["tf"]["loss_scale"] == runs["mplso"][
          "loss_scale"],
      "max_abs_weight_difference": max(float(np.max(np.abs(a - b)))
                                       for a, b in pairs),
      "weights_allclose": all(np.allclose(a, b, rtol=1e-3, atol=1e-5)
                              for a, b in pairs),
      "nan_step_skipped": not any(r["applied"][at["nan"]]
                                  for r in runs.values()),
      "big_step_applied": {w: r["applied"][at["1e6"]]
                           for w, r in runs.items()}}
  result["ok"] = all(result[k] for k in (
      "fired", "same_steps", "same_loss_scale", "weights_allclose",
      "nan_step_skipped"))
  return result


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


def step_times(sizes: Sizes, budget_s: float) -> dict:
  """Part c: every scenario there is time left for."""
  scenarios = {"tf1_mlp_adam": lambda: _tf1_scenario(sizes, "adam"),
               "tf1_mlp_sgd": lambda: _tf1_scenario(sizes, "sgd"),
               "keras3_fit_transformer": lambda: _keras3_scenario(sizes)}
  rows, skipped, errors = [], [], {}
  for name, measure in scenarios.items():
    if _left(budget_s) < sizes.scenario_s:
      skipped.append(name)
      _log(f"c. {name}: skipped, {_left(budget_s):.0f} s left")
      continue
    _log(f"c. {name}")
    try:
      rows.append(measure())
    except Exception:  # pylint: disable=broad-exception-caught
      errors[name] = _error()
      _log(f"c. {name} failed:\n{errors[name]}")
  return {"settings": dataclasses.asdict(sizes.settings), "rows": rows,
          "skipped_for_time": skipped, "errors": errors}


def markdown(data: dict) -> str:
  """The results as Markdown."""
  lines = [
      "# The GPU check", "",
      f"Generated by `{data['command']}` at {data['started_utc']} on "
      f"{data['device']} ({data['versions']})."]
  if data["skipped"]:
    lines += ["", "Skipped: " + "; ".join(
        f"{PARTS[p]} ({why})" for p, why in data["skipped"].items()) + "."]
  matrix = data.get("config_matrix")
  if matrix:
    counts = ", ".join(f"{n} {k}" for k, n in matrix.get("counts", {}).items())
    lines += ["", "## a. The configuration matrix", "",
              matrix.get("note") or
              f"`{matrix['command']}`: **{matrix['status']}** "
              f"({counts or 'no summary line'}) in {matrix['seconds']} s."]
  parity = data.get("amp_parity")
  if parity:
    lines += ["", "## b. TF's auto_mixed_precision rewrite", ""]
  if parity and "error" in parity:
    lines += ["**FAILED** with an error:", "",
              f"```text\n{parity['error']}\n```"]
  elif parity:
    lines += [
        f"`{parity['rewrite']}` on a TF1 float32 MLP ({parity['model']}), "
        f"Adam, {parity['steps']} steps, DynamicLossScale "
        f"{parity['loss_scale_settings']}; injected after compute_gradients: "
        + ", ".join(f"step {i}: {n}" for i, n in parity["injected"].items())
        + ".", "",
        f"- the pass fired: **{'yes' if parity['fired'] else 'NO'}** "
        f"(float16 Casts {parity['float16_casts']}, float16 MatMuls "
        f"{parity['float16_matmuls']})",
        f"- same steps skipped and applied: {parity['same_steps']}; the NaN "
        f"step skipped by both: {parity['nan_step_skipped']}; the 1e6 step "
        f"applied: {parity['big_step_applied']}",
        f"- same loss scale at every step: {parity['same_loss_scale']} "
        f"(final: {parity['loss_scale']['tf'][-1]:g} / "
        f"{parity['loss_scale']['mplso'][-1]:g})",
        f"- same variables: {parity['weights_allclose']} (largest difference "
        f"{parity['max_abs_weight_difference']:.3g})",
        f"- **{'passed' if parity['ok'] else 'FAILED'}**"]
  timed = data.get("step_time")
  if timed:
    settings = timed["settings"]
    lines += [
        "", "## c. Step time", "",
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
         for r in timed["rows"]])
    lines += [""] + [f"- `{r['scenario']}`: {r['description']}; final loss "
                     f"scale {r['final_loss_scale']}" for r in timed["rows"]]
    if timed["skipped_for_time"]:
      lines.append("- not run, no time left: "
                   + ", ".join(timed["skipped_for_time"]))
    for name, error in timed["errors"].items():
      lines += [f"- `{name}` **failed**:", "", f"```text\n{error}\n```"]
  return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--cpu", action="store_true", help="tiny b and c on CPU")
  parser.add_argument("--out", help=f"output folder (default: {DOCS_OUT}, "
                      f"or {CPU_OUT} with --cpu)")
  parser.add_argument("--budget-s", type=float, default=450.0,
                      help="seconds the whole run plans to take")
  args = parser.parse_args(argv)
  # A hang (PTX compilation, a stuck step) must not outlast the budget.
  faulthandler.dump_traceback_later(args.budget_s + 25, exit=True)
  # Kernels compiled from PTX are cached for the parts after the first.
  os.environ.setdefault("CUDA_CACHE_MAXSIZE", str(4 * 2**30))
  os.environ.setdefault("CUDA_MODULE_LOADING", "LAZY")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  gpus = tf.config.list_physical_devices("GPU")
  on_gpu = bool(gpus) and not args.cpu
  skipped = {}
  if on_gpu:
    # Before the GPU runtime starts, so this process holds only what it uses.
    for gpu in gpus:
      tf.config.experimental.set_memory_growth(gpu, True)
    details = tf.config.experimental.get_device_details(gpus[0])
    capability = details.get("compute_capability")
    device = details.get("device_name", "GPU") + (
        f" (compute capability {capability[0]}.{capability[1]})"
        if capability else "")
  else:
    skipped = dict.fromkeys(["config_matrix"] if args.cpu else PARTS,
                            "--cpu" if args.cpu else "no GPU present")
    print("A GPU is present, but --cpu runs on the CPU." if gpus
          else "No GPU present.")
    for part, reason in skipped.items():
      print(f"Skipped {PARTS[part]}: {reason}.")
    if not args.cpu:
      print("Nothing written. `--cpu` checks parts b and c on the CPU at "
            "tiny sizes.")
      return 0
    tf.config.set_visible_devices([], "GPU")
    # The remapper's fused float16 MatMul+BiasAdd is slow on CPU.
    tf.config.optimizer.set_experimental_options({"remapping": False})
    device = (f"CPU only ({platform.machine()}, {os.cpu_count()} cores): "
              "--cpu, tiny sizes, timings are noise")
  from benchmarks import worker  # pylint: disable=g-import-not-at-top
  out = args.out or (DOCS_OUT if on_gpu else CPU_OUT)
  data = {
      "command": "python -m benchmarks.gpu" + " --cpu" * args.cpu,
      "started_utc": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
      "device": device,
      "versions": ", ".join(f"{k} {v}" for k, v in worker.versions().items()),
      "skipped": skipped}
  print(f"Device: {device}", flush=True)

  def write() -> list[str]:  # After each part: a run cut short keeps them.
    return report.write(out, "gpu", data, markdown(data))

  ok = True
  if on_gpu:
    timeout = max(30.0, _left(args.budget_s) - _RESERVED_S)
    _log(f"a. {CONFIG_MATRIX_TEST} (timeout {timeout:.0f} s)")
    matrix = data["config_matrix"] = config_matrix(timeout)
    ok &= matrix["status"] in ("passed", "missing")
    _log(f"a. {matrix['status']} {matrix.get('counts', '')}")
    write()
  sizes = GPU if on_gpu else CPU
  _log("b. auto_mixed_precision: TF's wrapper and mplso")
  try:
    data["amp_parity"] = amp_parity(sizes.parity_model, sizes.parity_steps,
                                    on_gpu)
  except Exception:  # pylint: disable=broad-exception-caught
    data["amp_parity"] = {"error": _error(), "ok": False}
    _log(f"b. failed:\n{data['amp_parity']['error']}")
  ok &= data["amp_parity"]["ok"]
  write()
  data["step_time"] = step_times(sizes, args.budget_s)
  ok &= not data["step_time"]["errors"]
  paths = write()
  faulthandler.cancel_dump_traceback_later()
  print(markdown(data))
  print(f"Results: {', '.join(paths)}. Checks "
        + ("passed." if ok else "FAILED."), flush=True)
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
