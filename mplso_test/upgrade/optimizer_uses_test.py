"""Tests `optimizer_uses`: each optimizer moves when its own uses allow it.

`Uses` is driven through `rewrite.upgrade_source(..., to=NATIVE)`, whose
planner asks it for each LossScaleOptimizer call of a file; the cases
compare whole files. `Facts` comes from `rewrite.file_facts`.
"""

import textwrap

from absl.testing import absltest
from absl.testing import parameterized

from mplso._src.upgrade import edits as edits_lib
from mplso._src.upgrade import optimizer_uses
from mplso._src.upgrade import rewrite
from mplso_test.helpers import upgrade_cases

NATIVE, KERAS_3, TF_KERAS = (edits_lib.NATIVE, edits_lib.KERAS_3,
                             edits_lib.TF_KERAS)


def upgrade(source, keras=KERAS_3):
  return rewrite.upgrade_source(textwrap.dedent(source), to=NATIVE,
                                keras=keras)


def assert_upgrade(before, after, keras=KERAS_3):
  """`upgrade_cases.assert_upgrade` under `--to native`."""
  return upgrade_cases.assert_upgrade(before, after, to=NATIVE, keras=keras)


CALL = "opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)\n"
MPLSO_CALL = "opt = mplso.keras.LossScaleOptimizer(sgd)\n"
LOOP = """\
    def step(x):
      with tf.GradientTape() as tape:
        loss = opt.get_scaled_loss(f(x))
      grads = tape.gradient(loss, v)
      grads = opt.get_unscaled_gradients(grads)
      {between}
      opt.apply_gradients(zip(grads, v))
    """


