"""Learning curves: a metric against steps, generated tokens or wall-clock time, over seeds.

The band is computed once per (variant, x) from a (points × runs) matrix per variant, never per
plot call: a Student-t interval over runs by default (``ci="t"``), or a seeded percentile
bootstrap over runs on request (``ci="bootstrap"``). Runs are the independent samples; with 3-5
seeds the t quantile (2.8-4.3) matters, so a normal ``±1.96·se`` band is never used.

Plots return ``(fig, axes)`` and never save; see :func:`analysis.style.save`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from scipy.signal import lfilter

from analysis import stats, style
from analysis.load import NONE_LABEL
from harness import layout

__all__ = [
    "DYNAMICS_METRICS",
    "X_LABELS",
    "aggregate",
    "band_caption",
    "format_value",
    "metric_label",
    "plot_curves",
    "plot_panels",
    "plot_wseq",
    "smooth",
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

#: Training-dynamics panels, in display order.
DYNAMICS_METRICS: tuple[str, ...] = (
    layout.EVAL_ACCURACY,
    "entropy",
    "kl",
    "clip_ratio/region_mean",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "completions/mean_length",
    "vespo/phi_seq_mean",
)

_METRIC_LABELS: dict[str, str] = {
    "reward": "reward",
    "reward_std": "reward std within group",
    layout.EVAL_ACCURACY: "eval accuracy (greedy)",
    "entropy": "token entropy (nats)",
    "kl": "KL to reference",
    "clip_ratio/region_mean": "clipped fraction (any)",
    "clip_ratio/low_mean": "clipped fraction (low)",
    "clip_ratio/high_mean": "clipped fraction (high)",
    "completions/mean_length": "completion length (tokens)",
    "vespo/phi_seq_mean": "VESPO phi_seq (mean)",
    "loss": "loss",
    layout.STEP_WALL_S: "seconds per step",
}


def metric_label(metric: str) -> str:
    """Human-readable axis label for a metric column (the column name itself when unknown)."""
    return _METRIC_LABELS.get(metric, metric)


def band_caption(
    ci: str = "t",
    confidence: float = 0.95,
    n_boot: int = 1000,
    seed: int = 0,
    smoothing: Mapping[str, float] | None = None,
) -> str:
    """One sentence saying what a curve's line and band are, for captions and the report index."""
    pct = f"{100 * confidence:g}%"
    if ci == "t":
        band = f"{pct} Student-t interval over runs (df = runs - 1)"
    else:
        band = f"{pct} percentile bootstrap interval over runs ({n_boot} resamples, seed {seed})"
    text = f"Line: mean over runs (seeds); band: {band}; no band where fewer than 2 runs have data."
    if smoothing:
        kind, value = next(iter(smoothing.items()))
        what = (
            f"EMA with alpha = {value:g}" if kind == "ema" else f"trailing rolling mean over {value:g} points"
        )
        text += f" Each run smoothed before averaging ({what})."
    return text


def format_value(v: Any) -> str:
    """A config value as a short label: ``1.0`` → ``"1"``, ``1e-05`` → ``"1e-05"``, ``True`` → ``"True"``."""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (float, np.floating)) and float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return f"{float(v):g}"
    return str(v)


def variant_labels(values: pd.Series | Sequence[Any]) -> pd.Categorical:
    """Values of a grid axis as display labels: strings in natural order, missing as ``"(none)"``.

    Numbers sort numerically (so ``1e-6`` precedes ``1e-5``), strings lexically, and the missing
    label comes last. A missing value is never dropped: it is a variant like any other.

    Args:
        values: one value per row (any dtype, including categorical).

    Returns:
        A categorical of strings with ordered categories, same length as ``values``.
    """
    s = values if isinstance(values, pd.Series) else pd.Series(list(values), dtype=object)
    codes, uniques = pd.factorize(s)
    uniq = list(uniques)
    rendered = [format_value(v) for v in uniq]
    order = sorted(range(len(uniq)), key=lambda i: _sort_key(uniq[i]))
    labels = list(dict.fromkeys(rendered[i] for i in order))
    position = {lab: k for k, lab in enumerate(labels)}
    # Index -1 (a missing value's code) lands on the extra last slot: the "(none)" label.
    remap = np.array([position[r] for r in rendered] + [len(labels)], dtype=np.int64)
    if (codes < 0).any():
        labels.append(NONE_LABEL)
    return pd.Categorical.from_codes(remap[codes], categories=labels, ordered=True)


