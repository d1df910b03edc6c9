"""Runs the upgrade's differential table: every generated program three ways.

The programs (`upgrade_programs`) run:

1. `reference`: unmodified, under `python -m mplso.compat` (as legacy
   programs run today), after the writers of the checkpoints they restore;
2. `mplso`: converted by `python -m mplso.upgrade --to mplso`, plain python;
3. `native`: converted by `--to native` under the TF_USE_LEGACY_KERAS of the
   run, plain python.

Each way runs in one process per Keras (`workers/upgrade_programs_worker`),
each program in isolation; the `mplso` way runs them in the reverse order,
so state leaking from one program into the next would show as a difference
from the reference. Each file is converted alone
(`workers/upgrade_files_worker`), with its own report.

The rules: (2) equals (1) in everything recorded; (3) equals (1), or each
quantity that differs is named by a report line about the program's
optimizer (`unnamed`). A conversion that crashes fails either way.

`python -m mplso_test.helpers.upgrade_table [--keep DIR]` runs the table and
prints every failing cell.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import json
import os
import re
import shutil
import sys
import tempfile

from mplso_test.helpers import processes
from mplso_test.helpers import upgrade_programs
from mplso_test.helpers.workers import upgrade_files_worker

ROOT = processes.ROOT
REFERENCE, MPLSO, NATIVE = "reference", "mplso", "native"
_WORKER = "mplso_test.helpers.workers.upgrade_programs_worker"
_UPGRADER = "mplso_test.helpers.workers.upgrade_files_worker"

# What a run records that the rules compare; `reads.ATTRIBUTE` for the
# program's attribute read.
STATE = ("iterations", "loss_scale", "good_steps", "weights")
COMPARED = ("class", *STATE, "grad_norms", "losses", "reads")
# The words a report line uses to name a difference in each quantity (any
# one will do, case-insensitive), for `--to native`. An attribute read is
# named by its name in backquotes, alone or after a `.`.
MENTIONS = {
    "iterations": ("iterations",),
    "loss_scale": ("scale",),
    "good_steps": ("good step", "good-step", "counter"),
    "weights": ("weights",),
    "grad_norms": ("norm",),
}


@dataclasses.dataclass
class Batch:
  """What one worker process printed: results by program name, the repeat."""
  results: dict[str, dict]
  repeat: dict | None
  repeated: str  # The name of the program it ran twice.


@dataclasses.dataclass
class Table:
  """Every program's results in every way, with the reports of each."""
  programs: list[upgrade_programs.Program]
  batches: dict[tuple[str, str], Batch]  # (way, keras) -> batch.
  writers: dict[tuple[str, str], dict]  # (keras, dialect) -> result.
  reports: dict[tuple[str, str], str]  # (way, program name) -> report.
  folder: str
  # (way, program name) -> the upgrade command's exit status.
  statuses: dict[tuple[str, str], int] = dataclasses.field(
      default_factory=dict)

  def result(self, way: str, program: upgrade_programs.Program) -> dict:
    return self.batches[way, program.keras].results[program.name]


def _path(folder: str, way: str, keras: str, name: str) -> str:
  return os.path.join(folder, way, keras, name + ".py")


def _name(path: str) -> str:
  return os.path.splitext(os.path.basename(path))[0]


def _env(keras: str) -> dict[str, str]:
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
              TF_USE_LEGACY_KERAS=upgrade_programs.LEGACY_KERAS[keras],
              PYTHONPATH=os.pathsep.join(
                  [ROOT, os.environ.get("PYTHONPATH", "")]))


def parse_batch(output: str, repeated: str) -> Batch:
  """The `RESULT` and `REPEAT` lines of a worker's output."""
  results, repeat = {}, None
  for line in output.splitlines():
    kind, _, text = line.partition(" ")
    if kind in ("RESULT", "REPEAT"):
      result = json.loads(text)
      if kind == "REPEAT":
        repeat = result
      else:
        results[_name(result["path"])] = result
  return Batch(results, repeat, repeated)


