"""Installs mplso: TensorFlow's mixed-precision loss-scale optimizers, restored."""

import setuptools

setuptools.setup(
    name="mplso",
    version="0.1.0",
    description=("TensorFlow's mixed-precision loss-scale optimizers (TF1, "
                 "contrib and Keras), faithfully, on current TensorFlow 2."),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    license_files=["LICENSE"],
    packages=setuptools.find_packages(include=["mplso", "mplso.*"]),
    # py.typed: the package's annotations are for type checkers (PEP 561).
    package_data={"mplso": ["py.typed"],
                  "mplso.datasets": ["*.npz", "*.txt"]},
    python_requires=">=3.10",
    # Tested: TensorFlow 2.21 (CI's main stage, the full suite) and
    # tf-nightly 2.23.0.dev (CI's .ci/nightly stage, its subset), so the
    # releases in between and 2.23 are accepted.
    install_requires=[
        "tensorflow>=2.21,<2.24",
        "numpy",
        "absl-py",
        # `python -m mplso.upgrade` edits source with LibCST: it keeps every
        # byte it does not change (docs/upgrade.md says why this one).
        "libcst>=1.1",
    ],
    entry_points={
        "console_scripts": ["mplso-upgrade=mplso.upgrade:main"],
    },
    extras_require={
        "test": [
            # mplso_test/integration/packaging_test.py builds the sdist and
            # wheel with this environment's setuptools and wheel (--no-isolation: no
            # download; a venv of Python 3.12+ starts without setuptools).
            "build>=1",
            "setuptools>=61",
            "wheel",
            "hypothesis>=6",
            "pytest>=8",
            # The README's test command runs the suite on every CPU core.
            "pytest-xdist>=3",
            "parameterized>=0.9",
            "tf_keras>=2.21,<2.24",
        ],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
