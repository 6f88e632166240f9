"""The learning curves (``<metric>_<x>.png``, one figure per curve metric): each run smoothed,
then the mean over seeds with its band per variant and panel; diverged runs marked where they
diverged, the reference model's syncs as dotted verticals."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis import aggregate as agg_mod
from analysis import curves, labels, states
from analysis.aggregate import Curves, x_values
from analysis.offpolicy import is_ratio_metric
from analysis.panels import Facets
from analysis.report.data import PANEL, PANEL_ROW, VARIANT, Counted
from analysis.report.page import Page, Section, safe_name
from analysis.settings.report import ReportSettings
from harness import layout


@dataclass(frozen=True)
class CurveNumbers:
    """The curve figures' numbers.

    Attributes:
        sets: ``{metric: Curves}`` of each curve figure, in order.
        marks: ``{metric: Marks}``: its diverged runs and the reference model's syncs.
        notes: the curve metrics no run logged, the runs without the x axis's values.
    """

    sets: Mapping[str, Curves]
    marks: Mapping[str, curves.Marks]
    notes: tuple[str, ...] = ()


def compute(c: Counted) -> CurveNumbers:
    """Each curve metric's curves over the counted runs' rows, grouped by variant and panel (an
    importance-ratio metric over off-policy steps; each run kept with ``seeds``), its diverged
    runs' marks and the syncs."""
    s, work = c.settings, c.work
    asked = list(s.curves) or [s.metric]
    notes = [f"Note: no run logged `{m}`; its curve is not drawn." for m in asked if m not in work.columns]
    by = c.by
    index = c.frame_index(by)
    sets = {
        m: agg_mod.curves(
            work,
            m,
            x=s.x,
            by=by,
            ci=s.ci,
            smoothing=s.smoothing,
            rows=c.off if is_ratio_metric(m) else None,
            keep_runs=s.seeds,
            index=index,
        )
        for m in asked
        if m in work.columns
    }
    diverged = c.runs[c.runs["state"] == states.DIVERGED]
    syncs = _sync_marks(c.included, c.facets, int(work[layout.STEP].max())) if s.x == "step" else {}
    marks = {}
    for m in sets:
        diverged_marks, own = _divergence_marks(c.df, c.runs, diverged, m, c)
        marks[m] = curves.Marks(diverged=tuple(diverged_marks), runs=own, syncs=syncs)
    return CurveNumbers(sets, marks, tuple(notes + _x_missing(c)))


def _x_missing(c: Counted) -> list[str]:
    """The note on counted runs without the x axis's values (tokens or time), if any."""
    s = c.settings
    if s.x == "step":
        return []
    work = c.work
    x_missing = c.runs.index[c.runs["included"]].difference(
        pd.Index(work.loc[~np.isnan(x_values(work, s.x)), layout.RUN_ID].astype(str).unique())
    )
    if not len(x_missing):
        return []
    return [
        f"Note: {len(x_missing)} run(s) recorded no {agg_mod.X_LABELS[s.x]} and are not in the curves: "
        + ", ".join(f"`{r}`" for r in x_missing[:10])
        + (" ..." if len(x_missing) > 10 else "")
        + "."
    ]


def _divergence_marks(
    df: pd.DataFrame, runs: pd.DataFrame, diverged: pd.DataFrame, metric: str, c: Counted
) -> tuple[list[curves.Mark], pd.DataFrame | None]:
    """A mark per diverged run at the step it diverged, and its own curve up to there."""
    if diverged.empty or metric not in df.columns:
        return [], None
    s, f = c.settings, c.facets
    ids = set(diverged.index)
    part = df[df[layout.RUN_ID].astype(object).isin(ids).to_numpy()].copy()
    for name in (VARIANT, PANEL, PANEL_ROW):
        if name in runs.columns:
            part[name] = part[layout.RUN_ID].astype(object).map(runs[name].astype(str))
    curve = agg_mod.curves(part, metric, x=s.x, by=f.by, smoothing=s.smoothing, keep_runs=True)
    xs = x_values(part, s.x)
    marks = []
    for rid, r in diverged.iterrows():
        own = curve.runs[curve.runs[layout.RUN_ID] == str(rid)] if curve.runs is not None else pd.DataFrame()
        step = int(r["marker_step"]) if not pd.isna(r["marker_step"]) else None
        at = (part[layout.RUN_ID].astype(object) == rid).to_numpy() & (part[layout.STEP] == step).to_numpy()
        x = float(xs[at][0]) if at.any() else (float(own["x"].max()) if len(own) else float("nan"))
        y = float(own["y"].iloc[-1]) if len(own) else float("nan")
        marks.append(
            curves.Mark(
                hue=str(r[VARIANT]) if f.hue else None,
                col=str(r[PANEL]) if f.col else None,
                row=str(r[PANEL_ROW]) if f.row else None,
                x=x,
                y=y,
            )
        )
    return marks, curve.runs


