"""Per-step overhead of the harness over bare TRL, measured in paired repeats in one process.

Both arms train the same run (same model files, from one model cache; same task, GRPOConfig and
seed) for the same number of optimizer steps with the greedy eval off: the bare arm is TRL's
``GRPOTrainer``; the harness arm is ``harness.training.train`` (the w_seq-recording trainer, the
metrics callback, parquet writes, samples, progress.json, the machine lease). Both are timed the
same way, by one extra ``TrainerCallback`` from ``on_train_begin`` to ``on_train_end``: wall
seconds (``time.perf_counter``) and CPU seconds of the process (``time.process_time``, every
thread's) per step.

A repeat is one run of each arm; the order alternates (bare first, harness first, ...) so that
drift of the machine hits both. Per repeat the ratio is harness / bare. Prints every repeat, then
the median ratio of wall and CPU time per step with a 95% bootstrap interval over repeats, and a
two-sided sign test of "harness slower" against chance; writes the printed text to ``--out`` with
the command, date, machine and commit at the top.

    python benchmarks/overhead.py [--grid ablations/smoke.yaml] [--steps 40] [--repeats 12]
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def sign_test_p(k: int, n: int) -> float:
    """Two-sided exact binomial p-value of ``k`` successes in ``n`` fair trials (sign test).

    Raises:
        ValueError: if ``k`` is not within ``0..n``.
    """
    if not 0 <= k <= n:
        raise ValueError(f"k={k} outside 0..{n}")
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2**n
    return min(1.0, 2 * tail)


def median_ci(values: list[float], seed: int = 0, reps: int = 10_000) -> tuple[float, float, float]:
    """Median of ``values`` and its 95% percentile-bootstrap interval (``reps`` resamples with
    replacement; Efron & Tibshirani 1993, ch. 13). Raises ValueError on an empty list."""
    if not values:
        raise ValueError("no values")
    a = np.asarray(values, dtype=np.float64)
    idx = np.random.default_rng(seed).integers(0, len(a), (reps, len(a)))
    meds = np.median(a[idx], axis=1)
    lo, hi = np.quantile(meds, [0.025, 0.975])
    return float(np.median(a)), float(lo), float(hi)


def summary_lines(ratios: dict[str, list[float]], arms: dict[str, dict[str, list[float]]]) -> list[str]:
    """The summary of paired repeats: per measure (``wall``, ``cpu``) each arm's median seconds per
    step, the median ratio harness / bare with its interval, and the sign test."""
    lines = []
    for measure, rs in ratios.items():
        med, lo, hi = median_ci(rs)
        slower = sum(r > 1 for r in rs)
        bare = statistics.median(arms["bare"][measure]) * 1e3
        harness = statistics.median(arms["harness"][measure]) * 1e3
        lines.append(
            f"{measure:4} time: bare {bare:.1f} ms/step, harness {harness:.1f} ms/step (medians of {len(rs)}); "
            f"ratio harness/bare median {med:.4f} ({100 * (med - 1):+.2f}%), 95% bootstrap CI "
            f"[{lo:.4f}, {hi:.4f}], range {min(rs):.4f}-{max(rs):.4f}; harness slower in {slower} of {len(rs)} "
            f"(sign test p = {sign_test_p(slower, len(rs)):.3f})"
        )
    return lines


def header(argv: list[str]) -> list[str]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return [
        f"command: python {shlex.join(['benchmarks/' + Path(argv[0]).name, *argv[1:]])}",
        f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        f"machine: {os.cpu_count()} logical cores; load average at start {os.getloadavg()[0]:.2f}",
        f"git commit: {commit.stdout.strip() or 'unknown'}",
        "",
    ]


def _timer():
    """A TrainerCallback recording wall and CPU seconds from ``on_train_begin`` to ``on_train_end``."""
    from transformers import TrainerCallback

    class Timer(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_train_end(self, args, state, control, **kw):
            self.wall, self.cpu = time.perf_counter() - self.t0, time.process_time() - self.c0

    return Timer()


#: What the harness adds to a step, timed one by one in one more harness run: (owner, attribute,
#: label); a label starting with spaces is part of the one above it.
PARTS = (
    ("harness.training:_StepRecorder", "on_step_end", "callback on_step_end (clock, samples, stop check)"),
    ("harness.metrics:StepClock", "stop", "  StepClock.stop (reads the machine)"),
    ("harness.training:_StepRecorder", "_write_samples", "  samples.jsonl"),
    ("harness.training:_StepRecorder", "on_log", "callback on_log (the row)"),
    ("harness.wseq:wseq_stats", None, "  w_seq statistics"),
    ("harness.metrics:MetricsWriter", "append", "  metrics row buffered (parts written in the background)"),
    ("harness.training:_StepRecorder", "_write_progress", "  progress.json"),
    ("harness.training:_StepRecorder", "_concurrent_runs", "  machine lease count"),
    ("harness.training:_StepRecorder", "on_save", "callback on_save (checkpoint marker, rows flushed)"),
    ("harness.trainer:sequence_log_ratios", None, "trainer: log w_seq per micro-batch"),
    ("harness.trainer:HarnessGRPOTrainer", "_gather_step", "trainer: rows pooled per optimizer step"),
)


def attribute(train_once, steps: int) -> list[str]:
    """Run ``train_once()`` (one harness run of ``steps`` steps; returns its wall and CPU seconds
    per step) with every part of :data:`PARTS` wrapped in a timer of the calling thread's CPU time
    (``time.thread_time``: other work on the machine does not inflate it, and work the part hands
    to a background thread is not counted); returns one line per part: CPU ms per step and share
    of the step's CPU time."""
    import importlib

    spent = {label: 0.0 for *_, label in PARTS}
    undo = []
    for owner, attr, label in PARTS:
        module, name = owner.split(":")
        mod = importlib.import_module(module)
        holder, key = (getattr(mod, name), attr) if attr else (mod, name)
        original = getattr(holder, key)

        def timed(*a, _f=original, _label=label, **kw):
            t0 = time.thread_time()
            try:
                return _f(*a, **kw)
            finally:
                spent[_label] += time.thread_time() - t0

        setattr(holder, key, timed)
        undo.append((holder, key, original))
    try:
        wall_s, cpu_s = train_once()
    finally:
        for holder, key, original in reversed(undo):
            setattr(holder, key, original)
    lines = [
        f"What the harness adds to a step, in CPU time of the training thread (one more harness run: "
        f"{wall_s * 1e3:.1f} ms/step wall, {cpu_s * 1e3:.1f} ms/step CPU):"
    ]
    for *_, label in PARTS:
        ms = spent[label] / steps * 1e3
        lines.append(f"  {label:58} {ms:7.3f} ms/step  {100 * ms / (cpu_s * 1e3):6.2f}% of a step's CPU")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="ablations/smoke.yaml")
    ap.add_argument("--steps", type=int, default=40, help="optimizer steps per arm and repeat")
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("-o", "--override", action="append", default=[])
    ap.add_argument("--out", default=str(ROOT / "results/reference/benchmarks/overhead.txt"))
    args = ap.parse_args()
    lines = header(sys.argv)

    import torch
    from trl import GRPOTrainer

    import harness.training as training
    from harness.config.grid import expand
    from harness.config.spec import load_grid
    from harness.trl_boundary import build_grpo_config, grpo_config_kwargs

    overrides = [*args.override, f"trainer.max_steps={args.steps}", "harness.eval_steps=0"]
    plan = expand(load_grid(args.grid, overrides))
    spec = plan.runs[0]
    torch.set_num_threads(args.threads)
    run_dir = Path("results") / plan.grid.name / "runs" / spec.run_id
    # One model cache for both arms: the harness arm's runs live under a temporary folder, whose
    # default cache (beside it) would hold a second, separately built model
    os.environ[training.MODEL_CACHE_ENV] = str(training.model_cache_dir(run_dir.parent.parent))
    model_path = training.prepare_model(spec, run_dir)
    timers = []
    build = training.build_trainer

    def timed_build(*a, **kw):  # both arms' trainers get the same timer
        trainer, task, tokenizer = build(*a, **kw)
        timers.append(_timer())
        trainer.add_callback(timers[-1])
        return trainer, task, tokenizer

    training.build_trainer = timed_build

    def bare(tmp: Path) -> None:
        training.seed_everything(spec.seed)
        config = build_grpo_config(grpo_config_kwargs(spec, "cpu", str(tmp / "bare")), "cpu")
        trainer, _, _ = timed_build(spec, model_path, config, trainer_class=GRPOTrainer)
        trainer.train()

    def harness(tmp: Path) -> None:
        training.train(spec, tmp / "harness", device="cpu", threads=args.threads)

    first = f"run {spec.run_id} ({spec.varying}), {args.steps} steps x {args.repeats} paired repeats, {args.threads} thread(s)"
    print(first, flush=True)
    lines.append(first)
    arms = {"bare": {"wall": [], "cpu": []}, "harness": {"wall": [], "cpu": []}}
    ratios = {"wall": [], "cpu": []}
    for r in range(args.repeats):
        tmp = Path(tempfile.mkdtemp(prefix="overhead-"))
        got = {}
        try:
            order = [("bare", bare), ("harness", harness)][:: -1 if r % 2 else 1]
            for name, fn in order:
                fn(tmp)
                got[name] = {"wall": timers[-1].wall / args.steps, "cpu": timers[-1].cpu / args.steps}
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for name in arms:
            for m in ("wall", "cpu"):
                arms[name][m].append(got[name][m])
        for m in ratios:
            ratios[m].append(got["harness"][m] / got["bare"][m])
        line = (
            f"repeat {r + 1:2d} ({order[0][0]} first): bare {got['bare']['wall'] * 1e3:.1f} ms/step "
            f"(CPU {got['bare']['cpu'] * 1e3:.1f}), harness {got['harness']['wall'] * 1e3:.1f} ms/step "
            f"(CPU {got['harness']['cpu'] * 1e3:.1f}); ratio wall {ratios['wall'][-1]:.4f}, CPU {ratios['cpu'][-1]:.4f}"
        )
        print(line, flush=True)
        lines.append(line)
    tail = summary_lines(ratios, arms)

    def train_once() -> float:
        tmp = Path(tempfile.mkdtemp(prefix="overhead-"))
        try:
            harness(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return timers[-1].wall / args.steps, timers[-1].cpu / args.steps

    tail += ["", *attribute(train_once, args.steps)]
    print(*tail, sep="\n")
    lines += ["", *tail]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
