"""Small writers of results folders in the layout of ``harness.layout``, for the analysis tests.

Written with pyarrow directly so the tests pin the on-disk contract itself, not a writer's
behaviour.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from harness import layout


def write_metrics(path: Path, run_id: str, columns: Mapping[str, Sequence[Any]]) -> Path:
    """One parquet file: ``run_id`` string, ``step`` int64, every other column float64."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = len(columns[layout.STEP])
    data = {
        layout.RUN_ID: pa.array([run_id] * n, pa.string()),
        layout.STEP: pa.array(columns[layout.STEP], pa.int64()),
    }
    for name, values in columns.items():
        if name != layout.STEP:
            data[name] = pa.array([None if v is None else float(v) for v in values], pa.float64())
    pq.write_table(pa.table(data), path)
    return path


def write_run(
    grid_dir: Path,
    run_id: str,
    *,
    config: Mapping[str, Any],
    varying: Mapping[str, Any],
    columns: Mapping[str, Sequence[Any]] | None = None,
    parts: Sequence[Mapping[str, Sequence[Any]]] | None = None,
    grid: str = "toy",
    state: str = "done",
    marker: Mapping[str, Any] | None = None,
) -> Path:
    """A run folder with ``config.json``, either a compacted file (``columns``) or ``parts``, and
    the end marker of ``state``: "done" (DONE with the last step), "diverged" (DIVERGED), "failed"
    (FAILED) or "stopped" (none). ``marker`` replaces the marker's content."""
    rdir = layout.run_dir(grid_dir, run_id)
    rdir.mkdir(parents=True, exist_ok=True)
    (rdir / layout.CONFIG_FILE).write_text(
        json.dumps({"run_id": run_id, "grid": grid, "config": config, "varying": dict(varying)})
    )
    mdir = rdir / layout.METRICS_DIR
    if columns is not None:
        write_metrics(mdir / layout.COMPACT_FILE, run_id, columns)
    for k, part in enumerate(parts or []):
        write_metrics(mdir / f"{layout.PART_PREFIX}{k + 1:06d}.parquet", run_id, part)
    steps = [s for cols in [columns or {}, *(parts or [])] for s in cols.get(layout.STEP, [])]
    last = int(max(steps)) if steps else 0
    files = {"done": layout.DONE_FILE, "diverged": layout.DIVERGED_FILE, "failed": layout.FAILED_FILE}
    default = {
        "done": {"run_id": run_id, "steps": last, "seconds": 1.0},
        "diverged": {"run_id": run_id, "step": last},
        "failed": {"error": "RuntimeError: boom", "log": ""},
    }
    if state in files:
        (rdir / files[state]).write_text(json.dumps(dict(marker) if marker is not None else default[state]))
    elif state != "stopped":
        raise ValueError(f"unknown state {state!r}")
    return rdir


