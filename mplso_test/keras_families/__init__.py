"""Tests of the Keras wrappers."""
