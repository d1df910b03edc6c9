"""The sdist and wheel hold what users expect, and the wheel runs the demo.

Builds both with `python -m build` from a copy of the checkout (so the build
writes nothing into it): the sdist first, then the wheel from the unpacked
sdist, as pip builds from an sdist. The wheel is installed with `pip install
--no-deps --target` into a temporary folder and the demo's quick run
(README's demo command, `--quick`) runs from outside the checkout against
that copy alone.
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest
import zipfile

from absl.testing import absltest
import pytest

ROOT = os.path.abspath(os.path.join(__file__, "..", "..", ".."))
DEMO = os.path.join(ROOT, "examples", "mixed_precision_tf1.py")

# Builds, installs and trains for real, in subprocesses: about 15 seconds.
pytestmark = pytest.mark.slow

# Not copied into the build's source tree: what .gitignore keeps out of the
# repository (virtualenvs, build outputs, caches) and the other dot folders.
_NOT_SOURCES = shutil.ignore_patterns(
    ".*", "__pycache__", "*.egg-info", "build", "dist", "site", "bazel-*")


def _run(args, **kwargs):
  proc = subprocess.run(args, capture_output=True, text=True, timeout=300,
                        **kwargs)
  assert proc.returncode == 0, (
      f"{args} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
      f"{proc.stderr[-3000:]}")
  return proc


def _package_modules():
  """The checkout's mplso/ modules, as paths relative to the root."""
  return sorted(os.path.relpath(p, ROOT).replace(os.sep, "/")
                for p in glob.glob(os.path.join(ROOT, "mplso", "**", "*.py"),
                                   recursive=True))


@unittest.skipUnless(
    os.path.exists(os.path.join(ROOT, "setup.py")),
    "needs a source checkout (Bazel's runfiles hold no setup.py)")
class PackagingTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp(prefix="mplso_packaging_")
    source = os.path.join(cls.tmp, "source")
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCES)
    cls.dist = os.path.join(cls.tmp, "dist")
    # --no-isolation: this environment's setuptools and wheel (the test
    # extras), nothing downloaded.
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
          cls.dist, source])
    cls.wheel, = glob.glob(os.path.join(cls.dist, "mplso-*.whl"))
    cls.sdist, = glob.glob(os.path.join(cls.dist, "mplso-*.tar.gz"))
    with zipfile.ZipFile(cls.wheel) as wheel:
      cls.wheel_names = wheel.namelist()
      cls.dist_info, = {n.split("/")[0] for n in cls.wheel_names
                        if n.split("/")[0].endswith(".dist-info")}
      licenses = [n for n in cls.wheel_names
                  if n in (f"{cls.dist_info}/LICENSE",
                           f"{cls.dist_info}/licenses/LICENSE")]
      cls.wheel_license = (wheel.read(licenses[0]).decode("utf-8")
                           if len(licenses) == 1 else None)
      cls.metadata = wheel.read(f"{cls.dist_info}/METADATA").decode("utf-8")
      cls.entry_points = wheel.read(
          f"{cls.dist_info}/entry_points.txt").decode("utf-8")
    with tarfile.open(cls.sdist) as sdist:
      cls.sdist_names = sdist.getnames()
    cls.sdist_top, = {n.split("/")[0] for n in cls.sdist_names}

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.tmp, ignore_errors=True)
    super().tearDownClass()

  def test_wheel_holds_the_license(self):
    with open(os.path.join(ROOT, "LICENSE"), encoding="utf-8") as f:
      license_text = f.read()
    self.assertIn("Apache License", license_text)
    self.assertIn("Version 2.0, January 2004", license_text)
    self.assertEqual(license_text, self.wheel_license,
                     f"no LICENSE in {self.dist_info}: {self.wheel_names}")
    # License (setuptools < 77) or License-Expression: Apache-2.0.
    self.assertRegex(self.metadata, r"(?m)^License(-Expression)?: Apache-2.0$")
    self.assertIn("License-File: LICENSE", self.metadata)

  def test_wheel_holds_every_module_and_the_package_data(self):
    names = set(self.wheel_names)
    modules = _package_modules()
    self.assertIn("mplso/__init__.py", modules)
    self.assertIn("mplso/_src/core/finite.py", modules)
    self.assertEmpty(sorted(set(modules) - names), "modules missing")
    self.assertContainsSubset(
        ["mplso/py.typed", "mplso/datasets/digits.npz",
         "mplso/datasets/DIGITS_PROVENANCE.txt"], names)

  def test_wheel_holds_only_the_package(self):
    tops = {n.split("/")[0] for n in self.wheel_names}
    self.assertEqual({"mplso", self.dist_info}, tops)  # No mplso_test, etc.
    for name in self.wheel_names:
      self.assertFalse(name.startswith(("mplso_test/", "benchmarks/")), name)
    # Every module it holds is one of the checkout's.
    self.assertEmpty(sorted(
        {n for n in self.wheel_names if n.endswith(".py")} -
        set(_package_modules())))

  def test_sdist_holds_the_license_and_the_changelog(self):
    for name in ("LICENSE", "CHANGELOG.md", "README.md", "setup.py",
                 "pyproject.toml", "mplso/py.typed"):
      self.assertIn(f"{self.sdist_top}/{name}", self.sdist_names)

  def test_wheel_installs_the_upgrade_command(self):
    # `mplso-upgrade` runs `python -m mplso.upgrade`'s main; LibCST, which
    # it edits source with, is a dependency.
    self.assertIn("[console_scripts]\nmplso-upgrade = mplso.upgrade:main",
                  self.entry_points)
    self.assertIn("Requires-Dist: libcst", self.metadata)

  def test_installed_wheel_runs_the_demo(self):
    target = os.path.join(self.tmp, "site")
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
          "--no-compile", "--disable-pip-version-check", "--target", target,
          self.wheel])
    elsewhere = os.path.join(self.tmp, "elsewhere")  # Outside the checkout.
    os.mkdir(elsewhere)
    results = os.path.join(elsewhere, "results.json")
    # The README's demo command with its quick flag, in a process that
    # imports mplso from the installed copy only, printing where from.
    code = ("import runpy, sys, mplso; print('MPLSO', mplso.__file__); "
            f"sys.argv = [{DEMO!r}, '--quick', '--json', {results!r}]; "
            f"runpy.run_path({DEMO!r}, run_name='__main__')")
    env = dict(os.environ, PYTHONPATH=target)
    proc = _run([sys.executable, "-c", code], cwd=elsewhere, env=env)
    where, = [line.split(" ", 1)[1] for line in proc.stdout.splitlines()
              if line.startswith("MPLSO ")]
    self.assertEqual(os.path.join(target, "mplso", "__init__.py"), where)
    self.assertIn("loss scaling [", proc.stdout)  # The demo's display.
    with open(results, encoding="utf-8") as f:
      scaled, bare = json.load(f)
    self.assertTrue(scaled["loss_scaling"])
    self.assertFalse(bare["loss_scaling"])
    self.assertNotEmpty(scaled["skipped_at"])  # The scale's whole cycle ran.
    self.assertLess(scaled["final_loss"], 0.5 * scaled["first_loss"])


if __name__ == "__main__":
  absltest.main()
