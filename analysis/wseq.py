"""The sequence importance ratio ``w_seq`` over training: its per-step quantiles as numbers
(:func:`wseq_bands`, the median over runs of each run's p05, p50 and p95) and its figure
(:func:`wseq_figure`, one log-scale panel per variant and facet, each :func:`plot_wseq` on its ``ax``).

Over off-policy steps only (:func:`analysis.offpolicy.off_policy_rows`): on an on-policy step
``w_seq`` is exactly 1. Figures return ``(fig, axes)`` and never save.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullFormatter, NullLocator

from analysis import style
from analysis.aggregate import XKind, curves, frame_index
from analysis.labels import format_value
from analysis.limits import robust_limits
from analysis.offpolicy import off_policy_rows
from analysis.panels import Drawn, Facets, finish_grid, fit_legend, hue_labels_of, no_data, wrap_title

__all__ = ["WSEQ_Q", "frame_wseq_figure", "plot_wseq", "wseq_bands", "wseq_figure", "wseq_limits"]

#: The per-step quantiles of w_seq over a step's completions that a run logs.
WSEQ_Q = ("w_seq/p05", "w_seq/p50", "w_seq/p95")


def wseq_bands(
    df: pd.DataFrame,
    *,
    by: Sequence[str],
    x: XKind = "step",
    rows: np.ndarray | None = None,
    smoothing: Any = None,
    split: str | None = None,
    index: Any = None,
) -> pd.DataFrame:
    """Per (group, x): the median over runs of each run's per-step w_seq p05, p50 and p95.

    Each run's quantile series is taken over ``rows`` only (off-policy steps), smoothed on the
    log scale (``smoothing``: keywords of :func:`analysis.smoothing.smooth`), and the median over
    the group's runs is taken at each x (the median, because ratios are heavy-tailed and one run's
    blow-up should not move the summary). A quantile of 0 (underflow) or infinity (beyond float
    range) is kept as such: a window holding one is infinite, and the median over runs is infinite
    when most runs are.

    Args:
        df: frame from :func:`analysis.load.load` with ``w_seq/p05``, ``w_seq/p50``, ``w_seq/p95``.
        by: label columns (hue and facets).
        x: x kind; for tokens and time each run is interpolated onto a common grid
            (:func:`analysis.aggregate.curves`).
        rows: bool mask over ``df``'s rows; None for every row.
        smoothing: as in :func:`analysis.aggregate.curves` (``"auto"``: each run's own window).
        split: a column (e.g. ``reuse_index``) whose values become separate series in each group.
        index: :func:`analysis.aggregate.frame_index` of ``df`` for ``by`` and ``x``, when already
            made.

    Returns:
        Columns ``*by``, (``split``), ``x``, ``p05``, ``p50``, ``p95`` (w_seq units) and ``n``
        (runs with data), sorted by group and x. Empty when no row has w_seq quantiles.
    """
    keys = [*by, *([split] if split else [])]
    empty = pd.DataFrame(columns=[*keys, "x", "p05", "p50", "p95", "n"])
    if not all(q in df.columns for q in WSEQ_Q):
        return empty
    mask = np.ones(len(df), dtype=bool) if rows is None else np.asarray(rows, dtype=bool)
    logs = {}
    sel = None if mask.all() else np.flatnonzero(mask)  # the log of the rows drawn only
    with np.errstate(divide="ignore", invalid="ignore"):
        for q, name in zip(WSEQ_Q, ("p05", "p50", "p95"), strict=True):
            v = df[q].to_numpy(dtype=np.float64)
            # 0 -> -inf, inf -> inf: kept, and drawn at the axis' edge
            if sel is None:
                logs[name] = np.log(v)
            else:
                logs[name] = np.full(len(df), np.nan)
                logs[name][sel] = np.log(v[sel])
    by = list(by)
    ix = index if index is not None else frame_index(df, by, x)
    # The split column changes from step to step within a run (the pass over a generation batch),
    # so runs are grouped by ``by`` and each split value is its own selection of rows.
    if split:
        labels_ = df[split].map(lambda v: format_value(v) if v == v else "(none)").to_numpy(dtype=object)
        values = sorted(
            set(labels_[mask]), key=lambda v: (0, float(v)) if v.replace(".", "", 1).isdigit() else (1, v)
        )
        selections = [(v, mask & (labels_ == v)) for v in values]
    else:
        selections = [(None, mask)]
    parts = []
    for value, rows_v in selections:
        out = None
        for name in ("p05", "p50", "p95"):
            c = curves(
                df,
                name,
                x=x,
                by=by,
                smoothing=smoothing,
                rows=rows_v,
                center="median",
                index=ix,
                infinite=True,
                values=logs[name],
            )
            part = c.mean.rename(columns={"mean": name})
            if out is None:
                out = part[[*by, "x", name, "n"]]
            elif len(part) == len(out) and all(part[k].equals(out[k]) for k in (*by, "x")):
                out[name] = part[name].to_numpy()  # the quantiles were logged on the same steps
            else:
                out = out.merge(part[[*by, "x", name]], on=[*by, "x"], how="outer")
        if out is not None and not out.empty:
            if split:
                out[split] = value
            parts.append(out)
    if not parts:
        return empty
    out = pd.concat(parts, ignore_index=True)
    for name in ("p05", "p50", "p95"):
        out[name] = np.exp(out[name].to_numpy(dtype=np.float64))
    return out.sort_values([*keys, "x"], kind="stable").reset_index(drop=True)


def plot_wseq(
    ax: Axes,
    bands: pd.DataFrame,
    facets: Facets,
    label: str,
    *,
    panel: Any = None,
    split: str | None = None,
    empty_text: str = "no off-policy steps",
    ylim: tuple[float, float] | None = None,
) -> Drawn:
    """One panel of the w_seq figure on ``ax``: the bands of variant ``label`` (all rows without
    ``facets.hue``) in panel column ``panel`` (``facets.col``'s label), a p05-p95 band and the p50
    line per value of ``split`` (darker for later ones), on a log axis with a dashed reference at
    ``w_seq = 1`` and readable ratio ticks. A panel without data says ``empty_text``.

    Args:
        bands: :func:`wseq_bands` over the hue and col label columns.
        ylim: the y range (default :func:`wseq_limits` of ``bands``; a figure shares one).

    Returns:
        What was drawn (the variant, when the panel has data).
    """
    part = bands
    if facets.hue is not None:
        part = part[(part[facets.hue].astype(str) == label).to_numpy()]
    if facets.col is not None:
        part = part[(part[facets.col].astype(str) == str(panel)).to_numpy()]
    lo_lim, hi_lim = ylim if ylim is not None else wseq_limits(bands)
    split_values = sorted(bands[split].dropna().unique()) if split and len(bands) else [None]
    color = facets.palette([label])[label]
    ax.set_yscale("log")
    ax.axhline(1.0, color="0.3", linestyle="--", linewidth=0.8)
    if part.empty:
        no_data(ax, empty_text)
    else:
        _draw_wseq_series(ax, part, split, split_values, color, (lo_lim, hi_lim))
    ax.set_ylim(lo_lim, hi_lim)
    _ratio_ticks(ax, lo_lim, hi_lim)
    return Drawn() if part.empty else Drawn(labels=[label])


def wseq_figure(
    bands: pd.DataFrame,
    facets: Facets,
    *,
    x: XKind = "step",
    split: str | None = None,
    ncols: int = 4,
    empty_text: str = "no off-policy steps",
) -> tuple[Figure, np.ndarray]:
    """The sequence importance ratio ``w_seq`` over training, one panel per variant (and facet),
    each :func:`plot_wseq`.

    Per (variant, step): the median over runs of each run's per-step p05, p50 and p95 of
    ``w_seq`` over its completions (:func:`wseq_bands`), over off-policy steps only. The band
    spans p05 to p95, the line is p50, on a log axis limited to the range the plotted quantiles
    actually take (robust 1%-99% of them), with a dashed reference at ``w_seq = 1``. With ``split``
    (e.g. ``reuse_index``) each value gets its own line and band, darker for later passes.

    Args:
        bands: :func:`wseq_bands` (``by`` = the hue and col label columns present).
        facets: the variants' column (one panel per label; None pools all runs into one panel),
            their order (default as ``bands`` has them), colours, and the panel column: panels are
            then laid out ``col`` labels (rows) × variants (columns); a ``col`` label whose runs
            are on-policy throughout (``facets.on_policy``) is left out.
        x: ``"step"``, ``"tokens"`` or ``"time"``.
        split: column of ``bands`` splitting each panel's series.
        ncols: panels per row without ``col``.
        empty_text: what a panel without data says.

    Returns:
        ``(fig, axes)``, ``axes`` 2-D; a panel without off-policy w_seq data says so.
    """
    hue, col = facets.hue, facets.col
    if facets.hue_order is not None:
        labels = list(facets.hue_order)
    else:
        labels = [str(v) for v in bands[hue].drop_duplicates()] if hue is not None and len(bands) else ["all"]
    labels = labels or ["all"]
    facets = replace(facets, colors=facets.palette(labels))
    values = facets.columns(bands)
    skipped = [f for f in values if f in facets.on_policy_columns()] if col is not None else []
    values = [f for f in values if f not in skipped] or ([None] if col is None else values)
    nc, nr, cells = _wseq_cells(labels, values, col, ncols)
    wrapped = col is not None and len(labels) > ncols
    ylim = wseq_limits(bands)
    split_values = sorted(bands[split].dropna().unique()) if split and len(bands) else [None]

    with style.context():
        fig = style.figure(nc, nr, panel_height=1.7)
        axes = fig.subplots(nr, nc, squeeze=False, sharex=True, sharey=True)
        for i, j, lab, fv in cells:
            ax = axes[i, j]
            plot_wseq(ax, bands, facets, lab, panel=fv, split=split, empty_text=empty_text, ylim=ylim)
            _title_wseq_panel(ax, lab if hue is not None else "all runs", fv, wrapped, i, j)
        finish_grid(axes, {(i, j) for i, j, _, _ in cells}, x)
        extra: list[Any] = [
            Patch(facecolor="0.6", alpha=0.4, label="p05-p95 of w_seq"),
            Line2D([], [], color="0.3", linewidth=1.2, label="median (p50)"),
            Line2D([], [], color="0.3", linestyle="--", linewidth=0.8, label="w_seq = 1"),
        ]
        if split and split_values != [None]:
            extra.extend(
                Line2D(
                    [], [], color=_shade("#555555", k, len(split_values)), label=f"{split} {format_value(v)}"
                )
                for k, v in enumerate(split_values)
            )
        fit_legend(fig, extra, None)  # panels are titled by their variant
    return fig, axes


def frame_wseq_figure(
    df: pd.DataFrame,
    facets: Facets | None = None,
    *,
    x: XKind = "step",
    smoothing: Mapping[str, Any] | None = None,
    split: str | None = None,
    ncols: int = 4,
) -> tuple[Figure, np.ndarray]:
    """The w_seq figure of a frame from :func:`analysis.load.load`: :func:`wseq_bands` over its
    off-policy steps, then :func:`wseq_figure` (variants and panel columns in the frame's order
    unless given; default the variants by ``loss_type``). A panel says "no data" when ``df``
    lacks the w_seq quantiles, else "no off-policy steps".
    """
    facets = facets or Facets(hue="loss_type")
    by = [b for b in (facets.hue, facets.col) if b is not None]
    have = all(q in df.columns and df[q].notna().any() for q in WSEQ_Q)
    bands = wseq_bands(df, by=by, x=x, rows=off_policy_rows(df)[0], smoothing=smoothing, split=split)
    order = facets.hue_order if facets.hue_order is not None else hue_labels_of(df, facets.hue, None)
    facets = replace(
        facets, hue_order=order if facets.hue is not None else None, col_values=facets.columns(df)
    )
    return wseq_figure(
        bands, facets, x=x, split=split, ncols=ncols, empty_text="no off-policy steps" if have else "no data"
    )


def _wseq_cells(
    labels: Sequence[str], facets: Sequence[Any], col: str | None, ncols: int
) -> tuple[int, int, list[tuple[int, int, str, Any]]]:
    """The layout of :func:`wseq_figure`: ``(columns, rows, cells)``, each cell ``(row, column,
    variant, facet)``: variants wrapped ``ncols`` to a row without ``col``; with it a row per
    facet and a column per variant, or (more than ``ncols`` variants) (facet, variant) pairs
    wrapped."""
    if col is None:
        nc = min(ncols, len(labels))
        return nc, -(-len(labels) // nc), [(k // nc, k % nc, lab, None) for k, lab in enumerate(labels)]
    if len(labels) <= ncols:
        cells = [(i, j, lab, fv) for i, fv in enumerate(facets) for j, lab in enumerate(labels)]
        return len(labels), max(len(facets), 1), cells
    # too many variants for one row per facet: (facet, variant) panels wrapped, both named
    pairs = [(fv, lab) for fv in facets for lab in labels]
    return (
        ncols,
        -(-len(pairs) // ncols),
        [(k // ncols, k % ncols, lab, fv) for k, (fv, lab) in enumerate(pairs)],
    )


def wseq_limits(bands: pd.DataFrame) -> tuple[float, float]:
    """The y range of the w_seq figure: the robust 1%-99% range of the plotted quantiles on the
    log scale, padded, at least ±0.01 around its middle and always around ``w_seq = 1``."""
    vals = bands[["p05", "p50", "p95"]].to_numpy(dtype=np.float64).ravel() if len(bands) else np.zeros(0)
    logs = np.log(vals[np.isfinite(vals) & (vals > 0)])
    lim = robust_limits(logs, q=0.01, pad=0.08)
    if lim is None or lim[1] - lim[0] < 0.02:
        mid = 0.0 if lim is None else (lim[0] + lim[1]) / 2
        lim = (min(mid - 0.05, -0.01), max(mid + 0.05, 0.01))
    return float(np.exp(min(lim[0], -0.005))), float(np.exp(max(lim[1], 0.005)))


def _draw_wseq_series(
    ax: Axes,
    part: pd.DataFrame,
    split: str | None,
    split_values: Sequence[Any],
    color: str,
    ylim: tuple[float, float],
) -> None:
    """One panel's w_seq: per value of ``split`` (``[None]``: all rows), a p05-p95 band and the
    p50 line, darker for later values, clipped to ``ylim``."""
    for k, sv in enumerate(split_values):
        p = part if sv is None else part[(part[split] == sv).to_numpy()]
        if p.empty:
            continue
        shade = _shade(color, k, len(split_values))
        xs = p["x"].to_numpy()
        q05, q50, q95 = (np.clip(p[q].to_numpy(dtype=np.float64), *ylim) for q in ("p05", "p50", "p95"))
        ok = ~(np.isnan(q05) | np.isnan(q95))
        if ok.any():
            ax.fill_between(xs, q05, q95, where=ok, color=shade, alpha=0.25, lw=0)
        ax.plot(xs, q50, color=shade, label=None if sv is None else f"{split} {format_value(sv)}")


def _title_wseq_panel(ax: Axes, title: str, fv: Any, wrapped: bool, i: int, j: int) -> None:
    """Name a w_seq panel: the variant (and facet, when wrapped or without facets) as its title,
    else the variant above the first row and the facet on the first column's y label."""
    if fv is None or wrapped:
        ax.set_title(wrap_title(title) + ("" if fv is None else f"\n{wrap_title(str(fv))}"))
        if j == 0:
            ax.set_ylabel("w_seq")
        return
    if i == 0:
        ax.set_title(wrap_title(title))
    if j == 0:
        ax.set_ylabel(f"{wrap_title(str(fv))}\nw_seq")


def _ratio_ticks(ax: Axes, lo: float, hi: float) -> None:
    """Readable ticks on a log axis of ratios: plain numbers (0.9, 1, 1.1) over a narrow range,
    powers of ten with 2 and 5 between over a wide one; no minor tick labels."""
    if hi / lo < 10:
        ticks = [
            t
            for t in MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
            if lo <= t <= hi and t > 0
        ]
        if 1.0 not in ticks and lo < 1.0 < hi:
            ticks.append(1.0)
        ax.yaxis.set_major_locator(FixedLocator(sorted(ticks)))
    else:
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=10))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_minor_formatter(NullFormatter())


def _shade(color: str, k: int, n: int) -> str:
    """``color`` darkened for the k-th of n series (k = 0 is the colour itself)."""
    if n <= 1 or k == 0:
        return color
    from matplotlib.colors import to_hex, to_rgb

    r, g, b = to_rgb(color)
    f = 1.0 - 0.45 * k / (n - 1)
    return to_hex((r * f, g * f, b * f))
