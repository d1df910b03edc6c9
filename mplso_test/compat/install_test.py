"""Tests for mplso.compat: install()/uninstall() and `python -m mplso.compat`."""

import functools
import importlib
import os
import re
import subprocess
import sys
import textwrap

from absl.testing import absltest
from absl.testing import parameterized
import tensorflow as tf

import mplso
from mplso import compat
from mplso import contrib
from mplso._src import quiet_start
from mplso._src.compat import install as compat_install
from mplso._src.compat import spellings as compat_spellings
import mplso.keras
from mplso_test.helpers import spelling_lookup

# The repository's root, which holds mplso/ and mplso_test/.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

# Checks every spelling of the table in a fresh process, where `import
# tensorflow.compat.v1 as tf` and the contrib imports run as scripts write them.
SPELLING_CHECK = """
import importlib, sys
import tensorflow.compat.v1 as tf1
import tensorflow as tf
from mplso._src.compat import install as compat_install
from mplso._src.compat import spellings as compat_spellings
from mplso_test.helpers.spelling_lookup import resolve, MISSING_NAME
rows = compat_spellings.SPELLINGS
before = {r.name: resolve(r.name) for r in rows}
modules = dict(sys.modules)
compat_install.install()
for r in rows:
  assert resolve(r.name) is compat_install.resolve_target(r.target), r.name
import mplso.contrib
assert tf1.contrib.mixed_precision.LossScaleOptimizer is (
    mplso.contrib.LossScaleOptimizer)
from tensorflow.contrib import mixed_precision
import tensorflow.contrib.mixed_precision as mp
import tensorflow.compat.v1 as tf1_again

assert mp is mixed_precision is tf.contrib.mixed_precision
assert tf1_again.contrib.mixed_precision is mp
compat_install.uninstall()
for r in rows:
  assert resolve(r.name) is before[r.name], r.name
# Every module install() imported or served is gone again; what the
# targets import (mplso, Keras) stays.
served = {compat_spellings.module_name(n) for n in compat_spellings.NAMESPACES}
added = set(sys.modules) - set(modules)
assert not added & served, sorted(added & served)
assert all(sys.modules.get(n) is m for n, m in modules.items())
try:
  import tensorflow.contrib.mixed_precision
  raise AssertionError("contrib still importable")
except ModuleNotFoundError:
  pass
print(len(rows), sum(v is MISSING_NAME for v in before.values()))
"""

# Under the runner: every import form of every namespace the table's
# spellings lie in, one line each: `namespace form outcome`, the outcome
# `ok` when the import gives what the attribute path gives afterwards (for a
# member of a namespace that holds spellings: the table's target).
IMPORT_CHECK = r"""
import importlib, sys
import tensorflow as tf
from mplso._src.compat import install as compat_install
from mplso._src.compat import spellings as compat_spellings
from mplso_test.helpers.spelling_lookup import resolve

def member_of(path):
  for row in compat_spellings.SPELLINGS:
    parent, _, name = row.name.rpartition(".")
    if parent == path:
      return name, lambda: compat_install.resolve_target(row.target)
  child = next(n for n in compat_spellings.NAMESPACES
               if n.startswith(path + "."))
  name = child[len(path) + 1:].split(".")[0]
  return name, lambda: resolve(path + "." + name)

for path in compat_spellings.NAMESPACES:
  module = compat_spellings.module_name(path)
  above, _, last = module.rpartition(".")
  member, expected_member = member_of(path)
  expected_namespace = lambda: resolve(path)
  for form, code, expected in [
      ("import", f"import {module}\nresult = {module}.{member}",
       expected_member),
      ("import_as", f"import {module} as result", expected_namespace),
      ("from_import", f"from {module} import {member} as result",
       expected_member),
      ("from_above", f"from {above} import {last} as result",
       expected_namespace),
      ("import_module", f"result = importlib.import_module({module!r})",
       expected_namespace)]:
    scope = {"importlib": importlib}
    try:
      exec(code, scope)
      outcome = "ok" if scope["result"] is expected() else (
          f"gave {scope['result']!r}, not {expected()!r}")
    except Exception as e:
      outcome = f"{type(e).__name__}: {e}"
    print(path, form, outcome, flush=True)
"""

