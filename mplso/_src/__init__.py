"""Private implementation of mplso; import the public modules instead."""
