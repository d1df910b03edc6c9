"""Generates the legacy Keras programs of the upgrade's differential table.

Each program trains a tiny Dense model for `STEPS` steps under the
`mixed_float16` policy with a legacy `LossScaleOptimizer`, chosen by one
value of each axis in `AXES` (the Keras it runs on, the constructor's
dialect, what sits between `get_unscaled_gradients` and `apply_gradients`,
a checkpoint restored first, the attribute it reads, where the code lives,
a strategy, an overflowing step). The product of the axes is far too big, so
`covering_design` picks combinations deterministically such that every pair
of axis values appears in some program; `plain_programs` adds one program
per Keras and dialect with the simplest values.

A program leaves `_result` in its module namespace (the model, the
optimizer, its losses, logged gradient norms and attribute reads), which the
batch worker (`workers/upgrade_programs_worker.py`) turns into JSON; the
program itself prints nothing. Programs that restore a checkpoint read it
from `checkpoints/KERAS/DIALECT` under the folder given to `program_text`,
written first by that dialect's writer (`writer_text`) under
`python -m mplso.compat`.

To look at the programs or rerun one by hand:

  python -m mplso_test.helpers.upgrade_programs --write DIR

writes every program and writer under DIR/KERAS/ and DIR/KERAS/writers/,
with a README.txt saying how to run them.
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
import contextlib
import dataclasses
import itertools
import os
import sys

KERAS_3, TF_KERAS = "keras_3", "tf_keras"
# TF_USE_LEGACY_KERAS for each Keras.
LEGACY_KERAS = {KERAS_3: "0", TF_KERAS: "1"}

# The axes, in order, and their values.
AXES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("keras", (KERAS_3, TF_KERAS)),
    ("dialect", ("tf23_dynamic", "tf23_object", "tf23_fixed", "tf24_default",
                 "tf24_fixed", "tf24_growth")),
    # What sits between `get_unscaled_gradients` and `apply_gradients`, or
    # the two loops without that pair (`compile_fit`, `apply_only`).
    ("between", ("nothing", "clip_global_norm", "clip_by_norm",
                 "accumulate", "log_norm", "helper", "unscale_in_function",
                 "strategy_run", "compile_fit", "apply_only")),
    ("checkpoint", ("none", "tf_checkpoint", "save_weights")),
    ("read", ("loss_scale", "dynamic", "initial_scale",
              "dynamic_growth_steps", "dynamic_counter", "inner_optimizer",
              "get_config")),
    # Where the training code is: at module level (the step inline in the
    # loop, or a module-level function where a strategy runs it), in
    # `main()` (eager; `compile_fit` with `run_eagerly=True`), or in `main()`
    # with the step in a `tf.function` (`compile_fit`: fit's own).
    ("placement", ("module", "function", "tf_function")),
    ("strategy", ("none", "mirrored")),
    ("overflow", ("no", "yes")),
)
AXIS_NAMES = tuple(name for name, _ in AXES)

STEPS = 5
OVERFLOW_STEP = 2
BATCH = 8
# The writers' steps: two overflows (two halvings), then good steps.
WRITER_FACTORS = (1e30, 1e30, 1., 1., 1.)

_TF23_POLICY = ("tf.keras.mixed_precision.experimental.set_policy("
                '"mixed_float16")')
_TF24_POLICY = 'tf.keras.mixed_precision.set_global_policy("mixed_float16")'
_TF23_CLASS = "tf.keras.mixed_precision.experimental.LossScaleOptimizer"
_TF24_CLASS = "tf.keras.mixed_precision.LossScaleOptimizer"


@dataclasses.dataclass(frozen=True)
class Dialect:
  """A legacy way to build the optimizer."""
  policy: str
  call: str  # The constructor call, `{inner}` for the inner optimizer.
  initial_scale: float
  dynamic: bool

  @property
  def tf23(self) -> bool:
    return self.policy == _TF23_POLICY


DIALECTS = {
    "tf23_dynamic": Dialect(_TF23_POLICY, f'{_TF23_CLASS}(\n    {{inner}}, '
                            '"dynamic")', 2.**15, True),
    "tf23_object": Dialect(
        _TF23_POLICY, f"{_TF23_CLASS}(\n    {{inner}},\n    loss_scale="
        "tf.mixed_precision.experimental.DynamicLossScale(\n"
        "        initial_loss_scale=256, increment_period=2))", 256., True),
    "tf23_fixed": Dialect(_TF23_POLICY, f"{_TF23_CLASS}(\n    {{inner}}, 128)",
                          128., False),
    "tf24_default": Dialect(_TF24_POLICY, f"{_TF24_CLASS}(\n    {{inner}})",
                            2.**15, True),
    "tf24_fixed": Dialect(
        _TF24_POLICY, f"{_TF24_CLASS}(\n    {{inner}}, dynamic=False, "
        "initial_scale=128)", 128., False),
    "tf24_growth": Dialect(
        _TF24_POLICY, f"{_TF24_CLASS}(\n    {{inner}}, initial_scale=512, "
        "dynamic_growth_steps=2)", 512., True),
}
_INNER = "tf.keras.optimizers.SGD(0.05, momentum=0.9)"
_LOSS = "tf.reduce_mean(tf.square(model(x, training=True) - y))"


def _pairs(combination: Sequence[str]) -> Iterator[tuple]:
  for i, j in itertools.combinations(range(len(combination)), 2):
    yield (i, combination[i], j, combination[j])


def covering_design(axes=AXES) -> list[dict[str, str]]:
  """Combinations of axis values in which every pair of values appears.

  A deterministic greedy design: each new combination starts from the first
  pair not yet covered and gives every other axis, in turn, the value that
  covers the most uncovered pairs with the values already chosen (on a tie,
  the value fewest combinations have so far, then the first). Every
  combination makes a program: where a value needs a strategy
  (`strategy_run`) it uses the default one without `mirrored`, and where it
  needs a function (`mirrored` at module level) the step is defined at
  module level.

  Args:
    axes: (name, values) of each axis.

  Returns:
    The combinations, as {axis name: value}.
  """
  names = [name for name, _ in axes]
  uncovered = set()
  for (i, (_, values_a)), (j, (_, values_b)) in itertools.combinations(
      enumerate(axes), 2):
    uncovered.update((i, x, j, y)
                     for x, y in itertools.product(values_a, values_b))
  order = {pair: n for n, pair in enumerate(sorted(
      uncovered, key=lambda p: (p[0], axes[p[0]][1].index(p[1]), p[2],
                                axes[p[2]][1].index(p[3]))))}
  design = []
  used = collections.Counter()  # (axis, value) -> programs that have it.
  while uncovered:
    i, x, j, y = min(uncovered, key=order.__getitem__)
    chosen = {i: x, j: y}
    for k, (_, values) in enumerate(axes):
      if k in chosen:
        continue
      best, best_key = None, None
      for value in values:
        trial = {**chosen, k: value}
        gain = sum(((min(k, n), trial[min(k, n)], max(k, n),
                     trial[max(k, n)]) in uncovered) for n in chosen)
        key = (-gain, used[k, value])
        if best_key is None or key < best_key:
          best, best_key = value, key
      chosen[k] = best
    combination = [chosen[k] for k in range(len(axes))]
    uncovered -= set(_pairs(combination))
    used.update(enumerate(combination))
    design.append(dict(zip(names, combination)))
  return design


@dataclasses.dataclass(frozen=True)
class Program:
  """One generated program: its name and its axis values."""
  name: str
  axes: Mapping[str, str]

  @property
  def keras(self) -> str:
    return self.axes["keras"]

  @property
  def dialect(self) -> Dialect:
    return DIALECTS[self.axes["dialect"]]

  @property
  def restores(self) -> bool:
    return self.axes["checkpoint"] != "none"

  @property
  def overflows(self) -> bool:
    return self.axes["overflow"] == "yes"

  def describe(self) -> str:
    return " ".join(f"{name}={self.axes[name]}" for name in AXIS_NAMES)

  def text(self, checkpoints: str) -> str:
    return program_text(self.axes, checkpoints, self.name)


def plain_programs() -> list[dict[str, str]]:
  """One program per Keras and dialect with nothing else in the way.

  The pairs rarely line up in one program every value that lets the
  optimizer move to Keras 3's class (a dynamic scale, no code between
  unscaling and applying, no checkpoint, a read Keras's class serves), so
  these add, for each Keras and dialect, a program that has only the
  simplest values: no code in between (or `compile_fit`, every other one),
  no checkpoint, the loss scale read, an overflowing step; the placement and
  the strategy take turns.
  """
  placements = dict(AXES)["placement"]
  combinations = []
  for n, (keras, dialect) in enumerate(itertools.product(
      dict(AXES)["keras"], DIALECTS)):
    combinations.append(dict(
        keras=keras, dialect=dialect,
        between=("nothing", "compile_fit")[n % 2], checkpoint="none",
        read="loss_scale", placement=placements[n % len(placements)],
        strategy=("none", "mirrored")[n // 2 % 2], overflow="yes"))
  return combinations


def programs() -> list[Program]:
  """The table's programs: the covering design's, then the plain ones.

  Named `pNN_KERAS_DIALECT_BETWEEN` (the pairs) and `bNN_...` (the plain
  programs, `plain_programs`).
  """
  return [
      Program(f"{prefix}{n:02d}_{c['keras']}_{c['dialect']}_{c['between']}",
              c)
      for prefix, design in (("p", covering_design()),
                             ("b", plain_programs()))
      for n, c in enumerate(design)]


def checkpoint_folder(checkpoints: str, keras: str, dialect: str) -> str:
  """Where the writer of `dialect` on `keras` saves, under `checkpoints`."""
  return os.path.join(checkpoints, keras, dialect)


def writer_name(dialect: str) -> str:
  return f"write_{dialect}"


def writers_needed(table: Sequence[Program]) -> list[tuple[str, str]]:
  """(keras, dialect) of each checkpoint some program restores, sorted."""
  return sorted({(p.keras, p.axes["dialect"]) for p in table if p.restores},
                key=lambda kd: (kd[0], list(DIALECTS).index(kd[1])))


class _Lines:
  """Source lines with an indentation that blocks open and close."""

  def __init__(self):
    self.lines: list[str] = []
    self.depth = 0

  def add(self, *texts: str) -> None:
    for text in texts:
      for line in text.split("\n"):
        self.lines.append("  " * self.depth + line if line else "")

  @contextlib.contextmanager
  def block(self, header: str):
    self.add(header)
    self.depth += 1
    yield
    self.depth -= 1

  def text(self) -> str:
    return "\n".join(self.lines) + "\n"


def _preamble(c: _Lines, docstring: str, dialect: Dialect, folder: str,
              keras: str, overflow: bool) -> None:
  """Imports, the data, `build_model` and `batch`, at module level."""
  weights = "model.weights.h5" if keras == KERAS_3 else "weights"
  c.add(f'"""{docstring}"""', "", "import os", "", "import numpy as np",
        "import tensorflow as tf", "",
        f"CHECKPOINTS = {folder!r}",
        f'WEIGHTS = os.path.join(CHECKPOINTS, "{weights}")',
        f"STEPS = {STEPS}",
        f"OVERFLOW_STEP = {OVERFLOW_STEP if overflow else -1}", "",
        "# float16 on CPU: the remapper's fused kernels are very slow.",
        'tf.config.optimizer.set_experimental_options({"remapping": False})',
        dialect.policy, "",
        "rng = np.random.RandomState(7)",
        f"X = rng.uniform(-0.5, 0.5, (STEPS, {BATCH}, 4)).astype(np.float32)",
        f"Y = rng.uniform(-0.5, 0.5, (STEPS, {BATCH}, 1)).astype(np.float32)",
        "INITIAL = [rng.uniform(-0.5, 0.5, shape).astype(np.float32)",
        "           for shape in ((4, 3), (3,), (3, 1), (1,))]", "", "",
        "def build_model():",
        "  model = tf.keras.Sequential([",
        "      tf.keras.Input((4,)), tf.keras.layers.Dense(3),",
        '      tf.keras.layers.Dense(1, dtype="float32")])',
        "  model.set_weights(INITIAL)",
        "  return model", "", "",
        "def batch(i):",
        '  """Batch i; the overflow step\'s inputs are inf in float16."""',
        "  factor = 1e30 if i == OVERFLOW_STEP else 1.",
        "  return tf.constant(X[i] * factor), tf.constant(Y[i])", "")