# The import forms IMPORT_CHECK tries.
IMPORT_FORMS = ("import", "import_as", "from_import", "from_above",
                "import_module")


@functools.cache
def import_check(legacy_keras):
  """Runs IMPORT_CHECK under the runner; {(namespace, form): outcome}."""
  proc = run_compat("--quiet", "-c", IMPORT_CHECK,
                    TF_USE_LEGACY_KERAS=legacy_keras,
                    PYTHONPATH=os.pathsep.join(
                        [ROOT, os.environ.get("PYTHONPATH", "")]))
  if proc.returncode:
    raise AssertionError(proc.stderr[-3000:])
  outcomes = {}
  for line in proc.stdout.splitlines():
    path, form, outcome = line.split(" ", 2)
    outcomes[path, form] = outcome
  return outcomes



def snapshot():
  return {row.name: spelling_lookup.resolve(row.name)
          for row in compat_spellings.SPELLINGS}


class InstallTest(tf.test.TestCase, parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.addCleanup(compat.uninstall)

  def test_every_spelling_resolves_to_its_target(self):
    compat.install()
    for row in compat_spellings.SPELLINGS:
      self.assertIs(compat_install.resolve_target(row.target),
                    spelling_lookup.resolve(row.name), row.name)
      self.assertTrue(row.target.startswith("mplso."), row.target)

  def test_contrib_is_importable(self):
    compat.install()
    from tensorflow.contrib import mixed_precision  # pylint: disable=g-import-not-at-top
    self.assertIs(contrib.LossScaleOptimizer, mixed_precision.LossScaleOptimizer)

  def test_uninstall_leaves_modules_and_namespaces_as_before(self):
    # Once, for what the targets import (mplso's modules, Keras's) and what
    # TF's lazy loaders load: those stay.
    compat.install()
    compat.uninstall()
    modules = dict(sys.modules)
    namespaces = {path: spelling_lookup.resolve(path)
                  for path in compat_spellings.NAMESPACES}
    compat.install()
    for path in compat_spellings.NAMESPACES:
      importlib.import_module(compat_spellings.module_name(path))
    self.assertIn("tensorflow.keras.mixed_precision.experimental",
                  sys.modules)
    compat.uninstall()
    added = sorted(set(sys.modules) - set(modules))
    changed = [name for name, module in modules.items()
               if sys.modules.get(name) is not module]
    self.assertEqual(([], []), (added, changed))
    self.assertEqual(namespaces, {path: spelling_lookup.resolve(path)
                                  for path in compat_spellings.NAMESPACES})

  def test_install_twice_then_uninstall_restores_exactly(self):
    before = snapshot()
    self.assertEqual(spelling_lookup.MISSING_NAME,
                     before["tf.contrib.mixed_precision.LossScaleOptimizer"])
    self.assertIsNot(mplso.DynamicLossScale,
                     before["tf.compat.v1.mixed_precision.DynamicLossScale"])
    compile_before = tf.keras.Model.compile
    compat.install()
    installed = snapshot()
    self.assertIsNot(compile_before, tf.keras.Model.compile)
    compat.install()
    self.assertEqual(installed, snapshot())  # Idempotent.
    compat.uninstall()
    self.assertEqual(before, snapshot())
    self.assertIs(compile_before, tf.keras.Model.compile)
    self.assertNotIn("tensorflow.contrib", sys.modules)
    compat.uninstall()  # A no-op now.
    self.assertEqual(before, snapshot())

  def test_graph_rewrite_spellings_are_mplso(self):
    compat.install()
    for spelling in ("tf.train.experimental", "tf.compat.v1.mixed_precision",
                     "tf.compat.v1.train.experimental"):
      namespace = spelling_lookup.resolve(spelling)
      self.assertIs(mplso.enable_mixed_precision_graph_rewrite,
                    namespace.enable_mixed_precision_graph_rewrite)
      self.assertIs(mplso.disable_mixed_precision_graph_rewrite,
                    namespace.disable_mixed_precision_graph_rewrite)

  def test_keras_own_class_stays_an_instance_of_the_spelling(self):
    # `isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer)` holds
    # for Keras's own class before, during and after install(), and only
    # during install() for mplso's public class.
    import keras  # pylint: disable=g-import-not-at-top
    own = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())
    spelling = "tf.keras.mixed_precision.LossScaleOptimizer"
    self.assertIsInstance(own, spelling_lookup.resolve(spelling))
    self.assertNotIsInstance(own, mplso.keras.LossScaleOptimizer)
    compat.install()
    self.assertIsInstance(own, spelling_lookup.resolve(spelling))
    self.assertNotIsInstance(keras.optimizers.SGD(),
                             spelling_lookup.resolve(spelling))
    compat.uninstall()
    self.assertIsInstance(own, spelling_lookup.resolve(spelling))
    self.assertNotIsInstance(own, mplso.keras.LossScaleOptimizer)

  def test_keras_2_4_spelling_is_mplso_on_keras_3(self):
    compat.install()
    self.assertIs(mplso.keras.LossScaleOptimizer,
                  tf.keras.mixed_precision.LossScaleOptimizer)
    opt = tf.keras.mixed_precision.LossScaleOptimizer(
        tf.keras.optimizers.SGD(0.25), "dynamic")
    self.assertIsInstance(opt, mplso.keras.LossScaleOptimizer)

  def test_keras_2_4_dialect_trains_on_keras_3(self):
    # TF 2.4-2.15 code: keyword arguments, then get_scaled_loss and
    # get_unscaled_gradients, which Keras 3's own class lacks.
    compat.install()
    opt = tf.keras.mixed_precision.LossScaleOptimizer(
        tf.keras.optimizers.SGD(0.25), dynamic=False, initial_scale=64)
    self.assertFalse(opt.dynamic)
    self.assertEqual(64, opt.initial_scale)
    var = tf.Variable(1.)
    for value in (1., float("inf")):  # The second step is skipped.
      with tf.GradientTape() as tape:
        scaled_loss = opt.get_scaled_loss(var ** 2 * value)
      grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, [var]))
      opt.apply_gradients(zip(grads, [var]))
    self.assertEqual(0.5, float(var))
    self.assertEqual(2, int(opt.iterations))
    self.assertEqual(64., float(opt.loss_scale))

  @parameterized.named_parameters(("keras_3", "0"), ("tf_keras", "1"))
  def test_every_spelling_and_import_form_in_a_fresh_process(
      self, legacy_keras):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               TF_USE_LEGACY_KERAS=legacy_keras,
               PYTHONPATH=os.pathsep.join(
                   [ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", SPELLING_CHECK],
                          capture_output=True, text=True, env=env,
                          timeout=300)
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    count, missing = map(int, proc.stdout.split())
    # Every spelling, on either Keras: tf_keras's TF 2.4+ class included.
    self.assertLen(compat_spellings.SPELLINGS, count)
    self.assertGreater(missing, 20)  # Most spellings are gone from TF 2.21.

  def test_keras_spelling_wraps_what_tf_keras_is(self):
    compat.install()
    opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
        tf.keras.optimizers.SGD(0.25), "dynamic")
    self.assertIsInstance(opt, tf.keras.optimizers.Optimizer)
    self.assertIsInstance(opt, mplso.keras.LossScaleOptimizer)
    var = tf.Variable(1.)
    opt.minimize(lambda: var**2, var_list=[var])
    self.assertEqual(0.5, float(var))

  def test_legacy_spelling_trains(self):
    compat.install()
    var = tf.Variable(1.)
    opt = tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(.5),
        tf.compat.v1.mixed_precision.DynamicLossScale(initial_loss_scale=8.))
    opt.minimize(lambda: var * 2., var_list=[var])
    self.assertEqual(0., float(var))

  @parameterized.named_parameters(
      (f"{keras_name}_{path[3:].replace('.', '_')}", legacy_keras, path)
      for keras_name, legacy_keras in (("keras_3", "0"), ("tf_keras", "1"))
      for path in compat_spellings.NAMESPACES)
  def test_namespace_importable_by_module_path_under_the_runner(
      self, legacy_keras, path):
    # TF 2.1-2.3 shipped `tensorflow.keras.mixed_precision.experimental`
    # as a module: `from ... import LossScaleOptimizer` must work too.
    outcomes = import_check(legacy_keras)
    for form in IMPORT_FORMS:
      self.assertEqual("ok", outcomes.get((path, form)), f"{form} {path}")


