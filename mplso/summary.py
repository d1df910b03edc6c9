"""TensorBoard summaries of the loss scale, for TF1 graph code."""

from mplso._src.tf1.summary import loss_scale_scalars

__all__ = ["loss_scale_scalars"]
