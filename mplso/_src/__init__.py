"""Private implementation of mplso; import the public modules instead.

The layers, bottom-up; each imports only from the layers below it:

  core/         the mechanics: the finite check, scaling, the update rule,
                distribution, argument checks, TF seams
  diagnostics/  what a skipped step records (the overflow log's state and
                record, the stall guard) and `mplso.overflow_log`, which
                reads it back; the underflow meter, which a sampled finite
                step writes, and `mplso.underflow_log`
  loss_scales/  LossScale and its subclasses, contrib's managers, their
                argument validation
  step/         the guarded step, which uses all of the above, and the
                helpers every wrapper shares around it
  tf1/, keras/  the optimizer families (neither imports the other)
  compat/       mplso.compat and the graph rewrite, over both families
  upgrade/      `python -m mplso.upgrade`: source rewriting, no TensorFlow

quiet_start.py imports nothing of mplso: `import_tensorflow_quietly` runs
before TensorFlow is imported.
"""
