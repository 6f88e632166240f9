"""What a local run costs outside its optimizer steps, against another revision, and where it goes.

    python benchmarks/run_overhead.py [--baseline REV] [--runs 8] [--steps 20] [--rounds 2]
    python benchmarks/run_overhead.py --profile [--steps 20]

Side by side (the default): this checkout and a baseline revision (checked out into a temporary git
worktree) each run the same grid through ``python -m harness run`` (the local executor, two runs at
once), in rounds that alternate which side goes first: the findings testbed (``tiny-steps``, 8
prompts x 8 completions a step), ``--runs`` seeds of ``--steps`` steps, evals and samples off, a
checkpoint only at the end. Per run, the time outside its steps is the job's wall time, from
submitit's submission record (``*_submitted.pkl``) to its result file (``*_result.pkl``), minus the
sum of its steps' wall time (``time/step_s``): Python's start, imports, the dataset, the model, the
trainer, the last checkpoint, the end. Prints each side's per-run seconds (median, mean, range) and
the ratio of the medians. Both sides share one model cache, filled from this checkout's shipped
testbed, so neither builds.

``--profile`` times the phases of one run in a fresh process by this checkout's code, as a local
job without the preloaded interpreter runs it: imports, the run's setup, the model, the trainer's
settings, the dataset, the trainer, the steps, and what follows the last step.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

GRID = """\
include: {repo}/ablations/findings.yaml
name: overhead
findings: null
subgrids: null
report: null
grid: {{seed: {seeds}}}
trainer: {{max_steps: {steps}}}
harness: {{eval_steps: 0, samples_steps: 0, checkpoint_steps: {steps}}}
"""


def write_grid(folder: Path, runs: int, steps: int) -> Path:
    path = folder / "overhead.yaml"
    path.write_text(GRID.format(repo=REPO, seeds=list(range(runs)), steps=steps))
    return path


def fill_cache(cache: Path, grid: Path) -> None:
    """The grid's model in ``cache``, as this checkout resolves it (the shipped copy)."""
    from harness.config.grid import expand
    from harness.config.spec import load_grid
    from harness.models.names import resolve_model

    run = expand(load_grid(grid)).runs[0]
    resolve_model(run.model, task=run.task, cache_dir=cache, tiny_spec=run.tiny)


def outside_steps(grid_dir: Path) -> list[float]:
    """Per finished run of ``grid_dir``: job wall seconds minus the sum of its steps' wall seconds."""
    import pandas as pd

    out = []
    for run in sorted((grid_dir / "runs").iterdir()):
        logs = run / "logs"
        submitted = sorted(logs.glob("*_submitted.pkl"))
        results = sorted(logs.glob("*_result.pkl"))
        parts = sorted((run / "metrics").glob("*.parquet"))
        if not (submitted and results and parts):
            continue
        steps = pd.concat([pd.read_parquet(p, columns=["step", "time/step_s"]) for p in parts])
        steps = steps.drop_duplicates("step")
        wall = results[-1].stat().st_mtime - submitted[0].stat().st_mtime
        out.append(wall - float(steps["time/step_s"].sum()))
    return out


def run_side(checkout: Path, grid: Path, results: Path, env: dict[str, str]) -> list[float]:
    cmd = [sys.executable, "-m", "harness", "run", str(grid), "--results", str(results), "--no-report"]
    proc = subprocess.run(
        cmd, cwd=checkout, env={**env, "PYTHONPATH": str(checkout)}, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"run failed in {checkout} (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return outside_steps(results / "overhead")


def side_by_side(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="overhead-bench-"))
    base = tmp / "baseline"
    subprocess.run(["git", "worktree", "add", "--detach", str(base), args.baseline], cwd=REPO, check=True)
    try:
        grid = write_grid(tmp, args.runs, args.steps)
        env = {**os.environ, "GRPO_HARNESS_CACHE": str(tmp / "models")}
        fill_cache(tmp / "models", grid)
        this, other = [], []
        for i in range(args.rounds):
            order = [(REPO, this, "this"), (base, other, "baseline")]
            for checkout, out, name in order if i % 2 == 0 else reversed(order):
                out += run_side(checkout, grid, tmp / f"results-{name}-{i}", env)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=REPO, check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    load = os.getloadavg()[0]
    print(
        f"a local run's seconds outside its steps: {args.runs} runs x {args.rounds} rounds of "
        f"{args.steps} steps each side, 2 at once, findings testbed; load average {load:.2f} at the end"
    )
    for name, xs in (("this checkout", this), (f"baseline {args.baseline}", other)):
        print(
            f"  {name:<22} median {statistics.median(xs):6.2f} s  mean {statistics.mean(xs):6.2f} s  "
            f"(range {min(xs):.2f}-{max(xs):.2f}, {len(xs)} runs)"
        )
    ratio = statistics.median(this) / statistics.median(other)
    print(f"  ratio this/baseline of the medians: {ratio:.3f}")
    return 0