def _sort_key(v: Any) -> tuple[int, Any]:
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)):
        return (0, float(v))
    return (1, str(v))


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
        run = _run_codes(df)
        cs = np.cumsum(v)
        starts = np.flatnonzero(np.r_[True, run[1:] != run[:-1]])
        offset = np.repeat(cs[starts] - v[starts], np.diff(np.r_[starts, len(v)]))
        out = np.where(gaps, cs - offset, out)
    return out


def _run_codes(df: pd.DataFrame) -> np.ndarray:
    rid = df[layout.RUN_ID]
    if isinstance(rid.dtype, pd.CategoricalDtype):
        return rid.cat.codes.to_numpy()
    return pd.factorize(rid)[0]


def smooth(y: np.ndarray, *, ema: float | None = None, window: int | None = None) -> np.ndarray:
    """Smooth one run's series along axis 0 (columns are independent runs).

    ``ema``: exponential moving average ``s_t = a·y_t + (1-a)·s_{t-1}``, ``s_0 = y_0`` (pandas
    ``ewm(alpha=a, adjust=False)``). ``window``: trailing mean over the last ``window`` points
    (fewer at the start). Give at most one.

    Args:
        y: shape ``(n_points,)`` or ``(n_points, n_runs)``, no NaNs.
        ema: smoothing weight in (0, 1]; 1 means no smoothing.
        window: points in the rolling window, >= 1.

    Returns:
        Array of ``y``'s shape.

    Raises:
        ValueError: if both or an invalid value are given.
    """
    y = np.asarray(y, dtype=np.float64)
    if ema is not None and window is not None:
        raise ValueError("give either ema or window, not both")
    if y.shape[0] == 0:
        return y
    if ema is not None:
        if not 0.0 < ema <= 1.0:
            raise ValueError(f"ema must be in (0, 1], got {ema}")
        zi = ((1.0 - ema) * y[:1])[None] if y.ndim > 1 else np.array([(1.0 - ema) * y[0]])
        out, _ = lfilter([ema], [1.0, -(1.0 - ema)], y, axis=0, zi=zi.reshape((1, *y.shape[1:])))
        return out
    if window is not None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        cs = np.cumsum(np.concatenate([np.zeros((1, *y.shape[1:])), y]), axis=0)
        idx = np.arange(1, y.shape[0] + 1)
        lo = np.maximum(idx - int(window), 0)
        count = (idx - lo).reshape((-1,) + (1,) * (y.ndim - 1))
        return (cs[idx] - cs[lo]) / count
    return y


def _smoothing_kwargs(smoothing: Mapping[str, float] | None) -> dict[str, Any]:
    if not smoothing:
        return {}
    unknown = set(smoothing) - {"ema", "window"}
    if unknown or len(smoothing) != 1:
        raise ValueError(f"smoothing must be {{'ema': alpha}} or {{'window': n}}, got {dict(smoothing)}")
    kind, value = next(iter(smoothing.items()))
    return {"ema": float(value)} if kind == "ema" else {"window": int(value)}


