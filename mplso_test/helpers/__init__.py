"""Helpers shared by the tests: harnesses, families, event readers and the
worker scripts that tests start as subprocesses."""
