"""Tries `python -m mplso.upgrade` on a folder of others' code, as a user would.

For a folder of real training code (not ours, never committed), one
top-level folder per repository, this runs the upgrade on each repository
(or, with `--whole-tree`, on the folder at once) three ways, `--to mplso`,
`--to native` and `--to native` with `TF_USE_LEGACY_KERAS=1`, then checks
every file it wrote:

- it compiles (`compile()`);
- a second run on the output changes nothing (idempotent);
- a file whose text names a legacy spelling (`mixed_precision.`,
  `LossScale`, `MIXED_PRECISION`, `get_scaled_loss`, ...) got at least one
  edit, `WARNING` or `ERROR` line in the report, not "no legacy loss-scale
  names" (else it is a miss);
- the tool did not crash (a crash of a whole-tree run is retried file by file,
  so that the table names the file that crashes it).

A notebook (`.ipynb`) is checked twice: as itself (the tool converts its
code cells; report lines name `PATH:cell CELL:LINE`) and through a
`<name>.cells.py` file made of its code cells (IPython `%`/`!` lines made
`pass  # ...`), to compare.

It prints one table row per file and mode, and writes, under `--workdir`,
each mode's output tree, report, second-run report and one unified diff per
changed file (read the `native` diffs: does the program still train the same
way?). Edits that remove a line naming none of the legacy spellings, or a
line that clips, accumulates or all-reduces gradients, are listed for review.

  python tools/try_upgrade.py /path/to/folder --workdir /tmp/try
  python tools/try_upgrade.py /path/to/folder --markdown results.md

It runs `python -m mplso.upgrade` of this checkout, or of `--tool-root` (a
`git archive` of a commit, while the checkout is mid-edit). The exit status
is 1 when any check failed, else 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The folder whose `mplso` package is tried (`--tool-root`).
TOOL_ROOT = ROOT

# A file whose text matches this names something the upgrade should at least
# report on.
# (`mixed_precision` alone is not enough: `is_mixed_precision` flags abound.)
LEGACY = re.compile(
    r"mixed_precision[.]|mixed_precision import|mixed_precision_graph_rewrite|"
    r"LossScale|MIXED_PRECISION|"
    r"auto_mixed_precision|loss_scale_optimizer|get_scaled_loss|"
    r"get_unscaled_gradients|infer_float32_vars")
# A removed line that does one of these is read by a person.
RISKY = re.compile(r"clip|accum|allreduce|all_reduce|push_pull|"
                   r"global_step|iterations|apply_gradients")
# (name, --to, extra environment)
MODES = (
    ("mplso", "mplso", {}),
    ("native", "native", {"TF_USE_LEGACY_KERAS": "0"}),
    ("native-tfk", "native", {"TF_USE_LEGACY_KERAS": "1"}),
)
_LEVEL = re.compile(r": (INFO|WARNING|ERROR):")
NOTEBOOK_SUFFIX = ".cells.py"


@dataclasses.dataclass
class Check:
  """What one mode of the upgrade did to one file."""
  infos: int = 0
  warnings: int = 0
  errors: int = 0
  changed: bool = False
  compiles: bool = True
  compile_error: str = ""
  idempotent: bool = True
  crashed: bool = False
  crash: str = ""
  miss: bool = False
  review: list[str] = dataclasses.field(default_factory=list)

  def failures(self) -> list[str]:
    """The names of the checks this file failed."""
    out = []
    if self.crashed:
      out.append("CRASH")
    if not self.compiles:
      out.append("NO-COMPILE")
    if not self.idempotent:
      out.append("NOT-IDEMPOTENT")
    if self.miss:
      out.append("MISS")
    if self.errors:
      out.append("ERROR-LINE")
    return out


def _read(path: str) -> str:
  with open(path, encoding="utf-8", errors="surrogateescape") as f:
    return f.read()


def _magic(line: str) -> str:
  body = line.lstrip()
  if not body.startswith(("%", "!")):
    return line
  return line[:len(line) - len(body)] + "pass  # " + body


def notebook_cells(path: str) -> str:
  """The code cells of a notebook as one Python file (magics commented)."""
  with open(path, encoding="utf-8") as f:
    nb = json.load(f)
  cells = nb.get("cells") or [
      c for w in nb.get("worksheets", []) for c in w.get("cells", [])]
  parts = []
  for i, cell in enumerate(cells):
    if cell.get("cell_type") != "code":
      continue
    src = cell.get("source", cell.get("input", ""))
    src = "".join(src) if isinstance(src, list) else src
    if src.lstrip().startswith("%%"):  # a cell magic: not Python
      lines = ["# " + line for line in src.splitlines()]
    else:  # a line magic or shell line: `pass` keeps its block a block
      lines = [_magic(line) for line in src.splitlines()]
    text = "\n".join(lines) + "\n"
    try:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compile(text, f"{path} cell {i}", "exec")
    except SyntaxError:  # IPython syntax the lines above do not cover
      text = "".join(f"# {line}\n" for line in src.splitlines())
    parts.append(f"# In[{i}]:\n" + text)
  return "\n\n".join(parts)


def stage(src: str, dst: str) -> list[str]:
  """Copies `src` to `dst`, adds a `.cells.py` per notebook; returns files.

  Returns the paths, relative to `dst`, of every `.py` and `.ipynb` file.
  """
  shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".*"))
  files = []
  for base, _, names in os.walk(dst):
    for name in sorted(names):
      path = os.path.join(base, name)
      rel = os.path.relpath(path, dst)
      if name.endswith(".ipynb"):
        files.append(rel)
        try:
          text = notebook_cells(path)
        except (ValueError, KeyError) as e:
          print(f"{rel}: not a notebook I can read: {e}", file=sys.stderr)
          continue
        with open(path + NOTEBOOK_SUFFIX, "w", encoding="utf-8") as f:
          f.write(text)
        files.append(rel + NOTEBOOK_SUFFIX)
      elif name.endswith(".py"):
        files.append(rel)
  return sorted(files)


def run_tool(args: list[str], env: dict[str, str],
             python: str) -> subprocess.CompletedProcess:
  """Runs `python -m mplso.upgrade ARGS` from `TOOL_ROOT`'s mplso."""
  full_env = dict(os.environ, **env)
  full_env["PYTHONPATH"] = os.pathsep.join(
      p for p in (TOOL_ROOT, os.environ.get("PYTHONPATH")) if p)
  full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  return subprocess.run([python, "-m", "mplso.upgrade", *args], cwd=TOOL_ROOT,
                        env=full_env, capture_output=True, text=True,
                        check=False, timeout=900)


