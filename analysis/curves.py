"""Learning-curve figures: a metric against steps, generated tokens or seconds, over seeds.

The numbers come from :mod:`analysis.aggregate` (mean over runs, band, smoothing); this module only
draws them. Plots return ``(fig, axes)`` and never save; see :func:`analysis.style.save`. The
training-dynamics panels are :mod:`analysis.dynamics`', the w_seq figure :mod:`analysis.wseq`'s.

What every figure here does for its reader:

* y-limits from robust quantiles of what is drawn (:func:`analysis.limits.robust_limits`), so
  one early spike or a diverging seed does not flatten every other curve;
* a legend below the panels with as many columns as fit the figure's width, never wider;
* importance-ratio metrics (w_seq, clip fractions, ``phi_seq``) over off-policy steps only: on a
  step whose old log-probs are the current ones they are exactly 1 or 0 and carry no information,
  and drawing them makes a panel alternate between the two every step;
* facets that are on-policy throughout say so in their title;
* more than :data:`MAX_LINES` variants in one panel become small multiples (:func:`plot_highlight`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis import style
from analysis.aggregate import X_LABELS, Curves, XKind, curves
from analysis.labels import metric_label
from analysis.limits import metric_limits
from analysis.offpolicy import is_ratio_metric, off_policy_rows
from analysis.panels import (
    ON_POLICY_NOTE,
    draw_mean_band,
    draw_panel_lines,
    facet_values,
    finish_grid,
    fit_legend,
    hue_labels_of,
    line_handles,
    no_data,
    note_coinciding,
    panel_rows,
    panel_title,
    thin,
    wrap_title,
)
from harness import layout

__all__ = ["MAX_LINES", "Mark", "plot_curve_set", "plot_curves", "plot_highlight"]


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
    hue_labels = hue_labels_of(agg, hue, hue_order)
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
                    labs, ms, bs = draw_panel_lines(ax, part, runs, hue, hue_labels, colors, c.metric)
                    drawn.extend(lab for lab in labs if lab not in drawn)
                    means.extend(ms)
                    bands.extend(bs)
                note_coinciding(ax, part, hue)
                _draw_marks(ax, marks, mark_runs, hue, col, cv, row, rv, colors)
                for xs in (syncs or {}).get((cv, rv), ()):
                    ax.axvline(xs, color="0.55", linewidth=0.5, linestyle=":", zorder=0)
                ax.set_title(wrap_title(panel_title([_str(rv), _str(cv)], facet_on_policy)))
                if i == len(rows) - 1:
                    ax.set_xlabel(X_LABELS.get(c.x, c.x))
                if j == 0:
                    ax.set_ylabel(ylabel or metric_label(c.metric))
        lim = metric_limits(c.metric, means, bands, agg["mean"].to_numpy())
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
                draw_mean_band(ax, p, colors[lab], lab)
            else:
                no_data(ax)
            _draw_marks(ax, [m for m in marks if m.hue == lab], None, hue, None, None, None, None, colors)
            ax.set_title(wrap_title(lab))
            if k % ncols == 0:
                ax.set_ylabel(ylabel or metric_label(c.metric))
        finish_grid(axes, {(k // ncols, k % ncols) for k in range(n)}, c.x)
        lim = metric_limits(c.metric, line_values, band_values, agg["mean"].to_numpy())
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
