"""Tests of the loss scales, contrib managers and wrapper helpers."""