def _sync_marks(inc: pd.DataFrame, facets: Facets, last: int) -> dict[tuple[Any, Any], list[float]]:
    """Per facet: the steps at which TRL syncs the reference model, when every run there syncs alike.

    TRL's ``SyncRefModelCallback`` copies (``ref_model_mixup_alpha`` = 1) or mixes the policy into the
    reference after every ``ref_model_sync_steps``-th optimizer step.
    """
    sync, period = "trainer.sync_ref_model", "trainer.ref_model_sync_steps"
    if sync not in inc.columns or period not in inc.columns:
        return {}
    out: dict[tuple[Any, Any], list[float]] = {}
    keys = [c for c in (PANEL, PANEL_ROW) if c in inc.columns]
    groups = inc.groupby(keys, observed=True) if keys else [((), inc)]
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        on = part[sync].map(lambda v: bool(v) if not labels.is_missing(v) else False)
        periods = set(part.loc[on, period].dropna().astype(int))
        if not on.all() or len(periods) != 1:
            continue
        n = periods.pop()
        if n <= 0:
            continue
        cv = str(key[0]) if facets.col else None
        rv = str(key[-1]) if facets.row else None
        out[(cv, rv)] = [float(k) for k in range(n, last + 1, n)]
    return out


def _caption_extra(page: Page, metric: str, marks: curves.Marks) -> str:
    """What a curve figure's caption adds to its curves' own: the marks, faint runs, off-policy
    steps, small multiples."""
    s, data, f = page.settings, page.data, page.facets
    extra = ""
    if marks.diverged:
        extra += " Dashed with × : a run that diverged, up to the step it diverged " + (
            "(also in the mean, `--include-unfinished`)." if s.include_unfinished else "(not in the mean)."
        )
    if s.include_unfinished and (data.runs.loc[data.runs["included"], "state"] != states.DONE).any():
        extra += " Runs that did not finish are in the mean up to their last logged step."
    if marks.syncs:
        extra += " Dotted verticals: reference-model syncs."
    if s.seeds:
        extra += " Faint lines: each run."
    if is_ratio_metric(metric):
        extra += " Off-policy steps only."
    n = len(f.hue_order or ())
    if f.hue and not f.col and not f.row and n > curves.MAX_LINES:
        extra += (
            f" {n} variants: one panel each, in its colour with its band"
            + (f", {f.baseline} (the baseline) dashed black" if f.baseline else "")
            + ", the others light grey behind."
        )
    return extra


def render(numbers: CurveNumbers, page: Page) -> list[str]:
    """The learning-curve figures, one section each."""
    s = page.settings
    lines: list[str] = []
    for m, c in numbers.sets.items():
        marks = numbers.marks[m]
        fig, _ = curves.curve_figure(c, page.facets, marks=marks, seeds=s.seeds)
        stem = f"{safe_name(m)}_{s.x}"
        lines += page.figure(
            fig,
            stem,
            alt=m,
            title=f"{m} vs {agg_mod.X_LABELS[s.x]}",
            caption=f"Compares the {m} learning curves of the variants. {c.caption}{_caption_extra(page, m, marks)}",
        )
        lines.extend([f"PDF: [{stem}.pdf]({stem}.pdf)", ""])
    return lines


def columns(settings: ReportSettings) -> Sequence[str]:
    """The curve metrics, and the reference-sync settings (the syncs marked)."""
    return [*settings.curves, "trainer.sync_ref_model", "trainer.ref_model_sync_steps"]


SECTION = Section("curves", compute, render, columns=columns, notes=lambda n: n.notes)