def run_compat(*args, cwd=None, **env_vars):
  env = dict(os.environ, **{"TF_CPP_MIN_LOG_LEVEL": "3", **env_vars})
  return subprocess.run([sys.executable, "-m", "mplso.compat", *args],
                        capture_output=True, text=True, env=env, cwd=cwd,
                        timeout=300)


class RunnerTest(tf.test.TestCase):

  def write(self, code):
    path = os.path.join(self.create_tempdir().full_path, "legacy_script.py")
    with open(path, "w", encoding="utf-8") as f:
      f.write(textwrap.dedent(code))
    return path

  def test_runs_script_as_main_with_its_argv(self):
    script = self.write("""
        import sys
        import tensorflow as tf
        manager = tf.contrib.mixed_precision.FixedLossScaleManager(5000)
        print(__name__, sys.argv[1:], type(manager).__module__)
        """)
    proc = run_compat(script, "--steps", "3", "-h")
    self.assertEqual(0, proc.returncode, proc.stderr)
    self.assertIn("__main__ ['--steps', '3', '-h'] mplso.", proc.stdout)

  def test_errors_keep_traceback_and_exit_code(self):
    raises = self.write("""
        def train():
          raise RuntimeError("diverged at step 7")
        train()
        """)
    proc = run_compat(raises)
    self.assertEqual(1, proc.returncode)
    self.assertIn("RuntimeError: diverged at step 7", proc.stderr)
    self.assertIn("legacy_script.py\", line 3, in train", proc.stderr)
    exits = self.write("import sys\nsys.exit(3)\n")
    self.assertEqual(3, run_compat(exits).returncode)

  def test_help_and_usage_errors(self):
    proc = run_compat("-h")
    self.assertEqual(0, proc.returncode)
    self.assertIn("usage: python -m mplso.compat [--quiet] SCRIPT", proc.stdout)
    for form in ("[--quiet] -m MODULE [ARGS...]", "[--quiet] -c CODE [ARGS...]",
                 "-m package.train", "sys.argv[0] is '-c'"):
      self.assertIn(form, proc.stdout)
    proc = run_compat()
    self.assertEqual(2, proc.returncode)
    self.assertIn("usage:", proc.stderr)
    proc = run_compat("no_such_script.py")
    self.assertEqual(2, proc.returncode)
    self.assertIn("'no_such_script.py'", proc.stderr)

  def test_help_and_list_import_no_tensorflow(self):
    code = textwrap.dedent("""
        import runpy, sys
        sys.argv = ["mplso.compat", sys.argv[1]]
        try:
          runpy.run_module("mplso.compat", run_name="__main__")
        except SystemExit as exit:
          assert exit.code == 0, exit.code
        print("TF LOADED" if "tensorflow" in sys.modules else "no tensorflow")
        """)
    for option in ("--list", "--help"):
      proc = subprocess.run([sys.executable, "-c", code, option],
                            capture_output=True, text=True, timeout=120)
      self.assertEqual(0, proc.returncode, proc.stderr)
      self.assertTrue(proc.stdout.endswith("no tensorflow\n"), proc.stdout)
    for family in ("tf.compat.v1.train.experimental",
                   "tf.compat.v1.mixed_precision", "tf.train.experimental",
                   "tf.mixed_precision.experimental",
                   "tf.contrib.mixed_precision",
                   "tf.keras.mixed_precision.experimental",
                   "tf.keras.mixed_precision.LossScaleOptimizer",
                   "Policy(name, loss_scale)",
                   "enable/disable_mixed_precision_graph_rewrite",
                   "TF_CPP_MIN_LOG_LEVEL=0"):
      self.assertIn(family, proc.stdout)

  def test_list_prints_the_table_for_either_keras(self):
    proc = run_compat("--list")
    self.assertEqual(0, proc.returncode, proc.stderr)
    lines = proc.stdout.splitlines()
    self.assertLen(lines, len(compat_spellings.SPELLINGS) +
                   len(compat_spellings.import_forms()))
    for row, line in zip(compat_spellings.SPELLINGS, lines):
      self.assertStartsWith(line, f"{row.name} -> {row.target}  [TF ")
    for namespace in ("tf.contrib.mixed_precision",
                      "tf.keras.mixed_precision.experimental"):
      self.assertIn(f"import tensorflow{namespace[2:]} -> {namespace}", lines)
    # What the TF 2.4+ class builds under each Keras; all installed on both.
    self.assertIn(
        "tf.keras.mixed_precision.LossScaleOptimizer -> "
        "mplso.keras.LossScaleOptimizer  [TF 2.4-2.15]  (builds a "
        "keras.optimizers.LossScaleOptimizer on Keras 3, a "
        "tf_keras.mixed_precision.LossScaleOptimizer on tf_keras)", lines)
    self.assertEqual(proc.stdout,
                     run_compat("--list", TF_USE_LEGACY_KERAS="1").stdout)

  def test_reports_the_mplso_classes_used_unless_quiet(self):
    script = self.write("""
        import tensorflow as tf
        tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(1.),
            tf.compat.v1.mixed_precision.DynamicLossScale())
        tf.keras.mixed_precision.experimental.LossScaleOptimizer(
            tf.keras.optimizers.SGD(), 8)
        print("done")
        """)
    proc = run_compat(script)
    self.assertEqual(0, proc.returncode, proc.stderr)
    report = [line for line in proc.stderr.splitlines()
              if "mplso.compat:" in line]
    self.assertEqual(
        ["mplso.compat: used mplso.DynamicLossScale, "
         "mplso.MixedPrecisionLossScaleOptimizer, "
         "mplso.keras.LossScaleOptimizer, mplso.FixedLossScale"], report)
    proc = run_compat("--quiet", script)
    self.assertEqual(0, proc.returncode, proc.stderr)
    self.assertEqual("done\n", proc.stdout)
    self.assertNotIn("mplso.compat:", proc.stderr)

  def test_reports_none_used_and_after_an_error(self):
    proc = run_compat(self.write("print('no mixed precision here')\n"))
    self.assertEqual(0, proc.returncode, proc.stderr)
    self.assertIn("mplso.compat: the script used no mplso class",
                  proc.stderr)
    proc = run_compat(self.write("""
        import tensorflow as tf
        tf.contrib.mixed_precision.FixedLossScaleManager(8)
        raise KeyError("boom")
        """))
    self.assertEqual(1, proc.returncode)
    traceback, report = proc.stderr.rsplit("\n", 2)[:2]
    self.assertIn("KeyError: 'boom'", traceback)
    self.assertEqual(
        "mplso.compat: used mplso.contrib.FixedLossScaleManager", report)

  def test_log_level_defaults_quiet_and_user_choice_wins(self):
    script = self.write("""
        import os
        print(os.environ["TF_CPP_MIN_LOG_LEVEL"])
        """)
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    proc = subprocess.run([sys.executable, "-m", "mplso.compat", "--quiet",
                           script], capture_output=True, text=True, env=env,
                          timeout=300)
    self.assertEqual(0, proc.returncode, proc.stderr)
    self.assertEqual(quiet_start.DEFAULT_LOG_LEVEL, proc.stdout.strip())
    self.assertEqual("", proc.stderr)  # Quiet start on this CPU machine.
    proc = run_compat("--quiet", script, TF_CPP_MIN_LOG_LEVEL="1")
    self.assertEqual("1", proc.stdout.strip())


