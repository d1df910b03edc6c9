"""Tests `native_plan`: which calls and reads `--to native` moves to Keras's.

`NativePlanner` decides the references the rewrite's planner hands it: it
is driven here through `rewrite.upgrade_source(..., to=NATIVE)`. What each
call becomes is `native_rules_test`'s.
"""

import textwrap

from absl.testing import absltest
from absl.testing import parameterized

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import native_plan
from mplso._src.upgrade import native_rules
from mplso._src.upgrade import rewrite
from mplso_test.helpers import upgrade_cases

NATIVE, KERAS_3, TF_KERAS = (edits_lib.NATIVE, edits_lib.KERAS_3,
                             edits_lib.TF_KERAS)


def upgrade(source, keras=KERAS_3):
  return rewrite.upgrade_source(textwrap.dedent(source), to=NATIVE,
                                keras=keras)


def assert_upgrade(before, after, report=None, keras=KERAS_3):
  """`upgrade_cases.assert_upgrade` under `--to native`."""
  return upgrade_cases.assert_upgrade(before, after, report, to=NATIVE,
                                      keras=keras)


class OptimizerCallTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("keras_3", "tf.keras.mixed_precision.LossScaleOptimizer(sgd, "
       "dynamic=True, initial_scale=8, dynamic_growth_steps=5)", KERAS_3,
       "tf.keras.mixed_precision.LossScaleOptimizer(sgd, initial_scale=8, "
       "dynamic_growth_steps=5)", "takes `initial_scale`"),
      ("tf_keras", "tf.keras.mixed_precision.experimental.LossScaleOptimizer("
       "sgd, loss_scale=tf.mixed_precision.experimental.DynamicLossScale("
       "8))", TF_KERAS,
       "tf.keras.mixed_precision.LossScaleOptimizer(sgd, initial_scale=8)",
       "`DynamicLossScale` with multiplier 2"),
      # The loss-scale object written in the call goes with it.
      ("dynamic_loss_scale", "tf.keras.mixed_precision.experimental."
       "LossScaleOptimizer(sgd, tf.mixed_precision.experimental."
       "DynamicLossScale(initial_loss_scale=2**10, increment_period=20, "
       "multiplier=2.))", KERAS_3, "tf.keras.mixed_precision."
       "LossScaleOptimizer(sgd, initial_scale=2**10, dynamic_growth_steps=20)",
       "`DynamicLossScale` with multiplier 2"),
  )
  def test_converted_with_the_rules_reason(self, call, keras, expected,
                                           reason):
    result = upgrade(f"import tensorflow as tf\nopt = {call}\n", keras)
    self.assertEqual(f"import tensorflow as tf\nopt = {expected}\n",
                     result.code)
    [edit] = result.edits
    self.assertEqual((2, call, expected), (edit.line, edit.old, edit.new))
    self.assertStartsWith(edit.why, "Keras's own class: ")
    self.assertIn(reason, edit.why)
    # Keras 3's class behaves otherwise; every line of a call moved to it
    # says how.
    self.assertEqual(keras == KERAS_3,
                     native_rules.KERAS_3_DIFFERENCES in edit.why)

  @parameterized.named_parameters(
      ("optimizer_keras_3", "tf.keras.mixed_precision.LossScaleOptimizer(sgd, "
       "dynamic=True)", KERAS_3, "Keras's own class: "),
      ("optimizer_tf_keras", "tf.keras.mixed_precision.experimental."
       "LossScaleOptimizer(sgd, 'dynamic')", TF_KERAS,
       "Keras's own class: TF 2.3's `loss_scale='dynamic'`"),
      ("policy", 'tf.keras.mixed_precision.experimental.Policy("float32")',
       KERAS_3, "Keras's own policy: it has no loss scale"),
  )
  def test_report_line_names_what_it_moved_to_once(self, call, keras, start):
    result = upgrade(f"import tensorflow as tf\nx = {call}\n", keras)
    [edit] = result.edits
    self.assertStartsWith(edit.why, start)
    self.assertEqual(1, edit.why.count("own class") +
                     edit.why.count("own policy"), edit.why)

  def test_call_that_stays_is_renamed_with_the_rules_reason(self):
    result = upgrade("""\
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd, False, 8)
        """)
    self.assertIn("opt = mplso.keras.LossScaleOptimizer(sgd, False, 8)",
                  result.code)
    [edit] = [e for e in result.edits if e.line == 2]
    self.assertEqual("mplso.keras.LossScaleOptimizer", edit.new)
    self.assertStartsWith(edit.why, "stays on mplso: ")
    self.assertIn("fixed loss scale", edit.why)

  def test_call_keeps_its_layout_and_last_comment(self):
    assert_upgrade("""\
        import tensorflow as tf
        opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
            sgd,
            "dynamic",  # keep dynamic
        )
        """, """\
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(
            sgd,  # keep dynamic
        )
        """)

  def test_class_named_but_not_called(self):
    # TF 2.4-2.15's name is Keras's own class today and stays as written;
    # TF 2.1-2.3's becomes it.
    result = assert_upgrade("""\
        import tensorflow as tf
        a = tf.keras.mixed_precision.LossScaleOptimizer
        b = tf.keras.mixed_precision.experimental.LossScaleOptimizer
        """, """\
        import tensorflow as tf
        a = tf.keras.mixed_precision.LossScaleOptimizer
        b = tf.keras.mixed_precision.LossScaleOptimizer
        """, ["a.py:3: INFO: Changed "
              "'tf.keras.mixed_precision.experimental.LossScaleOptimizer' "
              "to 'tf.keras.mixed_precision.LossScaleOptimizer'"])
    self.assertIn("mplso's classes subclass it", result.edits[0].why)

  def test_without_a_tensorflow_import_one_is_added(self):
    assert_upgrade("""\
        from tensorflow.keras.mixed_precision import experimental as mp
        opt = mp.LossScaleOptimizer(sgd, "dynamic")
        """, """\
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)
        """, [
            "a.py: INFO: Added 'import tensorflow as tf'",
            "a.py:1: INFO: Changed 'from tensorflow.keras.mixed_precision "
            "import experimental as mp' to '(removed)'",
            "a.py:2: INFO: Changed 'mp.LossScaleOptimizer(sgd, \"dynamic\")' "
            "to 'tf.keras.mixed_precision.LossScaleOptimizer(sgd)'"])

  @parameterized.named_parameters(("keras_3", KERAS_3),
                                  ("tf_keras", TF_KERAS))
  def test_already_native_call_is_kept_byte_for_byte(self, keras):
    source = """\
        from tensorflow.keras import mixed_precision
        opt = mixed_precision.LossScaleOptimizer(  # ours
            sgd, initial_scale=2 ** 10)
        model.compile(optimizer=opt, loss="mse")
        """
    result = assert_upgrade(source, source, keras=keras)
    [edit] = result.edits
    self.assertEqual(edits_lib.KEPT, edit.kind)
    self.assertStartsWith(edit.why, "Keras's own class already: ")
    self.assertEqual(keras == KERAS_3,
                     native_rules.KERAS_3_DIFFERENCES in edit.why)

  @parameterized.named_parameters(("keras_3", KERAS_3),
                                  ("tf_keras", TF_KERAS))
  def test_already_native_call_keeps_its_keyword_order(self, keras):
    # The keywords in another order than the rule writes them mean the same:
    # the call stays as written, not reordered.
    source = """\
        import tensorflow as tf
        opt = tf.keras.optimizers.Adam()
        opt = tf.keras.mixed_precision.LossScaleOptimizer(opt, dynamic_growth_steps=5, initial_scale=2**15)
        model.compile(optimizer=opt, loss="mse")
        """
    result = assert_upgrade(source, source, keras=keras)
    [edit] = result.edits
    self.assertEqual(edits_lib.KEPT, edit.kind)
    self.assertStartsWith(edit.why, "Keras's own class already: ")

  def test_names_without_a_keras_counterpart_stay(self):
    result = assert_upgrade("""\
        import tensorflow.compat.v1 as tf
        o = tf.train.experimental.MixedPrecisionLossScaleOptimizer(sgd, 8)
        m = tf.contrib.mixed_precision.FixedLossScaleManager(8)
        """, """\
        import tensorflow.compat.v1 as tf
        import mplso.contrib
        o = mplso.MixedPrecisionLossScaleOptimizer(sgd, 8)
        m = mplso.contrib.FixedLossScaleManager(8)
        """)
    whys = [e.why for e in result.edits if e.line]
    self.assertEqual(
        ["stays on mplso: " + native_rules.stays_why(target) for target in
         ("mplso.MixedPrecisionLossScaleOptimizer",
          "mplso.contrib.FixedLossScaleManager")], whys)


