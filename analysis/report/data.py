"""The report's records: what it read (:class:`ReportInputs`), the runs as it counts and labels
them (:class:`Counted`, what every section computes from), what compute hands to the drawing
(:class:`ReportData`: the layout and each section's numbers), the section across tasks
(:class:`TaskSection`), and the names of the label columns the report adds."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from analysis import labels
from analysis import tasks as tasks_mod
from analysis.aggregate import FrameIndex, frame_index
from analysis.load import LoadInfo
from analysis.panels import Facets
from analysis.settings.report import ReportSettings

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
class LabelKeys:
    """The config columns behind the labels.

    Attributes:
        col, row: the keys of the panel columns and rows (frame columns).
        label: the keys behind the variants' labels.
        faceted: every column the panels tell apart (dotted and as given).
    """

    col: list[str]
    row: list[str]
    label: list[str]
    faceted: set[str]


@dataclass(frozen=True)
class Labelled:
    """The runs with their labels (:func:`analysis.report.runs.label_variants`).

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
    keys: LabelKeys
    hue: str | None
    col: str | None
    row: str | None
    legend_title: str | None
    notes: tuple[str, ...]
    missing: tuple[str, ...] = ()


@dataclass(frozen=True)
class Counted:
    """The runs as the report counts and labels them (:func:`analysis.report.counting.count_runs`):
    what every section's numbers are computed from (:class:`analysis.report.page.Section`).

    Attributes:
        settings: the layout used (tasks made panels when the runs are on several).
        inputs: what the report read.
        df: the metrics of every run with any (categorical run ids), with an all-missing column for
            each key the layout names that no run sets.
        runs: one row per run with metrics (index ``run_id``): config values, labels, ``state``,
            ``last_step``, ``max_steps``, ``no_signal``, ``included``, a diverged run's step and
            metric, and :data:`AT_ONCE` when the runs recorded it; empty without metrics.
        without: ``{run_id: why}`` of each requested run without metrics.
        flags: :func:`analysis.states.signal_flags` per run.
        work: the counted runs' metric rows with their label columns (and :data:`AT_ONCE`).
        facets: the figures' layout (:class:`analysis.panels.Facets`: label columns, their orders,
            colours, the baseline, the panels whose runs are on-policy throughout).
        keys: the config columns behind the labels.
        off: which rows of ``work`` are off-policy steps (bool, shape ``(len(work),)``).
        off_policy_how: how they were told (:func:`analysis.offpolicy.off_policy_rows`).
        at_once: whether the runs recorded how many runs shared the machine (:data:`AT_ONCE`).
        findings: the grid's findings (:func:`analysis.findings.read_findings`).
        logged: metric names the runs log (to suggest one for a finding's metric no run logs).
        given: the settings typed on the command line (what they name must be in the results).
        lines: the report's opening lines so far (notes on the layout and the baseline, what is
            compared).
        left_out: one line per run the report does not count.
        variants: one row per (variant, facet) with the full settings behind it (None without).
    """

    settings: ReportSettings
    inputs: ReportInputs
    df: pd.DataFrame
    runs: pd.DataFrame
    without: Mapping[str, str]
    flags: pd.DataFrame
    work: pd.DataFrame
    facets: Facets
    keys: LabelKeys
    off: np.ndarray
    off_policy_how: str = ""
    at_once: bool = False
    findings: tuple[Any, ...] = ()
    logged: tuple[str, ...] = ()
    given: frozenset[str] = frozenset()
    lines: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()
    variants: pd.DataFrame | None = None
    _shared: dict[Any, Future] = field(default_factory=dict, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    @property
    def empty(self) -> bool:
        """Whether no run is counted (no section but the findings has anything to show)."""
        return self.work.empty

    @property
    def by(self) -> list[str]:
        """The label columns in use: variant, panel, panel row (those used)."""
        return self.facets.by

    @property
    def included(self) -> pd.DataFrame:
        """The rows of :attr:`runs` the report counts."""
        return self.runs[self.runs["included"]]

    def display_names(self) -> dict[str, str]:
        """The tables' headers of the panel and panel-row label columns: the titles of their keys."""
        info, out = self.inputs.load, {}
        if self.facets.col:
            out[PANEL] = labels.titles([info.aliases.get(k, k) for k in self.keys.col])
        if self.facets.row:
            out[PANEL_ROW] = labels.titles([info.aliases.get(k, k) for k in self.keys.row])
        return out

    def shared(self, key: Any, make: Callable[[], Any]) -> Any:
        """``make()``, computed once per ``key`` and shared by every section that asks, also from
        several threads at once (the others wait for the first); e.g. a frame index by
        (:meth:`frame_index`)."""
        with self._lock:
            future = self._shared.get(key)
            mine = future is None
            if mine:
                future = self._shared[key] = Future()
        if mine:
            try:
                future.set_result(make())
            except BaseException as e:
                future.set_exception(e)
                raise
        return future.result()

    def frame_index(self, by: Sequence[str]) -> FrameIndex:
        """:func:`analysis.aggregate.frame_index` of :attr:`work` by ``by`` and the settings' x,
        made once and shared (the curves, dynamics and w_seq sections group the same rows)."""
        key = ("frame_index", tuple(by), self.settings.x)
        return self.shared(key, lambda: frame_index(self.work, list(by), self.settings.x))


@dataclass(frozen=True)
class ReportData:
    """Every number a report shows, computed by :func:`analysis.report.compute.compute_report`,
    drawn by :func:`analysis.report.render.render_report`. Frozen, and built once.

    Attributes:
        title: the grid's name.
        settings: the layout used.
        facets: the figures' layout (:class:`analysis.panels.Facets`).
        lines: the report's opening lines (run set, what is compared, notes).
        left_out: one line per run the tables and figures leave out (state and step).
        runs: one row per run with metrics (index ``run_id``): labels, state, last step,
            ``max_steps``, ``no_signal``, ``included``.
        variants: one row per (variant, facet) with the full key values (None without).
        sections: ``{section name: its numbers}`` (:data:`analysis.report.sections.SECTIONS`), a
            section's numbers None when it has nothing to show; only the sections computed without
            counted runs when ``empty``.
        empty: whether no run is counted (the report says so, and shows the findings only).
    """

    title: str
    settings: ReportSettings
    facets: Facets
    lines: tuple[str, ...]
    left_out: tuple[str, ...]
    runs: pd.DataFrame
    variants: pd.DataFrame | None = None
    sections: Mapping[str, Any] = field(default_factory=dict)
    empty: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "sections", MappingProxyType(dict(self.sections)))

    def numbers(self, name: str) -> Any:
        """The numbers of section ``name`` (None when it has none or was not computed)."""
        return self.sections.get(name)
