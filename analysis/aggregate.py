"""Curves as numbers: x coordinates, the mean over runs with its band, per group and x.

Everything here is pure (frames and arrays in, frames and arrays out) and draws nothing; the
figures in :mod:`analysis.curves` only render what these functions return. Each run is smoothed
by :mod:`analysis.smoothing` before averaging; which rows are off-policy steps is
:mod:`analysis.offpolicy`'s; y-limits are :mod:`analysis.limits`'.

The band is computed once per (variant, x) from a (points × runs) matrix per variant: a
Student-t interval over runs by default (``ci="t"``), or a seeded percentile bootstrap over runs
(``ci="bootstrap"``). Runs are the independent samples; with 3-5 seeds the t quantile (2.8-4.3)
matters, so a normal ``±1.96·se`` band is never used. Each run is smoothed *before* averaging, so
the band is over seeds of the smoothed per-run curves, not over noisy single steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats as _st

from analysis import stats
from analysis.labels import NONE_LABEL, format_value, sort_key
from analysis.settings.report_values import AUTO
from analysis.smoothing import (
    resolve_smoothing,
    smooth,
    smooth_runs,
    smoothing_caption,
    trailing_mean_rows,
    window_lo,
    windowed_mean,
)
from harness import layout

__all__ = [
    "Curves",
    "FrameIndex",
    "X_LABELS",
    "XKind",
    "aggregate",
    "band_caption",
    "curves",
    "factorize_runs",
    "frame_index",
    "nan_median_rows",
    "run_codes",
    "variant_labels",
    "x_values",
]

XKind = Literal["step", "tokens", "time"]

#: Axis label per ``x`` choice (units included).
X_LABELS: dict[str, str] = {
    "step": "optimizer step",
    "tokens": "generated tokens",
    "time": "wall-clock time (s)",
}


def variant_labels(values: pd.Series | Sequence[Any]) -> pd.Categorical:
    """Values of a grid axis as display labels: strings in natural order, missing as ``"(none)"``.

    Numbers sort numerically (so ``1e-6`` precedes ``1e-5``), strings lexically, and the missing
    label comes last. A missing value is never dropped: it is a variant like any other. An ordered
    categorical of strings (labels made by :func:`analysis.labels.label_runs`) keeps its order.

    Args:
        values: one value per row (any dtype, including categorical).

    Returns:
        A categorical of strings with ordered categories, same length as ``values``.
    """
    s = values if isinstance(values, pd.Series) else pd.Series(list(values), dtype=object)
    if isinstance(s.dtype, pd.CategoricalDtype) and s.cat.ordered and s.notna().all():
        cats = [str(c) for c in s.cat.categories]
        return pd.Categorical.from_codes(s.cat.codes.to_numpy(), categories=cats, ordered=True)
    codes, uniques = pd.factorize(s)
    uniq = list(uniques)
    rendered = [format_value(v) for v in uniq]
    order = sorted(range(len(uniq)), key=lambda i: sort_key(uniq[i]))
    labels = list(dict.fromkeys(rendered[i] for i in order))
    position = {lab: k for k, lab in enumerate(labels)}
    # Index -1 (a missing value's code) lands on the extra last slot: the "(none)" label.
    remap = np.array([position[r] for r in rendered] + [len(labels)], dtype=np.int64)
    if (codes < 0).any():
        labels.append(NONE_LABEL)
    return pd.Categorical.from_codes(remap[codes], categories=labels, ordered=True)


def x_values(df: pd.DataFrame, x: XKind) -> np.ndarray:
    """The x coordinate of every row: optimizer step, cumulative generated tokens, or seconds.

    ``tokens`` uses ``tokens/generated_total`` and ``time`` uses ``time/elapsed_s`` (both carried
    across resumes by the harness); rows where those are missing use the per-run cumulative sum
    of ``tokens/generated`` or ``time/step_s`` (rows must then be sorted by run and step, as
    :func:`analysis.load.load` returns them).

    Args:
        df: frame from :func:`analysis.load.load`.
        x: ``"step"``, ``"tokens"`` or ``"time"``.

    Returns:
        float64 array, shape ``(len(df),)``: steps, tokens, or seconds.

    Raises:
        ValueError: for another ``x``.
        KeyError: if the columns needed for ``x`` are missing.
    """
    if x == "step":
        return df[layout.STEP].to_numpy(dtype=np.float64)
    if x == "tokens":
        total, per_step = layout.TOKENS_GENERATED_TOTAL, layout.TOKENS_GENERATED
    elif x == "time":
        total, per_step = layout.ELAPSED_S, layout.STEP_WALL_S
    else:
        raise ValueError(f"x must be 'step', 'tokens' or 'time', got {x!r}")
    has_total = total in df.columns and df[total].notna().any()
    has_step = per_step in df.columns and df[per_step].notna().any()
    if not (has_total or has_step):
        raise KeyError(f"x={x!r} needs column {total!r} or {per_step!r}")
    out = df[total].to_numpy(dtype=np.float64) if has_total else np.full(len(df), np.nan)
    gaps = np.isnan(out)
    if has_step and gaps.any():
        # Runs (or rows) without the cumulative column fall back to the per-run running sum.
        v = np.nan_to_num(df[per_step].to_numpy(dtype=np.float64))
        run = run_codes(df)
        cs = np.cumsum(v)
        starts = np.flatnonzero(np.r_[True, run[1:] != run[:-1]])
        offset = np.repeat(cs[starts] - v[starts], np.diff(np.r_[starts, len(v)]))
        out = np.where(gaps, cs - offset, out)
    return out


def factorize_runs(ids: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Each row's run code and the run ids in code order, runs without rows left out.

    For a categorical ``run_id`` (as :func:`analysis.load.load` returns) the categorical's own
    codes are used: ``pd.factorize`` would rebuild them at a cost of tens of ms per million rows.
    """
    if isinstance(ids.dtype, pd.CategoricalDtype):
        codes = ids.cat.codes.to_numpy()
        cats = ids.cat.categories
        if codes.size and codes.min() < 0:
            raise ValueError("run_id has missing values")
        used = np.bincount(codes, minlength=len(cats)) > 0
        if used.all():
            return codes, [str(c) for c in cats]
        remap = np.cumsum(used) - 1
        return remap[codes], [str(c) for c, u in zip(cats, used, strict=True) if u]
    codes, uniques = pd.factorize(ids, sort=False)
    return codes, [str(u) for u in uniques]