class MethodsTest(absltest.TestCase):

  def test_keras_3_protocol(self):
    assert_upgrade("""\
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)
        def step(x):
          with tf.GradientTape() as tape:
            loss = opt.get_scaled_loss(f(x))
          grads = opt.get_unscaled_gradients(tape.gradient(loss, v))
          opt.apply_gradients(zip(grads, v))
          return float(opt.loss_scale)
        """, """\
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)
        def step(x):
          with tf.GradientTape() as tape:
            loss = opt.scale_loss(f(x))
          grads = tape.gradient(loss, v)
          opt.apply_gradients(zip(grads, v))
          return float(opt.dynamic_scale if opt.built else opt.initial_scale)
        """, [
            "a.py:2: INFO: Kept "
            "'tf.keras.mixed_precision.LossScaleOptimizer(sgd)' as written",
            "a.py:5: INFO: Changed 'opt.get_scaled_loss' to "
            "'opt.scale_loss'",
            "a.py:6: INFO: Changed "
            "'opt.get_unscaled_gradients(tape.gradient(loss, v))' to "
            "'tape.gradient(loss, v)'",
            "a.py:8: INFO: Changed 'opt.loss_scale' to "
            "'opt.dynamic_scale if opt.built else opt.initial_scale'"])

  def test_scaling_within_the_unscaling_dropped_is_renamed(self):
    # The unscaling's argument took its place as read, and the
    # `get_scaled_loss` in it stayed (the report said it was renamed).
    assert_upgrade("""\
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)
        def step():
          grads = opt.get_unscaled_gradients(g(opt.get_scaled_loss(l), v))
          opt.apply_gradients(zip(grads, v))
        """, """\
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)
        def step():
          grads = g(opt.scale_loss(l), v)
          opt.apply_gradients(zip(grads, v))
        """, [
            "a.py:2: INFO: Kept "
            "'tf.keras.mixed_precision.LossScaleOptimizer(sgd)' as written",
            "a.py:4: INFO: Changed 'opt.get_scaled_loss' to "
            "'opt.scale_loss'",
            "a.py:4: INFO: Changed "
            "'opt.get_unscaled_gradients(g(opt.get_scaled_loss(l), v))' to "
            "'g(opt.get_scaled_loss(l), v)'"])

  def test_unscaling_in_place_drops_the_line(self):
    result = assert_upgrade("""\
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)
        def step(loss):
          loss = opt.get_scaled_loss(loss)
          grads = g(loss)
          grads = opt.get_unscaled_gradients(grads)
          opt.apply_gradients(zip(grads, v))
        """, """\
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)
        def step(loss):
          loss = opt.scale_loss(loss)
          grads = g(loss)
          opt.apply_gradients(zip(grads, v))
        """)
    [edit] = [e for e in result.edits if e.line == 6]
    self.assertEqual(("opt.get_unscaled_gradients(grads)", "grads"),
                     (edit.old, edit.new))
    self.assertIn("would divide twice", edit.why)

  def test_tf_keras_keeps_its_protocol(self):
    assert_upgrade("""\
        import tensorflow as tf
        opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(sgd)
        def step(loss):
          scaled = opt.get_scaled_loss(loss)
          return opt.get_unscaled_gradients(g(scaled)), opt.loss_scale()
        """, """\
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)
        def step(loss):
          scaled = opt.get_scaled_loss(loss)
          return opt.get_unscaled_gradients(g(scaled)), opt.loss_scale
        """, [
            "a.py:2: INFO: Changed "
            "'tf.keras.mixed_precision.experimental.LossScaleOptimizer(sgd)' "
            "to 'tf.keras.mixed_precision.LossScaleOptimizer(sgd)'",
            "a.py:5: INFO: Changed 'opt.loss_scale()' to 'opt.loss_scale'"],
        keras=TF_KERAS)

  def test_tf_keras_serves_the_protocol_on_any_optimizer(self):
    # An optimizer this file does not trace may be scaled here: tf_keras's
    # class has TF 2.4's methods, so that keeps nothing on mplso.
    source = """\
        import tensorflow as tf
        opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)
        def step(other, loss):
          return other.get_scaled_loss(loss)
        """
    result = assert_upgrade(source, source, keras=TF_KERAS)
    [edit] = [e for e in result.edits if e.line == 2]
    self.assertEqual(edits_lib.KEPT, edit.kind)
    self.assertStartsWith(edit.why, "Keras's own class already: ")


