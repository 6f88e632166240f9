"""The findings (``findings.md/.csv/.tex`` near the top of ``index.md``, when the grid has a
``findings:`` section): the verdict on each paper's claim with Holm's adjustment, and under the
table a link to each finding's own figure (``finding_<id>.png/.pdf``). Shown also when no run is
counted: each finding says what it lacks."""

from __future__ import annotations

from dataclasses import dataclass

from analysis import finding_figures, style, tables
from analysis import findings as findings_mod
from analysis.finding_figures import FindingFigure
from analysis.report.data import Counted
from analysis.report.page import Page, Section, heading, safe_name
from analysis.report.runs import findings_runs
from analysis.tables import Table


@dataclass(frozen=True)
class FindingsNumbers:
    """The findings' verdicts and figures.

    Attributes:
        table: :func:`analysis.findings.findings_table` of the grid's findings (finished runs only,
            also with ``include_unfinished``).
        figures: one :class:`analysis.finding_figures.FindingFigure` per finding, in order (none
            when no run logged a step).
    """

    table: Table
    figures: tuple[FindingFigure, ...] = ()


def compute(c: Counted) -> FindingsNumbers | None:
    """The verdict on each finding and its figure's numbers; None without findings."""
    if not c.findings:
        return None
    findings = list(c.findings)
    if c.df.empty:  # no run logged a step: each finding says what it lacks
        return FindingsNumbers(findings_mod.findings_table(c.df, findings, [], unfinished=dict(c.without)))
    finished, why = findings_runs(c.runs, c.without)
    starts = c.inputs.start_metrics
    table = findings_mod.findings_table(
        c.df, findings, finished, unfinished=why, logged=list(c.logged), starts=starts
    )
    figures = tuple(
        finding_figures.finding_numbers(c.df, f, r, finished, starts, c.settings.smoothing)
        for f, r in zip(findings, table.frame.to_dict("records"), strict=True)
    )
    return FindingsNumbers(table, figures)


def render(numbers: FindingsNumbers, page: Page) -> list[str]:
    """The findings table, near the top of the report, then the links to each finding's figure."""
    if numbers.table.frame.empty:
        return []
    shown = findings_mod.display_table(numbers.table)
    notes = findings_mod.note_lines(numbers.table)
    tables.write_table(shown, page.out / "findings", raw=numbers.table.frame, notes=notes)
    lines = heading("Findings", shown.caption)
    lines.extend(
        [tables.to_markdown(shown), *(f"{line}\n" for line in notes), "Files: findings.md/.csv/.tex", ""]
    )
    return lines + figure_lines(numbers, page)


def figure_lines(numbers: FindingsNumbers, page: Page) -> list[str]:
    """Each finding's own figure (:func:`analysis.finding_figures.finding_figure`), saved as
    ``finding_<id>.png/.pdf``, and the lines that link them under the findings table."""
    if not numbers.figures:
        return []
    lines = [
        "One figure per finding: its arms (or its dose levels) alone on its metric, mean over seeds with its "
        "95% Student-t band and the report's smoothing, the window shaded, an eval metric starting from the runs' "
        "start (eval_start.json, step 0); a dose-response finding also shows each run's window mean against the "
        "value with the least-squares line. The verdict and the effect are in each title.",
        "",
    ]
    for ff in numbers.figures:
        fig, _ = finding_figures.finding_figure(ff)
        stem = "finding_" + safe_name(ff.id)
        style.save(fig, page.out / stem)
        lines.append(f"- {ff.id}: [{stem}.png]({stem}.png), [{stem}.pdf]({stem}.pdf) ({ff.verdict})")
    lines.append("")
    return lines


SECTION = Section("findings", compute, render, without_runs=True)
