"""Speed of the analysis path on synthetic results in the real on-disk layout.

Three measurements, each beside a baseline timed in the same process:

1. load + aggregate: ``analysis.load(grid, columns=["reward"])`` then the mean reward curve with
   its t band per (loss type, step), over RUNS runs × STEPS steps written by
   ``harness.train.metrics.MetricsWriter`` (target <= 1 s for 1,000 × 1,000 on 2 cores), against a
   per-file loop of ``pd.read_parquet`` + ``json.load`` + ``pd.concat`` + ``groupby``.
2. the reward-curve figure for 8 variants × 5 seeds × 2,000 steps (aggregate, draw, render to
   PNG in memory; target <= 1 s), against ``seaborn.lineplot(errorbar=("ci", 95))`` on the same
   data. seaborn bootstraps every x value separately, so its time is linear in the number of
   steps: ``--seaborn-subsample F`` times it on a fraction F of the steps and extrapolates,
   ``--skip-seaborn`` leaves it out.
3. the whole report's numbers for the same RUNS × STEPS grid: ``analysis.report.load_report_inputs``
   (every column, run states) + ``compute_report`` (every curve, band, w_seq band, table, final
   score and performance profile the report draws or writes, without rendering; target <= 2 s),
   beside [1]'s load + one reward curve timed in the same process.

Usage::

    python benchmarks/analysis.py [--runs 1000] [--steps 1000] [--data DIR] [--repeat 3]
                                  [--seaborn-subsample 0.1 | --skip-seaborn]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from analysis import load  # noqa: E402
from analysis.aggregate import aggregate  # noqa: E402
from analysis.curves import frame_curve_figure  # noqa: E402
from analysis.load import flatten_config  # noqa: E402
from analysis.panels import Facets  # noqa: E402
from analysis.stats import t_interval_from_moments  # noqa: E402
from harness import layout  # noqa: E402
from harness.layout import WSEQ_COLUMNS, atomic_write_json  # noqa: E402
from harness.train.metrics import MetricsWriter  # noqa: E402

LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "gspo", "vespo", "cispo", "sapo")
WSEQ_STATS = WSEQ_COLUMNS


def _config(loss_type: str, seed: int, beta: float) -> dict:
    return {
        "task": {"name": "countdown", "max_prompt_len": 256, "eval_every": 50},
        "model": {"name": "Qwen/Qwen2.5-0.5B-Instruct", "dtype": "bfloat16"},
        "trainer": {
            "loss_type": loss_type,
            "seed": seed,
            "beta": beta,
            "num_iterations": 1,
            "epsilon": 0.2,
            "learning_rate": 1e-6,
            "num_generations": 8,
            "per_device_train_batch_size": 8,
            "gradient_accumulation_steps": 4,
            "max_completion_length": 256,
            "temperature": 1.0,
            "report_to": [],
        },
        "executor": {"name": "local"},
    }


def write_synthetic_grid(grid_dir: Path, runs: int, steps: int, seed: int = 0) -> float:
    """Write ``runs`` runs × ``steps`` steps through MetricsWriter; returns seconds taken."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    run_ids = []
    step = np.arange(1, steps + 1)
    for i in range(runs):
        loss_type = LOSS_TYPES[i % len(LOSS_TYPES)]
        s = i // len(LOSS_TYPES)
        beta = 0.04 if i % 3 == 0 else 0.0
        run_id = f"{loss_type}-s{s:03d}-b{beta:g}"
        run_ids.append(run_id)
        rdir = layout.run_dir(grid_dir, run_id)
        atomic_write_json(
            rdir / layout.CONFIG_FILE,
            {
                "run_id": run_id,
                "grid": grid_dir.name,
                "config": _config(loss_type, s, beta),
                "varying": {"trainer.loss_type": loss_type, "seed": s},
            },
        )
        step_s = 2.0 + 0.2 * rng.random(steps)
        gen = rng.integers(2000, 4000, steps).astype(np.float64)
        cols = {
            "reward": np.clip(0.2 + 0.5 * step / steps + 0.1 * rng.standard_normal(steps), 0, 1),
            "reward_std": rng.random(steps),
            "rewards/correctness/mean": rng.random(steps),
            "loss": rng.standard_normal(steps),
            "entropy": 1.0 - 0.5 * step / steps,
            "clip_ratio/region_mean": 0.01 * rng.random(steps),
            "clip_ratio/low_mean": 0.005 * rng.random(steps),
            "clip_ratio/high_mean": 0.005 * rng.random(steps),
            "completions/mean_length": gen / 8,
            "step_time": step_s * 0.7,
            layout.ELAPSED_S: np.cumsum(step_s),
            layout.STEP_WALL_S: step_s,
            layout.TOKENS_GENERATED: gen,
            layout.TOKENS_TRAINED: gen * 0.95,
            layout.TOKENS_GENERATED_TOTAL: np.cumsum(gen),
            layout.PEAK_MEMORY_MB: np.full(steps, 20_000.0),
            **{name: rng.random(steps) for name in WSEQ_STATS},
        }
        if beta > 0:
            cols["kl"] = 0.01 * rng.random(steps)
        if loss_type == "vespo":
            cols["vespo/phi_seq_mean"] = rng.random(steps)
        cols[layout.OFF_POLICY] = (step % 2 == 0).astype(np.float64)  # num_iterations = 2
        cols[layout.REUSE_INDEX] = 1.0 + (step % 2 == 0)
        cols[layout.CONCURRENT_RUNS] = np.full(steps, 1.0 + i % 2)
        cols["frac_reward_zero_std"] = 0.3 * rng.random(steps)
        cols["grad_norm"] = 1.0 + rng.random(steps)
        names = list(cols)
        matrix = np.column_stack([cols[n] for n in names]).tolist()
        writer = MetricsWriter(rdir, run_id, flush_every=steps)
        for k in range(steps):
            row = dict(zip(names, matrix[k], strict=True))
            row[layout.STEP] = k + 1
            if (k + 1) % 50 == 0:
                row[layout.EVAL_ACCURACY] = float(rng.random())
            writer.append(row)
        writer.compact()
        atomic_write_json(rdir / layout.DONE_FILE, {"run_id": run_id, "steps": steps, "seconds": 1.0})
        if (i + 1) % 100 == 0:
            print(f"  wrote {i + 1}/{runs} runs ({time.perf_counter() - t0:.0f} s)", flush=True)
    atomic_write_json(
        grid_dir / layout.GRID_FILE,
        {
            "name": grid_dir.name,
            "source": "synthetic",
            "run_ids": run_ids,
            "varying": ["trainer.loss_type", "seed"],
        },
    )
    return time.perf_counter() - t0


