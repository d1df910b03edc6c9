"""How long `python -m mplso.upgrade` takes on big trees, next to the floor.

    python -m benchmarks.upgrade_speed            # installed packages + file
    python -m benchmarks.upgrade_speed --quick    # a 2,000-line file only
    python -m benchmarks.upgrade_speed --no-packages   # the 20,000-line file
    python -m benchmarks.upgrade_speed --packages tf_keras   # one package
    python -m benchmarks.upgrade_speed --jobs 2   # the trees with -j 2

The floor is what any tool that reads Python must do: read every file and
`ast`-parse it once, in one process. It is timed in the same run as the
tool, so that the ratio does not depend on the machine. Two workloads:

- the installed `tensorflow`, `keras` and `tf_keras` packages (one is
  skipped if it is not installed), each converted as one tree with `--to
  mplso` and `--to native`: with `--check` (nothing written), and with
  `--outtree TMP`, which also copies every other file (timed beside a plain
  copy of the trees); after each `--outtree` run every output file whose
  input parsed must still parse;
- one synthesized file of `--lines` lines (20,000) with `--uses` legacy
  uses (20), converted with `--infile` in both modes.

The tool's times are wall times of a fresh process (its start included).
Writes `upgrade_speed.json` and `upgrade_speed.md` to `--out`.
"""

from __future__ import annotations

import argparse
import ast
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

from benchmarks import report

PACKAGES = ("tensorflow", "keras", "tf_keras")
MODES = ("mplso", "native")


