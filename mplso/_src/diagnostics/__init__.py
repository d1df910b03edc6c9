"""Diagnostics: why a step was skipped, what underflowed, and stalled runs.

log_state (the overflow log's counters and rows), record (what a skipped
step writes, in the graph), stall_guard (the error of a run stuck at its
minimum scale), overflow (`mplso.overflow_log`, the host-side read);
underflow_meter (what a sampled finite step writes, in the graph),
underflow (`mplso.meter_underflow`, `mplso.underflow_log`); host_read (the
session logic both host-side reads share).
"""