def load_and_aggregate(grid_dir: Path) -> pd.DataFrame:
    """The measured path: projected load, then the t band per (loss type, step)."""
    df = load(grid_dir, columns=["reward"])
    return aggregate(df, "reward", by=["loss_type"])


def report_numbers(grid_dir: Path) -> object:
    """Everything the report computes, without drawing: load (all columns), states, compute."""
    from analysis import report

    grid_info = json.loads((grid_dir / layout.GRID_FILE).read_text())
    settings = report.ReportSettings.merged(grid_info.get("report"), target=0.5)
    inputs = report.load_report_inputs(grid_dir, settings=settings)
    return report.compute_report(inputs, settings, title=grid_dir.name)


def naive_load_and_aggregate(grid_dir: Path) -> pd.DataFrame:
    """The obvious script: every file with pandas, config joined per run, one concat, a groupby."""
    frames = []
    for rdir in sorted((grid_dir / layout.RUNS_DIR).iterdir()):
        with open(rdir / layout.CONFIG_FILE) as f:
            cfg = flatten_config(json.load(f)["config"])
        mdir = rdir / layout.METRICS_DIR
        files = (
            [mdir / layout.COMPACT_FILE]
            if (mdir / layout.COMPACT_FILE).exists()
            else sorted(mdir.glob("part-*"))
        )
        for path in files:
            part = pd.read_parquet(path)
            for k, v in cfg.items():
                part[k] = v
            frames.append(part)
    df = pd.concat(frames, ignore_index=True)
    g = df.groupby(["trainer.loss_type", "step"])["reward"].agg(["mean", "std", "count"]).reset_index()
    g["lo"], g["hi"] = t_interval_from_moments(g["mean"], g["std"], g["count"])
    return g


def curve_frame(variants: int = 8, seeds: int = 5, steps: int = 2000, seed: int = 0) -> pd.DataFrame:
    """In-memory frame shaped like ``load``'s: variants × seeds runs of ``steps`` reward values."""
    rng = np.random.default_rng(seed)
    step = np.arange(1, steps + 1)
    parts = []
    for v in range(variants):
        for s in range(seeds):
            parts.append(
                pd.DataFrame(
                    {
                        layout.RUN_ID: f"{LOSS_TYPES[v % len(LOSS_TYPES)]}-{v}-s{s}",
                        layout.STEP: step,
                        "reward": 0.2
                        + 0.4 * (1 + v / variants) * step / steps
                        + 0.05 * rng.standard_normal(steps),
                        "loss_type": LOSS_TYPES[v % len(LOSS_TYPES)]
                        + ("" if v < len(LOSS_TYPES) else f"-{v}"),
                    }
                )
            )
    df = pd.concat(parts, ignore_index=True)
    df[layout.RUN_ID] = df[layout.RUN_ID].astype("category")
    df["loss_type"] = df["loss_type"].astype("category")
    return df


