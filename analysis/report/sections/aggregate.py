"""The aggregate estimates in the style of rliable (``aggregate.png``: mean, IQM and P(variant >
baseline) per variant with their stratified-bootstrap intervals) and the performance profiles with
their bootstrap bands (``performance_profile.png``), from the final scores
(:func:`analysis.report.sections.final.final_numbers`)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis import finals
from analysis.panels import Facets
from analysis.report.data import Counted
from analysis.report.page import Page, Section
from analysis.report.sections.final import FinalNumbers, final_numbers, scores_note


@dataclass(frozen=True)
class AggregateNumbers:
    """The aggregate figures' numbers.

    Attributes:
        final: the final scores (the aggregate estimates are the final-performance table's).
        profile: :func:`analysis.finals.profile_frame` of the final scores per variant and panel
            column, with its bootstrap band.
    """

    final: FinalNumbers
    profile: finals.Profile


def compute(c: Counted) -> AggregateNumbers:
    """The final scores and their performance profiles."""
    final = final_numbers(c)
    return AggregateNumbers(
        final, finals.profile_frame(final.scores, [b for b in (c.facets.hue, c.facets.col) if b])
    )


def in_panel_order(table: pd.DataFrame, facets: Facets) -> pd.DataFrame:
    """``table``'s rows panel by panel in the figures' order (row, then col labels), variants in
    their order within each."""
    rank = {
        facets.row: {v: k for k, v in enumerate(facets.row_values or ())},
        facets.col: {v: k for k, v in enumerate(facets.col_values or ())},
        facets.hue: {v: k for k, v in enumerate(facets.hue_order or ())},
    }
    order = [b for b in (facets.row, facets.col, facets.hue) if b]
    if not order:
        return table
    return table.sort_values(order, key=lambda c: c.astype(str).map(rank[c.name]), kind="stable")


def caption(final: FinalNumbers, facets: Facets, metric: str) -> str:
    """What the aggregate-estimates figure shows."""
    frame = final.table.frame
    return (
        f"Final {metric} per variant as interval estimates (Agarwal et al. 2021): mean and IQM over "
        "runs with 95% percentile-bootstrap intervals (the Final performance table's)"
        + (
            f", and the probability that a run of the variant beats a run of {facets.baseline} in the same panel "
            "(0.5 = no difference)"
            if facets.baseline
            else ""
        )
        + ". A hollow circle has no interval (one run)"
        + ("; the baseline's own row in the last panel is empty" if facets.baseline else "")
        + (
            "; with fewer than 4 runs per variant nothing is trimmed, so the IQM equals the mean"
            if len(frame) and frame["runs"].max() < 4
            else ""
        )
        + ". "
        + scores_note(final, facets)
    )


def render(numbers: AggregateNumbers, page: Page) -> list[str]:
    """The aggregate-estimates figure, then the performance profile."""
    final, facets, metric = numbers.final, page.facets, page.settings.metric
    if final.table.frame.empty:
        return []
    table = in_panel_order(final.table.frame, facets)
    names = [" · ".join(str(r[b]) for b in facets.by) or "all" for _, r in table.iterrows()]
    colors = [
        facets.colors.get(str(r[facets.hue]), "0.3") if facets.hue else "0.3" for _, r in table.iterrows()
    ]
    fig, _ = finals.aggregate_figure(
        table, metric=metric, names=names, colors=colors, baseline=facets.baseline
    )
    lines = page.figure(
        fig, "aggregate", alt="aggregate", title="Aggregate estimates", caption=caption(final, facets, metric)
    )
    fig, _ = finals.profile_figure(numbers.profile.frame, facets, metric=metric)
    return lines + page.figure(
        fig,
        "performance_profile",
        alt="performance profile",
        title="Performance profile",
        caption=f"Fraction of runs whose final {metric} exceeds each threshold τ (Agarwal et al. 2021): a curve "
        "further right is better across runs, not only on average. Shaded: each curve's 95% "
        f"stratified-bootstrap band ({numbers.profile.reps:,} resamples of the variant's runs, "
        "seed 0, the percentile interval at each τ; as rliable's create_performance_profile); none for a "
        "variant with one run. With few runs per variant the steps are coarse and the bands wide. "
        + scores_note(final, facets),
    )


SECTION = Section("aggregate", compute, render)
