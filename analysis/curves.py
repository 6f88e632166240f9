"""Learning-curve figures: a metric against steps, generated tokens or seconds, over seeds.

The numbers come from :mod:`analysis.aggregate` (mean over runs, band, smoothing); this module only
draws them. Plots return ``(fig, axes)`` and never save; see :func:`analysis.style.save`.

What every figure here does for its reader:

* y-limits from robust quantiles of what is drawn (:func:`analysis.aggregate.robust_limits`), so
  one early spike or a diverging seed does not flatten every other curve;
* a legend below the panels with as many columns as fit the figure's width, never wider;
* importance-ratio metrics (w_seq, clip fractions, ``phi_seq``) over off-policy steps only: on a
  step whose old log-probs are the current ones they are exactly 1 or 0 and carry no information,
  and drawing them makes a panel alternate between the two every step;
* facets that are on-policy throughout say so in their title.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullFormatter, NullLocator

from analysis import style
from analysis.aggregate import (
    X_LABELS,
    Curves,
    XKind,
    aggregate,
    band_caption,
    clamp_limits,
    curve_limits,
    curves,
    frame_index,
    is_ratio_metric,
    off_policy_rows,
    robust_limits,
    smooth,
    variant_labels,
    x_values,
)
from analysis.labels import format_value, metric_label
from harness import layout
from harness.config.report_section import DYNAMICS_METRICS

__all__ = [
    "DYNAMICS_METRICS",
    "facet_values",
    "panel_rows",
    "Mark",
    "X_LABELS",
    "aggregate",
    "band_caption",
    "fit_legend",
    "format_value",
    "metric_label",
    "plot_curve_set",
    "plot_curves",
    "plot_panels",
    "plot_wseq",
    "smooth",
    "variant_labels",
    "wseq_bands",
    "x_values",
]

ON_POLICY_NOTE = "on-policy throughout:\nratio ≡ 1, not drawn"


@dataclass(frozen=True)
class Mark:
    """A point to mark on a curve figure: a run that diverged, where it diverged.

    Attributes:
        hue, col, row: the labels of the run's variant and facets (None when not faceted).
        x: where (in the figure's x units).
        y: the run's last finite (smoothed) value before it, or NaN (then drawn at the panel's top).
        label: legend text of the marker kind, e.g. ``"diverged"``.
    """

    hue: str | None
    col: str | None
    row: str | None
    x: float
    y: float
    label: str = "diverged"


def fit_legend(
    fig: Figure,
    handles: Sequence[Any],
    title: str | None = None,
    *,
    max_cols: int | None = None,
) -> Legend | None:
    """A figure legend below the panels, with as many columns as fit within the figure's width.

    The legend is laid out once with one column to measure its widest entry, then with
    ``floor(figure width / entry width)`` columns (at most ``max_cols``), and checked again after
    layout; it is never wider than the figure, so long labels wrap into more rows instead of
    widening the image.

    Returns:
        The legend, or None when there are no handles.
    """
    handles = list(handles)
    if not handles:
        return None
    n = len(handles)
    # The legend's width does not depend on where it goes, so it is measured without laying out
    # (or drawing) the figure: one column gives the widest entry.
    renderer = fig.canvas.get_renderer()
    leg = fig.legend(handles=handles, loc="outside lower center", ncols=1, title=title)
    entry = leg.get_window_extent(renderer).width
    width = fig.bbox.width * 0.98
    ncols = max(1, min(n, max_cols or n, int(width // max(entry, 1.0))))
    while True:
        leg.remove()
        leg = fig.legend(handles=handles, loc="outside lower center", ncols=ncols, title=title)
        if ncols == 1 or leg.get_window_extent(renderer).width <= width:
            break
        ncols -= 1
    # The figure grows by the legend's height, so the panels keep the height they were given
    # (constrained layout would otherwise shrink them, to nothing under a tall legend).
    w, h = fig.get_size_inches()
    fig.set_size_inches(w, h + leg.get_window_extent(renderer).height / fig.dpi + 0.05)
    return leg


def line_handles(labels: Sequence[str], colors: Mapping[str, str]) -> list[Line2D]:
    """Legend lines for variant labels; a long label is wrapped at ", " onto several lines."""
    return [Line2D([], [], color=colors[lab], label=wrap_title(lab, 40)) for lab in labels]


def _panel_title(parts: Sequence[str | None], on_policy: bool) -> str:
    text = ", ".join(p for p in parts if p)
    if on_policy:
        text = f"{text} (on-policy)" if text else "on-policy"
    return text


def no_data(ax: Axes, text: str = "no data") -> None:
    """Say in the middle of a panel why it is empty (over any reference line drawn there)."""
    ax.text(
        0.5,
        0.5,
        text,
        ha="center",
        va="center",
        transform=ax.transAxes,
        color="0.4",
        fontsize=7,
        bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5},
        zorder=5,
    )


#: Points drawn per line at most: a panel is a few hundred pixels wide, so more points only cost
#: drawing time (curves are smoothed before they get here).
MAX_POINTS = 500


def thin(part: pd.DataFrame) -> pd.DataFrame:
    """Every k-th row of one curve so that at most :data:`MAX_POINTS` are drawn (last row kept)."""
    n = len(part)
    if n <= MAX_POINTS:
        return part
    k = -(-n // MAX_POINTS)
    idx = np.r_[np.arange(0, n - 1, k), n - 1]
    return part.iloc[idx]


def _draw(ax: Axes, part: pd.DataFrame, color: str, label: str, band: bool = True) -> None:
    part = thin(part)
    xs = part["x"].to_numpy()
    ax.plot(xs, part["mean"].to_numpy(), color=color, label=label)
    if band:
        lo, hi = part["lo"].to_numpy(), part["hi"].to_numpy()
        ok = ~(np.isnan(lo) | np.isnan(hi))
        if ok.any():
            ax.fill_between(xs, lo, hi, where=ok, color=color, alpha=0.2, linewidth=0, interpolate=False)


def panel_rows(frame: pd.DataFrame, col: str | None, cv: Any, row: str | None, rv: Any) -> pd.DataFrame:
    """The rows of ``frame`` in the panel at column label ``cv`` and row label ``rv`` (a facet left
    None, or a label None, does not select). Labels are compared as text, so a panel selects the
    same rows in every figure whatever the column's dtype (``0.1`` and ``"0.1"`` are one label).

    Returns:
        A view of ``frame``'s rows (same columns).
    """
    sel = np.ones(len(frame), dtype=bool)
    if col is not None and cv is not None:
        sel &= (frame[col].astype(str) == str(cv)).to_numpy()
    if row is not None and rv is not None:
        sel &= (frame[row].astype(str) == str(rv)).to_numpy()
    return frame[sel]


def facet_values(frame: pd.DataFrame | None, col: str | None, given: Sequence[Any] | None) -> list[Any]:
    """The panel labels of facet ``col``: ``[None]`` without a facet; ``given`` when given (``[None]``
    when empty); else the labels in ``frame[col]``, in :func:`analysis.aggregate.variant_labels`' order."""
    if col is None:
        return [None]
    if given is not None:
        return list(given) or [None]
    if frame is not None and col in frame.columns and len(frame):
        return list(variant_labels(frame[col].drop_duplicates()).categories)
    return [None]