def write_grid(
    grid_dir: Path,
    run_ids: Sequence[str],
    varying: Sequence[str],
    name: str = "toy",
    runs: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """``grid.json`` listing the planned runs (and, given ``runs``, each run's varying values)."""
    grid_dir.mkdir(parents=True, exist_ok=True)
    (grid_dir / layout.GRID_FILE).write_text(
        json.dumps(
            {
                "name": name,
                "source": f"ablations/{name}.yaml",
                "run_ids": list(run_ids),
                "varying": list(varying),
                **({"runs": {k: dict(v) for k, v in runs.items()}} if runs is not None else {}),
            }
        )
    )


def config_for(
    loss_type: str | None, seed: int, beta: float = 0.0, task: str = "countdown"
) -> dict[str, Any]:
    """A nested resolved config of the shape the harness writes."""
    return {
        "task": {"name": task, "max_prompt_len": 256},
        "model": "tiny",
        "trainer": {"loss_type": loss_type, "seed": seed, "beta": beta, "num_iterations": 1, "epsilon": 0.2},
        "report_to": [],
    }


def synthetic_grid(
    grid_dir: Path,
    variants: Sequence[str | None] = ("grpo", "dapo"),
    seeds: Sequence[int] = (0, 1, 2),
    steps: int = 30,
    *,
    slopes: Mapping[str | None, float] | None = None,
    extra: Mapping[str | None, Sequence[str]] | None = None,
) -> list[str]:
    """A grid of ``variants × seeds`` runs with linear reward curves plus seeded noise.

    Every run logs reward, timing and token columns and w_seq quantiles; ``extra[variant]`` names
    additional metrics (e.g. ``kl``) logged only by that variant. Returns the run ids.
    """
    slopes = slopes or {}
    extra = extra or {}
    run_ids = []
    for v in variants:
        for s in seeds:
            rid = f"{v or 'none'}-s{s}"
            rng = np.random.default_rng(zlib.crc32(f"{v}-{s}".encode()))  # the same data in every process
            step = np.arange(1, steps + 1)
            slope = slopes.get(v, 0.01)
            step_s = 1.0 + 0.1 * rng.random(steps)
            gen = 1000.0 + rng.integers(0, 100, steps)
            cols: dict[str, Any] = {
                layout.STEP: step,
                "reward": 0.1 + slope * step + 0.01 * rng.standard_normal(steps),
                "entropy": 1.0 - 0.01 * step,
                "completions/mean_length": 100 + step,
                "step_time": step_s * 0.8,
                layout.STEP_WALL_S: step_s,
                layout.ELAPSED_S: np.cumsum(step_s),
                layout.TOKENS_GENERATED: gen,
                layout.TOKENS_TRAINED: gen * 0.9,
                layout.TOKENS_GENERATED_TOTAL: np.cumsum(gen),
                layout.PEAK_MEMORY_MB: np.full(steps, 500.0 + s),
                "w_seq/p05": np.full(steps, 0.5),
                "w_seq/p50": np.ones(steps),
                "w_seq/p95": np.full(steps, 2.0),
                layout.EVAL_ACCURACY: [0.1 * s if k % 10 == 0 else None for k in step],
            }
            for name in extra.get(v, ()):
                cols[name] = rng.random(steps)
            write_run(
                grid_dir,
                rid,
                config=config_for(v, s),
                varying={"trainer.loss_type": v, "seed": s},
                columns=cols,
            )
            run_ids.append(rid)
    write_grid(grid_dir, run_ids, ["trainer.loss_type", "seed"])
    return run_ids


def md_rows(md: str) -> list[list[str]]:
    """The cells of each pipe-table line of a markdown text (``\\|`` kept escaped), stripped of
    their padding; other lines left out."""
    return [
        [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        for line in md.splitlines()
        if line.startswith("|")
    ]


def write_start_eval(grid_dir: Path, run_id: str, values: Mapping[str, float]) -> Path:
    """The run's ``eval_start.json``: the starting policy's evals (``eval/accuracy``, the sampled
    ``eval/sampled_accuracy`` and ``eval/pass@k``), as the recorder writes it before step 1."""
    path = layout.run_dir(grid_dir, run_id) / layout.START_EVAL_FILE
    path.write_text(json.dumps({"step": 0, **dict(values), "seconds": 1.0}))
    return path


def eval_steps_run(
    grid_dir: Path,
    run_id: str,
    *,
    loss_type: str,
    seed: int,
    evals: Mapping[int, Mapping[str, float]],
    steps: int = 20,
    columns: Mapping[str, Sequence[Any]] | None = None,
    state: str = "done",
    harness: Mapping[str, Any] | None = None,
) -> Path:
    """A run of ``steps`` steps logging reward every step and, on the steps of ``evals``
    (``{step: {column: value}}``), those eval columns (NaN on the other steps); ``columns`` adds
    per-step columns, ``harness`` the run's ``harness`` settings."""
    step = list(range(1, steps + 1))
    cols: dict[str, Any] = {layout.STEP: step, "reward": [0.01 * k for k in step], **dict(columns or {})}
    for name in dict.fromkeys(c for values in evals.values() for c in values):
        cols[name] = [evals.get(k, {}).get(name) for k in step]
    config = config_for(loss_type, seed)
    if harness is not None:
        config["harness"] = dict(harness)
    return write_run(
        grid_dir,
        run_id,
        config=config,
        varying={"trainer.loss_type": loss_type, "seed": seed},
        columns=cols,
        state=state,
    )


def write_dose_grid(
    grid_dir: Path,
    values: Sequence[float] = (0.2, 0.28, 0.4, 0.8),
    seeds: int = 3,
    *,
    slope: float = 0.2,
    noise: float = 0.01,
    steps: int = 20,
    scale: str = "linear",
    direction: str = "higher",
    key: str = "trainer.epsilon_high",
) -> dict[str, list[str]]:
    """A dose-response grid: ``values`` x ``seeds`` runs of ``steps`` steps whose entropy over the
    second half is ``slope`` times the value (or its natural log, ``scale="log"``) above a common
    curve, plus a seed's offset of ``noise`` times a fixed draw; ``eval/accuracy`` every 5 steps
    and ``eval_start.json`` (0.1). ``grid.json`` records one dose-response finding, ``D``, with
    each level's run ids, which are returned."""
    rng = np.random.default_rng(0)
    offsets = noise * rng.standard_normal((len(values), seeds))
    arms: dict[str, list[str]] = {}
    runs = {}
    for i, v in enumerate(values):
        x = math.log(v) if scale == "log" else v
        label = json.dumps(v)
        for s in range(seeds):
            rid = f"eh{v}-s{s}"
            step = np.arange(1, steps + 1)
            entropy = 1.0 - 0.01 * step + (slope * x + offsets[i, s]) * (step > steps // 2)
            acc = [0.2 + 0.01 * k + 0.1 * x if k % 5 == 0 else None for k in step]
            trainer = {"loss_type": "dapo", "seed": s, "num_iterations": 4, key.split(".")[-1]: v}
            write_run(
                grid_dir,
                rid,
                config={"task": {"name": "chain_sum"}, "model": "tiny", "trainer": trainer},
                varying={key: v, "seed": s},
                columns={
                    layout.STEP: step,
                    "entropy": entropy,
                    "reward": 0.1 + 0.01 * step,
                    "eval/accuracy": acc,
                },
            )
            write_start_eval(grid_dir, rid, {"eval/accuracy": 0.1})
            arms.setdefault(label, []).append(rid)
            runs[rid] = {key: v, "seed": s}
    finding = {
        "claim": "Token entropy rises with the upper clip.",
        "paper": "DAPO, arXiv:2503.14476, §3.1",
        "metric": "entropy",
        "window": [0.5, 1.0],
        "direction": direction,
        "scaled": "",
        "off_policy_only": False,
        "dose": {"key": key, "values": list(values), "scale": scale},
        "select": {"trainer.num_iterations": 4},
        "arms": arms,
    }
    grid_dir.mkdir(parents=True, exist_ok=True)
    (grid_dir / layout.GRID_FILE).write_text(
        json.dumps(
            {
                "name": grid_dir.name,
                "source": "g.yaml",
                "run_ids": list(runs),
                "varying": [key, "seed"],
                "runs": runs,
                "report": {"hue": [key]},
                "findings": {"D": finding},
            }
        )
    )
    return arms


def write_measures_grid(grid_dir, *, seeds: int = 3):
    """Two arms (grpo / dapo) x ``seeds`` runs of 20 steps with eval/accuracy every 5 steps and an
    eval_start.json per run (0.2); the dapo runs reach grpo's final level at step 10, 10 and 15,
    the grpo runs at 15, 20 or never. Findings: T (to_target, the baseline's final level), S (from_start over dapo's runs)."""
    arms: dict[str, list[str]] = {"baseline": [], "variant": []}
    curves = {
        "baseline": [[0.2, 0.4, 0.6, 0.6], [0.3, 0.4, 0.5, 0.6], [0.2, 0.3, 0.5, 0.55]],
        "variant": [[0.3, 0.6, 0.7, 0.7], [0.4, 0.6, 0.6, 0.7], [0.3, 0.5, 0.7, 0.75]],
    }
    for arm, loss in (("baseline", "grpo"), ("variant", "dapo")):
        for s in range(seeds):
            rid = f"{loss}-s{s}"
            step = np.arange(1, 21)
            acc = [curves[arm][s][k // 5 - 1] if k % 5 == 0 else None for k in step]
            cfg = {
                "task": {"name": "chain_sum"},
                "model": "tiny",
                "trainer": {"loss_type": loss, "seed": s, "max_steps": 20},
            }
            rdir = write_run(
                grid_dir,
                rid,
                config=cfg,
                varying={"trainer.loss_type": loss, "seed": s},
                columns={
                    layout.STEP: step,
                    "reward": 0.1 + 0.01 * step,
                    layout.EVAL_ACCURACY: acc,
                    layout.TOKENS_GENERATED_TOTAL: 100.0 * step,
                },
            )
            (rdir / layout.START_EVAL_FILE).write_text(
                json.dumps({"step": 0, layout.EVAL_ACCURACY: 0.2, "seconds": 1.0})
            )
            arms[arm].append(rid)
    common = {"paper": "p", "metric": layout.EVAL_ACCURACY, "scaled": "", "off_policy_only": False}
    findings = {
        "T": {**common, "claim": "dapo reaches grpo's final accuracy sooner", "window": [0.75, 1.0], "direction": "lower",
              "baseline": {"trainer.loss_type": "grpo"}, "variant": {"trainer.loss_type": "dapo"}, "measure": "to_target",
              "target": "baseline", "x": "step", "arms": arms},
        "S": {**common, "claim": "dapo ends above its start", "window": [0.75, 1.0], "direction": "higher", "baseline": "start",
              "variant": {"trainer.loss_type": "dapo"}, "measure": "from_start", "arms": {"baseline": arms["variant"], "variant": arms["variant"]}},
    }  # fmt: skip
    record = {
        "name": grid_dir.name,
        "source": "g.yaml",
        "run_ids": [*arms["baseline"], *arms["variant"]],
        "varying": ["trainer.loss_type", "seed"],
        "runs": {},
        "report": {"hue": ["trainer.loss_type"]},
        "findings": findings,
    }
    (grid_dir / layout.GRID_FILE).write_text(json.dumps(record))
    return arms