# A legacy module, run as `python -m legacy_pkg.train`: the class it prints
# is mplso's only when the runner installed the legacy names first.
LEGACY_MODULE = """
import sys
import tensorflow as tf
opt = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
    tf.compat.v1.train.GradientDescentOptimizer(1.), 8)
print(__name__, sys.argv[1:], sys.argv[0] == __file__, type(opt).__module__)
if "--fail" in sys.argv:
  raise RuntimeError("diverged at step 7")
"""


class ModuleAndCodeRunnerTest(tf.test.TestCase):
  """`python -m mplso.compat -m MODULE` and `-c CODE`, as `python` runs them."""

  def package(self, **files):
    """Writes `legacy_pkg/{name}.py` for each file; returns their folder."""
    root = self.create_tempdir().full_path
    os.mkdir(os.path.join(root, "legacy_pkg"))
    for name, code in {"__init__": "", **files}.items():
      with open(os.path.join(root, "legacy_pkg", f"{name}.py"), "w",
                encoding="utf-8") as f:
        f.write(textwrap.dedent(code))
    return root

  def report(self, proc):
    return [line for line in proc.stderr.splitlines()
            if line.startswith("mplso.compat:")]

  def run_on_path(self, root, *args):
    """Runs the runner with `root` first on PYTHONPATH."""
    return run_compat(*args, PYTHONPATH=os.pathsep.join(
        [root, os.environ.get("PYTHONPATH", "")]))

  def test_runs_module_as_main_with_its_argv(self):
    root = self.package(train=LEGACY_MODULE)
    proc = self.run_on_path(root, "-m", "legacy_pkg.train", "--steps", "3",
                            "-h")
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    self.assertEqual(
        "__main__ ['--steps', '3', '-h'] True mplso._src.tf1.v1_optimizer\n",
        proc.stdout)
    self.assertEqual(["mplso.compat: used "
                      "mplso.MixedPrecisionLossScaleOptimizer, "
                      "mplso.FixedLossScale"], self.report(proc))

  def test_runs_package_main_from_the_current_directory(self):
    # `-mMODULE` attached, as `python` takes it; the current directory is
    # searched first, as under `python -m`.
    root = self.package(__main__="""
        import sys
        import tensorflow as tf
        print(sys.argv[0].endswith("__main__.py"), sys.argv[1:],
              tf.contrib.mixed_precision.LossScaleOptimizer.__module__)
        """)
    proc = run_compat("--quiet", "-mlegacy_pkg", "a", cwd=root)
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    self.assertEqual("True ['a'] mplso._src.tf1.contrib_optimizer\n",
                     proc.stdout)
    self.assertEqual([], self.report(proc))

  def test_runs_code_with_its_argv(self):
    proc = run_compat("-c", textwrap.dedent("""
        import sys
        import tensorflow as tf
        opt = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(1.), "dynamic")
        print(__name__, sys.argv, type(opt).__module__)
        """), "x", "--y")
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    self.assertEqual(
        "__main__ ['-c', 'x', '--y'] mplso._src.tf1.v1_optimizer\n",
        proc.stdout)
    self.assertEqual(["mplso.compat: used "
                      "mplso.MixedPrecisionLossScaleOptimizer, "
                      "mplso.DynamicLossScale"], self.report(proc))

  def test_errors_keep_traceback_exit_code_and_report(self):
    root = self.package(train=LEGACY_MODULE,
                        broken="import no_such_dependency_of_legacy_pkg\n")
    proc = self.run_on_path(root, "-m", "legacy_pkg.train", "--fail")
    self.assertEqual(1, proc.returncode)
    self.assertIn("RuntimeError: diverged at step 7", proc.stderr)
    self.assertRegex(proc.stderr, r'legacy_pkg.train\.py", line 8, in <module>')
    self.assertStartsWith(self.report(proc)[0], "mplso.compat: used ")
    # The program's own missing import is its error, not a usage error.
    proc = self.run_on_path(root, "-m", "legacy_pkg.broken")
    self.assertEqual(1, proc.returncode)
    self.assertIn("No module named 'no_such_dependency_of_legacy_pkg'",
                  proc.stderr)
    self.assertNotIn("usage:", proc.stderr)
    proc = run_compat("-c", "def f():\n  raise KeyError('boom')\nf()\n")
    self.assertEqual(1, proc.returncode)
    self.assertIn('File "<string>", line 2, in f', proc.stderr)
    self.assertIn("KeyError: 'boom'", proc.stderr)
    self.assertEqual(3, run_compat("-c", "import sys; sys.exit(3)").returncode)

  def test_usage_errors_name_what_came_and_what_is_accepted(self):
    root = self.package()
    for args, message in [
        (["-m"], "error: Argument expected for the -m option: -m MODULE. "
                 "Received: -m as the last argument."),
        (["--quiet", "-c"], "error: Argument expected for the -c option: "
                            "-c CODE. Received: -c as the last argument."),
        (["-x", "train.py"], "error: unknown option: '-x'. Expected SCRIPT "
                             "(a file), -m MODULE or -c CODE"),
        (["-m", "no_such_module_xyz"],
         "error: No module named no_such_module_xyz. Received: -m "
         "'no_such_module_xyz'. Expected an importable module"),
        (["-m", "legacy_pkg"],
         "error: No module named legacy_pkg.__main__; 'legacy_pkg' is a "
         "package and cannot be directly executed. Received: -m 'legacy_pkg'"),
        (["-m", ".train"], "error: -m needs an absolute module name"),
    ]:
      proc = self.run_on_path(root, *args)
      self.assertEqual(2, proc.returncode, args)
      self.assertIn("usage: python -m mplso.compat", proc.stderr)
      self.assertIn(message, proc.stderr)
      self.assertEqual([], self.report(proc), args)
      self.assertEqual("", proc.stdout)