def _hue_order(frame: pd.DataFrame, hue: str | None, given: Sequence[str] | None) -> list[str]:
    if hue is None:
        return []
    if given is not None:
        return list(given)
    if hue in frame.columns and len(frame):
        return [str(c) for c in variant_labels(frame[hue].drop_duplicates()).categories]
    return []


def plot_curve_set(
    c: Curves,
    *,
    hue: str | None,
    col: str | None = None,
    row: str | None = None,
    colors: Mapping[str, str] | None = None,
    hue_order: Sequence[str] | None = None,
    col_values: Sequence[Any] | None = None,
    row_values: Sequence[Any] | None = None,
    on_policy: Sequence[tuple[Any, Any]] = (),
    marks: Sequence[Mark] = (),
    mark_runs: pd.DataFrame | None = None,
    syncs: Mapping[tuple[Any, Any], Sequence[float]] | None = None,
    seeds: bool = False,
    legend_title: str | None = None,
    ylabel: str | None = None,
    sharey: bool = True,
    baseline: str | None = None,
) -> tuple[Figure, np.ndarray]:
    """Draw a :class:`~analysis.aggregate.Curves`: one line per hue label, faceted by col/row.

    More than :data:`MAX_LINES` variants in a single panel are drawn as small multiples instead
    (:func:`plot_highlight`), since that many crossing lines cannot be told apart.

    Args:
        c: the curves (``c.mean``; ``c.runs`` too with ``seeds``).
        hue, col, row: columns of ``c.mean`` (labels), or None.
        colors: ``{hue label: colour}``; default :func:`analysis.style.variant_colors`.
        hue_order, col_values, row_values: the labels in display order (default: those present).
        on_policy: ``(col value, row value)`` facets whose runs are on-policy throughout (titled so).
        marks: points to mark (diverged runs), drawn as ``x`` in the hue's colour.
        mark_runs: the marked runs' own curves (``Curves.runs`` layout), drawn faint and dashed.
        syncs: ``{(col value, row value): [x, ...]}`` reference-model syncs to mark with thin
            vertical lines (``x="step"`` figures).
        seeds: also draw each run's (smoothed) curve faintly; needs ``c.runs``.
        legend_title: title of the legend (e.g. the hue's keys).
        ylabel: y-axis label; default the metric's label.
        sharey: share y limits across facets (limits from robust quantiles of all drawn values).
        baseline: the baseline's hue label, drawn in every panel of the small multiples.

    Returns:
        ``(fig, axes)``; ``axes`` has shape ``(n_rows, n_cols)``. Facets without data say "no data"
        (or that they are on-policy, for an importance-ratio metric).
    """
    agg = c.mean
    hue_labels = _hue_order(agg, hue, hue_order)
    if hue is not None and col is None and row is None and len(hue_labels) > MAX_LINES:
        return plot_highlight(
            c,
            hue=hue,
            hue_order=hue_labels,
            colors=colors,
            baseline=baseline,
            marks=marks,
            ylabel=ylabel,
            legend_title=legend_title,
        )
    colors = dict(colors) if colors is not None else {}
    for lab, col_ in style.variant_colors(hue_labels or ["all"]).items():
        colors.setdefault(lab, col_)
    cols = facet_values(agg, col, col_values)
    rows = facet_values(agg, row, row_values)
    on_policy = {tuple(f) for f in on_policy}
    ratio = is_ratio_metric(c.metric)
    with style.context():
        fig = style.figure(len(cols), len(rows))
        axes = fig.subplots(len(rows), len(cols), squeeze=False, sharex=True, sharey=sharey)
        drawn: list[str] = []
        means: list[np.ndarray] = []
        bands: list[np.ndarray] = []
        for i, rv in enumerate(rows):
            for j, cv in enumerate(cols):
                ax = axes[i, j]
                part = panel_rows(agg, col, cv, row, rv)
                facet_on_policy = (cv, rv) in on_policy
                if part.empty or part["mean"].isna().all():
                    no_data(ax, ON_POLICY_NOTE if ratio and facet_on_policy else "no data")
                else:
                    runs = panel_rows(c.runs, col, cv, row, rv) if seeds and c.runs is not None else None
                    labs, ms, bs = _draw_panel_lines(ax, part, runs, hue, hue_labels, colors, c.metric)
                    drawn.extend(lab for lab in labs if lab not in drawn)
                    means.extend(ms)
                    bands.extend(bs)
                _note_coinciding(ax, part, hue)
                _draw_marks(ax, marks, mark_runs, hue, col, cv, row, rv, colors)
                for xs in (syncs or {}).get((cv, rv), ()):
                    ax.axvline(xs, color="0.55", linewidth=0.5, linestyle=":", zorder=0)
                ax.set_title(wrap_title(_panel_title([_str(rv), _str(cv)], facet_on_policy)))
                if i == len(rows) - 1:
                    ax.set_xlabel(X_LABELS.get(c.x, c.x))
                if j == 0:
                    ax.set_ylabel(ylabel or metric_label(c.metric))
        lim = clamp_limits(curve_limits(means, bands), c.metric, agg["mean"].to_numpy())
        if lim is not None and sharey:
            axes[0, 0].set_ylim(*lim)
        _curve_legend(
            fig,
            [h for h in hue_labels if h in drawn] if hue is not None else None,
            colors,
            marks,
            syncs,
            legend_title,
        )
    return fig, axes


