"""Time to a target: steps, generated tokens and seconds until each run first reaches
``metric >= threshold`` on its smoothed curve, per variant, with speedups over the baseline
(:func:`time_to_target_table`).

Pure: a metrics frame in (from :func:`analysis.load.load`), a :class:`analysis.tables.Table` out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.aggregate import factorize_runs, x_values
from analysis.grouping import baseline_values, by_list, by_run_and_step, key_dict, per_run, variant_groups
from analysis.smoothing import resolve_smoothing, smooth_runs
from analysis.tables import Table
from harness import layout

__all__ = ["time_to_target_table"]


def time_to_target_table(
    df: pd.DataFrame,
    threshold: float,
    *,
    metric: str = "reward",
    by: str | Sequence[str] = "loss_type",
    baseline: Any = "grpo",
    ema: float | None = None,
    smoothing: Any = None,
) -> Table:
    """Steps, generated tokens and seconds until a run first reaches ``metric >= threshold``.

    Args:
        df: frame from :func:`analysis.load.load`.
        threshold: target value of ``metric``.
        metric: the column compared with ``threshold``.
        by: variant column(s); the first is matched against ``baseline``.
        baseline: value of ``by[0]`` the speedups are relative to.
        ema: smooth each run's metric first (EMA weight, see :func:`analysis.smoothing.smooth`), so
            a single noisy step does not count as reaching the target.
        smoothing: instead of ``ema``, the report's smoothing (``"auto"``: each run's trailing
            mean over a tenth of its points, ``{"window": n}``, ``{"ema": a}``).

    Returns:
        A :class:`analysis.tables.Table` (its caption says how; empty without runs), one row per
        variant: ``*by``, ``runs``, ``reached`` (runs that reached the target), ``steps``,
        ``tokens``, ``seconds`` (means over the runs that reached it, so read them with
        ``reached``), and ``speedup_steps``, ``speedup_tokens``, ``speedup_seconds`` (baseline mean
        / variant mean). Tokens and seconds are cumulative at the first step at or above target
        (:func:`analysis.aggregate.x_values`).

    Raises:
        KeyError: if ``metric`` or a ``by`` column is missing.
    """
    by = by_list(by)
    if metric not in df.columns:
        raise KeyError(f"metric {metric!r} not in frame")
    if ema is not None:
        smoothing = {"ema": ema}
    runs = per_run(df, by)
    hits = _first_hits(df, metric, threshold, smoothing)
    for name in ("steps", "tokens", "seconds"):
        runs[name] = hits[name].reindex(runs.index).to_numpy(dtype=np.float64)
    runs["reached"] = runs.index.isin(hits.index)
    rows = [
        {
            **key_dict(by, key),
            "runs": len(part),
            "reached": int(part["reached"].sum()),
            "steps": part["steps"].mean(),
            "tokens": part["tokens"].mean(),
            "seconds": part["seconds"].mean(),
        }
        for key, part in variant_groups(runs, by)
    ]
    table = pd.DataFrame(rows)
    if table.empty:
        return Table(table)
    for name in ("steps", "tokens", "seconds") if baseline is not None else ():
        base = baseline_values(table, by, baseline, name)
        with np.errstate(invalid="ignore", divide="ignore"):
            table[f"speedup_{name}"] = base / table[name].to_numpy(dtype=np.float64)
    caption = (
        f"First time each run reaches {metric} >= {threshold:g}"
        + (
            f" on each run's smoothed curve ({'a trailing mean over a tenth of its points' if smoothing == 'auto' else smoothing})"
            if smoothing not in (None, "none")
            else ""
        )
        + "; means over the runs that reached it"
        + (f"; speedup = {baseline} mean / variant mean." if baseline is not None else ".")
    )
    display = {
        "seconds": "seconds",
        "speedup_steps": "speedup (steps)",
        "speedup_tokens": "speedup (tokens)",
        "speedup_seconds": "speedup (time)",
    }
    return Table(table, caption=caption, display=display)


def _first_hits(df: pd.DataFrame, metric: str, threshold: float, smoothing: Any) -> pd.DataFrame:
    """Where each run first has ``metric >= threshold`` (on its smoothed curve with ``smoothing``).

    Returns:
        One row per run that reached it, indexed by run id (as strings): ``steps`` (its
        optimizer step), ``tokens`` and ``seconds`` (cumulative, :func:`analysis.aggregate.x_values`;
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
    order = by_run_and_step(codes, cols["steps"], ~np.isnan(y))
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
    is a trailing mean over a tenth of each run's points, else :func:`analysis.smoothing.resolve_smoothing`'s."""
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    if smoothing == "auto":
        kw: dict[str, Any] = {
            "window": np.maximum(1, np.ceil(np.diff(np.r_[starts, codes.size]) / 10)).astype(int)
        }
    else:
        kw = resolve_smoothing(smoothing, 0)
    return smooth_runs(y, starts, **kw) if kw else y
