#!/bin/sh
# Runs the README's virtualenv Python (.venv at the top of the checkout).
# Bazel calls this through symlinks in its runfiles; the real file sits in
# tools/bazel/ of the checkout, two levels below the top.
here=$(dirname "$(readlink -f "$0")")
exec "$here/../../.venv/bin/python" "$@"
