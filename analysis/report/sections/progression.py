"""The progression table (``progression.md/.csv/.tex``, the ``report:`` section's
``progression``), in the shape of DAPO's Table 1: rows of runs, each adding one technique to the
row above, each row's finished runs scored as the final-performance table scores them
(:func:`analysis.scores.final_scores`) and compared with the row above
(:func:`analysis.progression.progression_table`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from analysis import progression as progression_mod
from analysis.report.data import Counted
from analysis.report.page import Page, Section, heading
from analysis.report.runs import findings_runs
from analysis.scores import final_scores
from analysis.settings.report import ReportSettings
from harness import layout


@dataclass(frozen=True)
class ProgressionNumbers:
    """The progression table and what is said under it.

    Attributes:
        table: :func:`analysis.progression.progression_table`; None when ``grid.json`` does not
            record the rows' runs.
        lines: the lines under the table (runs left out, notes, what dynamic sampling cost its
            rows), or why it is not made.
    """

    table: progression_mod.ProgressionTable | None
    lines: tuple[str, ...] = ()


def compute(c: Counted) -> ProgressionNumbers | None:
    """The progression's table; None without a progression.

    A row counts its finished runs only, as the findings do, also with ``--include-unfinished``:
    each row is compared with the row above, and a run stopped early is scored on other steps.
    """
    progression = c.settings.progression
    if progression is None:
        return None
    if any(r.runs is None for r in progression.rows):
        note = (
            f"Note: {layout.GRID_FILE} does not record which runs each row of the report's progression selects, "
            "so its table is not made; record it with `grpo-harness run GRID.yaml` (done runs are skipped) or "
            "`grpo-harness submit`."
        )
        return ProgressionNumbers(None, (note,))
    df, metric = c.df, progression.metric
    finished, why = findings_runs(c.runs, c.without, df)
    ids = {r for row in progression.rows for r in row.runs or ()}
    part = df[df[layout.RUN_ID].astype(str).isin(ids).to_numpy()]
    scores = final_scores(part, metric) if metric in part.columns else pd.Series(dtype=float)
    rows = [(r.label, r.runs or ()) for r in progression.rows]
    table = progression_mod.progression_table(scores, rows, metric=metric, finished=finished, unfinished=why)
    counted = [(label, [r for r in ids_ if r in set(finished)]) for label, ids_ in rows]
    lines = list(table.left_out) + list(table.notes) + progression_mod.sampling_lines(part, counted)
    if metric not in df.columns or not df[metric].notna().any():
        lines.insert(0, f"No run logged `{metric}`, the progression's metric.")
    return ProgressionNumbers(table, tuple(lines))


def render(numbers: ProgressionNumbers, page: Page) -> list[str]:
    """The progression table, near the top of the report, with the runs it leaves out and its
    notes under it; or why it is not made."""
    table = numbers.table
    if table is None:
        return heading("Progression", " ".join(numbers.lines)) if numbers.lines else []
    notes = list(numbers.lines)
    markdown = page.table(table, "progression", notes=notes)
    return [
        *heading(f"Progression: final {page.settings.progression.metric}", table.caption),
        markdown,
        *(f"{line}\n" for line in notes),
        "Files: progression.md/.csv/.tex",
        "",
    ]


def columns(settings: ReportSettings) -> Sequence[str]:
    """The progression's metric, and what dynamic sampling recorded."""
    return [settings.progression.metric, layout.DS_PREFIX] if settings.progression else [layout.DS_PREFIX]


SECTION = Section("progression", compute, render, columns=columns)
