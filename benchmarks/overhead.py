"""Per-step overhead of the harness over bare TRL, measured step by step in lock-step pairs.

Both arms train the same run (same model files, from one model cache; same task, GRPOConfig and
seed) for the same number of optimizer steps with the greedy eval off: the bare arm is TRL's
``GRPOTrainer``; the harness arm is ``harness.train.training.train`` (the w_seq-recording trainer, the
metrics callback, parquet writes, samples, progress.json, the machine lease).

The arms train at the same time in two threads of one process and take turns, one optimizer step
each (a :class:`Baton`): a step of one arm is timed a tenth of a second away from the same step of
the other, so the machine's drift (other tenants, frequency), which moves a 30-step arm by 10-25%,
hits both alike. Each arm keeps its own RNG state across turns, so it generates the same
completions as it would alone. A step is timed from one ``on_step_begin`` to the next (to
``on_train_end`` for the last), so the previous step's logging and saving count in it: wall seconds
(``time.perf_counter``) and CPU seconds of the training thread (``time.thread_time``; work handed
to the harness's background threads is not in it, and neither arm trains while it runs). The
first ``--warmup`` steps of each arm are left out.

A repeat is one run of each arm; which arm takes the first turn alternates. Per repeat the ratio is
harness / bare of the summed step times. Prints every repeat, then the median ratio of wall and CPU
time with a 95% bootstrap interval over repeats and a two-sided sign test of "harness slower"
against chance, and the median of the per-step ratios pooled over repeats; then the CPU time of
each part the harness adds, in one more harness run; writes the printed text to ``--out`` with the
command, date, machine and commit at the top.

    python benchmarks/overhead.py [--grid ablations/smoke.yaml] [--steps 40] [--repeats 12]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
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
    """The summary of paired repeats: per measure (``wall``, ``cpu``, ...) each arm's median seconds per
    step where ``arms`` has the measure, the median ratio harness / bare with its interval, and the
    sign test."""
    lines = []
    for measure, rs in ratios.items():
        med, lo, hi = median_ci(rs)
        slower = sum(r > 1 for r in rs)
        if measure in arms["bare"]:
            bare = statistics.median(arms["bare"][measure]) * 1e3
            harness = statistics.median(arms["harness"][measure]) * 1e3
            times = f"bare {bare:.1f} ms/step, harness {harness:.1f} ms/step (medians of {len(rs)}); "
        else:
            times = f"{len(rs)} repeats; "
        lines.append(
            f"{measure:4} time: {times}"
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


class Baton:
    """Turns between two arms training in two threads: one optimizer step each, one arm at a time.

    An arm waits for its turn before it starts (:meth:`wait`), and at each step boundary hands the
    turn over and waits for it back (:meth:`swap`); an arm that ends or fails calls :meth:`finish`,
    after which the other trains alone. Across a hand-over an arm's RNG states (torch, numpy,
    Python's ``random``) are saved and put back, so each arm draws what it would draw alone.
    """

    def __init__(self, names: tuple[str, str], first: str):
        self.names, self.turn, self.done = names, first, set()
        self.cond = threading.Condition()
        self.rng: dict[str, tuple] = {}

    def _other(self, name: str) -> str:
        return self.names[1] if name == self.names[0] else self.names[0]

    def wait(self, name: str) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.turn == name)
        if name in self.rng:
            import random

            import numpy as np
            import torch

            state_torch, state_np, state_py = self.rng.pop(name)
            torch.set_rng_state(state_torch)
            np.random.set_state(state_np)
            random.setstate(state_py)

    def _hand_over(self, name: str) -> None:
        with self.cond:
            other = self._other(name)
            if other not in self.done:
                self.turn = other
            self.cond.notify_all()

    def swap(self, name: str) -> None:
        import random

        import numpy as np
        import torch

        self.rng[name] = (torch.get_rng_state(), np.random.get_state(), random.getstate())
        self._hand_over(name)
        self.wait(name)

    def finish(self, name: str) -> None:
        with self.cond:
            self.done.add(name)
        self._hand_over(name)


def _step_timer(baton: Baton, name: str):
    """A TrainerCallback that times each optimizer step of arm ``name`` (wall and training-thread CPU
    seconds, ``on_step_begin`` to the next ``on_step_begin`` or to ``on_train_end``) and hands the turn
    to the other arm at every step boundary."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.steps: list[tuple[float, float]] = []
            self.tokens: list[float] = []  # TRL's running num_tokens at each log: the completions drawn
            self.t0 = self.c0 = None

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "num_tokens" in logs:
                self.tokens.append(float(logs["num_tokens"]))

        def _lap(self):
            if self.t0 is not None:
                self.steps.append((time.perf_counter() - self.t0, time.thread_time() - self.c0))

        def on_step_begin(self, args, state, control, **kw):
            self._lap()
            baton.swap(name)
            self.t0, self.c0 = time.perf_counter(), time.thread_time()

        def on_train_end(self, args, state, control, **kw):
            self._lap()
            self.t0 = None

    return StepTimer()


