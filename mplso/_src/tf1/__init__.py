"""The TF1 family: the v1 and contrib optimizers and TF1 summaries."""
