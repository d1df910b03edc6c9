"""Tests for the quiet TensorFlow import: its filter and the examples' start."""

import os
import subprocess
import sys
import textwrap

from absl.testing import absltest
import tensorflow as tf

from mplso._src import quiet_start


class QuietStartTest(tf.test.TestCase):

  def test_startup_log_filter_applies_the_level(self):
    text = textwrap.dedent("""\
        WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
        I0000 00:00:1795544153.164002   13741 port.cc:153] oneDNN custom operations are on.
        I0000 00:00:1795544154.1   13741 cpu_feature_guard.cc:227] This TensorFlow binary is optimized
        To enable the following instructions: AVX2 FMA, in other operations.
        W0000 00:00:1795544154.2   13741 gpu.cc:1] a warning
        /usr/lib/python3/x.py:3: DeprecationWarning: kept
        E0000 00:00:1795544158.8   13741 cuda_platform.cc:52] failed call to cuInit
        """)
    self.assertEqual(text, quiet_start.filter_startup_logs(text, 0))
    lines = text.splitlines(keepends=True)
    self.assertEqual("".join(lines[4:]),
                     quiet_start.filter_startup_logs(text, 1))
    self.assertEqual(lines[5] + lines[6],
                     quiet_start.filter_startup_logs(text, 2))
    self.assertEqual(lines[5], quiet_start.filter_startup_logs(text, 3))

  def test_import_in_a_fresh_process_is_quiet_unless_asked(self):
    code = ("import mplso, sys; assert 'tensorflow' not in sys.modules; "
            "mplso.import_tensorflow_quietly(); import tensorflow")
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env=env, timeout=300)
    self.assertEqual(0, proc.returncode, proc.stderr)
    self.assertEqual("", proc.stderr)
    env["TF_CPP_MIN_LOG_LEVEL"] = "0"  # The user's choice wins.
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env=env, timeout=300)
    self.assertEqual(0, proc.returncode, proc.stderr)
    self.assertNotEqual("", proc.stderr)


if __name__ == "__main__":
  absltest.main()