def aggregate(
    df: pd.DataFrame,
    metric: str,
    *,
    x: XKind = "step",
    by: Sequence[str] = ("loss_type",),
    ci: Literal["t", "bootstrap"] = "t",
    confidence: float = 0.95,
    smoothing: Mapping[str, float] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    grid_points: int = 200,
) -> pd.DataFrame:
    """Mean curve over runs and its confidence band, per group of ``by`` and per x.

    With ``x="step"`` runs are aligned on their logged steps. With ``x="tokens"`` or ``"time"``
    runs are logged at different x, so each run is linearly interpolated onto ``grid_points``
    evenly spaced points spanning its group's x range; a run contributes only inside its own range
    (no extrapolation). ``n`` says how many runs cover each point.

    Args:
        df: frame from :func:`analysis.load.load` (``run_id``, ``step``, ``metric``, ``by`` columns).
        metric: column to aggregate; NaN rows (e.g. non-eval steps) are ignored.
        x: ``"step"``, ``"tokens"`` or ``"time"`` (see :func:`x_values`).
        by: grouping columns (hue and facets); missing values form their own ``"(none)"`` group.
        ci: ``"t"``: Student-t interval, df = n - 1 (:func:`analysis.stats.t_interval_from_moments`);
            ``"bootstrap"``: percentile bootstrap over runs
            (:func:`analysis.stats.bootstrap_mean_interval`).
        confidence: two-sided coverage.
        smoothing: ``{"ema": alpha}`` or ``{"window": n_points}``, applied to each run before
            averaging (see :func:`smooth`); None for raw values.
        n_boot: bootstrap replicates (``ci="bootstrap"`` only).
        seed: bootstrap seed; the same seed gives the same band.
        grid_points: interpolation points per group for ``x`` other than ``"step"``.

    Returns:
        One row per (group, x point), sorted by group then x, with columns ``*by`` (categorical
        labels, see :func:`variant_labels`), ``x`` (float64: steps, tokens or seconds),
        ``mean``, ``lo``, ``hi``, ``std`` (ddof=1) and ``n`` (int64, runs with data). ``lo``/``hi``
        are NaN where ``n < 2``. ``attrs["caption"]`` describes the band.

    Raises:
        KeyError: if ``metric`` or a ``by`` column is missing.
        ValueError: for an unknown ``x``/``ci`` or bad smoothing.
    """
    if ci not in ("t", "bootstrap"):
        raise ValueError(f"ci must be 't' or 'bootstrap', got {ci!r}")
    by = [b for b in dict.fromkeys(by)]
    missing = [c for c in [metric, *by] if c not in df.columns]
    if missing:
        raise KeyError(f"columns not in frame: {missing}")
    skw = _smoothing_kwargs(smoothing)

    y_all = df[metric].to_numpy(dtype=np.float64)
    x_all = x_values(df, x)
    run_all = _run_codes(df)
    n_codes = int(run_all.max()) + 1 if run_all.size else 0
    # Group keys are per-run values (grid axes), so they are read from each run's first row and
    # grouped over runs rather than over every row.
    first = np.full(n_codes, -1, dtype=np.int64)
    first[run_all[::-1]] = np.arange(len(df) - 1, -1, -1)
    runs_present = np.flatnonzero(first >= 0)
    keys = df[by].iloc[first[runs_present]].reset_index(drop=True) if by else pd.DataFrame(index=runs_present)
    if by and len(keys):
        gid = keys.groupby(by, observed=True, dropna=False, sort=False).ngroup().to_numpy()
    else:
        gid = np.zeros(len(runs_present), dtype=np.int64)
    n_groups = int(gid.max()) + 1 if gid.size else 0
    group_of_run = np.full(n_codes, -1, dtype=np.int64)
    group_of_run[runs_present] = gid

    keep = ~np.isnan(y_all)
    if x != "step":
        keep &= ~np.isnan(x_all)
    if keep.all():
        r, xv, yv = run_all, x_all, y_all
    else:
        r, xv, yv = run_all[keep], x_all[keep], y_all[keep]

    matrices: list[tuple[np.ndarray, np.ndarray]] = []
    dense = None
    if x == "step" and not skw and r.size:
        dense = _dense_step_matrix(r, xv, yv, n_codes)
    if dense is not None:
        steps, full = dense
        for k in range(n_groups):
            mat = full[group_of_run == k].T
            has = ~np.all(np.isnan(mat), axis=1)
            matrices.append((steps[has], mat[has]))
    else:
        if not _sorted_within_runs(r, xv):
            order = np.lexsort((xv, r))
            r, xv, yv = r[order], xv[order], yv[order]
        g = group_of_run[r]
        # Stable sort by group keeps each run's rows contiguous and in x order.
        order = np.argsort(g, kind="stable")
        g, r, xv, yv = g[order], r[order], xv[order], yv[order]
        bounds = np.searchsorted(g, np.arange(n_groups + 1))
        for k in range(n_groups):
            a, b = bounds[k], bounds[k + 1]
            matrices.append(_group_matrix(r[a:b], xv[a:b], yv[a:b], x, skw, grid_points))

    group_first = np.zeros(n_groups, dtype=np.int64)
    group_first[gid[::-1]] = np.arange(len(gid) - 1, -1, -1)
    labels = {col: variant_labels(keys[col].iloc[group_first].astype(object)) for col in by}
    order_groups = np.lexsort([labels[c].codes for c in reversed(by)]) if by else np.arange(n_groups)

    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("x", "mean", "lo", "hi", "std", "n")}
    lengths = []
    for k in order_groups:
        xs, mat = matrices[k]
        mean, std, n = stats.nan_moments(mat, axis=1)
        if ci == "t":
            lo, hi = stats.t_interval_from_moments(mean, std, n, confidence)
        else:
            lo, hi = stats.bootstrap_mean_interval(mat, reps=n_boot, confidence=confidence, seed=seed)
        for name, arr in (("x", xs), ("mean", mean), ("lo", lo), ("hi", hi), ("std", std), ("n", n)):
            cols[name].append(np.asarray(arr))
        lengths.append(len(xs))
    data: dict[str, Any] = {}
    for col in by:
        cat = labels[col]
        data[col] = pd.Categorical.from_codes(
            np.repeat(cat.codes[order_groups], lengths), categories=cat.categories, ordered=True
        )
    for name, parts in cols.items():
        dtype = np.int64 if name == "n" else np.float64
        data[name] = np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)
    out = pd.DataFrame(data)
    out.attrs["caption"] = band_caption(ci, confidence, n_boot, seed, smoothing)
    out.attrs["metric"] = metric
    out.attrs["x"] = x
    return out


