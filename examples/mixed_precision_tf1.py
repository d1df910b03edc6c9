"""Mixed-precision training in TF1 graph mode, with and without loss scaling.

Trains an autoencoder (64-128-32-128-64, sigmoid) on the handwritten digits
shipped with mplso (`mplso.datasets.load_digits`), with float32 variables and
float16 compute, as TF1 code did: `disable_eager_execution`, placeholders, a
`Session`, `global_step`. It trains twice from the same start:

1. with `mplso.MixedPrecisionLossScaleOptimizer` and a `DynamicLossScale`;
2. without loss scaling: the same wrapper with a fixed scale of 1, which
   scales nothing (multiplying by 1 and dividing by 1 are exact), so that
   the underflow meter can watch it.

The loss is a mean over every pixel of the batch (1437 x 64 values), so each
pixel's gradient is about 2.5e-6, and every sigmoid layer below shrinks it
further. Float16 flushes anything under about 6e-8 to zero: without loss
scaling the encoder's gradients are exactly zero, the encoder is frozen, and
the loss sits on a plateau for hundreds of steps. With loss scaling those
gradients are computed 2^15 (and more) times larger and survive.

In the full run the unscaled encoder thaws after about 400 steps and its loss
falls. No learning-rate schedule causes this (Adam's rate is a constant 0.01):
as the decoder keeps training, the encoder's largest gradients, which sat just
under the 3e-8 below which float16 rounds to zero, cross that line, and Adam
moves a weight by about the learning rate however small its gradient (it
divides each step by the gradient's own running size). The display shows the
steps at which the encoder froze and thawed.

The dynamic scale starts at TF's default, 2^15, and doubles after every
`--increment_period` (10) finite steps (TF's default period is 2000; a short
one shows the whole cycle in a short run). Between 2^28 and 2^30 the scaled
gradients overflow float16: that step's gradients hold Inf, so the optimizer
skips it (no variable moves, `global_step` stays) and halves the scale; ten
finite steps later the scale grows again. Nothing is injected: the overflows
are this model's own gradients times the scale. The display shows the loss,
the loss scale, skipped steps, the first changes of scale from the first
overflow on (and after them each new highest scale), and what the underflow
meter (`mplso.meter_underflow(opt, every=10)`) finds: every 10th step, the
share of each variable's gradient that is exactly zero. A variable whose
gradient is (nearly) all zeros, at least 99%, gets no update: the display
names these "frozen" variables, and the step at which each one freezes and
thaws. The closing lines are computed from the run.

TensorFlow's start-up logs are hidden: run with TF_CPP_MIN_LOG_LEVEL=0 to see
them.

Usage:
  python examples/mixed_precision_tf1.py [--steps N] [--quick] [--json PATH]
      [--increment_period N]
"""

import argparse
import json
import math
import sys
import time

# A quiet start: TensorFlow's C++ start-up logs (CUDA probing on a machine
# without a GPU, oneDNN notices) are held to TF_CPP_MIN_LOG_LEVEL, 3 unless
# set (TF_CPP_MIN_LOG_LEVEL=0 shows them). `import mplso` loads no TensorFlow.
import mplso  # noqa: E402

mplso.import_tensorflow_quietly()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from mplso import datasets  # noqa: E402

HIDDEN = (128, 32, 128)
INIT_STDDEV = 0.05  # Keras's RandomNormal default.
LEARNING_RATE = 0.01
INITIAL_SCALE = 2**15  # TF's default.
MAX_EVENTS = 6  # Scale changes printed after the first overflow.
METER_EVERY = 10  # Steps between two samples of the underflow meter.
FROZEN = 0.99  # A variable this share of whose gradient is zero is frozen.


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=500,
                      help="full-batch training steps per run (default 500)")
  parser.add_argument("--increment_period", type=int, default=10,
                      help="finite steps before the loss scale doubles "
                      "(default 10)")
  parser.add_argument("--quick", action="store_true",
                      help="a short run for CI (200 steps)")
  parser.add_argument("--json", metavar="PATH",
                      help="also write the results as JSON to PATH")
  args = parser.parse_args(argv)
  if args.quick:
    args.steps = 200
  return args


def load_data():
  images, labels = datasets.load_digits()
  x = images.reshape(len(images), -1).astype(np.float32) / 16.
  order = np.random.default_rng(0).permutation(len(x))
  x, y = x[order], labels[order].astype(np.int32)
  split = int(0.8 * len(x))
  return (x[:split], y[:split]), (x[split:], y[split:])


