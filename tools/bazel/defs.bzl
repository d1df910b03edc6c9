"""`mplso_py_test`: one Bazel test per mplso test file, run through pytest."""

def mplso_py_test(name, src, data = [], tags = []):
    """A `py_test` that runs `src` with pytest (see pytest_main.py).

    Args:
      name: the target name (the file's name without `.py`).
      src: the test file, e.g. "mplso_test/loss_scales/loss_scale_test.py".
      data: further files the test reads.
      tags: Bazel tags.
    """
    native.py_test(
        name = name,
        srcs = ["//tools/bazel:pytest_main.py", src],
        main = "//tools/bazel:pytest_main.py",
        args = ["$(location %s)" % src],
        python_version = "PY3",
        size = "large",
        deps = ["//:mplso", "//:mplso_test_lib"],
        # Tests start worker scripts and fresh Python processes that import
        # mplso_test, and run the examples: every test sees all of them
        # (deduplicated against `data`).
        data = {f: None for f in ["pyproject.toml"] + data + native.glob([
            "examples/**/*.py",
            "mplso_test/**/*.py",
        ])}.keys(),
        tags = tags,
    )
