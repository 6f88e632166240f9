"""Figures of final scores, in the style of rliable (Agarwal et al. 2021).

* :func:`final_figure`: each variant's final score per facet: one dot per run and the mean with its
  stratified-bootstrap interval, small multiples over the facets (e.g. VESPO's (k, λ) settings
  per staleness level), each panel :func:`plot_final`.
* :func:`aggregate_figure`: interval estimates of the mean and the IQM per variant, and the
  probability of improvement over the baseline with its interval, each panel :func:`plot_estimates`.
* :func:`profile_figure`: performance profiles, the fraction of runs whose final score exceeds each
  threshold, each with its stratified-bootstrap 95% band (as rliable's ``create_performance_profile``),
  each panel :func:`plot_profile`.

The numbers come from :func:`analysis.scores.final_performance_table` and
:func:`analysis.stats.performance_profile`. A ``plot_*`` function draws one panel on a given
``ax``; a ``*_figure`` function returns ``(fig, axes)`` and never saves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from analysis import stats, style
from analysis.labels import metric_label
from analysis.limits import robust_limits
from analysis.panels import Drawn, Facets, fit_legend, line_handles, no_data, panel_rows, wrap_title
from analysis.scores import bootstrap_reps

__all__ = [
    "Profile",
    "aggregate_figure",
    "final_figure",
    "plot_estimates",
    "plot_final",
    "plot_profile",
    "profile_figure",
    "profile_frame",
]


def _final_labels(scores: pd.DataFrame, facets: Facets) -> list[str]:
    """The variants of the final-score figure, top to bottom: ``facets.hue_order``, else as the
    scores hold them (``["all"]`` without a hue)."""
    if facets.hue_order is not None:
        return list(facets.hue_order)
    return [str(v) for v in scores[facets.hue].drop_duplicates()] if facets.hue else ["all"]


def plot_final(
    ax: Axes,
    scores: pd.DataFrame,
    table: pd.DataFrame,
    facets: Facets,
    *,
    panel: tuple[Any, Any] = (None, None),
) -> Drawn:
    """One panel of the final-score figure on ``ax``: the runs in ``panel`` (its column and row
    labels), one row per variant (:func:`_final_labels`' order, top to bottom): a dot per run and
    the mean with its interval (a bar; a hollow marker when the variant has a single run), the
    panel's title (with "(on-policy)" for a panel of ``facets.on_policy``).

    Args:
        scores: one row per run: ``score`` and the label columns; an optional ``state`` column
            (:data:`analysis.states.STATES`) draws a diverged run as × and any other run that did
            not finish (stopped, running, failed) as a hollow triangle.
        table: :func:`analysis.scores.final_performance_table` over the same labels (``mean``,
            ``mean_lo``, ``mean_hi``).

    Returns:
        What was drawn: ``kinds`` holds the state groups of the runs drawn (``done``,
        ``diverged``, ``other``).
    """
    cv, rv = panel
    labels = _final_labels(scores, facets)
    colors = facets.palette(labels)
    hue = facets.hue
    s = facets.panel(scores, cv, rv)
    t = facets.panel(table, cv, rv)
    if s.empty:
        no_data(ax)
    shown: set[str] = set()
    for k, lab in enumerate(labels):
        sv = s if hue is None else s[(s[hue].astype(str) == lab).to_numpy()]
        tv = t if hue is None else t[(t[hue].astype(str) == lab).to_numpy()]
        y, color = len(labels) - 1 - k, colors.get(lab, "0.3")
        shown |= _draw_runs(ax, sv, y, color)
        _draw_interval(ax, tv, y, color)
    ax.set_yticks(range(len(labels)), [wrap_title(lab, 34) for lab in labels[::-1]])
    ax.set_ylim(-0.6, len(labels) - 0.4)
    title = ", ".join(str(p) for p in (rv, cv) if p is not None)
    on_policy = (cv, rv) in {tuple(f) for f in facets.on_policy}
    ax.set_title(wrap_title(title + (" (on-policy)" if on_policy else "")))
    ax.grid(axis="y", visible=False)
    return Drawn(kinds=frozenset(shown))


def final_figure(
    scores: pd.DataFrame, table: pd.DataFrame, facets: Facets, *, metric: str
) -> tuple[Figure, np.ndarray]:
    """Final score per variant, small multiples over the facets (:func:`plot_final` per panel).

    Args:
        scores: one row per run: ``score``, the label columns and optionally ``state``.
        table: :func:`analysis.scores.final_performance_table` over the same labels.
        facets: the label columns, their order and colours, the on-policy panels.
        metric: the score's metric (axis label).

    Returns:
        ``(fig, axes)`` of shape ``(rows, cols)``: in each panel one row per variant.
    """
    labels = _final_labels(scores, facets)
    cols, rows = facets.columns(scores), facets.rows(scores)
    lim = robust_limits(
        np.r_[
            scores["score"].to_numpy(dtype=float), table[["mean_lo", "mean_hi"]].to_numpy(dtype=float).ravel()
        ],
        q=0.0,
    )
    with style.context():
        ticks = [wrap_title(lab, 34) for lab in labels[::-1]]  # long variant labels wrap
        lines = sum(t.count("\n") + 1 for t in ticks)
        longest = max((len(line) for t in ticks for line in t.split("\n")), default=0)
        # room for the labels (about 0.065 in a character at the tick font) beside the panels
        width = min(style.FULL_WIDTH_IN, 1.9 * len(cols) + max(1.2, 0.065 * longest))
        fig = style.figure(
            len(cols), len(rows), width=width, panel_height=max(1.3, 0.75 + 0.22 * len(labels) + 0.12 * lines)
        )
        axes = fig.subplots(len(rows), len(cols), squeeze=False, sharex=True, sharey=True)
        shown: set[str] = set()
        for i, rv in enumerate(rows):
            for j, cv in enumerate(cols):
                ax = axes[i, j]
                shown |= plot_final(ax, scores, table, facets, panel=(cv, rv)).kinds
                if i == len(rows) - 1:
                    ax.set_xlabel(f"final {metric_label(metric)}")
        if lim is not None:
            axes[0, 0].set_xlim(*lim)
        fit_legend(fig, _final_handles(shown), None)
    return fig, axes


def _draw_runs(ax: Any, runs: pd.DataFrame, y: float, color: str) -> set[str]:
    """One variant's runs as jittered dots at height ``y``, each marked by its state
    (:data:`_STATE_MARKERS`); returns the state groups drawn."""
    if runs.empty:
        return set()
    jitter = np.linspace(-0.12, 0.12, len(runs)) if len(runs) > 1 else np.zeros(1)
    state = runs["state"].to_numpy() if "state" in runs.columns else np.full(len(runs), "done")
    drawn = set()
    for what, (marker, size, face) in _STATE_MARKERS.items():
        pick = state == what if what != "other" else ~np.isin(state, ["done", "diverged"])
        if not pick.any():
            continue
        ax.scatter(
            runs["score"].to_numpy()[pick],
            (y + jitter)[pick],
            s=size,
            marker=marker,
            **({"color": color} if face else {"facecolors": "none", "edgecolors": color}),
            alpha=0.55 if what == "done" else 0.9,
            linewidths=0 if what == "done" else 0.9,
            zorder=2,
        )
        drawn.add(what)
    return drawn


def _draw_interval(ax: Any, row: pd.DataFrame, y: float, color: str) -> None:
    """A variant's mean with its interval (a bar), or a hollow circle when it has no interval."""
    if row.empty:
        return
    m, lo, hi = (float(row[c].iloc[0]) for c in ("mean", "mean_lo", "mean_hi"))
    if np.isfinite(lo) and np.isfinite(hi):
        ax.plot([lo, hi], [y, y], color=color, linewidth=3.0, alpha=0.45, solid_capstyle="butt")
        ax.plot([m], [y], marker="|", color=color, markersize=9, markeredgewidth=1.6)
    elif np.isfinite(m):
        ax.plot([m], [y], marker="o", mfc="none", color=color, markersize=4)


def _final_handles(shown: set[str]) -> list[Line2D]:
    """Legend entries of :func:`final_figure`: a run, the mean with its interval, and each state
    group of runs that did not finish when drawn."""
    handles = [
        Line2D([], [], color="0.35", marker="o", linestyle="none", markersize=3, alpha=0.6, label="a run"),
        Line2D([], [], color="0.35", linewidth=3.0, alpha=0.45, label="mean, 95% CI"),
    ]
    for what, text in (("diverged", "diverged run"), ("other", "run not finished")):
        if what in shown:
            marker, _, face = _STATE_MARKERS[what]
            handles.append(
                Line2D(
                    [],
                    [],
                    color="0.35",
                    marker=marker,
                    mfc="0.35" if face else "none",
                    linestyle="none",
                    markersize=4,
                    label=f"{text} (included)",
                )
            )
    return handles


#: How :func:`plot_final` draws a run by its state: (marker, size in pt², filled). "other":
#: stopped, running or failed; drawn only when the report includes runs that did not finish.
_STATE_MARKERS: dict[str, tuple[str, float, bool]] = {
    "done": ("o", 9.0, True),
    "diverged": ("x", 16.0, True),
    "other": ("^", 14.0, False),
}


def aggregate_figure(
    table: pd.DataFrame,
    *,
    metric: str,
    names: Sequence[str],
    colors: Sequence[str],
    baseline: str | None,
    panels: Sequence[tuple[str, str]] = (("mean", "Mean"), ("iqm", "IQM")),
) -> tuple[Figure, np.ndarray]:
    """Interval estimates per variant: mean, IQM and P(variant > baseline), each with its interval
    (:func:`plot_estimates` per panel).

    Args:
        table: :func:`analysis.scores.final_performance_table` rows, in display order (or any
            table with each panel's column and its ``_lo``/``_hi``, e.g. the aggregates over tasks).
        metric: the score's metric (the x label of every panel but P(>)).
        names: one display name per row of ``table`` (variant and facet).
        colors: one colour per row.
        baseline: the baseline's label (None: the P(>) panel is left out).
        panels: ``(column, title)`` of each panel before P(>).

    Returns:
        ``(fig, axes)`` with one row of panels: Mean, IQM (or ``panels``), and P(> baseline) when
        there is one.
    """
    panels = list(panels)
    if baseline is not None and "p_improve" in table.columns:
        panels.append(("p_improve", f"P(variant > {baseline})"))
    n = len(table)
    ticks = [wrap_title(str(name), 34) for name in list(names)[::-1]]  # long variant labels wrap
    lines = sum(t.count("\n") + 1 for t in ticks)
    with style.context():
        fig = style.figure(
            len(panels), 1, width=style.FULL_WIDTH_IN, panel_height=max(1.3, 0.6 + 0.2 * n + 0.12 * lines)
        )
        axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)
        for j, (column, title) in enumerate(panels):
            ax = axes[0, j]
            plot_estimates(ax, table, column, colors)
            if column == "p_improve":
                ax.axvline(0.5, color="0.4", linestyle="--", linewidth=0.7)
                ax.set_xlim(-0.02, 1.02)
            else:  # narrow panels beside long labels: few ticks, or close values run together
                ax.xaxis.set_major_locator(MaxNLocator(nbins=3))
            ax.set_title(title)
            ax.set_xlabel(metric_label(metric) if column != "p_improve" else "probability")
            ax.grid(axis="y", visible=False)
        axes[0, 0].set_yticks(range(n), ticks)
        axes[0, 0].set_ylim(-0.6, max(n, 1) - 0.4)
    return fig, axes