class ClassCheckTest(parameterized.TestCase):
  """`isinstance`/`issubclass` against a legacy class match Keras's class.

  An optimizer moved to Keras's class is no instance of mplso's; mplso's
  are instances of Keras's, so a class check against Keras's class matches
  both, whichever way the file names the legacy class.
  """

  @parameterized.named_parameters(
      ("keras_3", KERAS_3), ("tf_keras", TF_KERAS))
  def test_from_import_in_a_class_check(self, keras):
    # A tester's file (Cerebras's GradAccumOptimizer has the same import):
    # the check stayed mplso's while the optimizer moved to Keras's class.
    assert_upgrade("""\
        from tensorflow.python.keras.mixed_precision.experimental.loss_scale_optimizer import LossScaleOptimizer


        def describe(opt):
          return 'mixed' if isinstance(opt, LossScaleOptimizer) else 'plain'
        """, """\
        import tensorflow as tf
        from mplso.keras import LossScaleOptimizer


        def describe(opt):
          return 'mixed' if isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer) else 'plain'
        """, [
            "a.py: INFO: Added 'import tensorflow as tf'",
            "a.py:1: INFO: Renamed 'from tensorflow.python.keras."
            "mixed_precision.experimental.loss_scale_optimizer import "
            "LossScaleOptimizer' to 'from mplso.keras import "
            "LossScaleOptimizer'",
            "a.py:5: INFO: Changed 'LossScaleOptimizer' to "
            "'tf.keras.mixed_precision.LossScaleOptimizer'"], keras=keras)

  def test_aliases_tuples_and_calls(self):
    # A call through the imported name stays mplso's (its import is);
    # only the class checks change, in any spelling of the class.
    result = assert_upgrade("""\
        import tensorflow as tf
        from tensorflow.keras.mixed_precision.experimental import LossScaleOptimizer as LSO
        from tensorflow.keras.mixed_precision import LossScaleOptimizer
        Wrapper = LSO
        def f(opt, cls):
          wrapped = LSO(opt, "dynamic")
          return (isinstance(wrapped, LSO), isinstance(opt, (tuple, Wrapper)),
                  issubclass(cls, LossScaleOptimizer), isinstance(LSO, type),
                  isinstance(opt, (tf.keras.mixed_precision.experimental.LossScaleOptimizer,)))
        """, """\
        import tensorflow as tf
        from mplso.keras import LossScaleOptimizer as LSO
        from mplso.keras import LossScaleOptimizer
        Wrapper = LSO
        def f(opt, cls):
          wrapped = LSO(opt, "dynamic")
          return (isinstance(wrapped, tf.keras.mixed_precision.LossScaleOptimizer), isinstance(opt, (tuple, tf.keras.mixed_precision.LossScaleOptimizer)),
                  issubclass(cls, tf.keras.mixed_precision.LossScaleOptimizer), isinstance(LSO, type),
                  isinstance(opt, (tf.keras.mixed_precision.LossScaleOptimizer,)))
        """)
    self.assertEqual(
        [(7, "LSO"), (7, "Wrapper"), (8, "LossScaleOptimizer"),
         (9, "tf.keras.mixed_precision.experimental.LossScaleOptimizer")],
        [(e.line, e.old) for e in result.edits if e.line > 3])
    self.assertIn("names mplso's class after the upgrade",
                  result.edits[2].why)

  def test_imported_one_way_or_another(self):
    # Both imports become mplso's; the name is bound twice, and a check of
    # it was left alone.
    assert_upgrade("""\
        try:
          from tensorflow.keras.mixed_precision.experimental import LossScaleOptimizer
        except ImportError:
          from tensorflow.keras.mixed_precision import LossScaleOptimizer


        def describe(opt):
          return isinstance(opt, LossScaleOptimizer)
        """, """\
        import tensorflow as tf
        try:
          from mplso.keras import LossScaleOptimizer
        except ImportError:
          from mplso.keras import LossScaleOptimizer


        def describe(opt):
          return isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer)
        """, [
            "a.py: INFO: Added 'import tensorflow as tf'",
            "a.py:2: INFO: Renamed 'from tensorflow.keras.mixed_precision."
            "experimental import LossScaleOptimizer' to 'from mplso.keras "
            "import LossScaleOptimizer'",
            "a.py:4: INFO: Renamed 'from tensorflow.keras.mixed_precision "
            "import LossScaleOptimizer' to 'from mplso.keras import "
            "LossScaleOptimizer'",
            "a.py:8: INFO: Changed 'LossScaleOptimizer' to "
            "'tf.keras.mixed_precision.LossScaleOptimizer'"])

  @parameterized.named_parameters(
      ("keras_3", KERAS_3), ("tf_keras", TF_KERAS))
  def test_imported_from_another_file_of_the_tree(self, keras):
    # The tester's tree: y.py's optimizer moves to Keras's class; x.py and
    # z.py check against their imports. A file importing the name from x.py
    # (w.py) is not followed: x.py's report says so.
    x = ("from tensorflow.python.keras.mixed_precision.experimental."
         "loss_scale_optimizer import LossScaleOptimizer\n\n\n"
         "def describe(opt):\n"
         "  return 'mixed' if isinstance(opt, LossScaleOptimizer) else "
         "'plain'\n")
    z = x.replace("python.keras.mixed_precision.experimental."
                  "loss_scale_optimizer", "keras.mixed_precision."
                  "experimental").replace("describe", "describe2")
    y = textwrap.dedent("""\
        import tensorflow as tf
        from x import describe
        from z import describe2

        opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1), 'dynamic')
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        model.compile(optimizer=opt, loss='mse')
        model.fit(tf.ones((8, 4)), tf.ones((8, 1)), epochs=1, verbose=0)
        print('DESCRIBE', describe(opt), describe2(opt))
        """)
    w = x.replace(x.splitlines()[0], "from x import LossScaleOptimizer")
    results = rewrite.upgrade_sources(
        {"x.py": x, "y.py": y, "z.py": z, "w.py": w}, to=NATIVE, keras=keras)
    checked = ("import tensorflow as tf\nfrom mplso.keras import "
               "LossScaleOptimizer\n\n\n{}:\n  return 'mixed' if "
               "isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer) "
               "else 'plain'\n")
    self.assertEqual(
        {"x.py": checked.format("def describe(opt)"),
         "y.py": y.replace("experimental.LossScaleOptimizer(", "Loss"
                           "ScaleOptimizer(").replace(", 'dynamic')", ")"),
         "z.py": checked.format("def describe2(opt)"), "w.py": w},
        {path: result.code for path, result in results.items()})
    warnings = {path: [e.why for e in result.edits
                       if e.kind == edits_lib.WARNED]
                for path, result in results.items()}
    self.assertEqual({"y.py": [], "w.py": []},
                     {p: w for p, w in warnings.items() if p in ("y.py",
                                                                  "w.py")})
    [x_warning] = warnings["x.py"]
    self.assertStartsWith(
        x_warning, "`LossScaleOptimizer` names mplso's class after the "
        "upgrade (its import is mplso's), and w.py and 1 more import this "
        "module: ")
    self.assertIn("check against `tf.keras.mixed_precision."
                  "LossScaleOptimizer` there", x_warning)
    [z_warning] = warnings["z.py"]
    self.assertIn("and y.py imports this module", z_warning)

  def test_one_file_alone_warns_of_nothing(self):
    result = upgrade("from tensorflow.keras.mixed_precision.experimental "
                     "import LossScaleOptimizer\n")
    self.assertEqual([edits_lib.RENAMED], [e.kind for e in result.edits])


