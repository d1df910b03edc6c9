"""Tests of the TF1 family."""