class UsesTest(parameterized.TestCase):
  """Each optimizer moves when its own uses allow it, else stays, saying why.
  """

  def assert_stays(self, rest, reason, keras=KERAS_3, call=CALL,
                   mplso_call=MPLSO_CALL):
    rest = textwrap.dedent(rest)
    result = upgrade("import tensorflow as tf\n" + call + rest, keras)
    self.assertEqual("import tensorflow as tf\nimport mplso.keras\n" +
                     mplso_call + rest, result.code)
    [edit] = [e for e in result.edits if e.line == 2]
    self.assertStartsWith(edit.why, "stays on mplso: ")
    self.assertIn(reason, edit.why)

  @parameterized.named_parameters(
      ("clip_by_global_norm",
       "grads, _ = tf.clip_by_global_norm(grads, 1.0)", "line 7"),
      ("clip_by_norm", "grads = [tf.clip_by_norm(g, 1.0) for g in grads]",
       "line 7"),
      ("accumulation", "grads = [a + g for a, g in zip(acc, grads)]",
       "line 7"),
      ("logging", "tf.print(tf.linalg.global_norm(grads))", "line 7"),
      ("helper", "grads = clip(grads)", "line 7"),
  )
  def test_code_between_unscale_and_apply(self, between, where):
    del where
    self.assert_stays(LOOP.format(between=between),
                      "do not go straight into `apply_gradients`")

  def test_unscale_and_apply_in_different_functions(self):
    self.assert_stays("""\
        @tf.function
        def grads_of(x):
          with tf.GradientTape() as tape:
            loss = opt.get_scaled_loss(f(x))
          return opt.get_unscaled_gradients(tape.gradient(loss, v))
        def step(x):
          opt.apply_gradients(zip(grads_of(x), v))
        """, "do not go straight into `apply_gradients`")

  def test_apply_inside_a_strategy_run(self):
    self.assert_stays("""\
        def step(x):
          with tf.GradientTape() as tape:
            loss = opt.get_scaled_loss(f(x))
          grads = opt.get_unscaled_gradients(tape.gradient(loss, v))
          strategy.run(lambda g: opt.apply_gradients(zip(g, v)), (grads,))
        """, "do not go straight into `apply_gradients`")

  def test_apply_of_gradients_never_scaled(self):
    self.assert_stays("""\
        grads = tape.gradient(loss, v)
        opt.apply_gradients(zip(grads, v))
        """, "divides every gradient by the scale")

  @parameterized.named_parameters(
      ("if_else", """\
          def step(use_scaling):
            if use_scaling:
              grads = opt.get_unscaled_gradients(g(opt.get_scaled_loss(l)))
            else:
              grads = g(l)
            opt.apply_gradients(zip(grads, v))
          """),
      ("if_only", """\
          def step(use_scaling):
            grads = g(l)
            if use_scaling:
              grads = opt.get_unscaled_gradients(grads)
            opt.apply_gradients(zip(grads, v))
          """),
      ("bound_again_between", """\
          def step():
            grads = opt.get_unscaled_gradients(g(opt.get_scaled_loss(l)))
            if first:
              grads = g(l)
            opt.apply_gradients(zip(grads, v))
          """),
      ("loop_target_between", """\
          def step():
            grads = opt.get_unscaled_gradients(g(opt.get_scaled_loss(l)))
            for grads in others:
              pass
            opt.apply_gradients(zip(grads, v))
          """),
      ("unscaled_in_a_loop_applied_after", """\
          def step():
            grads = g(l)
            for _ in range(n):
              grads = opt.get_unscaled_gradients(g(opt.get_scaled_loss(l)))
            opt.apply_gradients(zip(grads, v))
          """),
      ("applied_before_unscaled_in_a_loop", """\
          def step():
            grads = g(l)
            while True:
              opt.apply_gradients(zip(grads, v))
              grads = opt.get_unscaled_gradients(g(opt.get_scaled_loss(l)))
          """, "takes gradients that are not unscaled right before it"),
      ("unscaled_in_a_try", """\
          def step():
            grads = g(l)
            try:
              grads = opt.get_unscaled_gradients(g(opt.get_scaled_loss(l)))
            except ValueError:
              pass
            opt.apply_gradients(zip(grads, v))
          """),
      ("bound_by_another_function", """\
          grads = opt.get_unscaled_gradients(g(opt.get_scaled_loss(l)))
          def reset():
            global grads
            grads = g(l)
          reset()
          opt.apply_gradients(zip(grads, v))
          """),
      ("check_of_another_object", """\
          def step(other):
            grads = g(l)
            if isinstance(other, tf.keras.mixed_precision.LossScaleOptimizer):
              grads = opt.get_unscaled_gradients(grads)
            opt.apply_gradients(zip(grads, v))
          """),
      ("check_in_an_elif", """\
          def step():
            grads = g(l)
            if first:
              pass
            elif isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer):
              grads = opt.get_unscaled_gradients(grads)
            opt.apply_gradients(zip(grads, v))
          """),
  )
  def test_gradients_unscaled_on_some_paths_only(
      self, rest, reason="on some paths only, or on paths the tool cannot "
      "follow"):
    # Keras 3's class divides every gradient it applies by the scale: the
    # gradients of a path that did not unscale them would be divided too.
    self.assert_stays(rest, reason)

  @parameterized.named_parameters(
      ("bound_before", """\
          def step():
            grads = g(opt.get_scaled_loss(l))
            if clip:
              grads = [c(x) for x in grads]
            grads = opt.get_unscaled_gradients(grads)
            opt.apply_gradients(zip(grads, v))
          """, """\
          def step():
            grads = g(opt.scale_loss(l))
            if clip:
              grads = [c(x) for x in grads]
            opt.apply_gradients(zip(grads, v))
          """),
      ("out_of_with_blocks", """\
          def step():
            with tf.GradientTape() as tape:
              grads = opt.get_unscaled_gradients(g(l))
            with strategy.scope():
              opt.apply_gradients(zip(grads, v))
          """, """\
          def step():
            with tf.GradientTape() as tape:
              grads = g(l)
            with strategy.scope():
              opt.apply_gradients(zip(grads, v))
          """),
      ("in_one_loop_body", """\
          def step():
            grads = None
            for _ in range(n):
              grads = opt.get_unscaled_gradients(g(l))
              opt.apply_gradients(zip(grads, v))
          """, """\
          def step():
            grads = None
            for _ in range(n):
              grads = g(l)
              opt.apply_gradients(zip(grads, v))
          """),
      # Keras's own guide: the check is always true for this optimizer.
      ("under_a_check_of_its_class", """\
          def step():
            grads = g(l)
            if isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer):
              grads = opt.get_unscaled_gradients(grads)
            opt.apply_gradients(list(zip(grads, v)))
          """, """\
          def step():
            grads = g(l)
            if isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer):
              pass
            opt.apply_gradients(list(zip(grads, v)))
          """),
  )
  def test_gradients_unscaled_on_every_path_move(self, before, after):
    assert_upgrade("import tensorflow as tf\n" + CALL +
                   textwrap.dedent(before),
                   "import tensorflow as tf\n" + CALL + textwrap.dedent(after))

  def test_scaling_on_one_branch_only(self):
    # A tester's program: wrapped always, unscaled on one branch. Keras 3's
    # class would divide the other branch's gradients by 32768; tf_keras's
    # unscales only where asked, like TF's, so it moves there.
    before = textwrap.dedent("""\
        import tensorflow as tf
        def train_step(model, x, y, use_scaling):
          opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
              tf.keras.optimizers.SGD(0.1), loss_scale='dynamic')
          with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
            if use_scaling:
              scaled_loss = opt.get_scaled_loss(loss)
          if use_scaling:
            grads = tape.gradient(scaled_loss, model.trainable_variables)
            grads = opt.get_unscaled_gradients(grads)
          else:
            grads = tape.gradient(loss, model.trainable_variables)
          opt.apply_gradients(zip(grads, model.trainable_variables))
          return loss
        """)
    result = upgrade_cases.assert_upgrade(
        before, before.replace(
            "import tensorflow as tf\n",
            "import tensorflow as tf\nimport mplso.keras\n").replace(
                "tf.keras.mixed_precision.experimental.LossScaleOptimizer",
                "mplso.keras.LossScaleOptimizer"), [
                    "a.py: INFO: Added 'import mplso.keras'",
                    "a.py:3: INFO: Changed 'tf.keras.mixed_precision."
                    "experimental.LossScaleOptimizer' to "
                    "'mplso.keras.LossScaleOptimizer'"], to=NATIVE)
    self.assertIn(
        "stays on mplso: `apply_gradients` at line 14 takes `grads`, which "
        "is the result of `get_unscaled_gradients` (line 11) on some paths "
        "only", result.edits[1].why)
    upgrade_cases.assert_upgrade(
        before, before.replace(
            "experimental.LossScaleOptimizer", "LossScaleOptimizer").replace(
                "SGD(0.1), loss_scale='dynamic')", "SGD(0.1))"), [
                    "a.py:3: INFO: Changed \"tf.keras.mixed_precision."
                    "experimental.LossScaleOptimizer(\\n    "
                    "tf.keras.optimizers.SGD(0.1), loss_scale='dynamic')\" "
                    "to 'tf.keras.mixed_precision.LossScaleOptimizer(\\n    "
                    "tf.keras.optimizers.SGD(0.1))'"], to=NATIVE,
        keras=TF_KERAS)

  @parameterized.named_parameters(
      ("dynamic_counter", "print(opt.dynamic_counter)", KERAS_3,
       "`opt.dynamic_counter` (line 3)"),
      ("dynamic", "print(opt.dynamic)", KERAS_3, "`opt.dynamic` (line 3)"),
      ("get_config", "print(opt.get_config())", KERAS_3,
       "`opt.get_config` (line 3)"),
      # tf_keras's config is TF 2.4's; mplso's is TF 2.3's.
      ("get_config_tf_keras", "print(opt.get_config())", TF_KERAS,
       "`opt.get_config` (line 3)"),
      ("private", "print(opt._optimizer)", TF_KERAS,
       "`opt._optimizer` (line 3)"),
      ("get_gradients", "g = opt.get_gradients(loss, params)", TF_KERAS,
       "calls `get_gradients` (line 3)"),
      ("apply_gradients_name", 'opt.apply_gradients(zip(g, v), "apply")',
       TF_KERAS, "second positional argument (line 3)"),
      ("unpaired_get_scaled_loss", "def scaled(loss):\n"
       "  return opt.get_scaled_loss(loss)\n", KERAS_3,
       "unscales the gradients otherwise"),
      ("restore", "tf.train.Checkpoint(optimizer=opt).restore(path)", KERAS_3,
       "reads a checkpoint back (this file:3)"),
      ("load_weights", "model.compile(optimizer=opt)\n"
       "model.load_weights(path)", KERAS_3,
       "reads a checkpoint back (this file:4)"),
  )
  def test_use_that_keras_class_does_not_serve(self, rest, keras, reason):
    self.assert_stays(rest + "\n", reason, keras)

  def test_uncalled_loss_scale_of_tf23_is_an_object(self):
    self.assert_stays(
        "scale = opt.loss_scale\n", "without calling it", TF_KERAS,
        call="opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer("
        "sgd, 'dynamic')\n",
        mplso_call="opt = mplso.keras.LossScaleOptimizer(sgd, 'dynamic')\n")

  def test_fixed_scale_stays_under_tf_keras(self):
    self.assert_stays(
        "", "applies a step whose gradients hold Inf or NaN", TF_KERAS,
        call="opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd, False, "
        "8)\n", mplso_call="opt = mplso.keras.LossScaleOptimizer(sgd, False, "
        "8)\n")

  @parameterized.named_parameters(("keras_3", KERAS_3),
                                  ("tf_keras", TF_KERAS))
  def test_inner_optimizer_overriding_apply_gradients(self, keras):
    self.assert_stays("""\
        class AdamWeightDecay(tf.keras.optimizers.Adam):
          def apply_gradients(self, grads_and_vars, name=None,
                              experimental_aggregate_gradients=True):
            return super().apply_gradients(grads_and_vars, name)
        """, "its inner optimizer, `AdamWeightDecay` (this file:3)", keras,
                      call="opt = tf.keras.mixed_precision.LossScaleOptimizer("
                      "AdamWeightDecay())\n",
                      mplso_call="opt = mplso.keras.LossScaleOptimizer("
                      "AdamWeightDecay())\n")

  def test_inner_optimizer_defined_in_another_file_of_the_tree(self):
    results = rewrite.upgrade_sources({
        "optimization.py": textwrap.dedent("""\
            class AdamWeightDecay(tf.keras.optimizers.Adam):
              def apply_gradients(self, grads_and_vars, name=None,
                                  experimental_aggregate_gradients=True):
                pass
            """),
        "train.py": "import tensorflow as tf\nfrom optimization import "
                    "AdamWeightDecay\nopt = tf.keras.mixed_precision."
                    "LossScaleOptimizer(AdamWeightDecay())\n",
    }, to=NATIVE, keras=TF_KERAS)
    self.assertIn("opt = mplso.keras.LossScaleOptimizer(AdamWeightDecay())",
                  results["train.py"].code)
    [edit] = [e for e in results["train.py"].edits if e.line == 3]
    self.assertIn("(optimization.py:1)", edit.why)

  def test_inner_optimizer_from_a_factory_of_a_joined_file(self):
    # A tester's tree (s19, the zjut project's shape): the factory returns
    # a class that overrides apply_gradients; Keras 3's class never calls
    # it, so the weight decay it adds was lost at every step.
    opts = textwrap.dedent("""\
        import tensorflow as tf


        class WeightDecaySGD(tf.keras.optimizers.SGD):
          def apply_gradients(self, grads_and_vars):
            return super().apply_gradients(grads_and_vars)


        def get_optimizer(name):
          return WeightDecaySGD(0.1)
        """)
    train = ("import tensorflow as tf\nfrom opts import get_optimizer\n"
             "opt = tf.keras.mixed_precision.LossScaleOptimizer(\n"
             "    get_optimizer('sgd'))\n")
    for keras in (KERAS_3, TF_KERAS):
      results = rewrite.upgrade_sources(
          {"pkg/opts.py": opts, "pkg/train.py": train}, to=NATIVE,
          keras=keras)
      self.assertEqual(train.replace(
          "from opts import get_optimizer\n",
          "from opts import get_optimizer\nimport mplso.keras\n").replace(
              "tf.keras.mixed_precision.LossScaleOptimizer",
              "mplso.keras.LossScaleOptimizer"), results["pkg/train.py"].code)
      self.assertEqual(opts, results["pkg/opts.py"].code)
      [edit] = [e for e in results["pkg/train.py"].edits if e.line == 3]
      self.assertIn("its inner optimizer, `get_optimizer('sgd')`, is built "
                    "where the tool cannot follow, and `WeightDecaySGD` "
                    "(pkg/opts.py:4) defines its own `apply_gradients`",
                    edit.why)
      # An unjoined project's class does not count: Keras's own class.
      alone = rewrite.upgrade_sources(
          {"other/opts.py": opts, "pkg/train.py": train.replace(
              "from opts", "from optimizers")}, to=NATIVE, keras=keras)
      self.assertIn("tf.keras.mixed_precision.LossScaleOptimizer(",
                    alone["pkg/train.py"].code)

  def test_checkpoint_read_back_by_a_base_class_in_a_joined_file(self):
    # A tester's tree (s19, the VerSe trainers' layout): the optimizer goes
    # into a checkpoint here, a base class in another file restores it. On
    # Keras 3's class the scale restarted at every resume.
    loop = textwrap.dedent("""\
        class MainLoopBase(object):

          def load_model(self):
            self.checkpoint.restore(self.load_model_filename)
        """)
    main = textwrap.dedent("""\
        import tensorflow as tf
        from train_loop import MainLoopBase


        class MainLoop(MainLoopBase):

          def init(self):
            self.optimizer = tf.keras.mixed_precision.LossScaleOptimizer(
                tf.keras.optimizers.SGD(0.1))
            self.checkpoint = tf.train.Checkpoint(optimizer=self.optimizer)
        """)
    results = rewrite.upgrade_sources(
        {"pkg/train_loop.py": loop, "pkg/main.py": main}, to=NATIVE,
        keras=KERAS_3)
    self.assertIn("self.optimizer = mplso.keras.LossScaleOptimizer(",
                  results["pkg/main.py"].code)
    [edit] = [e for e in results["pkg/main.py"].edits if e.line == 8]
    self.assertIn("the program reads a checkpoint back "
                  "(pkg/train_loop.py:4)", edit.why)
    # tf_keras's class reads the legacy class's state as it is.
    results = rewrite.upgrade_sources(
        {"pkg/train_loop.py": loop, "pkg/main.py": main}, to=NATIVE,
        keras=TF_KERAS)
    self.assertIn("tf.keras.mixed_precision.LossScaleOptimizer(",
                  results["pkg/main.py"].code)

  def test_class_held_in_a_name_is_decided_by_its_calls(self):
    # OpenNMT-tf's shape: the class in a name, called later, and
    # `get_gradients` called on what it builds.
    source = textwrap.dedent("""\
        import tensorflow as tf
        wrapper_class = tf.keras.mixed_precision.experimental.LossScaleOptimizer
        opt = wrapper_class(sgd, "dynamic")
        grads = opt.get_gradients(loss, params)
        """)
    for keras in (KERAS_3, TF_KERAS):
      result = upgrade(source, keras)
      self.assertEqual(source.replace(
          "import tensorflow as tf\n",
          "import tensorflow as tf\nimport mplso.keras\n").replace(
              "tf.keras.mixed_precision.experimental.LossScaleOptimizer",
              "mplso.keras.LossScaleOptimizer"), result.code)
      [edit] = result.edits[1:]
      self.assertIn("called through it, and a call stays: line 3: the "
                    "program calls `get_gradients`", edit.why)

  def test_class_held_in_a_name_moves_when_its_calls_do(self):
    assert_upgrade("""\
        import tensorflow as tf
        wrapper_class = tf.keras.mixed_precision.experimental.LossScaleOptimizer
        model.compile(optimizer=wrapper_class(sgd, "dynamic"), loss="mse")
        """, """\
        import tensorflow as tf
        wrapper_class = tf.keras.mixed_precision.LossScaleOptimizer
        model.compile(optimizer=wrapper_class(sgd), loss="mse")
        """, TF_KERAS)

  def test_decided_per_optimizer(self):
    # One optimizer's clipping keeps it on mplso; the other, whose
    # gradients go straight into `apply_gradients`, moves.
    assert_upgrade("""\
        import tensorflow as tf
        def train_a(x):
          opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)
          loss = opt.get_scaled_loss(f(x))
          grads = opt.get_unscaled_gradients(g(loss))
          grads, _ = tf.clip_by_global_norm(grads, 1.0)
          opt.apply_gradients(zip(grads, v))
        def train_b(x):
          opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)
          loss = opt.get_scaled_loss(f(x))
          grads = opt.get_unscaled_gradients(g(loss))
          opt.apply_gradients(zip(grads, v))
        """, """\
        import tensorflow as tf
        import mplso.keras
        def train_a(x):
          opt = mplso.keras.LossScaleOptimizer(sgd)
          loss = opt.get_scaled_loss(f(x))
          grads = opt.get_unscaled_gradients(g(loss))
          grads, _ = tf.clip_by_global_norm(grads, 1.0)
          opt.apply_gradients(zip(grads, v))
        def train_b(x):
          opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)
          loss = opt.scale_loss(f(x))
          grads = g(loss)
          opt.apply_gradients(zip(grads, v))
        """)

  def test_module_level_script_is_a_function(self):
    result = assert_upgrade("""\
        import tensorflow as tf
        opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(sgd,
                                                                       "dynamic")
        with tf.GradientTape() as tape:
          loss = opt.get_scaled_loss(f(x))
        grads = opt.get_unscaled_gradients(tape.gradient(loss, v))
        grads = [tf.clip_by_norm(g, 1.0) for g in grads]
        opt.apply_gradients(zip(grads, v))
        """, """\
        import tensorflow as tf
        import mplso.keras
        opt = mplso.keras.LossScaleOptimizer(sgd,
                                                                       "dynamic")
        with tf.GradientTape() as tape:
          loss = opt.get_scaled_loss(f(x))
        grads = opt.get_unscaled_gradients(tape.gradient(loss, v))
        grads = [tf.clip_by_norm(g, 1.0) for g in grads]
        opt.apply_gradients(zip(grads, v))
        """)
    [edit] = [e for e in result.edits if e.line == 2]
    self.assertIn("do not go straight into `apply_gradients`", edit.why)

  def test_optimizer_that_leaves_stays_for_an_untraced_use(self):
    # `opt` is handed to `step`, which scales with an optimizer the tool
    # cannot trace: it may be this one.
    self.assert_stays("""\
        def step(other, loss):
          return other.get_scaled_loss(loss)
        step(opt, 1.0)
        """, "it leaves the code the tool can follow (passed to `step` at "
                      "line 5), and this file:4 calls `get_scaled_loss`")


