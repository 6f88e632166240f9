"""Every number of a report (:func:`compute_report`): the runs counted and laid out
(:func:`analysis.report.counting.count_runs`), then each section's numbers
(:data:`analysis.report.sections.SECTIONS`), computed at once on a thread pool; nothing is drawn
here."""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import analysis.report.sections as sections_mod
from analysis import findings as findings_mod
from analysis.report.counting import count_runs
from analysis.report.data import Counted, ReportData, ReportInputs
from analysis.report.page import Section
from analysis.settings.report import ReportSettings


def compute_report(
    inputs: ReportInputs,
    settings: ReportSettings,
    *,
    title: str = "grid",
    strict_keys: Collection[str] = (),
    given: Collection[str] = (),
    findings: Sequence[findings_mod.Finding] = (),
    logged_metrics: Collection[str] = (),
) -> ReportData:
    """Every number of the report: the runs counted and laid out, and each section's numbers
    (curves, bands, w_seq bands, tables, final scores, profiles, the verdict on each finding, ...).

    Args:
        inputs: :func:`analysis.report.inputs.load_report_inputs`' record (every requested run,
            finished or not, and the runs' states).
        settings: the layout.
        title: the grid's name.
        findings: the grid's findings (:func:`analysis.findings.read_findings`); their verdicts
            count finished runs only, also with ``include_unfinished``.
        logged_metrics: metric names the runs log (to suggest one for a finding's metric that no
            run logs).
        given: settings typed on the command line (``"baseline"``, ``"wseq_split"``, ...): what
            they name must be in the results (a ``report:`` section's may not be: a note says so).
        strict_keys: layout keys that must name a column (typed on the command line); any other key
            that no run sets is all-missing (every run uses TRL's default).

    Returns:
        A :class:`ReportData`: with no counted run, ``empty`` and the sections computed without
        runs (:attr:`analysis.report.page.Section.without_runs`) alone.

    Raises:
        ReportError: ``x``, a layout key or the metric does not fit the results, or a section's
            numbers do not (a ``wseq_split`` typed on the command line that no run recorded).
    """
    counted = count_runs(
        inputs, settings, strict_keys=strict_keys, given=given, findings=findings, logged=logged_metrics
    )
    shown = [s for s in sections_mod.SECTIONS if s.without_runs or not counted.empty]
    numbers = compute_sections(counted, shown)
    notes = [line for s in shown if numbers[s.name] is not None for line in s.notes(numbers[s.name])]
    return ReportData(
        title=title,
        settings=counted.settings,
        facets=counted.facets,
        lines=(*counted.lines, *notes),
        left_out=counted.left_out,
        runs=counted.runs,
        variants=counted.variants,
        sections=numbers,
        empty=counted.empty,
    )


def compute_sections(counted: Counted, sections: Sequence[Section] | None = None) -> dict[str, Any]:
    """Each section's numbers (:attr:`analysis.report.page.Section.compute`), ``{name: numbers}`` in
    ``sections``' order (default :data:`analysis.report.sections.SECTIONS`), computed on a thread pool: they are independent of each other (what they
    share is made once, :meth:`analysis.report.data.Counted.shared`), and numpy and pandas release
    the GIL in their loops.

    Raises:
        Whatever a section's computation raises (the first in ``sections``' order).
    """
    from threadpoolctl import threadpool_limits

    # The products in the bootstrap are small: BLAS threads would only spin against the pool's.
    with (
        threadpool_limits(limits=1, user_api="blas"),
        ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool,
    ):
        jobs = {s.name: pool.submit(s.compute, counted) for s in sections or sections_mod.SECTIONS}
        return {name: job.result() for name, job in jobs.items()}