def run_codes(df: pd.DataFrame) -> np.ndarray:
    """Integer code of each row's run (the categorical's codes when ``run_id`` is one)."""
    rid = df[layout.RUN_ID]
    if isinstance(rid.dtype, pd.CategoricalDtype):
        return rid.cat.codes.to_numpy()
    return pd.factorize(rid)[0]


def band_caption(
    ci: str = "t",
    confidence: float = 0.95,
    n_boot: int = 1000,
    seed: int = 0,
    smoothing: Mapping[str, float] | None = None,
    runs: Sequence[int] | None = None,
) -> str:
    """One or two sentences saying what a curve's line and band are, for captions.

    Args:
        ci, confidence, n_boot, seed: the band, as in :func:`aggregate`.
        smoothing: the smoothing keywords applied (``{"window": n}`` / ``{"ema": a}``), if any.
        runs: runs per curve (one entry per curve drawn); with fewer than 4 the caption names the
            count and, for the t band, its quantile, since a 2- or 3-run band is wide by nature.
    """
    pct = f"{100 * confidence:g}%"
    if ci == "t":
        band = f"{pct} Student-t interval over runs (df = runs - 1)"
    else:
        band = f"{pct} percentile bootstrap interval over runs ({n_boot} resamples, seed {seed})"
    text = f"Line: mean over runs (seeds); band: {band}; no band where fewer than 2 runs have data."
    if runs:
        lo, hi = min(runs), max(runs)
        count = f"{lo}" if lo == hi else f"{lo}-{hi}"
        text += f" {count} run(s) per curve"
        if ci == "t" and 2 <= hi <= 3:
            qs = sorted({n for n in runs if n >= 2})
            tq = ", ".join(f"t = {_st.t.ppf(0.5 + confidence / 2, n - 1):.2f} for {n}" for n in qs)
            text += f" ({tq} runs: the band is wide because there are few seeds)"
        text += "."
    if smoothing:
        kind, value = next(iter(smoothing.items()))
        what = (
            f"EMA with alpha = {value:g}" if kind == "ema" else f"trailing rolling mean over {value:g} points"
        )
        text += f" Each run smoothed before averaging ({what})."
    return text


