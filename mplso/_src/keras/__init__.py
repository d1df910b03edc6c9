"""The Keras family: one wrapper per Keras optimizer family, and the monitor."""
