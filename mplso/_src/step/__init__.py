"""The guarded step: the mechanics and the diagnostics, in one op."""