def _build(c: _Lines, axes: Mapping[str, str]) -> None:
  """The model and the optimizer, under the strategy's scope if any."""
  dialect = DIALECTS[axes["dialect"]]
  call = dialect.call.format(inner=_INNER)
  compile_line = None
  if axes["between"] == "compile_fit":
    eager = ", run_eagerly=True" if axes["placement"] == "function" else ""
    compile_line = f'model.compile(optimizer=opt, loss="mse"{eager})'
  if axes["strategy"] == "mirrored":
    c.add("strategy = tf.distribute.MirroredStrategy()")
    with c.block("with strategy.scope():"):
      c.add("model = build_model()", f"opt = {call}")
      if compile_line:
        c.add(compile_line)
  else:
    c.add("model = build_model()", f"opt = {call}")
    if compile_line:
      c.add(compile_line)
  if axes["checkpoint"] == "tf_checkpoint":
    c.add("checkpoint = tf.train.Checkpoint(optimizer=opt, model=model)",
          "checkpoint.restore(tf.train.latest_checkpoint(CHECKPOINTS))")
  elif axes["checkpoint"] == "save_weights":
    c.add("model.load_weights(WEIGHTS)")
  c.add("losses, grad_norms, reads = [], [], {}")


def _scaled_gradients(c: _Lines) -> None:
  """`loss` and the unscaled `grads` of batch (x, y)."""
  c.add("with tf.GradientTape() as tape:",
        f"  loss = {_LOSS}",
        "  scaled_loss = opt.get_scaled_loss(loss)",
        "grads = tape.gradient(scaled_loss, model.trainable_variables)",
        "grads = opt.get_unscaled_gradients(grads)")