# A tester's tree (s19): the policy and `compile` in one file, the model's
# `train_step`, which applies gradients it never scaled, in another.
_TRAIN_STEP = """\
import tensorflow as tf


class BaseModel(tf.keras.Model):

  def train_step(self, data):
    x, y = data
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(self(x, training=True) - y))
    grads = tape.gradient(loss, self.trainable_variables)
    self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
    return {'loss': loss}
"""
_COMPILES = """\
import tensorflow as tf
from base_model import BaseModel

tf.keras.mixed_precision.experimental.set_policy('mixed_float16')
model = BaseModel(inputs, outputs)
model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss='mse')
"""


class CompiledElsewhereTest(absltest.TestCase):
  """compile's optimizer, used by a model or callback in another file."""

  def _tree(self, texts):
    results = rewrite.upgrade_sources(texts, to=NATIVE, keras=KERAS_3)
    return {path: (result.code,
                   upgrade_cases.report_lines(result, path, True))
            for path, result in results.items()}

  def test_a_train_step_in_a_joined_file_keeps_compile_on_mplso(self):
    # Keras 3's class unscales in apply_gradients: the train_step's steps
    # would be divided by the scale (32,768) at every step.
    tree = self._tree({"pkg/main.py": _COMPILES,
                       "pkg/base_model.py": _TRAIN_STEP})
    self.assertEqual((_TRAIN_STEP, []), tree["pkg/base_model.py"])
    self.assertEqual(("""\
import mplso.compat
mplso.compat.install()
import tensorflow as tf
from base_model import BaseModel

mplso.compat.set_policy('mixed_float16')
model = BaseModel(inputs, outputs)
model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss='mse')
""", [
    "pkg/main.py: INFO: Added 'import mplso.compat'",
    "pkg/main.py:4: INFO: Changed "
    "'tf.keras.mixed_precision.experimental.set_policy' to "
    "'mplso.compat.set_policy'",
    "    stays on mplso: `compile` at line 6 would wrap its optimizer in "
    "Keras's own class, and pkg/base_model.py:11 calls `apply_gradients` "
    "with gradients that are not unscaled right before it on an optimizer "
    "the tool cannot trace (a model's `optimizer`, in a `train_step` or a "
    "callback): it may be this one",
    "pkg/main.py:6: INFO: Added 'mplso.compat.install()'",
    "    line 6: " + rewrite._COMPILE_WHY]), tree["pkg/main.py"])

  def test_a_file_named_as_a_keras_module_joins_nothing(self):
    # A tester's tree (s19): a notebook named mixed_precision.ipynb in one
    # project joined every file importing tensorflow.keras.mixed_precision,
    # so another project's train_step kept this file on mplso.
    tree = self._tree({
        "proj_b/train.py": _COMPILES.replace(
            "from base_model import BaseModel\n",
            "from tensorflow.keras.mixed_precision import experimental\n"),
        "proj_a/mixed_precision.py": "x = 1\n",
        "proj_c/base_model.py": _TRAIN_STEP.replace(
            "import tensorflow as tf\n",
            "import tensorflow as tf\nfrom tensorflow.keras import "
            "mixed_precision\n")})
    code, _ = tree["proj_b/train.py"]
    self.assertIn("tf.keras.mixed_precision.set_global_policy", code)
    self.assertNotIn("install()", code)

  def test_a_file_the_imports_do_not_join_changes_nothing(self):
    # Another project's train_step in the same tree reaches no model here.
    tree = self._tree({"pkg/main.py": _COMPILES.replace(
        "from base_model import BaseModel", "from layers import BaseModel"),
                       "other/base_model.py": _TRAIN_STEP})
    code, report = tree["pkg/main.py"]
    self.assertIn("tf.keras.mixed_precision.set_global_policy", code)
    self.assertNotIn("install()", code)
    self.assertIn("pkg/main.py:6: WARNING: Kept "
                  "'model.compile'", report)


