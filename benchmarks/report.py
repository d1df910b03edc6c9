"""Writes benchmark results as JSON and Markdown tables."""

from __future__ import annotations

import functools
import json
import os
import subprocess

from benchmarks import catalog

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LABELS = {"tf": "TF's wrapper", "mplso": "mplso",
           "mplso_meter": "mplso with the meter",
           "mplso_calibrate": "mplso calibrated",
           catalog.CONTROL: "mplso built again"}


def write(out: str, name: str, data: dict, text: str) -> list[str]:
  """Writes `data` to `out`/NAME.json, `text` to NAME.md; returns the paths."""
  os.makedirs(out, exist_ok=True)
  paths = [os.path.join(out, f"{name}.{ext}") for ext in ("json", "md")]
  for path, content in zip(paths, (json.dumps(data, indent=1) + "\n", text)):
    with open(path, "w") as f:
      f.write(content)
  return paths


def commit() -> str:
  """The commit measured: HEAD's short hash, "-dirty" if the tree has changes.

  Every results file names it, and the tables made from one say "measured at
  commit ...", so a number is never read as newer than the code it timed.
  """
  try:
    return subprocess.run(["git", "describe", "--always", "--dirty"],
                          cwd=_REPO, capture_output=True, text=True,
                          check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return "unknown"


BEGIN = "<!-- benchmark results: begin -->"
END = "<!-- benchmark results: end -->"


def update_page(path: str, data: dict) -> None:
  """Rewrites the part of `path` between BEGIN and END with `summary(data)`.

  Raises:
    ValueError: if the page lacks the two markers.
  """
  with open(path) as f:
    page = f.read()
  if BEGIN not in page or END not in page:
    raise ValueError(f"{path} needs the markers {BEGIN!r} and {END!r}.")
  head, rest = page.split(BEGIN, 1)
  tail = rest.split(END, 1)[1]
  with open(path, "w") as f:
    f.write(f"{head}{BEGIN}\n{summary(data)}{END}{tail}")


def table(header: list[str], rows: list[list], left: int = 1) -> list[str]:
  """A Markdown table: its first `left` columns align left, the rest right."""
  align = ["---"] * left + ["---:"] * (len(header) - left)
  return [f"| {' | '.join(str(c) for c in row)} |"
          for row in (header, align, *rows)]


def ratio(numerator: float, denominator: float) -> float | None:
  """The ratio, or None where the denominator is not positive."""
  return numerator / denominator if denominator > 0 else None


def ratio_text(value: float | None) -> str:
  """A ratio for a table: two decimals, or n/a where there is none."""
  return "n/a" if value is None else f"{value:.2f}"


def spread_text(entry: dict, digits: int = 3) -> str:
  """A ratio with its spread over processes: `median (min-max)`."""
  return (f"{entry['median']:.{digits}f} "
          f"({entry['min']:.{digits}f}-{entry['max']:.{digits}f})")


# The target of the meter's added time, at `catalog.METER_EVERY` (issue 41).
METER_TARGET = 1.01


def verdict(entry: dict | None, target: float,
            control: dict | None = None) -> str:
  """Whether a ratio with its spread over processes is within `target`.

  "yes" where every process measured it within; "**no**" where every
  process measured it above and, given the `control` (identical builds'
  ratio), each above every control process too (a difference that two
  identical builds never showed); otherwise "not resolved (median ...)".
  """
  if entry is None:
    return "n/a"
  if entry["max"] <= target:
    return "yes"
  if entry["min"] > target and (control is None or
                                entry["min"] > control["max"]):
    return "**no**"
  return f"not resolved (median {'within' if entry['median'] <= target else 'above'})"


def _share_text(entry: dict) -> str:
  """A share per step with its spread over processes, in percent."""
  return (f"{entry['median']:+.2%} "
          f"({entry['min']:+.2%} to {entry['max']:+.2%})")


def _shown(ratios: dict, name: str, text=spread_text) -> str:
  """`ratios[name]` as `text` writes it; "not measured" where it is not."""
  entry = ratios.get(name)
  return "not measured" if entry is None else text(entry)


def _feature_table(data: dict) -> list[str]:
  rows = []
  for s in data["scenarios"]:
    ratios = s.get("ratios", {})
    shown = functools.partial(_shown, ratios)
    rows.append([
        s["name"], shown("mplso_meter_over_mplso"),
        shown("meter_sampled_share", _share_text),
        shown("mplso_calibrate_over_mplso"),
        shown(f"{catalog.CONTROL}_over_mplso"),
        verdict(ratios.get("mplso_meter_over_mplso"), METER_TARGET,
                ratios.get(f"{catalog.CONTROL}_over_mplso")),
        f"{s.get('feature_added_ops', {}).get('mplso_meter', 'n/a')} / "
        f"{s.get('feature_added_ops', {}).get('mplso_calibrate', 'n/a')}"])
  return table(["scenario", "meter on / off", "sampled step, per step",
                "calibrate on / off", "identical builds",
                f"meter within {METER_TARGET - 1:.0%}",
                "ops added: meter / calibrate"], rows)


def _added(entry: dict) -> str:
  return (f"{entry['paired_added_ms']:+.2f} ms "
          f"({entry['paired_overhead_pct']:+.1f}%)")


def _parity(scenario: dict) -> str:
  entry = scenario.get("ratios", {}).get("mplso_over_tf")
  return "n/a" if entry is None else spread_text(entry)


def has_ratios(data: dict) -> bool:
  """Whether `data` has the ratios with their spread (older results do not)."""
  return all("ratios" in s for s in data["scenarios"])


def _step_table(data: dict) -> list[str]:
  parity = has_ratios(data)
  return table(
      ["scenario", "bare step", "TF's wrapper adds", "mplso adds", "mplso/TF"]
      + ["mplso step / TF's step"] * parity + ["ops added TF / mplso"],
      [[s["name"], f"{s['timing']['bare']['median_ms']:.2f} ms",
        _added(s["timing"]["tf"]), _added(s["timing"]["mplso"]),
        ratio_text(ratio(s["timing"]["mplso"]["paired_overhead_pct"],
                         s["timing"]["tf"]["paired_overhead_pct"]))]
       + [_parity(s)] * parity
       + [f"{s['added_ops']['tf']} / {s['added_ops']['mplso']}"]
       for s in data["scenarios"]])


def _growth_table(data: dict) -> list[str]:
  growth = data["op_growth"]
  sizes = (f"{growth[0]['small_variables']} and {growth[0]['large_variables']}"
           if growth else "two sizes")
  rows = []
  for g in growth:
    per, small, large = (g["added_ops_per_extra_gradient"],
                         g["added_ops_small"], g["added_ops_large"])
    rows.append([g["family"], f"{per['tf']:.2f} / {per['mplso']:.2f}",
                 f"{small['tf']}, {large['tf']}",
                 f"{small['mplso']}, {large['mplso']}"])
  return table(["family", "ops added per extra gradient, TF / mplso",
                f"ops added at {sizes} variables, TF", "same, mplso"], rows)


def _feature_lines(data: dict, measured: str) -> list[str]:
  """The opt-in features' table, with how its ratios were taken."""
  meta = data["meta"]
  every = meta["settings"].get("meter_every", 100)
  return [
      f"mplso's opt-in features, {measured}: step time with the feature on "
      f"over mplso's with it off (the underflow meter at every={every}; the "
      "calibrated initial scale after its first step). Per process the "
      "median over rounds of the ratio of the two blocks' mean step times "
      f"(a block is {meta['settings']['block']} steps, so it holds "
      f"{meta['settings']['block'] // every} sampled step(s) of the metered "
      f"variant), then the median over the {meta['settings']['processes_per_family']} "
      "process(es) and, in brackets, their minimum and maximum. *Identical "
      "builds*: the same ratio for mplso's wrapper built a second time, "
      "features off: what two builds of one step differ by in one process, "
      "which a feature's ratio cannot be told apart from. *Sampled step, "
      "per step*: what the meter's sampled step costs above the other steps "
      "of its own block (against the same places of the unmetered blocks), "
      "spread over the block, as a share of a step; measured within one "
      "build, so the difference between builds does not enter it. What it "
      "leaves out is the meter's cost on the steps that are not due (a few "
      "scalar ops; see the executed ops below). *mplso step / TF's step* "
      "above is taken the same way as the ratios here, with block medians. "
      f"*Meter within {METER_TARGET - 1:.0%}*: yes where every process "
      "measured it within; no where every process measured it above, each "
      "also above every process of the identical builds; otherwise not "
      "resolved.", "",
      *_feature_table(data)]


def summary(data: dict) -> str:
  """Returns the short tables that docs/performance.md shows."""
  meta = data["meta"]
  measured = f"measured at commit {meta['commit']}"
  lines = [
      f"Step time and ops added per step, {measured} by "
      f"`{meta['command']}` ({meta['started_utc']}, {meta['machine']}), "
      f"medians over {meta['settings']['processes_per_family']} process(es) "
      f"per family; load average before and after: "
      f"{meta['load_average_before'][0]}, {meta['load_average_after'][0]}. "
      "Full tables, with the spread between processes: "
      "[benchmarks/results.md](benchmarks/results.md).",
      "", *_step_table(data), "",
      *(_feature_lines(data, measured) + [""]) * has_ratios(data),
      f"How the ops added grow with the number of variables, {measured}:",
      "", *_growth_table(data)]
  mem = data.get("memory")
  if mem:
    v = mem["variants"]

    def each(key: str, spec: str) -> str:
      return " / ".join(f"{v[x][key]:{spec}}" for x in ("bare", "tf", "mplso"))

    lines += [
        "", f"Memory (`{mem['scenario']}`, 96 MB of gradients), {measured}, "
        f"bare / TF's wrapper / mplso: bytes allocated per step "
        f"{each('allocated_mb', '.1f')} MB; the step's own peak "
        f"{each('step_peak_mb', '.0f')} MB; peak RSS added by training "
        f"{each('training_peak_mb', '+.0f')} MB."]
  return "\n".join(lines) + "\n"


def markdown(data: dict) -> str:
  """Returns the results as Markdown tables."""
  meta = data["meta"]
  versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
  settings = meta["settings"]
  lines = [
      "# mplso benchmark results", "",
      f"Measured at commit {meta['commit']} by `{meta['command']}` "
      f"({meta['started_utc']}, {meta['machine']}; {versions}). Load average (1, 5, 15 min) before: "
      f"{meta['load_average_before']}, after: {meta['load_average_after']}.",
      f"Each variant: {settings['warmup']} untimed warm-up steps, then "
      f"{settings['rounds']} rounds of {settings['block']} timed steps, the "
      "variants interleaved, each round starting one variant later (bare, "
      "TF, mplso, ...; TF, mplso, ..., bare; ...), in "
      f"{settings['processes_per_family']} fresh process(es) per optimizer "
      "family; timings are medians over the processes."]
  if meta["quick"]:
    lines += ["", "**Quick run: too few steps for the timings to mean "
              "anything; the op counts are exact.**"]
  lines += [
      "", "## Step time and ops added per step", "",
      "Median step time of the bare optimizer. *Adds*: the median over "
      "rounds of the per-round ratio of a wrapper's median step to the bare "
      "optimizer's, minus 1 (in brackets; drift of the machine between "
      "rounds cancels), and the same as a time on the bare median step. "
      "*mplso/TF*: mplso's added time over TF's. *mplso step / TF's step*: "
      "the median over rounds of the per-round ratio of mplso's median step "
      "to TF's wrapper's, median over the processes (min-max over the "
      "processes in brackets). *Ops added*: ops in the "
      "traced step graph, both branches of every `cond` included, minus the "
      "bare optimizer's.", "", *_step_table(data)]
  if has_ratios(data):
    lines += [
        "", "## mplso's opt-in features", "",
        *_feature_lines(data, f"measured at commit {meta['commit']}"), "",
        "Per process (feature on over off; mplso's step over TF's):", ""]
    names = ("mplso_meter_over_mplso", "mplso_calibrate_over_mplso",
             f"{catalog.CONTROL}_over_mplso", "mplso_over_tf")
    lines += table(
        ["scenario", "meter", "calibrate", "identical builds", "mplso / TF"],
        [[s["name"]] + [" / ".join(f"{x:.3f}" for x in s["ratios"][name][
            "per_process"]) if name in s["ratios"] else "not measured"
                        for name in names]
         for s in data["scenarios"]], left=5)
  if settings["processes_per_family"] > 1:
    lines += ["", "Overhead in each process (paired, %), to show the spread:",
              ""]
    lines += table(["scenario", "TF's wrapper", "mplso"], [
        [s["name"]] + [" / ".join(f"{x:+.1f}" for x in s["timing"][v][
            "paired_overhead_pct_per_process"]) for v in ("tf", "mplso")]
        for s in data["scenarios"]], left=3)
  executed = [s for s in data["scenarios"] if s.get("executed_ops")]
  if executed:
    lines += [
        "", "Ops a step executes (TF1 scenarios: nodes in the step stats of "
        "one fully traced `Session.run`, after Grappler; a lowered `cond` "
        "runs one Switch per input at every step):", ""]
    lines += table(["scenario", "bare", "TF's wrapper", "mplso"], [
        [s["name"], s["executed_ops"]["bare"]] + [
            f"{s['executed_ops'][v]} "
            f"({s['executed_ops'][v] - s['executed_ops']['bare']:+d})"
            for v in ("tf", "mplso")] for s in executed])
  lines += ["", "Scenarios:", ""]
  for s in data["scenarios"]:
    scales = ", ".join(f"{_LABELS[v]} {x:g}"
                       for v, x in s["final_loss_scale"].items())
    lines.append(f"- `{s['name']}`: {s['description']}. TF's wrapper: "
                 f"`{s['tf_wrapper']}`. Final loss scale (started at "
                 f"{s['initial_loss_scale']:g}): {scales}.")
  lines += [
      "", "## How the ops added grow with the number of variables", "",
      "Same model family at two sizes (dense 32-wide layers, 2 variables "
      "each); traced, not timed.", "", *_growth_table(data), "",
      "Per extra gradient, by op type:", ""]
  for g in data["op_growth"]:
    for v in ("tf", "mplso"):
      types = ", ".join(f"{op} {n:g}" for op, n in
                        g["added_op_types_per_extra_gradient"][v].items())
      lines.append(f"- {g['family']}, {_LABELS[v]}: {types}")
  callbacks = sum(n for s in data["scenarios"]
                  for n in s["host_callback_ops"].values())
  lines += [
      "", "## Host round trips", "",
      f"PyFunc / PyFuncStateless / EagerPyFunc ops in all step graphs above "
      f"(TF1 `train_op` subgraph, `tf.function` graphs with every function "
      f"body): {callbacks}."]
  mem = data.get("memory")
  if mem:
    lines += [
        "", "## Memory", "",
        f"`{mem['scenario']}`: {mem['description']}; {mem['steps']} steps, "
        f"{mem['processes_per_variant']} process(es) per variant. Method: "
        f"{mem['method']}.", ""]
    lines += table(
        ["variant", "allocated per step", "step's own peak", "RSS once built",
         "peak RSS", "training peak RSS (min - max)"],
        [[v, f"{m['allocated_mb']:.1f} MB", f"{m['step_peak_mb']:.0f} MB",
          f"{m['rss_after_build_mb']:.0f} MB", f"{m['peak_rss_mb']:.0f} MB",
          f"+{m['training_peak_mb']:.0f} MB ({m['training_peak_mb_min']:.0f}"
          f" - {m['training_peak_mb_max']:.0f})"]
         for v, m in mem["variants"].items()])
  return "\n".join(lines) + "\n"