class TreeTest(absltest.TestCase):

  BUILD = ("import tensorflow as tf\n"
           "opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)\n")
  SCALES = "def step(opt, loss):\n  return opt.get_scaled_loss(loss)\n"

  def test_only_files_joined_by_imports_count(self):
    # `opt` leaves build.py (a module-level name); train.py scales an
    # optimizer it cannot trace. Joined through main.py's imports, that may
    # be `opt`; in a tree where nothing joins them, it cannot be.
    joined = rewrite.upgrade_sources(
        {"a/build.py": self.BUILD, "a/train.py": self.SCALES,
         "a/main.py": "import build\nimport train\n"
                      "train.step(build.opt, 1.0)\n"}, to=NATIVE)
    self.assertIn("opt = mplso.keras.LossScaleOptimizer(sgd)",
                  joined["a/build.py"].code)
    [edit] = [e for e in joined["a/build.py"].edits if e.line == 2]
    self.assertIn("a/train.py:2 calls `get_scaled_loss`", edit.why)
    apart = rewrite.upgrade_sources(
        {"a/build.py": self.BUILD, "b/train.py": self.SCALES}, to=NATIVE)
    self.assertEqual(self.BUILD, apart["a/build.py"].code)

  def test_restores_in_an_unrelated_project_do_not_count(self):
    restores = "ckpt.restore(path)\n"
    joined = rewrite.upgrade_sources(
        {"a/build.py": self.BUILD,
         "a/load.py": "import build\n" + restores}, to=NATIVE)
    self.assertIn("a/load.py:2", joined["a/build.py"].edits[1].why)
    apart = rewrite.upgrade_sources(
        {"a/build.py": self.BUILD, "b/load.py": restores}, to=NATIVE)
    self.assertEqual(self.BUILD, apart["a/build.py"].code)


  def _read_files(self, texts):
    """`upgrade_sources(texts, NATIVE)` and the files whose facts it read."""
    read = []
    real = rewrite.read_later

    def reading(source, keras, path, parsed=None):
      read.append(path)
      return real(source, keras, path, parsed)

    rewrite.read_later = reading
    try:
      return rewrite.upgrade_sources(texts, to=NATIVE), read
    finally:
      rewrite.read_later = real

  def test_facts_are_read_when_a_decision_asks_and_give_the_same(self):
    texts = {"a/build.py": self.BUILD, "a/one.py": "x = 1\n",
             "a/two.py": "ckpt.restore(p)\n" + self.SCALES,
             "a/three.py": "ckpt.restore(q)\n",
             "a/main.py": "import build, one, two, three\n"
                          "two.step(build.opt, 1.0)\n"}
    results, read = self._read_files(texts)
    # Only files that say a word of the facts are asked about, in the tree's
    # order, and the first that has what the decision asks ends the search.
    self.assertEqual(["a/two.py"], read)
    eager = optimizer_uses.Facts()
    for path, text in texts.items():
      eager.merge(rewrite.file_facts(text, KERAS_3, path))
    for path, text in texts.items():
      with self.subTest(path=path):
        self.assertEqual(
            rewrite.upgrade_source(text, to=NATIVE, facts=eager, path=path),
            results[path])

  def test_no_facts_are_read_where_no_optimizer_leaves_its_file(self):
    _, read = self._read_files(
        {"a/build.py": "import tensorflow as tf\ndef train(loss):\n"
                       "  opt = tf.keras.mixed_precision.LossScaleOptimizer("
                       "sgd)\n  opt.minimize(loss)\n",
         "a/two.py": "import build\n" + self.SCALES})
    self.assertEqual([], read)

  def test_a_file_that_cannot_be_read_keeps_the_optimizer(self):
    real = rewrite.file_facts

    def broken(source, keras, path, *args, **kwargs):
      if path == "a/two.py":
        raise KeyError("unreadable")
      return real(source, keras, path, *args, **kwargs)

    rewrite.file_facts = broken
    try:
      results = rewrite.upgrade_sources(
          {"a/build.py": self.BUILD,
           "a/two.py": "import build\nckpt.restore(p)\n"}, to=NATIVE)
    finally:
      rewrite.file_facts = real
    self.assertIn("opt = mplso.keras.LossScaleOptimizer(sgd)",
                  results["a/build.py"].code)
    [edit] = [e for e in results["a/build.py"].edits if e.line == 2]
    self.assertIn("checkpoint back (a/two.py:1, which may (the tool could "
                  "not read it: KeyError: 'unreadable'))", edit.why)


