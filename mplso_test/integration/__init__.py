"""Test suites that cross modules: parity with TF, distribution, resuming,
packaging, docs, examples, the build and the public API."""
