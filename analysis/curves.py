"""Learning-curve figures: a metric against steps, generated tokens or seconds, over seeds.

The numbers come from :mod:`analysis.aggregate` (mean over runs, band, smoothing); this module only
draws them. :func:`plot_curves` draws one panel on a given ``ax``, :func:`curve_figure` lays the
panels of a :class:`~analysis.panels.Facets` out as a figure (``(fig, axes)``, never saved; see
:func:`analysis.style.save`). The training-dynamics panels are :mod:`analysis.dynamics`', the w_seq
figure :mod:`analysis.wseq`'s.

What every figure here does for its reader:

* y-limits from robust quantiles of what is drawn (:func:`analysis.limits.robust_limits`), so
  one early spike or a diverging seed does not flatten every other curve;
* a legend below the panels with as many columns as fit the figure's width, never wider;
* importance-ratio metrics (w_seq, clip fractions, ``phi_seq``) over off-policy steps only: on a
  step whose old log-probs are the current ones they are exactly 1 or 0 and carry no information,
  and drawing them makes a panel alternate between the two every step;
* facets that are on-policy throughout say so in their title;
* more than :data:`MAX_LINES` variants in one panel become small multiples (:func:`highlight_figure`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis import style
from analysis.aggregate import X_LABELS, Curves, curves
from analysis.labels import metric_label
from analysis.limits import metric_limits
from analysis.offpolicy import is_ratio_metric, off_policy_rows
from analysis.panels import (
    ON_POLICY_NOTE,
    Drawn,
    Facets,
    draw_mean_band,
    draw_panel_lines,
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

__all__ = [
    "MAX_LINES",
    "Mark",
    "Marks",
    "curve_figure",
    "frame_curve_figure",
    "highlight_figure",
    "plot_curves",
    "plot_highlight",
]


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


@dataclass(frozen=True)
class Marks:
    """What a curve figure marks beside the curves.

    Attributes:
        diverged: a :class:`Mark` per diverged run, drawn as × in its variant's colour.
        runs: the marked runs' own curves (:attr:`analysis.aggregate.Curves.runs` layout), drawn
            faint and dashed; None: none.
        syncs: ``{(col label, row label): [x, ...]}``: the reference model's syncs per panel, thin
            dotted verticals (``x="step"`` figures).
    """

    diverged: Sequence[Mark] = ()
    runs: pd.DataFrame | None = None
    syncs: Mapping[tuple[Any, Any], Sequence[float]] = field(default_factory=dict)


def plot_curves(
    ax: Axes,
    c: Curves,
    facets: Facets,
    *,
    panel: tuple[Any, Any] = (None, None),
    marks: Marks = Marks(),
    seeds: bool = False,
) -> Drawn:
    """One panel of a :class:`~analysis.aggregate.Curves` on ``ax``: the rows of ``c.mean`` in
    ``panel`` (its column and row labels), one line with its band per variant (``facets.hue``),
    the panel's marks and syncs, and its title. An empty panel says "no data" (or that its runs
    are on-policy, for an importance-ratio metric).

    Args:
        ax: where to draw.
        c: the curves (``c.runs`` too with ``seeds``).
        facets: the label columns, their order and colours.
        panel: ``(col label, row label)`` of the panel (None: not faceted).
        marks: diverged runs and reference syncs (those in this panel are drawn).
        seeds: also draw each run's (smoothed) curve faintly; needs ``c.runs``.

    Returns:
        What was drawn (:class:`~analysis.panels.Drawn`: variant labels, line and band values).
    """
    cv, rv = panel
    hue_labels = hue_labels_of(c.mean, facets.hue, facets.hue_order)
    colors = facets.palette(hue_labels or ["all"])
    part = facets.panel(c.mean, cv, rv)
    facet_on_policy = (cv, rv) in {tuple(f) for f in facets.on_policy}
    drawn = Drawn()
    if part.empty or part["mean"].isna().all():
        no_data(ax, ON_POLICY_NOTE if is_ratio_metric(c.metric) and facet_on_policy else "no data")
    else:
        runs = facets.panel(c.runs, cv, rv) if seeds and c.runs is not None else None
        drawn = draw_panel_lines(ax, part, runs, facets.hue, hue_labels, colors, c.metric)
    note_coinciding(ax, part, facets.hue)
    _draw_marks(ax, marks.diverged, marks.runs, facets, cv, rv, colors)
    for xs in marks.syncs.get((cv, rv), ()):
        ax.axvline(xs, color="0.55", linewidth=0.5, linestyle=":", zorder=0)
    ax.set_title(wrap_title(panel_title([_str(rv), _str(cv)], facet_on_policy)))
    return drawn


def curve_figure(
    c: Curves,
    facets: Facets,
    *,
    marks: Marks = Marks(),
    seeds: bool = False,
    ylabel: str | None = None,
    sharey: bool = True,
) -> tuple[Figure, np.ndarray]:
    """A :class:`~analysis.aggregate.Curves` as a figure: one line per variant, a panel per
    ``facets`` column and row label (:func:`plot_curves` on each).

    More than :data:`MAX_LINES` variants in a single panel are drawn as small multiples instead
    (:func:`highlight_figure`), since that many crossing lines cannot be told apart.

    Args:
        c: the curves (``c.mean``; ``c.runs`` too with ``seeds``).
        facets: label columns of ``c.mean``, their display order (default: those present),
            colours (default :func:`analysis.style.variant_colors`), the legend's title, the
            baseline (drawn in every panel of the small multiples) and the on-policy panels.
        marks: diverged runs and reference syncs to mark.
        seeds: also draw each run's (smoothed) curve faintly; needs ``c.runs``.
        ylabel: y-axis label; default the metric's label.
        sharey: share y limits across facets (limits from robust quantiles of all drawn values).

    Returns:
        ``(fig, axes)``; ``axes`` has shape ``(n_rows, n_cols)``.
    """
    agg = c.mean
    hue_labels = hue_labels_of(agg, facets.hue, facets.hue_order)
    if facets.hue is not None and facets.col is None and facets.row is None and len(hue_labels) > MAX_LINES:
        return highlight_figure(c, replace(facets, hue_order=hue_labels), marks=marks.diverged, ylabel=ylabel)
    colors = facets.palette(hue_labels or ["all"])
    cols, rows = facets.columns(agg), facets.rows(agg)
    with style.context():
        fig = style.figure(len(cols), len(rows))
        axes = fig.subplots(len(rows), len(cols), squeeze=False, sharex=True, sharey=sharey)
        drawn: list[str] = []
        means: list[np.ndarray] = []
        bands: list[np.ndarray] = []
        for i, rv in enumerate(rows):
            for j, cv in enumerate(cols):
                ax = axes[i, j]
                got = plot_curves(ax, c, facets, panel=(cv, rv), marks=marks, seeds=seeds)
                drawn.extend(lab for lab in got.labels if lab not in drawn)
                means.extend(got.lines)
                bands.extend(got.bands)
                if i == len(rows) - 1:
                    ax.set_xlabel(X_LABELS.get(c.x, c.x))
                if j == 0:
                    ax.set_ylabel(ylabel or metric_label(c.metric))
        lim = metric_limits(c.metric, means, bands, agg["mean"].to_numpy())
        if lim is not None and sharey:
            axes[0, 0].set_ylim(*lim)
        _curve_legend(
            fig,
            [h for h in hue_labels if h in drawn] if facets.hue is not None else None,
            colors,
            marks,
            facets.legend_title,
        )
    return fig, axes


def _curve_legend(
    fig: Figure,
    labels: Sequence[str] | None,
    colors: Mapping[str, str],
    marks: Marks,
    legend_title: str | None,
) -> None:
    """The legend of a curve figure: a line per drawn hue label (``labels``; None without a hue),
    then the diverged-run and reference-sync markers when drawn; none when there is nothing."""
    extra = []
    if marks.diverged:
        extra.append(
            Line2D([], [], color="0.3", marker="x", linestyle="--", linewidth=0.6, label="diverged run")
        )
    if marks.syncs:
        extra.append(Line2D([], [], color="0.55", linestyle=":", linewidth=0.8, label="reference synced"))
    if labels is not None or extra:
        fit_legend(fig, [*line_handles(labels or [], colors), *extra], legend_title)


#: Most variants drawn as lines in one panel; more become small multiples (:func:`highlight_figure`).
MAX_LINES = 6


def _highlight_parts(
    c: Curves, facets: Facets
) -> tuple[dict[str, pd.DataFrame], dict[str, list[np.ndarray]]]:
    """Each variant's rows of ``c.mean``, and its thinned line cut at missing values (the grey
    lines behind the other panels of the small multiples)."""
    agg = c.mean
    parts = {lab: agg[(agg[facets.hue] == lab).to_numpy()] for lab in facets.hue_order or ()}
    thinned = {lab: _pieces(thin(p)[["x", "mean"]].to_numpy()) for lab, p in parts.items() if len(p)}
    return parts, thinned


def plot_highlight(
    ax: Axes,
    c: Curves,
    facets: Facets,
    label: str,
    *,
    marks: Sequence[Mark] = (),
    lines: tuple[dict[str, pd.DataFrame], dict[str, list[np.ndarray]]] | None = None,
) -> Drawn:
    """One panel of the small multiples on ``ax``: variant ``label`` in its colour with its band,
    the baseline (``facets.baseline``) in black, dashed, and every other variant of
    ``facets.hue_order`` in light grey behind; the variant's diverged runs marked.

    Args:
        lines: each variant's rows and thinned line (computed from ``c`` when None; a figure
            computes them once for all its panels).

    Returns:
        What was drawn (the variant, when it has data).
    """
    parts, thinned = lines if lines is not None else _highlight_parts(c, facets)
    colors = facets.palette(list(facets.hue_order or ()))
    baseline = facets.baseline
    others = [xy for other, ps in thinned.items() if other not in (label, baseline) for xy in ps]
    if others:  # one artist for all of them: drawn at once
        ax.add_collection(LineCollection(others, colors="0.82", linewidths=0.7, zorder=1))
    if baseline is not None and baseline != label and len(parts.get(baseline, ())):
        b = thin(parts[baseline])
        ax.plot(b["x"], b["mean"], color="0.15", linewidth=0.9, linestyle="--", zorder=2)
    p = parts[label]
    drawn = Drawn()
    if len(p) and p["mean"].notna().any():
        draw_mean_band(ax, p, colors[label], label)
        drawn = Drawn(labels=[label])
    else:
        no_data(ax)
    hue_only = Facets(hue=facets.hue)
    _draw_marks(ax, [m for m in marks if m.hue == label], None, hue_only, None, None, colors)
    ax.set_title(wrap_title(label))
    return drawn


def highlight_figure(
    c: Curves,
    facets: Facets,
    *,
    marks: Sequence[Mark] = (),
    ylabel: str | None = None,
    ncols: int = 3,
) -> tuple[Figure, np.ndarray]:
    """Many variants as small multiples: one panel per variant of ``facets.hue_order``
    (:func:`plot_highlight`), on shared axes.

    Returns:
        ``(fig, axes)``; ``axes`` has shape ``(rows, ncols)``, unused panels hidden.
    """
    agg = c.mean
    hue_order = list(facets.hue_order or ())
    n = len(hue_order)
    nr = -(-n // ncols)
    with style.context():
        fig = style.figure(ncols, nr, panel_height=1.45)
        axes = fig.subplots(nr, ncols, squeeze=False, sharex=True, sharey=True)
        lines = _highlight_parts(c, facets)
        parts = lines[0]
        line_values = [p["mean"].to_numpy() for p in parts.values() if len(p)]
        band_values = [p[["lo", "hi"]].to_numpy() for p in parts.values() if len(p)]
        for k, lab in enumerate(hue_order):
            ax = axes[k // ncols, k % ncols]
            plot_highlight(ax, c, facets, lab, marks=marks, lines=lines)
            if k % ncols == 0:
                ax.set_ylabel(ylabel or metric_label(c.metric))
        finish_grid(axes, {(k // ncols, k % ncols) for k in range(n)}, c.x)
        lim = metric_limits(c.metric, line_values, band_values, agg["mean"].to_numpy())
        if lim is not None:
            axes[0, 0].set_ylim(*lim)
        handles = [Line2D([], [], color="0.82", linewidth=0.7, label="the other variants")]
        if facets.baseline is not None:
            handles.insert(
                0,
                Line2D(
                    [], [], color="0.15", linestyle="--", linewidth=0.9, label=f"baseline: {facets.baseline}"
                ),
            )
        fit_legend(fig, handles, facets.legend_title)
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


def _draw_marks(
    ax: Axes,
    marks: Sequence[Mark],
    mark_runs: pd.DataFrame | None,
    facets: Facets,
    cv: Any,
    rv: Any,
    colors: Mapping[str, str],
) -> None:
    """The marks of panel ``(cv, rv)``: each diverged run's × in its variant's colour (at the
    panel's top when its value is not finite), and its own curve, faint and dashed."""
    col, row, hue = facets.col, facets.row, facets.hue
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


def frame_curve_figure(
    df: pd.DataFrame, metric: str, facets: Facets, **numbers: Any
) -> tuple[Figure, np.ndarray]:
    """Mean ``metric`` over runs with its band, one line per ``facets.hue`` value, a panel per
    ``facets.col``/``facets.row`` value: :func:`analysis.aggregate.curves` of a frame from
    :func:`analysis.load.load`, then :func:`curve_figure`. An importance-ratio metric is drawn
    over off-policy steps only.

    Args:
        df: the metrics frame.
        metric: its column drawn.
        facets: label columns of ``df`` (labels in the frame's order unless given; the legend
            titled by the hue's column unless given).
        numbers: keywords of :func:`analysis.aggregate.curves` (``x``, ``ci``, ``confidence``,
            ``smoothing``, ``n_boot``, ``seed``).

    Returns:
        ``(fig, axes)``; ``axes`` has shape ``(n_rows, n_cols)``. The figure legend lists every
        hue value drawn (a missing value as ``"(none)"``). Facets without data say "no data".

    Raises:
        KeyError, ValueError: as :func:`analysis.aggregate.curves`.
    """
    rows = off_policy_rows(df)[0] if is_ratio_metric(metric) else None
    c = curves(df, metric, by=facets.by, rows=rows, **numbers)
    facets = replace(
        facets,
        col_values=facets.columns(df),
        row_values=facets.rows(df),
        legend_title=facets.legend_title or facets.hue,
    )
    return curve_figure(c, facets)
