"""The final-score figure (``final.png``): each variant's runs' final scores, one dot per run and
the mean with its 95% stratified-bootstrap interval, small multiples over the panels. Its numbers
(the final-performance table, each run's score, the difference the seeds can resolve) are the
tables' and the aggregate figures' too (:func:`final_numbers`, computed once)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import pandas as pd

from analysis import finals, states
from analysis import scores as scores_mod
from analysis.grouping import joined_keys
from analysis.panels import Facets
from analysis.report.data import Counted
from analysis.report.page import Page, Section
from analysis.report.runs import count_range
from analysis.tables import Table

T = TypeVar("T", bound=Table)


@dataclass(frozen=True)
class FinalNumbers:
    """The report's final scores.

    Attributes:
        table: :func:`analysis.scores.final_performance_table` per variant and panel, with display
            names (and unfinished runs counted per row with ``include_unfinished``).
        scores: one row per counted run with a final score (index ``run_id``): the label columns
            (as text), ``score`` and ``state``.
        resolvable: :func:`analysis.scores.resolvable_differences` of ``scores`` per panel.
    """

    table: scores_mod.FinalTable
    scores: pd.DataFrame
    resolvable: scores_mod.Resolvable


def final_numbers(c: Counted) -> FinalNumbers:
    """The final scores of the counted runs, computed once per report (:meth:`Counted.shared`)."""
    return c.shared("final scores", lambda: _final_numbers(c))


def _final_numbers(c: Counted) -> FinalNumbers:
    by, f = c.by, c.facets
    per_run = scores_mod.final_scores(c.work, c.settings.metric)
    table = scores_mod.final_performance_table(
        c.work, c.settings.metric, by=by, baseline=f.baseline, scores=per_run
    ).with_headers(c.display_names())
    if c.settings.include_unfinished:
        table = mark_unfinished(table, c.runs, by)
    sc = c.included[list(by)].copy()
    for b in by:
        sc[b] = sc[b].astype(str)
    sc["score"] = per_run.set_axis(per_run.index.astype(object)).reindex(sc.index)
    sc["state"] = c.runs.loc[sc.index, "state"].astype(str)
    sc = sc.dropna(subset=["score"])
    resolvable = scores_mod.resolvable_differences(sc, f.hue, [b for b in (f.col, f.row) if b])
    return FinalNumbers(table, sc, resolvable)


def mark_unfinished(table: T, runs: pd.DataFrame, by: list[str]) -> T:
    """``table`` with a column ``not_finished`` counting the included runs that did not finish,
    per row (rows matched on ``by``); as given when it is empty or without ``by``."""
    if table.frame.empty or not by:
        return table
    inc = runs[runs["included"]]
    unfinished = (inc["state"] != states.DONE).groupby(joined_keys(inc, by)).sum()
    tkey = pd.Series(joined_keys(table.frame, by))
    counts = tkey.map(unfinished).fillna(0).astype(int).to_numpy()
    return table.with_frame(table.frame.assign(not_finished=counts)).with_headers(
        {"not_finished": "of which not finished"}
    )


def scores_note(final: FinalNumbers, facets: Facets, *, marked: bool = False) -> str:
    """How many runs each variant's final score pools, and which of them did not finish
    (``marked``: and how the final-score figure draws them)."""
    scores = final.scores
    by = facets.by
    counts = scores.groupby(by, observed=True).size() if by else pd.Series([len(scores)])
    text = f"{count_range(counts)} run(s) per variant."
    other = scores["state"] != states.DONE
    if other.any():
        diverged = int((scores["state"] == states.DIVERGED).sum())
        text += (
            f" Includes {int(other.sum())} run(s) that did not finish (`--include-unfinished`), scored on "
            "their last logged steps"
            + (
                f" and drawn as × (diverged, {diverged}) or a hollow triangle (stopped or running)"
                if marked
                else ""
            )
            + "."
        )
    return text


def render(final: FinalNumbers, page: Page) -> list[str]:
    """The final-score figure."""
    metric = page.settings.metric
    if final.scores.empty:
        return []
    fig, _ = finals.final_figure(final.scores, final.table.frame, page.facets, metric=metric)
    return page.figure(
        fig,
        "final",
        alt="final",
        title=f"Final {metric} per variant",
        caption=f"Compares where the variants end: one dot per run (its final score: {scores_mod.score_rule(metric)}), "
        "the bar is the mean's 95% percentile-bootstrap interval over runs, as in the Final performance "
        "table (a hollow circle: one run, no interval). " + scores_note(final, page.facets, marked=True),
    )


SECTION = Section("final", final_numbers, render)
