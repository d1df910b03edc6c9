"""Private implementation of mplso; import the public modules instead.

The layers, bottom-up; each imports only from the layers below it:

  core/         the finite check, scaling, the update rule, distribution,
                argument checks, TF seams, and the guarded step with what
                it records (skip count, overflow log, stall guard)
  loss_scales/  LossScale and its subclasses, contrib's managers, their
                argument validation, the helpers every wrapper shares
  diagnostics/  mplso.overflow_log: reads back what the step recorded
  tf1/, keras/  the optimizer families (neither imports the other)
  compat/       mplso.compat and the graph rewrite, over both families

quiet_start.py imports nothing of mplso: `import_tensorflow_quietly` runs
before TensorFlow is imported.
"""