def _accumulated_gradients(c: _Lines) -> None:
  """`loss` and `grads` as the mean over two micro-batches."""
  c.add("accumulated, micro_losses = None, []",
        "for micro in range(2):",
        "  part_x, part_y = x[4 * micro:4 * micro + 4], "
        "y[4 * micro:4 * micro + 4]",
        "  with tf.GradientTape() as tape:",
        "    micro_loss = tf.reduce_mean(",
        "        tf.square(model(part_x, training=True) - part_y))",
        "    scaled_loss = opt.get_scaled_loss(micro_loss)",
        "  micro_grads = tape.gradient(scaled_loss, model.trainable_variables)",
        "  micro_grads = opt.get_unscaled_gradients(micro_grads)",
        "  micro_losses.append(micro_loss)",
        "  accumulated = (micro_grads if accumulated is None else",
        "                 [a + g for a, g in zip(accumulated, micro_grads)])",
        "grads = [a / 2. for a in accumulated]",
        "loss = (micro_losses[0] + micro_losses[1]) / 2.")


_APPLY = "opt.apply_gradients(zip(grads, model.trainable_variables))"


def _step_body(c: _Lines, between: str, eager_log: bool) -> bool:
  """A whole step on (x, y) ending in `apply_gradients`.

  Args:
    c: the lines.
    between: the axis value (not one of the split ones).
    eager_log: `log_norm` appends to `grad_norms` itself (else `norm` is
      left for the caller to return).

  Returns:
    Whether the step leaves a `norm` to return.
  """
  if between == "apply_only":
    c.add("with tf.GradientTape() as tape:", f"  loss = {_LOSS}",
          "grads = tape.gradient(loss, model.trainable_variables)")
  elif between == "accumulate":
    _accumulated_gradients(c)
  else:
    _scaled_gradients(c)
  returns_norm = False
  if between == "clip_global_norm":
    c.add("grads, _ = tf.clip_by_global_norm(grads, 0.05)")
  elif between == "clip_by_norm":
    c.add("grads = [tf.clip_by_norm(g, 0.02) for g in grads]")
  elif between == "log_norm":
    if eager_log:
      c.add("grad_norms.append(float(tf.linalg.global_norm(grads)))")
    else:
      c.add("norm = tf.linalg.global_norm(grads)")
      returns_norm = True
  elif between == "helper":
    c.add("grads = add_weight_decay(grads, model.trainable_variables)")
  c.add(_APPLY)
  return returns_norm