def plot_estimates(ax: Axes, table: pd.DataFrame, column: str, colors: Sequence[str]) -> None:
    """One panel of :func:`aggregate_figure` (and of the report's aggregate over tasks) on ``ax``:
    per row of ``table`` (top to bottom, in ``colors[k]``)
    a bar over ``[column_lo, column_hi]`` with a tick at ``column``, or a hollow circle at
    ``column`` when there is no interval."""
    n = len(table)
    for k in range(n):
        y = n - 1 - k
        v, lo, hi = (float(table[c].iloc[k]) for c in (column, f"{column}_lo", f"{column}_hi"))
        if np.isfinite(lo) and np.isfinite(hi):
            ax.barh(y, hi - lo, left=lo, height=0.6, color=colors[k], alpha=0.55, linewidth=0)
            ax.plot([v, v], [y - 0.3, y + 0.3], color="0.1", linewidth=1.0)
        elif np.isfinite(v):
            ax.plot([v], [y], marker="o", mfc="none", color=colors[k], markersize=4)


@dataclass(frozen=True)
class Profile:
    """:func:`profile_frame`'s answer: the profiles and, beside them, the resamples of their bands.

    Attributes:
        frame: one row per group and threshold (columns in :func:`profile_frame`).
        reps: bootstrap resamples per group behind ``lo``/``hi``.
    """

    frame: pd.DataFrame
    reps: int


