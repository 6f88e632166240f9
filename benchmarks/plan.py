"""`grpo-harness plan` of a 1,000-run grid with a warm verdict memo, against another revision.

Times the whole CLI (``python -m harness plan GRID``, a fresh process each time: imports, YAML,
expansion into typed runs, TRL's GRPOConfig verdict for every cell read from the memo, the rule
table, the printed table) for this checkout and, side by side, for a baseline revision of the same
repository checked out into a temporary git worktree. The two alternate (A B A B ...) so that drift
of the machine hits both; one warm-up run of each fills the shared memo first. Prints each side's
median and range in seconds and the median of the pairwise ratios this/baseline.

    python benchmarks/plan.py [--runs 1000] [--repeats 7] [--baseline 80cf2b5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _grid(folder: Path, runs: int) -> Path:
    """The benchmark grid: the ready base settings, four loss types x ``runs // 4`` seeds."""
    grid = folder / "big.yaml"
    grid.write_text(
        f"include: {REPO}/ablations/base.yaml\nname: big\n"
        f"grid:\n  loss_type: [grpo, dapo, vespo, bnpo]\n  seed: {list(range(runs // 4))}\n"
    )
    return grid


def _plan_seconds(checkout: Path, grid: Path, env: dict[str, str]) -> float:
    """Wall seconds of one ``python -m harness plan`` run from ``checkout``.

    Raises:
        SystemExit: the command failed (its output is shown).
    """
    cmd = [sys.executable, "-m", "harness", "plan", str(grid), "--results", str(grid.parent / "results")]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=checkout, env={**env, "PYTHONPATH": str(checkout)}, capture_output=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(
            f"plan failed in {checkout} (exit {proc.returncode}):\n{proc.stderr.decode()[-2000:]}"
        )
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=7, help="timed runs of each side")
    ap.add_argument("--baseline", default="HEAD", help="git revision to compare against (default HEAD)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="plan-bench-"))
    base = tmp / "baseline"
    subprocess.run(["git", "worktree", "add", "--detach", str(base), args.baseline], cwd=REPO, check=True)
    try:
        grid = _grid(tmp, args.runs)
        env = {**os.environ, "GRPO_HARNESS_VERDICTS": str(tmp / "verdicts")}
        for checkout in (REPO, base):  # warm-up: fills the memo, loads the files into the page cache
            _plan_seconds(checkout, grid, env)
        this, other = [], []
        for i in range(args.repeats):
            order = [(REPO, this), (base, other)]
            for checkout, out in order if i % 2 == 0 else reversed(order):
                out.append(_plan_seconds(checkout, grid, env))
        ratios = [a / b for a, b in zip(this, other, strict=True)]
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=REPO, check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"grpo-harness plan, {args.runs} runs, warm verdict memo, fresh process, {args.repeats} repeats:")
    print(
        f"  this checkout:       median {statistics.median(this):.3f} s  (range {min(this):.3f}-{max(this):.3f})"
    )
    print(
        f"  baseline {args.baseline}: median {statistics.median(other):.3f} s  "
        f"(range {min(other):.3f}-{max(other):.3f})"
    )
    print(
        f"  ratio this/baseline: median {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