def _curve_legend(
    fig: Figure,
    labels: Sequence[str] | None,
    colors: Mapping[str, str],
    marks: Sequence[Mark],
    syncs: Mapping[Any, Sequence[float]] | None,
    legend_title: str | None,
) -> None:
    """The legend of a curve figure: a line per drawn hue label (``labels``; None without a hue),
    then the diverged-run and reference-sync markers when drawn; none when there is nothing."""
    extra = []
    if marks:
        extra.append(
            Line2D([], [], color="0.3", marker="x", linestyle="--", linewidth=0.6, label="diverged run")
        )
    if syncs:
        extra.append(Line2D([], [], color="0.55", linestyle=":", linewidth=0.8, label="reference synced"))
    if labels is not None or extra:
        fit_legend(fig, [*line_handles(labels or [], colors), *extra], legend_title)


def _draw_panel_lines(
    ax: Axes,
    part: pd.DataFrame,
    runs: pd.DataFrame | None,
    hue: str | None,
    hue_labels: Sequence[str],
    colors: Mapping[str, str],
    metric: str,
) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    """Draw one panel's curves: each run of ``runs`` (``Curves.runs`` rows) faintly, then each
    hue label's mean line and band from ``part`` (``Curves.mean`` rows).

    Returns:
        The hue labels drawn, the mean lines' values and the values drawn as bands or faint runs
        (for the y range), in drawing order.
    """
    drawn, means, bands = [], [], []
    for _, p in runs.groupby(layout.RUN_ID, sort=False) if runs is not None else ():
        lab = str(p[hue].iloc[0]) if hue else "all"
        p = thin(p)
        ax.plot(p["x"], p["y"], color=colors.get(lab, "0.5"), alpha=0.35, linewidth=0.6)
        bands.append(p["y"].to_numpy())
    for lab in hue_labels or [None]:
        p = part if lab is None else part[(part[hue] == lab).to_numpy()]
        if len(p) and p["mean"].notna().any():
            _draw(ax, p, colors[lab] if lab is not None else colors["all"], lab or metric)
            means.append(p["mean"].to_numpy())
            bands.append(p[["lo", "hi"]].to_numpy())
            if lab is not None:
                drawn.append(lab)
    return drawn, means, bands


