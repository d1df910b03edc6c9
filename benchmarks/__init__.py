"""Benchmarks of mplso's loss-scale optimizers against TF's own wrappers.

Run `python -m benchmarks.run` from the repository root; see
`docs/performance.md`.
"""
