"""`python -m mplso.upgrade` / `mplso-upgrade`: tf_upgrade_v2's command line.

Imports no TensorFlow: the rewrite is a source-to-source edit.
"""

from __future__ import annotations

import argparse
import os
import shutil

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import report as report_lib

DESCRIPTION = """\
Rewrites legacy TensorFlow mixed-precision loss-scale code (every spelling
`python -m mplso.compat --list` prints) so that it runs with plain `python`
on TF 2.21.

  --to mplso   (default) mplso's names; the program trains exactly as under
               `python -m mplso.compat`.
  --to native  Keras's own LossScaleOptimizer where its behaviour allows,
               mplso's names elsewhere; the report names every difference.
               The Keras is the one `tf.keras` will be when the program runs:
               Keras 3, or tf_keras when TF_USE_LEGACY_KERAS=1 is set (read
               here as TensorFlow reads it).

Untouched lines stay byte for byte; a file that does not parse is reported
and copied unchanged. See docs/upgrade.md.
"""


def _boolean(text: str) -> bool:
  lowered = text.lower()
  if lowered in ("true", "1", "yes"):
    return True
  if lowered in ("false", "0", "no"):
    return False
  raise argparse.ArgumentTypeError(
      f"expected True or False. Received: {text!r}")


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
      prog="python -m mplso.upgrade", description=DESCRIPTION,
      formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--infile", dest="input_file",
                 help="the Python file to convert")
  p.add_argument("--outfile", dest="output_file",
                 help="where to write the converted file")
  p.add_argument("--intree", dest="input_tree",
                 help="convert every .py file under this folder")
  p.add_argument("--outtree", dest="output_tree",
                 help="the folder to write the converted tree to (must not "
                 "exist yet)")
  p.add_argument("--copyotherfiles", dest="copy_other_files", nargs="?",
                 const=True, default=True, type=_boolean,
                 help="with --intree: also copy the files that are not "
                 "Python (default True; --copyotherfiles False: do not)")
  p.add_argument("--inplace", action="store_true",
                 help="convert --infile or --intree in place")
  p.add_argument("--reportfile", dest="report_filename",
                 default="report.txt",
                 help="where to write the report (default report.txt)")
  p.add_argument("--to", choices=(edits_lib.MPLSO, edits_lib.NATIVE),
                 default=edits_lib.MPLSO,
                 help="whose names to use (default mplso)")
  return p


def keras_at_run_time() -> str:
  """The Keras `tf.keras` will be: TensorFlow reads TF_USE_LEGACY_KERAS."""
  legacy = os.environ.get("TF_USE_LEGACY_KERAS", "") in ("true", "True", "1")
  return edits_lib.TF_KERAS if legacy else edits_lib.KERAS_3


def _pairs(args, error) -> list[tuple[str, str]]:
  """(input, output) for each Python file; others copied as asked."""
  if args.input_file and args.input_tree:
    error("give --infile or --intree, not both.")
  if args.input_file:
    if args.output_tree:
      error("--outtree goes with --intree; for one file give --outfile.")
    if not os.path.isfile(args.input_file):
      error(f"no such file: --infile {args.input_file!r}.")
    output = args.input_file if args.inplace else args.output_file
    if not output:
      error("--infile needs --outfile (or --inplace).")
    if args.inplace and args.output_file:
      error("--inplace writes over --infile; give no --outfile with it.")
    return [(args.input_file, output)]
  if args.input_tree:
    if args.output_file:
      error("--outfile goes with --infile; for a tree give --outtree.")
    if not os.path.isdir(args.input_tree):
      error(f"no such folder: --intree {args.input_tree!r}.")
    if args.inplace:
      if args.output_tree:
        error("--inplace writes over --intree; give no --outtree with it.")
      output_tree = args.input_tree
    else:
      if not args.output_tree:
        error("--intree needs --outtree (or --inplace).")
      if os.path.exists(args.output_tree):
        error(f"Output directory {args.output_tree!r} must not already "
              "exist.")
      output_tree = args.output_tree
    pairs = []
    for folder, _, files in os.walk(args.input_tree):
      target = os.path.normpath(os.path.join(
          output_tree, os.path.relpath(folder, args.input_tree)))
      for name in sorted(files):
        source = os.path.join(folder, name)
        destination = os.path.join(target, name)
        if name.endswith(".py"):
          pairs.append((source, destination))
        elif args.copy_other_files and not args.inplace:
          os.makedirs(target, exist_ok=True)
          shutil.copy2(source, destination)
    return pairs
  error("give --infile FILE --outfile FILE, --intree DIR --outtree DIR, or "
        "either input with --inplace.")
  return []


def main(argv: list[str] | None = None) -> int:
  p = parser()
  args = p.parse_args(argv)
  pairs = _pairs(args, p.error)
  from mplso._src.upgrade import rewrite  # pylint: disable=g-import-not-at-top
  keras = keras_at_run_time()
  texts = {}
  for source, _ in pairs:
    with open(source, encoding="utf-8", newline="") as f:
      texts[source] = f.read()
  results = rewrite.upgrade_sources(texts, to=args.to, keras=keras)
  sections, changed, errors, installs = [], 0, 0, 0
  for source, destination in pairs:
    text = texts[source]
    result = results[source]
    changed += result.changed
    errors += result.error is not None
    installs += result.installs
    parent = os.path.dirname(destination)
    if parent:
      os.makedirs(parent, exist_ok=True)
    if result.code != text or os.path.abspath(source) != os.path.abspath(
        destination):
      with open(destination, "w", encoding="utf-8", newline="") as f:
        f.write(result.code)
    sections.append(report_lib.file_section(source, destination, result))
  text = report_lib.header(args.to, keras, len(pairs), changed, errors,
                           installs) + "".join(sections)
  with open(args.report_filename, "w", encoding="utf-8") as f:
    f.write(text)
  print(f"Processed {len(pairs)} files: {changed} changed, {errors} that do "
        f"not parse (copied unchanged). Report: {args.report_filename}")
  return 0