class ScalingElsewhereTest(parameterized.TestCase):

  @parameterized.parameters(edits_lib.MPLSO, NATIVE)
  def test_scaling_calls_on_an_optimizer_from_elsewhere_are_reported(self,
                                                                     to):
    # Not a legacy spelling, so nothing to rewrite; but not "no legacy
    # loss-scale names" either: the report says what the calls need.
    source = textwrap.dedent("""\
        def step(opt, x, v):
          loss = opt.get_scaled_loss(f(x))
          g = opt.get_unscaled_gradients(g_of(loss))
          opt.apply_gradients(zip(g, v))
        """)
    result = rewrite.upgrade_source(source, to=to)
    self.assertEqual(source, result.code)
    self.assertEqual([(2, "opt.get_scaled_loss"),
                      (3, "opt.get_unscaled_gradients")],
                     [(e.line, e.old) for e in result.edits])
    for edit in result.edits:
      self.assertEqual(edits_lib.KEPT, edit.kind)
      self.assertIn("on an optimizer built elsewhere: it works when that "
                    "optimizer is mplso's LossScaleOptimizer", edit.why)


  def test_a_class_calling_its_own_method_is_not_reported(self):
    # A wrapper class of the user's with methods of those names: its
    # `self.get_unscaled_gradients` is its own; what it wraps is reported.
    source = textwrap.dedent("""\
        class Wrapper:
          def __init__(self, opt):
            self.opt = opt
          def get_unscaled_gradients(self, grads):
            return self.opt.get_unscaled_gradients(grads)
          def step(self, grads, v):
            self.opt.apply_gradients(zip(self.get_unscaled_gradients(grads), v))
        def other(self, grads):
          return self.get_unscaled_gradients(grads)
        """)
    result = rewrite.upgrade_source(source)
    self.assertEqual(source, result.code)
    self.assertEqual([(5, "self.opt.get_unscaled_gradients"),
                      (9, "self.get_unscaled_gradients")],
                     [(e.line, e.old) for e in result.edits])

  def test_model_optimizer_given_from_elsewhere(self):
    # GravNN's shape: `compile` gets an optimizer built in another file;
    # `self.optimizer` is that one, not one this file wraps.
    source = textwrap.dedent("""\
        class Model(tf.keras.Model):
          def train_step(self, data):
            loss = self.optimizer.get_scaled_loss(self.loss_of(data))
        def build(config):
          model = Model()
          model.compile(optimizer=configure_optimizer(config))
        """)
    result = rewrite.upgrade_source(source)
    self.assertEqual(source, result.code)
    [edit] = result.edits
    self.assertEqual((3, "self.optimizer.get_scaled_loss"),
                     (edit.line, edit.old))


