"""Draws the docs' figures from real training runs.

docs/images/dynamic_loss_scale.svg:
Runs `examples/mixed_precision_keras.py --logdir DIR --update_freq 1` (10
epochs, 450 steps, about 15 s on a CPU), reads back the TensorBoard scalars
that `mplso.keras.LossScaleMonitor` wrote after every step, and draws the
loss scale and the skipped steps as an SVG by hand (no plotting package
needed).

docs/images/why_skipped.svg: runs the python blocks of docs/why-skipped.md,
as the docs test does, in a temporary directory, and draws the loss scale
and the NaN and Inf steps that `LossScaleMonitor` wrote for its two runs.

Re-run it after a change to the loss-scale logic:

  .venv/bin/python docs/make_figures.py
"""

import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mplso_test.helpers.events import read_events  # noqa: E402

OUT = os.path.join(ROOT, "docs", "images", "dynamic_loss_scale.svg")
WHY_PAGE = os.path.join(ROOT, "docs", "why-skipped.md")
WHY_OUT = os.path.join(ROOT, "docs", "images", "why_skipped.svg")
# The runs of the page, by log directory, and their titles.
WHY_RUNS = (("overflow", "a plain overflow"),
            ("forward_nan", "a NaN made in the forward pass"))
W, H, LEFT, RIGHT, TOP, GAP, PANEL = 760, 430, 70, 20, 40, 50, 140


def run_example(log_dir):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  subprocess.run([sys.executable,
                  os.path.join(ROOT, "examples", "mixed_precision_keras.py"),
                  "--logdir", log_dir, "--update_freq", "1"],
                 check=True, env=env)


def polyline(points, color, width=1.5):
  path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
  return (f'<polyline fill="none" stroke="{color}" stroke-width="{width}" '
          f'points="{path}"/>')


def text(x, y, s, anchor="middle", size=12, color="#222"):
  return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" '
          f'font-family="sans-serif" text-anchor="{anchor}" '
          f'fill="{color}">{s}</text>')


def draw(scales, skipped):
  steps = [s for s, _ in scales]
  last = max(steps)
  sx = lambda s: LEFT + (W - LEFT - RIGHT) * s / last  # noqa: E731
  out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
         f'viewBox="0 0 {W} {H}">', '<rect width="100%" height="100%" '
         'fill="white"/>',
         text(W / 2, 22, "A real run: examples/mixed_precision_keras.py "
              "(Keras 3, mixed_float16, DynamicLossScale(2**15, "
              "increment_period=20))", size=13)]
  # Panel 1: log2 of the loss scale, as a step function.
  logs = [math.log2(v) for _, v in scales]
  lo, hi = math.floor(min(logs)) - 1, math.ceil(max(logs)) + 1
  top1 = TOP
  sy1 = lambda v: top1 + PANEL * (hi - v) / (hi - lo)  # noqa: E731
  for k in range(lo, hi + 1):
    out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{sy1(k):.1f}" '
               f'y2="{sy1(k):.1f}" stroke="#eee"/>')
    out.append(text(LEFT - 6, sy1(k) + 4, f"2^{k}", anchor="end", size=10))
  points, prev = [], None
  for (s, _), v in zip(scales, logs):
    if prev is not None:
      points.append((sx(s), sy1(prev)))
    points.append((sx(s), sy1(v)))
    prev = v
  out.append(polyline(points, "#1f77b4"))
  out.append(text(LEFT + 4, top1 - 6, "loss scale (log scale)", anchor="start",
                  color="#1f77b4"))
  # Skip events: red ticks on the loss-scale panel.
  prev = 0
  for s, v in skipped:
    if v > prev:
      out.append(f'<line x1="{sx(s):.1f}" x2="{sx(s):.1f}" '
                 f'y1="{top1 + PANEL - 8}" y2="{top1 + PANEL}" '
                 'stroke="#d62728" stroke-width="1.5"/>')
    prev = v
  # Panel 2: cumulative skipped steps.
  top2 = TOP + PANEL + GAP
  most = max(max(v for _, v in skipped), 1)
  sy2 = lambda v: top2 + PANEL * (1 - v / most)  # noqa: E731
  for k in range(0, int(most) + 1, max(1, int(most) // 4)):
    out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{sy2(k):.1f}" '
               f'y2="{sy2(k):.1f}" stroke="#eee"/>')
    out.append(text(LEFT - 6, sy2(k) + 4, str(k), anchor="end", size=10))
  out.append(polyline([(sx(s), sy2(v)) for s, v in skipped], "#d62728"))
  out.append(text(LEFT + 4, top2 - 6, "skipped steps (cumulative; red ticks "
                  "above mark each skipped step)", anchor="start",
                  color="#d62728"))
  for s in range(0, last + 1, 50):
    out.append(text(sx(s), top2 + PANEL + 16, str(s), size=10))
  out.append(text(W / 2, H - 8, "training step (optimizer.iterations)"))
  out.append("</svg>")
  return "\n".join(out) + "\n"


def run_why_skipped_page(work_dir):
  """Runs the page's python blocks in `work_dir`; returns what they print."""
  with open(WHY_PAGE, encoding="utf-8") as f:
    blocks = re.findall(r"^```python\n(.*?)^```", f.read(), re.S | re.M)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
             PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH",
                                                               "")]))
  return subprocess.run([sys.executable, "-c", "\n\n".join(blocks)],
                        check=True, env=env, cwd=work_dir, capture_output=True,
                        text=True).stdout