def profile_frame(
    scores: pd.DataFrame,
    by: Sequence[str],
    points: int = 101,
    *,
    reps: int | None = None,
    confidence: float = 0.95,
    seed: int = 0,
) -> Profile:
    """Performance profiles of each group of runs over a common grid of thresholds, with their
    bootstrap bands.

    Args:
        scores: one row per run with ``score`` and the ``by`` columns (a ``task.name`` or ``task``
            column, when present, stratifies the bootstrap).
        by: grouping (label) columns.
        points: thresholds, evenly spaced over the range of all scores.
        reps: bootstrap resamples per group (default :func:`analysis.scores.bootstrap_reps` of all
            the runs: 50,000 up to 80 runs).
        confidence, seed: the band's coverage and the bootstrap seed.

    Returns:
        A :class:`Profile`: ``frame`` with columns ``*by``, ``tau``, ``fraction`` (share of the
        group's runs with score > tau), ``lo``, ``hi`` (the band:
        :func:`analysis.stats.performance_profile_ci`, NaN for a group with one run per task) and
        ``runs``; ``reps`` the resamples (0 without a finite score).
    """
    s = scores["score"].to_numpy(dtype=np.float64)
    s = s[np.isfinite(s)]
    if s.size == 0:
        return Profile(pd.DataFrame(columns=[*by, "tau", "fraction", "lo", "hi", "runs"]), 0)
    reps = bootstrap_reps(s.size) if reps is None else reps
    span = s.max() - s.min() or 1.0
    taus = np.linspace(s.min() - 0.02 * span, s.max() + 0.02 * span, points)
    task = next((c for c in ("task.name", "task") if c in scores.columns and c not in by), None)
    parts = []
    for key, g in scores.groupby(list(by), observed=True, sort=False) if by else [((), scores)]:
        key = key if isinstance(key, tuple) else (key,)
        g = g[np.isfinite(g["score"].to_numpy(dtype=np.float64))]
        frac, lo, hi = stats.performance_profile_ci(
            _task_matrix(g, task), taus, reps=reps, confidence=confidence, seed=seed
        )
        part = pd.DataFrame({"tau": taus, "fraction": frac, "lo": lo, "hi": hi, "runs": len(g)})
        for b, v in zip(by, key, strict=True):
            part[b] = str(v)
        parts.append(part)
    return Profile(pd.concat(parts, ignore_index=True), reps)