@dataclass(frozen=True)
class FrameIndex:
    """How a frame's rows map to runs, groups and the step grid; made once, shared by the curves
    of every metric of a report (:func:`frame_index`).

    Attributes:
        by, x, rows: what it was made for (grouping columns, x kind, number of rows).
        x_all: (rows,) x coordinate of every row.
        run_all: (rows,) run code of every row; ``run_names[code]`` is the run id.
        n_codes, n_groups: numbers of run codes and of groups.
        group_of_run: (n_codes,) group of each run (-1: no rows).
        members: per group, its run codes.
        group_labels: per ``by`` column, the ordered label of each group.
        order_groups: groups in display order.
        step_grid, step_col: for ``x="step"`` with rows sorted by (run, step) and a dense enough
            grid: the steps and each row's column in it; None otherwise.
        complete: every run logged every step of the grid, rows in (run, step) order: a metric's
            column reshaped is its (runs, steps) matrix.
    """

    by: tuple[str, ...]
    x: str
    rows: int
    x_all: np.ndarray
    run_all: np.ndarray
    run_names: list[str]
    n_codes: int
    n_groups: int
    group_of_run: np.ndarray
    members: list[np.ndarray]
    group_labels: dict[str, pd.Categorical]
    order_groups: np.ndarray
    step_grid: np.ndarray | None
    step_col: np.ndarray | None
    complete: bool = False
    _plans: list[RowPlan] = field(default_factory=list, compare=False, repr=False)

    def row_plan(self, keep: np.ndarray) -> RowPlan:
        """The :class:`RowPlan` of the rows ``keep`` selects (bool, shape ``(rows,)``), made once
        per distinct selection: the metrics drawn over the same rows (every off-policy metric, or
        every metric logged on every step) share it. Needs ``step_col``."""
        for plan in self._plans:
            if np.array_equal(plan.keep, keep):
                return plan
        sel = np.flatnonzero(keep)
        r = self.run_all[sel].astype(np.int64)  # categorical codes may be int8: r * steps must not wrap
        col = self.step_col[sel]
        plan = RowPlan(
            keep=keep,
            sel=sel,
            r=r,
            flat=r * self.step_grid.size + col,
            counts=np.bincount(r, minlength=self.n_codes) if r.size else np.zeros(self.n_codes, np.int64),
            starts=np.flatnonzero(np.r_[True, r[1:] != r[:-1]]) if r.size else np.zeros(0, np.int64),
        )
        if len(self._plans) < 8:  # a report asks for a handful of selections
            self._plans.append(plan)
        return plan


@dataclass
class RowPlan:
    """A selection of a frame's rows, in (run, step) order, ready for :func:`curves`.

    Attributes:
        keep: (rows,) bool, the selection.
        sel: (kept,) positions of the kept rows.
        r: (kept,) their run codes.
        flat: (kept,) their cell in the (runs, steps) matrix, flattened: ``r * steps + column``.
        counts: (n_codes,) kept rows per run.
        starts: where each run with kept rows begins within the kept rows.
    """

    keep: np.ndarray
    sel: np.ndarray
    r: np.ndarray
    flat: np.ndarray
    counts: np.ndarray
    starts: np.ndarray
    _lo: dict[Any, np.ndarray] = field(default_factory=dict, repr=False)

    def window_lo(self, window: int | np.ndarray) -> np.ndarray:
        """Where each kept row's trailing window begins (:func:`analysis.smoothing.window_lo`), for
        one window or one window per run code (shape ``(n_codes,)``)."""
        key = ("runs", np.asarray(window).tobytes()) if np.ndim(window) else ("one", int(window))
        lo = self._lo.get(key)
        if lo is None:
            w = np.asarray(window)[self.r[self.starts]] if np.ndim(window) else window
            lo = self._lo[key] = window_lo(self.starts, self.r.size, w)
        return lo