class LegacyKerasTest(tf.test.TestCase, parameterized.TestCase):
  """install() for each Keras that `tf.keras` can be, in a fresh process."""

  @parameterized.named_parameters(("keras_3", "0"), ("tf_keras", "1"))
  def test_install_uninstall_names(self, legacy_keras):
    code = textwrap.dedent("""
        import tensorflow as tf
        import mplso.compat, mplso.keras
        assert not hasattr(tf.keras.mixed_precision, "experimental")
        mplso.compat.install()
        mp = tf.keras.mixed_precision.experimental
        opt = mp.LossScaleOptimizer(tf.keras.optimizers.Adam(), "dynamic")
        assert isinstance(opt, tf.keras.optimizers.Optimizer), type(opt)
        assert isinstance(opt, mplso.keras.LossScaleOptimizer), type(opt)
        assert mp.set_policy is mplso.compat.set_policy
        mplso.compat.uninstall()
        assert not hasattr(tf.keras.mixed_precision, "experimental")
        print(type(opt).__module__, tf.keras.optimizers.Optimizer.__module__)
        """)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               TF_USE_LEGACY_KERAS=legacy_keras)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env=env, timeout=300)
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    wrapper_module, optimizer_module = proc.stdout.split()
    if legacy_keras == "1":
      self.assertTrue(optimizer_module.startswith("tf_keras"))
      self.assertTrue(wrapper_module.endswith("tf_keras_optimizer"))
    else:
      self.assertTrue(optimizer_module.startswith("keras"))
      self.assertTrue(wrapper_module.endswith("keras3_optimizer"))


  @parameterized.named_parameters(("keras_3", "0"), ("tf_keras", "1"))
  def test_tf_2_4_spelling_is_mplso_on_either_keras(self, legacy_keras):
    # On tf_keras too: its own class has no `get_gradients`, which TF
    # 2.4-2.10 trainers call on today's (non-legacy) optimizers.
    code = textwrap.dedent("""
        import tensorflow as tf
        import mplso.compat, mplso.keras
        own = tf.keras.mixed_precision.LossScaleOptimizer
        mplso.compat.install()
        for mp in (tf.keras.mixed_precision,
                   tf.compat.v1.keras.mixed_precision):
          assert mp.LossScaleOptimizer is mplso.keras.LossScaleOptimizer
        opt = tf.keras.mixed_precision.LossScaleOptimizer(
            tf.keras.optimizers.Adam(0.1), dynamic=True)
        assert isinstance(opt, own), type(opt)
        var = tf.Variable([1., -2.])
        @tf.function
        def step():
          grads = opt.get_gradients(tf.reduce_sum(var ** 2), [var])
          opt.apply_gradients(zip(grads, [var]))
        step()
        assert abs(var.numpy() - [0.9, -1.9]).max() < 1e-5, var
        mplso.compat.uninstall()
        assert tf.keras.mixed_precision.LossScaleOptimizer is own
        print(type(opt).__module__)
        """)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               TF_USE_LEGACY_KERAS=legacy_keras)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env=env, timeout=300)
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    family = "tf_keras_optimizer" if legacy_keras == "1" else "keras3_optimizer"
    self.assertEqual(f"mplso._src.keras.{family}",
                     proc.stdout.strip())


