"""Tables of a grid: timing, final performance, time to a target, and a learning check.

Each ``*_table`` function is pure: a metrics frame in (from :func:`analysis.load.load`), a small
frame out, one row per variant, numeric columns (CSV keeps them raw). :func:`to_markdown`,
:func:`to_latex` and :func:`write_table` render such a frame; ``(x, x_lo, x_hi)`` column triples
are shown as ``x [lo, hi]``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import stats
from analysis.aggregate import factorize_runs, resolve_smoothing, smooth_runs, variant_labels, x_values
from analysis.load import seed_column
from analysis.states import signal_flags
from harness import layout

__all__ = [
    "bootstrap_reps",
    "final_performance_table",
    "final_scores",
    "resolvable_differences",
    "learning_check",
    "learning_summary",
    "loaded_steps",
    "timing_measure",
    "timing_table",
    "time_to_target_table",
    "to_latex",
    "to_markdown",
    "write_table",
]


def _by_list(by: str | Sequence[str] | None) -> list[str]:
    if by is None:
        return []
    return [by] if isinstance(by, str) else list(dict.fromkeys(by))


def _run_index(df: pd.DataFrame) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Each row's run code, the run ids (code order) and the first row of each run."""
    codes, names = factorize_runs(df[layout.RUN_ID])
    first = np.full(len(names), -1, dtype=np.int64)
    first[codes[::-1]] = np.arange(len(df) - 1, -1, -1)
    return codes, names, first


