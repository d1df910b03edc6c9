"""Runs every ```python block of the documentation, page by page.

The blocks of one page run in order in one fresh Python process (a page may
switch to TF1 graph mode), so a snippet that stops working fails CI. Blocks
fenced as ```sh or ```text are shown, not run. Pages written elsewhere from
measured results (performance, benchmarks) hold no runnable snippets.
"""

import glob
import os
import re
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

ROOT = os.path.abspath(os.path.join(__file__, "..", "..", ".."))
DOCS = os.path.join(ROOT, "docs")
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
PAGES = sorted(os.path.relpath(p, DOCS)
               for p in glob.glob(os.path.join(DOCS, "**", "*.md"),
                                  recursive=True))


def python_blocks(page):
  with open(os.path.join(DOCS, page), encoding="utf-8") as f:
    return BLOCK.findall(f.read())


# The API reference is generated; every other page with a python block runs.
PAGES_WITH_CODE = [p for p in PAGES
                   if not p.startswith("api/") and python_blocks(p)]


class DocsTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      *[(re.sub(r"\W", "_", p[:-3]), p) for p in PAGES_WITH_CODE])
  def test_page_snippets_run(self, page):
    script = "\n\n".join(python_blocks(page))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join(
                   [ROOT, os.environ.get("PYTHONPATH", "")]))
    env.pop("TF_USE_LEGACY_KERAS", None)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True,
                          text=True, env=env, cwd=self.create_tempdir().full_path,
                          timeout=300)
    self.assertEqual(0, proc.returncode,
                     f"{page}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")

  def test_the_guides_have_snippets(self):
    for page in ["getting-started.md", "tf1.md", "contrib.md", "keras.md",
                 "monitoring.md", "distribute.md", "saving.md",
                 "migration.md", "dynamic-loss-scaling.md"]:
      self.assertIn(page, PAGES_WITH_CODE)

  def test_the_figure_exists(self):
    with open(os.path.join(DOCS, "images", "dynamic_loss_scale.svg"),
              encoding="utf-8") as f:
      svg = f.read()
    self.assertIn("<svg", svg)
    self.assertIn("skipped", svg)


if __name__ == "__main__":
  absltest.main()
