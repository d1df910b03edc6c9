"""The guarded step, and what every optimizer wrapper does around it.

`apply`: the step, the mechanics and the diagnostics in one op. `wrapping`:
the helpers every wrapper (TF1, contrib, Keras) shares around it.
"""