def lock_step(arms: dict, first: str) -> tuple[dict[str, list[tuple[float, float]]], bool]:
    """Train ``arms`` (name -> function of the callback to add to its trainer) in two threads taking
    turns step by step, ``first`` first. Returns each arm's ``(wall s, CPU s)`` per step, and whether
    the arms logged the same running token counts (TRL's ``num_tokens``), i.e. drew the same
    completions, so that step i of one is the same work as step i of the other. Re-raises an arm's
    exception, if any."""
    names = tuple(arms)
    baton = Baton(names, first)
    timers = {name: _step_timer(baton, name) for name in names}
    errors: dict[str, BaseException] = {}

    def body(name):
        try:
            baton.wait(name)
            arms[name](timers[name])
        except BaseException as e:  # the other arm must not wait for a turn that never comes
            errors[name] = e
        finally:
            baton.finish(name)

    threads = [threading.Thread(target=body, args=(name,), name=f"arm-{name}") for name in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in names:
        if name in errors:
            raise errors[name]
    tokens = [timers[name].tokens for name in names]
    return {name: timers[name].steps for name in names}, bool(tokens[0]) and tokens[0] == tokens[1]


#: Work the harness hands to background threads: (owner, attribute). In lock step it may run during
#: the bare arm's turn, so its CPU time is measured apart and added in the upper bound.
BACKGROUND = (("harness.train.metrics", "_write_rows"), ("harness.train.recorder:_StepRecorder", "_mark"))


@contextlib.contextmanager
def background_cpu() -> Iterator[list[float]]:
    """While the body runs, the CPU seconds spent in :data:`BACKGROUND` (``time.thread_time`` of the
    thread that runs it) are summed into the one-element list yielded."""
    import importlib

    total, lock, undo = [0.0], threading.Lock(), []
    for owner, name in BACKGROUND:
        module, _, cls = owner.partition(":")
        holder = getattr(importlib.import_module(module), cls) if cls else importlib.import_module(module)
        original = getattr(holder, name)

        def timed(*a, _f=original, **kw):
            t0 = time.thread_time()
            try:
                return _f(*a, **kw)
            finally:
                with lock:
                    total[0] += time.thread_time() - t0

        setattr(holder, name, timed)
        undo.append((holder, name, original))
    try:
        yield total
    finally:
        for holder, name, original in reversed(undo):
            setattr(holder, name, original)


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
    (
        "harness.train.recorder:_StepRecorder",
        "on_step_end",
        "callback on_step_end (clock, samples, stop check)",
    ),
    ("harness.train.metrics:StepClock", "stop", "  StepClock.stop (reads the machine)"),
    ("harness.train.recorder:_StepRecorder", "_write_samples", "  samples.jsonl"),
    ("harness.train.recorder:_StepRecorder", "on_log", "callback on_log (the row)"),
    (
        "harness.train.metrics:MetricsWriter",
        "append",
        "  metrics row buffered (parts written in the background)",
    ),
    ("harness.train.recorder:_StepRecorder", "_write_progress", "  progress.json"),
    ("harness.train.recorder:_StepRecorder", "_concurrent_runs", "  machine lease count"),
    ("harness.train.recorder:_StepRecorder", "on_save", "callback on_save (checkpoint marker, rows flushed)"),
    ("harness.train.wseq:wseq_stats", None, "w_seq statistics (in the metrics writer's thread)"),
    ("harness.train.trainer:sequence_log_ratios", None, "trainer: log w_seq per micro-batch"),
    ("harness.train.trainer:HarnessGRPOTrainer", "_gather_step", "trainer: rows pooled per optimizer step"),
)


