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
(:mod:`analysis.report_settings`, outside this package so that a grid's planning reads it without
pandas or matplotlib).

The modules, in the order a report is made:

==================  ==============================================================================
``inputs``          reading a results folder: metrics, states, ``grid.json``, findings
``across``          several results folders as one: runs matched by settings, what differs named
``confirm``         ``findings A --confirm B``: B checked to be A's grid on other seeds, both verdicts
``runs``            one row per run, its labels and panels, and the runs left out
``baseline``        the baseline variant and the variants table
``compute``         every number of the report (:func:`compute_report`), no drawing
``compute_tables``  the report's tables as numbers: display names, unfinished runs, runs at once
``pass_at_k``       the pass@k figure and table as numbers: counted runs, n, temperature, caption
``progression``     the progression table as numbers: each row's runs from ``grid.json``, scored
``data``            :class:`ReportData` (frozen, built once), what ``compute`` hands to ``render``
``render``          the figures and ``index.md`` (:func:`render_report`)
``render_tables``   the table and findings sections of ``index.md``, their captions, each finding's figure
``api``             :func:`make_report` and the command line
==================  ==============================================================================
"""

from __future__ import annotations

from analysis.report.api import add_arguments, main, make_report
from analysis.report.compute import compute_report, merge_plugin_metrics, plugin_metrics
from analysis.report.compute_tables import runs_at_once
from analysis.report.data import AT_ONCE, PANEL, PANEL_ROW, REPORT_SUFFIXES, VARIANT, ReportData, ReportInputs
from analysis.report.inputs import TRL_LOSS_TYPES, findings_results, load_report_inputs, report_columns
from analysis.report.render import render_report
from analysis.report.render_tables import _load_caption, power_lines
from analysis.report.runs import findings_runs, finished_run_ids
from analysis.report_settings import (
    ReportSettings,
    parse_baseline,
    parse_smoothing,
    parse_smoothing_text,
    recorded_problems,
)
from analysis.report_values import ReportError

__all__ = [
    "AT_ONCE",
    "PANEL",
    "PANEL_ROW",
    "REPORT_SUFFIXES",
    "TRL_LOSS_TYPES",
    "VARIANT",
    "ReportData",
    "ReportError",
    "ReportInputs",
    "ReportSettings",
    "_load_caption",
    "add_arguments",
    "compute_report",
    "findings_results",
    "findings_runs",
    "finished_run_ids",
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