PROFILE = r"""
import json, os, sys, time
import psutil
t = {"process start": psutil.Process().create_time()}
t["imports done"] = time.time()
import harness.train.training as training
t["imports done"] = time.time()
from harness.config.grid import expand
from harness.config.spec import load_grid
from harness.train import phases as phases_module

marks = []
enter = phases_module.RunPhases.enter
def timed_enter(self, kind, text, stoppable=True, say=True):
    marks.append((time.time(), text.split(":")[0]))
    return enter(self, kind, text, stoppable, say)
phases_module.RunPhases.enter = timed_enter

fit = training._fit
def timed_fit(trainer, *a, **k):
    from transformers import TrainerCallback
    class Steps(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == 0:
                marks.append((time.time(), "optimizer steps"))
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == state.max_steps:
                marks.append((time.time(), "after the last step (final checkpoint, metrics, markers)"))
    trainer.add_callback(Steps())
    return fit(trainer, *a, **k)
training._fit = timed_fit

run = expand(load_grid(sys.argv[1])).runs[0]
training.train(run, sys.argv[2], threads=1)
marks.append((time.time(), "end"))
print(json.dumps({"start": t["process start"], "imports": t["imports done"], "marks": marks}))
"""


def profile(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="overhead-profile-"))
    try:
        grid = write_grid(tmp, 1, args.steps)
        env = {**os.environ, "GRPO_HARNESS_CACHE": str(tmp / "models"), "OMP_NUM_THREADS": "1"}
        fill_cache(tmp / "models", grid)
        proc = subprocess.run(
            [sys.executable, "-c", PROFILE, str(grid), str(tmp / "run")],
            cwd=REPO, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        )  # fmt: skip
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-3000:])
        record = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = [
        (
            "Python's start and the harness's training module",
            record["imports"] - record["start"],
        )
    ]
    names = [m[1] for m in record["marks"]]
    times = [m[0] for m in record["marks"]]
    rows.append(("from the imports to the run's first phase", times[0] - record["imports"]))
    rows += [(names[i], times[i + 1] - times[i]) for i in range(len(names) - 1)]
    total = times[-1] - record["start"]
    steps = next(s for n, s in rows if n == "optimizer steps")
    print(f"one cold run of {args.steps} steps (fresh process, 1 thread, findings testbed, evals off):")
    print(f"  {'phase':<66} {'seconds':>8} {'share of outside':>17}")
    for name, seconds in rows:
        share = "" if name == "optimizer steps" else f"{seconds / (total - steps):>16.0%}"
        print(f"  {name:<66} {seconds:>8.2f} {share:>17}")
    print(f"  {'total':<66} {total:>8.2f}")
    print(f"  {'outside the steps':<66} {total - steps:>8.2f}")
    print(
        "  torch is imported in 'setting up', TRL's trainer and config (with transformers' Trainer and\n"
        "  DeepSpeed where installed) in the trainer's settings: what the preloaded interpreter does once"
    )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="HEAD", help="git revision to compare against (default HEAD)")
    ap.add_argument("--runs", type=int, default=8, help="runs per side and round")
    ap.add_argument("--steps", type=int, default=20, help="optimizer steps per run")
    ap.add_argument("--rounds", type=int, default=2, help="rounds (each side once per round)")
    ap.add_argument("--profile", action="store_true", help="time the phases of one cold run instead")
    args = ap.parse_args()
    return profile(args) if args.profile else side_by_side(args)


if __name__ == "__main__":
    raise SystemExit(main())
