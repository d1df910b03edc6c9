"""Tests a policy set where no `compile` is: `policies` and the planner.

Whole files before and after: a file that sets a policy a `compile` may
wrap under, and has no `compile` of its own (the one the policy reaches is
in another file, or in a library), gets what a `compile` there would get:
`mplso.compat.install()` (`--to mplso`, and `--to native` where the policy
stays on mplso, a fixed loss scale among them), or a WARNING that names
Keras's own class and its differences (`--to native`).
"""

import textwrap

from absl.testing import absltest
from absl.testing import parameterized

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import native_plan
from mplso._src.upgrade import rewrite
from mplso_test.helpers import upgrade_cases

assert_upgrade = upgrade_cases.assert_upgrade
NATIVE, KERAS_3, TF_KERAS = (edits_lib.NATIVE, edits_lib.KERAS_3,
                             edits_lib.TF_KERAS)

# The reason of the install() line and of the WARNING, as the report has it.
_ELSEWHERE = (
    "the policy here reaches each `compile` run once it is set, and this "
    "file has none: one in another file, or in code the tool does not see (a "
    "library), wraps the optimizer of a ")
_INSTALL_WHY = (
    _ELSEWHERE + "model built under it by itself. The program ran with "
    "mplso's LossScaleOptimizer there under `python -m mplso.compat`; plain "
    "TF 2.21 would wrap it in Keras's own class instead")
_INSTALLS = ". `mplso.compat.install()` keeps compile's wrapper mplso's, as "
_INSTALLS += "the runner did"
_FIXED = (
    "; the policy's loss scale, `1024`, would be lost too: Keras's `compile` "
    "wraps only a `mixed_float16` model's optimizer, with its own dynamic "
    "scale (2**15)")
_WARNING_WHY = (
    _ELSEWHERE + "`mixed_float16` model in Keras's own `LossScaleOptimizer` "
    "by itself (where none runs, as in a custom training loop, nothing "
    "changes)")
_KERAS_3_DIFFERENCES = (
    "; Keras 3's class does not advance `iterations` on a skipped step (TF "
    "2.4-2.15's and mplso's do), lets the scale fall below 1 (they stop at "
    "1), and unscales in `apply_gradients`")
_STAYS_FIXED = (
    "    stays on mplso: the policy at line 3: its loss scale, `1024`, is "
    "fixed; Keras's policies have none, and Keras's `compile` wraps the "
    "optimizer of a `mixed_float16` model in Keras's own `LossScaleOptimizer` "
    "with a dynamic scale")

# The tester's two files: the policy in one, `compile` in the other.
_MAIN = """\
import tensorflow as tf
from pkg.model import build_and_compile


def main():
  tf.keras.mixed_precision.experimental.set_policy('mixed_float16')
  model = build_and_compile()
  model.fit(tf.ones((8, 4)), tf.ones((8, 1)), epochs=1)
"""
_MODEL = """\
import tensorflow as tf


def build_and_compile():
  model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
  model.compile(optimizer='adam', loss='mse')
  return model
"""
_FIXED_MAIN = """\
import tensorflow as tf
from pkg.model import build_and_compile

policy = tf.keras.mixed_precision.experimental.Policy('mixed_float16', loss_scale=1024)
tf.keras.mixed_precision.experimental.set_policy(policy)
model = build_and_compile()
"""


def _tree(texts, to, keras=KERAS_3):
  """`upgrade_sources` of `texts`: {path: (new text, report lines)}."""
  results = rewrite.upgrade_sources(texts, to=to, keras=keras)
  return {path: (result.code, upgrade_cases.report_lines(result, path, True))
          for path, result in results.items()}


