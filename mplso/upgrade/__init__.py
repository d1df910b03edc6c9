"""`python -m mplso.upgrade`: rewrites legacy loss-scale code once.

The command line is `tf_upgrade_v2`'s (`--infile/--outfile`,
`--intree/--outtree`, `--inplace`, `--reportfile`) plus `--to mplso|native`,
and for CI and pre-commit `--check`, `--diff`, PATH arguments, `--infile -`
and `--json-report`; docs/upgrade.md describes every edit and exit status. Importing this module imports no
TensorFlow.
"""

from mplso._src.upgrade.cli import main

__all__ = ["main"]