def _dense_step_matrix(
    r: np.ndarray, xv: np.ndarray, yv: np.ndarray, n_runs: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """(steps,) and (runs, steps) matrix of values, or None when steps are too sparse for one."""
    lo, hi = xv.min(), xv.max()
    width = hi - lo + 1
    # Optimizer steps are integers, so a step's column is an offset and no sort is needed.
    if width <= 4 * xv.size + 1024 and np.all(xv == np.round(xv)):
        steps = np.arange(lo, hi + 1)
        col = (xv - lo).astype(np.int64)
    else:
        steps, col = np.unique(xv, return_inverse=True)
        col = np.asarray(col).ravel()
    if n_runs * steps.size > 50_000_000:
        return None
    full = np.full((n_runs, steps.size), np.nan)
    full[r, col] = yv
    return steps, full


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
) -> tuple[np.ndarray, np.ndarray]:
    """(points,) x coordinates and (points, runs) values of one group; NaN where a run has no data."""
    if r.size == 0:
        return np.zeros(0), np.zeros((0, 0))
    starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    ends = np.r_[starts[1:], r.size]
    if skw:
        yv = yv.copy()
        for a, b in zip(starts, ends, strict=True):
            yv[a:b] = smooth(yv[a:b], **skw)
    run_index = np.repeat(np.arange(starts.size), ends - starts)
    if x == "step":
        xs, inverse = np.unique(xv, return_inverse=True)
        mat = np.full((xs.size, starts.size), np.nan)
        mat[inverse, run_index] = yv
        return xs, mat
    xs = np.linspace(xv.min(), xv.max(), grid_points) if xv.size else np.zeros(0)
    mat = np.full((xs.size, starts.size), np.nan)
    for j, (a, b) in enumerate(zip(starts, ends, strict=True)):
        mat[:, j] = np.interp(xs, xv[a:b], yv[a:b], left=np.nan, right=np.nan)
    return xs, mat


