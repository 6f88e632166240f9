"""What :func:`analysis.report.compute.compute_report` hands to the drawing: :class:`ReportData`
(with its section across tasks, :class:`TaskSection`), and the names of the label columns the report
adds."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis import curves, finals
from analysis import tasks as tasks_mod
from analysis.aggregate import Curves
from analysis.finding_figures import FindingFigure
from analysis.load import LoadInfo
from analysis.pass_at_k import PassAtK
from analysis.progression import ProgressionTable
from analysis.report_settings import ReportSettings
from analysis.scores import FinalTable, Resolvable
from analysis.tables import Table
from analysis.timing import TimingTable

#: What a report writes into ``results/<grid>/report/`` (and replaces on the next report).
REPORT_SUFFIXES = (".md", ".csv", ".tex", ".png", ".pdf")

#: Column names of the label columns the report adds to the metrics frame.
VARIANT, PANEL, PANEL_ROW = "variant", "panel", "panel row"
#: Per-run number of harness runs sharing the run's CPUs or GPU while it trained.
AT_ONCE = "runs at once"


@dataclass(frozen=True)
class TaskGroup:
    """The aggregate over tasks of one group of variants (the runs of one set of panel values other
    than the task; one group when the task is the only panel key).

    Attributes:
        name: the group's panel values (None: the only group).
        aggregate: :func:`analysis.tasks.aggregate_over_tasks` of its runs.
    """

    name: str | None
    aggregate: tasks_mod.TaskAggregate


@dataclass(frozen=True)
class TaskSection:
    """What the report shows across tasks (:func:`analysis.report.tasks.task_section`).

    Attributes:
        metric: the score normalised (the final ``eval/accuracy`` when the runs evaluate).
        ranges: ``{task: TaskRange}`` of every task with a finished run.
        groups: one :class:`TaskGroup` per group of variants.
        unfinished: ``{task: what happened to its runs}`` for each planned task none of whose runs
            finished (so none is scored).
        stated: whether the report's settings stated a low or high end.
    """

    metric: str
    ranges: Mapping[str, tasks_mod.TaskRange]
    groups: tuple[TaskGroup, ...]
    unfinished: Mapping[str, str]
    stated: bool = False


@dataclass(frozen=True)
class ReportInputs:
    """What :func:`analysis.report.inputs.load_report_inputs` read: the metrics frame and, beside
    it, what is known of the runs it covers.

    Attributes:
        frame: :func:`analysis.load.load`'s frame (one row per run and step).
        states: :func:`analysis.states.read_states` of the requested runs that have a folder.
        grid_info: ``grid.json`` (None without one).
        run_set: a phrase naming the run set ("the 6 run(s) of grid.json ...").
        requested_runs: the run ids asked for, in order (with and without metrics).
        grid_runs: ``{run_id: {key: value}}``: each planned run's varying values from ``grid.json``
            (damaged runs' too; empty without).
        load: :class:`analysis.load.LoadInfo`: skipped files, missing and damaged runs, the config
            columns, varying keys and aliases.
        start_evals: ``{run_id: greedy accuracy}`` of the starting policy, for each requested run
            that measured it before its first step (:func:`harness.layout.read_start_eval`).
        start_metrics: ``{run_id: {eval metric: value}}``, every metric of each requested run's
            ``eval_start.json`` (:func:`harness.layout.read_start_evals`; a run without the file is
            absent): the start of a ``measure: from_start`` finding.
    """

    frame: pd.DataFrame
    states: pd.DataFrame
    grid_info: Mapping[str, Any] | None
    run_set: str
    requested_runs: tuple[str, ...]
    grid_runs: Mapping[str, Mapping[str, Any]]
    load: LoadInfo
    start_evals: Mapping[str, float] = field(default_factory=dict)
    start_metrics: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Any]:
        """``frame, states, grid_info, run_set = inputs``."""
        return iter((self.frame, self.states, self.grid_info, self.run_set))


@dataclass(frozen=True)
class Layout:
    """How a report lays its runs out in every figure and table: the label columns, their labels
    in display order, the colours and the baseline.

    Attributes:
        hue, col, row: label column names in the frames (``variant``, ``panel``, ``panel row``;
            None when not used).
        legend_title: the variants' legend title (the keys behind the labels; None without).
        hue_order, col_values, row_values: labels in display order (``[None]`` for a facet not
            used).
        colors: ``{variant label: colour}`` (hex).
        baseline: the baseline's variant label, or None.
    """

    hue: str | None = None
    col: str | None = None
    row: str | None = None
    legend_title: str | None = None
    hue_order: list[str] = field(default_factory=list)
    col_values: list[Any] = field(default_factory=lambda: [None])
    row_values: list[Any] = field(default_factory=lambda: [None])
    colors: dict[str, str] = field(default_factory=dict)
    baseline: str | None = None

    def layout_fields(self) -> dict[str, Any]:
        """``{field: value}`` of :class:`Layout`'s fields alone (no copies), to build a
        :class:`ReportData` from."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(Layout)}


@dataclass(frozen=True, kw_only=True)
class ReportData(Layout):
    """Every number a report shows, computed by :func:`compute_report`, drawn by :func:`render_report`.

    Frozen, and built once by :func:`compute_report`; the layout's fields are :class:`Layout`'s.

    Attributes:
        title: the grid's name.
        settings: the layout used.
        lines: the report's opening lines (run set, what is compared, notes).
        left_out: one line per run the tables and figures leave out (state and step).
        runs: one row per run with metrics (index ``run_id``): labels, state, last step,
            ``max_steps``, ``no_signal``, ``included``.
        hue, col, row, legend_title, hue_order, col_values, row_values, colors, baseline: the
            :class:`Layout`.
        variants: one row per (variant, facet) with the full key values.
        curve_sets: ``{metric: Curves}`` of the curve figures, in order.
        marks, mark_runs: diverged runs to mark per curve metric.
        syncs: reference-model sync steps per facet.
        on_policy: facets whose runs are on-policy throughout.
        dynamics: ``{metric: Curves}`` of the dynamics panels.
        wseq: :func:`analysis.wseq.wseq_bands` of the included runs' off-policy steps.
        off_policy_how: how off-policy steps were told (see :func:`analysis.offpolicy.off_policy_rows`).
        scores: final score per included run, with labels.
        timing: :func:`analysis.timing.timing_table` (split by runs at once when recorded).
        final: :func:`analysis.scores.final_performance_table`.
        check, summary: :func:`analysis.learning_check.learning_check` (one row per run) and
            :func:`analysis.learning_check.learning_summary` (per variant).
        ttt: :func:`analysis.time_to_target.time_to_target_table` (None without a target).
        profile: :func:`analysis.finals.profile_frame` (a :class:`analysis.finals.Profile`).
        resolvable: :func:`analysis.scores.resolvable_differences` of the final scores per panel.
        findings: :func:`analysis.findings.findings_table` of the grid's findings (None without).
        finding_figures: one :class:`analysis.finding_figures.FindingFigure` per finding, in order.
        progression: :func:`analysis.progression.progression_table` of the ``report:`` section's
            progression (None without one).
        progression_lines: the lines under the progression table (runs left out, notes, what dynamic
            sampling cost), or why it is not made.
        pass_at_k: :func:`analysis.pass_at_k.pass_at_k_points` of the counted runs (None when none
            recorded a pass@k).
        pass_at_k_table: its table, with the caption of the figure and the table.
        tasks: :func:`analysis.report.tasks.task_section`: the normalised scores aggregated over
            tasks, when the runs are on several (None otherwise).
    """

    title: str
    settings: ReportSettings
    lines: list[str]
    left_out: list[str]
    runs: pd.DataFrame
    variants: pd.DataFrame | None = None
    curve_sets: dict[str, Curves] = field(default_factory=dict)
    marks: dict[str, list[curves.Mark]] = field(default_factory=dict)
    mark_runs: dict[str, pd.DataFrame | None] = field(default_factory=dict)
    syncs: dict[tuple[Any, Any], list[float]] = field(default_factory=dict)
    on_policy: list[tuple[Any, Any]] = field(default_factory=list)
    dynamics: dict[str, Curves] = field(default_factory=dict)
    dynamics_missing: list[str] = field(default_factory=list)
    dynamics_absent: dict[str, list[str]] = field(default_factory=dict)
    wseq: pd.DataFrame | None = None
    off_policy_how: str = ""
    scores: pd.DataFrame | None = None
    timing: TimingTable | None = None
    final: FinalTable | None = None
    check: Table | None = None
    summary: Table | None = None
    ttt: Table | None = None
    profile: finals.Profile | None = None
    resolvable: Resolvable | None = None
    findings: Table | None = None
    finding_figures: tuple[FindingFigure, ...] = ()
    progression: ProgressionTable | None = None
    progression_lines: tuple[str, ...] = ()
    pass_at_k: PassAtK | None = None
    pass_at_k_table: Table | None = None
    tasks: TaskSection | None = None
    empty: bool = False

    def panels(self) -> dict[str, Any]:
        """The layout keywords every faceted figure takes (:func:`analysis.curves.plot_curve_set`,
        :func:`analysis.finals.plot_final`): label columns, colours, orders, on-policy panels."""
        return {
            "hue": self.hue,
            "col": self.col,
            "row": self.row,
            "colors": self.colors,
            "hue_order": self.hue_order,
            "col_values": self.col_values,
            "row_values": self.row_values,
            "on_policy": self.on_policy,
        }


@dataclass(frozen=True)
class Labelled:
    """The runs with their labels (:func:`analysis.report.runs._label_variants`).

    Attributes:
        runs: a copy of the run table with the label columns (``variant``, ``panel``,
            ``panel row``) and the facet keys' columns added.
        keys: the config columns behind the labels.
        hue, col, row: the label columns the figures use (None when not used).
        legend_title: the variants' legend title (None without variants).
        notes: what the layout could not do as asked, one sentence each.
        missing: the config keys the layout names that no run sets (every run has TRL's default):
            columns the metrics frame lacks, to be added all-missing (NaN).
    """

    runs: pd.DataFrame
    keys: _Keys
    hue: str | None
    col: str | None
    row: str | None
    legend_title: str | None
    notes: tuple[str, ...]
    missing: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Keys:
    """The config columns behind the labels: panels (``col``, ``row``), variants (``label``), and
    every column the panels tell apart (``faceted``, dotted and as given)."""

    col: list[str]
    row: list[str]
    label: list[str]
    faceted: set[str]