def _crashed(proc: subprocess.CompletedProcess) -> bool:
  return proc.returncode not in (0,) or "Traceback" in proc.stderr


def _crash_text(proc: subprocess.CompletedProcess) -> str:
  lines = (proc.stderr or proc.stdout).strip().splitlines()
  return lines[-1] if lines else f"exit status {proc.returncode}"


def report_lines(report: str, path: str) -> list[str]:
  """The report's lines about `path` (`PATH:`, `PATH:LINE:` or, for a
  notebook, `PATH:cell CELL:` / `PATH:cell CELL:LINE:` first)."""
  out = []
  for line in report.splitlines():
    if line.startswith(path + ":"):
      rest = line[len(path) + 1:]
      if rest[:1] == " " or re.match(r"(cell )?\d+:", rest):
        out.append(line)
  return out


def upgrade_tree(tree: str, out: str, report: str, to: str,
                 env: dict[str, str], files: list[str],
                 python: str) -> dict[str, str]:
  """Upgrades `tree` into `out`; returns {file: crash} for files that crash.

  Runs the whole tree once; if that crashes, runs each file on its own
  (`--infile`) into the same `out` and appends each report to `report`.
  """
  proc = run_tool(["--intree", tree, "--outtree", out, "--reportfile",
                   report, "--to", to], env, python)
  if not _crashed(proc):
    return {}
  crashes = {}
  shutil.rmtree(out, ignore_errors=True)
  shutil.copytree(tree, out)  # what a crash leaves: the file as it was
  parts = []
  for rel in files:
    if not rel.endswith(".py"):
      continue
    one = report + "." + rel.replace(os.sep, "__")
    proc = run_tool(["--infile", os.path.join(tree, rel), "--outfile",
                     os.path.join(out, rel), "--reportfile", one, "--to",
                     to], env, python)
    if _crashed(proc):
      crashes[rel] = _crash_text(proc)
    if os.path.exists(one):
      parts.append(_read(one))
      os.remove(one)
  with open(report, "w", encoding="utf-8") as f:
    f.write("\n".join(parts))
  return crashes


