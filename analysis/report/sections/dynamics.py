"""The training dynamics (``dynamics_<x>.png``): one panel per metric (eval accuracy, entropy,
KL, clipped fractions, completion length, ESS/N, a loss plugin's own metrics), importance-ratio
metrics over off-policy steps only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis import aggregate as agg_mod
from analysis import dynamics, labels
from analysis.aggregate import Curves
from analysis.offpolicy import is_ratio_metric
from analysis.report.data import VARIANT, Counted
from analysis.report.page import Page, Section
from analysis.report.sections.wseq import off_policy_text
from analysis.settings.report import DYNAMICS_METRICS, RECENT_DYNAMICS, ReportSettings
from harness.trl_boundary import KNOWN_LOSS_TYPES

#: TRL's own loss types, whose ``<loss type>/...`` metrics (``vespo/phi_seq_mean``) are TRL's, not a
#: plugin's: the record of :data:`harness.trl_boundary.KNOWN_LOSS_TYPES` (plain data; the analysis
#: never asks TRL).
TRL_LOSS_TYPES = frozenset(KNOWN_LOSS_TYPES)


@dataclass(frozen=True)
class DynamicsNumbers:
    """The dynamics figure's numbers.

    Attributes:
        curves: ``{metric: Curves}`` per variant and panel column, in panel order.
        missing: metrics asked for (``report: metrics:``) that no run logged, so not drawn.
        absent: ``{metric: [variant, ...]}``: the variants that never log a drawn metric.
        off_policy_how: how off-policy steps were told (:func:`analysis.offpolicy.off_policy_rows`).
    """

    curves: Mapping[str, Curves]
    missing: tuple[str, ...] = ()
    absent: Mapping[str, list[str]] = field(default_factory=dict)
    off_policy_how: str = ""


def plugin_metrics(work: pd.DataFrame) -> list[str]:
    """The loss plugins' metrics the runs logged, for the dynamics figure without a
    ``report: metrics:`` entry: each column ``<name>/<what>`` where ``<name>`` is the
    ``trainer.loss_type`` of some run, a plugin (not one of :data:`TRL_LOSS_TYPES`), and the column
    has a value in that plugin's runs. In column order."""
    if "trainer.loss_type" not in work.columns:
        return []
    loss_types = work["trainer.loss_type"].astype(object)
    names = {str(v) for v in loss_types.dropna().unique()} - TRL_LOSS_TYPES
    out = []
    for column in work.columns:
        head = str(column).partition("/")[0]
        if head in names and "/" in str(column) and work.loc[loss_types == head, column].notna().any():
            out.append(str(column))
    return out


def merge_plugin_metrics(listed: Sequence[str], found: Sequence[str]) -> list[str]:
    """The dynamics panels: ``listed`` (``report: metrics:``, in its order) with each plugin metric of
    ``found`` (:func:`plugin_metrics`) not listed placed beside its plugin's listed ones, after the
    nearest that precedes it alphabetically (else before the first of them), or at the end (in
    ``found``'s order) when none of its plugin's metrics is listed: ``[gmpo/clip_ratio/high, gmpo/ratio_mean]`` with
    ``gmpo/clip_ratio/low`` found becomes ``[gmpo/clip_ratio/high, gmpo/clip_ratio/low, gmpo/ratio_mean]``."""
    out = list(listed)
    rank = {m: i for i, m in enumerate(sorted(found))}
    for m in found:
        if m in out:
            continue
        prefix = m.partition("/")[0] + "/"
        same = [i for i, x in enumerate(out) if x.startswith(prefix)]
        if not same:
            out.append(m)
            continue
        before = [i for i in same if rank.get(out[i], len(found)) < rank[m]]
        out.insert(max(before) + 1 if before else min(same), m)
    return out


def compute(c: Counted) -> DynamicsNumbers:
    """The curves of each dynamics metric a run logged, grouped by variant and panel column."""
    s, work = c.settings, c.work
    drawn = [m for m in s.metrics if m in work.columns and work[m].notna().any()]
    recent = RECENT_DYNAMICS if tuple(s.metrics) == DYNAMICS_METRICS else ()
    missing = [m for m in s.metrics if m not in drawn and m not in recent]
    drawn = merge_plugin_metrics(drawn, plugin_metrics(work))
    by = [b for b in (c.facets.hue, c.facets.col) if b]
    index = c.frame_index(by)
    out = {
        m: agg_mod.curves(
            work,
            m,
            x=s.x,
            by=by,
            ci=s.ci,
            smoothing=s.smoothing,
            rows=c.off if is_ratio_metric(m) else None,
            index=index,
        )
        for m in drawn
    }
    absent = {}
    if c.facets.hue:
        absent = {m: v for m in drawn if (v := _not_logged(work, m, c.facets.hue_order or ()))}
    return DynamicsNumbers(out, tuple(missing), absent, c.off_policy_how)


def _not_logged(work: pd.DataFrame, metric: str, hue_order: Sequence[str]) -> list[str]:
    """The variants that never log ``metric`` (VESPO has no clip fraction), to say so."""
    codes = work[VARIANT].cat.codes.to_numpy()
    present = ~np.isnan(work[metric].to_numpy(dtype=np.float64))
    counts = np.bincount(codes[present], minlength=len(work[VARIANT].cat.categories))
    logged = {str(work[VARIANT].cat.categories[k]) for k in np.flatnonzero(counts)}
    return [v for v in hue_order if v not in logged]


def render(numbers: DynamicsNumbers, page: Page) -> list[str]:
    """The training-dynamics figure."""
    if not numbers.curves:
        return []
    s = page.settings
    fig, _ = dynamics.dynamics_figure(numbers.curves, page.facets, x=s.x)
    ratio = [m for m in numbers.curves if is_ratio_metric(m)]
    return page.figure(
        fig,
        f"dynamics_{s.x}",
        alt="dynamics",
        title="Training dynamics",
        caption="Compares what the losses do to the policy: "
        + ", ".join(labels.metric_label(m) for m in numbers.curves)
        + (
            f". Not logged by any of these runs, so not drawn: {', '.join(numbers.missing)}"
            if numbers.missing
            else ""
        )
        + "".join(
            f". {labels.metric_label(m)}: not logged by {', '.join(v)}" for m, v in numbers.absent.items()
        )
        + ". Same line, band and smoothing as the curves above"
        + (
            f"; {', '.join(ratio)} over off-policy steps only ({off_policy_text(numbers.off_policy_how)})"
            if ratio
            else ""
        )
        + ".",
    )


def columns(settings: ReportSettings) -> Sequence[str]:
    """The dynamics panels' metrics."""
    return list(settings.metrics)


SECTION = Section("dynamics", compute, render, columns=columns)