def _task_matrix(runs: pd.DataFrame, task: str | None) -> np.ndarray:
    """The ``score`` of ``runs`` as a ``(runs, tasks)`` matrix, NaN-padded (one column without
    ``task``)."""
    if task is None:
        return runs["score"].to_numpy(dtype=np.float64)[:, None]
    cols = [g.to_numpy(dtype=np.float64) for _, g in runs.groupby(task, observed=True)["score"]]
    mat = np.full((max((c.size for c in cols), default=0), len(cols)), np.nan)
    for j, c in enumerate(cols):
        mat[: c.size, j] = c
    return mat


def _profile_labels(profile: pd.DataFrame, facets: Facets) -> list[str]:
    """The variants of the profile figure: ``facets.hue_order``, else as the profiles hold them."""
    if facets.hue_order is not None:
        return list(facets.hue_order)
    hue = facets.hue
    return [str(v) for v in profile[hue].drop_duplicates()] if hue and len(profile) else ["all"]


def plot_profile(ax: Axes, profile: pd.DataFrame, facets: Facets, *, panel: Any = None) -> Drawn:
    """One panel of the profile figure on ``ax``: the profiles (:func:`profile_frame`) in panel
    column ``panel`` (``facets.col``'s label), one step line per variant with its bootstrap band
    shaded in its colour where the frame has ``lo``/``hi``; a note when every variant coincides.

    Returns:
        What was drawn (the fraction of each variant's profile, as ``lines``).
    """
    labels = _profile_labels(profile, facets)
    colors = facets.palette(labels)
    part = panel_rows(profile, facets.col, panel, None, None)
    if part.empty:
        no_data(ax)
    drawn = []
    for lab in labels:
        p = part if facets.hue is None else part[(part[facets.hue].astype(str) == lab).to_numpy()]
        if len(p):
            _draw_profile(ax, p, colors.get(lab, "0.3"))
            drawn.append(p["fraction"].to_numpy())
    if len(drawn) > 1 and all(np.array_equal(d, drawn[0], equal_nan=True) for d in drawn):
        ax.text(
            0.02,
            0.03,
            f"all {len(drawn)} variants coincide",
            transform=ax.transAxes,
            fontsize=6.5,
            color="0.35",
        )
    ax.set_ylim(-0.03, 1.03)
    ax.set_title("" if panel is None else str(panel))
    return Drawn(lines=drawn)


