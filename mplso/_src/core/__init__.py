"""The mechanics: finite check, scaling, update rule, distribution, TF seams."""
