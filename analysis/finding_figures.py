"""One figure per finding: its arms (or its dose levels) alone, on its metric, its window shaded,
its verdict in the title.

:func:`finding_numbers` gathers the numbers (pure: frames in, a frozen :class:`FindingFigure` out):
each arm's finished runs' curves of the finding's metric, the mean over runs with its 95%
Student-t band as the report's curves have them (:func:`analysis.aggregate.curves`, the report's
smoothing), an eval metric's start (each run's ``eval_start.json``) as its curve's first point at
step 0, the steps the window spans, a to-target finding's level, and a dose-response finding's
runs (value, window mean) with the fitted line. :func:`finding_figure` draws it and returns
``(fig, axes)``; it never saves (:func:`analysis.style.save`). Its panels are
:func:`plot_finding_curves` and :func:`plot_dose_fit`, each on a given ``ax``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from analysis import style
from analysis.aggregate import X_LABELS, Curves, curves
from analysis.finding_dose import x_of
from analysis.finding_tables import verdict_text
from analysis.findings import Finding
from analysis.labels import metric_label
from analysis.panels import fit_legend, fit_text, no_data, thin
from analysis.power import slope_fit
from analysis.tables import fmt
from harness import layout

__all__ = [
    "ARM",
    "FindingFigure",
    "finding_figure",
    "finding_numbers",
    "plot_dose_fit",
    "plot_finding_curves",
]

#: The label column of a finding figure's curves: each arm's (level's) name.
ARM = "arm"
#: Two arms' colours: the baseline black, the variant blue (Okabe-Ito); a dose's levels from a
#: sequential map, low to high. The window: a pale orange, apart from the grey of a black band.
_BASELINE, _VARIANT = "#000000", style.PALETTE[0]
_WINDOW = "#FBEBCB"


@dataclass(frozen=True)
class FindingFigure:
    """What one finding's figure draws (:func:`finding_numbers` gathers it, :func:`finding_figure` draws it).

    Attributes:
        id, claim, metric: the finding's.
        verdict: the verdict as ``grpo-harness findings`` prints it (with the seeds it would need).
        effect: the effect (or slope) with its interval, as text.
        labels: the arms' (levels') legend labels, in order.
        colors: ``{label: colour}``.
        curves: the metric's mean over each arm's runs with its band (:class:`analysis.aggregate.Curves`
            by :data:`ARM`); None when no run of an arm has the metric.
        x: ``"step"``, or ``"tokens"`` for a to-target finding over generated tokens.
        span: the x range the window covers over the runs drawn, ``(lo, hi)``; None without a window.
        window: the window as fractions ``(a, b)``; None without.
        target: a to-target finding's level (NaN otherwise).
        start: whether each curve begins with its runs' start (``eval_start.json``) at step 0.
        dose: a dose-response finding's per-run ``x`` (the value), ``y`` (the window mean) and
            ``label`` columns; None otherwise.
        fit: the dose line's ``(intercept, slope)`` on :attr:`scale`'s x; None without one.
        scale, dose_key: a dose-response finding's scale and key ("" otherwise).
    """

    id: str
    claim: str
    metric: str
    verdict: str
    effect: str
    labels: tuple[str, ...]
    colors: Mapping[str, str]
    curves: Curves | None
    x: str = "step"
    span: tuple[float, float] | None = None
    window: tuple[float, float] | None = None
    target: float = math.nan
    start: bool = False
    dose: pd.DataFrame | None = None
    fit: tuple[float, float] | None = None
    scale: str = ""
    dose_key: str = ""


def finding_numbers(
    df: pd.DataFrame,
    f: Finding,
    row: Mapping[str, Any],
    finished: Collection[str],
    starts: Mapping[str, Mapping[str, float]] | None = None,
    smoothing: Any = None,
) -> FindingFigure:
    """The numbers of one finding's figure.

    Args:
        df: the metrics frame (``run_id``, ``step``, the finding's metric and, over tokens,
            ``tokens/generated_total``).
        f: the finding (:func:`analysis.findings.read_findings`).
        row: its row of :func:`analysis.findings.findings_table` (the verdict, the effect).
        finished: the runs the verdict may count; each arm's other runs are not drawn.
        starts: ``{run id: {eval metric: value}}`` (``eval_start.json``): an eval metric's curves
            start at step 0 with it.
        smoothing: the report's smoothing of each run before averaging.
    """
    finished = {str(r) for r in finished}
    labels = _arm_labels(f)
    arms = {
        labels[name]: [r for r in dict.fromkeys(f.arms.get(name, ())) if r in finished] for name in labels
    }
    x = "tokens" if f.measure == "to_target" and f.x == "tokens" else "step"
    frame, start = _frame(df, f.metric, arms, starts or {}, x)
    order = list(labels.values())
    colors = _colors(order, f)
    drawn = None
    if len(frame) and frame[f.metric].notna().any():
        frame[ARM] = pd.Categorical(frame[ARM], categories=order, ordered=True)
        drawn = curves(frame, f.metric, x=x, by=[ARM], smoothing=smoothing)
    dose, fit = _dose_points(df, f, arms) if f.dose is not None else (None, None)
    return FindingFigure(
        id=f.id,
        claim=f.claim,
        metric=f.metric,
        verdict=verdict_text(row),
        effect=_effect_text(row),
        labels=tuple(order),
        colors=colors,
        curves=drawn,
        x=x,
        span=_span(df, [r for ids in arms.values() for r in ids], f.window, x),
        window=f.window,
        target=float(row.get("target", math.nan)) if f.measure == "to_target" else math.nan,
        start=start,
        dose=dose,
        fit=fit,
        scale=f.dose["scale"] if f.dose is not None else "",
        dose_key=str(f.dose["key"]).removeprefix("trainer.") if f.dose is not None else "",
    )


def _arm_labels(f: Finding) -> dict[str, str]:
    """``{arm name: legend label}``: ``baseline: epsilon_high=0.2``; a from-start finding's runs;
    a dose level's ``epsilon_high=0.4``."""

    def text(selector: Mapping[str, Any]) -> str:
        return ", ".join(f"{str(k).removeprefix('trainer.')}={_value(v)}" for k, v in selector.items())

    if f.dose is not None:
        key = str(f.dose["key"]).removeprefix("trainer.")
        return {name: f"{key}={name}" for name in f.arm_names}
    if f.measure == "from_start":
        return {"variant": f"runs: {text(f.variant)}"}
    return {"baseline": f"baseline: {text(f.baseline)}", "variant": f"variant: {text(f.variant)}"}