def upgrade_projects(tree: str, out: str, report: str, to: str,
                     env: dict[str, str], files: list[str],
                     python: str) -> dict[str, str]:
  """`upgrade_tree` once per top-level folder of `tree`, as one user would.

  Each folder is one program (one repository); files at the top level are
  copied. Returns {file: crash} with paths relative to `tree`.
  """
  os.makedirs(out)
  crashes, parts = {}, []
  for name in sorted(os.listdir(tree)):
    path = os.path.join(tree, name)
    if not os.path.isdir(path):
      shutil.copy2(path, os.path.join(out, name))
      continue
    prefix = name + os.sep
    one = f"{report}.{name}"
    found = upgrade_tree(path, os.path.join(out, name), one, to, env,
                         [f[len(prefix):] for f in files
                          if f.startswith(prefix)], python)
    crashes.update({prefix + f: crash for f, crash in found.items()})
    if os.path.exists(one):
      parts.append(_read(one))
      os.remove(one)
  with open(report, "w", encoding="utf-8") as f:
    f.write("\n".join(parts))
  return crashes


def review_lines(diff: list[str]) -> list[str]:
  """Removed lines a person should read: no legacy name, or risky."""
  out = []
  for line in diff:
    if not line.startswith("-") or line.startswith("---"):
      continue
    body = line[1:].strip()
    if not body or body.startswith("#"):
      continue
    if not LEGACY.search(body) or RISKY.search(body):
      out.append(body[:100])
  return out


def check_mode(work: str, mode: str, to: str, env: dict[str, str],
               files: list[str], python: str,
               whole_tree: bool = False) -> dict[str, Check]:
  """Runs one mode twice over the staged tree and checks every file.

  Each top-level folder is upgraded on its own unless `whole_tree`.
  """
  upgrade = upgrade_tree if whole_tree else upgrade_projects
  tree = os.path.join(work, "in")
  base = os.path.join(work, mode)
  shutil.rmtree(base, ignore_errors=True)
  os.makedirs(os.path.join(base, "diffs"))
  out, out2 = os.path.join(base, "out"), os.path.join(base, "out2")
  report, report2 = (os.path.join(base, "report.txt"),
                     os.path.join(base, "report2.txt"))
  crashes = upgrade(tree, out, report, to, env, files, python)
  crashes2 = upgrade(out, out2, report2, to, env, files, python)
  text = _read(report) if os.path.exists(report) else ""
  results = {}
  for rel in files:
    check = Check()
    src, dst, dst2 = (os.path.join(tree, rel), os.path.join(out, rel),
                      os.path.join(out2, rel))
    before = _read(src)
    after = _read(dst) if os.path.exists(dst) else before
    again = _read(dst2) if os.path.exists(dst2) else after
    lines = report_lines(text, src)
    for line in lines:
      level = _LEVEL.search(line)
      if level:
        setattr(check, level.group(1).lower() + "s",
                getattr(check, level.group(1).lower() + "s") + 1)
    if rel in crashes or rel in crashes2:
      check.crashed = True
      check.crash = crashes.get(rel) or "second run: " + crashes2[rel]
    check.changed = after != before
    check.idempotent = again == after
    if rel.endswith(".py"):
      try:
        with warnings.catch_warnings():  # others' code warns: not ours to say
          warnings.simplefilter("ignore")
          compile(after, dst, "exec")
      except SyntaxError as e:
        check.compiles = False
        check.compile_error = f"line {e.lineno}: {e.msg}"
    reported = check.infos or check.warnings or check.errors
    check.miss = bool(LEGACY.search(before)) and not reported and (
        not check.crashed)
    if rel.endswith(".ipynb"):
      check.miss = (bool(LEGACY.search(_read(src + NOTEBOOK_SUFFIX)))
                    if os.path.exists(src + NOTEBOOK_SUFFIX) else False)
    if check.changed:
      diff = list(difflib.unified_diff(
          before.splitlines(), after.splitlines(), "a/" + rel, "b/" + rel,
          lineterm=""))
      with open(os.path.join(base, "diffs", rel.replace(os.sep, "__") +
                             ".diff"), "w", encoding="utf-8") as f:
        f.write("\n".join(diff) + "\n")
      check.review = review_lines(diff)
    results[rel] = check
  return results