class CrossFileTreeTest(absltest.TestCase):
  """The tester's tree: each mode, whole files and report lines."""

  def test_to_mplso_installs_where_the_policy_is_set(self):
    self.assertEqual({
        "pkg/main.py": ("""\
import mplso.compat
mplso.compat.install()
import tensorflow as tf
from pkg.model import build_and_compile


def main():
  mplso.compat.set_policy('mixed_float16')
  model = build_and_compile()
  model.fit(tf.ones((8, 4)), tf.ones((8, 1)), epochs=1)
""", [
    "pkg/main.py: INFO: Added 'import mplso.compat'",
    "pkg/main.py:6: INFO: Renamed "
    "'tf.keras.mixed_precision.experimental.set_policy' to "
    "'mplso.compat.set_policy'",
    "pkg/main.py:6: INFO: Added 'mplso.compat.install()'",
    f"    line 6: {_INSTALL_WHY}{_INSTALLS}"]),
        "pkg/model.py": (_MODEL, []),
    }, _tree({"pkg/main.py": _MAIN, "pkg/model.py": _MODEL},
             edits_lib.MPLSO))

  def test_to_native_warns_where_the_policy_is_set(self):
    self.assertEqual({
        "pkg/main.py": (_MAIN.replace(
            "tf.keras.mixed_precision.experimental.set_policy",
            "tf.keras.mixed_precision.set_global_policy"), [
                "pkg/main.py:6: INFO: Changed "
                "'tf.keras.mixed_precision.experimental.set_policy' to "
                "'tf.keras.mixed_precision.set_global_policy'",
                "    Keras's own policy functions",
                "pkg/main.py:6: WARNING: Kept \"'mixed_float16'\"",
                f"    {_WARNING_WHY}{_KERAS_3_DIFFERENCES}"]),
        "pkg/model.py": (_MODEL, []),
    }, _tree({"pkg/main.py": _MAIN, "pkg/model.py": _MODEL}, NATIVE))

  def test_fixed_loss_scale_is_kept_in_both_modes(self):
    installed = """\
import mplso.compat
mplso.compat.install()
import tensorflow as tf
from pkg.model import build_and_compile

policy = mplso.compat.Policy('mixed_float16', loss_scale=1024)
mplso.compat.set_policy(policy)
model = build_and_compile()
"""
    install = ["pkg/main.py:4: INFO: Added 'mplso.compat.install()'",
               f"    line 4: {_INSTALL_WHY}{_FIXED}{_INSTALLS}"]
    policy = "'tf.keras.mixed_precision.experimental.Policy'"
    setter = "'tf.keras.mixed_precision.experimental.set_policy'"
    texts = {"pkg/main.py": _FIXED_MAIN, "pkg/model.py": _MODEL}
    with self.subTest("mplso"):
      self.assertEqual({
          "pkg/main.py": (installed, [
              "pkg/main.py: INFO: Added 'import mplso.compat'",
              f"pkg/main.py:4: INFO: Renamed {policy} to "
              "'mplso.compat.Policy'", *install,
              f"pkg/main.py:5: INFO: Renamed {setter} to "
              "'mplso.compat.set_policy'"]),
          "pkg/model.py": (_MODEL, []),
      }, _tree(texts, edits_lib.MPLSO))
    stays = _STAYS_FIXED.replace("line 3", "line 4")
    for keras in (KERAS_3, TF_KERAS):
      with self.subTest(f"native, {keras}"):
        self.assertEqual({
            "pkg/main.py": (installed, [
                "pkg/main.py: INFO: Added 'import mplso.compat'",
                f"pkg/main.py:4: INFO: Changed {policy} to "
                "'mplso.compat.Policy'", stays, *install,
                f"pkg/main.py:5: INFO: Changed {setter} to "
                "'mplso.compat.set_policy'", stays]),
            "pkg/model.py": (_MODEL, []),
        }, _tree(texts, NATIVE, keras))