def build(loss_scaling, increment_period=10):
  """Builds the model and its training op in the current graph."""
  x = tf.compat.v1.placeholder(tf.float32, [None, 64], name="x")
  rng = np.random.default_rng(42)  # Both runs start from the same weights.
  h = tf.cast(x, tf.float16)
  sizes = (64,) + HIDDEN + (64,)
  for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
    w = tf.Variable(rng.normal(0., INIT_STDDEV, (n_in, n_out)).astype(
        np.float32), name=f"w{i}")
    b = tf.Variable(np.zeros(n_out, np.float32), name=f"b{i}")
    h = tf.matmul(h, tf.cast(w, tf.float16)) + tf.cast(b, tf.float16)
    if i < len(sizes) - 2:
      h = tf.sigmoid(h)
  # The output and the loss in float32, as Keras does.
  reconstruction = tf.sigmoid(tf.cast(h, tf.float32))
  loss = tf.reduce_mean(tf.square(reconstruction - x))

  global_step = tf.compat.v1.train.get_or_create_global_step()
  opt = tf.compat.v1.train.AdamOptimizer(LEARNING_RATE)
  # Without loss scaling: a fixed scale of 1, which changes no number.
  opt = mplso.MixedPrecisionLossScaleOptimizer(
      opt, mplso.DynamicLossScale(initial_loss_scale=INITIAL_SCALE,
                                  increment_period=increment_period)
      if loss_scaling else mplso.FixedLossScale(1))
  # Every METER_EVERY steps (of global_step), the share of each variable's
  # gradient that is exactly zero, recorded in the graph.
  mplso.meter_underflow(opt, every=METER_EVERY)
  train_op = opt.minimize(loss, global_step=global_step)
  return dict(x=x, loss=loss, train_op=train_op, opt=opt,
              global_step=global_step, scale=opt.loss_scale())


def power_of_two(scale):
  """Formats a loss scale: 2^15 for 32768, the number itself otherwise."""
  exponent = math.log2(scale) if scale > 0 else 0.5
  return f"2^{exponent:.0f}" if exponent.is_integer() else f"{scale:g}"


def frozen_names(sample):
  """The variables of a meter sample whose gradient is at least 99% zeros."""
  return [name for name, zero in sample["zero"].items() if zero >= FROZEN]


def progress(name, step, steps, loss, scale, skipped, sample):
  """One progress line; `scale` is None without loss scaling.

  `sample` is the underflow meter's newest sample (None before the first).
  """
  width = 24
  filled = int(width * step / steps)
  bar = "#" * filled + "." * (width - filled)
  frozen = " ".join(frozen_names(sample)) if sample else ""
  return (f"{name:>13} [{bar}] {step:4d}/{steps}  loss {loss:.4f}  "
          f"scale {'none' if scale is None else power_of_two(scale):>5}  "
          f"skipped {skipped:3d}  frozen: {frozen or 'none'}")


def scale_event(step, before, after, skipped, increment_period,
                highest=False):
  """Describes a change of the loss scale at `step`."""
  if skipped:
    return (f"{'':15}step {step:4d}: gradients overflowed float16 at scale "
            f"{power_of_two(before)}: step skipped, scale halved to "
            f"{power_of_two(after)}")
  return (f"{'':15}step {step:4d}: {increment_period} finite steps in a row: "
          f"scale grew to {power_of_two(after)}"
          + (" (the highest yet)" if highest else ""))


def meter_event(step, names, frozen, sample):
  """Describes variables freezing (their gradients all zero) or thawing."""
  shares = ", ".join(f"{name} {100 * sample['zero'][name]:.0f}%"
                     for name in names)
  if frozen:
    return (f"{'':15}step {step:4d}: underflow meter: zero gradient "
            f"elements {shares}: frozen")
  return (f"{'':15}step {step:4d}: underflow meter: zero gradient "
          f"elements {shares}: thawed")