class WidenedCheckTest(parameterized.TestCase):
  """A class check widened to Keras's class, guarding TF 2.4's methods."""

  GRADS = textwrap.dedent("""\
      import tensorflow as tf

      def minimize(tape, optimizer, loss, variables):
        if isinstance(optimizer,
                      tf.keras.mixed_precision.experimental.LossScaleOptimizer):
          with tape:
            loss = optimizer.get_scaled_loss(loss)
        optimizer.apply_gradients(zip(tape.gradient(loss, variables),
                                      variables))
      """)

  @parameterized.named_parameters(
      ("keras_3", KERAS_3, edits_lib.WARNED),
      # tf_keras's own class has the method.
      ("tf_keras", TF_KERAS, edits_lib.KEPT))
  def test_alone_keras_3s_class_would_reach_the_call(self, keras, kind):
    result = rewrite.upgrade_source(self.GRADS, to=NATIVE, keras=keras)
    self.assertIn("isinstance(optimizer,\n"
                  "                tf.keras.mixed_precision."
                  "LossScaleOptimizer)", result.code)
    [scaling] = [e for e in result.edits if e.line == 7]
    self.assertEqual((kind, "optimizer.get_scaled_loss"),
                     (scaling.kind, scaling.old))
    if kind == edits_lib.WARNED:
      self.assertIn("The class check at line 5 now names Keras's class",
                    scaling.why)

  def test_with_the_file_that_compiles_the_check_is_right(self):
    # Converted together, the optimizer `compile` wraps stays mplso's.
    results = rewrite.upgrade_sources({
        "p/grads.py": self.GRADS,
        "p/model.py": textwrap.dedent("""\
            import tensorflow as tf
            import grads
            tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
            model.compile(optimizer="sgd", loss="mse")
            grads.minimize(tape, model.optimizer, loss, model.variables)
            """)}, to=NATIVE, keras=KERAS_3)
    self.assertIn("mplso.compat.install()", results["p/model.py"].code)
    [scaling] = [e for e in results["p/grads.py"].edits if e.line == 7]
    self.assertEqual(edits_lib.KEPT, scaling.kind)


class PolicyTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("keras_3", KERAS_3, "WARNING: Kept 'model.compile'"),
      # tf_keras's class is the one TF's compile wrapped in: no person needed.
      ("tf_keras", TF_KERAS, "INFO: Kept 'model.compile' as written"))
  def test_compile_that_wraps_by_itself(self, keras, line):
    result = assert_upgrade("""\
        import tensorflow as tf
        tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
        model.compile(optimizer="sgd", loss="mse")
        """, """\
        import tensorflow as tf
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        model.compile(optimizer="sgd", loss="mse")
        """, [
            "a.py:2: INFO: Changed "
            "'tf.keras.mixed_precision.experimental.set_policy' to "
            "'tf.keras.mixed_precision.set_global_policy'",
            f"a.py:3: {line}"], keras=keras)
    why = result.edits[-1].why
    self.assertStartsWith(why, "`compile` wraps the optimizer of a "
                          "`mixed_float16` model in Keras's own")
    self.assertEndsWith(why, native_rules.KERAS_3_DIFFERENCES
                        if keras == KERAS_3 else native_plan.TF_KERAS_COMPILE)

  def test_a_line_kept_as_it_is_quotes_the_output(self):
    # The policy is changed, then warned of: the WARNING quotes what the
    # output holds, not the text it replaced.
    result = rewrite.upgrade_source(textwrap.dedent("""\
        import tensorflow as tf
        from tensorflow.keras.mixed_precision import experimental as mp
        mp.set_policy(mp.Policy('mixed_float16'))
        """), to=NATIVE, keras=KERAS_3)
    self.assertIn("tf.keras.mixed_precision.set_global_policy("
                  "tf.keras.mixed_precision.Policy('mixed_float16'))",
                  result.code)
    [warned] = [e for e in result.edits if e.kind == edits_lib.WARNED]
    self.assertEqual(
        (3, "tf.keras.mixed_precision.Policy('mixed_float16')"),
        (warned.line, warned.old))
    self.assertEqual(warned.old, warned.new)

  def test_policy(self):
    assert_upgrade("""\
        import tensorflow as tf
        p = tf.keras.mixed_precision.experimental.Policy("mixed_float16",
                                                         loss_scale="dynamic")
        tf.keras.mixed_precision.experimental.set_policy(p)
        """, """\
        import tensorflow as tf
        p = tf.keras.mixed_precision.Policy("mixed_float16")
        tf.keras.mixed_precision.set_global_policy(p)
        """)

  @parameterized.named_parameters(("keras_3", KERAS_3), ("tf_keras", TF_KERAS))
  def test_from_imported_policy_stays_mplso_and_a_second_run_agrees(
      self, keras):
    # A tester's file (neural-audio-fp): the import becomes mplso's, so
    # compile's wrapper stays mplso's too. Before, the first run left
    # compile to Keras's class and the second added install().
    after = """\
        import mplso.compat
        mplso.compat.install()
        import tensorflow as tf
        from mplso.compat import Policy
        from mplso.compat import set_policy

        set_policy(Policy('mixed_float16'))
        model.compile(optimizer='sgd', loss='mse')
        """
    result = assert_upgrade("""\
        import tensorflow as tf
        from tensorflow.keras.mixed_precision.experimental import Policy, set_policy

        set_policy(Policy('mixed_float16'))
        model.compile(optimizer='sgd', loss='mse')
        """, after, keras=keras)
    self.assertTrue(result.installs)
    self.assertFalse(upgrade(after, keras).changed)

  def test_policy_without_a_loss_scale_stays_with_what_tf23_did(self):
    result = assert_upgrade("""\
        import tensorflow as tf
        p = tf.keras.mixed_precision.experimental.Policy("mixed_float16",
                                                         loss_scale=None)
        tf.keras.mixed_precision.experimental.set_policy(p)
        model.compile(optimizer="sgd", loss="mse")
        """, """\
        import mplso.compat
        mplso.compat.install()
        import tensorflow as tf
        p = mplso.compat.Policy("mixed_float16",
                                                         loss_scale=None)
        mplso.compat.set_policy(p)
        model.compile(optimizer="sgd", loss="mse")
        """)
    self.assertTrue(result.installs)  # compile wraps in mplso's class.
    for line in (2, 4):
      [edit] = [e for e in result.edits if e.line == line]
      self.assertStartsWith(
          edit.why, "stays on mplso: the policy at line 2: TF 2.3's "
          "`loss_scale=None` turned loss scaling off")

  def test_policy_whose_loss_scale_is_read_stays(self):
    result = assert_upgrade("""\
        import tensorflow as tf
        p = tf.keras.mixed_precision.experimental.Policy("mixed_float16")
        print(p.loss_scale)
        """, """\
        import tensorflow as tf
        import mplso.compat
        p = mplso.compat.Policy("mixed_float16")
        print(p.loss_scale)
        """)
    [edit] = [e for e in result.edits if e.line == 2]
    self.assertIn("reads the policy's loss scale (line 3)", edit.why)


if __name__ == "__main__":
  absltest.main()