def _facet_values(df: pd.DataFrame, agg: pd.DataFrame, col: str | None) -> list[Any]:
    """Facet labels from the whole frame, so a facet whose metric is all-missing still appears."""
    if col is None:
        return [None]
    if col in df.columns and len(df):
        return list(variant_labels(df[col].drop_duplicates()).categories)
    return list(agg[col].cat.categories) if len(agg) else [None]


def _panel_title(col: str | None, cv: Any, row: str | None, rv: Any) -> str:
    parts = []
    if row is not None and rv is not None:
        parts.append(f"{row}={rv}")
    if col is not None and cv is not None:
        parts.append(f"{col}={cv}")
    return ", ".join(parts)


def _draw(ax: Axes, part: pd.DataFrame, color: str, label: str, band: bool = True) -> None:
    xs = part["x"].to_numpy()
    ax.plot(xs, part["mean"].to_numpy(), color=color, label=label)
    if band:
        lo, hi = part["lo"].to_numpy(), part["hi"].to_numpy()
        ok = ~(np.isnan(lo) | np.isnan(hi))
        if ok.any():
            ax.fill_between(xs, lo, hi, where=ok, color=color, alpha=0.2, linewidth=0, interpolate=False)


def _no_data(ax: Axes) -> None:
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="0.4")


def _legend(
    fig: Figure, labels: Sequence[str], colors: Mapping[str, str], title: str | None, extra: Sequence = ()
):
    handles = [Line2D([], [], color=colors[lab], label=lab) for lab in labels]
    handles.extend(extra)
    if not handles:
        return None
    # Long labels (several differing keys) go in one column to the right, so neither the legend
    # overlaps the axes nor the figure grows one label-width per variant.
    longest = max(len(h.get_label()) for h in handles)
    if longest > 24:
        width, height = fig.get_size_inches()
        fig.set_size_inches(width + 0.055 * longest + 0.6, height)  # room for the legend (8 pt text)
        return fig.legend(handles=handles, loc="outside right upper", ncols=1, title=title)
    return fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), title=title)


