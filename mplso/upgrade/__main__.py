"""`python -m mplso.upgrade`: see `mplso.upgrade`."""

import sys

from mplso._src.upgrade.cli import main

if __name__ == "__main__":
  sys.exit(main())
