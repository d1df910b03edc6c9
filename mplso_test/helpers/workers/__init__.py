"""Worker scripts that tests start as subprocesses (`python -m`)."""
