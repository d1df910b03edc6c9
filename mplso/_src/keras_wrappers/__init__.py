"""mplso's Keras wrappers, one module per Keras optimizer family."""
