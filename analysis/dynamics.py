"""The training-dynamics figure: one panel per metric (eval accuracy, entropy, KL, clipping,
completion length, a loss plugin's own metrics), each a mean over runs with its band.

Numbers from :func:`analysis.aggregate.curves`; importance-ratio metrics over off-policy steps
only (:func:`analysis.offpolicy.off_policy_rows`). Plots return ``(fig, axes)`` and never save.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

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
    draw_panel_lines,
    facet_values,
    finish_grid,
    fit_legend,
    fit_text,
    hue_labels_of,
    line_handles,
    no_data,
    note_coinciding,
    wrap_title,
)
from analysis.report_settings import DYNAMICS_METRICS

__all__ = ["plot_panels"]


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
    importance-ratio metrics (:data:`analysis.offpolicy.RATIO_PREFIXES`) count off-policy steps
    only (:func:`analysis.offpolicy.off_policy_rows`). A metric that is absent or all-NaN in ``df``
    is left out (``skip_missing``) or drawn as a "no data" panel; if no metric has data, one "no
    data" panel is returned. Each panel has its own robust y-limits (a metric of
    :data:`analysis.limits.FIXED_LIMITS`, e.g. ESS/N, its fixed range).

    Args:
        df: frame from :func:`analysis.load.load`.
        metrics: metric columns, in panel order.
        x, hue, ci, confidence, smoothing, colors: as in :func:`analysis.curves.plot_curves`.
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
    hue_labels = hue_labels_of(df, hue, None)
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
                labs, ms, bs = draw_panel_lines(ax, a, None, hue, hue_labels, colors, m)
                drawn.extend(lab for lab in labs if lab not in drawn)
                key = i if col is not None else -1 - (i * nc + j)  # with facets a metric's row shares y
                if ms:
                    row_curves.setdefault(key, []).extend(ms)
                    row_bands.setdefault(key, []).extend(bs)
                note_coinciding(ax, a, hue)
            _label_metric_panel(ax, m, col, cv, i, j, on_policy, label_width)
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