def profile_figure(profile: pd.DataFrame, facets: Facets, *, metric: str) -> tuple[Figure, np.ndarray]:
    """Performance profiles (:func:`profile_frame`), one line per variant, a panel per
    ``facets.col`` label (:func:`plot_profile` each).

    Returns:
        ``(fig, axes)`` with one row of panels.
    """
    labels = _profile_labels(profile, facets)
    cols = facets.columns(profile)
    with style.context():
        fig = style.figure(len(cols), 1)
        axes = fig.subplots(1, len(cols), squeeze=False, sharey=True, sharex=True)
        for j, cv in enumerate(cols):
            ax = axes[0, j]
            plot_profile(ax, profile, facets, panel=cv)
            ax.set_xlabel(f"final {metric_label(metric)} threshold τ")
            if j == 0:
                ax.set_ylabel("fraction of runs > τ")
        if facets.hue is not None:
            fit_legend(fig, line_handles(labels, facets.palette(labels)), facets.legend_title)
    return fig, axes


def _draw_profile(ax: Axes, part: pd.DataFrame, color: str) -> None:
    """One variant's profile (``tau``, ``fraction``) as a step line, with its bootstrap band
    (``lo``, ``hi``) shaded in the same colour where the frame has one."""
    ax.step(part["tau"], part["fraction"], where="post", color=color, linewidth=1.1)
    if {"lo", "hi"} <= set(part.columns) and part[["lo", "hi"]].notna().all(axis=None):
        ax.fill_between(
            part["tau"], part["lo"], part["hi"], step="post", color=color, alpha=0.18, linewidth=0
        )
