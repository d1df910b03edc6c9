"""Drop-in compatibility: mplso.compat, policies, spellings, graph rewrite."""