class SingleFileTest(parameterized.TestCase):
  """One file sets the policy; the `compile` is in code the tool never sees."""

  def test_to_mplso_installs(self):
    result = assert_upgrade("""\
        import tensorflow as tf
        from library import train
        tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
        train()
        """, """\
        import mplso.compat
        mplso.compat.install()
        import tensorflow as tf
        from library import train
        mplso.compat.set_policy("mixed_float16")
        train()
        """, [
            "a.py: INFO: Added 'import mplso.compat'",
            "a.py:3: INFO: Renamed "
            "'tf.keras.mixed_precision.experimental.set_policy' to "
            "'mplso.compat.set_policy'",
            "a.py:3: INFO: Added 'mplso.compat.install()'",
            f"    line 3: {_INSTALL_WHY}{_INSTALLS}"], reasons=True)
    self.assertTrue(result.installs)

  @parameterized.named_parameters(
      ("keras_3", KERAS_3, "WARNING: Kept '\"mixed_float16\"'",
       _KERAS_3_DIFFERENCES),
      # tf_keras's class is TF's own: nothing for a person to do.
      ("tf_keras", TF_KERAS, "INFO: Kept '\"mixed_float16\"' as written",
       "; " + native_plan.TF_KERAS_COMPILE),
  )
  def test_to_native_reports(self, keras, line, differences):
    assert_upgrade("""\
        import tensorflow as tf
        from library import train
        tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
        train()
        """, """\
        import tensorflow as tf
        from library import train
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        train()
        """, [
            "a.py:3: INFO: Changed "
            "'tf.keras.mixed_precision.experimental.set_policy' to "
            "'tf.keras.mixed_precision.set_global_policy'",
            "    Keras's own policy functions",
            f"a.py:3: {line}",
            f"    {_WARNING_WHY}{differences}"],
        reasons=True, to=NATIVE, keras=keras)

  def test_fixed_loss_scale_policy_in_both_modes(self):
    before = """\
        import tensorflow as tf
        from library import train
        policy = tf.keras.mixed_precision.experimental.Policy("mixed_float16", loss_scale=1024)
        tf.keras.mixed_precision.experimental.set_policy(policy)
        train()
        """
    after = """\
        import mplso.compat
        mplso.compat.install()
        import tensorflow as tf
        from library import train
        policy = mplso.compat.Policy("mixed_float16", loss_scale=1024)
        mplso.compat.set_policy(policy)
        train()
        """
    install = ["a.py:3: INFO: Added 'mplso.compat.install()'",
               f"    line 3: {_INSTALL_WHY}{_FIXED}{_INSTALLS}"]
    policy = "'tf.keras.mixed_precision.experimental.Policy'"
    setter = "'tf.keras.mixed_precision.experimental.set_policy'"
    with self.subTest("mplso"):
      assert_upgrade(before, after, [
          "a.py: INFO: Added 'import mplso.compat'",
          f"a.py:3: INFO: Renamed {policy} to 'mplso.compat.Policy'",
          *install,
          f"a.py:4: INFO: Renamed {setter} to 'mplso.compat.set_policy'"],
                     reasons=True)
    for keras in (KERAS_3, TF_KERAS):
      with self.subTest(f"native, {keras}"):
        assert_upgrade(before, after, [
            "a.py: INFO: Added 'import mplso.compat'",
            f"a.py:3: INFO: Changed {policy} to 'mplso.compat.Policy'",
            _STAYS_FIXED, *install,
            f"a.py:4: INFO: Changed {setter} to 'mplso.compat.set_policy'",
            _STAYS_FIXED], reasons=True, to=NATIVE, keras=keras)

  def test_setter_imported_by_name_counts_where_compile_is(self):
    # Keras's own setter imported by name makes the file's `compile` wrap
    # too: it gets the same-file `install()` (it did not before).
    result = assert_upgrade("""\
        from tensorflow.keras.mixed_precision import set_global_policy
        import tensorflow as tf
        set_global_policy("mixed_float16")
        opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(o, "dynamic")
        model.compile(optimizer="adam", loss="mse")
        """, """\
        import mplso.compat
        mplso.compat.install()
        from tensorflow.keras.mixed_precision import set_global_policy
        import tensorflow as tf
        import mplso.keras
        set_global_policy("mixed_float16")
        opt = mplso.keras.LossScaleOptimizer(o, "dynamic")
        model.compile(optimizer="adam", loss="mse")
        """)
    [install] = [e for e in result.edits if e.new == "mplso.compat.install()"]
    self.assertStartsWith(install.why, "line 5: `compile` here wraps")

  def test_second_run_changes_nothing(self):
    once = rewrite.upgrade_source(textwrap.dedent("""\
        import tensorflow as tf
        tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
        """))
    self.assertTrue(once.installs)
    twice = rewrite.upgrade_source(once.code)
    self.assertEqual(once.code, twice.code)
    self.assertEmpty(twice.edits)