class FileFactsTest(parameterized.TestCase):

  SCALES = "def step(opt, loss):\n  return opt.get_scaled_loss(loss)\n"

  @parameterized.named_parameters(
      ("built_elsewhere_keras_3", SCALES, KERAS_3,
       [("f.py:2", "calls `get_scaled_loss`")]),
      ("tf_keras_has_the_methods", SCALES, TF_KERAS, []),
      ("built_here", "import tensorflow as tf\n"
       "opt = tf.keras.mixed_precision.LossScaleOptimizer(sgd)\n"
       "def step(loss):\n  return opt.get_scaled_loss(loss)\n",
       KERAS_3, []),
      ("apply_of_gradients_never_scaled", "def step(opt, g):\n"
       "  opt.apply_gradients(zip(g, v))\n", KERAS_3,
       [("f.py:2", "calls `apply_gradients` with gradients that are not "
         "unscaled right before it")]),
      ("keras_3_protocol", "def step(opt, g):\n  loss = opt.scale_loss(l)\n"
       "  opt.apply_gradients(zip(g, v))\n", KERAS_3, []),
  )
  def test_untraced_uses(self, source, keras, expected):
    self.assertEqual(expected,
                     rewrite.file_facts(source, keras, "f.py").untraced)
    if expected:
      self.assertTrue(optimizer_uses.may_show(source)[0])

  @parameterized.named_parameters(
      ("attribute", "x = opt.dynamic_counter\n", (True, False)),
      ("comment_between", "x = (opt.  # note\n     loss_scale)\n",
       (True, False)),
      ("continuation", "x = opt. \\\n  apply_gradients(g)\n", (True, False)),
      ("restore_call", "ckpt.restore(path)\n", (False, True)),
      ("bare_load_model", "m = load_model('x')\n", (False, True)),
      ("words_only", "# restored from a dynamic range\nrestored = 1\n"
       "def restore_all():\n  pass\n", (False, False)),
  )
  def test_may_show(self, source, expected):
    self.assertEqual(expected, optimizer_uses.may_show(source))
    facts = rewrite.file_facts(source, KERAS_3, "f.py")
    self.assertEqual(expected, (bool(facts.untraced) or expected[0],
                                bool(facts.restores)))

  def test_restores_and_overriding_classes(self):
    facts = rewrite.file_facts(textwrap.dedent("""\
        class Mine(tf.keras.optimizers.Adam):
          def apply_gradients(self, grads_and_vars):
            pass
        manager = tf.train.CheckpointManager(checkpoint, "d", 3)
        checkpoint.restore(manager.latest_checkpoint)
        """), KERAS_3, "f.py")
    self.assertEqual((["f.py:5"], {"Mine": "f.py:1"}),
                     (facts.restores, facts.overriding))


if __name__ == "__main__":
  absltest.main()