def _render_png(fig) -> int:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=150)
    return buf.tell()


def our_curve(df: pd.DataFrame) -> None:
    fig, _ = frame_curve_figure(df, "reward", Facets(hue="loss_type"))
    _render_png(fig)


def seaborn_curve(df: pd.DataFrame) -> None:
    import seaborn as sns
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3.25, 2.0), layout="constrained")
    ax = fig.subplots()
    sns.lineplot(data=df, x="step", y="reward", hue="loss_type", errorbar=("ci", 95), ax=ax)
    _render_png(fig)


def _timed(fn, *args, repeat: int = 1) -> list[float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return times


def _fmt(times: list[float]) -> str:
    return f"best {min(times):.3f} s, median {float(np.median(times)):.3f} s over {len(times)}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--data", type=Path, default=None, help="reuse or keep the synthetic grid here")
    p.add_argument("--repeat", type=int, default=3, help="timed repetitions of each fast measurement")
    p.add_argument(
        "--seaborn-subsample", type=float, default=0.1, help="fraction of steps seaborn is timed on"
    )
    p.add_argument("--skip-seaborn", action="store_true")
    p.add_argument("--skip-load", action="store_true")
    args = p.parse_args(argv)

    print(f"cpus: {os.cpu_count()}, load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if not args.skip_load:
        tmp = None
        if args.data is not None:
            grid = args.data
        else:
            tmp = Path(tempfile.mkdtemp(prefix="analysis-bench-"))
            grid = tmp / "synthetic"
        try:
            if not (grid / layout.GRID_FILE).exists():
                print(f"writing {args.runs} runs x {args.steps} steps with MetricsWriter to {grid} ...")
                secs = write_synthetic_grid(grid, args.runs, args.steps)
                print(f"  written in {secs:.1f} s")
            n_files = sum(1 for _ in grid.glob(f"{layout.RUNS_DIR}/*/{layout.METRICS_DIR}/*.parquet"))
            print(f"\n[1] load + aggregate ({n_files} parquet files)")
            load_and_aggregate(grid)  # warm the page cache and imports, as a second report would
            cpu0 = time.process_time()
            ours = _timed(load_and_aggregate, grid, repeat=args.repeat)
            cpu = (time.process_time() - cpu0) / args.repeat
            print(f"  analysis.load(columns=['reward']) + aggregate: {_fmt(ours)} (CPU {cpu:.3f} s per call)")
            naive = _timed(naive_load_and_aggregate, grid)
            print(f"  naive pd.read_parquet loop + concat + groupby:  {naive[0]:.3f} s")
            print(f"  ratio naive / ours: {naive[0] / min(ours):.1f}x   (target: ours <= 1 s)")
            print(f"\n[3] the whole report's numbers ({args.runs} runs x {args.steps} steps), no rendering")
            report_numbers(grid)  # warm, as [1]
            whole = _timed(report_numbers, grid, repeat=args.repeat)
            print(f"  load_report_inputs + compute_report: {_fmt(whole)}   (target <= 2 s)")
            print(
                f"  beside [1] (load + one reward curve) today: {min(ours):.3f} s; "
                f"ratio whole report / [1]: {min(whole) / min(ours):.1f}x"
            )
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    df = curve_frame()
    print(f"\n[2] reward-curve figure, 8 variants x 5 seeds x 2000 steps ({len(df)} rows), rendered to PNG")
    our_curve(df)
    ours = _timed(our_curve, df, repeat=args.repeat)
    print(f"  analysis.curves.frame_curve_figure (t band): {_fmt(ours)}   (target <= 1 s)")
    if args.skip_seaborn:
        print("  seaborn: skipped (--skip-seaborn)")
        return 0
    frac = min(max(args.seaborn_subsample, 1e-3), 1.0)
    keep = max(1, round(2000 * frac))
    steps = np.unique(np.linspace(1, 2000, keep).round().astype(int))
    sub = df[df[layout.STEP].isin(steps)]
    t_sns = _timed(seaborn_curve, sub)[0]
    scale = 2000 / len(steps)
    if len(steps) < 2000:
        print(
            f"  seaborn lineplot(errorbar=('ci', 95)) on {len(steps)} of 2000 steps ({100 / scale:.0f}%): "
            f"{t_sns:.2f} s; extrapolated to all steps (linear in steps): {t_sns * scale:.1f} s"
        )
    else:
        print(f"  seaborn lineplot(errorbar=('ci', 95)): {t_sns:.2f} s")
    print(
        f"  ratio seaborn / ours: {t_sns * scale / min(ours):.0f}x" + (" (extrapolated)" if scale > 1 else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