def _value(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return {True: "true", False: "false", None: "null"}[v]
    return str(v)


def _colors(order: Sequence[str], f: Finding) -> dict[str, str]:
    """Two arms black and blue; a dose's levels along viridis, low to high (its yellow end left
    out: hard to see as a thin line on white)."""
    if f.dose is None:
        return dict(zip(order, (_BASELINE, _VARIANT) if len(order) == 2 else (_VARIANT,), strict=False))
    cmap = mpl.colormaps["viridis"]
    n = len(order)
    return {lab: mpl.colors.to_hex(cmap(0.85 * k / max(n - 1, 1))) for k, lab in enumerate(order)}


def _frame(
    df: pd.DataFrame,
    metric: str,
    arms: Mapping[str, Sequence[str]],
    starts: Mapping[str, Mapping[str, float]],
    x: str,
) -> tuple[pd.DataFrame, bool]:
    """The arms' runs' rows (``run_id``, ``step``, the metric, the x, :data:`ARM`) and whether an
    eval metric's start rows (step 0, from ``eval_start.json``) were added."""
    cols = [
        c
        for c in dict.fromkeys([layout.RUN_ID, layout.STEP, metric, layout.TOKENS_GENERATED_TOTAL])
        if c in df
    ]
    ids = {str(r): lab for lab, rs in arms.items() for r in rs}
    part = (
        df.loc[df[layout.RUN_ID].astype(str).isin(ids), cols].copy()
        if len(df)
        else pd.DataFrame(columns=cols)
    )
    part[layout.RUN_ID] = part[layout.RUN_ID].astype(str)
    if metric not in part:
        part[metric] = np.nan
    part[ARM] = part[layout.RUN_ID].map(ids)
    extra = []
    if layout.is_eval_metric(metric):
        for rid, lab in ids.items():
            value = (starts.get(rid) or {}).get(metric)
            if value is not None and math.isfinite(value) and rid in set(part[layout.RUN_ID]):
                extra.append({layout.RUN_ID: rid, layout.STEP: 0, metric: float(value), ARM: lab})
    if extra:
        head = pd.DataFrame(extra)
        if x == "tokens":
            head[layout.TOKENS_GENERATED_TOTAL] = 0.0
        part = pd.concat([head, part], ignore_index=True)
    return part.reset_index(drop=True), bool(extra)


def _span(
    df: pd.DataFrame, run_ids: Sequence[str], window: tuple[float, float] | None, x: str
) -> tuple[float, float] | None:
    """The x range the window covers: per run, its logged rows at positions ``a <= i/n < b`` (as
    :func:`analysis.findings.window_stats` counts them), from the first to the last; over the runs,
    the smallest first and the largest last. None without a window or runs."""
    if window is None or not len(df):
        return None
    col = layout.STEP if x == "step" else layout.TOKENS_GENERATED_TOTAL
    if col not in df:
        return None
    a, b = window
    lo, hi = math.inf, -math.inf
    part = df.loc[
        df[layout.RUN_ID].astype(str).isin(set(run_ids)),
        list(dict.fromkeys([layout.RUN_ID, layout.STEP, col])),
    ]
    for _, run in part.groupby(layout.RUN_ID, observed=True):
        xs = run.sort_values(layout.STEP)[col].to_numpy(dtype=np.float64)
        n = xs.size
        inside = xs[[a <= i / n < b for i in range(n)]]
        inside = inside[np.isfinite(inside)]
        if inside.size:
            lo, hi = min(lo, float(inside[0])), max(hi, float(inside[-1]))
    return (lo, hi) if lo <= hi else None


def _dose_points(
    df: pd.DataFrame, f: Finding, arms: Mapping[str, Sequence[str]]
) -> tuple[pd.DataFrame, tuple[float, float] | None]:
    """A dose-response finding's runs as points (``x`` the value, ``y`` the window mean,
    ``label``) and the fitted line's ``(intercept, slope)`` on the scale's x."""
    from analysis.findings import window_values

    values = (
        window_values(df, f.metric, f.window, off_policy_only=f.off_policy_only) if len(df) else pd.Series()
    )
    rows = []
    for lab, v in zip(_arm_labels(f).values(), f.dose["values"], strict=True):
        rows += [{"x": float(v), "y": float(values[r]), "label": lab} for r in arms[lab] if r in values.index]
    points = pd.DataFrame(rows, columns=["x", "y", "label"])
    points = points[np.isfinite(points["y"].to_numpy(dtype=np.float64))]
    fit = slope_fit(x_of(points["x"], f.dose["scale"]), points["y"]) if len(points) else None
    line = None if fit is None or not math.isfinite(fit.slope) else (fit.intercept, fit.slope)
    return points.reset_index(drop=True), line


def _effect_text(row: Mapping[str, Any]) -> str:
    """The effect with its interval, as the tables show it ("" without one, and for an arm of fewer
    than 2 runs: a difference with no spread behind it is no result)."""
    v, lo, hi = (row.get(k, math.nan) for k in ("effect", "effect_lo", "effect_hi"))
    if not np.isfinite(v) or str(row.get("verdict", "")).startswith("not enough runs"):
        return ""
    return fmt(v) if not np.isfinite(lo) else f"{fmt(v)} [{fmt(lo)}, {fmt(hi)}]"


# --- drawing ---------------------------------------------------------------------------------------


def finding_figure(ff: FindingFigure) -> tuple[Figure, np.ndarray]:
    """One finding's figure: its arms' curves (:func:`plot_finding_curves`) and, for a dose-response
    finding, a second panel of its runs' window means against the value with the fitted line
    (:func:`plot_dose_fit`). The title says the finding, its verdict and its effect, then the claim,
    broken to the figure's width; the legend sits below the panels.

    Returns:
        ``(fig, axes)``, axes of shape ``(1, panels)``.
    """
    panels = 2 if ff.dose is not None else 1
    with style.context():
        fig = style.figure(panels, 1, width=style.FULL_WIDTH_IN if panels == 2 else 4.6, panel_height=2.4)
        axes = fig.subplots(1, panels, squeeze=False)
        handles = plot_finding_curves(axes[0, 0], ff)
        if panels == 2:
            plot_dose_fit(axes[0, 1], ff)
        effect = f"; effect {ff.effect}" if ff.effect else ""
        if ff.effect and ff.dose is not None:
            effect = f"; slope\u00a0{ff.effect} per unit of {'ln ' if ff.scale == 'log' else ''}{ff.dose_key}"
        # the effect and its interval are not broken across lines
        effect = effect.replace("effect ", "effect\u00a0").replace(" [", "\u00a0[").replace(", ", ",\u00a0")
        title = fig.suptitle(f"{ff.id}: {ff.verdict}{effect}\n{ff.claim}", fontsize=8)
        width_pt = fig.get_size_inches()[0] * 72.0 * 0.96
        title.set_text(fit_text(fig, title.get_text(), width_pt, title.get_fontproperties()))
        fit_legend(fig, handles)
    return fig, axes


#: Runs a curve needs at every point for its 95% t band to be drawn (with 2, the band is the mean
#: plus or minus 12.7 standard errors: wider than anything it could tell apart).
MIN_BAND_RUNS = 3


def plot_finding_curves(ax: Axes, ff: FindingFigure) -> list[Any]:
    """The finding's metric on ``ax``: the window shaded, each arm's mean over its runs with its
    band (left out, and the title says so, where a curve has fewer than :data:`MIN_BAND_RUNS`
    runs at some point), its first point (the runs' start at step 0) marked, a to-target finding's level dashed.

    Returns:
        The legend handles: the arms drawn, then the window, the start and the target.
    """
    handles: list[Any] = []
    if ff.span is not None:
        lo, hi = ff.span
        ax.axvspan(lo, hi, color=_WINDOW, linewidth=0, zorder=0)
    c = ff.curves
    banded = c is not None and not c.mean.empty and bool((c.mean["n"] >= MIN_BAND_RUNS).all())
    if c is None or c.mean.empty:
        no_data(ax, f"no run of the finding logs {ff.metric}")
    else:
        for lab in ff.labels:
            part = thin(c.mean[(c.mean[ARM].astype(str) == lab).to_numpy()])
            if not len(part) or not part["mean"].notna().any():
                continue
            color = ff.colors[lab]
            xs, lo, hi = (part[k].to_numpy(dtype=np.float64) for k in ("x", "lo", "hi"))
            ax.plot(xs, part["mean"].to_numpy(), color=color, linewidth=1.2, zorder=3)
            ok = np.isfinite(lo) & np.isfinite(hi)
            if banded:
                ax.fill_between(xs, lo, hi, where=ok, color=color, alpha=0.18, linewidth=0, zorder=2)
            if ff.start and xs.size and xs[0] == 0:
                ax.plot(
                    xs[:1], part["mean"].to_numpy()[:1], marker="o", markersize=3.5, color=color, zorder=4
                )
            handles.append(Line2D([], [], color=color, label=lab))
    if math.isfinite(ff.target):
        ax.axhline(ff.target, color="0.35", linestyle="--", linewidth=0.9, zorder=1)
        handles.append(Line2D([], [], color="0.35", linestyle="--", label=f"target {fmt(ff.target)}"))
    if ff.span is not None and ff.window is not None:
        a, b = ff.window
        handles.append(Patch(color=_WINDOW, label=f"window ({100 * a:g}-{100 * b:g}% of steps)"))
    if ff.start:
        handles.append(
            Line2D(
                [],
                [],
                color="0.3",
                marker="o",
                markersize=3.5,
                linestyle="none",
                label="start (eval_start.json)",
            )
        )
    ax.set_xlabel(X_LABELS.get(ff.x, ff.x) if ff.x in X_LABELS else ff.x)
    ax.set_ylabel(metric_label(ff.metric))
    if banded or c is None or c.mean.empty:
        ax.set_title("mean over seeds, 95% t band", fontsize=7)
    else:  # 2 runs: a 95% t band is 12.7 standard deviations wide and says nothing of the mean
        least = int(c.mean["n"].min())
        ax.set_title(f"mean over seeds; no band where a curve has {least} run(s)", fontsize=7)
    return handles


def plot_dose_fit(ax: Axes, ff: FindingFigure) -> None:
    """A dose-response finding's runs on ``ax``: each run's window mean against the setting's
    value (a log axis for ``scale: log``), in its level's colour, and the least-squares line."""
    pts = ff.dose
    if pts is None or pts.empty:
        no_data(ax, "no run has a value in the window")
        return
    for lab in ff.labels:
        p = pts[pts["label"] == lab]
        ax.plot(
            p["x"], p["y"], marker="o", markersize=3.5, linestyle="none", color=ff.colors[lab], alpha=0.85
        )
    if ff.fit is not None:
        xs = (
            np.geomspace(pts["x"].min(), pts["x"].max(), 50)
            if ff.scale == "log"
            else np.linspace(pts["x"].min(), pts["x"].max(), 50)
        )
        a, b = ff.fit
        ax.plot(xs, a + b * x_of(xs, ff.scale), color="0.3", linewidth=1.0)
    if ff.scale == "log":
        ax.set_xscale("log")
    values = sorted(pts["x"].unique())
    ax.set_xticks(values, [fmt(v) for v in values])
    ax.xaxis.set_minor_locator(mpl.ticker.NullLocator())
    ax.set_xlabel(ff.dose_key + (" (log scale)" if ff.scale == "log" else ""))
    ax.set_ylabel(metric_label(ff.metric))
    ax.set_title("window mean per run; least-squares line", fontsize=7)
