"""Tests of mplso.compat and the graph rewrite."""
