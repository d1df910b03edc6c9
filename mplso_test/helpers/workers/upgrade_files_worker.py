"""Upgrades files one at a time, each as `python -m mplso.upgrade --infile`.

Run as `python -m mplso_test.helpers.workers.upgrade_files_worker --to TO
--outdir DIR FILE...`. Each FILE is converted alone, by `mplso.upgrade`'s own
command line (`main`) with `--infile FILE --outfile DIR/NAME --reportfile
DIR/NAME.report.txt --to TO`, so that no file's contents bear on another's
conversion (with `--intree`, the tool reads the whole tree), and TF is
never imported: one process serves many files. `--to native` reads
TF_USE_LEGACY_KERAS, as the command does. After each file it prints
`STATUS CODE FILE`, the command's exit status (0: converted), and goes on.
"""

from __future__ import annotations

import argparse
import os
import sys

from mplso.upgrade import main as upgrade


def report_path(outdir: str, source: str) -> str:
  """Where the report of `source`'s conversion goes."""
  return os.path.join(outdir, os.path.basename(source) + ".report.txt")


def main(argv) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m mplso_test.helpers.workers.upgrade_files_worker")
  parser.add_argument("--to", required=True, choices=("mplso", "native"))
  parser.add_argument("--outdir", required=True)
  parser.add_argument("paths", nargs="+", metavar="FILE")
  args = parser.parse_args(argv)
  os.makedirs(args.outdir, exist_ok=True)
  for source in args.paths:
    try:
      status = upgrade(["--infile", source, "--outfile",
                        os.path.join(args.outdir, os.path.basename(source)),
                        "--reportfile", report_path(args.outdir, source),
                        "--to", args.to])
    except SystemExit as e:  # A command line the tool refuses.
      status = e.code
    print(f"STATUS {status} {source}", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