class LegacyExamplesTest(tf.test.TestCase, parameterized.TestCase):

  def test_contrib_script_trains_through_the_runner(self):
    proc = run_compat(
        os.path.join(ROOT, "examples", "legacy", "contrib_loss_scale.py"),
        "--steps", "100", "--model_dir", self.create_tempdir().full_path)
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    losses = [float(v) for v in re.findall(r"loss (\d+\.\d+)", proc.stdout)]
    self.assertGreater(len(losses), 2)
    self.assertLess(losses[-1], 0.2 * losses[0])
    self.assertIn("saved", proc.stdout)


  def _losses(self, proc, pattern=r"loss (\d+\.\d+)"):
    self.assertEqual(0, proc.returncode, proc.stderr[-3000:])
    self.assertRegex(proc.stdout, r"optimizer mplso\._src\.")
    return [float(v) for v in re.findall(pattern, proc.stdout)]

  def test_train_experimental_script_trains_and_resumes(self):
    proc = run_compat(
        os.path.join(ROOT, "examples", "legacy",
                     "train_experimental_loss_scale.py"),
        "--steps", "200", "--model_dir", self.create_tempdir().full_path)
    losses = self._losses(proc)
    self.assertGreater(len(losses), 3)
    self.assertLess(losses[-1], 0.5 * losses[0])
    self.assertIn("restored at step 100", proc.stdout)

  @parameterized.named_parameters(("keras_3", "0"), ("tf_keras", "1"))
  def test_keras_script_trains(self, legacy_keras):
    proc = run_compat(
        os.path.join(ROOT, "examples", "legacy",
                     "keras_experimental_loss_scale.py"),
        "--epochs", "3", TF_USE_LEGACY_KERAS=legacy_keras)
    losses = self._losses(proc, r"epoch \d+  loss (\d+\.\d+)")
    self.assertLen(losses, 3)
    self.assertLess(losses[-1], losses[0])
    family = "tf_keras_optimizer" if legacy_keras == "1" else "keras3_optimizer"
    self.assertIn(family, proc.stdout)
    self.assertRegex(proc.stdout, r"custom loop  loss \d")


if __name__ == "__main__":
  absltest.main()
