"""BUILD stays honest: every module, test file and example has its target."""

import glob
import os
import re

from absl.testing import absltest
import tensorflow as tf

ROOT = os.path.abspath(os.path.join(__file__, "..", "..", ".."))


def _read_build():
  with open(os.path.join(ROOT, "BUILD"), encoding="utf-8") as f:
    return f.read()


def _files(pattern):
  return sorted(os.path.relpath(p, ROOT) for p in glob.glob(
      os.path.join(ROOT, pattern), recursive=True))


class BuildTest(tf.test.TestCase):
  """After adding a file, `python tools/bazel/update_build.py` fixes BUILD."""

  def test_every_test_file_has_a_test_target(self):
    build = _read_build()
    targets = re.findall(r'mplso_py_test\(\s*name = "(\w+)",\s*src = "([^"]+)"',
                         build)
    srcs = [src for _, src in targets]
    self.assertNotEmpty(srcs)
    self.assertCountEqual(set(srcs), srcs, "a test file listed twice")
    self.assertCountEqual(_files("mplso_test/**/*_test.py"), srcs)
    names = [name for name, _ in targets]
    self.assertCountEqual(set(names), names, "a target name used twice")

  def test_every_helper_module_is_in_the_test_library(self):
    build = _read_build()
    library = re.search(r'name = "mplso_test_lib",\s*srcs = \[(.*?)\]', build,
                        re.S).group(1)
    listed = re.findall(r'"([^"]+)"', library)
    helpers = [f for f in _files("mplso_test/**/*.py")
               if not f.endswith("_test.py")]
    self.assertCountEqual(helpers, listed)

  def test_library_globs_every_module(self):
    self.assertIn('srcs = glob(["mplso/**/*.py"])', _read_build())
    self.assertNotEmpty(_files("mplso/**/*.py"))

  def test_every_example_has_a_binary(self):
    mains = re.findall(r'py_binary\(.*?main = "([^"]+)"', _read_build(), re.S)
    # Bazel's runfiles add an __init__.py to every folder: not examples.
    examples = [f for f in _files("examples/**/*.py")
                if not f.endswith("__init__.py")]
    self.assertCountEqual(examples, mains)


if __name__ == "__main__":
  absltest.main()