def train(name, loss_scaling, steps, train_data, test_data,
          increment_period=10):
  """Trains one run; returns its summary."""
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(0)
    model = build(loss_scaling, increment_period)
    init = tf.compat.v1.global_variables_initializer()
  x_train, x_test = train_data[0], test_data[0]
  history, scales, skipped_at = [], [], []
  events = 0
  highest = 0.  # The highest loss scale so far.
  samples = []  # The underflow meter's samples, read as they come.
  frozen_at, thawed_at = {}, {}  # Per variable, its first freeze and thaw.
  start = time.perf_counter()
  with tf.compat.v1.Session(graph=graph) as sess:
    sess.run(init)
    scale, global_step = sess.run([model["scale"], model["global_step"]])
    for step in range(1, steps + 1):
      feed = {model["x"]: x_train}
      _, loss = sess.run([model["train_op"], model["loss"]], feed)
      history.append(loss)
      # Read after the step: a skipped step leaves `global_step` as it was.
      previous_scale, previous_step = scale, global_step
      scale, global_step = sess.run([model["scale"], model["global_step"]])
      if global_step != previous_step and previous_step % METER_EVERY == 0:
        # This step was sampled: read the meter's newest sample.
        sample = mplso.underflow_log(model["opt"], sess)[-1]
        samples.append(sample)
        now = set(frozen_names(sample))
        frozen = [n for n in sample["zero"]
                  if n in now and n not in frozen_at]
        thawed = [n for n in sample["zero"] if n in frozen_at and
                  n not in now and n not in thawed_at]
        frozen_at.update({n: step for n in frozen})
        thawed_at.update({n: step for n in thawed})
        for names, freezing in ((frozen, True), (thawed, False)):
          if names:
            print(meter_event(step, names, freezing, sample), flush=True)
      scales.append(float(scale))
      if global_step == previous_step:
        skipped_at.append(step)
      new_highest = scale > highest
      highest = max(highest, float(scale))
      # After the first overflow: the first few changes of scale, and any
      # new highest scale after them, so that the display shows the highest.
      if skipped_at and scale != previous_scale and (
          events < MAX_EVENTS or new_highest):
        print(scale_event(step, previous_scale, scale,
                          global_step == previous_step, increment_period,
                          highest=new_highest and events >= MAX_EVENTS),
              flush=True)
        events += 1
        if events == MAX_EVENTS:
          print(f"{'':15}(later changes of scale are not shown, except a new "
                "highest)", flush=True)
      if step == 1 or step % max(1, steps // 10) == 0 or step == steps:
        print(progress(name, step, steps, loss,
                       scale if loss_scaling else None, len(skipped_at),
                       samples[-1] if samples else None), flush=True)
    final_loss = float(sess.run(model["loss"], {model["x"]: x_train}))
    test_loss = float(sess.run(model["loss"], {model["x"]: x_test}))
  return {
      "name": name,
      "loss_scaling": loss_scaling,
      "steps": steps,
      "first_loss": float(history[0]),
      "losses": [float(loss) for loss in history],
      "final_loss": final_loss,
      "test_loss": test_loss,
      "loss_scale": float(scale),
      "skipped_steps": int(steps - global_step),
      "skipped_at": skipped_at,
      "loss_scales": scales,
      "underflow": samples,
      "frozen_at": frozen_at,
      "thawed_at": thawed_at,
      "seconds": time.perf_counter() - start,
  }


def max_zero(result):
  """The largest zero share of any variable in a run's last meter sample."""
  return max(result["underflow"][-1]["zero"].values())


def main(argv=None):
  args = parse_args(argv)
  # On CPU, Grappler's remapper turns float16 MatMul+BiasAdd into a very slow
  # fused kernel; without it the float16 step is hundreds of times faster.
  tf.config.optimizer.set_experimental_options({"remapping": False})
  tf.compat.v1.disable_eager_execution()
  train_data, test_data = load_data()
  print(f"Digits: {len(train_data[0])} training and {len(test_data[0])} test "
        f"images. Autoencoder {(64,) + HIDDEN + (64,)}, float16 compute, "
        "float32 variables, "
        f"{args.steps} steps per run.\n")
  results = [
      train("loss scaling", True, args.steps, train_data, test_data,
            args.increment_period),
      train("no scaling", False, args.steps, train_data, test_data),
  ]
  columns = (("", 13), ("first loss", 10), ("final loss", 10),
             ("test loss", 9), ("max zero", 8), ("skipped", 7),
             ("scale", 5), ("seconds", 7))
  print("\n" + "  ".join(f"{title:>{width}}" for title, width in columns))
  for r in results:
    cells = (r["name"], f"{r['first_loss']:.4f}", f"{r['final_loss']:.4f}",
             f"{r['test_loss']:.4f}", f"{100 * max_zero(r):.1f}%",
             str(r["skipped_steps"]),
             power_of_two(r["loss_scale"]) if r["loss_scaling"] else "none",
             f"{r['seconds']:.1f}")
    print("  ".join(f"{cell:>{width}}"
                    for cell, (_, width) in zip(cells, columns)))
  scaled, bare = results
  print(f"\nWithout loss scaling the final loss is "
        f"{bare['final_loss'] / scaled['final_loss']:.1f}x higher; in the "
        "underflow meter's last sample up to "
        f"{100 * max_zero(bare):.0f}% of a variable's gradient was exactly "
        f"zero (with loss scaling: at most {100 * max_zero(scaled):.0f}%).")
  if bare["frozen_at"]:
    frozen, thawed = bare["frozen_at"], bare["thawed_at"]
    print("The meter found the encoder frozen: "
          + ", ".join(f"{name} from step {at}" for name, at in frozen.items())
          + " (at least 99% of each one's gradient exactly zero: float16 "
          "rounded it to zero).")
    if thawed:
      last = max(thawed.values())
      losses = bare["losses"]
      print("It thawed: " + ", ".join(
          f"{name} at step {at}" for name, at in thawed.items())
            + f"; after the thaw the loss fell from {losses[last - 1]:.4f} "
            f"to {bare['final_loss']:.4f}. No schedule did that (the "
            f"learning rate is a constant {LEARNING_RATE:g}): as the decoder "
            "trained on, the encoder's largest gradients, just under the "
            "3e-8 below which float16 rounds to zero, crossed it, and Adam "
            "moves a weight by about the learning rate however small its "
            "gradient.")
  if scaled["skipped_at"]:
    scales = scaled["loss_scales"]
    top = max(scales)
    print(f"With loss scaling the scale grew from "
          f"{power_of_two(INITIAL_SCALE)} to at most {power_of_two(top)} "
          f"(first at step {scales.index(top) + 1}); "
          f"{len(scaled['skipped_at'])} of {scaled['steps']} steps overflowed "
          f"float16 (the first at step {scaled['skipped_at'][0]}) and were "
          "skipped, each halving the scale, which then grew again.")
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump(results, f, indent=2)
  return 0


if __name__ == "__main__":
  sys.exit(main())
