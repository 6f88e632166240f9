"""The training-dynamics figure: one panel per metric (eval accuracy, entropy, KL, clipping,
completion length, a loss plugin's own metrics), each a mean over runs with its band.

Numbers from :func:`analysis.aggregate.curves`; importance-ratio metrics over off-policy steps
only (:func:`analysis.offpolicy.off_policy_rows`). :func:`plot_dynamics` draws one metric's panel
on a given ``ax``; :func:`dynamics_figure` lays the panels out (``(fig, axes)``, never saved).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis import style
from analysis.aggregate import Curves, XKind, curves
from analysis.labels import metric_label
from analysis.limits import metric_limits
from analysis.offpolicy import is_ratio_metric, off_policy_rows
from analysis.panels import (
    ON_POLICY_NOTE,
    Drawn,
    Facets,
    draw_panel_lines,
    finish_grid,
    fit_legend,
    fit_text,
    hue_labels_of,
    line_handles,
    no_data,
    note_coinciding,
    wrap_title,
)
from analysis.settings.report import DYNAMICS_METRICS

__all__ = ["dynamics_figure", "frame_dynamics_figure", "plot_dynamics"]


def plot_dynamics(ax: Axes, metric: str, c: Curves | None, facets: Facets, *, panel: Any = None) -> Drawn:
    """One panel of the dynamics figure on ``ax``: ``metric``'s curves (``c``, None when no run
    logged it) in panel column ``panel`` (``facets.col``'s label; None: not faceted), one line with
    its band per variant. A panel without data says "no data", or that its runs are on-policy for
    an importance-ratio metric (``facets.on_policy``), and hides its y ticks.

    Returns:
        What was drawn (:class:`~analysis.panels.Drawn`).
    """
    col = facets.col
    a = None if c is None else c.mean
    if a is not None and col is not None:
        a = a[(a[col] == panel).to_numpy()]
    if a is None or a.empty or a["mean"].isna().all():
        on_policy = facets.on_policy_columns()
        on = is_ratio_metric(metric) and (panel in on_policy or (col is None and bool(on_policy)))
        no_data(ax, ON_POLICY_NOTE if on else "no data")
        ax.tick_params(axis="y", left=False, labelleft=False)
        return Drawn()
    hue_labels = hue_labels_of(a, facets.hue, facets.hue_order)
    colors = facets.palette(hue_labels or ["all"])
    drawn = draw_panel_lines(ax, a, None, facets.hue, hue_labels, colors, metric)
    note_coinciding(ax, a, facets.hue)
    return drawn


def dynamics_figure(
    aggs: Mapping[str, Curves],
    facets: Facets,
    *,
    metrics: Sequence[str] | None = None,
    x: XKind = "step",
    ncols: int = 3,
) -> tuple[Figure, np.ndarray]:
    """Training-dynamics panels: one panel per metric (:func:`plot_dynamics`), or with
    ``facets.col`` one row per metric and one column per label. Each panel has its own robust
    y-limits (a metric of :data:`analysis.limits.FIXED_LIMITS`, e.g. ESS/N, its fixed range); with
    facets, a metric's row shares them.

    Args:
        aggs: the curves per metric (:func:`analysis.aggregate.curves`; an importance-ratio metric's
            over off-policy steps).
        facets: the variants' column and order, the panel columns, colours, the legend's title
            (default the hue's column) and the on-policy panel columns.
        metrics: the panels in order (default ``aggs``'); one not in ``aggs`` says "no data"; if
            there is none, one "no data" panel is returned.
        x: the x axis's kind (its label).
        ncols: panels per row without ``facets.col``.

    Returns:
        ``(fig, axes)``; ``axes`` is 2-D; unused trailing axes are hidden. The figure legend lists
        every variant drawn in any panel.
    """
    shown = list(aggs) if metrics is None else list(metrics)
    col = facets.col
    if facets.hue_order is None:  # the variants of every metric's curves, in label order
        means = [c.mean[[facets.hue]] for c in aggs.values() if facets.hue in c.mean.columns]
        facets = replace(
            facets, hue_order=hue_labels_of(pd.concat(means) if means else pd.DataFrame(), facets.hue, None)
        )
    hue_labels = list(facets.hue_order)
    colors = facets.palette(hue_labels or ["all"])
    nc, nr, cells = _metric_cells(shown, col, facets.columns(None), ncols)
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
            got = plot_dynamics(ax, m, aggs.get(m), facets, panel=cv)
            drawn.extend(lab for lab in got.labels if lab not in drawn)
            key = i if col is not None else -1 - (i * nc + j)  # with facets a metric's row shares y
            if got.lines:
                row_curves.setdefault(key, []).extend(got.lines)
                row_bands.setdefault(key, []).extend(got.bands)
            _label_metric_panel(ax, m, col, cv, i, j, facets.on_policy_columns(), label_width)
        for i, j, m, _ in cells:
            key = i if col is not None else -1 - (i * nc + j)
            if key in row_curves:
                lim = metric_limits(m, row_curves[key], row_bands[key], np.concatenate(row_curves[key]))
                if lim is not None and axes[i, j].get_ylim() != lim:
                    axes[i, j].set_ylim(*lim)
        used = {(i, j) for i, j, _, _ in cells}
        if not cells:
            no_data(axes[0, 0])
            used.add((0, 0))
        finish_grid(axes, used, x)
        if facets.hue is not None:
            fit_legend(
                fig,
                line_handles([lab for lab in hue_labels if lab in drawn], colors),
                facets.legend_title or facets.hue,
            )
    return fig, axes


def frame_dynamics_figure(
    df: pd.DataFrame,
    metrics: Sequence[str] = DYNAMICS_METRICS,
    facets: Facets | None = None,
    *,
    skip_missing: bool = True,
    ncols: int = 3,
    **numbers: Any,
) -> tuple[Figure, np.ndarray]:
    """The dynamics figure of a frame from :func:`analysis.load.load`: each metric's
    :func:`analysis.aggregate.curves` (an importance-ratio metric over off-policy steps), then
    :func:`dynamics_figure`. A metric that is absent or all-NaN in ``df`` is left out
    (``skip_missing``) or drawn as a "no data" panel.

    Args:
        df: the metrics frame.
        metrics: metric columns, in panel order.
        facets: label columns of ``df`` (the variants and panel columns in the frame's order
            unless given); default the variants by ``loss_type``.
        skip_missing: drop metrics without data instead of drawing "no data".
        ncols: panels per row without ``facets.col``.
        numbers: keywords of :func:`analysis.aggregate.curves` (``x``, ``ci``, ``confidence``,
            ``smoothing``).
    """
    facets = facets or Facets(hue="loss_type")
    present = [m for m in metrics if m in df.columns and df[m].notna().any()]
    aggs = _metric_curves(df, present, by=[c for c in (facets.hue, facets.col) if c is not None], **numbers)
    facets = replace(
        facets,
        hue_order=hue_labels_of(df, facets.hue, facets.hue_order),
        col_values=facets.columns(df),
    )
    shown = present if skip_missing else list(metrics)
    return dynamics_figure(aggs, facets, metrics=shown, x=numbers.get("x", "step"), ncols=ncols)


def _metric_curves(df: pd.DataFrame, metrics: Sequence[str], **kw: Any) -> dict[str, Curves]:
    """:func:`analysis.aggregate.curves` of each metric (keywords ``x``, ``by``, ``ci``,
    ``confidence``, ``smoothing``); an importance-ratio metric over off-policy steps only."""
    off = off_policy_rows(df)[0]
    return {m: curves(df, m, rows=off if is_ratio_metric(m) else None, **kw) for m in metrics}


def _metric_cells(
    shown: Sequence[str], col: str | None, col_values: Sequence[Any], ncols: int
) -> tuple[int, int, list[tuple[int, int, str, Any]]]:
    """The layout of :func:`dynamics_figure`: ``(columns, rows, cells)``, each cell ``(row, column,
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
    """Name a :func:`dynamics_figure` panel: its metric as the title, or with ``col`` the metric on
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