def fit_text(fig: Figure, text: str, width_pt: float, font: Any) -> str:
    """``text`` broken between words so that no line is wider than ``width_pt`` points when drawn
    in ``font`` (a :class:`matplotlib.font_manager.FontProperties`), measured with the figure's
    renderer; its own line breaks are kept, and a single word wider than that stays whole."""
    renderer = fig.canvas.get_renderer()
    scale = 72.0 / fig.dpi  # the renderer measures pixels

    def width(s: str) -> float:
        return renderer.get_text_width_height_descent(s, font, ismath=False)[0] * scale

    lines = []
    for part in text.split("\n"):
        line = ""
        for word in part.split(" "):
            candidate = f"{line} {word}" if line else word
            if line and width(candidate) > width_pt:
                lines.append(line)
                line = word
            else:
                line = candidate
        lines.append(line)
    return "\n".join(lines)


def wrap_title(text: str, width: int = 24) -> str:
    """A panel title or label broken at ", " (or, for a longer part, between words) so that it
    fits above a panel of a multi-panel figure or in a legend."""
    if len(text) <= width:
        return text
    if ", " not in text:
        return "\n".join(textwrap.wrap(text, width, break_long_words=True)) or text
    lines, line = [], ""
    for part in text.split(", "):
        candidate = f"{line}, {part}" if line else part
        if len(candidate) > width and line:
            lines.append(line + ",")
            line = part
        else:
            line = candidate
    lines.append(line)
    return "\n".join(lines)


#: Most variants drawn as lines in one panel; more become small multiples (:func:`plot_highlight`).
MAX_LINES = 6


