"""The timing table: cost per variant (time per optimizer step, throughput, memory) and speedups
that other work on the machine cannot fake (:func:`timing_table`, a :class:`TimingTable`).

Pure: a metrics frame in (from :func:`analysis.load.load`), a record out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.grouping import (
    baseline_values,
    by_list,
    column_or_nan,
    key_dict,
    per_run,
    per_run_sum,
    rows_by_group,
    run_index,
    variant_groups,
)
from analysis.tables import Table
from harness import layout

__all__ = [
    "LOAD_MARGIN_CPUS",
    "MEASURE_NAMES",
    "MIN_QUIET_SHARE",
    "TimingTable",
    "loaded_steps",
    "timing_measure",
    "timing_table",
]


@dataclass(frozen=True, kw_only=True)
class TimingTable(Table):
    """:func:`timing_table`'s answer: the table (:class:`analysis.tables.Table`, headers named)
    and what its speedup rests on.

    Attributes:
        measure: the column the speedup is computed from (``time/step_gpu_s``,
            ``time/step_cpu_s`` or ``time/step_s``; :func:`timing_measure`).
        load_known: whether any step recorded the machine's load (``machine/other_cpus``), so
            loaded steps could be left out.
        left_out: ``(row label, share of its steps loaded, 0 to 1)`` for each row whose speedup
            was left out because too few of its steps (or its baseline's) ran on a quiet machine;
            the label is the row's ``by`` values joined by spaces.
    """

    measure: str
    load_known: bool
    left_out: tuple[tuple[str, float], ...] = ()


#: Cores of other work, beyond the cores the harness's own runs leave free, above which a step
#: counts as measured on a loaded machine (:func:`loaded_steps`).
LOAD_MARGIN_CPUS = 0.5
#: Share of its steps a variant (and its baseline) must have measured on a quiet machine for the
#: timing table to give its speedup.
MIN_QUIET_SHARE = 0.5
#: What each measure of a step's time is called in captions, by column.
MEASURE_NAMES = {
    layout.STEP_GPU_S: "GPU time",
    layout.STEP_CPU_S: "CPU time",
    layout.STEP_WALL_S: "wall time",
}


def loaded_steps(df: pd.DataFrame) -> pd.Series:
    """Which steps were measured while the machine ran more work than the harness's own runs.

    A step is loaded when ``machine/other_cpus`` (mean cores busy with work other than the
    harness's runs, :class:`harness.train.metrics.StepClock`) exceeds the cores the harness left free,
    ``machine/cpus - min(machine/cpus, machine/concurrent_runs * machine/threads)``, by more than
    :data:`LOAD_MARGIN_CPUS`. A step without ``machine/other_cpus`` (older runs, or a system that
    does not report it) is not loaded; :func:`timing_measure` says whether any step recorded it.

    Returns:
        Boolean Series aligned with ``df.index``.
    """
    other = column_or_nan(df, layout.OTHER_CPUS).to_numpy(dtype=np.float64)
    cpus = column_or_nan(df, layout.CPUS).to_numpy(dtype=np.float64)
    runs = np.nan_to_num(column_or_nan(df, layout.CONCURRENT_RUNS).to_numpy(dtype=np.float64), nan=1.0)
    threads = np.nan_to_num(column_or_nan(df, layout.RUN_THREADS).to_numpy(dtype=np.float64), nan=1.0)
    free = cpus - np.minimum(cpus, np.maximum(runs, 1.0) * np.maximum(threads, 1.0))
    with np.errstate(invalid="ignore"):
        loaded = other > np.nan_to_num(free, nan=0.0) + LOAD_MARGIN_CPUS
    return pd.Series(loaded & ~np.isnan(other), index=df.index)


def timing_measure(df: pd.DataFrame) -> tuple[str, bool]:
    """The column a timing table computes speedups from, and whether any step recorded the load.

    GPU time (``time/step_gpu_s``) when some step has it, else CPU time of the run's process
    (``time/step_cpu_s``), else wall time (``time/step_s``, all that runs recorded before the other
    two existed): other work on the machine inflates wall time most (see
    ``benchmarks/load.py``). The second value is whether any step has ``machine/other_cpus``.
    """
    for col in (layout.STEP_GPU_S, layout.STEP_CPU_S):
        if col in df.columns and df[col].notna().any():
            return col, layout.OTHER_CPUS in df.columns and bool(df[layout.OTHER_CPUS].notna().any())
    known = layout.OTHER_CPUS in df.columns and bool(df[layout.OTHER_CPUS].notna().any())
    return layout.STEP_WALL_S, known


def timing_table(
    df: pd.DataFrame,
    *,
    by: str | Sequence[str] = "loss_type",
    baseline: Any = "grpo",
    same: Sequence[str] = (),
) -> TimingTable:
    """Cost per variant: time per optimizer step, throughput and memory, and speedups that other
    work on the machine cannot fake.

    Per run: mean and total of ``time/step_s`` (wall seconds per optimizer step, generation
    included), mean ``time/step_cpu_s`` (CPU seconds of the run's process per step), median of
    TRL's ``step_time`` (seconds; excludes generation on steps that reuse a batch), generated and
    trained tokens per second (``sum tokens / sum time/step_s``) and the peak of
    ``memory/peak_mb``. Per variant: the mean over runs, except the median ``step_time`` (pooled
    over all steps) and peak memory (maximum over runs).

    The speedup is computed from :func:`timing_measure` (GPU time, else CPU time, else wall time)
    over the steps :func:`loaded_steps` does not mark; a variant with less than
    :data:`MIN_QUIET_SHARE` of its steps quiet, or whose baseline has, gets none (NaN).

    Args:
        df: frame from :func:`analysis.load.load`.
        by: variant column(s); the first one is matched against ``baseline``.
        baseline: value of ``by[0]`` whose time per step is the speedup reference (in the same
            group of the other ``by`` columns; in a group without it, the baseline's mean over
            groups that agree on ``same``).
        same: ``by`` columns a speedup never crosses (e.g. how many runs shared the machine).

    Returns:
        A :class:`TimingTable`; its frame has one row per variant: ``*by``, ``runs``, ``steps``
        (mean per run), ``s_per_step``,
        ``cpu_s_per_step`` and ``gpu_s_per_step`` (when some step recorded them), ``total_s``,
        ``trl_step_time_median_s``, ``gen_tokens_per_s``, ``trained_tokens_per_s``,
        ``peak_memory_mb``, ``loaded`` (share of steps measured on a loaded machine, 0 to 1; when
        some step recorded the load), ``speedup`` (baseline time / this one in the measure; 1 for
        the baseline, NaN without one or when left out). Missing source columns give NaN.
        Beside it: the measure of the speedup, whether the load is known, the rows left out.

    Raises:
        KeyError: if a ``by`` column is missing.
    """
    by = by_list(by)
    measure, load_known = timing_measure(df)
    runs = per_run(df, by)
    runs = runs.assign(**_run_costs(df, runs.index), **_run_timed(df, runs.index, measure))
    groups = list(variant_groups(runs, by))
    step_time = _pooled_step_times(df, groups)
    rows = [
        {
            **key_dict(by, key),
            "runs": len(part),
            "steps": part["steps"].mean(),
            "s_per_step": part["s_per_step"].mean(),
            "cpu_s_per_step": part["cpu_s_per_step"].mean(),
            "gpu_s_per_step": part["gpu_s_per_step"].mean(),
            "total_s": part["total_s"].mean(),
            "trl_step_time_median_s": float(np.median(st)) if st.size else float("nan"),
            "gen_tokens_per_s": part["gen_tokens_per_s"].mean(),
            "trained_tokens_per_s": part["trained_tokens_per_s"].mean(),
            "peak_memory_mb": part["peak_memory_mb"].max(),
            "loaded": part["loaded"].mean(),
            "_timed": part["timed"].mean(),
        }
        for (key, part), st in zip(groups, step_time, strict=True)
    ]
    table = pd.DataFrame(rows)
    if table.empty:
        return TimingTable(table, measure=measure, load_known=load_known)
    return _finish_timing(table, by, baseline, same, measure, load_known)


def _finish_timing(
    rows: pd.DataFrame, by: list[str], baseline: Any, same: Sequence[str], measure: str, load_known: bool
) -> TimingTable:
    """The speedup from the quiet steps' ``measure`` (rows mostly loaded left out), the columns no
    step recorded dropped, the display names and the rest of :class:`TimingTable`."""
    quiet_enough = ~(rows["loaded"].to_numpy(dtype=np.float64) > 1.0 - MIN_QUIET_SHARE)
    timed = np.where(quiet_enough, rows["_timed"].to_numpy(dtype=np.float64), np.nan)
    table = rows.drop(columns="_timed")
    left_out = tuple(
        (" ".join(str(table.at[i, c]) for c in by), float(table.at[i, "loaded"]))
        for i in np.flatnonzero(~quiet_enough)
    )
    if baseline is not None:
        base = baseline_values(table.assign(_timed=timed), by, baseline, "_timed", same)
        with np.errstate(invalid="ignore", divide="ignore"):
            table = table.assign(speedup=base / timed)
    drop = ["gpu_s_per_step"] if measure != layout.STEP_GPU_S else []
    drop += ["cpu_s_per_step"] if table["cpu_s_per_step"].isna().all() else []
    drop += [] if load_known else ["loaded"]
    name = MEASURE_NAMES[measure]
    return TimingTable(
        table.drop(columns=drop),
        display={
            **_TIMING_DISPLAY,
            **({"speedup": f"speedup vs {baseline} ({name})"} if baseline is not None else {}),
        },
        measure=measure,
        load_known=load_known,
        left_out=left_out,
    )


_TIMING_DISPLAY = {
    "runs": "runs",
    "steps": "steps",
    "s_per_step": "s/step",
    "total_s": "total s",
    "trl_step_time_median_s": "TRL step_time median (s)",
    "gen_tokens_per_s": "generated tok/s",
    "trained_tokens_per_s": "trained tok/s",
    "peak_memory_mb": "peak memory (MB)",
    "cpu_s_per_step": "CPU s/step",
    "gpu_s_per_step": "GPU s/step",
    "loaded": "steps loaded",
}


def _run_timed(df: pd.DataFrame, run_ids: pd.Index, measure: str) -> dict[str, np.ndarray]:
    """Per run of ``run_ids`` (shape ``(runs,)`` each): ``cpu_s_per_step``, ``gpu_s_per_step``
    (means over its steps, seconds), ``loaded`` (share of its steps :func:`loaded_steps` marks)
    and ``timed`` (mean ``measure`` over its quiet steps; NaN when none)."""
    codes, names, _ = run_index(df)
    n = len(names)
    pos = pd.Index(names).get_indexer(run_ids)
    loaded = loaded_steps(df).to_numpy()
    out = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for name, col in (("cpu_s_per_step", layout.STEP_CPU_S), ("gpu_s_per_step", layout.STEP_GPU_S)):
            total, count = per_run_sum(codes, n, column_or_nan(df, col).to_numpy(dtype=np.float64))
            out[name] = (total / count)[pos]
        steps = np.bincount(codes, minlength=n).astype(np.float64)
        out["loaded"] = (np.bincount(codes, weights=loaded.astype(np.float64), minlength=n) / steps)[pos]
        timed = np.where(loaded, np.nan, column_or_nan(df, measure).to_numpy(dtype=np.float64))
        total, count = per_run_sum(codes, n, timed)
        out["timed"] = (total / count)[pos]
    return out


def _run_costs(df: pd.DataFrame, run_ids: pd.Index) -> dict[str, np.ndarray]:
    """Each run's costs, per run of ``run_ids`` (shape ``(runs,)`` each).

    ``steps`` (logged rows), ``s_per_step`` (mean ``time/step_s``, seconds), ``total_s`` (its
    sum), ``gen_tokens_per_s`` and ``trained_tokens_per_s`` (sum of tokens / sum of
    ``time/step_s``) and ``peak_memory_mb`` (maximum; NaN when never logged). A missing source
    column gives NaN.
    """
    codes, names, _ = run_index(df)
    n = len(names)
    pos = pd.Index(names).get_indexer(run_ids)  # code of each run asked for

    def col(name: str) -> np.ndarray:
        return column_or_nan(df, name).to_numpy(dtype=np.float64)

    steps = np.bincount(codes, minlength=n).astype(np.float64)
    wall_sum, wall_n = per_run_sum(codes, n, col(layout.STEP_WALL_S))
    gen_sum, gen_n = per_run_sum(codes, n, col(layout.TOKENS_GENERATED))
    tr_sum, tr_n = per_run_sum(codes, n, col(layout.TOKENS_TRAINED))
    mem = col(layout.PEAK_MEMORY_MB)
    peak = np.full(n, -np.inf)
    ok = ~np.isnan(mem)
    np.maximum.at(peak, codes[ok], mem[ok])
    with np.errstate(invalid="ignore", divide="ignore"):
        wall = np.where(wall_n > 0, wall_sum, np.nan)
        return {
            "steps": steps[pos],
            "s_per_step": (wall_sum / wall_n)[pos],
            "total_s": wall[pos],
            "gen_tokens_per_s": (np.where(gen_n > 0, gen_sum, np.nan) / wall)[pos],
            "trained_tokens_per_s": (np.where(tr_n > 0, tr_sum, np.nan) / wall)[pos],
            "peak_memory_mb": np.where(np.isinf(peak), np.nan, peak)[pos],
        }


def _pooled_step_times(df: pd.DataFrame, groups: Sequence[tuple[Any, pd.DataFrame]]) -> list[np.ndarray]:
    """TRL's ``step_time`` (seconds) of every logged step of each group's runs, NaN left out.

    ``groups`` are ``(key, per-run rows indexed by run id)`` pairs; returns one 1-D array per
    group, in the rows' order within each group.
    """
    codes, names, _ = run_index(df)
    step_time = column_or_nan(df, "step_time").to_numpy(dtype=np.float64)
    run_pos = pd.Index(np.asarray(names, dtype=object))
    variant_of_run = np.full(len(names), -1, dtype=np.int64)
    for g, (_, part) in enumerate(groups):
        variant_of_run[run_pos.get_indexer(part.index)] = g
    # rows grouped by variant once, then one slice per group
    order, bounds = rows_by_group(codes, variant_of_run)
    st_sorted = step_time[order]
    out = []
    for g in range(len(groups)):
        st = st_sorted[bounds[g] : bounds[g + 1]]
        out.append(st[~np.isnan(st)])
    return out