def _record(c: _Lines, call: str, returns_norm: bool) -> None:
  """Runs `call` (a step) and records its loss (and norm)."""
  if returns_norm:
    c.add(f"loss, norm = {call}", "grad_norms.append(float(norm))")
  else:
    c.add(f"loss = {call}")
  c.add("losses.append(float(loss))")


def _loop(c: _Lines, axes: Mapping[str, str]) -> None:
  """The training loop (or `fit`) of the program."""
  between, placement = axes["between"], axes["placement"]
  mirrored = axes["strategy"] == "mirrored"
  if between == "compile_fit":
    c.add("x_all = np.concatenate([batch(i)[0].numpy() for i in range(STEPS)])",
          "history = model.fit(x_all, Y.reshape(-1, 1), batch_size="
          f"{BATCH}, epochs=1,",
          "                    shuffle=False, verbose=0)",
          'losses = [float(v) for v in history.history["loss"]]')
    return
  if between in ("unscale_in_function", "strategy_run"):
    _split_loop(c, axes)
    return
  if placement == "module" and not mirrored:
    with c.block("for i in range(STEPS):"):
      c.add("x, y = batch(i)")
      _step_body(c, between, eager_log=True)
      c.add("losses.append(float(loss))")
    return
  function = placement == "tf_function"
  eager_log = not function and not mirrored
  step = "step_fn" if mirrored else "train_step"
  if function and not mirrored:
    c.add("@tf.function")
  with c.block(f"def {step}(x, y):"):
    returns_norm = _step_body(c, between, eager_log)
    c.add("return loss, norm" if returns_norm else "return loss")
  call = "train_step(x, y)"
  if mirrored:
    if function:
      c.add("", "@tf.function")
      with c.block("def train_step(x, y):"):
        c.add("return strategy.run(step_fn, args=(x, y))")
    else:
      call = "strategy.run(step_fn, args=(x, y))"
  c.add("")
  with c.block("for i in range(STEPS):"):
    c.add("x, y = batch(i)")
    _record(c, call, returns_norm)