def run(folder: str, add_cleanup: Callable[..., None],
        kerases: Sequence[str] = tuple(upgrade_programs.LEGACY_KERAS)
        ) -> Table:
  """Writes, converts and runs every program three ways under `folder`.

  Args:
    folder: an empty folder for the programs, checkpoints and reports.
    add_cleanup: registers a worker's clean-up (a test's `addCleanup`).
    kerases: the Kerases to run (both by default).

  Returns:
    The table.

  Raises:
    AssertionError: if a worker process fails (a program's own error is a
      result, not a failure).
  """
  table = [p for p in upgrade_programs.programs() if p.keras in kerases]
  checkpoints = os.path.join(folder, "checkpoints")
  writers = upgrade_programs.writers_needed(table)
  for program in table:
    _write(_path(folder, REFERENCE, program.keras, program.name),
           program.text(checkpoints))
  writer_paths = {}
  for keras, dialect in writers:
    path = _path(folder, REFERENCE, os.path.join(keras, "writers"),
                 upgrade_programs.writer_name(dialect))
    _write(path, upgrade_programs.writer_text(keras, dialect, checkpoints))
    writer_paths.setdefault(keras, []).append(path)

  def sources(keras):
    return [_path(folder, REFERENCE, keras, p.name) for p in table
            if p.keras == keras]

  def start(name, keras, module, *args):
    return processes.start(module, *args, env=_env(keras),
                           add_cleanup=add_cleanup, name=name)

  first, upgrades = [], []
  for keras in kerases:
    own = writer_paths.get(keras, [])
    first.append(start(f"{REFERENCE} {keras}", keras, "mplso.compat", "-m",
                       _WORKER, "--exit_with_parent", "--repeat",
                       str(len(own)), *own, *sources(keras)))
    for way in (MPLSO, NATIVE):
      upgrades.append(start(
          f"upgrade --to {way} {keras}", keras, _UPGRADER, "--to", way,
          "--outdir", os.path.join(folder, way, keras), *sources(keras)))
  outputs = processes.finish(first + upgrades)
  _write(os.path.join(folder, "outputs", f"{REFERENCE}_all.txt"),
         "".join(outputs[:len(first)]))
  statuses = {}
  for n, output in enumerate(outputs[len(first):]):
    way = (MPLSO, NATIVE)[n % 2]
    for line in output.splitlines():
      if line.startswith("STATUS "):
        _, status, source = line.split(" ", 2)
        statuses[way, _name(source)] = int(status)
  batches = {}
  for keras, output in zip(kerases, outputs):
    batches[REFERENCE, keras] = parse_batch(output, table_names(
        table, keras)[0])
  second = []
  for keras in kerases:
    names = table_names(table, keras)
    second.append(start(
        f"{MPLSO} {keras}", keras, _WORKER, "--exit_with_parent",
        *[_path(folder, MPLSO, keras, n) for n in reversed(names)]))
    second.append(start(
        f"{NATIVE} {keras}", keras, _WORKER, "--exit_with_parent",
        *[_path(folder, NATIVE, keras, n) for n in names]))
  outputs = processes.finish(second)
  _write(os.path.join(folder, "outputs", "plain_all.txt"), "".join(outputs))
  for n, keras in enumerate(kerases):
    names = table_names(table, keras)
    batches[MPLSO, keras] = parse_batch(outputs[2 * n], names[-1])
    batches[NATIVE, keras] = parse_batch(outputs[2 * n + 1], names[0])
  written = {}
  for keras, dialect in writers:
    written[keras, dialect] = batches[REFERENCE, keras].results.pop(
        upgrade_programs.writer_name(dialect))
  reports = {}
  for program in table:
    for way in (MPLSO, NATIVE):
      path = upgrade_files_worker.report_path(
          os.path.join(folder, way, program.keras), program.name + ".py")
      reports[way, program.name] = ""  # None written: the status says why.
      if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
          reports[way, program.name] = f.read()
  return Table(table, batches, written, reports, folder, statuses)


def table_names(table, keras: str) -> list[str]:
  return [p.name for p in table if p.keras == keras]