class WhichPoliciesTest(parameterized.TestCase):
  """Which policy calls may make a `compile` elsewhere wrap (mplso mode)."""

  @parameterized.named_parameters(
      ("keras_names_only", """\
          import tensorflow as tf
          tf.keras.mixed_precision.set_global_policy("mixed_float16")
          p = tf.keras.mixed_precision.Policy("mixed_float16")
          """),
      ("keras_setter", """\
          import tensorflow as tf
          tf.keras.mixed_precision.set_global_policy("mixed_float16")
          opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(o, "dynamic")
          """),
      ("keras_setter_imported_by_name", """\
          from tensorflow.keras.mixed_precision import set_global_policy
          from tensorflow.keras.mixed_precision import experimental as mp
          set_global_policy("mixed_float16")
          p = mp.global_policy()
          """),
      ("policy_object", """\
          import tensorflow as tf
          policy = tf.keras.mixed_precision.experimental.Policy("mixed_float16")
          tf.keras.mixed_precision.experimental.set_policy(policy)
          """),
      ("name_from_elsewhere", """\
          import tensorflow as tf
          def setup(name):
            tf.keras.mixed_precision.experimental.set_policy(name)
          """),
      ("policy_given_a_scale_not_set_here", """\
          import tensorflow as tf
          POLICY = tf.keras.mixed_precision.experimental.Policy("mixed_bfloat16", "dynamic")
          """),
      ("unknown_name_of_a_policy", """\
          import tensorflow as tf
          tf.keras.mixed_precision.experimental.set_policy(
              tf.keras.mixed_precision.experimental.Policy(FLAGS.dtype))
          """),
  )
  def test_installs(self, source):
    result = rewrite.upgrade_source(textwrap.dedent(source))
    [install] = [e for e in result.edits if e.kind == edits_lib.ADDED and
                 e.new == "mplso.compat.install()"]
    self.assertStartsWith(install.why.split(": ", 1)[1], _ELSEWHERE)
    self.assertTrue(result.installs)

  @parameterized.named_parameters(
      ("other_policy_name", """\
          import tensorflow as tf
          tf.keras.mixed_precision.experimental.set_policy("mixed_bfloat16")
          """),
      ("other_policy_object", """\
          import tensorflow as tf
          policy = tf.keras.mixed_precision.experimental.Policy("mixed_bfloat16")
          tf.keras.mixed_precision.experimental.set_policy(policy)
          """),
      ("other_name_in_a_name", """\
          import tensorflow as tf
          name = "float32"
          tf.keras.mixed_precision.experimental.set_policy(name)
          """),
      ("policy_without_a_scale", """\
          import tensorflow as tf
          policy = tf.keras.mixed_precision.experimental.Policy("mixed_bfloat16", None)
          tf.keras.mixed_precision.set_global_policy(policy)
          """),
      ("default_policy", """\
          import tensorflow as tf
          tf.keras.mixed_precision.experimental.set_policy(None)
          """),
      ("policy_not_set_here", """\
          import tensorflow as tf
          POLICY = tf.keras.mixed_precision.experimental.Policy("mixed_float16")
          """),
      ("another_library_set_policy", """\
          import tensorflow as tf
          agent.set_policy("mixed_float16")
          opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(o, "dynamic")
          """),
      # A `compile` of the file's own: decided as before, per `compile`.
      ("compile_of_an_explicit_wrapper", """\
          import tensorflow as tf
          tf.keras.mixed_precision.set_global_policy("mixed_float16")
          opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(o, "dynamic")
          model.compile(optimizer=opt, loss="mse")
          """),
  )
  def test_does_not_install(self, source):
    result = rewrite.upgrade_source(textwrap.dedent(source))
    self.assertFalse(result.installs, result.edits)
    self.assertNotIn("mplso.compat.install()", result.code)


if __name__ == "__main__":
  absltest.main()
