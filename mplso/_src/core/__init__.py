"""The core: finite check, scaling, update rule, the guarded step, TF seams."""