def frame_index(df: pd.DataFrame, by: Sequence[str], x: XKind = "step") -> FrameIndex:
    """The grouping of ``df``'s rows that :func:`curves` needs, for reuse across metrics.

    Raises:
        KeyError: if a ``by`` column or the columns ``x`` needs are missing.
    """
    by = list(dict.fromkeys(by))
    missing = [c for c in by if c not in df.columns]
    if missing:
        raise KeyError(f"columns not in frame: {missing}")
    x_all = x_values(df, x)
    rid = df[layout.RUN_ID]
    if isinstance(rid.dtype, pd.CategoricalDtype):
        run_all = rid.cat.codes.to_numpy()
        run_names = [str(c) for c in rid.cat.categories]
    else:
        run_all, run_names = factorize_runs(rid)
    n_codes = int(run_all.max()) + 1 if run_all.size else 0
    group_of_run, members, group_labels, order_groups = _group_runs(df, by, run_all, n_codes)
    step_grid, step_col, complete = _step_grid(x, x_all, run_all, n_codes)
    return FrameIndex(
        tuple(by),
        x,
        len(df),
        x_all,
        run_all,
        run_names,
        n_codes,
        len(members),
        group_of_run,
        members,
        group_labels,
        order_groups,
        step_grid,
        step_col,
        complete,
    )


def _group_runs(
    df: pd.DataFrame, by: list[str], run_all: np.ndarray, n_codes: int
) -> tuple[np.ndarray, list[np.ndarray], dict[str, pd.Categorical], np.ndarray]:
    """The groups of runs with equal ``by`` labels (:func:`variant_labels`).

    Args:
        df: the frame; ``run_all`` (shape ``(rows,)``) is each row's run code, ``< n_codes``.

    Returns:
        ``(group_of_run, members, group_labels, order_groups)`` as in :class:`FrameIndex`: each
        code's group (shape ``(n_codes,)``, -1 without rows), each group's run codes, per ``by``
        column each group's ordered label, and the groups in display (label) order.
    """
    # Group keys are per-run values (grid axes), so they are read from each run's first row and
    # grouped over runs rather than over every row.
    first = np.full(n_codes, -1, dtype=np.int64)
    first[run_all[::-1]] = np.arange(len(df) - 1, -1, -1)
    runs_present = np.flatnonzero(first >= 0)
    keys = df[by].iloc[first[runs_present]].reset_index(drop=True) if by else pd.DataFrame(index=runs_present)
    labels_of_run = {col: variant_labels(keys[col]) for col in by}
    if by and len(keys):
        codes = np.stack([np.asarray(labels_of_run[c].codes) for c in by], axis=1)
        _, gid = np.unique(codes, axis=0, return_inverse=True)
        gid = np.asarray(gid).ravel()
    else:
        gid = np.zeros(len(runs_present), dtype=np.int64)
    n_groups = int(gid.max()) + 1 if gid.size else 0
    group_of_run = np.full(n_codes, -1, dtype=np.int64)
    group_of_run[runs_present] = gid
    group_first = np.zeros(n_groups, dtype=np.int64)
    group_first[gid[::-1]] = np.arange(len(gid) - 1, -1, -1)
    group_labels = {col: labels_of_run[col][group_first] for col in by}
    order_groups = (
        np.lexsort([np.asarray(group_labels[c].codes) for c in reversed(by)]) if by else np.arange(n_groups)
    )
    members = [np.flatnonzero(group_of_run == k) for k in range(n_groups)]
    return group_of_run, members, group_labels, order_groups


def _step_grid(
    x: str, x_all: np.ndarray, run_all: np.ndarray, n_codes: int
) -> tuple[np.ndarray | None, np.ndarray | None, bool]:
    """``(step_grid, step_col, complete)`` of :class:`FrameIndex`: for ``x="step"`` with rows
    sorted by (run, step) and a dense enough grid, the steps from the first to the last and each
    row's column in it (shape ``(rows,)``), else None twice; ``complete``: every run logged every
    step of the grid, in order, so the rows are a (runs, steps) matrix as they are."""
    step_grid = step_col = None
    if x == "step" and run_all.size and _sorted_within_runs(run_all, x_all):
        lo, hi = x_all.min(), x_all.max()
        if hi - lo + 1 <= 4 * x_all.size + 1024 and n_codes * (hi - lo + 1) <= 50_000_000:
            step_grid = np.arange(lo, hi + 1)
            step_col = (x_all - lo).astype(np.int64)
    complete = (
        step_grid is not None
        and run_all.size == n_codes * step_grid.size
        and bool(np.all(step_col.reshape(n_codes, -1) == np.arange(step_grid.size)))
        and bool(np.all(run_all.reshape(n_codes, -1) == np.arange(n_codes)[:, None]))
    )
    return step_grid, step_col, complete


