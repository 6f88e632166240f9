"""pass@k against k: the sampled eval of the starting policy and of each run's last eval step.

A run's sampled eval draws n completions per held-out prompt and records pass@k for k = 1, 2,
4, ... up to n, and n itself (``eval/pass@k``), by the unbiased estimator of Chen et al. (2021),
"Evaluating Large Language Models Trained on Code", arXiv:2107.03374, Eq. 1: per prompt with c of
its n completions correct, ``1 - C(n - c, k) / C(n, k)``, averaged over prompts. The starting
policy's values (before step 1) are in the run's ``eval_start.json``.

Pure: :func:`pass_at_k_points` takes the metrics frame and the start values and returns a frozen
:class:`PassAtK` (the mean over runs per variant, k and point with its Student-t interval);
:func:`pass_at_k_table` and :func:`pass_at_k_caption` describe it; :func:`pass_at_k_figure` draws it
(``(fig, axes)``, never saved) through :func:`plot_pass_at_k`, which draws one panel on an ``ax``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullLocator

from analysis import stats, style
from analysis.aggregate import band_caption, factorize_runs
from analysis.grouping import by_run_and_step
from analysis.limits import clamp_limits, curve_limits
from analysis.panels import Drawn, Facets, fit_legend, line_handles, no_data, wrap_title
from analysis.tables import Table
from harness import layout

__all__ = [
    "END",
    "ESTIMATOR",
    "START",
    "PassAtK",
    "pass_at_k_caption",
    "pass_at_k_columns",
    "pass_at_k_figure",
    "pass_at_k_points",
    "pass_at_k_table",
    "plot_pass_at_k",
    "run_values",
]

#: The two points of each run: the starting policy (``eval_start.json``) and its last eval step.
START, END = "start", "end"
#: The estimator, as captions name it.
ESTIMATOR = (
    "the unbiased estimator of Chen et al. 2021 (arXiv:2107.03374, Eq. 1): per prompt with c of its n "
    "completions correct, 1 - C(n-c, k)/C(n, k), averaged over the eval prompts"
)


def pass_at_k_columns(columns: Iterable[Any]) -> list[str]:
    """The pass@k columns among ``columns`` (:func:`harness.layout.pass_at_k`), in order of k."""
    found = [c for c in columns if isinstance(c, str) and layout.pass_at_k(c) is not None]
    return sorted(found, key=layout.pass_at_k)


@dataclass(frozen=True)
class PassAtK:
    """:func:`pass_at_k_points`' answer.

    Attributes:
        frame: one row per group, point and k: the ``by`` columns, ``when`` (:data:`START` or
            :data:`END`), ``k`` (int), ``mean``, ``lo``, ``hi`` (the Student-t interval over runs;
            NaN with fewer than 2 runs) and ``runs`` (the runs with a value).
        runs: one row per run and point: ``run_id``, the ``by`` columns, ``when``, ``step`` (0 for
            the start) and one column per pass@k column (NaN where the run has none).
        ks: the k recorded by any run, ascending.
        confidence: the intervals' two-sided coverage.
    """

    frame: pd.DataFrame
    runs: pd.DataFrame
    ks: tuple[int, ...]
    confidence: float = 0.95


def run_values(df: pd.DataFrame, start: Mapping[str, Mapping[str, float]]) -> pd.DataFrame:
    """Each run's pass@k at the start and at its last eval step.

    Args:
        df: frame from :func:`analysis.load.load` (``run_id``, ``step``, the pass@k columns).
        start: ``{run_id: {column: value}}``, the starting policy's sampled eval of each run that
            measured one (:func:`harness.layout.read_start_evals`).

    Returns:
        One row per run with a finite pass@k, at :data:`START` (when ``start`` has the run) and at
        :data:`END` (its last step with any finite pass@k): ``run_id``, ``when``, ``step``, one
        column per pass@k column of ``df``; sorted by run id, start first.
    """
    cols = pass_at_k_columns(df.columns)
    out = pd.DataFrame(columns=[layout.RUN_ID, "when", "step", *cols])
    if not cols or df.empty:
        return out
    values = df[cols].to_numpy(dtype=np.float64)
    any_value = np.isfinite(values).any(axis=1)
    codes, names = factorize_runs(df[layout.RUN_ID])
    order = by_run_and_step(codes, df[layout.STEP].to_numpy(), any_value)
    last = order[np.r_[codes[order][1:] != codes[order][:-1], True]] if order.size else order
    rows = []
    for i in last:
        rid = str(names[codes[i]])
        first = start.get(rid) or {}
        if any(np.isfinite(first.get(c, np.nan)) for c in cols):
            rows.append(
                {layout.RUN_ID: rid, "when": START, "step": 0, **{c: first.get(c, np.nan) for c in cols}}
            )
        rows.append(
            {
                layout.RUN_ID: rid,
                "when": END,
                "step": int(df[layout.STEP].iloc[i]),
                **dict(zip(cols, values[i], strict=True)),
            }
        )
    return pd.DataFrame(rows, columns=out.columns).sort_values([layout.RUN_ID, "step"], ignore_index=True)


def pass_at_k_points(
    df: pd.DataFrame,
    start: Mapping[str, Mapping[str, float]],
    by: Sequence[str] = (),
    *,
    confidence: float = 0.95,
) -> PassAtK:
    """pass@k per group, point (start, end) and k: the mean over runs with its Student-t interval
    (:func:`analysis.stats.t_interval`: ``mean ± t_{(1+c)/2, n-1}·s/√n``, none for one run).

    Args:
        df: frame from :func:`analysis.load.load` with the ``by`` label columns (one value per run).
        start: the start values per run (:func:`run_values`).
        by: the columns that tell groups apart (variant, panel columns, panel rows).
        confidence: the intervals' coverage.

    Returns:
        A :class:`PassAtK` (empty frames without a finite pass@k); groups in the order of ``df``'s
        labels (a categorical's categories), the start before the end, k ascending.
    """
    by = list(by)
    per_run = run_values(df, start)
    cols = [c for c in per_run.columns if layout.pass_at_k(c) is not None]
    labels = df.drop_duplicates(layout.RUN_ID).set_index(layout.RUN_ID)[by] if by else None
    for b in by:
        per_run[b] = per_run[layout.RUN_ID].map(labels[b].astype(str).to_dict())
    long = per_run.melt(id_vars=[*by, "when", layout.RUN_ID], value_vars=cols, var_name="column")
    long = long[np.isfinite(long["value"].to_numpy(dtype=np.float64))]
    rows = []
    for key, g in long.groupby([*by, "when", "column"], sort=False):
        mean, lo, hi = stats.t_interval(g["value"].to_numpy(dtype=np.float64), confidence=confidence)
        values = dict(zip([*by, "when", "column"], key, strict=True))
        k = layout.pass_at_k(values.pop("column"))
        rows.append({**values, "k": k, "mean": float(mean), "lo": float(lo), "hi": float(hi), "runs": len(g)})
    frame = pd.DataFrame(rows, columns=[*by, "when", "k", "mean", "lo", "hi", "runs"])
    rank = {b: {str(v): i for i, v in enumerate(_label_order(df[b]))} for b in by}
    rank["when"] = {START: 0, END: 1}
    frame = frame.sort_values(
        [*by, "when", "k"], key=lambda c: c.map(rank[c.name]) if c.name in rank else c, ignore_index=True
    )
    ks = tuple(sorted({int(k) for k in frame["k"]}))
    return PassAtK(
        frame=frame, runs=per_run[[layout.RUN_ID, *by, "when", "step", *cols]], ks=ks, confidence=confidence
    )


def _label_order(column: pd.Series) -> list[Any]:
    """A label column's values in display order: a categorical's categories, else as they come."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return list(column.cat.categories)
    return list(dict.fromkeys(column.tolist()))


def pass_at_k_table(points: PassAtK, by: Sequence[str] = (), names: Mapping[str, str] | None = None) -> Table:
    """pass@k at the start and at the end per group and k, each with its interval.

    Args:
        points: :func:`pass_at_k_points`.
        by: its group columns, in the table's order.
        names: headers of the ``by`` columns (e.g. ``{"variant": "loss_type"}``).

    Returns:
        A :class:`analysis.tables.Table` with one row per group and k: ``*by``, ``k``,
        ``runs_start``, ``start`` (``start_lo``, ``start_hi``), ``runs_end``, ``end`` (``end_lo``,
        ``end_hi``), in the order of :attr:`PassAtK.frame`; NaN (shown "–") where no run has the
        point. No caption: see :func:`pass_at_k_caption`.
    """
    by = list(by)
    f = points.frame
    wide = []
    for when in (START, END):
        part = f[f["when"] == when].drop(columns="when")
        part = part.rename(
            columns={"mean": when, "lo": f"{when}_lo", "hi": f"{when}_hi", "runs": f"runs_{when}"}
        )
        wide.append(part.set_index([*by, "k"]))
    order = (
        pd.MultiIndex.from_frame(f[[*by, "k"]].drop_duplicates())
        if by
        else pd.Index(f["k"].unique(), name="k")
    )
    table = wide[0].join(wide[1], how="outer").reindex(order).reset_index()
    cols = [*by, "k", "runs_start", "start", "start_lo", "start_hi", "runs_end", "end", "end_lo", "end_hi"]
    table = table.reindex(columns=cols)
    for c in ("runs_start", "runs_end"):
        table[c] = table[c].fillna(0).astype(int)
    display = {
        "runs_start": "runs (start)",
        "start": f"pass@k at start [{100 * points.confidence:g}% CI]",
        "runs_end": "runs (end)",
        "end": f"pass@k at end [{100 * points.confidence:g}% CI]",
        **(names or {}),
    }
    return Table(table, display=display)


def _count_text(counts: Sequence[int]) -> str:
    lo, hi = min(counts), max(counts)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def pass_at_k_caption(points: PassAtK, *, n: Sequence[int] = (), temperature: Sequence[float] = ()) -> str:
    """What the pass@k figure and table show: the estimator, n and the temperature (each as the
    runs' configs state it; ``n`` else the largest k recorded), which step is the end, the band
    (:func:`analysis.aggregate.band_caption`: with 2 or 3 runs its t quantile) and how many runs
    each point has (a point of one run has no band)."""
    ns = sorted({int(v) for v in n})
    n_text = (
        f"n = {', '.join(map(str, ns))} sampled completions per eval prompt"
        if ns
        else f"n = {max(points.ks)} sampled completions per eval prompt (the largest k recorded)"
        if points.ks
        else "n not recorded"
    )
    temps = sorted({float(t) for t in temperature})
    t_text = (
        f"temperature {', '.join(f'{t:g}' for t in temps)}" if temps else "the temperature is not recorded"
    )
    ends = points.runs.loc[points.runs["when"] == END, "step"].astype(int)
    end_text = (
        f"step {ends.iloc[0]}"
        if ends.nunique() == 1
        else f"steps {ends.min()}-{ends.max()}"
        if len(ends)
        else "–"
    )
    counts = {w: points.frame.loc[points.frame["when"] == w, "runs"].tolist() for w in (START, END)}
    all_counts = [int(n) for c in counts.values() for n in c]
    runs_text = ", ".join(f"{w} {_count_text(c)}" for w, c in counts.items() if c)
    missing = (
        points.runs.loc[points.runs["when"] == END, layout.RUN_ID].nunique()
        - points.runs.loc[points.runs["when"] == START, layout.RUN_ID].nunique()
    )
    return (
        f"pass@k against k (log2 axis) from the sampled eval: {ESTIMATOR}; {n_text}, {t_text}. Dashed: the "
        "starting policy, before step 1 (each run's eval_start.json); solid: the end, each run's last eval "
        f"step ({end_text}). {band_caption('t', points.confidence, runs=all_counts)}"
        + (" A hollow marker: a point of one run, without a band." if min(all_counts, default=2) < 2 else "")
        + f" Runs per point: {runs_text}."
        + (
            f" {missing} run(s) recorded no start (no sampled eval in eval_start.json)."
            if missing > 0
            else ""
        )
    )


def _labels(points: PassAtK, facets: Facets) -> list[str]:
    """The variants of the pass@k figure: ``facets.hue_order``, else as the points hold them."""
    f = points.frame
    if facets.hue_order is not None:
        return list(facets.hue_order)
    return [str(v) for v in f[facets.hue].drop_duplicates()] if facets.hue else []


def pass_at_k_figure(points: PassAtK, facets: Facets) -> tuple[Figure, np.ndarray]:
    """pass@k against k, small multiples over the facets (:func:`plot_pass_at_k` per panel).

    Args:
        points: :func:`pass_at_k_points` over the ``facets``' label columns.
        facets: the label columns, their display order, colours and the variants' legend title.

    Returns:
        ``(fig, axes)`` of shape ``(rows, cols)``, y shared; the legend (variants, then the line
        styles of the start and the end) below the panels.
    """
    f = points.frame
    labels = _labels(points, facets)
    colors = facets.palette(labels or ["all"])
    cols, rows = facets.columns(f), facets.rows(f)
    with style.context():
        width = style.COLUMN_WIDTH_IN if len(cols) == 1 else min(style.FULL_WIDTH_IN, 0.6 + 2.2 * len(cols))
        fig = style.figure(len(cols), len(rows), width=width, panel_height=2.0)
        axes = fig.subplots(len(rows), len(cols), squeeze=False, sharex=True, sharey=True)
        drawn: list[str] = []
        values: list[np.ndarray] = []
        for i, rv in enumerate(rows):
            for j, cv in enumerate(cols):
                ax = axes[i, j]
                got = plot_pass_at_k(ax, points, facets, panel=(cv, rv))
                drawn += [lab for lab in got.labels if lab not in drawn]
                values += got.bands
                if i == len(rows) - 1:
                    ax.set_xlabel("k (log2 scale)")
                if j == 0:
                    ax.set_ylabel("pass@k (sampled eval)")
        means = f["mean"].to_numpy(dtype=np.float64)
        lim = clamp_limits(curve_limits([means], values), layout.PASS_AT_PREFIX, means)
        if lim is not None:
            axes[0, 0].set_ylim(*lim)
        ends = points.runs.loc[points.runs["when"] == END, "step"].astype(int)
        end = f"end (step {ends.iloc[0]})" if ends.nunique() == 1 else "end (last eval)"
        handles = line_handles([lab for lab in labels if lab in drawn], colors) if facets.hue else []
        handles += [
            Line2D(
                [], [], color="0.3", linestyle="--", marker="o", markersize=3, label="start (before step 1)"
            ),
            Line2D([], [], color="0.3", linestyle="-", marker="o", markersize=3, label=end),
        ]
        fit_legend(fig, handles, facets.legend_title)
    return fig, axes


def plot_pass_at_k(
    ax: Axes, points: PassAtK, facets: Facets, *, panel: tuple[Any, Any] = (None, None)
) -> Drawn:
    """One panel of :func:`pass_at_k_figure` on ``ax``: the points in ``panel`` (its column and
    row labels), per variant the start (dashed) and the end (solid), each its mean over runs with
    its interval shaded where it has one; when every variant's start is the same (one starting
    policy, the same seeds), it is drawn once, in grey. x is k on a log2 axis with a tick at each
    k of ``points.ks``; the panel's title names its labels.

    Returns:
        What was drawn: the variant labels, and the panel's means and interval ends as ``bands``
        (for a y range the panels share).
    """
    cv, rv = panel
    hue = facets.hue
    labels = _labels(points, facets)
    colors = facets.palette(labels or ["all"])
    part = facets.panel(points.frame, cv, rv)
    if part.empty:
        no_data(ax)
    groups = (
        {lab: part[(part[hue].astype(str) == lab).to_numpy()] for lab in labels} if hue else {"all": part}
    )
    groups = {lab: g for lab, g in groups.items() if len(g)}
    starts = [g[g["when"] == START][["k", "mean", "lo", "hi"]].to_numpy() for g in groups.values()]
    shared = len(starts) > 1 and all(
        s.shape == starts[0].shape and np.array_equal(s, starts[0], equal_nan=True) for s in starts
    )
    if shared:
        _draw_point_line(ax, next(iter(groups.values())), START, "0.35")
    for lab, g in groups.items():
        if not shared:
            _draw_point_line(ax, g, START, colors.get(lab, "0.3"))
        _draw_point_line(ax, g, END, colors.get(lab, "0.3"))
    if shared:
        ax.text(0.02, 0.97, f"start: all {len(groups)} variants coincide (grey)", transform=ax.transAxes,
                ha="left", va="top", fontsize=6.5, color="0.35")  # fmt: skip
    ax.set_xscale("log", base=2)
    ks = points.ks
    if ks:
        ax.set_xticks(list(ks), [str(k) for k in ks])
        ax.set_xlim(min(ks) / 1.3, max(ks) * 1.3)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_title(wrap_title(", ".join(str(p) for p in (rv, cv) if p is not None)))
    return Drawn(
        labels=[lab for lab in groups if hue],
        bands=[part[c].to_numpy(dtype=np.float64) for c in ("mean", "lo", "hi")],
    )


def _draw_point_line(ax: Axes, group: pd.DataFrame, when: str, color: str) -> None:
    """One point's line (start dashed, end solid) against k, with its interval shaded where known;
    a point of one run (no interval) has a hollow marker."""
    p = group[group["when"] == when].sort_values("k")
    if p.empty:
        return
    k, mean = p["k"].to_numpy(dtype=np.float64), p["mean"].to_numpy(dtype=np.float64)
    style_ = {"linestyle": "--", "alpha": 0.9} if when == START else {"linestyle": "-"}
    ax.plot(k, mean, color=color, linewidth=1.1, **style_)
    one = p["runs"].to_numpy() < 2  # a point of one run has no interval: hollow, as in the final-score figure
    ax.plot(k[~one], mean[~one], color=color, marker="o", markersize=3, linestyle="none")
    ax.plot(k[one], mean[one], color=color, marker="o", markersize=3.5, mfc="white", linestyle="none")
    # a probability: the band is drawn within [0, 1] (the table gives the t interval as computed)
    lo, hi = (np.clip(p[c].to_numpy(dtype=np.float64), 0.0, 1.0) for c in ("lo", "hi"))
    ok = np.isfinite(lo) & np.isfinite(hi)
    if ok.any():
        ax.fill_between(k, lo, hi, where=ok, color=color, alpha=0.15 if when == START else 0.22, linewidth=0)
