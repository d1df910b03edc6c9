"""Diagnostics: why a step was skipped, and stopping a run none can save.

log_state (the overflow log's counters and rows), record (what a skipped
step writes, in the graph), stall_guard (the error of a run stuck at its
minimum scale), overflow (`mplso.overflow_log`, the host-side read).
"""
