"""Diagnostics: `mplso.overflow_log`, which steps were skipped and why."""