def _split_loop(c: _Lines, axes: Mapping[str, str]) -> None:
  """Unscaling and applying in two calls: a tf.function, or two `run`s."""
  between, placement = axes["between"], axes["placement"]
  mirrored = axes["strategy"] == "mirrored"
  function = placement == "tf_function"
  if between == "strategy_run":
    run = "strategy.run" if mirrored else "tf.distribute.get_strategy().run"
  else:
    run = "strategy.run" if mirrored else None
  if between == "unscale_in_function":
    c.add("@tf.function")
  with c.block("def compute_gradients(x, y):"):
    _scaled_gradients(c)
    c.add("return loss, grads")
  c.add("")
  compute = (f"{run}(compute_gradients, args=(x, y))" if run else
             "compute_gradients(x, y)")
  if placement == "module" and not run:
    with c.block("for i in range(STEPS):"):
      c.add("x, y = batch(i)", f"loss, grads = {compute}", _APPLY,
            "losses.append(float(loss))")
    return
  if function and between == "unscale_in_function":
    c.add("@tf.function")
  with c.block("def apply_gradients(grads):"):
    c.add(_APPLY)
  c.add("")
  apply = (f"{run}(apply_gradients, args=(grads,))" if run else
           "apply_gradients(grads)")
  if between == "strategy_run" and placement != "module":
    if function:
      c.add("@tf.function")
    with c.block("def train_step(x, y):"):
      c.add(f"loss, grads = {compute}", apply, "return loss")
    c.add("")
    with c.block("for i in range(STEPS):"):
      c.add("x, y = batch(i)")
      _record(c, "train_step(x, y)", False)
    return
  with c.block("for i in range(STEPS):"):
    c.add("x, y = batch(i)", f"loss, grads = {compute}", apply,
          "losses.append(float(loss))")