def big_file(lines: int = 20000, uses: int = 20) -> str:
  """A module of about `lines` lines: plain TF code with `uses` legacy ones.

  Blocks of 10 lines; every `lines // 10 // uses`-th block builds TF 2.1-2.3's
  `experimental.LossScaleOptimizer` and calls TF 2.4's `get_scaled_loss`.
  The rest says "experimental" too (`tf.experimental.numpy`), as TF code does.
  """
  blocks = max(1, (lines - 2) // 10)
  step = max(1, blocks // max(1, uses))
  out, used = ["import tensorflow as tf", ""], 0
  for b in range(blocks):
    if b % step == 0 and used < uses:
      used += 1
      out += [f"def build_{b}(opt, x):",
              "  x = tf.data.experimental.AUTOTUNE + x",
              "  opt = tf.keras.mixed_precision.experimental."
              "LossScaleOptimizer(opt, 'dynamic')",
              "  loss = opt.get_scaled_loss(x)",
              f"  if x > {b}:", "    x = x + 1", "  elif x < 0:", "    x = 0",
              "  return opt, loss", ""]
    else:
      out += [f"def f_{b}(x, y):", f"  z = tf.add(x, y) * {b}",
              "  if z > 0:", "    z = tf.nn.relu(z)", "  elif z < -1:",
              "    z = tf.experimental.numpy.abs(z)", "  else:",
              "    z = tf.math.square(z)", "  return z", ""]
  return "\n".join(out) + "\n"


def _python_files(root: str) -> list[str]:
  return sorted(os.path.join(folder, name)
                for folder, _, names in os.walk(root)
                for name in names if name.endswith(".py"))


def _parses(path: str) -> bool:
  try:
    with open(path, "rb") as f:
      ast.parse(f.read())
  except (SyntaxError, ValueError):
    return False
  return True


def floor(roots: list[str]) -> dict:
  """Reads and `ast`-parses every .py file under `roots`, in this process."""
  start, files, lines, parsed = time.perf_counter(), 0, 0, []
  for root in roots:
    for path in _python_files(root):
      with open(path, "rb") as f:
        data = f.read()
      files += 1
      lines += data.count(b"\n")
      try:
        ast.parse(data)
      except (SyntaxError, ValueError):
        continue
      parsed.append(path)
  return {"seconds": time.perf_counter() - start, "files": files,
          "lines": lines, "parsed": parsed}


def _tool(args: list[str], out: str) -> tuple[float, int, str]:
  """Runs the upgrade command; (wall seconds, exit status, last line)."""
  start = time.perf_counter()
  done = subprocess.run(
      [sys.executable, "-m", "mplso.upgrade", *args, "--reportfile",
       os.path.join(out, "report.txt")], capture_output=True, text=True,
      check=False)
  lines = (done.stdout + done.stderr).strip().splitlines()
  return time.perf_counter() - start, done.returncode, (lines or [""])[-1]


def copy_floor(roots: list[str]) -> float:
  """Seconds to copy the trees at `roots` (every file, as `--outtree` does)."""
  start = time.perf_counter()
  for root in roots:
    with tempfile.TemporaryDirectory() as out:
      shutil.copytree(root, os.path.join(out, "tree"), symlinks=True)
  return time.perf_counter() - start


def packages(site: str, names=PACKAGES, jobs: int = 1,
             repeats: int = 1) -> dict:
  """The floors and both modes on the installed packages found in `site`.

  Each mode runs twice per tree: with `--check` (read, convert, report;
  nothing written), against the parse floor; and with `--outtree`, which
  also copies every other file of the tree (TensorFlow's is 1.9 GB, most of
  it compiled libraries), against the parse floor plus a plain copy.
  `jobs`: the tool's `-j` (processes per tree). `repeats`: each time (the
  floors' too) is the median of this many, taken in turn, so that the
  machine's drift reaches every run alike.
  """
  roots = [os.path.join(site, n) for n in names
           if os.path.isdir(os.path.join(site, n))]
  floors, copies, parsed, base = [], [], [], {}
  checks = {mode: [] for mode in MODES}
  outs = {mode: [] for mode in MODES}
  statuses, broken = {}, {mode: set() for mode in MODES}
  for _ in range(repeats):
    base = floor(roots)
    parsed = base.pop("parsed")
    floors.append(base["seconds"])
    copies.append(copy_floor(roots))
    for mode in MODES:
      seconds, got = 0.0, []
      for root in roots:
        with tempfile.TemporaryDirectory() as out:
          took, status, _ = _tool(["--intree", root, "--check", "--to",
                                   mode, "-j", str(jobs)], out)
          seconds += took
          got.append(status)
      checks[mode].append(seconds)
      statuses["check", mode] = got
      seconds, got = 0.0, []
      for root in roots:
        with tempfile.TemporaryDirectory() as out:
          tree = os.path.join(out, "tree")
          took, status, _ = _tool(["--intree", root, "--outtree", tree,
                                   "--to", mode, "-j", str(jobs)], out)
          seconds += took
          got.append(status)
          for path in parsed:
            if path.startswith(root + os.sep):
              new = os.path.join(tree, os.path.relpath(path, root))
              if not os.path.exists(new) or not _parses(new):
                broken[mode].add(os.path.relpath(path, site))
      outs[mode].append(seconds)
      statuses["out", mode] = got
  base["seconds"] = statistics.median(floors)
  return {"packages": [os.path.basename(r) for r in roots],
          "repeats": repeats, "floor": base,
          "copy": {"seconds": statistics.median(copies)},
          "checks": {mode: {"seconds": statistics.median(checks[mode]),
                            "statuses": statuses["check", mode]}
                     for mode in MODES},
          "modes": {mode: {"seconds": statistics.median(outs[mode]),
                           "statuses": statuses["out", mode],
                           "broken": sorted(broken[mode])}
                    for mode in MODES}}


def one_file(lines: int, uses: int) -> dict:
  """The floor and both modes on the synthesized file."""
  result = {"lines": lines, "uses": uses, "modes": {}}
  with tempfile.TemporaryDirectory() as out:
    path = os.path.join(out, "big.py")
    with open(path, "w") as f:
      f.write(big_file(lines, uses))
    result["floor"] = {"seconds": floor([out])["seconds"]}
    for mode in MODES:
      took, status, _ = _tool(["--infile", path, "--outfile",
                               os.path.join(out, f"{mode}.py"), "--to", mode],
                              out)
      result["modes"][mode] = {"seconds": took, "status": status,
                               "parses": _parses(os.path.join(out,
                                                              f"{mode}.py"))}
  return result


def markdown(data: dict) -> str:
  """The results as Markdown tables, naming the commit measured."""
  meta = data["meta"]
  lines = ["# Upgrade speed\n",
           f"Measured at commit {meta['commit']} by `{meta['command']}` "
           f"({meta['when']}, {meta['machine']}); the upgrade tool's own "
           f"sources {'had' if meta['tool_dirty'] else 'had no'} uncommitted "
           "changes. Floor: read and `ast`-parse every file once, in one "
           "process; the tool: a fresh `python -m mplso.upgrade` process.\n"]
  trees = data.get("packages")
  if trees:
    base = trees["floor"]
    copy = trees.get("copy", {}).get("seconds")
    lines.append(f"Installed packages ({', '.join(trees['packages'])}): "
                 f"{base['files']} files, {base['lines']:,} lines; each "
                 f"time the median of {trees.get('repeats', 1)} run(s). "
                 "`--check` reads, converts and reports, and writes nothing; "
                 "`--outtree` also writes the converted tree with every "
                 "other file of the package copied, so it is also shown "
                 "against the parse floor plus a plain copy of the trees.\n")
    rows = [["floor: read and parse", f"{base['seconds']:.1f}", "1.0", "",
             "", ""]]
    for mode, got in trees.get("checks", {}).items():
      rows.append([f"--check --to {mode}", f"{got['seconds']:.1f}",
                   report.ratio_text(report.ratio(got["seconds"],
                                                  base["seconds"])), "",
                   " ".join(str(s) for s in got["statuses"]), ""])
    if copy is not None:
      rows.append(["copy of the trees", f"{copy:.1f}", "", "", "", ""])
    for mode, got in trees["modes"].items():
      rows.append([f"--outtree --to {mode}", f"{got['seconds']:.1f}",
                   report.ratio_text(report.ratio(got["seconds"],
                                                  base["seconds"])),
                   "" if copy is None else report.ratio_text(report.ratio(
                       got["seconds"], base["seconds"] + copy)),
                   " ".join(str(s) for s in got["statuses"]),
                   str(len(got["broken"]))])
    lines += report.table(["run", "seconds", "x floor", "x (floor + copy)",
                           "exit statuses", "parsed before, not after"],
                          rows)
    lines.append("")
  big = data["file"]
  lines.append(f"One synthesized file: {big['lines']:,} lines, "
               f"{big['uses']} legacy uses.\n")
  rows = [["floor", f"{big['floor']['seconds']:.2f}", "", ""]]
  for mode, got in big["modes"].items():
    rows.append([f"--to {mode}", f"{got['seconds']:.2f}", str(got["status"]),
                 "yes" if got["parses"] else "NO"])
  lines += report.table(["run", "seconds", "exit status", "output parses"],
                        rows)
  return "\n".join(lines) + "\n"


def _tool_dirty() -> bool:
  done = subprocess.run(
      ["git", "status", "--porcelain", "mplso/_src/upgrade"],
      cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
      capture_output=True, text=True, check=False)
  return bool(done.stdout.strip())


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true",
                      help="only the synthesized file, 2,000 lines")
  parser.add_argument("--no-packages", action="store_true",
                      help="only the synthesized file, --lines lines")
  parser.add_argument("--lines", type=int, default=20000)
  parser.add_argument("--uses", type=int, default=20)
  parser.add_argument("--site", default=sysconfig.get_paths()["purelib"],
                      help="where the packages are installed")
  parser.add_argument("--jobs", type=int, default=1,
                      help="the tool's -j on the package trees")
  parser.add_argument("--repeats", type=int, default=3,
                      help="runs per package measurement (the median)")
  parser.add_argument("--packages", default=",".join(PACKAGES),
                      help="the installed packages to convert, by name, "
                           "comma-separated")
  parser.add_argument("--out", default=os.path.join("docs", "benchmarks"))
  args = parser.parse_args(argv)
  lines = 2000 if args.quick else args.lines
  data = {"meta": {
      "commit": report.commit().removesuffix("-dirty"),
      "tool_dirty": _tool_dirty(),
      "command": "python -m benchmarks.upgrade_speed" +
                 (" --quick" if args.quick else "") +
                 (" --no-packages" if args.no_packages else "") +
                 (f" --packages {args.packages}"
                  if args.packages != ",".join(PACKAGES) else "") +
                 (f" --jobs {args.jobs}" if args.jobs != 1 else "") +
                 (f" --repeats {args.repeats}" if args.repeats != 3
                  else ""),
      "when": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
      "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                 f"{platform.system()}"}}
  if not (args.quick or args.no_packages):
    data["packages"] = packages(args.site, args.packages.split(","),
                                args.jobs, args.repeats)
  data["file"] = one_file(lines, args.uses)
  text = markdown(data)
  for path in report.write(args.out, "upgrade_speed", data, text):
    print(path)
  print(text)
  return 0


if __name__ == "__main__":
  sys.exit(main())
