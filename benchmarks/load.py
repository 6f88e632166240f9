"""Timings under load: the smoke grid trained on a quiet machine and beside CPU hogs, the speedups of
both side by side.

Arms alternate (quiet, hogged, quiet, hogged, ...) so that drift of the machine hits both. Each arm
is a ``grpo-harness run`` of the grid (its profile) into a folder of its own, with one model cache
for all of them (built before the first arm, outside any timing). A hogged arm runs ``--hogs``
busy-loop processes beside it. For every arm it prints, per variant against the baseline:

* the speedup from wall time (``time/step_s``) and from CPU time (``time/step_cpu_s``), over every
  step, each with a 95% bootstrap interval over the steps of the runs;
* the share of steps the run recorded as loaded (:func:`analysis.timing.loaded_steps`);
* how many harness runs shared the machine with the variant's run (the report's "runs at once");
* what the report's timing table says (:func:`analysis.timing.timing_table` grouped as the report
  groups it, by variant and runs at once): its speedup, or "left out" (loaded, or no baseline
  that ran alike).

The quiet arms' spread is the range of their speedups (and bootstrap intervals); a hogged arm holds
when every speedup its timing table reports lies within that spread. Writes the printed text to
``--out`` with the command, date, machine and commit at the top.

    python benchmarks/load.py [--grid ablations/smoke.yaml] [--profile quick] [--rounds 2] [--hogs 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _spin() -> None:  # pragma: no cover - a hog, killed by its parent
    while True:
        pass


def run_arm(args, folder: Path, hogs: int) -> float:
    """Train the grid into ``folder`` with ``hogs`` busy loops beside it; returns wall seconds."""
    procs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(hogs)]
    for p in procs:
        p.start()
    cmd = [sys.executable, "-m", "harness", "run", args.grid, "--results", str(folder), "--no-report"]
    cmd += ["--profile", args.profile] if args.profile else []
    cmd += [f"-o{o}" for o in getattr(args, "override", [])]
    env = {**os.environ, "GRPO_HARNESS_CACHE": str(Path(args.work) / "models")}
    t0 = time.perf_counter()
    try:
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    finally:
        for p in procs:
            p.kill()
            p.join()
    return time.perf_counter() - t0


def _bootstrap(a: np.ndarray, b: np.ndarray, rng: np.random.Generator, n: int = 2000) -> tuple[float, float]:
    """95% percentile interval of ``mean(b) / mean(a)`` resampling the steps of each (with replacement)."""
    ia = rng.integers(0, len(a), (n, len(a)))
    ib = rng.integers(0, len(b), (n, len(b)))
    ratios = b[ib].mean(axis=1) / a[ia].mean(axis=1)
    lo, hi = np.quantile(ratios, [0.025, 0.975])
    return float(lo), float(hi)


def arm_rows(grid_dir: Path, by: str, baseline: str, seed: int) -> list[dict]:
    """Per variant of one arm: speedups from wall and CPU time with intervals, the loaded share and
    what the timing table reports."""
    from analysis import timing
    from analysis.load import load
    from analysis.report import AT_ONCE, runs_at_once
    from harness import layout

    df = load(grid_dir)
    df[by] = df[by].astype(str)
    # as the report does: runs compared only with runs that shared the machine alike
    at_once = runs_at_once(df)
    df[AT_ONCE] = df[layout.RUN_ID].astype(str).map(at_once).fillna("unknown")
    table = timing.timing_table(df, by=[by, AT_ONCE], baseline=baseline, same=[AT_ONCE]).frame
    loaded = timing.loaded_steps(df)
    rng = np.random.default_rng(seed)
    base = df[df[by] == baseline]
    rows = []
    for variant, part in df.groupby(by, sort=True):
        row = {"variant": variant, "loaded": float(loaded[part.index].mean())}
        row["at_once"] = "/".join(sorted(set(part[AT_ONCE])))
        for name, col in (("wall", layout.STEP_WALL_S), ("cpu", layout.STEP_CPU_S)):
            a, b = base[col].to_numpy(float), part[col].to_numpy(float)
            row[name] = float(a.mean() / b.mean())
            row[f"{name}_ci"] = _bootstrap(b, a, rng)  # speedup = baseline time / variant time
        hit = table[table[by].astype(str) == variant]
        row["reported"] = float(hit["speedup"].iloc[0]) if len(hit) else float("nan")
        rows.append(row)
    return rows


def _fmt(rows: list[dict]) -> list[str]:
    out = [
        f"  {'variant':8} {'wall speedup [95% CI]':>26} {'CPU speedup [95% CI]':>26} {'loaded':>7} "
        f"{'at once':>7} {'reported':>9}"
    ]
    for r in rows:
        wall = f"{r['wall']:.3f} [{r['wall_ci'][0]:.3f}, {r['wall_ci'][1]:.3f}]"
        cpu = f"{r['cpu']:.3f} [{r['cpu_ci'][0]:.3f}, {r['cpu_ci'][1]:.3f}]"
        rep = "left out" if np.isnan(r["reported"]) else f"{r['reported']:.3f}"
        out.append(
            f"  {r['variant']:8} {wall:>26} {cpu:>26} {r['loaded']:>7.0%} {r.get('at_once', ''):>7} {rep:>9}"
        )
    return out


def verdict(arms: list[tuple[str, list[dict]]], baseline: str) -> list[str]:
    """Whether every speedup a hogged arm's timing table reports lies within the quiet arms' spread
    (the union of their CPU-time bootstrap intervals and their reported values)."""
    quiet = [rows for name, rows in arms if name.startswith("quiet")]
    lines = [
        "",
        "Quiet spread (union of the quiet arms' CPU-time 95% intervals) and the hogged arms' reports:",
    ]
    ok = True
    for variant in sorted({r["variant"] for rows in quiet for r in rows} - {baseline}):
        q = [r for rows in quiet for r in rows if r["variant"] == variant]
        lo, hi = min(r["cpu_ci"][0] for r in q), max(r["cpu_ci"][1] for r in q)
        wall = [r["wall"] for rows in quiet for r in rows if r["variant"] == variant]
        for name, rows in arms:
            if name.startswith("hogged"):
                r = next(r for r in rows if r["variant"] == variant)
                rep = r["reported"]
                inside = np.isnan(rep) or lo <= rep <= hi
                ok &= bool(inside)
                shown = "left out" if np.isnan(rep) else f"{rep:.3f}"
                lines.append(
                    f"  {variant}: quiet CPU spread [{lo:.3f}, {hi:.3f}] (quiet wall speedups "
                    f"{', '.join(f'{w:.3f}' for w in wall)}); {name} reports {shown}, wall {r['wall']:.3f}, "
                    f"CPU {r['cpu']:.3f}: {'holds' if inside else 'OUTSIDE the quiet spread'}"
                )
    lines.append(f"verdict: {'every reported speedup holds' if ok else 'a reported speedup is outside'}")
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="ablations/smoke.yaml")
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--rounds", type=int, default=2, help="pairs of arms (quiet, hogged)")
    ap.add_argument("--hogs", type=int, default=2, help="busy-loop processes beside a hogged arm")
    ap.add_argument("-o", "--override", action="append", default=[], help="passed to grpo-harness run")
    ap.add_argument("--by", default="loss_type")
    ap.add_argument("--baseline", default="grpo")
    ap.add_argument("--work", default="/tmp/grpo-harness-load-bench", help="folder of the arms' results")
    ap.add_argument("--analyze-only", action="store_true", help="read the arms already in --work")
    ap.add_argument("--out", default=str(ROOT / "results/reference/benchmarks/load.txt"))
    args = ap.parse_args()
    lines = header(sys.argv)
    arms = []
    for k in range(args.rounds):
        for name, hogs in (("quiet", 0), ("hogged", args.hogs)):
            label = f"{name}-{k + 1}"
            folder = Path(args.work) / label
            took = None
            if not args.analyze_only:
                subprocess.run(["rm", "-rf", str(folder)], check=True)
                took = run_arm(args, folder, hogs)
            grid_dir = next(p for p in folder.iterdir() if (p / "runs").is_dir())
            rows = arm_rows(grid_dir, args.by, args.baseline, seed=k)
            arms.append((label, rows))
            print(
                f"{label} ({hogs} hogs{f', {took:.0f} s' if took else ''}):",
                *_fmt(rows),
                sep="\n",
                flush=True,
            )
            lines += [f"{label} ({hogs} hogs{f', {took:.0f} s' if took else ''}):", *_fmt(rows)]
    tail = verdict(arms, args.baseline)
    print(*tail, sep="\n")
    lines += tail
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