def _reads(c: _Lines, axes: Mapping[str, str]) -> None:
  """The program reads one attribute of the optimizer after training."""
  attribute = axes["read"]
  tf23 = DIALECTS[axes["dialect"]].tf23
  expression = {
      "loss_scale": "opt.loss_scale()" if tf23 else "opt.loss_scale",
      "get_config": "opt.get_config()",
  }.get(attribute, f"opt.{attribute}")
  if axes["placement"] == "tf_function" and attribute in ("loss_scale",
                                                           "dynamic_counter"):
    c.add("", "@tf.function")
    with c.block(f"def read_{attribute}():"):
      c.add(f"return {expression}")
    c.add(f'reads["{attribute}"] = read_{attribute}()')
  else:
    c.add(f'reads["{attribute}"] = {expression}')


_RESULT = ('{"model": model, "optimizer": opt, "losses": losses,\n'
           ' "grad_norms": grad_norms, "reads": reads}')


def program_text(axes: Mapping[str, str], checkpoints: str,
                 name: str = "program") -> str:
  """The source of the program with these axis values.

  Args:
    axes: a value for every axis in `AXES`.
    checkpoints: the folder `checkpoint_folder` is under.
    name: the program's name, for its docstring.
  """
  missing = [a for a in AXIS_NAMES if axes.get(a) not in dict(AXES)[a]]
  if missing:
    raise ValueError(f"every axis needs one of its values; bad or missing: "
                     f"{ {a: axes.get(a) for a in missing} }. Axes: "
                     f"{dict(AXES)}")
  dialect = DIALECTS[axes["dialect"]]
  folder = checkpoint_folder(checkpoints, axes["keras"], axes["dialect"])
  c = _Lines()
  described = "\n".join(f"  {a}: {axes[a]}" for a in AXIS_NAMES)
  _preamble(c, f"Generated by mplso_test/helpers/upgrade_programs.py: "
            f"{name}.\n\n{described}\n", dialect, folder, axes["keras"],
            axes["overflow"] == "yes")
  if axes["between"] == "helper":
    c.add("", "def add_weight_decay(grads, variables):",
          "  return [g + 0.01 * v for g, v in zip(grads, variables)]", "")
  c.add("")
  if axes["placement"] == "module":
    _build(c, axes)
    c.add("")
    _loop(c, axes)
    _reads(c, axes)
    c.add("", "_result = " + _RESULT.replace("\n", "\n" + " " * 10))
  else:
    with c.block("def main():"):
      _build(c, axes)
      c.add("")
      _loop(c, axes)
      _reads(c, axes)
      c.add("return " + _RESULT.replace("\n", "\n" + " " * 7))
    c.add("", "")
    with c.block('if __name__ == "__main__":'):
      c.add("_result = main()")
  return c.text()