def plot_curves(
    df: pd.DataFrame,
    metric: str = "reward",
    *,
    x: XKind = "step",
    hue: str | None = "loss_type",
    col: str | None = None,
    row: str | None = None,
    ci: Literal["t", "bootstrap"] = "t",
    confidence: float = 0.95,
    smoothing: Mapping[str, float] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    colors: Mapping[str, str] | None = None,
    agg: pd.DataFrame | None = None,
    sharey: bool = True,
) -> tuple[Figure, np.ndarray]:
    """Mean ``metric`` over runs with its band, one line per ``hue`` value, faceted by ``col``/``row``.

    Args:
        df: frame from :func:`analysis.load.load`.
        metric: the y column (e.g. ``"reward"``).
        x: ``"step"``, ``"tokens"`` or ``"time"``.
        hue: column whose values are the lines (grid axis such as ``loss_type``); None for one line.
        col, row: columns whose values are facet columns/rows, or None.
        ci, confidence, smoothing, n_boot, seed: see :func:`aggregate`.
        colors: ``{label: colour}``; default :func:`analysis.style.variant_colors` of the labels.
            Pass the same mapping to every figure of a report for consistent colours.
        agg: a precomputed :func:`aggregate` result to draw instead of computing one.
        sharey: share y limits across facets.

    Returns:
        ``(fig, axes)``; ``axes`` has shape ``(n_rows, n_cols)``. The figure legend lists every
        hue value drawn (a missing value as ``"(none)"``). Facets without data say "no data".

    Raises:
        KeyError, ValueError: as :func:`aggregate`.
    """
    by = [c for c in (hue, col, row) if c is not None]
    if agg is None:
        agg = aggregate(
            df,
            metric,
            x=x,
            by=by,
            ci=ci,
            confidence=confidence,
            smoothing=smoothing,
            n_boot=n_boot,
            seed=seed,
        )
    hue_labels = list(agg[hue].cat.categories) if hue is not None and len(agg) else []
    colors = dict(colors) if colors is not None else {}
    for lab, c in style.variant_colors(hue_labels or ["all"]).items():
        colors.setdefault(lab, c)
    cols, rows = _facet_values(df, agg, col), _facet_values(df, agg, row)
    with style.context():
        fig = style.figure(len(cols), len(rows))
        axes = fig.subplots(len(rows), len(cols), squeeze=False, sharex=True, sharey=sharey)
        drawn: list[str] = []
        for i, rv in enumerate(rows):
            for j, cv in enumerate(cols):
                ax = axes[i, j]
                sel = np.ones(len(agg), dtype=bool)
                if row is not None and rv is not None:
                    sel &= (agg[row] == rv).to_numpy()
                if col is not None and cv is not None:
                    sel &= (agg[col] == cv).to_numpy()
                part = agg[sel]
                if part.empty or part["mean"].isna().all():
                    _no_data(ax)
                elif hue is None:
                    _draw(ax, part, colors["all"], metric)
                else:
                    for lab in hue_labels:
                        p = part[(part[hue] == lab).to_numpy()]
                        if len(p) and p["mean"].notna().any():
                            _draw(ax, p, colors[lab], lab)
                            if lab not in drawn:
                                drawn.append(lab)
                ax.set_title(_panel_title(col, cv, row, rv))
                if i == len(rows) - 1:
                    ax.set_xlabel(X_LABELS.get(x, x))
                if j == 0:
                    ax.set_ylabel(metric_label(metric))
        if hue is not None:
            _legend(fig, [lab for lab in hue_labels if lab in drawn], colors, hue)
    return fig, axes


