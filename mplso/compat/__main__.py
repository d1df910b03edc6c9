"""`python -m mplso.compat SCRIPT [ARGS...]`: runs a legacy script on mplso."""

import os
import runpy
import sys

from mplso._src.compat_install import install

USAGE = """\
usage: python -m mplso.compat SCRIPT [ARGS...]

Runs SCRIPT as __main__ with ARGS as its own arguments, after
mplso.compat.install() has pointed TensorFlow's removed mixed-precision names
(tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer,
tf.compat.v1.mixed_precision.*LossScale*, tf.contrib.mixed_precision.*) at
mplso. Errors in SCRIPT keep their traceback and exit code.
"""


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if not argv or argv[0] in ("-h", "--help"):
    (sys.stdout if argv else sys.stderr).write(USAGE)
    return 0 if argv else 2
  script = argv[0]
  if not os.path.isfile(script):
    sys.stderr.write(f"{USAGE}\nerror: no such script: {script!r}\n")
    return 2
  install()
  sys.argv = [script, *argv[1:]]
  sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
  runpy.run_path(script, run_name="__main__")
  return 0


if __name__ == "__main__":
  sys.exit(main())