def nan_median_rows(mat: np.ndarray) -> np.ndarray:
    """Median of each row ignoring NaNs (NaN for an all-NaN row), by one sort of the matrix.

    Args:
        mat: shape ``(rows, cols)``.

    Returns:
        Shape ``(rows,)``.
    """
    if mat.size == 0:
        return np.full(mat.shape[0], np.nan)
    srt = np.sort(mat, axis=1)  # NaNs sort last
    n = (~np.isnan(mat)).sum(axis=1)
    lo = np.clip((n - 1) // 2, 0, None)
    hi = np.clip(n // 2, 0, None)
    rows = np.arange(mat.shape[0])
    out = 0.5 * (srt[rows, lo] + srt[rows, hi])
    return np.where(n > 0, out, np.nan)


@dataclass(frozen=True)
class Curves:
    """A metric's curves over runs, ready to draw.

    Attributes:
        mean: one row per (group, x point): columns ``*by`` (ordered categorical labels), ``x``
            (float64), ``mean``, ``lo``, ``hi``, ``std`` (ddof=1), ``n`` (int64, runs with data).
        runs: per-run curves as averaged (smoothed): columns ``*by``, ``run_id``, ``x``, ``y``;
            None unless asked for.
        caption: what the line, band and smoothing are.
        metric: the y column.
        x: the x kind.
        smoothing: the keywords applied to each run (``{}`` for raw values).
        points: the median number of logged points per run (the ``n`` of the auto rule).
    """

    mean: pd.DataFrame
    runs: pd.DataFrame | None
    caption: str
    metric: str
    x: str
    smoothing: dict[str, Any]
    points: int


def curves(
    df: pd.DataFrame,
    metric: str,
    *,
    x: XKind = "step",
    by: Sequence[str] = ("loss_type",),
    ci: Literal["t", "bootstrap"] = "t",
    confidence: float = 0.95,
    smoothing: Any = None,
    rows: np.ndarray | None = None,
    keep_runs: bool = False,
    n_boot: int = 1000,
    seed: int = 0,
    grid_points: int = 200,
    center: Literal["mean", "median"] = "mean",
    index: FrameIndex | None = None,
    infinite: bool = False,
    values: np.ndarray | None = None,
) -> Curves:
    """Mean curve over runs and its confidence band, per group of ``by`` and per x.

    With ``x="step"`` runs are aligned on their logged steps. With ``x="tokens"`` or ``"time"``
    runs are logged at different x, so each run is linearly interpolated onto ``grid_points``
    evenly spaced points over the x range that every run of its group reached (no
    extrapolation, no tail drawn from the longest run alone). ``n`` says how many runs cover each
    point.

    Args:
        df: frame from :func:`analysis.load.load` (``run_id``, ``step``, ``metric``, ``by`` columns).
        metric: column to aggregate; NaN rows (e.g. non-eval steps) are ignored.
        x: ``"step"``, ``"tokens"`` or ``"time"`` (see :func:`x_values`).
        by: grouping columns (hue and facets); missing values form their own ``"(none)"`` group.
        ci: ``"t"``: Student-t interval, df = n - 1 (:func:`analysis.stats.t_interval_from_moments`);
            ``"bootstrap"``: percentile bootstrap over runs
            (:func:`analysis.stats.bootstrap_mean_interval`).
        confidence: two-sided coverage.
        smoothing: ``"auto"``, ``"none"``/None, ``{"ema": alpha}`` or ``{"window": n_points}``
            (:func:`analysis.smoothing.resolve_smoothing`), applied to each run before averaging.
        rows: bool mask of shape ``(len(df),)``: only these rows count (e.g. off-policy steps).
        keep_runs: also return the per-run curves.
        n_boot: bootstrap replicates (``ci="bootstrap"`` only).
        seed: bootstrap seed; the same seed gives the same band.
        grid_points: interpolation points per group for ``x`` other than ``"step"``.
        center: ``"median"``: ``mean`` holds the median over runs instead, and no band is
            computed (``lo``/``hi`` NaN), e.g. for heavy-tailed ratios.
        index: :func:`frame_index` of ``df`` for ``by`` and ``x``, to share between metrics.
        infinite: keep ±inf values (e.g. log-ratios beyond float range) instead of leaving them
            out (and saying how many in the caption).
        values: shape ``(len(df),)``: the metric's values when they are not a column of ``df``
            (``metric`` then only names them).

    Returns:
        A :class:`Curves`.

    Raises:
        KeyError: if ``metric`` or a ``by`` column is missing.
        ValueError: for an unknown ``x``/``ci``, bad smoothing or ``values`` of another length.
    """
    if ci not in ("t", "bootstrap"):
        raise ValueError(f"ci must be 't' or 'bootstrap', got {ci!r}")
    by = list(dict.fromkeys(by))
    missing = [c for c in [*([metric] if values is None else []), *by] if c not in df.columns]
    if missing:
        raise KeyError(f"columns not in frame: {missing}")
    ix = index if index is not None else frame_index(df, by, x)
    if ix.by != tuple(by) or ix.x != x or ix.rows != len(df):
        raise ValueError("index was made for another frame, grouping or x")
    y_all = df[metric].to_numpy(dtype=np.float64) if values is None else np.asarray(values, dtype=np.float64)
    if y_all.shape != (len(df),):
        raise ValueError(f"values: shape {y_all.shape}, expected ({len(df)},)")

    keep = ~np.isnan(y_all) if infinite else np.isfinite(y_all)
    all_finite = bool(keep.all()) if not infinite else bool(np.isfinite(y_all).all())
    non_finite = 0 if infinite or all_finite else int(np.isinf(y_all).sum())
    if x != "step":
        keep &= ~np.isnan(ix.x_all)
    if rows is not None:
        keep &= np.asarray(rows, dtype=bool)
    kept_all = bool(keep.all())
    fast_complete = x == "step" and ix.complete and kept_all and all_finite
    plan = None
    if fast_complete:
        counts = np.full(ix.n_codes, ix.step_grid.size, dtype=np.int64)
    elif x == "step" and ix.step_col is not None:
        # the kept rows' positions, runs and steps, shared by the metrics kept on the same rows
        plan = ix.row_plan(keep)
        counts = plan.counts
    else:
        r, xv, yv = (
            (ix.run_all, ix.x_all, y_all) if kept_all else (ix.run_all[keep], ix.x_all[keep], y_all[keep])
        )
        counts = np.bincount(r, minlength=ix.n_codes) if r.size else np.zeros(ix.n_codes, dtype=np.int64)
    points = int(np.median(counts[counts > 0])) if (counts > 0).any() else 0
    skw = _run_smoothing(smoothing, counts, points)

    if fast_complete:
        matrices = _complete_matrices(ix, y_all, skw)
    elif plan is not None:
        matrices = _planned_matrices(ix, plan, y_all if kept_all else y_all[plan.sel], skw)
    else:
        matrices = _row_matrices(ix, r, xv, yv, skw, grid_points)
    shown = [(k, *matrices[k]) for k in ix.order_groups]
    bands = [_band(mat, center, ci, confidence, n_boot, seed) for _, _, mat, _ in shown]
    mean_frame = _mean_frame(ix, by, [xs for _, xs, _, _ in shown], bands)
    caption = band_caption(
        ci, confidence, n_boot, seed, runs=[int(np.max(b["n"])) for b in bands if len(b["n"])]
    )
    smooth_text = smoothing_caption(skw, smoothing, points, counts[counts > 0])
    if smooth_text:
        caption += " " + smooth_text
    if x != "step":
        what = "generated tokens" if x == "tokens" else "time"
        caption += f" Each curve spans the {what} that every run of its variant reached."
    if non_finite:
        caption += f" {non_finite} infinite value(s) of {metric} left out."
    runs_frame = _run_curves(ix, by, shown) if keep_runs else None
    return Curves(mean_frame, runs_frame, caption, metric, x, skw, points)  # skw["window"] may be per run


#: One group's curves: (points,) x, (points, runs) values (NaN where a run has none), (runs,) run codes.
GroupMatrix = tuple[np.ndarray, np.ndarray, np.ndarray]


def _run_smoothing(smoothing: Any, counts: np.ndarray, points: int) -> dict[str, Any]:
    """The smoothing keywords each run gets (:func:`analysis.smoothing.resolve_smoothing`);
    ``"auto"`` gives each run its own window, a tenth of its own logged points (``counts``, shape
    ``(n_codes,)``): its last smoothed point is then exactly its final score, however many points
    the other runs logged."""
    skw = resolve_smoothing(smoothing, points)
    if smoothing != AUTO:
        return skw
    per_run = np.maximum(1, np.ceil(counts / 10)).astype(np.int64)
    return {"window": per_run} if (per_run[counts > 0] > 1).any() else {}


def _complete_matrices(ix: FrameIndex, y_all: np.ndarray, skw: dict[str, Any]) -> list[GroupMatrix]:
    """Per group, its matrix over the step grid when every run has every step and the metric no
    gap: the column ``y_all`` (shape ``(rows,)``) reshaped is the (runs, steps) matrix, and a
    trailing window runs along each row at once."""
    full = y_all.reshape(ix.n_codes, ix.step_grid.size)
    w = skw.get("window", 1)
    w = int(np.max(w)) if np.ndim(w) else w  # every run has every step: one window for all
    if w > 1:
        full = trailing_mean_rows(full, w)
    elif skw:
        full = smooth(full.T, **skw).T
    return [(ix.step_grid, full[members].T, members) for members in ix.members]


def _planned_matrices(
    ix: FrameIndex, plan: RowPlan, yv: np.ndarray, skw: dict[str, Any]
) -> list[GroupMatrix]:
    """Per group, its matrix over the steps any of its runs logged, from the values ``yv`` of the
    rows ``plan`` keeps (shape ``(kept,)``).

    Rows are sorted by (run, step) (as load returns them; checked once by the index), so each run
    is smoothed along its own logged points at once and scattered onto the step grid.
    """
    if "window" in skw:
        yv = windowed_mean(yv, plan.window_lo(skw["window"]))
    elif skw:
        starts_, kw = _run_windows(plan.r, skw)
        yv = smooth_runs(yv, starts_, **kw)
    full = np.full(ix.n_codes * ix.step_grid.size, np.nan)
    full[plan.flat] = yv
    full = full.reshape(ix.n_codes, ix.step_grid.size)
    out = []
    for members in ix.members:
        mat = full[members].T
        has = (~np.isnan(mat)).any(axis=1)
        out.append((ix.step_grid[has], mat[has], members))
    return out


def _row_matrices(
    ix: FrameIndex, r: np.ndarray, xv: np.ndarray, yv: np.ndarray, skw: dict[str, Any], grid_points: int
) -> list[GroupMatrix]:
    """Per group, its matrix (:func:`_group_matrix`) from kept rows in any order: run codes ``r``,
    x ``xv`` and values ``yv``, each shape ``(kept,)``."""
    if not _sorted_within_runs(r, xv):
        order = np.lexsort((xv, r))
        r, xv, yv = r[order], xv[order], yv[order]
    g = ix.group_of_run[r] if r.size else np.zeros(0, dtype=np.int64)
    # Stable sort by group keeps each run's rows contiguous and in x order.
    order = np.argsort(g, kind="stable")
    g, r, xv, yv = g[order], r[order], xv[order], yv[order]
    bounds = np.searchsorted(g, np.arange(ix.n_groups + 1))
    return [
        _group_matrix(r[a:b], xv[a:b], yv[a:b], ix.x, skw, grid_points)
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ]


def _band(
    mat: np.ndarray, center: str, ci: str, confidence: float, n_boot: int, seed: int
) -> dict[str, np.ndarray]:
    """The centre line and band of a ``(points, runs)`` matrix: ``mean``, ``lo``, ``hi``, ``std``
    (ddof=1) and ``n`` (runs with data), each shape ``(points,)``. ``center="median"``: ``mean``
    is the median and the others but ``n`` are NaN."""
    if center == "median":  # no moments needed: the median and how many runs it is over
        mean = nan_median_rows(mat)
        n = (~np.isnan(mat)).sum(axis=1)
        std = lo = hi = np.full(mean.shape, np.nan)
    else:
        mean, std, n = stats.nan_moments(mat, axis=1)
        if ci == "t":
            lo, hi = stats.t_interval_from_moments(mean, std, n, confidence)
        else:
            lo, hi = stats.bootstrap_mean_interval(mat, reps=n_boot, confidence=confidence, seed=seed)
    return {
        name: np.asarray(a) for name, a in (("mean", mean), ("lo", lo), ("hi", hi), ("std", std), ("n", n))
    }


def _mean_frame(
    ix: FrameIndex, by: list[str], xs: list[np.ndarray], bands: list[dict[str, np.ndarray]]
) -> pd.DataFrame:
    """:attr:`Curves.mean` from the shown groups' (``ix.order_groups``) x points and bands: their
    rows one after the other, labelled by each group's ``by`` labels."""
    lengths = [len(x) for x in xs]
    data: dict[str, Any] = {}
    for col in by:
        cat = ix.group_labels[col]
        data[col] = pd.Categorical.from_codes(
            np.repeat(np.asarray(cat.codes)[ix.order_groups], lengths),
            categories=cat.categories,
            ordered=True,
        )
    parts = {
        "x": [np.asarray(x) for x in xs],
        **{k: [b[k] for b in bands] for k in ("mean", "lo", "hi", "std", "n")},
    }
    for name, arrays in parts.items():
        dtype = np.int64 if name == "n" else np.float64
        data[name] = np.concatenate(arrays).astype(dtype) if arrays else np.zeros(0, dtype)
    return pd.DataFrame(data)


def _run_curves(
    ix: FrameIndex, by: list[str], shown: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]
) -> pd.DataFrame:
    """:attr:`Curves.runs`: each run's points as averaged, group by group as ``shown``
    (``(group, xs, mat, members)``), runs without points left out."""
    parts = []
    for k, xs, mat, members in shown:
        if not mat.size:
            continue
        for j, code in enumerate(members):
            ok = ~np.isnan(mat[:, j])
            if not ok.any():
                continue
            part = {col: ix.group_labels[col][[k] * int(ok.sum())] for col in by}
            part.update({layout.RUN_ID: str(ix.run_names[code]), "x": xs[ok], "y": mat[ok, j]})
            parts.append(pd.DataFrame(part))
    if not parts:
        return pd.DataFrame({**{c: pd.Categorical([]) for c in by}, layout.RUN_ID: [], "x": [], "y": []})
    return pd.concat(parts, ignore_index=True)


def aggregate(df: pd.DataFrame, metric: str, **kwargs: Any) -> pd.DataFrame:
    """:func:`curves`' mean frame alone (its caption, metric and x are in :func:`curves`' record).

    Takes the keywords of :func:`curves` (``keep_runs`` excepted).
    """
    return curves(df, metric, **kwargs).mean


def _run_windows(r: np.ndarray, skw: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
    """Run starts of ``r`` (sorted run codes) and the smoothing keywords, a per-code window array
    narrowed to those runs."""
    starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    w = skw.get("window")
    if w is not None and np.ndim(w):
        return starts, {"window": np.asarray(w)[r[starts]]}
    return starts, skw


def _sorted_within_runs(r: np.ndarray, xv: np.ndarray) -> bool:
    if r.size < 2:
        return True
    dr = np.diff(r)
    return bool(np.all((dr > 0) | ((dr == 0) & (np.diff(xv) >= 0))))


def _group_matrix(
    r: np.ndarray,
    xv: np.ndarray,
    yv: np.ndarray,
    x: str,
    skw: dict[str, Any],
    grid_points: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(points,) x, (points, runs) values and (runs,) run codes of one group; NaN where a run has no data."""
    if r.size == 0:
        return np.zeros(0), np.zeros((0, 0)), np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    ends = np.r_[starts[1:], r.size]
    if skw:
        starts_, kw = _run_windows(r, skw)
        yv = smooth_runs(yv, starts_, **kw)
    run_index = np.repeat(np.arange(starts.size), ends - starts)
    members = r[starts]
    if x == "step":
        xs, inverse = np.unique(xv, return_inverse=True)
        mat = np.full((xs.size, starts.size), np.nan)
        mat[np.asarray(inverse).ravel(), run_index] = yv
        return xs, mat, members
    # Runs reach different token counts and times: the curve spans the range every run of the group
    # reached, so each point is a mean over all of them (a tail over the one longest run would be
    # a single run drawn as a mean, with a band that explodes as runs drop out).
    lo, hi = np.max(xv[starts]), np.min(xv[ends - 1])
    if not lo < hi:
        lo, hi = xv.min(), xv.max()
    xs = np.linspace(lo, hi, grid_points) if xv.size else np.zeros(0)
    mat = np.full((xs.size, starts.size), np.nan)
    for j, (a, b) in enumerate(zip(starts, ends, strict=True)):
        mat[:, j] = np.interp(xs, xv[a:b], yv[a:b], left=np.nan, right=np.nan)
    return xs, mat, members