def plot_panels(
    df: pd.DataFrame,
    metrics: Sequence[str] = DYNAMICS_METRICS,
    *,
    x: XKind = "step",
    hue: str | None = "loss_type",
    col: str | None = None,
    ci: Literal["t", "bootstrap"] = "t",
    confidence: float = 0.95,
    smoothing: Mapping[str, float] | None = None,
    colors: Mapping[str, str] | None = None,
    ncols: int = 3,
    skip_missing: bool = True,
) -> tuple[Figure, np.ndarray]:
    """Training-dynamics panels: one panel per metric (eval accuracy, entropy, KL, clipping, ...).

    Each panel is :func:`aggregate` of one metric (mean over runs, band as ``ci``). A metric that
    is absent or all-NaN in ``df`` is left out (``skip_missing``) or drawn as a "no data" panel; if
    no metric has data, one "no data" panel is returned.

    Args:
        df: frame from :func:`analysis.load.load`.
        metrics: metric columns, in panel order.
        x, hue, ci, confidence, smoothing, colors: as in :func:`plot_curves`.
        col: with a column given, panels are laid out metrics × ``col`` values instead of wrapped.
        ncols: panels per row when ``col`` is None.
        skip_missing: drop metrics without data instead of drawing "no data".

    Returns:
        ``(fig, axes)``; ``axes`` is 2-D; unused trailing axes are hidden. The figure legend lists
        every hue value drawn in any panel.
    """
    present = [m for m in metrics if m in df.columns and df[m].notna().any()]
    shown = present if skip_missing else list(metrics)
    by = [c for c in (hue, col) if c is not None]
    aggs = {
        m: aggregate(df, m, x=x, by=by, ci=ci, confidence=confidence, smoothing=smoothing) for m in present
    }
    hue_labels: list[str] = []
    for a in aggs.values():
        if hue is not None and len(a):
            hue_labels.extend(c for c in a[hue].cat.categories if c not in hue_labels)
    if hue is not None and hue in df.columns:
        order = list(variant_labels(df[hue].drop_duplicates()).categories)
        hue_labels = [h for h in order if h in hue_labels] + [h for h in hue_labels if h not in order]
    colors = dict(colors) if colors is not None else {}
    for lab, c in style.variant_colors(hue_labels or ["all"]).items():
        colors.setdefault(lab, c)
    if col is not None and col in df.columns:
        col_values = list(variant_labels(df[col].drop_duplicates()).categories)
    else:
        col_values = [None]

    if col is None:
        n = max(len(shown), 1)
        nc = min(ncols, n, int(np.ceil(np.sqrt(n))) if n <= 4 else ncols)
        nr = -(-n // nc)
        cells = [(k // nc, k % nc, m, None) for k, m in enumerate(shown)]
    else:
        nc, nr = len(col_values), max(len(shown), 1)
        cells = [(i, j, m, cv) for i, m in enumerate(shown) for j, cv in enumerate(col_values)]

    with style.context():
        fig = style.figure(nc, nr, panel_height=1.8)
        axes = fig.subplots(nr, nc, squeeze=False, sharex=True)
        used = set()
        drawn: list[str] = []
        for i, j, m, cv in cells:
            ax = axes[i, j]
            used.add((i, j))
            a = aggs.get(m)
            if a is not None and col is not None:
                a = a[(a[col] == cv).to_numpy()]
            if a is None or a.empty or a["mean"].isna().all():
                _no_data(ax)
            elif hue is None:
                _draw(ax, a, colors["all"], m)
            else:
                for lab in hue_labels:
                    p = a[(a[hue] == lab).to_numpy()]
                    if len(p) and p["mean"].notna().any():
                        _draw(ax, p, colors[lab], lab)
                        if lab not in drawn:
                            drawn.append(lab)
            title = metric_label(m)
            ax.set_title(title if cv is None else f"{title}\n{col}={cv}")
        if not cells:
            _no_data(axes[0, 0])
            used.add((0, 0))
        for i in range(nr):
            for j in range(nc):
                if (i, j) not in used:
                    axes[i, j].set_visible(False)
                elif i == nr - 1 or (i + 1, j) not in used:
                    axes[i, j].set_xlabel(X_LABELS.get(x, x))
                    axes[i, j].xaxis.set_tick_params(labelbottom=True)
        if hue is not None:
            _legend(fig, [lab for lab in hue_labels if lab in drawn], colors, hue)
    return fig, axes


_WSEQ_Q = ("w_seq/p05", "w_seq/p50", "w_seq/p95")


def plot_wseq(
    df: pd.DataFrame,
    *,
    hue: str | None = "loss_type",
    x: XKind = "step",
    colors: Mapping[str, str] | None = None,
    ncols: int = 4,
) -> tuple[Figure, np.ndarray]:
    """Sequence importance ratio ``w_seq`` over training: one panel per ``hue`` value.

    Per (variant, step), the median over runs of each run's per-step ``w_seq/p05``, ``p50`` and
    ``p95`` (the median, because ratios are heavy-tailed and a single run's blow-up should not
    move the summary); the band spans p05 to p95, the line is p50, on a log y axis with a dashed
    reference at ``w_seq = 1`` (on-policy). Values ``<= 0`` (underflow) and ``inf`` are clipped
    to the plotted range; a run whose ratio is exactly 1 throughout gives a flat line at 1.

    Args:
        df: frame from :func:`analysis.load.load` with the ``w_seq/p05|p50|p95`` columns.
        hue: column whose values get one panel each; None pools all runs into one panel.
        x: ``"step"``, ``"tokens"`` or ``"time"``; for the latter two, each step is placed at the
            mean x over runs at that step.
        colors: ``{label: colour}`` as in :func:`plot_curves`.
        ncols: panels per row.

    Returns:
        ``(fig, axes)``, ``axes`` 2-D; a variant (or the whole frame) without w_seq data gets a
        "no data" panel. The figure legend lists every variant panel.
    """
    cols = [c for c in _WSEQ_Q if c in df.columns]
    work = pd.DataFrame({"step": df[layout.STEP].to_numpy()})
    try:
        work["x"] = x_values(df, x)
    except KeyError:
        work["x"] = work["step"].astype(np.float64)
    for c in _WSEQ_Q:
        work[c] = df[c].to_numpy(dtype=np.float64) if c in cols else np.nan
    work["hue"] = variant_labels(df[hue]) if hue is not None else pd.Categorical(["all"] * len(df))
    labels = list(work["hue"].cat.categories) if len(work) else ["all"]
    med = (
        work.dropna(subset=list(_WSEQ_Q), how="all")
        .groupby(["hue", "step"], observed=True, sort=True)
        .agg(x=("x", "mean"), **{c: (c, "median") for c in _WSEQ_Q})
        .reset_index()
    )
    colors = dict(colors) if colors is not None else {}
    for lab, c in style.variant_colors(labels).items():
        colors.setdefault(lab, c)

    vals = med[list(_WSEQ_Q)].to_numpy(dtype=np.float64).ravel()
    finite_pos = vals[np.isfinite(vals) & (vals > 0)]
    floor = min(float(finite_pos.min()), 1.0) if finite_pos.size else 1.0
    ceil = max(float(finite_pos.max()), 1.0) if finite_pos.size else 1.0
    if ceil / floor < 1.5:
        # A ratio that is exactly (or nearly) 1 everywhere would give a degenerate log axis.
        mid = np.sqrt(ceil * floor)
        floor, ceil = mid / 1.5, mid * 1.5

    n = max(len(labels), 1)
    nc = min(ncols, n)
    nr = -(-n // nc)
    with style.context():
        fig = style.figure(nc, nr, panel_height=1.8)
        axes = fig.subplots(nr, nc, squeeze=False, sharex=True, sharey=True)
        for k, lab in enumerate(labels):
            ax = axes[k // nc, k % nc]
            part = med[(med["hue"] == lab).to_numpy()]
            ax.set_yscale("log")
            ax.axhline(1.0, color="0.3", linestyle="--", linewidth=0.8)
            if part.empty:
                _no_data(ax)
            else:
                xs = part["x"].to_numpy()
                q = {c: np.clip(part[c].to_numpy(dtype=np.float64), floor, ceil) for c in _WSEQ_Q}
                ok = ~(np.isnan(q["w_seq/p05"]) | np.isnan(q["w_seq/p95"]))
                if ok.any():
                    ax.fill_between(
                        xs, q["w_seq/p05"], q["w_seq/p95"], where=ok, color=colors[lab], alpha=0.25, lw=0
                    )
                ax.plot(xs, q["w_seq/p50"], color=colors[lab])
            ax.set_ylim(floor / 1.2, ceil * 1.2)
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=8))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.set_title(textwrap.fill(lab, 28), fontsize="small" if len(lab) > 28 else None)
            if k % nc == 0:
                ax.set_ylabel("w_seq (median over runs)")
        for k in range(len(labels), nr * nc):
            axes[k // nc, k % nc].set_visible(False)
        for j in range(nc):
            last = max((k for k in range(len(labels)) if k % nc == j), default=None)
            if last is not None:
                axes[last // nc, j].set_xlabel(X_LABELS.get(x, x))
                axes[last // nc, j].xaxis.set_tick_params(labelbottom=True)
        extra = [
            Patch(facecolor="0.6", alpha=0.4, label="p05-p95 band"),
            Line2D([], [], color="0.3", linestyle="--", linewidth=0.8, label="w_seq = 1"),
        ]
        _legend(fig, labels if hue is not None else [], colors, hue, extra=extra)
    return fig, axes