def _cell(check: Check) -> str:
  fails = check.failures()
  counts = f"{check.infos}i/{check.warnings}w"
  if not fails:
    return counts + " ok"
  return counts + " " + ",".join(fails)


def table(files: list[str], results: dict[str, dict[str, Check]]) -> str:
  """A markdown table: one row per file, one column per mode."""
  modes = list(results)
  out = ["| file | " + " | ".join(modes) + " |",
         "| --- |" + " --- |" * len(modes)]
  for rel in files:
    out.append(f"| {rel} | " + " | ".join(
        _cell(results[m][rel]) for m in modes) + " |")
  return "\n".join(out)


def failure_list(files: list[str],
                 results: dict[str, dict[str, Check]]) -> str:
  """Every failed check and every removed line to review, per file."""
  out = []
  for rel in files:
    for mode, checks in results.items():
      check = checks[rel]
      for fail in check.failures():
        detail = {"CRASH": check.crash, "NO-COMPILE": check.compile_error,
                  "ERROR-LINE": "the report has an ERROR line",
                  "MISS": "names a legacy spelling; the report says nothing",
                  "NOT-IDEMPOTENT": "a second run changed the output"}[fail]
        out.append(f"- {mode}: `{rel}`: {fail}: {detail}")
      for line in check.review:
        out.append(f"- {mode}: `{rel}`: review removed line: `{line}`")
  return "\n".join(out) or "(none)"


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("folder", help="the folder of code to try")
  parser.add_argument("--workdir", default=None,
                      help="where to write the trees, reports and diffs "
                      "(default: a new folder under /tmp); emptied first")
  parser.add_argument("--markdown", default=None,
                      help="also write the table and failures to this file")
  parser.add_argument("--modes", default=",".join(m for m, _, _ in MODES),
                      help="comma-separated subset of: " +
                      ", ".join(m for m, _, _ in MODES))
  parser.add_argument("--whole-tree", action="store_true",
                      help="upgrade the folder as one program (default: "
                      "each top-level folder, one repository, on its own)")
  parser.add_argument("--tool-root", default=ROOT,
                      help="the folder holding the mplso package to try "
                      "(default: this checkout), e.g. a `git archive` of a "
                      "commit")
  parser.add_argument("--python", default=sys.executable,
                      help="the Python that runs the tool")
  args = parser.parse_args(argv)
  if not os.path.isdir(args.folder):
    parser.error(f"folder {args.folder!r} is not a directory")
  global TOOL_ROOT
  TOOL_ROOT = os.path.abspath(args.tool_root)
  if not os.path.isdir(os.path.join(TOOL_ROOT, "mplso")):
    parser.error(f"--tool-root {args.tool_root!r} holds no mplso package")
  known = {m: (to, env) for m, to, env in MODES}
  modes = args.modes.split(",")
  unknown = [m for m in modes if m not in known]
  if unknown:
    parser.error(f"unknown mode(s) {unknown}; accepted: {sorted(known)}")
  work = os.path.abspath(args.workdir or os.path.join(
      "/tmp", f"try_upgrade_{os.getpid()}"))
  shutil.rmtree(work, ignore_errors=True)
  os.makedirs(work)
  files = stage(os.path.abspath(args.folder), os.path.join(work, "in"))
  results = {}
  for mode in modes:
    to, env = known[mode]
    print(f"running --to {to} {env or ''} ...", file=sys.stderr)
    results[mode] = check_mode(work, mode, to, env, files, args.python,
                               args.whole_tree)
  text = (f"Work folder: {work}\n\n" + table(files, results) +
          "\n\nCells: INFO lines i / WARNING lines w; `ok`: every check "
          "passed.\n\n## Failures and lines to review\n\n" +
          failure_list(files, results) + "\n")
  print(text)
  if args.markdown:
    with open(args.markdown, "w", encoding="utf-8") as f:
      f.write(text)
  failed = any(c.failures() for r in results.values() for c in r.values())
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