def plot_highlight(
    c: Curves,
    *,
    hue: str,
    hue_order: Sequence[str],
    colors: Mapping[str, str] | None = None,
    baseline: str | None = None,
    marks: Sequence[Mark] = (),
    ylabel: str | None = None,
    legend_title: str | None = None,
    ncols: int = 3,
) -> tuple[Figure, np.ndarray]:
    """Many variants as small multiples: one panel per variant, in its colour with its band, the
    baseline in black (dashed) and every other variant in light grey behind, on shared axes.

    Returns:
        ``(fig, axes)``; ``axes`` has shape ``(rows, ncols)``, unused panels hidden.
    """
    agg = c.mean
    colors = dict(colors or {})
    for lab, col_ in style.variant_colors(hue_order).items():
        colors.setdefault(lab, col_)
    n = len(hue_order)
    nr = -(-n // ncols)
    with style.context():
        fig = style.figure(ncols, nr, panel_height=1.45)
        axes = fig.subplots(nr, ncols, squeeze=False, sharex=True, sharey=True)
        parts = {lab: agg[(agg[hue] == lab).to_numpy()] for lab in hue_order}
        line_values = [p["mean"].to_numpy() for p in parts.values() if len(p)]
        band_values = [p[["lo", "hi"]].to_numpy() for p in parts.values() if len(p)]
        thinned = {lab: _pieces(thin(p)[["x", "mean"]].to_numpy()) for lab, p in parts.items() if len(p)}
        for k, lab in enumerate(hue_order):
            ax = axes[k // ncols, k % ncols]
            others = [xy for other, ps in thinned.items() if other not in (lab, baseline) for xy in ps]
            if others:  # one artist for all of them: drawn at once
                ax.add_collection(LineCollection(others, colors="0.82", linewidths=0.7, zorder=1))
            if baseline is not None and baseline != lab and len(parts.get(baseline, ())):
                b = parts[baseline]
                b = thin(b)
                ax.plot(b["x"], b["mean"], color="0.15", linewidth=0.9, linestyle="--", zorder=2)
            p = parts[lab]
            if len(p) and p["mean"].notna().any():
                _draw(ax, p, colors[lab], lab)
            else:
                no_data(ax)
            _draw_marks(ax, [m for m in marks if m.hue == lab], None, hue, None, None, None, None, colors)
            ax.set_title(wrap_title(lab))
            if k % ncols == 0:
                ax.set_ylabel(ylabel or metric_label(c.metric))
        _finish_grid(axes, {(k // ncols, k % ncols) for k in range(n)}, c.x)
        lim = clamp_limits(curve_limits(line_values, band_values), c.metric, agg["mean"].to_numpy())
        if lim is not None:
            axes[0, 0].set_ylim(*lim)
        handles = [Line2D([], [], color="0.82", linewidth=0.7, label="the other variants")]
        if baseline is not None:
            handles.insert(
                0, Line2D([], [], color="0.15", linestyle="--", linewidth=0.9, label=f"baseline: {baseline}")
            )
        fit_legend(fig, handles, legend_title)
    return fig, axes


def _pieces(xy: np.ndarray) -> list[np.ndarray]:
    """A curve's (points, 2) array cut at its missing values, as a line is (for a LineCollection)."""
    ok = np.isfinite(xy).all(axis=1)
    if ok.all():
        return [xy]
    cuts = np.flatnonzero(np.diff(ok.astype(np.int8))) + 1
    return [
        p for p, good in zip(np.split(xy, cuts), np.split(ok, cuts), strict=True) if good[0] and len(p) > 1
    ]


def _finish_grid(axes: np.ndarray, used: set[tuple[int, int]], x: str) -> None:
    """Hide the panels of a grid that hold nothing; label x on the lowest used panel of each column."""
    nr, nc = axes.shape
    for i in range(nr):
        for j in range(nc):
            if (i, j) not in used:
                axes[i, j].set_visible(False)
            elif i == nr - 1 or (i + 1, j) not in used:
                axes[i, j].set_xlabel(X_LABELS.get(x, x))
                axes[i, j].xaxis.set_tick_params(labelbottom=True)


def _note_coinciding(ax: Axes, part: pd.DataFrame, hue: str | None) -> None:
    """Say so in the panel when every variant's curve is the same (e.g. clip settings on-policy,
    where the clip never fires): otherwise the last line drawn hides the others."""
    if hue is None or part.empty:
        return
    curves_ = [p["mean"].to_numpy() for _, p in part.groupby(hue, observed=True, sort=False) if len(p)]
    if len(curves_) > 1 and all(
        c.shape == curves_[0].shape and np.array_equal(c, curves_[0], equal_nan=True) for c in curves_
    ):
        ax.text(
            0.02,
            0.97,
            f"all {len(curves_)} variants coincide",
            transform=ax.transAxes,
            ha="left",
            va="top",
            fontsize=6.5,
            color="0.35",
        )


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


def _draw_marks(ax, marks, mark_runs, hue, col, cv, row, rv, colors) -> None:
    for m in marks:
        if (col is not None and m.col != _str(cv)) or (row is not None and m.row != _str(rv)):
            continue
        color = colors.get(m.hue, "0.3") if m.hue is not None else "0.3"
        if mark_runs is not None and len(mark_runs):
            own = panel_rows(mark_runs, col, cv, row, rv)
            if hue is not None and m.hue is not None:
                own = own[(own[hue].astype(str) == m.hue).to_numpy()]
            for _, p in own.groupby(layout.RUN_ID, sort=False):
                ax.plot(p["x"], p["y"], color=color, alpha=0.6, linewidth=0.7, linestyle="--")
        if np.isfinite(m.y):
            ax.plot(
                [m.x], [m.y], marker="x", color=color, markersize=6, markeredgewidth=1.5, linestyle="none"
            )
        else:
            ax.plot(
                [m.x],
                [1.0],
                marker="x",
                color=color,
                markersize=6,
                markeredgewidth=1.5,
                linestyle="none",
                transform=ax.get_xaxis_transform(),
                clip_on=False,
            )


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
    smoothing: Any = None,
    n_boot: int = 1000,
    seed: int = 0,
    colors: Mapping[str, str] | None = None,
    agg: Curves | pd.DataFrame | None = None,
    sharey: bool = True,
) -> tuple[Figure, np.ndarray]:
    """Mean ``metric`` over runs with its band, one line per ``hue`` value, faceted by ``col``/``row``.

    A convenience over :func:`analysis.aggregate.curves` and :func:`plot_curve_set` for a frame
    from :func:`analysis.load.load`. An importance-ratio metric is drawn over off-policy steps
    only. ``agg``: a precomputed :func:`analysis.aggregate.curves` record to draw instead (or
    its mean frame, :func:`analysis.aggregate.aggregate`, drawn without a caption).

    Returns:
        ``(fig, axes)``; ``axes`` has shape ``(n_rows, n_cols)``. The figure legend lists every
        hue value drawn (a missing value as ``"(none)"``). Facets without data say "no data".

    Raises:
        KeyError, ValueError: as :func:`analysis.aggregate.curves`.
    """
    by = [b for b in (hue, col, row) if b is not None]
    if agg is None:
        rows = off_policy_rows(df)[0] if is_ratio_metric(metric) else None
        c = curves(
            df,
            metric,
            x=x,
            by=by,
            ci=ci,
            confidence=confidence,
            smoothing=smoothing,
            n_boot=n_boot,
            seed=seed,
            rows=rows,
        )
    elif isinstance(agg, Curves):
        c = agg
    else:
        c = Curves(agg, None, "", metric, x, {}, 0)
    cols = facet_values(df, col, None)
    rws = facet_values(df, row, None)
    return plot_curve_set(
        c,
        hue=hue,
        col=col,
        row=row,
        colors=colors,
        col_values=cols,
        row_values=rws,
        legend_title=hue,
        sharey=sharey,
    )


def plot_panels(
    df: pd.DataFrame,
    metrics: Sequence[str] = DYNAMICS_METRICS,
    *,
    x: XKind = "step",
    hue: str | None = "loss_type",
    col: str | None = None,
    ci: Literal["t", "bootstrap"] = "t",
    confidence: float = 0.95,
    smoothing: Any = None,
    colors: Mapping[str, str] | None = None,
    ncols: int = 3,
    skip_missing: bool = True,
    on_policy: Sequence[Any] = (),
    legend_title: str | None = None,
    aggs: Mapping[str, Curves] | None = None,
) -> tuple[Figure, np.ndarray]:
    """Training-dynamics panels: one panel per metric (eval accuracy, entropy, KL, clipping, ...).

    Each panel is :func:`analysis.aggregate.curves` of one metric (mean over runs, band as ``ci``);
    importance-ratio metrics (:data:`analysis.aggregate.RATIO_PREFIXES`) count off-policy steps
    only (:func:`analysis.aggregate.off_policy_rows`). A metric that is absent or all-NaN in ``df``
    is left out (``skip_missing``) or drawn as a "no data" panel; if no metric has data, one "no
    data" panel is returned. Each panel has its own robust y-limits.

    Args:
        df: frame from :func:`analysis.load.load`.
        metrics: metric columns, in panel order.
        x, hue, ci, confidence, smoothing, colors: as in :func:`plot_curves`.
        col: with a column given, panels are laid out metrics × ``col`` values instead of wrapped.
        ncols: panels per row when ``col`` is None.
        skip_missing: drop metrics without data instead of drawing "no data".
        on_policy: ``col`` values whose runs are on-policy throughout.
        legend_title: legend title (default ``hue``).
        aggs: precomputed curves per metric (as the report computes them), instead of computing.

    Returns:
        ``(fig, axes)``; ``axes`` is 2-D; unused trailing axes are hidden. The figure legend lists
        every hue value drawn in any panel.
    """
    present = [m for m in metrics if m in df.columns and df[m].notna().any()]
    shown = present if skip_missing else list(metrics)
    if aggs is None:
        by = [c for c in (hue, col) if c is not None]
        aggs = _metric_curves(df, present, x=x, by=by, ci=ci, confidence=confidence, smoothing=smoothing)
    hue_labels = _hue_order(df, hue, None)
    colors = dict(colors) if colors is not None else {}
    for lab, c in style.variant_colors(hue_labels or ["all"]).items():
        colors.setdefault(lab, c)
    col_values = facet_values(df, col, None)
    on_policy = set(on_policy)
    nc, nr, cells = _metric_cells(shown, col, col_values, ncols)

    panel_height = 1.5 if col is not None else 1.7
    with style.context():
        fig = style.figure(nc, nr, panel_height=panel_height)
        axes = fig.subplots(nr, nc, squeeze=False, sharex=True)
        # a row's y label may take three quarters of the row, so neighbouring labels never meet
        label_width = 0.75 * panel_height * 72.0
        drawn: list[str] = []
        row_curves: dict[int, list[np.ndarray]] = {}
        row_bands: dict[int, list[np.ndarray]] = {}
        for i, j, m, cv in cells:
            ax = axes[i, j]
            c = aggs.get(m)
            a = None if c is None else c.mean
            if a is not None and col is not None:
                a = a[(a[col] == cv).to_numpy()]
            if a is None or a.empty or a["mean"].isna().all():
                on = is_ratio_metric(m) and (cv in on_policy or (col is None and bool(on_policy)))
                no_data(ax, ON_POLICY_NOTE if on else "no data")
                ax.tick_params(axis="y", left=False, labelleft=False)
            else:
                labs, ms, bs = _draw_panel_lines(ax, a, None, hue, hue_labels, colors, m)
                drawn.extend(lab for lab in labs if lab not in drawn)
                key = i if col is not None else -1 - (i * nc + j)  # with facets a metric's row shares y
                if ms:
                    row_curves.setdefault(key, []).extend(ms)
                    row_bands.setdefault(key, []).extend(bs)
                _note_coinciding(ax, a, hue)
            _label_metric_panel(ax, m, col, cv, i, j, on_policy, label_width)
        for i, j, m, _ in cells:
            key = i if col is not None else -1 - (i * nc + j)
            if key in row_curves:
                lim = curve_limits(row_curves[key], row_bands[key])
                lim = clamp_limits(lim, m, np.concatenate(row_curves[key]))
                if lim is not None and axes[i, j].get_ylim() != lim:
                    axes[i, j].set_ylim(*lim)
        used = {(i, j) for i, j, _, _ in cells}
        if not cells:
            no_data(axes[0, 0])
            used.add((0, 0))
        _finish_grid(axes, used, x)
        if hue is not None:
            fit_legend(
                fig, line_handles([lab for lab in hue_labels if lab in drawn], colors), legend_title or hue
            )
    return fig, axes


def _metric_curves(df: pd.DataFrame, metrics: Sequence[str], **kw: Any) -> dict[str, Curves]:
    """:func:`analysis.aggregate.curves` of each metric (keywords ``x``, ``by``, ``ci``,
    ``confidence``, ``smoothing``); an importance-ratio metric over off-policy steps only."""
    off = off_policy_rows(df)[0]
    return {m: curves(df, m, rows=off if is_ratio_metric(m) else None, **kw) for m in metrics}


def _metric_cells(
    shown: Sequence[str], col: str | None, col_values: Sequence[Any], ncols: int
) -> tuple[int, int, list[tuple[int, int, str, Any]]]:
    """The layout of :func:`plot_panels`: ``(columns, rows, cells)``, each cell ``(row, column,
    metric, col value)``; metrics wrapped ``ncols`` to a row (fewer for up to 4), or with ``col``
    one row per metric and one column per ``col`` value."""
    if col is None:
        n = max(len(shown), 1)
        nc = min(ncols, n, int(np.ceil(np.sqrt(n))) if n <= 4 else ncols)
        return nc, -(-n // nc), [(k // nc, k % nc, m, None) for k, m in enumerate(shown)]
    cells = [(i, j, m, cv) for i, m in enumerate(shown) for j, cv in enumerate(col_values)]
    return len(col_values), max(len(shown), 1), cells


def _label_metric_panel(
    ax: Axes,
    metric: str,
    col: str | None,
    cv: Any,
    i: int,
    j: int,
    on_policy: set[Any],
    label_width: float = float("inf"),
) -> None:
    """Name a :func:`plot_panels` panel: its metric as the title, or with ``col`` the metric on
    the first column's y axis (wrapped between words to at most ``label_width`` points, so the
    labels of neighbouring rows do not run into each other) and the ``col`` value above the first
    row."""
    label = metric_label(metric) + ("\n(off-policy steps)" if is_ratio_metric(metric) else "")
    if col is None:
        ax.set_title(label)
        return
    if j == 0:
        ax.set_ylabel(fit_text(ax.figure, label, label_width, ax.yaxis.label.get_fontproperties()))
    if i == 0:
        ax.set_title(wrap_title(str(cv) + (" (on-policy)" if cv in on_policy else "")))


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
    log scale (``smoothing``: keywords of :func:`analysis.aggregate.smooth`), and the median over
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
    df: pd.DataFrame | None = None,
    *,
    hue: str | None = "loss_type",
    x: XKind = "step",
    colors: Mapping[str, str] | None = None,
    ncols: int = 4,
    col: str | None = None,
    bands: pd.DataFrame | None = None,
    split: str | None = None,
    hue_order: Sequence[str] | None = None,
    col_values: Sequence[Any] | None = None,
    on_policy: Sequence[Any] = (),
    smoothing: Mapping[str, Any] | None = None,
    empty_text: str | None = None,
) -> tuple[Figure, np.ndarray]:
    """The sequence importance ratio ``w_seq`` over training, one panel per variant (and facet).

    Per (variant, step): the median over runs of each run's per-step p05, p50 and p95 of
    ``w_seq`` over its completions (:func:`wseq_bands`), over off-policy steps only. The band
    spans p05 to p95, the line is p50, on a log axis limited to the range the plotted quantiles
    actually take (robust 1%-99% of them), with a dashed reference at ``w_seq = 1``. With ``split``
    (e.g. ``reuse_index``) each value gets its own line and band, darker for later passes.

    Args:
        df: frame from :func:`analysis.load.load`; not needed when ``bands`` is given.
        hue: variant column; one panel per value (None pools all runs into one panel).
        x: ``"step"``, ``"tokens"`` or ``"time"``.
        colors: ``{label: colour}``.
        ncols: panels per row without ``col``.
        col: facet column: panels are then laid out ``col`` values (rows) × variants (columns).
        bands: precomputed :func:`wseq_bands` (``by`` = [hue, col] present ones).
        split: column of ``bands`` splitting each panel's series.
        hue_order, col_values: display order of variants and facets.
        on_policy: ``col`` values whose runs are on-policy throughout (their row is left out and
            named in a note).
        smoothing: smoothing keywords when ``bands`` is computed here.
        empty_text: what a panel without data says (default: "no data" when ``df`` lacks the w_seq
            quantiles, else "no off-policy steps").

    Returns:
        ``(fig, axes)``, ``axes`` 2-D; a panel without off-policy w_seq data says so.
    """
    by = [b for b in (hue, col) if b is not None]
    if empty_text is None:
        have = df is None or all(q in df.columns and df[q].notna().any() for q in WSEQ_Q)
        empty_text = "no off-policy steps" if have else "no data"
    if bands is None:
        if df is None:
            raise ValueError("give df or bands")
        rows = off_policy_rows(df)[0]
        bands = wseq_bands(df, by=by, x=x, rows=rows, smoothing=smoothing, split=split)
    if hue_order is not None:
        labels = list(hue_order)
    elif df is not None and hue is not None:
        labels = _hue_order(df, hue, None)
    else:
        labels = [str(v) for v in bands[hue].drop_duplicates()] if hue is not None and len(bands) else ["all"]
    labels = labels or ["all"]
    colors = dict(colors) if colors is not None else {}
    for lab, c in style.variant_colors(labels).items():
        colors.setdefault(lab, c)
    facets = facet_values(df if df is not None else bands, col, col_values)
    skipped = [f for f in facets if f in set(on_policy)] if col is not None else []
    facets = [f for f in facets if f not in skipped] or ([None] if col is None else facets)
    nc, nr, cells = _wseq_cells(labels, facets, col, ncols)
    wrapped = col is not None and len(labels) > ncols
    lo_lim, hi_lim = _wseq_limits(bands)
    split_values = sorted(bands[split].dropna().unique()) if split and len(bands) else [None]

    with style.context():
        fig = style.figure(nc, nr, panel_height=1.7)
        axes = fig.subplots(nr, nc, squeeze=False, sharex=True, sharey=True)
        for i, j, lab, fv in cells:
            ax = axes[i, j]
            part = bands
            if hue is not None:
                part = part[(part[hue].astype(str) == lab).to_numpy()]
            if col is not None:
                part = part[(part[col].astype(str) == str(fv)).to_numpy()]
            ax.set_yscale("log")
            ax.axhline(1.0, color="0.3", linestyle="--", linewidth=0.8)
            if part.empty:
                no_data(ax, empty_text)
            else:
                _draw_wseq_series(ax, part, split, split_values, colors[lab], (lo_lim, hi_lim))
            ax.set_ylim(lo_lim, hi_lim)
            _ratio_ticks(ax, lo_lim, hi_lim)
            _title_wseq_panel(ax, lab if hue is not None else "all runs", fv, wrapped, i, j)
        _finish_grid(axes, {(i, j) for i, j, _, _ in cells}, x)
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


def _wseq_cells(
    labels: Sequence[str], facets: Sequence[Any], col: str | None, ncols: int
) -> tuple[int, int, list[tuple[int, int, str, Any]]]:
    """The layout of :func:`plot_wseq`: ``(columns, rows, cells)``, each cell ``(row, column,
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


def _wseq_limits(bands: pd.DataFrame) -> tuple[float, float]:
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