def _by_run_and_step(codes: np.ndarray, steps: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Indices of the ``keep`` rows ordered by (run code, step); no sort when they already are
    (frames from :func:`analysis.load.load` come sorted by run and step)."""
    rows = np.flatnonzero(keep)
    c, st = codes[rows], steps[rows]
    if rows.size < 2:
        return rows
    dc, ds = np.diff(c), np.diff(st)
    if np.all((dc > 0) | ((dc == 0) & (ds > 0))):
        return rows
    return rows[np.lexsort((st, c))]


def joined_keys(frame: pd.DataFrame, cols: Sequence[str]) -> np.ndarray:
    """Each row's values of ``cols`` as one string (joined by ``\\x1f``), to group by several
    columns at once; shape ``(len(frame),)``, dtype object (``""`` for every row without columns)."""
    if not cols:
        return np.full(len(frame), "", dtype=object)
    parts = [frame[c].astype(str).to_numpy(dtype=object) for c in cols]
    if len(parts) == 1:
        return parts[0]
    return np.array(["\x1f".join(t) for t in zip(*parts, strict=True)], dtype=object)


def _per_run_sum(codes: np.ndarray, n: int, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per run: the sum of the non-NaN values of ``v`` and how many there are."""
    nan = np.isnan(v)
    if not nan.any():  # the common case: no selection of rows needed
        return np.bincount(codes, weights=v, minlength=n), np.bincount(codes, minlength=n).astype(np.float64)
    return (
        np.bincount(codes, weights=np.where(nan, 0.0, v), minlength=n),
        np.bincount(codes, weights=(~nan).astype(np.float64), minlength=n),
    )


def _rows_by_group(codes: np.ndarray, group_of_run: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row positions ordered by the group of their run (``group_of_run[code]``, -1: none), and the
    bounds of each group ``g`` in that order (``bounds[g]:bounds[g + 1]``); rows keep their order
    within a group.

    When each run's rows are one contiguous block (as :func:`analysis.load.load` returns them) the
    blocks are reordered as wholes; otherwise the rows are sorted.
    """
    n_groups = int(group_of_run.max()) + 1 if group_of_run.size else 0
    if codes.size == 0:
        return np.zeros(0, np.int64), np.zeros(n_groups + 1, np.int64)
    edges = np.flatnonzero(codes[1:] != codes[:-1]) + 1
    starts = np.r_[0, edges]
    block_codes = codes[starts]
    if np.unique(block_codes).size == block_codes.size:  # one block per run
        ends = np.r_[edges, codes.size]
        g = group_of_run[block_codes]
        keep = np.flatnonzero(g >= 0)
        order_b = keep[np.argsort(g[keep], kind="stable")]
        lengths = (ends - starts)[order_b]
        # the rows of the chosen blocks, block after block: output position i of block b holds
        # row starts[b] + (i - heads[b])
        heads = np.r_[0, np.cumsum(lengths)[:-1]]
        rows = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts[order_b] - heads, lengths)
        per_group = np.bincount(g[order_b], weights=lengths, minlength=n_groups).astype(np.int64)
    else:
        row_group = group_of_run[codes]
        keep = np.flatnonzero(row_group >= 0)
        rows = keep[np.argsort(row_group[keep], kind="stable")]
        per_group = np.bincount(row_group[keep], minlength=n_groups)
    return rows, np.r_[0, np.cumsum(per_group)]


def _per_run(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """One row per run, indexed by run id (sorted), with its variant labels (``by`` columns as
    display strings)."""
    missing = [c for c in by if c not in df.columns]
    if missing:
        raise KeyError(f"columns not in frame: {missing}")
    _, names, first = _run_index(df)
    order = np.argsort(np.asarray(names, dtype=object), kind="stable")
    runs = pd.DataFrame(index=pd.Index([names[k] for k in order], name=layout.RUN_ID, dtype=object))
    for c in by:
        # Config values are constant within a run, so the run's first row carries them.
        values = df[c].iloc[first[order]].reset_index(drop=True)
        if not (isinstance(values.dtype, pd.CategoricalDtype) and values.cat.ordered):
            values = pd.Series(values.astype(object).to_numpy())  # else labels keep their given order
        runs[c] = variant_labels(values)
    return runs


def _baseline_mask(runs: pd.DataFrame, by: list[str], baseline: Any) -> np.ndarray | None:
    """Which per-run rows belong to the baseline variant (matched on the first ``by`` column)."""
    if baseline is None or not by:
        return None
    return (runs[by[0]].astype(str) == str(baseline)).to_numpy()


def _variant_groups(runs: pd.DataFrame, by: list[str]):
    if not by:
        yield (), runs
        return
    yield from runs.groupby(by, observed=True, sort=True)


def _key_dict(by: list[str], key: Any) -> dict[str, Any]:
    key = key if isinstance(key, tuple) else (key,)
    return dict(zip(by, key, strict=True))


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(np.nan, index=df.index)


def _baseline_values(
    table: pd.DataFrame, by: list[str], baseline: Any, column: str, same: Sequence[str] = ()
) -> np.ndarray:
    """Per row of ``table``: ``column`` of the baseline variant in the same facet (``by[1:]``).

    Variants are compared with the baseline where everything else is equal: with facets (say
    ``num_iterations``) a row's reference is the baseline's row with the same facet values; a
    facet without the baseline is compared with the baseline's rows that agree with it on the
    ``same`` columns only when the baseline sits in panels of its own; otherwise it gets NaN.
    """
    out = np.full(len(table), np.nan)
    if baseline is None or not by or table.empty:
        return out
    is_base = (table[by[0]].astype(str) == str(baseline)).to_numpy()
    facets = by[1:]
    if not facets:
        hit = table.loc[is_base, column]
        out[:] = float(hit.mean()) if len(hit) else np.nan
        return out
    key = joined_keys(table, facets)
    ref = {k: float(v) for k, v in zip(key[is_base], table.loc[is_base, column], strict=True)}
    if not _baseline_has_own_panels(key, is_base):
        return np.array([ref.get(k, np.nan) for k in key], dtype=np.float64)
    # The baseline is a panel of its own (as "no sync" beside sync periods): every other panel is
    # compared with it, among rows that agree on the ``same`` columns.
    same = [c for c in same if c in facets]
    skey = joined_keys(table, same) if same else np.zeros(len(table), dtype=object)
    pooled = {k: float(table.loc[is_base & (skey == k), column].mean()) for k in set(skey[is_base])}
    return np.array(
        [ref.get(k, pooled.get(sk, np.nan)) for k, sk in zip(key, skey, strict=True)], dtype=np.float64
    )


def _baseline_has_own_panels(panel: np.ndarray, is_base: np.ndarray) -> bool:
    """Whether the baseline sits in panels of its own (no other variant shares one with it): only
    then is a panel compared with it across panels; a baseline missing from one panel is never
    borrowed from another."""
    if not is_base.any():
        return False
    return not (set(panel[is_base]) & set(panel[~is_base]))


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
    other = _col(df, layout.OTHER_CPUS).to_numpy(dtype=np.float64)
    cpus = _col(df, layout.CPUS).to_numpy(dtype=np.float64)
    runs = np.nan_to_num(_col(df, layout.CONCURRENT_RUNS).to_numpy(dtype=np.float64), nan=1.0)
    threads = np.nan_to_num(_col(df, layout.RUN_THREADS).to_numpy(dtype=np.float64), nan=1.0)
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
) -> pd.DataFrame:
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
        One row per variant: ``*by``, ``runs``, ``steps`` (mean per run), ``s_per_step``,
        ``cpu_s_per_step`` and ``gpu_s_per_step`` (when some step recorded them), ``total_s``,
        ``trl_step_time_median_s``, ``gen_tokens_per_s``, ``trained_tokens_per_s``,
        ``peak_memory_mb``, ``loaded`` (share of steps measured on a loaded machine, 0 to 1; when
        some step recorded the load), ``speedup`` (baseline time / this one in the measure; 1 for
        the baseline, NaN without one or when left out). Missing source columns give NaN.
        ``attrs``: ``measure`` (the column of the speedup), ``load_known``, ``left_out`` (the
        labels of rows whose speedup was left out for load, with their loaded share).

    Raises:
        KeyError: if a ``by`` column is missing.
    """
    by = _by_list(by)
    runs = _per_run(df, by)
    _add_run_costs(df, runs)
    measure, load_known = timing_measure(df)
    _add_run_timed(df, runs, measure)
    groups = list(_variant_groups(runs, by))
    step_time = _pooled_step_times(df, groups)
    rows = [
        {
            **_key_dict(by, key),
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
        return table
    return _finish_timing(table, by, baseline, same, measure, load_known)


def _finish_timing(
    table: pd.DataFrame, by: list[str], baseline: Any, same: Sequence[str], measure: str, load_known: bool
) -> pd.DataFrame:
    """The speedup from the quiet steps' ``measure`` (rows mostly loaded left out), the columns no
    step recorded dropped, the display names and the ``attrs`` of :func:`timing_table`."""
    quiet_enough = ~(table["loaded"].to_numpy(dtype=np.float64) > 1.0 - MIN_QUIET_SHARE)
    timed = np.where(quiet_enough, table.pop("_timed").to_numpy(dtype=np.float64), np.nan)
    table["_timed"] = timed
    left_out = [
        (" ".join(str(table.at[i, c]) for c in by), float(table.at[i, "loaded"]))
        for i in np.flatnonzero(~quiet_enough)
    ]
    if baseline is not None:
        base = _baseline_values(table, by, baseline, "_timed", same)
        with np.errstate(invalid="ignore", divide="ignore"):
            table["speedup"] = base / timed
    table = table.drop(columns="_timed")
    drop = ["gpu_s_per_step"] if measure != layout.STEP_GPU_S else []
    drop += ["cpu_s_per_step"] if table["cpu_s_per_step"].isna().all() else []
    drop += [] if load_known else ["loaded"]
    table = table.drop(columns=drop)
    name = MEASURE_NAMES[measure]
    table.attrs["display"] = {
        **_TIMING_DISPLAY,
        **({"speedup": f"speedup vs {baseline} ({name})"} if baseline is not None else {}),
    }
    table.attrs.update(measure=measure, load_known=load_known, left_out=left_out)
    return table


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


def _add_run_timed(df: pd.DataFrame, runs: pd.DataFrame, measure: str) -> None:
    """Add each run's ``cpu_s_per_step``, ``gpu_s_per_step`` (means over its steps), ``loaded``
    (share of its steps :func:`loaded_steps` marks) and ``timed`` (mean ``measure`` over its
    quiet steps; NaN when none) to ``runs`` in place."""
    codes, names, _ = _run_index(df)
    n = len(names)
    pos = pd.Index(names).get_indexer(runs.index)
    loaded = loaded_steps(df).to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        for out, col in (("cpu_s_per_step", layout.STEP_CPU_S), ("gpu_s_per_step", layout.STEP_GPU_S)):
            total, count = _per_run_sum(codes, n, _col(df, col).to_numpy(dtype=np.float64))
            runs[out] = (total / count)[pos]
        steps = np.bincount(codes, minlength=n).astype(np.float64)
        runs["loaded"] = (np.bincount(codes, weights=loaded.astype(np.float64), minlength=n) / steps)[pos]
        timed = np.where(loaded, np.nan, _col(df, measure).to_numpy(dtype=np.float64))
        total, count = _per_run_sum(codes, n, timed)
        runs["timed"] = (total / count)[pos]


def _add_run_costs(df: pd.DataFrame, runs: pd.DataFrame) -> None:
    """Add each run's costs to ``runs`` (one row per run id, from :func:`_per_run`) in place.

    Columns added: ``steps`` (logged rows), ``s_per_step`` (mean ``time/step_s``, seconds),
    ``total_s`` (its sum), ``gen_tokens_per_s`` and ``trained_tokens_per_s`` (sum of tokens / sum
    of ``time/step_s``) and ``peak_memory_mb`` (maximum; NaN when never logged). A missing
    source column gives NaN.
    """
    codes, names, _ = _run_index(df)
    n = len(names)
    pos = pd.Index(names).get_indexer(runs.index)  # code of each row of `runs`

    def col(name: str) -> np.ndarray:
        return _col(df, name).to_numpy(dtype=np.float64)

    steps = np.bincount(codes, minlength=n).astype(np.float64)
    wall_sum, wall_n = _per_run_sum(codes, n, col(layout.STEP_WALL_S))
    gen_sum, gen_n = _per_run_sum(codes, n, col(layout.TOKENS_GENERATED))
    tr_sum, tr_n = _per_run_sum(codes, n, col(layout.TOKENS_TRAINED))
    with np.errstate(invalid="ignore", divide="ignore"):
        wall = np.where(wall_n > 0, wall_sum, np.nan)
        runs["steps"] = steps[pos]
        runs["s_per_step"] = (wall_sum / wall_n)[pos]
        runs["total_s"] = wall[pos]
        runs["gen_tokens_per_s"] = (np.where(gen_n > 0, gen_sum, np.nan) / wall)[pos]
        runs["trained_tokens_per_s"] = (np.where(tr_n > 0, tr_sum, np.nan) / wall)[pos]
    mem = col(layout.PEAK_MEMORY_MB)
    peak = np.full(n, -np.inf)
    ok = ~np.isnan(mem)
    np.maximum.at(peak, codes[ok], mem[ok])
    runs["peak_memory_mb"] = np.where(np.isinf(peak), np.nan, peak)[pos]


def _pooled_step_times(df: pd.DataFrame, groups: Sequence[tuple[Any, pd.DataFrame]]) -> list[np.ndarray]:
    """TRL's ``step_time`` (seconds) of every logged step of each group's runs, NaN left out.

    ``groups`` are ``(key, per-run rows indexed by run id)`` pairs; returns one 1-D array per
    group, in the rows' order within each group.
    """
    codes, names, _ = _run_index(df)
    step_time = _col(df, "step_time").to_numpy(dtype=np.float64)
    run_pos = pd.Index(np.asarray(names, dtype=object))
    variant_of_run = np.full(len(names), -1, dtype=np.int64)
    for g, (_, part) in enumerate(groups):
        variant_of_run[run_pos.get_indexer(part.index)] = g
    # rows grouped by variant once, then one slice per group
    order, bounds = _rows_by_group(codes, variant_of_run)
    st_sorted = step_time[order]
    out = []
    for g in range(len(groups)):
        st = st_sorted[bounds[g] : bounds[g + 1]]
        out.append(st[~np.isnan(st)])
    return out


def final_scores(df: pd.DataFrame, metric: str, last_k: int | None = None) -> pd.Series:
    """Per-run score: final value of a sparse eval metric, else mean of the last k logged steps
    (default: the last 10% of the run's logged steps, at least one).

    Returns:
        Score per run id (sorted), runs without a logged value left out.
    """
    y = df[metric].to_numpy(dtype=np.float64)
    keep = ~np.isnan(y)
    codes, names = factorize_runs(df[layout.RUN_ID])
    order = _by_run_and_step(codes, df[layout.STEP].to_numpy(), keep)
    c, yv = codes[order], y[order]
    n_runs = len(names)
    counts = np.bincount(c, minlength=n_runs)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    pos_from_end = np.repeat(starts + counts, counts) - np.arange(c.size) - 1  # 0 = last logged step
    if metric == layout.EVAL_ACCURACY:
        k = np.ones(n_runs)
    else:
        k = np.maximum(1, np.ceil(0.1 * counts)) if last_k is None else np.full(n_runs, int(last_k))
    tail = pos_from_end < k[c]
    sums = np.bincount(c[tail], weights=yv[tail], minlength=n_runs)
    used = np.bincount(c[tail], minlength=n_runs)
    with np.errstate(invalid="ignore", divide="ignore"):
        score = sums / used
    out = pd.Series(
        score, index=pd.Index([str(n) for n in names], name=layout.RUN_ID, dtype=object), name=metric
    )
    return out[used > 0].sort_index()


#: Bootstrap resamples of the report's intervals: rliable's 50,000 (at 2,000 the endpoints of a
#: 10-run x 4-task matrix moved by up to 0.022 between bootstrap seeds; at 50,000 by under 0.005).
REPORT_REPS = 50_000
#: The most draw counts (resamples x runs, over every run a table bootstraps) before the report uses
#: fewer resamples (and says so, with their Monte Carlo error): 50,000 resamples up to 80 runs in
#: all (every ready grid), e.g. 4,000 for 1,000 runs (the analysis benchmark), never fewer than
#: 2,000. A draw count costs about 30 ns on one core, so a table's bootstrap stays under ~0.3 s.
BOOTSTRAP_CELLS = 4_000_000


def bootstrap_reps(runs: int) -> int:
    """Resamples for the bootstraps of a table over ``runs`` runs in all: :data:`REPORT_REPS`, or
    fewer where that would take more than :data:`BOOTSTRAP_CELLS` draws (the cost is proportional
    to resamples x runs), but at least 2,000."""
    return int(min(REPORT_REPS, max(2000, BOOTSTRAP_CELLS // max(1, runs))))


def _task_column(df: pd.DataFrame, task: str | None) -> str | None:
    if task is not None:
        return task
    for cand in ("task.name", "task"):
        if cand in df.columns and df[cand].nunique(dropna=False) > 1:
            return cand
    return None


def _score_matrix(scores: pd.Series, tasks: pd.Series, task_order: list[str]) -> np.ndarray:
    """(max runs per task, n_tasks) matrix, NaN-padded where a task has fewer runs."""
    cols = [scores[(tasks == t).to_numpy()].to_numpy(dtype=np.float64) for t in task_order]
    height = max((c.size for c in cols), default=0)
    mat = np.full((height, len(cols)), np.nan)
    for j, c in enumerate(cols):
        mat[: c.size, j] = c
    return mat


def final_performance_table(
    df: pd.DataFrame,
    metric: str = "reward",
    *,
    by: str | Sequence[str] = "loss_type",
    last_k: int | None = None,
    task: str | None = None,
    baseline: Any = "grpo",
    reps: int | None = None,
    confidence: float = 0.95,
    seed: int = 0,
    scores: pd.Series | None = None,
) -> pd.DataFrame:
    """Final performance per variant: mean and IQM over runs with stratified bootstrap intervals.

    A run's score is the mean of ``metric`` over its last ``last_k`` logged steps (default: the
    last 10% of its steps, at least one), or, for ``eval/accuracy``, its last evaluation. Scores
    form an ``(runs, tasks)`` matrix per variant (one task unless ``task`` names a column or
    ``task.name`` varies). Aggregates and intervals follow Agarwal et al. 2021 (rliable): mean,
    IQM (25% trimmed mean), percentile intervals from a bootstrap over runs stratified by task,
    and the probability of improvement over the baseline (Mann-Whitney U / (n·m), averaged over
    tasks) with an independent stratified bootstrap interval.

    Args:
        df: frame from :func:`analysis.load.load`.
        metric: the score column (e.g. ``"reward"``, ``"eval/accuracy"``).
        by: variant column(s); the first is matched against ``baseline``.
        last_k: steps averaged at the end of each run.
        task: column that identifies tasks; default auto-detected as above.
        baseline: value of ``by[0]`` the probability of improvement is measured against.
        reps, confidence, seed: bootstrap replicates (default :func:`bootstrap_reps` of the scored
            runs), coverage and seed.
        scores: :func:`final_scores` of ``df`` when already computed (``last_k`` then unused).

    Returns:
        One row per variant: ``*by``, ``runs``, ``mean``, ``mean_lo``, ``mean_hi``, ``iqm``,
        ``iqm_lo``, ``iqm_hi``, ``p_improve``, ``p_improve_lo``, ``p_improve_hi`` (P(variant >
        baseline); NaN for the baseline itself or without one). Intervals are NaN when no task
        has two runs. ``attrs["caption"]`` says how; ``attrs["reps"]`` holds the resamples and
        ``attrs["mc_error"]`` the largest Monte Carlo error of any endpoint
        (:func:`analysis.stats.percentile_mc_error`).

    Raises:
        KeyError: if ``metric`` or a ``by`` column is missing.
    """
    by = _by_list(by)
    if metric not in df.columns:
        raise KeyError(f"metric {metric!r} not in frame")
    runs = _per_run(df, by)
    runs["score"] = (final_scores(df, metric, last_k) if scores is None else scores).reindex(runs.index)
    task_col = _task_column(df, task)
    if task_col is not None:
        first_task = df.drop_duplicates(layout.RUN_ID).set_index(layout.RUN_ID)[task_col]
        runs["_task"] = first_task.reindex(runs.index).astype(object).astype(str).to_numpy()
    else:
        runs["_task"] = "all"
    runs = runs[runs["score"].notna()]
    task_order = sorted(runs["_task"].unique())
    base_mats, pooled_mat = _baseline_matrices(runs, by, _baseline_mask(runs, by, baseline), task_order)
    if reps is None:
        reps = bootstrap_reps(len(runs))
    boot = {"reps": reps, "confidence": confidence, "seed": seed}
    rows = []
    for key, part in _variant_groups(runs, by):
        key_t = key if isinstance(key, tuple) else (key,)
        labels = _key_dict(by, key)
        is_base = by and str(labels[by[0]]) == str(baseline)
        base_mat = None if is_base else base_mats.get(tuple(str(v) for v in key_t[1:]), pooled_mat)
        mat = _score_matrix(part["score"], part["_task"], task_order)
        rows.append({**labels, "runs": len(part), **_final_estimates(mat, base_mat, **boot)})
    table = pd.DataFrame(rows)
    mc = table.pop("_mc_error") if "_mc_error" in table.columns else pd.Series(dtype=float)
    mc_error = float(mc.max()) if mc.notna().any() else float("nan")
    table.attrs["reps"] = reps
    table.attrs["mc_error"] = mc_error
    table.attrs["caption"] = _final_caption(metric, last_k, task_col, baseline, mc_error=mc_error, **boot)
    table.attrs["display"] = {"runs": "runs", "mean": "mean", "iqm": "IQM"}
    if baseline is None:
        table = table.drop(columns=["p_improve", "p_improve_lo", "p_improve_hi"])
    else:
        table.attrs["display"]["p_improve"] = f"P(> {baseline})"
    return table


def resolvable_differences(
    scores: pd.DataFrame,
    variant: str | None,
    facets: Sequence[str] = (),
    *,
    power: float = 0.8,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Per panel, the smallest difference of final scores that its seeds can resolve.

    With ``n`` runs per variant and the variants' pooled SD ``s`` (:func:`analysis.stats.pooled_sd`
    over each variant's final scores), a two-sided two-sample t test at level ``alpha`` detects a
    difference of means with probability ``power`` only from :func:`analysis.stats.min_detectable_effect`
    ``(n, s)`` on (noncentral t, Cohen 1988 ch. 2); smaller differences cannot be told from noise.
    Where variants have different run counts, ``n`` is the smallest (what the least-run variant
    supports).

    Args:
        scores: one row per run: ``score`` (final score) and the ``variant`` and ``facets`` columns.
        variant: the column telling variants apart (None: all runs are one variant).
        facets: the columns telling panels apart (none: one row overall).
        power, alpha: of the test.

    Returns:
        One row per panel (in order of appearance): ``*facets``, ``variants``, ``n_min``,
        ``n_max`` (runs per variant), ``pooled_sd`` (NaN when no variant has two runs) and
        ``resolvable`` (the smallest resolvable difference, in the score's units; NaN when
        ``n_min < 2``); ``attrs["power"]`` and ``attrs["alpha"]``.
    """
    facets = list(facets)
    frame = scores[np.isfinite(scores["score"].to_numpy(dtype=np.float64))]
    panels = frame.groupby(facets, observed=True, sort=False) if facets else [((), frame)]
    rows = []
    for key, part in panels:
        groups = (
            [g["score"].to_numpy(dtype=np.float64) for _, g in part.groupby(variant, observed=True)]
            if variant
            else [part["score"].to_numpy(dtype=np.float64)]
        )
        sizes = [g.size for g in groups]
        sd = stats.pooled_sd(*groups)
        n_min = min(sizes, default=0)
        rows.append(
            {
                **_key_dict(facets, key),
                "variants": len(groups),
                "n_min": n_min,
                "n_max": max(sizes, default=0),
                "pooled_sd": sd,
                "resolvable": stats.min_detectable_effect(n_min, sd, power, alpha),
            }
        )
    out = pd.DataFrame(rows, columns=[*facets, "variants", "n_min", "n_max", "pooled_sd", "resolvable"])
    out.attrs.update(power=power, alpha=alpha)
    return out


def _baseline_matrices(
    runs: pd.DataFrame, by: list[str], base_mask: np.ndarray | None, task_order: list[str]
) -> tuple[dict[tuple, np.ndarray], np.ndarray | None]:
    """The baseline's ``(runs, tasks)`` score matrices (:func:`_score_matrix`) per facet.

    Args:
        runs: one scored row per run (``score``, ``_task`` and the ``by`` columns).
        by: variant columns; the facet of a row is its values of ``by[1:]``.
        base_mask: which rows are baseline runs (None: no baseline).
        task_order: the matrices' column order.

    Returns:
        ``({facet values as strings: matrix}, pooled)``; ``pooled`` is the matrix of all baseline
        runs when the baseline sits in panels of its own (a facet without baseline runs then
        compares with it), else None. Both empty/None without baseline runs.
    """
    if base_mask is None or not base_mask.any():
        return {}, None
    base_runs = runs[base_mask]
    mats = {}
    for fkey, fpart in base_runs.groupby(by[1:], observed=True) if by[1:] else [((), base_runs)]:
        fkey = fkey if isinstance(fkey, tuple) else (fkey,)
        mats[tuple(str(v) for v in fkey)] = _score_matrix(fpart["score"], fpart["_task"], task_order)
    panel_of = joined_keys(runs, by[1:]) if by[1:] else np.zeros(len(runs))
    pooled = None
    if _baseline_has_own_panels(panel_of, base_mask):
        pooled = _score_matrix(base_runs["score"], base_runs["_task"], task_order)
    return mats, pooled


def _final_estimates(
    mat: np.ndarray, base_mat: np.ndarray | None, *, reps: int, confidence: float, seed: int
) -> dict[str, float]:
    """Mean, IQM and P(improvement over ``base_mat``) of a ``(runs, tasks)`` score matrix, each
    with its stratified bootstrap interval (``*_lo``, ``*_hi``), and ``_mc_error``: the largest
    Monte Carlo error of those intervals' endpoints (:func:`analysis.stats.percentile_mc_error`).

    Intervals are NaN when no task has two runs (in either matrix, for P); P and its interval are
    NaN without ``base_mat``.
    """
    nan = float("nan")
    mean, iq = stats.mean_score(mat), stats.iqm(mat)
    mean_lo = mean_hi = iq_lo = iq_hi = p_lo = p_hi = nan
    errors = []
    if _most_runs_per_task(mat) >= 2:  # one run per task: a bootstrap over runs returns the run itself
        for values, name in zip(
            stats.stratified_bootstrap_replicates([stats.mean_score, stats.iqm], mat, reps=reps, seed=seed),
            ("mean", "iqm"),
            strict=True,
        ):
            lo, hi = stats.percentile_interval(values, confidence)
            mean_lo, mean_hi = (lo, hi) if name == "mean" else (mean_lo, mean_hi)
            iq_lo, iq_hi = (lo, hi) if name == "iqm" else (iq_lo, iq_hi)
            errors.append(stats.percentile_mc_error(values, confidence))
    if base_mat is not None:
        p = stats.probability_of_improvement(mat, base_mat)
        if min(_most_runs_per_task(m) for m in (mat, base_mat)) >= 2:
            (values,) = stats.stratified_bootstrap_replicates(
                [stats.probability_of_improvement], mat, base_mat, reps=reps, seed=seed
            )
            p_lo, p_hi = stats.percentile_interval(values, confidence)
            errors.append(stats.percentile_mc_error(values, confidence))
    else:
        p = nan
    errors = [e for e in errors if np.isfinite(e)]
    return {
        "_mc_error": max(errors) if errors else nan,
        "mean": mean,
        "mean_lo": mean_lo,
        "mean_hi": mean_hi,
        "iqm": iq,
        "iqm_lo": iq_lo,
        "iqm_hi": iq_hi,
        "p_improve": p,
        "p_improve_lo": p_lo,
        "p_improve_hi": p_hi,
    }


def _most_runs_per_task(mat: np.ndarray) -> int:
    """The largest number of scored runs (non-NaN rows) of any task (column) of ``mat``."""
    return np.sum(~np.isnan(mat), axis=0).max(initial=0)


def _final_caption(
    metric: str,
    last_k: int | None,
    task_col: str | None,
    baseline: Any,
    *,
    reps: int,
    confidence: float,
    seed: int,
    mc_error: float = float("nan"),
) -> str:
    """How :func:`final_performance_table` scored, aggregated and compared the runs."""
    how = (
        "last evaluation"
        if metric == layout.EVAL_ACCURACY
        else (
            "mean of the last 10% of logged steps"
            if last_k is None
            else f"mean of the last {last_k} logged steps"
        )
    )
    strat = f", stratified by {task_col}" if task_col else ""
    return (
        f"Final {metric} per run ({how}); mean and IQM over runs with {100 * confidence:g}% percentile "
        f"bootstrap intervals ({reps:,} resamples of runs{strat}, seed {seed}"
        + (
            f"; fewer than rliable's {REPORT_REPS:,} to keep the report quick at this many runs"
            if reps < REPORT_REPS
            else ""
        )
        + (
            "; Monte Carlo error of the endpoints "
            + (f"at most {mc_error:.2g}" if mc_error >= 1e-4 else "below 0.0001")
            + ", SD over 10 batches of resamples / √10"
            if np.isfinite(mc_error)
            else ""
        )
        + ")"
        + (
            f"; P(> {baseline}): probability that a run of the variant beats a run of {baseline} "
            "(Mann-Whitney U / nm)."
            if baseline is not None
            else "."
        )
    )


def time_to_target_table(
    df: pd.DataFrame,
    threshold: float,
    *,
    metric: str = "reward",
    by: str | Sequence[str] = "loss_type",
    baseline: Any = "grpo",
    ema: float | None = None,
    smoothing: Any = None,
) -> pd.DataFrame:
    """Steps, generated tokens and seconds until a run first reaches ``metric >= threshold``.

    Args:
        df: frame from :func:`analysis.load.load`.
        threshold: target value of ``metric``.
        metric: the column compared with ``threshold``.
        by: variant column(s); the first is matched against ``baseline``.
        baseline: value of ``by[0]`` the speedups are relative to.
        ema: smooth each run's metric first (EMA weight, see :func:`analysis.aggregate.smooth`), so
            a single noisy step does not count as reaching the target.
        smoothing: instead of ``ema``, the report's smoothing (``"auto"``: each run's trailing
            mean over a tenth of its points, ``{"window": n}``, ``{"ema": a}``).

    Returns:
        One row per variant: ``*by``, ``runs``, ``reached`` (runs that reached the target),
        ``steps``, ``tokens``, ``seconds`` (means over the runs that reached it, so read them with
        ``reached``), and ``speedup_steps``, ``speedup_tokens``, ``speedup_seconds`` (baseline mean
        / variant mean). Tokens and seconds are cumulative at the first step at or above target
        (:func:`analysis.curves.x_values`).

    Raises:
        KeyError: if ``metric`` or a ``by`` column is missing.
    """
    by = _by_list(by)
    if metric not in df.columns:
        raise KeyError(f"metric {metric!r} not in frame")
    if ema is not None:
        smoothing = {"ema": ema}
    runs = _per_run(df, by)
    hits = _first_hits(df, metric, threshold, smoothing)
    for name in ("steps", "tokens", "seconds"):
        runs[name] = hits[name].reindex(runs.index).to_numpy(dtype=np.float64)
    runs["reached"] = runs.index.isin(hits.index)
    rows = [
        {
            **_key_dict(by, key),
            "runs": len(part),
            "reached": int(part["reached"].sum()),
            "steps": part["steps"].mean(),
            "tokens": part["tokens"].mean(),
            "seconds": part["seconds"].mean(),
        }
        for key, part in _variant_groups(runs, by)
    ]
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    for name in ("steps", "tokens", "seconds") if baseline is not None else ():
        base = _baseline_values(table, by, baseline, name)
        with np.errstate(invalid="ignore", divide="ignore"):
            table[f"speedup_{name}"] = base / table[name].to_numpy(dtype=np.float64)
    table.attrs["caption"] = (
        f"First time each run reaches {metric} >= {threshold:g}"
        + (
            f" on each run's smoothed curve ({'a trailing mean over a tenth of its points' if smoothing == 'auto' else smoothing})"
            if smoothing not in (None, "none")
            else ""
        )
        + "; means over the runs that reached it"
        + (f"; speedup = {baseline} mean / variant mean." if baseline is not None else ".")
    )
    table.attrs["display"] = {
        "seconds": "seconds",
        "speedup_steps": "speedup (steps)",
        "speedup_tokens": "speedup (tokens)",
        "speedup_seconds": "speedup (time)",
    }
    return table


def _first_hits(df: pd.DataFrame, metric: str, threshold: float, smoothing: Any) -> pd.DataFrame:
    """Where each run first has ``metric >= threshold`` (on its smoothed curve with ``smoothing``).

    Returns:
        One row per run that reached it, indexed by run id (as strings): ``steps`` (its
        optimizer step), ``tokens`` and ``seconds`` (cumulative, :func:`analysis.curves.x_values`;
        NaN when the frame has no such column).
    """
    y = df[metric].to_numpy(dtype=np.float64)
    cols = {"steps": df[layout.STEP].to_numpy(dtype=np.float64)}
    for name in ("tokens", "time"):
        try:
            cols[name] = x_values(df, name)
        except KeyError:
            cols[name] = np.full(len(df), np.nan)
    codes, names = factorize_runs(df[layout.RUN_ID])
    order = _by_run_and_step(codes, cols["steps"], ~np.isnan(y))
    c, yr = codes[order], y[order]
    if smoothing not in (None, "none") and yr.size:
        # on each run's smoothed curve, as the figures draw it: one noisy step is not "reaching" it
        yr = _smooth_each_run(yr, c, smoothing)
    hits = np.flatnonzero(yr >= threshold)
    hit_runs, first_hit = np.unique(c[hits], return_index=True)  # each run's first row at target
    at = order[hits[first_hit]]
    name_of = np.array([str(n) for n in names], dtype=object)
    return pd.DataFrame(
        {
            name: cols[source][at]
            for name, source in (("steps", "steps"), ("tokens", "tokens"), ("seconds", "time"))
        },
        index=pd.Index(name_of[hit_runs], dtype=object),
    )


def _smooth_each_run(y: np.ndarray, codes: np.ndarray, smoothing: Any) -> np.ndarray:
    """``y`` (rows grouped by run: ``codes`` equal within a run) smoothed run by run: ``"auto"``
    is a trailing mean over a tenth of each run's points, else :func:`resolve_smoothing`'s."""
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    if smoothing == "auto":
        kw: dict[str, Any] = {
            "window": np.maximum(1, np.ceil(np.diff(np.r_[starts, codes.size]) / 10)).astype(int)
        }
    else:
        kw = resolve_smoothing(smoothing, 0)
    return smooth_runs(y, starts, **kw) if kw else y


def learning_check(
    df: pd.DataFrame,
    metric: str = "reward",
    *,
    by: str | Sequence[str] = "loss_type",
    frac: float = 0.2,
    signal: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Did each run learn? Mean ``metric`` over its first vs its last ``frac`` of logged steps.

    Args:
        df: frame from :func:`analysis.load.load`.
        metric: the column compared.
        by: variant column(s) reported with each run.
        frac: fraction of each run's logged steps (at least one) in each window.
        signal: :func:`analysis.states.signal_flags` of ``df`` when already computed.

    Returns:
        One row per run: ``run_id``, ``*by``, ``seed`` (when a seed column exists), ``steps``,
        ``first``, ``last``, ``diff = last - first``, ``signal`` (False when the run never had
        a learning signal, see :func:`analysis.states.signal_flags`) and ``note`` (why not).

    Raises:
        KeyError: if ``metric`` or a ``by`` column is missing.
        ValueError: if ``frac`` is not in (0, 0.5].
    """
    if not 0.0 < frac <= 0.5:
        raise ValueError(f"frac must be in (0, 0.5], got {frac}")
    by = _by_list(by)
    if metric not in df.columns:
        raise KeyError(f"metric {metric!r} not in frame")
    runs = _per_run(df, by)
    codes, names, first_rows = _run_index(df)
    seed = seed_column(df)
    if seed is not None and seed not in by:
        runs["seed"] = pd.Series(df[seed].to_numpy()[first_rows], index=names).reindex(runs.index).to_numpy()
    n_runs = len(names)
    y = df[metric].to_numpy(dtype=np.float64)
    keep = ~np.isnan(y)
    order = _by_run_and_step(codes, df[layout.STEP].to_numpy(), keep)
    c, yv = codes[order], y[order]
    counts = np.bincount(c, minlength=n_runs)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    pos_in_run = np.arange(c.size) - np.repeat(starts, counts)
    k = np.maximum(1, np.ceil(frac * counts)).astype(np.int64)
    head = pos_in_run < k[c]
    tail = pos_in_run >= (counts - k)[c]
    with np.errstate(invalid="ignore", divide="ignore"):
        first = np.bincount(c[head], weights=yv[head], minlength=n_runs) / np.bincount(
            c[head], minlength=n_runs
        )
        last = np.bincount(c[tail], weights=yv[tail], minlength=n_runs) / np.bincount(
            c[tail], minlength=n_runs
        )
    pos = pd.Index(names).get_indexer(runs.index)
    runs["steps"] = np.where(counts > 0, counts, np.nan)[pos]
    runs["first"] = first[pos]
    runs["last"] = last[pos]
    runs["diff"] = runs["last"] - runs["first"]
    flags = (signal_flags(df) if signal is None else signal).reindex(runs.index)
    runs["signal"] = ~flags["no_signal"].fillna(False).astype(bool)
    runs["note"] = [
        "no learning signal: every group had zero reward variance (all advantages 0)"
        if zv
        else ("no learning signal: grad_norm 0 on every step" if zg else "")
        for zv, zg in zip(flags["zero_variance"].fillna(False), flags["zero_grad"].fillna(False), strict=True)
    ]
    out = runs.reset_index()
    out.attrs["caption"] = (
        f"Mean {metric} over the first vs the last {100 * frac:g}% of each run's logged steps; diff = last - first. "
        "A run without a learning signal (zero reward variance in every group, or a zero gradient on every "
        "step) never counts as improved: its change comes from which prompts were drawn."
    )
    return out


def learning_summary(check: pd.DataFrame, *, by: str | Sequence[str] = "loss_type") -> pd.DataFrame:
    """Per variant, the learning check over seeds: mean first/last, mean and std of the difference.

    Args:
        check: output of :func:`learning_check`.
        by: the variant column(s) used there.

    Returns:
        One row per variant: ``*by``, ``runs``, ``first``, ``last`` (means over runs), ``diff_mean``,
        ``diff_std`` (ddof=1; NaN with one run), ``improved`` (runs with ``diff > 0`` that had a
        learning signal) and ``no_signal`` (runs that never had one).
    """
    by = _by_list(by)
    rows = []
    for key, part in _variant_groups(check, by):
        d = part["diff"].to_numpy(dtype=np.float64)
        signal = part["signal"].to_numpy(dtype=bool) if "signal" in part else np.ones(len(part), dtype=bool)
        mean, std, _ = stats.nan_moments(d, axis=0)
        rows.append(
            {
                **_key_dict(by, key),
                "runs": len(part),
                "first": part["first"].mean(),
                "last": part["last"].mean(),
                "diff_mean": float(mean),
                "diff_std": float(std),
                "improved": int(((d > 0) & signal).sum()),
                "no_signal": int((~signal).sum()),
            }
        )
    table = pd.DataFrame(rows)
    table.attrs["caption"] = check.attrs.get("caption", "") + " Mean and std (ddof=1) of diff over runs."
    table.attrs["display"] = {
        "diff_mean": "diff mean",
        "diff_std": "diff std",
        "improved": "runs improved",
        "no_signal": "no learning signal",
    }
    return table


# ----------------------------------------------------------------------------------------------
# Rendering


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        if abs(f) >= 1000:
            return f"{f:,.0f}"
        return f"{f:.3g}"
    return str(v)


def _display_frame(table: pd.DataFrame) -> tuple[pd.DataFrame, list[bool]]:
    """Strings for md/tex (``x [lo, hi]`` for interval triples, headers from ``attrs["display"]``)
    and, per shown column, whether it is numeric (right-aligned)."""
    names = dict(table.attrs.get("display", {}))
    out: dict[str, list[str]] = {}
    numeric: list[bool] = []
    skip = set()
    for c in table.columns:
        if c in skip:
            continue
        lo, hi = f"{c}_lo", f"{c}_hi"
        if lo in table.columns and hi in table.columns:
            skip.update((lo, hi))
            out[names.get(c, c)] = [
                _fmt(v) if math.isnan(float(a)) else f"{_fmt(v)} [{_fmt(a)}, {_fmt(b)}]"
                for v, a, b in zip(table[c], table[lo], table[hi], strict=True)
            ]
        else:
            out[names.get(c, c)] = [_fmt(v) for v in table[c]]
        numeric.append(pd.api.types.is_numeric_dtype(table[c]) and not pd.api.types.is_bool_dtype(table[c]))
    return pd.DataFrame(out, columns=list(out)), numeric


def to_markdown(table: pd.DataFrame) -> str:
    """GitHub-flavoured (pipe) markdown table, one row per row of ``table``, no index.

    Numbers with 3 significant digits, NaN as "–", ``x [lo, hi]`` for interval triples, headers
    from ``table.attrs["display"]``; numeric columns right-aligned, others left-aligned; "|" in a
    cell escaped as "\\|". Columns are padded to a common width.

    Returns:
        The table ending in a newline ("\\n" alone for a frame without columns).
    """
    shown, numeric = _display_frame(table)
    if not len(shown.columns):
        return "\n"
    cells = shown.map(lambda v: v.replace("|", "\\|"))
    # tabulate aligns columns by their rows: a table without rows gets one blank row, dropped after
    text = (cells if len(cells) else pd.DataFrame([[""] * len(numeric)], columns=cells.columns)).to_markdown(
        index=False,
        tablefmt="pipe",
        disable_numparse=True,
        colalign=["right" if num else "left" for num in numeric],
    )
    return (text if len(cells) else text.rsplit("\n", 1)[0]) + "\n"


_LATEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "–": "--",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
}


def _tex(s: Any) -> str:
    """``s`` as LaTeX text: special characters escaped, "–" as "--"."""
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in str(s))


def to_latex(table: pd.DataFrame, *, caption: str | None = None, label: str | None = None) -> str:
    """A ``table`` environment with a booktabs ``tabular`` (needs ``\\usepackage{booktabs}``).

    The cells and headers of :func:`to_markdown`, LaTeX special characters escaped and "–" as
    "--"; numeric columns ``r``, others ``l``.

    Args:
        table: a frame from one of the ``*_table`` functions (or any frame).
        caption: caption text (escaped); default ``table.attrs["caption"]`` when present.
        label: ``\\label`` key, unescaped.

    Returns:
        LaTeX source ending in a newline.
    """
    shown, numeric = _display_frame(table)
    shown = shown.map(_tex)
    shown.columns = [_tex(c) for c in shown.columns]
    caption = caption if caption is not None else table.attrs.get("caption")
    styler = shown.style.hide(axis="index")
    styler.set_table_styles([{"selector": "small", "props": ":;"}], overwrite=False)
    return styler.to_latex(
        column_format="".join("r" if num else "l" for num in numeric),
        position="t",
        position_float="centering",
        hrules=True,
        caption=_tex(caption) if caption else None,
        label=label or None,
    )


def write_table(
    table: pd.DataFrame,
    stem: str | Path,
    *,
    caption: str | None = None,
    extra_md: Mapping[str, pd.DataFrame] | None = None,
    notes: Sequence[str] = (),
    raw: pd.DataFrame | None = None,
) -> list[Path]:
    """Write ``<stem>.md``, ``<stem>.csv`` (raw numbers) and ``<stem>.tex`` (booktabs).

    Args:
        table: the frame to write.
        stem: output path without suffix; parent folders are created.
        caption: caption for md and tex; default ``table.attrs["caption"]``.
        extra_md: further ``{heading: frame}`` sections appended to the markdown file only.
        notes: lines written under the table in the markdown file.
        raw: the frame the CSV holds instead of ``table`` (when ``table`` is text made for
            reading, e.g. :func:`analysis.findings.display_table`).

    Returns:
        The three paths written (md, csv, tex).
    """
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    caption = caption if caption is not None else table.attrs.get("caption")
    md = (f"{caption}\n\n" if caption else "") + to_markdown(table)
    if notes:
        md += "\n" + "\n\n".join(notes) + "\n"
    for heading, frame in (extra_md or {}).items():
        md += f"\n**{heading}**\n\n" + to_markdown(frame)
    paths = [
        stem.with_name(stem.name + ".md"),
        stem.with_name(stem.name + ".csv"),
        stem.with_name(stem.name + ".tex"),
    ]
    paths[0].write_text(md)
    (table if raw is None else raw).to_csv(paths[1], index=False)
    paths[2].write_text(to_latex(table, caption=caption, label=f"tab:{stem.name}"))
    return paths