def writer_text(keras: str, dialect_name: str, checkpoints: str) -> str:
  """A legacy program that writes the checkpoint programs of a dialect read.

  It trains `len(WRITER_FACTORS)` eager steps (two overflows, then good
  steps, so that a dynamic scale is no longer its initial value and counts
  good steps), then saves `tf.train.Checkpoint(optimizer=opt, model=model)`
  and `model.save_weights` into `checkpoint_folder`.

  Args:
    keras: `KERAS_3` or `TF_KERAS`.
    dialect_name: a key of `DIALECTS`.
    checkpoints: the folder `checkpoint_folder` is under.
  """
  dialect = DIALECTS[dialect_name]
  folder = checkpoint_folder(checkpoints, keras, dialect_name)
  c = _Lines()
  _preamble(c, f"Writes the checkpoint of {dialect_name} programs on "
            f"{keras} (upgrade_programs.py).", dialect, folder, keras, False)
  c.add("", "model = build_model()",
        f"opt = {dialect.call.format(inner=_INNER)}",
        "losses, grad_norms, reads = [], [], {}")
  with c.block(f"for i, factor in enumerate({WRITER_FACTORS!r}):"):
    c.add("x, y = tf.constant(X[i] * factor), tf.constant(Y[i])")
    _scaled_gradients(c)
    c.add(_APPLY, "losses.append(float(loss))")
  c.add("checkpoint = tf.train.Checkpoint(optimizer=opt, model=model)",
        'checkpoint.save(os.path.join(CHECKPOINTS, "ckpt"))',
        "model.save_weights(WEIGHTS)",
        "_result = " + _RESULT.replace("\n", "\n" + " " * 10))
  return c.text()


_README = """\
Programs of the upgrade's differential table (mplso_test/helpers/
upgrade_programs.py; the test: mplso_test/integration/
upgrade_differential_test.py). keras_3/ holds the programs that run on Keras
3 (TF_USE_LEGACY_KERAS=0), tf_keras/ those that run on tf_keras
(TF_USE_LEGACY_KERAS=1); each has writers/, the legacy programs that write
the checkpoints some programs restore (run them first, under the runner). A
program prints nothing: it leaves `_result` in its namespace, which the
batch worker prints as JSON. From the repository's root:

  export TF_USE_LEGACY_KERAS=0   # keras_3; 1 for tf_keras
  W=mplso_test.helpers.workers.upgrade_programs_worker
  python -m mplso.compat -m $W --repeat 6 {folder}/keras_3/writers/*.py \\
      {folder}/keras_3/PROGRAM.py        # the reference, after the writers
  python -m mplso.upgrade --infile {folder}/keras_3/PROGRAM.py \\
      --outfile /tmp/m.py && python -m $W /tmp/m.py
  python -m mplso.upgrade --to native --infile {folder}/keras_3/PROGRAM.py \\
      --outfile /tmp/n.py && python -m $W /tmp/n.py

(--repeat N: the worker runs file N again at the end; 6 is the first file
after six writers.) Checkpoints go to {checkpoints}.
"""


def write(folder: str) -> list[str]:
  """Writes every program and writer under `folder`; returns their paths."""
  checkpoints = os.path.join(os.path.abspath(folder), "checkpoints")
  written = []
  table = programs()
  for keras in LEGACY_KERAS:
    os.makedirs(os.path.join(folder, keras, "writers"), exist_ok=True)
  for program in table:
    path = os.path.join(folder, program.keras, program.name + ".py")
    _write_file(path, program.text(checkpoints))
    written.append(path)
  for keras, dialect in writers_needed(table):
    path = os.path.join(folder, keras, "writers", writer_name(dialect) + ".py")
    _write_file(path, writer_text(keras, dialect, checkpoints))
    written.append(path)
  _write_file(os.path.join(folder, "README.txt"), _README.format(
      folder=os.path.abspath(folder), checkpoints=checkpoints))
  return written


def _write_file(path: str, text: str) -> None:
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def pair_counts(table: Sequence[Program]) -> collections.Counter:
  """How many programs hold each pair of axis values."""
  counts = collections.Counter()
  for program in table:
    values = [program.axes[a] for a in AXIS_NAMES]
    counts.update(_pairs(values))
  return counts


def main(argv: Sequence[str] | None = None) -> int:
  p = argparse.ArgumentParser(
      prog="python -m mplso_test.helpers.upgrade_programs",
      description="Writes the upgrade table's generated programs.")
  p.add_argument("--write", metavar="DIR", required=True,
                 help="the folder to write the programs into")
  args = p.parse_args(argv)
  paths = write(args.write)
  print(f"Wrote {len(paths)} programs and writers under {args.write} (see "
        f"{os.path.join(args.write, 'README.txt')}).")
  return 0


if __name__ == "__main__":
  sys.exit(main())
