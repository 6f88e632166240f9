"""``grpo-harness report``: a grid's figures and tables, written to ``results/<grid>/report/``.

Three steps, so the numbers can be checked (and timed) apart from the drawing:

1. :func:`load_report_inputs`: the runs' metrics (:func:`analysis.load.load`) and end states
   (:func:`analysis.states.read_states`);
2. :func:`compute_report`: every figure's and table's numbers (pure: frames in, a
   :class:`ReportData` out);
3. :func:`render_report`: figures (PNG + PDF), tables (markdown, CSV, LaTeX) and ``index.md``.

What the report stands behind: tables and figures count finished runs only (``DONE``); every
other run is listed with its state and step (diverged at step s in which metric, failed,
stopped or running at step s of ``max_steps``), and ``include_unfinished`` adds them, marked. A run
whose ``config.json`` is damaged is named and left out. A run that never had a learning signal
is flagged and never counts as improved. Curves are smoothed by a stated rule; importance-ratio
metrics are drawn over off-policy steps only. A grid with a ``findings:`` section gets the verdict
on each finding (:mod:`analysis.findings`) near the top, and one with a ``report: progression:``
its progression table (:mod:`analysis.progression`) after it; runs with a sampled eval get pass@k
against k (:mod:`analysis.pass_at_k`); every report states, under the final performance table, the
smallest difference of final score its seeds can resolve.

Layout comes, in order of precedence, from the command line, the grid file's ``report:``
section (recorded in ``grid.json``), and the defaults of :class:`ReportSettings`
(:mod:`analysis.settings.report`, outside this package so that a grid's planning reads it without
pandas or matplotlib).

The modules, in the order a report is made:

==================  ==============================================================================
``inputs``          reading a results folder: metrics, states, ``grid.json``, findings
``across``          several results folders as one: runs matched by settings, what differs named
``confirm``         ``findings A --confirm B``: B checked to be A's grid on other seeds, both verdicts
``runs``            one row per run, its labels and panels, and the runs left out
``baseline``        the baseline variant and the variants table
``tasks``           tasks as panels, and the section across tasks as numbers
``counting``        the runs as the report counts and lays them out (:class:`Counted`)
``page``            what a section is (:class:`Section`) and what it renders into (:class:`Page`)
``sections``        the report's sections in ``index.md``'s order, one module each (:data:`SECTIONS`)
``data``            the report's records: :class:`ReportInputs`, :class:`Counted`, :class:`ReportData`
``compute``         every number of the report (:func:`compute_report`), no drawing
``render``          the figures, tables and ``index.md`` (:func:`render_report`)
``api``             :func:`make_report` and the command line
==================  ==============================================================================
"""

from __future__ import annotations

from analysis.report.api import add_arguments, main, make_report
from analysis.report.compute import compute_report, compute_sections
from analysis.report.counting import count_runs, runs_at_once
from analysis.report.data import (
    AT_ONCE,
    PANEL,
    PANEL_ROW,
    REPORT_SUFFIXES,
    VARIANT,
    Counted,
    ReportData,
    ReportInputs,
)
from analysis.report.inputs import findings_results, load_report_inputs, report_columns
from analysis.report.page import Page, Section
from analysis.report.render import render_report
from analysis.report.runs import findings_runs, finished_run_ids
from analysis.report.sections import SECTIONS
from analysis.report.sections.dynamics import TRL_LOSS_TYPES, merge_plugin_metrics, plugin_metrics
from analysis.report.sections.tables import load_caption, power_lines
from analysis.settings.report import (
    ReportSettings,
    parse_baseline,
    parse_smoothing,
    parse_smoothing_text,
    recorded_problems,
)
from analysis.settings.report_values import ReportError

__all__ = [
    "AT_ONCE",
    "PANEL",
    "PANEL_ROW",
    "REPORT_SUFFIXES",
    "SECTIONS",
    "TRL_LOSS_TYPES",
    "VARIANT",
    "Counted",
    "Page",
    "ReportData",
    "ReportError",
    "ReportInputs",
    "ReportSettings",
    "Section",
    "add_arguments",
    "compute_report",
    "compute_sections",
    "count_runs",
    "findings_results",
    "findings_runs",
    "finished_run_ids",
    "load_caption",
    "load_report_inputs",
    "main",
    "make_report",
    "merge_plugin_metrics",
    "parse_baseline",
    "parse_smoothing",
    "parse_smoothing_text",
    "plugin_metrics",
    "power_lines",
    "recorded_problems",
    "render_report",
    "report_columns",
    "runs_at_once",
]