def draw_why_skipped(runs):
  """Two panels side by side: log2 loss scale, NaN and Inf steps as ticks.

  Args:
    runs: per panel, (title, {tag: [(step, value)]}) from the batch events.
  """
  width, height, pw, ph, top = 760, 300, 330, 170, 60
  out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
         f'height="{height}" viewBox="0 0 {width} {height}">',
         '<rect width="100%" height="100%" fill="white"/>',
         text(width / 2, 20, "docs/why-skipped.md, real runs: loss scale and "
              "skipped steps (red: NaN, orange: Inf only)", size=13)]
  for i, (title, events) in enumerate(runs):
    left = 60 + i * (pw + 50)
    scales = events["batch_loss_scale"]
    last = max(s for s, _ in scales) + 1  # Room for the failed step.
    sx = lambda s, left=left, last=last: left + pw * s / last  # noqa: E731
    logs = [math.log2(v) for _, v in scales]
    lo, hi = math.floor(min(logs)), math.ceil(max(logs)) + 1
    sy = lambda v, lo=lo, hi=hi: top + ph * (hi - v) / (hi - lo)  # noqa: E731
    out.append(text(left + pw / 2, top - 18, title, size=12))
    for k in range(lo, hi + 1, 3):
      out.append(f'<line x1="{left}" x2="{left + pw}" y1="{sy(k):.1f}" '
                 f'y2="{sy(k):.1f}" stroke="#eee"/>')
      out.append(text(left - 6, sy(k) + 4, f"2^{k}", anchor="end", size=10))
    # Written at iterations = s, after step s - 1: the scale step s uses.
    # Both runs start at 2**15.
    points, prev = [(sx(0), sy(15))], 15
    for (s, _), v in zip(scales, logs):
      points += [(sx(s), sy(prev)), (sx(s), sy(v))]
      prev = v
    points.append((sx(last), sy(prev)))
    out.append(polyline(points, "#1f77b4"))
    for tag, color in (("batch_nan_steps", "#d62728"),
                       ("batch_inf_steps", "#ff7f0e")):
      before = 0.
      for s, v in events[tag]:
        if v > before:  # Step `s` (written at iterations s + 1) skipped.
          x = sx(s - 1 + 0.5)
          out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + ph + 4}" '
                     f'y2="{top + ph + 16}" stroke="{color}" '
                     'stroke-width="2"/>')
        before = v
    for s in range(0, last + 1, 8):
      out.append(text(sx(s), top + ph + 32, str(s), size=10))
    out.append(text(left + pw / 2, top + ph + 50, "step (iterations)",
                    size=11))
  out.append("</svg>")
  return "\n".join(out) + "\n"


def why_skipped_figure():
  work_dir = tempfile.mkdtemp()
  print(run_why_skipped_page(work_dir))
  runs = [(title, read_events(os.path.join(work_dir, "logs", name)))
          for name, title in WHY_RUNS]
  with open(WHY_OUT, "w", encoding="utf-8") as f:
    f.write(draw_why_skipped(runs))
  print(f"wrote {WHY_OUT}")


def main():
  if sys.argv[1:] == ["why-skipped"]:
    why_skipped_figure()
    return
  log_dir = sys.argv[1] if len(sys.argv) > 1 else None
  if log_dir is None:
    log_dir = tempfile.mkdtemp()
    run_example(log_dir)
  events = read_events(log_dir)
  svg = draw(events["batch_loss_scale"], events["batch_skipped_steps"])
  os.makedirs(os.path.dirname(OUT), exist_ok=True)
  with open(OUT, "w", encoding="utf-8") as f:
    f.write(svg)
  print(f"wrote {OUT}: {len(events['batch_loss_scale'])} steps")
  why_skipped_figure()


if __name__ == "__main__":
  main()