def _write(path: str, text: str) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def differences(reference: dict, other: dict,
                quantities: Sequence[str] = COMPARED) -> dict[str, tuple]:
  """{quantity: (reference's value, other's)} where the two runs differ.

  A read attribute is the quantity `reads.NAME`; an error is `error`.
  """
  found = {}
  if "error" in reference or "error" in other:
    if reference.get("error") != other.get("error"):
      found["error"] = (reference.get("error"), other.get("error"))
    return found
  for quantity in quantities:
    if quantity == "reads":
      for name in sorted(set(reference["reads"]) | set(other["reads"])):
        if reference["reads"].get(name) != other["reads"].get(name):
          found[f"reads.{name}"] = (reference["reads"].get(name),
                                    other["reads"].get(name))
    elif reference.get(quantity) != other.get(quantity):
      found[quantity] = (reference.get(quantity), other.get(quantity))
  return found


@dataclasses.dataclass(frozen=True)
class Entry:
  """One report entry: its head line, and the reason lines under it."""
  head: str
  why: str


def entries(report: str) -> list[Entry]:
  """The report's entries: `PATH[:LINE]: LEVEL: ...` and its reasons."""
  found = []
  for line in report.splitlines():
    if re.match(r"^\S.*?: (INFO|WARNING|ERROR): ", line):
      found.append(Entry(line, ""))
    elif line.startswith("    ") and found:
      found[-1] = Entry(found[-1].head, (found[-1].why + " " +
                                         line.strip()).strip())
  return found


def optimizer_entries(report: str) -> list[Entry]:
  """The entries about the program's optimizer: its call and `opt.` uses."""
  return [e for e in entries(report)
          if "LossScaleOptimizer" in e.head or "'opt." in e.head or
          "'(opt." in e.head]


def _names(quantity: str, why: str) -> bool:
  if quantity.startswith("reads."):
    attribute = re.escape(quantity[len("reads."):])
    return re.search(rf"[`.]{attribute}(\(\))?`", why) is not None
  return any(word in why.lower() for word in MENTIONS[quantity])


def unnamed(program: upgrade_programs.Program, found: Mapping[str, tuple],
            report: str) -> list[str]:
  """The differences of `--to native` that no report line names.

  A difference is named when the reason of a report entry about the
  program's optimizer (`optimizer_entries`) holds one of its words
  (`MENTIONS`; a read attribute by its name in backquotes). Where the
  program restores a checkpoint, a difference in its state (`STATE`) also
  needs an entry that says "checkpoint". An error (a crash) is never named.

  Args:
    program: the program.
    found: `differences(reference, native)`, without `class` and `losses`.
    report: the report of the program's `--to native` conversion.
  """
  whys = [e.why for e in optimizer_entries(report)]
  missing = []
  for quantity in found:
    if quantity == "error":
      missing.append("error: the converted program crashed")
      continue
    if not any(_names(quantity, why) for why in whys):
      missing.append(f"{quantity}: no report line names it")
    elif (program.restores and quantity in STATE and
          not any("checkpoint" in why.lower() for why in whys)):
      missing.append(f"{quantity}: the program restores a checkpoint; no "
                     "report line says what becomes of it")
  return missing


NATIVE_QUANTITIES = tuple(q for q in COMPARED if q not in ("class", "losses"))


def failures(table: Table, program: upgrade_programs.Program
             ) -> dict[str, list[str]]:
  """What fails in the program's cell: {way: [messages]} (empty: passes)."""
  reference = table.result(REFERENCE, program)
  out = {}
  if "error" in reference:
    out[REFERENCE] = ["the legacy program failed under mplso.compat:\n" +
                      reference["error"]]
    return out
  found = differences(reference, table.result(MPLSO, program))
  if found:
    out[MPLSO] = [show(q, a, b, "--to mplso") for q, (a, b) in found.items()]
  native = table.result(NATIVE, program)
  found = differences(reference, native, NATIVE_QUANTITIES)
  missing = unnamed(program, found, table.reports[NATIVE, program.name])
  if missing:
    out[NATIVE] = missing + [show(q, a, b, "--to native")
                             for q, (a, b) in found.items()]
  for way in (MPLSO, NATIVE):
    status = table.statuses.get((way, program.name))
    if status != 0:
      out.setdefault(way, []).insert(0, (
          f"python -m mplso.upgrade --to {way} exited {status}"))
  return out


