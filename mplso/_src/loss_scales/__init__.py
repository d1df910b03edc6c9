"""Loss scales: LossScale and its kinds, contrib managers, wrapper helpers."""