def attribute(train_once, steps: int) -> list[str]:
    """Run ``train_once()`` (one harness run of ``steps`` steps; returns its wall and CPU seconds
    per step) with every part of :data:`PARTS` wrapped in a timer of the calling thread's CPU time
    (``time.thread_time``: other work on the machine does not inflate it, and work the part hands
    to a background thread is not counted in it; a part that runs in a background thread is timed
    there); returns one line per part: CPU ms per step and share of the step's CPU time."""
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
        f"What the harness adds to a step, in CPU time of the thread that runs it (one more harness run: "
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
    ap.add_argument("--warmup", type=int, default=2, help="first steps of each arm left out")
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("-o", "--override", action="append", default=[])
    ap.add_argument("--out", default=str(ROOT / "results/reference/benchmarks/overhead.txt"))
    args = ap.parse_args()
    if not 0 <= args.warmup < args.steps:
        ap.error(f"--warmup {args.warmup} must be at least 0 and below --steps {args.steps}")
    lines = header(sys.argv)

    import torch
    from trl import GRPOTrainer

    import harness.train.training as training
    from harness.config.grid import expand
    from harness.config.spec import load_grid
    from harness.losses import grpo_config_kwargs
    from harness.trl_boundary import build_grpo_config

    overrides = [*args.override, f"trainer.max_steps={args.steps}", "harness.eval_steps=0"]
    plan = expand(load_grid(args.grid, overrides))
    spec = plan.runs[0]
    torch.set_num_threads(args.threads)
    run_dir = Path("results") / plan.grid.name / "runs" / spec.run_id
    # One model cache for both arms: the harness arm's runs live under a temporary folder, whose
    # default cache (beside it) would hold a second, separately built model
    os.environ[training.MODEL_CACHE_ENV] = str(training.model_cache_dir(run_dir.parent.parent))
    model_path = training.prepare_model(spec, run_dir)
    added = threading.local()  # the callbacks the calling arm's trainer gets
    timers = []
    build = training.build_trainer

    def hooked_build(*a, **kw):
        trainer, task, tokenizer = build(*a, **kw)
        for callback in getattr(added, "callbacks", None) or [_timer()]:
            trainer.add_callback(callback)
        timers.append(trainer.callback_handler.callbacks[-1])
        return trainer, task, tokenizer

    training.build_trainer = hooked_build

    def bare(tmp: Path, timer) -> None:
        added.callbacks = [timer]
        training.seed_everything(spec.seed)
        config = build_grpo_config(grpo_config_kwargs(spec, "cpu", str(tmp / "bare")), "cpu")
        trainer, _, _ = hooked_build(spec, model_path, config, trainer_class=GRPOTrainer)
        trainer.train()

    def harness(tmp: Path, timer=None) -> None:
        added.callbacks = None if timer is None else [timer]
        training.train(spec, tmp / "harness", device="cpu", threads=args.threads)

    first = (
        f"run {spec.run_id} ({spec.varying}), {args.steps} steps x {args.repeats} repeats in lock step "
        f"(first {args.warmup} of each arm left out), {args.threads} thread(s)"
    )
    print(first, flush=True)
    lines.append(first)
    arms = {"bare": {"wall": [], "cpu": []}, "harness": {"wall": [], "cpu": []}}
    ratios = {"wall": [], "cpu": [], "wall + background": []}
    per_step = {"wall": [], "cpu": []}
    for r in range(args.repeats):
        tmp = Path(tempfile.mkdtemp(prefix="overhead-"))
        lead = ("bare", "harness")[r % 2]
        try:
            with background_cpu() as spent:
                steps, same = lock_step(
                    {"bare": lambda t, d=tmp: bare(d, t), "harness": lambda t, d=tmp: harness(d, t)},
                    first=lead,
                )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        kept = {name: np.asarray(steps[name][args.warmup :]) for name in steps}
        if {len(k) for k in kept.values()} != {args.steps - args.warmup}:
            raise RuntimeError(
                f"steps timed per arm: { {n: len(s) for n, s in steps.items()} }, not {args.steps}"
            )
        got = {name: {"wall": k[:, 0].mean(), "cpu": k[:, 1].mean()} for name, k in kept.items()}
        for name in arms:
            for m in ("wall", "cpu"):
                arms[name][m].append(got[name][m])
        for i, m in enumerate(per_step):
            ratios[m].append(got["harness"][m] / got["bare"][m])
            per_step[m].extend((kept["harness"][:, i] / kept["bare"][:, i]).tolist())
        background = spent[0] / args.steps
        ratios["wall + background"].append((got["harness"]["wall"] + background) / got["bare"]["wall"])
        line = (
            f"repeat {r + 1:2d} ({lead} first): bare {got['bare']['wall'] * 1e3:.1f} ms/step "
            f"(CPU {got['bare']['cpu'] * 1e3:.1f}), harness {got['harness']['wall'] * 1e3:.1f} ms/step "
            f"(CPU {got['harness']['cpu'] * 1e3:.1f}, background threads {background * 1e3:.2f}); "
            f"ratio wall {ratios['wall'][-1]:.4f}, CPU {ratios['cpu'][-1]:.4f}, "
            f"wall + background {ratios['wall + background'][-1]:.4f}"
            f"{'' if same else '; the arms drew different completions'}"
        )
        print(line, flush=True)
        lines.append(line)
    tail = summary_lines(ratios, arms)
    for m, rs in per_step.items():
        med, lo, hi = median_ci(rs)
        tail.append(
            f"{m:4} time per step pair: median ratio {med:.4f} ({100 * (med - 1):+.2f}%) over {len(rs)} pairs, "
            f"95% bootstrap CI [{lo:.4f}, {hi:.4f}] (pairs of one repeat are not independent)"
        )

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