def _flat(value) -> list:
  if isinstance(value, list):
    return [x for item in value for x in _flat(item)]
  return [value]


def show(quantity: str, reference, other, way: str) -> str:
  """One difference, short: an error's last lines, the first weights apart."""
  if quantity == "error":
    tail = "\n      ".join((other or reference or "").strip().splitlines()[-4:])
    return f"{quantity} ({way if other else 'reference'}):\n      {tail}"
  if quantity == "weights" and reference and other:
    pairs = [(n, a, b) for n, (a, b) in enumerate(zip(_flat(reference),
                                                      _flat(other))) if a != b]
    shown = ", ".join(f"[{n}] {a!r} vs {b!r}" for n, a, b in pairs[:3])
    return (f"weights: {len(pairs)} of {len(_flat(reference))} values differ "
            f"(reference vs {way}): {shown}")
  text = f"{quantity}: reference {reference!r}, {way} {other!r}"
  return text if len(text) < 600 else text[:600] + "..."


def describe_cell(table: Table, program: upgrade_programs.Program,
                  way: str, messages: Sequence[str]) -> str:
  """A failing cell, for a person: axes, what differed, the report lines."""
  lines = [f"{program.name} ({way}): {program.describe()}",
           f"  file: {_path(table.folder, way, program.keras, program.name)}"]
  lines += [f"  - {m}"[:3000] for m in messages]
  if way != REFERENCE:
    lines.append(f"  class: {table.result(way, program).get('class')}")
    lines += ["  report: " + e.head.split(": ", 1)[-1] +
              (f"\n      {e.why}" if e.why else "")
              for e in optimizer_entries(table.reports[way, program.name])]
  return "\n".join(lines)


def native_summary(table: Table, program: upgrade_programs.Program) -> str:
  """One line: the `--to native` run's class family and its differences."""
  reference = table.result(REFERENCE, program)
  native = table.result(NATIVE, program)
  family = native.get("class", "crashed").split(".")[0]
  found = differences(reference, native, NATIVE_QUANTITIES)
  missing = {m.split(":")[0] for m in unnamed(program, found,
                                               table.reports[NATIVE,
                                                             program.name])}
  shown = ", ".join(q + (" (UNNAMED)" if q in missing else " (named)")
                    for q in found) or "same"
  return f"{program.name}: {family}: {shown}"


def main(argv: Sequence[str] | None = None) -> int:
  p = argparse.ArgumentParser(prog="python -m mplso_test.helpers.upgrade_table",
                              description="Runs the table; prints failures.")
  p.add_argument("--keep", metavar="DIR",
                 help="run in DIR (must not exist) and keep it")
  p.add_argument("--keras", choices=tuple(upgrade_programs.LEGACY_KERAS),
                 action="append", help="run only this Keras (repeatable)")
  args = p.parse_args(argv)
  folder = args.keep or tempfile.mkdtemp()
  if args.keep:
    os.makedirs(folder)
  cleanups = []
  try:
    table = run(folder, cleanups.append,
                args.keras or tuple(upgrade_programs.LEGACY_KERAS))
  finally:
    for cleanup in cleanups:
      cleanup()
  failing = 0
  for program in table.programs:
    for way, messages in failures(table, program).items():
      failing += 1
      print(describe_cell(table, program, way, messages), "\n")
  print("--to native, by program: the class it trained with, and what "
        "differs from the reference (named by the report, or not):")
  for program in table.programs:
    print("  " + native_summary(table, program))
  print(f"{failing} failing cells of {len(table.programs)} programs x 2 "
        f"conversions; files under {folder}")
  if not args.keep:
    shutil.rmtree(folder, ignore_errors=True)
  return 1 if failing else 0


if __name__ == "__main__":
  sys.exit(main())
