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
on each finding (:mod:`analysis.findings`) near the top; every report states, under the final
performance table, the smallest difference of final score its seeds can resolve.

Layout comes, in order of precedence, from the command line, the grid file's ``report:``
section (recorded in ``grid.json``), and the defaults of :class:`ReportSettings`.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import warnings
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from filelock import FileLock

from analysis import aggregate as agg_mod
from analysis import curves, finals, labels, states, stats, style, tables
from analysis import findings as findings_mod
from analysis.aggregate import Curves, off_policy_rows, x_values
from analysis.curves import DYNAMICS_METRICS
from analysis.load import NONE_LABEL, SkippedFileWarning, list_runs, load, read_grid, seed_column
from harness import layout

__all__ = [
    "ReportData",
    "ReportError",
    "ReportSettings",
    "add_arguments",
    "compute_report",
    "findings_results",
    "load_report_inputs",
    "main",
    "make_report",
    "parse_baseline",
    "render_report",
]


class ReportError(ValueError):
    """An argument of the report does not fit the results (unknown axis, bad x)."""


_X_CHOICES = ("step", "tokens", "time")

#: What a report writes into ``results/<grid>/report/`` (and replaces on the next report).
REPORT_SUFFIXES = (".md", ".csv", ".tex", ".png", ".pdf")

#: Column names of the label columns the report adds to the metrics frame.
VARIANT, PANEL, PANEL_ROW = "variant", "panel", "panel row"
#: Per-run number of harness runs sharing the run's CPUs or GPU while it trained.
AT_ONCE = "runs at once"


@dataclass(frozen=True)
class ReportSettings:
    """How a report is laid out. Keys are dotted config keys (``trainer.epsilon``), an alias
    (``loss_type``) or a key's last component.

    Attributes:
        hue: keys whose values are the compared variants (colours); None: ``loss_type`` when it
            varies, else every key that differs.
        col, row: keys faceted into panel columns / rows.
        baseline: ``KEY=VALUE[, KEY=VALUE]`` or a variant label; None: ``loss_type=grpo`` when
            such runs exist (without a note when they do not).
        x: ``step``, ``tokens`` or ``time``.
        smoothing: ``auto`` (trailing mean over a tenth of each run's points), ``none``,
            ``{"window": n}`` or ``{"ema": a}``.
        metric: the score of the tables and final-score figures.
        curves: one curve figure per metric (default: ``metric``).
        metrics: training-dynamics panels.
        target: also tabulate the time to reach ``metric >= target``.
        lead: ``curves`` or ``final``: which figure comes first.
        seeds: also draw each run's curve faintly.
        ci: ``t`` or ``bootstrap`` bands.
        include_unfinished: count runs that did not finish too (marked).
        wseq_split: split the w_seq figure by this column (e.g. ``reuse_index``).
    """

    hue: tuple[str, ...] | None = None
    col: tuple[str, ...] = ()
    row: tuple[str, ...] = ()
    baseline: str | None = None
    x: str = "step"
    smoothing: Any = agg_mod.AUTO
    metric: str = "reward"
    curves: tuple[str, ...] = ()
    metrics: tuple[str, ...] = DYNAMICS_METRICS
    target: float | None = None
    lead: str = "curves"
    seeds: bool = False
    ci: str = "t"
    include_unfinished: bool = False
    wseq_split: str | None = None

    @classmethod
    def merged(cls, grid_section: Mapping[str, Any] | None, **given: Any) -> ReportSettings:
        """Defaults, overridden by a grid file's ``report:`` section, overridden by ``given``
        (keyword arguments that are None count as not given)."""
        names = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for source in (grid_section or {}, {k: v for k, v in given.items() if v is not None}):
            for k, v in source.items():
                if k not in names:
                    continue
                if k in ("hue", "col", "row", "curves", "metrics"):
                    v = (v,) if isinstance(v, str) else tuple(v)
                values[k] = v
        return replace(cls(), **values)


#: The grid file's ``report:`` keys and what each takes (``grpo-harness plan`` checks them in the
#: grid file; a ``grid.json`` edited by hand or from another version is checked again here).
_SECTION_KEYS: dict[str, str] = {
    "hue": "a setting key or a list of them",
    "col": "a setting key or a list of them",
    "row": "a setting key or a list of them",
    "baseline": "KEY=VALUE[, KEY=VALUE] or a variant label",
    "x": "step, tokens or time",
    "smoothing": "auto, none, {window: N} (N >= 1) or {ema: A} (0 < A <= 1)",
    "metric": "a metric name",
    "curves": "a list of metric names",
    "metrics": "a list of metric names",
    "target": "a finite number",
    "lead": "curves or final",
    "seeds": "true or false",
}


def check_section(section: Any, where: str) -> list[str]:
    """Problems with a ``report:`` section as recorded in ``grid.json`` (empty list: none).

    Args:
        section: the recorded section.
        where: the file, for the messages.
    """
    if section is None:
        return []
    if not isinstance(section, Mapping):
        return [
            f"{where}: report is {type(section).__name__}, not a mapping of layout keys ({', '.join(_SECTION_KEYS)})"
        ]
    problems = []

    def names(v: Any) -> bool:
        return isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v))

    for key, value in section.items():
        ok = {
            "hue": names(value) and bool(value),
            "col": names(value),
            "row": names(value),
            "baseline": isinstance(value, str) or value is None,
            "x": value in _X_CHOICES,
            "smoothing": _smoothing_ok(value),
            "metric": isinstance(value, str),
            "curves": isinstance(value, list) and all(isinstance(x, str) for x in value),
            "metrics": isinstance(value, list) and all(isinstance(x, str) for x in value),
            "target": value is None
            or (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)),
            "lead": value in ("curves", "final"),
            "seeds": isinstance(value, bool),
        }.get(key)
        if ok is None:
            problems.append(f"{where}: report.{key}: unknown key; valid: {', '.join(_SECTION_KEYS)}")
        elif not ok:
            problems.append(f"{where}: report.{key} = {value!r}: give {_SECTION_KEYS[key]}")
    return problems


def _smoothing_ok(value: Any) -> bool:
    try:
        agg_mod.resolve_smoothing(value, 10)
    except (TypeError, ValueError):
        return False
    return True


def parse_baseline(text: str | None) -> tuple[str | None, str | None]:
    """``"loss_type=grpo"`` → ``("loss_type", "grpo")``; ``"grpo"`` → ``(None, "grpo")`` (a label)."""
    if not text:
        return None, None
    if "=" in text and "," not in text:
        key, value = text.split("=", 1)
        return key.strip() or None, value.strip()
    return None, text.strip()


def _baseline_pairs(text: str) -> list[tuple[str, str]] | None:
    """``"a=1, b=2"`` → ``[("a", "1"), ("b", "2")]``; None when the text is a label."""
    parts = [p.strip() for p in text.split(",")]
    if not all("=" in p for p in parts):
        return None
    return [(k.strip(), v.strip()) for k, v in (p.split("=", 1) for p in parts)]


def _resolve_column(df: pd.DataFrame, name: str | None) -> str | None:
    """A column for a grid key named as given, by alias, or by its last dotted component."""
    if name is None:
        return None
    if name in df.columns:
        return name
    if f"trainer.{name}" in df.columns:
        return f"trainer.{name}"
    ends = [c for c in df.columns if isinstance(c, str) and c.endswith("." + name)]
    if len(ends) == 1:
        return ends[0]
    raise ReportError(
        f"no column {name!r} in the results; grid axes: {sorted(df.attrs.get('varying', []))}, "
        f"aliases: {sorted(df.attrs.get('aliases', {}))}"
    )


def _key_column(df: pd.DataFrame, key: str, strict: bool) -> str:
    """The frame column holding config key ``key``; a key no run sets becomes an all-NaN column
    unless ``strict`` (a key typed on the command line must exist)."""
    try:
        return _resolve_column(df, key)
    except ReportError:
        if strict:
            raise
        df[key] = np.nan
        return key


def _dotted(df: pd.DataFrame, column: str) -> str:
    return df.attrs.get("aliases", {}).get(column, column)


def _differing_keys(runs: pd.DataFrame, config_columns: Sequence[str], exclude: set[str]) -> list[str]:
    """Config columns whose value differs between runs (seed-like, harness bookkeeping and
    excluded keys left out)."""
    out = []
    for c in config_columns:
        if c in exclude or c in ("grid", "seed") or c.endswith(".seed") or c.startswith("harness."):
            continue
        if c not in runs.columns:
            continue
        if runs[c].astype(object).map(lambda v: repr(None if labels.is_missing(v) else v)).nunique() > 1:
            out.append(c)
    return out


@dataclass
class ReportData:
    """Every number a report shows, computed by :func:`compute_report`, drawn by :func:`render_report`.

    Attributes:
        title: the grid's name.
        settings: the layout used.
        lines: the report's opening lines (run set, what is compared, notes).
        left_out: one line per run the tables and figures leave out (state and step).
        runs: one row per run with metrics (index ``run_id``): labels, state, last step,
            ``max_steps``, ``no_signal``, ``included``.
        hue, col, row: label column names in the frames (None when not used).
        hue_order, col_values, row_values: labels in display order.
        colors: ``{variant label: colour}``.
        baseline: the baseline's variant label, or None.
        variants: one row per (variant, facet) with the full key values.
        curve_sets: ``{metric: Curves}`` of the curve figures, in order.
        marks, mark_runs: diverged runs to mark per curve metric.
        syncs: reference-model sync steps per facet.
        on_policy: facets whose runs are on-policy throughout.
        dynamics: ``{metric: Curves}`` of the dynamics panels.
        wseq: :func:`analysis.curves.wseq_bands` of the included runs' off-policy steps.
        off_policy_how: how off-policy steps were told (see :func:`analysis.aggregate.off_policy_rows`).
        scores: final score per included run, with labels.
        timing, final, check, summary, ttt: tables.
        profile: :func:`analysis.finals.profile_frame`.
        resolvable: :func:`analysis.tables.resolvable_differences` of the final scores per panel.
        findings: :func:`analysis.findings.findings_table` of the grid's findings (None without).
    """

    title: str
    settings: ReportSettings
    lines: list[str]
    left_out: list[str]
    runs: pd.DataFrame
    hue: str | None = None
    col: str | None = None
    row: str | None = None
    hue_order: list[str] = field(default_factory=list)
    col_values: list[Any] = field(default_factory=lambda: [None])
    row_values: list[Any] = field(default_factory=lambda: [None])
    colors: dict[str, str] = field(default_factory=dict)
    baseline: str | None = None
    legend_title: str | None = None
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
    timing: pd.DataFrame | None = None
    final: pd.DataFrame | None = None
    check: pd.DataFrame | None = None
    summary: pd.DataFrame | None = None
    ttt: pd.DataFrame | None = None
    profile: pd.DataFrame | None = None
    resolvable: pd.DataFrame | None = None
    findings: pd.DataFrame | None = None
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


def report_columns(settings: ReportSettings) -> list[str]:
    """The metric and config columns a report with ``settings`` reads (a projection: real runs log
    many more, and reading only these is most of what makes a 1,000-run report quick)."""
    metrics = [
        settings.metric,
        *settings.curves,
        *settings.metrics,
        *states.DIVERGENCE_METRICS,
        states.ZERO_STD,
        states.GRAD_NORM,
        layout.OFF_POLICY,
        layout.REUSE_INDEX,
        layout.CONCURRENT_RUNS,
        layout.STEP_WALL_S,
        layout.STEP_CPU_S,
        layout.STEP_GPU_S,
        layout.OTHER_CPUS,
        layout.CPUS,
        layout.RUN_THREADS,
        "step_time",
        layout.TOKENS_GENERATED,
        layout.TOKENS_TRAINED,
        layout.TOKENS_GENERATED_TOTAL,
        layout.PEAK_MEMORY_MB,
        layout.ELAPSED_S,
        *curves.WSEQ_Q,
        "w_seq/min",
        "w_seq/max",
        *([settings.wseq_split] if settings.wseq_split else []),
    ]
    keys = [*(settings.hue or ()), *settings.col, *settings.row]
    keys += [k for k, _ in (_baseline_pairs(settings.baseline or "") or [])]
    config = [
        "trainer.max_steps",
        "trainer.loss_type",
        "trainer.sync_ref_model",
        "trainer.ref_model_sync_steps",
        "trainer.importance_sampling_level",
    ]
    config += [k if "." in k or k in ("seed", "model") else f"trainer.{k}" for k in keys]
    return list(dict.fromkeys([*metrics, *config]))


def load_report_inputs(
    grid_dir: str | Path,
    run_ids: Sequence[str] | None = None,
    *,
    all_runs: bool = False,
    settings: ReportSettings | None = None,
    extra_columns: Sequence[str] = (),
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any] | None, str]:
    """The metrics frame, the runs' states, ``grid.json`` and a phrase naming the run set.

    With ``settings`` only the columns that report needs are read (:func:`report_columns`, and
    ``extra_columns``, e.g. the findings' metrics); without, every column.

    Raises:
        FileNotFoundError: no ``runs/`` folder.
        ReportError: a damaged ``grid.json``.
    """
    grid_dir = Path(grid_dir)
    if not (grid_dir / layout.RUNS_DIR).is_dir():
        raise FileNotFoundError(_not_a_grid_folder(grid_dir))
    try:
        grid_info = read_grid(grid_dir)
    except ValueError as e:
        raise ReportError(f"{e}; fix or delete it, or use --all") from e
    if all_runs:
        ids = list_runs(grid_dir)
        run_set = f"all {len(ids)} run folder(s) in {grid_dir}/{layout.RUNS_DIR}"
    elif run_ids is not None:
        ids = list(run_ids)
        run_set = f"{len(ids)} run(s) given on the command line"
    elif grid_info and isinstance(grid_info.get("run_ids"), list):
        ids = [str(r) for r in grid_info["run_ids"]]
        run_set = f"the {len(ids)} run(s) of {layout.GRID_FILE} (the grid as currently specified)"
    else:
        ids = list_runs(grid_dir)
        run_set = f"all {len(ids)} run folder(s) (no {layout.GRID_FILE})"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SkippedFileWarning)
        df = load(
            grid_dir,
            ids,
            columns=None
            if settings is None
            else list(
                dict.fromkeys([*report_columns(settings), *extra_columns, *_plugin_prefixes(grid_dir, ids)])
            ),
            cache_dir=grid_dir / layout.GRID_CACHE_DIR,
        )
    for w in caught:
        if issubclass(w.category, SkippedFileWarning):
            print(f"report: {w.message}", file=sys.stderr)
        elif "not found" not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    present = set(list_runs(grid_dir))
    st = states.read_states(grid_dir, [r for r in ids if r in present])
    df.attrs["run_set"] = run_set
    df.attrs["requested_runs"] = ids
    if grid_info and isinstance(grid_info.get("runs"), Mapping):
        df.attrs["grid_runs"] = grid_info["runs"]  # each run's varying values, damaged runs' too
    return df, st, grid_info, run_set


def _plugin_prefixes(grid_dir: Path, ids: Sequence[str]) -> list[str]:
    """``"<name>/"`` for each loss plugin a run's ``config.json`` names as its ``loss_type`` (the
    columns of its metrics, read beside the report's own: :func:`plugin_metrics`)."""
    import json

    names: set[str] = set()
    for rid in ids:
        try:
            data = json.loads((layout.run_dir(grid_dir, rid) / layout.CONFIG_FILE).read_text())
            name = data["config"]["trainer"]["loss_type"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(name, str) and name not in TRL_LOSS_TYPES:
            names.add(name)
    return [f"{n}/" for n in sorted(names)]


def _not_a_grid_folder(path: Path) -> str:
    """Why ``path`` is not a grid's results folder, and which folders near it are."""
    near = path if path.is_dir() else path.parent
    grids = (
        sorted(str(p.parent) for p in near.glob(f"*/{layout.RUNS_DIR}") if p.is_dir())
        if near.is_dir()
        else []
    )
    what = "does not exist" if not path.exists() else f"has no '{layout.RUNS_DIR}' folder"
    hint = (
        f"; grid results folders there: {', '.join(grids[:8])}" + (" ..." if len(grids) > 8 else "")
        if grids
        else "; give results/<grid>, the folder `grpo-harness run` wrote"
    )
    return f"{path} {what}{hint}"


def compute_report(
    df: pd.DataFrame,
    run_states: pd.DataFrame,
    settings: ReportSettings,
    *,
    title: str = "grid",
    strict_keys: Collection[str] = (),
    given: Collection[str] = (),
    findings: Sequence[findings_mod.Finding] = (),
    logged_metrics: Collection[str] = (),
) -> ReportData:
    """Every number of the report: curves, bands, w_seq bands, tables, final scores, profiles,
    and the verdict on each finding.

    Args:
        df: frame from :func:`analysis.load.load` (every requested run, finished or not).
        run_states: :func:`analysis.states.read_states` of the same runs.
        settings: the layout.
        title: the grid's name.
        findings: the grid's findings (:func:`analysis.findings.read_findings`); their verdicts
            count finished runs only, also with ``include_unfinished``.
        logged_metrics: metric names the runs log (to suggest one for a finding's metric that no
            run logs).
        given: settings typed on the command line among ``"baseline"`` and ``"wseq_split"``: what
            they name must be in the results (a ``report:`` section's may not be: a note says so).
        strict_keys: layout keys that must name a column (typed on the command line); any other key
            that no run sets is all-missing (every run uses TRL's default).

    Returns:
        A :class:`ReportData`.

    Raises:
        ReportError: ``x``, a layout key or the metric does not fit the results.
    """
    s = settings
    if s.x not in _X_CHOICES:
        raise ReportError(f"x must be one of {_X_CHOICES}, got {s.x!r}")
    data = ReportData(title=title, settings=s, lines=[], left_out=[], runs=pd.DataFrame())
    df, unreadable, without = _runs_without_metrics(df, run_states)
    if df.empty:
        data.left_out.extend(f"`{rid}`: {what}" for rid, what in without.items())
        data.empty = True
        if findings:
            data.findings = findings_mod.findings_table(df, findings, [], unfinished=without)
        return data
    _check_axes(df, s)
    runs, first, flags = _run_table(df, run_states, s)
    keys = _label_variants(df, runs, first, s, strict_keys, data)
    placed = _place_runs_without_metrics(df, runs, keys, without, data)
    notes = _left_out_and_notes(df, runs, data, unreadable)
    data.runs = runs
    inc = runs[runs["included"]]
    work = _included_rows(df, runs)
    _orders(data, runs, inc)
    data.baseline = _baseline_label(
        inc, df, data.hue, s.baseline, data.lines, keys.label, runs=runs, strict="baseline" in given
    )
    _compared_lines(df, inc, data, keys, notes)
    data.variants = _variants_table(runs, keys.label, data, placed)
    if findings:
        finished, why = findings_runs(runs, without)
        data.findings = findings_mod.findings_table(
            df, findings, finished, unfinished=why, logged=logged_metrics
        )
    if work.empty:
        data.empty = True
        return data
    _check_wseq_split(work, data, strict="wseq_split" in given)
    off = _on_policy_panels(work, inc, data)
    _numbers(work, df, runs, flags, off, data, keys)
    return data


def finished_run_ids(runs: pd.DataFrame) -> list[str]:
    """The run ids of ``runs`` (:func:`_run_table`) that finished: a DONE marker that what is on
    disk agrees with."""
    return [str(r) for r in runs.index[(runs["state"] == states.DONE) & (runs["problem"] == "")]]


def findings_runs(
    runs: pd.DataFrame, without: Mapping[str, str], df: pd.DataFrame | None = None
) -> tuple[list[str], dict[str, str]]:
    """The runs a finding may count, and why each other run may not.

    A finding reads its own metric, so a run counts when it finished (:func:`finished_run_ids`)
    whether or not it logged the report's score metric.

    Args:
        runs: :func:`_run_table` (the runs with metrics).
        without: the requested runs without metrics, with why (:func:`_runs_without_metrics`).
        df: the metrics, to find where a diverged run went non-finite (:func:`analysis.states.divergence_point`)
            when ``runs`` does not say yet; None: as ``runs`` says.

    Returns:
        ``(finished run ids, {run id: why it is not counted})``.
    """
    problems = pd.Series(_done_problems(runs, None), index=runs.index, dtype=object)
    done = (runs["state"] == states.DONE) & (problems == "")
    why = dict(without)
    for rid, r in runs[~done].iterrows():
        if r["state"] == states.DONE:
            why[str(rid)] = f"done, but {problems[rid]}"
        else:
            step = _as_int(r["marker_step"]) if r["state"] == states.DIVERGED else None
            metric = r["diverged_metric"] if isinstance(r["diverged_metric"], str) else None
            if r["state"] == states.DIVERGED and df is not None:
                step, metric = states.divergence_point(df, rid, step, metric)
            if step is None and not pd.isna(r["last_step"]):
                step = int(r["last_step"])
            why[str(rid)] = states.describe(r["state"], step=step, max_steps=r["max_steps"], metric=metric)
    return [str(r) for r in runs.index[done]], why


@dataclass
class _Keys:
    """The config columns behind the labels: panels (``col``, ``row``), variants (``label``), and
    every column the panels tell apart (``faceted``, dotted and as given)."""

    col: list[str]
    row: list[str]
    label: list[str]
    faceted: set[str]


def _runs_without_metrics(
    df: pd.DataFrame, run_states: pd.DataFrame
) -> tuple[pd.DataFrame, dict[str, int], dict[str, str]]:
    """A shallow working copy of ``df`` (categorical run ids, only the small attrs); per run id, how
    many of its metrics files could not be read; and each requested run that has no metric rows,
    with why (``{run_id: phrase}``, in the requested order)."""
    requested = df.attrs.get("requested_runs") or list(run_states.index)
    missing_runs = list(df.attrs.get("missing_runs") or [])
    damaged = dict(df.attrs.get("damaged_runs") or {})
    unreadable: dict[str, int] = {}  # run id -> metrics files that could not be read
    for path, _ in df.attrs.get("skipped") or []:
        parts = Path(path).parts
        if layout.METRICS_DIR in parts:
            rid = parts[parts.index(layout.METRICS_DIR) - 1]
            unreadable[rid] = unreadable.get(rid, 0) + 1
    # pandas deep-copies attrs on every operation: keep only the small ones on the working frame
    small = {k: df.attrs[k] for k in ("aliases", "varying", "config_columns", "grid_runs") if k in df.attrs}
    df = df.copy(deep=False)
    df.attrs = small
    rid_col = df[layout.RUN_ID]
    if not isinstance(rid_col.dtype, pd.CategoricalDtype):
        df[layout.RUN_ID] = rid_col = rid_col.astype("category")
    counts = np.bincount(rid_col.cat.codes.to_numpy(), minlength=len(rid_col.cat.categories))
    with_metrics = {str(c) for c, n in zip(rid_col.cat.categories, counts, strict=True) if n}
    without: dict[str, str] = {}
    for rid in requested:
        if rid in damaged:
            without[rid] = f"damaged run file, left out ({damaged[rid]})"
        elif rid in missing_runs:
            without[rid] = "no run folder yet (not started)"
        elif rid not in with_metrics:
            state = run_states.loc[rid, "state"] if rid in run_states.index else states.PENDING
            without[rid] = {
                states.FAILED: "failed before its first step",
                states.DONE: "done, but none of its metrics could be read (see Files not loaded)",
            }.get(state, "no metrics logged yet")
    return df, unreadable, without


def _place_runs_without_metrics(
    df: pd.DataFrame, runs: pd.DataFrame, keys: _Keys, without: dict[str, str], data: ReportData
) -> pd.DataFrame:
    """List each run without metrics in ``data.left_out``, under its variant (and panel) when its
    values in ``grid.json`` match a labelled run's on every key the labels and panels use.

    Returns:
        One row per placed run: index ``run_id``, the label columns of ``runs``.
    """
    grid_runs = df.attrs.get("grid_runs") or {}
    cols = [c for c in (VARIANT, PANEL, PANEL_ROW) if c in runs.columns]
    key_cols = [*keys.label, *keys.col, *keys.row]
    known = {}  # normalised key values -> the run labels they give
    if cols and len(runs):
        for _, r in runs.drop_duplicates(cols).iterrows():
            known.setdefault(tuple(_norm(r[k]) for k in key_cols), r[cols])
    placed = {}
    for rid, what in without.items():
        values = grid_runs.get(rid)
        where = None
        if isinstance(values, Mapping) and known:
            probe = [values.get(_dotted(df, k), values.get(k, _UNKNOWN)) for k in key_cols]
            for key, lab in known.items():
                if all(v is _UNKNOWN or _norm(v) == kv for v, kv in zip(probe, key, strict=True)):
                    where = lab
                    break
        if where is not None:
            placed[rid] = where
            data.left_out.append(f"`{rid}` ({_where(where, data)}): {what}")
        else:
            data.left_out.append(f"`{rid}`: {what}")
    return (
        pd.DataFrame.from_dict(placed, orient="index", columns=cols) if placed else pd.DataFrame(columns=cols)
    )


_UNKNOWN = object()


def _norm(v: Any) -> str:
    """A config value as text that compares equal across JSON and frame types (2 and 2.0; None and NaN)."""
    if labels.is_missing(v):
        return NONE_LABEL
    if (
        isinstance(v, (int, float, np.integer, np.floating))
        and not isinstance(v, bool)
        and float(v).is_integer()
    ):
        return str(int(v))
    return str(v)


def _check_axes(df: pd.DataFrame, s: ReportSettings) -> None:
    """Raise :class:`ReportError` when the x axis or the score metric is not in the results."""
    try:
        x_values(df, s.x)
    except KeyError as e:
        raise ReportError(f"--x {s.x}: {e.args[0]}") from e
    if s.metric not in df.columns or not np.isfinite(df[s.metric].to_numpy(dtype=np.float64)).any():
        known = sorted(
            c for c in df.columns if c.startswith(("reward", "eval/", "rewards/")) and df[c].notna().any()
        )
        raise ReportError(
            f"--metric {s.metric}: no run logged it (report.metric in the grid file, or --metric); "
            f"logged metrics include {', '.join(known) or 'none'}"
        )


def _run_table(
    df: pd.DataFrame, run_states: pd.DataFrame, s: ReportSettings
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """One row per run with metrics: its config values, state, progress, learning-signal flags,
    and whether the report counts it (``included``). Returns ``(runs, first rows, signal flags)``."""
    rid_col = df[layout.RUN_ID]
    row_codes = rid_col.cat.codes.to_numpy()
    run_names = [str(c) for c in rid_col.cat.categories]
    first_row = np.full(len(run_names), -1, dtype=np.int64)
    first_row[row_codes[::-1]] = np.arange(len(df) - 1, -1, -1)
    present = np.flatnonzero(first_row >= 0)
    first = df.iloc[first_row[present]].copy()
    first.index = pd.Index([run_names[k] for k in present], name=layout.RUN_ID, dtype=object)
    first = first.drop(columns=[layout.RUN_ID])
    runs = first.copy()
    last = np.full(len(run_names), -1, dtype=np.int64)
    np.maximum.at(last, row_codes, df[layout.STEP].to_numpy())
    runs["last_step"] = last[present]
    st = run_states.reindex(runs.index)
    runs["state"] = st["state"].fillna(states.STOPPED)
    runs["marker_step"] = st["marker_step"]
    runs["diverged_metric"] = st["diverged_metric"]
    runs["missing_steps"] = st["missing_steps"].fillna(0).astype(int)
    runs["conflict"] = st["conflict"].fillna("")
    ms = "trainer.max_steps" if "trainer.max_steps" in runs.columns else None
    runs["max_steps"] = [_as_int(v) for v in runs[ms]] if ms else None
    flags = states.signal_flags(df)
    flags.index = flags.index.astype(object)
    runs["no_signal"] = flags["no_signal"].reindex(runs.index).fillna(False).astype(bool)
    runs["zero_variance"] = flags["zero_variance"].reindex(runs.index).fillna(False).astype(bool)
    score = df[s.metric].to_numpy(dtype=np.float64)
    scored = np.bincount(row_codes[np.isfinite(score)], minlength=len(run_names)) > 0
    runs["scored"] = scored[present]
    # A DONE marker is only a result when what is on disk agrees with it.
    runs["problem"] = _done_problems(runs, s.metric)
    done = (runs["state"] == states.DONE) & (runs["problem"] == "")
    runs["included"] = done | (s.include_unfinished & (runs["state"] != states.DONE))
    return runs, first, flags


def _label_variants(
    df: pd.DataFrame,
    runs: pd.DataFrame,
    first: pd.DataFrame,
    s: ReportSettings,
    strict_keys: Collection[str],
    data: ReportData,
) -> _Keys:
    """Label each run's variant (hue), panel (col) and panel row (row) in ``runs``; set
    ``data.hue``/``col``/``row`` and the legend title; note in ``data.lines`` what the layout could
    not do as asked."""
    col_keys = [_key_column(df, k, k in strict_keys) for k in s.col]
    row_keys = [_key_column(df, k, k in strict_keys) for k in s.row]
    for k in (*col_keys, *row_keys):
        if k not in runs.columns:
            runs[k] = first[k] if k in first.columns else np.nan
    faceted = {_dotted(df, k) for k in (*col_keys, *row_keys)} | set(col_keys) | set(row_keys)
    config_cols = [c for c in df.attrs.get("config_columns", []) if c in runs.columns]
    # Labels come from every run with metrics, so a variant keeps its name whichever runs finished.
    differing = _differing_keys(runs, config_cols, faceted)
    if col_keys or row_keys:
        differing = _split_within_panels(runs, differing, [*col_keys, *row_keys])
    hue_keys, explicit = _hue_keys(df, runs, first, s, strict_keys, differing)
    also_panels = [k for k in hue_keys if k in faceted]
    if also_panels:  # a key that already makes the panels cannot also tell a panel's lines apart
        hue_keys = [k for k in hue_keys if k not in faceted]
        if s.hue is not None:
            _say(
                data,
                f"{', '.join(labels.key_title(k) for k in also_panels)} is a panel key, so it is not a colour too",
            )
    runs[VARIANT], extra = labels.label_runs(runs, hue_keys, [k for k in differing if k not in hue_keys])
    if extra and explicit:
        _say(
            data,
            f"runs differ in more than the hue ({', '.join(labels.key_title(k) for k in extra)}), so those "
            "keys are added to the labels of the runs they tell apart; facet them with --col/--row to colour "
            "by the hue alone",
        )
    label_keys = [*hue_keys, *extra]
    data.hue = VARIANT if label_keys else None
    data.legend_title = labels.titles(hue_keys or extra) if label_keys else None
    for name, keys_, attr in ((PANEL, col_keys, "col"), (PANEL_ROW, row_keys, "row")):
        if keys_:
            runs[name], _ = labels.label_runs(
                runs, [_dotted(df, k) if _dotted(df, k) in runs else k for k in keys_]
            )
            setattr(data, attr, name)
    return _Keys(col_keys, row_keys, label_keys, faceted)


def _say(data: ReportData, note: str) -> None:
    """A note on the layout, on stderr and in the report."""
    print(f"report: {note}", file=sys.stderr)
    data.lines.append(f"Note: {note}.")


def _split_within_panels(runs: pd.DataFrame, keys: list[str], panel_keys: list[str]) -> list[str]:
    """The ``keys`` whose values differ within some panel: a key the panels already tell apart (the
    control's batch size, with its own panel) is not a variant of its own."""
    fkey = pd.Series(
        [labels.canon(tuple(r)) for r in runs[list(dict.fromkeys(panel_keys))].itertuples(index=False)],
        index=runs.index,
    )

    def splits(k: str) -> bool:
        values = runs[k].map(lambda v: repr(labels.canon((v,))))
        return bool(values.groupby(fkey).nunique().max() > 1)

    return [k for k in keys if splits(k)]


def _hue_keys(
    df: pd.DataFrame,
    runs: pd.DataFrame,
    first: pd.DataFrame,
    s: ReportSettings,
    strict_keys: Collection[str],
    differing: list[str],
) -> tuple[list[str], bool]:
    """The columns that colour the variants, and whether the layout named them."""
    if s.hue is None:
        # The loss type names a variant even when it does not vary (a grid over other keys then
        # reads "dapo, ε 0.2/0.28" rather than "all runs").
        lt = "trainer.loss_type" if "trainer.loss_type" in runs.columns else None
        hue_keys = [lt] if lt else list(differing)
    else:
        hue_keys = [_key_column(df, k, k in strict_keys) for k in s.hue]
        for k in hue_keys:
            if k not in runs.columns:
                runs[k] = first[k] if k in first.columns else np.nan
    return [_dotted(df, k) if _dotted(df, k) in runs.columns else k for k in hue_keys], s.hue is not None


def _left_out_and_notes(
    df: pd.DataFrame, runs: pd.DataFrame, data: ReportData, unreadable: dict[str, int]
) -> list[str]:
    """List every run the report does not count in ``data.left_out``, one line with its state and
    step (a diverged run's step and metric written back into ``runs``); return the notes on the
    counted runs (unreadable files, missing steps, no learning signal)."""
    for rid, r in runs[(runs["state"] != states.DONE) | (runs["problem"] != "")].iterrows():
        step = None if pd.isna(r["last_step"]) else int(r["last_step"])
        if r["state"] == states.DIVERGED:
            marker = _as_int(r["marker_step"])
            dstep, dmetric = states.divergence_point(
                df, rid, marker, r["diverged_metric"] if isinstance(r["diverged_metric"], str) else None
            )
            runs.at[rid, "marker_step"] = dstep
            runs.at[rid, "diverged_metric"] = dmetric
            text = states.describe(r["state"], step=dstep, max_steps=r["max_steps"], metric=dmetric)
            if step is not None and dstep > step + 1:
                text += f"; its metrics end at step {step}"
        elif r["state"] == states.DONE:
            text = f"done, but {r['problem']}: not counted"
        else:
            text = states.describe(r["state"], step=step, max_steps=r["max_steps"])
        data.left_out.append(
            f"`{rid}` ({_where(r, data)}): {text}" + ("; included, marked" if r["included"] else "")
        )
    notes = [
        f"`{rid}` ({_where(runs.loc[rid], data)}): {unreadable[rid]} metrics file(s) unreadable (see Files "
        "not loaded), so some of its steps are missing from its numbers"
        for rid in runs.index[runs["included"]]
        if rid in unreadable
    ]
    for rid, r in runs[runs["included"] & ((runs["missing_steps"] > 0) | runs["no_signal"])].iterrows():
        if r["missing_steps"]:
            notes.append(
                f"`{rid}` ({_where(r, data)}): {r['missing_steps']} step(s) without metrics "
                "(a metrics file was unreadable and set aside)"
            )
        if r["no_signal"]:
            why = "zero reward variance in every group" if r["zero_variance"] else "grad_norm 0 on every step"
            notes.append(
                f"`{rid}` ({_where(r, data)}): no learning signal ({why}); never counted as improved"
            )
    return notes


def _included_rows(df: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of the counted runs, with their variant, panel and panel-row labels as ordered
    categoricals; rows are selected and labelled per run, through the run id's codes."""
    rid = df[layout.RUN_ID]
    run_names = [str(c) for c in rid.cat.categories]
    codes = rid.cat.codes.to_numpy()
    included_ids = set(runs.index[runs["included"]])
    mask = np.isin(codes, [k for k, name in enumerate(run_names) if name in included_ids])
    work = df.copy(deep=False) if mask.all() else df[mask].copy()
    work.attrs = dict(df.attrs)
    work_codes = codes[mask] if not mask.all() else codes
    for name in (VARIANT, PANEL, PANEL_ROW):
        if name in runs.columns:
            per_code = runs[name].reindex(run_names)
            label_codes = np.asarray(pd.Categorical(per_code, categories=runs[name].cat.categories).codes)
            work[name] = pd.Categorical.from_codes(
                label_codes[work_codes], categories=runs[name].cat.categories, ordered=True
            )
    return work


def _orders(data: ReportData, runs: pd.DataFrame, inc: pd.DataFrame) -> None:
    """The variants, panels and panel rows that counted runs use, in label order, and the colours."""

    def used_labels(name: str) -> list[str]:
        used = set(inc[name].astype(str))
        return [str(c) for c in runs[name].cat.categories if str(c) in used]

    data.hue_order = used_labels(VARIANT) if data.hue else []
    data.col_values = used_labels(PANEL) if data.col else [None]
    data.row_values = used_labels(PANEL_ROW) if data.row else [None]
    data.colors = style.variant_colors(data.hue_order or ["all"])


def _compared_lines(
    df: pd.DataFrame, inc: pd.DataFrame, data: ReportData, keys: _Keys, notes: list[str]
) -> None:
    """The report's opening lines: what is compared, against which baseline, over how many runs."""
    curve_keys = [c for c in (VARIANT, PANEL, PANEL_ROW) if c in inc.columns]
    per_variant = inc.groupby(curve_keys, observed=True).size() if curve_keys else pd.Series([len(inc)])
    seeds = seed_column(df)
    lines = data.lines
    lines.append(
        "Compared: "
        + (f"{data.legend_title} ({' | '.join(data.hue_order)})" if data.hue else "all runs")
        + (f", in panels by {labels.titles([_dotted(df, k) for k in keys.col])}" if keys.col else "")
        + (f" and rows by {labels.titles([_dotted(df, k) for k in keys.row])}" if keys.row else "")
        + (f"; baseline {data.baseline}" if data.baseline else "; no baseline")
        + (
            f"; {_count_range(per_variant)} {'' if data.settings.include_unfinished else 'finished '}run(s) per curve"
            if len(inc)
            else "; no finished run"
        )
        + (f" (differing in {seeds})." if seeds and len(per_variant) and per_variant.max() > 1 else ".")
    )
    if len(inc) and per_variant.max() < 2:
        lines.append("With one run per curve there are no confidence intervals.")
    if data.settings.include_unfinished and (inc["state"] != states.DONE).any():
        lines.append(
            f"{int((inc['state'] != states.DONE).sum())} run(s) that did not finish are included "
            '(`--include-unfinished`), marked in the tables ("of which not finished") and on the final-score '
            "figure."
        )
    task = next((c for c in ("task.name", "task") if c in inc.columns), None)
    if task and task not in keys.faceted and inc[task].astype(str).nunique() > 1:
        lines.append(
            f"Note: these runs are on different tasks ({', '.join(sorted(inc[task].astype(str).unique()))}); "
            "final scores are compared within each task (stratified), curves and figures mix them: "
            f"`--col {task}` draws them apart."
        )
    lines.extend(f"Note: {n}." for n in notes)


def _check_wseq_split(work: pd.DataFrame, data: ReportData, *, strict: bool) -> None:
    """Note (or, ``strict``: raise :class:`ReportError` naming the choices) a w_seq split by a
    column that no counted run recorded."""
    split = data.settings.wseq_split
    if not split or (split in work.columns and work[split].notna().any()):
        return
    if strict:
        choices = [
            c for c in (layout.REUSE_INDEX, layout.POLICY_LAG) if c in work.columns and work[c].notna().any()
        ]
        raise ReportError(
            f"--wseq-split {split!r}: no counted run recorded it; "
            + (f"split by {' or '.join(choices)}" if choices else "these runs recorded no reuse index")
        )
    data.lines.append(f"Note: no run recorded `{split}`, so the w_seq figure is not split by it.")


def _on_policy_panels(work: pd.DataFrame, inc: pd.DataFrame, data: ReportData) -> np.ndarray:
    """Which rows are off-policy steps (returned), and which panels have none (``data.on_policy``)."""
    off, data.off_policy_how = off_policy_rows(work)
    facet_cols = [c for c in (data.col, data.row) if c]
    if not facet_cols:
        if not off.any():
            data.on_policy.append((None, None))
        return off
    # facets are per run: whether each run has an off-policy step, then any per facet
    rid_cats = work[layout.RUN_ID].cat.categories
    n_off = np.bincount(work[layout.RUN_ID].cat.codes.to_numpy()[off], minlength=len(rid_cats))
    run_off = pd.Series(n_off > 0, index=pd.Index([str(c) for c in rid_cats], dtype=object))
    any_off = run_off.reindex(inc.index, fill_value=False).groupby(tables.joined_keys(inc, facet_cols)).any()
    for key, is_off in any_off.items():
        if not is_off:
            parts = key.split("\x1f") if len(facet_cols) > 1 else [key]
            data.on_policy.append((parts[0] if data.col else None, parts[-1] if data.row else None))
    return off


#: TRL's own loss types, whose ``<loss type>/...`` metrics (``vespo/phi_seq_mean``) are TRL's, not a
#: plugin's: harness.trl_boundary.KNOWN_LOSS_TYPES (analysis takes only the layout and schema from
#: harness; tests/test_analysis_report.py checks the two agree).
TRL_LOSS_TYPES = frozenset({"grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"})


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


def _metric_notes(work: pd.DataFrame, runs: pd.DataFrame, data: ReportData) -> tuple[list[str], list[str]]:
    """The curve and dynamics metrics the runs logged (returned), with a note on each asked-for
    metric or split that none did, and on runs without the x axis's values."""
    s, lines = data.settings, data.lines
    curve_metrics = [m for m in (list(s.curves) or [s.metric]) if m in work.columns]
    for m in list(s.curves) or [s.metric]:
        if m not in work.columns:
            lines.append(f"Note: no run logged `{m}`; its curve is not drawn.")
    dyn_metrics = [m for m in s.metrics if m in work.columns and work[m].notna().any()]
    data.dynamics_missing = [m for m in s.metrics if m not in dyn_metrics]
    dyn_metrics = merge_plugin_metrics(dyn_metrics, plugin_metrics(work))
    if s.x != "step":
        x_missing = runs.index[runs["included"]].difference(
            pd.Index(work.loc[~np.isnan(x_values(work, s.x)), layout.RUN_ID].astype(str).unique())
        )
        if len(x_missing):
            lines.append(
                f"Note: {len(x_missing)} run(s) recorded no {agg_mod.X_LABELS[s.x]} and are not in the curves: "
                + ", ".join(f"`{r}`" for r in x_missing[:10])
                + (" ..." if len(x_missing) > 10 else "")
                + "."
            )
    return curve_metrics, dyn_metrics


def _numbers(
    work: pd.DataFrame,
    df: pd.DataFrame,
    runs: pd.DataFrame,
    flags: pd.DataFrame,
    off: np.ndarray,
    data: ReportData,
    keys: _Keys,
) -> None:
    """Every curve, band and table of ``data``, computed on a thread pool: they are independent of
    each other, and numpy and pandas release the GIL in their loops."""
    s = data.settings
    curve_metrics, dyn_metrics = _metric_notes(work, runs, data)
    by = [c for c in (data.hue, data.col, data.row) if c]
    dyn_by = [b for b in (data.hue, data.col) if b]
    timing_by = [*by, AT_ONCE] if _add_at_once(work, runs) else list(by)
    split = s.wseq_split if s.wseq_split in work.columns and work[s.wseq_split].notna().any() else None

    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    # The products in the bootstrap are small: BLAS threads would only spin against the pool's.
    with (
        threadpool_limits(limits=1, user_api="blas"),
        ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool,
    ):
        curve_index = pool.submit(agg_mod.frame_index, work, by, s.x)
        dyn_index = curve_index if dyn_by == by else pool.submit(agg_mod.frame_index, work, dyn_by, s.x)
        jobs = _table_jobs(pool, work, data, by, timing_by, flags)
        ci_, di_ = curve_index.result(), dyn_index.result()
        jobs["wseq"] = pool.submit(
            curves.wseq_bands, work, by=dyn_by, x=s.x, rows=off, smoothing=s.smoothing, split=split, index=di_
        )
        curve_jobs = {m: pool.submit(_curves_of, work, m, s, off, by, ci_, s.seeds) for m in curve_metrics}
        dyn_jobs = {m: pool.submit(_curves_of, work, m, s, off, dyn_by, di_) for m in dyn_metrics}
        absent_jobs = (
            {m: pool.submit(_not_logged, work, m, data.hue_order) for m in dyn_metrics} if data.hue else {}
        )
        diverged = runs[(runs["state"] == states.DIVERGED)]
        for m, job in curve_jobs.items():
            data.curve_sets[m] = job.result()
            data.marks[m], data.mark_runs[m] = _divergence_marks(df, runs, diverged, m, data)
        data.dynamics = {m: job.result() for m, job in dyn_jobs.items()}
        data.dynamics_absent = {m: absent for m, job in absent_jobs.items() if (absent := job.result())}
        results = {k: job.result() for k, job in jobs.items()}
    inc = runs[runs["included"]]
    data.syncs = _sync_marks(inc, data, int(work[layout.STEP].max())) if s.x == "step" else {}
    data.wseq = results["wseq"]
    _finish_tables(data, results, df, runs, by, timing_by, keys)


def _add_at_once(work: pd.DataFrame, runs: pd.DataFrame) -> bool:
    """Add the :data:`AT_ONCE` column (how many runs shared the machine, a label per run) to
    ``work`` (per row) and ``runs`` (per run id) in place, when the runs recorded it; returns
    whether they did."""
    at_once = _at_once(work)
    if at_once is None:
        return False
    per_run = pd.Categorical(at_once.reindex(work[layout.RUN_ID].cat.categories).fillna("unknown"))
    work[AT_ONCE] = pd.Categorical.from_codes(
        np.asarray(per_run.codes)[work[layout.RUN_ID].cat.codes.to_numpy()], categories=per_run.categories
    )
    runs[AT_ONCE] = at_once.reindex(runs.index).fillna("unknown")
    return True


def _curves_of(
    work: pd.DataFrame,
    metric: str,
    s: ReportSettings,
    off: np.ndarray,
    group_by: list[str],
    index: agg_mod.FrameIndex,
    keep_runs: bool = False,
) -> Curves:
    """The report's curves of ``metric`` grouped by ``group_by``; a ratio metric over the
    off-policy rows ``off`` (bool, shape ``(len(work),)``) only."""
    return agg_mod.curves(
        work,
        metric,
        x=s.x,
        by=group_by,
        ci=s.ci,
        smoothing=s.smoothing,
        rows=off if agg_mod.is_ratio_metric(metric) else None,
        keep_runs=keep_runs,
        index=index,
    )


def _table_jobs(
    pool: Any, work: pd.DataFrame, data: ReportData, by: list[str], timing_by: list[str], flags: pd.DataFrame
) -> dict[str, Any]:
    """The report's tables submitted to ``pool`` (a ``concurrent.futures`` executor): futures of
    ``timing``, ``final`` (the table and the per-run scores), ``check`` and, with a target,
    ``ttt``."""
    s = data.settings
    jobs = {
        "timing": pool.submit(
            tables.timing_table, work, by=timing_by, baseline=data.baseline, same=[AT_ONCE]
        ),
        "final": pool.submit(_final_tables, work, s.metric, by, data.baseline),
        "check": pool.submit(tables.learning_check, work, s.metric, by=by, signal=flags),
    }
    if s.target is not None:
        jobs["ttt"] = pool.submit(
            tables.time_to_target_table,
            work,
            s.target,
            metric=s.metric,
            by=by,
            baseline=data.baseline,
            smoothing=s.smoothing,
        )
    return jobs


def _final_tables(
    work: pd.DataFrame, metric: str, by: list[str], baseline: str | None
) -> tuple[pd.DataFrame, pd.Series]:
    """The final-performance table and the per-run scores it rests on."""
    scores = tables.final_scores(work, metric)
    return tables.final_performance_table(work, metric, by=by, baseline=baseline, scores=scores), scores


def _not_logged(work: pd.DataFrame, metric: str, hue_order: list[str]) -> list[str]:
    """The variants that never log ``metric`` (VESPO has no clip fraction), to say so."""
    codes = work[VARIANT].cat.codes.to_numpy()
    present = ~np.isnan(work[metric].to_numpy(dtype=np.float64))
    counts = np.bincount(codes[present], minlength=len(work[VARIANT].cat.categories))
    logged = {str(work[VARIANT].cat.categories[k]) for k in np.flatnonzero(counts)}
    return [v for v in hue_order if v not in logged]


def _finish_tables(
    data: ReportData,
    results: dict[str, Any],
    df: pd.DataFrame,
    runs: pd.DataFrame,
    by: list[str],
    timing_by: list[str],
    keys: _Keys,
) -> None:
    """The tables with display names (and unfinished runs marked, per row of each: the timing
    table's rows also split by runs at once), the final scores per run and the performance
    profile."""
    s = data.settings
    names = _display_names(data, df, keys.col, keys.row)
    (data.final, scores), data.timing, data.check = results["final"], results["timing"], results["check"]
    data.summary = tables.learning_summary(data.check, by=by)
    for t in (data.timing, data.final, data.summary):
        t.attrs.setdefault("display", {}).update(names)
    if s.include_unfinished:
        for t, t_by in ((data.timing, timing_by), (data.final, by), (data.summary, by)):
            _mark_unfinished(t, runs, t_by)
        data.check.insert(1, "state", data.check[layout.RUN_ID].map(runs["state"]))
    if s.target is not None:
        data.ttt = results["ttt"]
        data.ttt.attrs.setdefault("display", {}).update(names)
    scores.index = scores.index.astype(object)
    sc = runs.loc[runs["included"], list(by)].copy()
    for b in by:
        sc[b] = sc[b].astype(str)
    sc["score"] = scores.reindex(sc.index)
    sc["state"] = runs.loc[sc.index, "state"].astype(str)
    data.scores = sc.dropna(subset=["score"])
    data.profile = finals.profile_frame(data.scores, [b for b in (data.hue, data.col) if b])
    data.resolvable = tables.resolvable_differences(
        data.scores, data.hue, [b for b in (data.col, data.row) if b]
    )


def _done_problems(runs: pd.DataFrame, metric: str | None) -> list[str]:
    """Why each run with a DONE marker is not a finished result ("" when it is one, or not DONE):
    contradicting markers, a DONE marker or metrics that stop before ``max_steps`` (unless DONE
    lists the missing steps), or no value of the score ``metric`` at all (not asked when
    ``metric`` is None: a finding reads its own metric)."""
    done = (runs["state"] == states.DONE).to_numpy()
    max_steps = np.array([np.nan if v is None else float(v) for v in runs["max_steps"]], dtype=np.float64)
    marker = np.array([np.nan if (m := _as_int(v)) is None else float(m) for v in runs["marker_step"]])
    last = runs["last_step"].to_numpy(dtype=np.float64)
    out = [""] * len(runs)
    flagged = np.flatnonzero(
        done
        & (
            (runs["conflict"] != "").to_numpy()
            | (marker < max_steps)
            | ((last < max_steps) & (runs["missing_steps"] == 0).to_numpy())
            | (~runs["scored"].to_numpy(dtype=bool) if metric is not None else False)
        )
    )
    for k in flagged:
        if runs["conflict"].iloc[k]:
            out[k] = runs["conflict"].iloc[k]
        elif marker[k] < max_steps[k]:
            out[k] = f"its DONE marker says {int(marker[k])} of {int(max_steps[k])} steps"
        elif last[k] < max_steps[k] and not runs["missing_steps"].iloc[k]:
            out[k] = f"its metrics end at step {int(last[k])} of {int(max_steps[k])}"
        else:
            out[k] = f"no {metric} logged"
    return out


def _as_int(v: Any) -> int | None:
    """A config or marker value as a step count, or None when it is not a finite whole number."""
    if isinstance(v, bool) or labels.is_missing(v):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return int(f) if np.isfinite(f) and f.is_integer() and f >= 0 else None


def _count_range(counts: pd.Series) -> str:
    lo, hi = int(counts.min()), int(counts.max())
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def _where(r: pd.Series, data: ReportData) -> str:
    parts = [
        str(r[c])
        for c in (VARIANT, PANEL, PANEL_ROW)
        if c in r.index and getattr(data, {VARIANT: "hue", PANEL: "col", PANEL_ROW: "row"}[c])
    ]
    return "; ".join(parts) if parts else "all runs"


def _display_names(data: ReportData, df: pd.DataFrame, col_keys, row_keys) -> dict[str, str]:
    out = {}
    if data.col:
        out[PANEL] = labels.titles([_dotted(df, k) for k in col_keys])
    if data.row:
        out[PANEL_ROW] = labels.titles([_dotted(df, k) for k in row_keys])
    return out


def _mark_unfinished(table: pd.DataFrame, runs: pd.DataFrame, by: list[str]) -> None:
    """Add a column counting the included runs that did not finish, per table row."""
    if table is None or table.empty or not by:
        return
    inc = runs[runs["included"]]
    unfinished = (inc["state"] != states.DONE).groupby(tables.joined_keys(inc, by)).sum()
    tkey = pd.Series(tables.joined_keys(table, by))
    table["not_finished"] = tkey.map(unfinished).fillna(0).astype(int).to_numpy()
    table.attrs.setdefault("display", {})["not_finished"] = "of which not finished"


def _at_once(work: pd.DataFrame) -> pd.Series | None:
    """Per run: how many runs shared its CPUs/GPU while it trained (mean over its steps, rounded)."""
    column = layout.CONCURRENT_RUNS
    if column not in work.columns or work[column].isna().all():
        return None
    codes = work[layout.RUN_ID].cat.codes.to_numpy()
    v = work[column].to_numpy(dtype=np.float64)
    ok = ~np.isnan(v)
    n = len(work[layout.RUN_ID].cat.categories)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(codes[ok], weights=v[ok], minlength=n) / np.bincount(codes[ok], minlength=n)
    labels_ = ["unknown" if np.isnan(m) else str(int(round(m))) for m in mean]
    return pd.Series(labels_, index=work[layout.RUN_ID].cat.categories)


def _baseline_label(
    inc: pd.DataFrame,
    df: pd.DataFrame,
    hue: str | None,
    text: str | None,
    lines: list[str],
    label_keys: Sequence[str] = (),
    *,
    runs: pd.DataFrame | None = None,
    strict: bool = False,
) -> str | None:
    """The variant label of the baseline runs among the included runs, or None (with a note).

    ``text`` None is the default, ``loss_type=grpo``, which says nothing when no run matches in a
    grid that does not compare loss types; a baseline the user gave always says why it was not
    found.

    Raises:
        ReportError: ``strict`` (typed on the command line) and ``text`` names no variant, no key or
            no value of any run with metrics (``runs``); the message lists what would.
    """
    explicit = text is not None
    text = text if explicit else "loss_type=grpo"
    if hue is None or inc.empty:
        return None
    every = inc if runs is None else runs
    pairs = _baseline_pairs(text)
    if pairs is None:
        return _baseline_by_name(text, inc, every, lines, strict=strict)
    matched = _match_baseline(
        text, pairs, inc, every, df, lines, label_keys, strict=strict, explicit=explicit
    )
    if matched is None:
        return None
    match, match_any = matched
    hit = inc.loc[match, VARIANT].astype(str)
    if hit.empty:
        if strict and not match_any.any():
            key = pairs[0][0]
            col = _resolve_column(df, key)
            raise ReportError(
                f"--baseline {text!r}: no run has it; {key} is "
                + ", ".join(sorted({labels.format_value(v) for v in every[col]}))
                + " in these runs"
            )
        if explicit or "loss_type" in df.columns:  # the default is news only where loss types vary
            _note(lines, f"no finished run has {text}; no baseline")
        return None
    other = [k for k, _ in pairs if _dotted(df, _resolve_column(df, k)) not in label_keys]
    if other:
        _note(
            lines,
            f"baseline keys {', '.join(other)} do not name a variant (they are panels or constant), so they only "
            "choose its label; each panel compares with that label in the same panel",
        )
    counts = hit.value_counts()
    value = pairs[0][1] if len(pairs) == 1 else None
    if value is not None and value in counts.index:
        return value
    if len(counts) > 1:
        _note(lines, f"baseline {text} spans {len(counts)} variants; using {counts.index[0]!r}")
    return str(counts.index[0])


def _baseline_by_name(
    text: str, inc: pd.DataFrame, every: pd.DataFrame, lines: list[str], *, strict: bool
) -> str | None:
    """A baseline given as a variant label: ``text`` if an included run has it, else None with a
    note.

    Raises:
        ReportError: ``strict`` and no run of ``every`` has that label.
    """
    if text in {str(v) for v in inc[VARIANT].astype(str).unique()}:
        return text
    if strict and text not in set(every[VARIANT].astype(str)):
        raise ReportError(
            f"--baseline {text!r} names no variant; give one of "
            + ", ".join(repr(v) for v in every[VARIANT].astype(str).unique())
            + " or KEY=VALUE (e.g. loss_type=grpo)"
        )
    _note(lines, f"no finished variant is labelled {text!r}; no baseline")
    return None


def _match_baseline(
    text: str,
    pairs: Sequence[tuple[str, str]],
    inc: pd.DataFrame,
    every: pd.DataFrame,
    df: pd.DataFrame,
    lines: list[str],
    label_keys: Sequence[str],
    *,
    strict: bool,
    explicit: bool,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Which included runs (``inc``) and which runs of ``every`` have every ``KEY=VALUE`` of
    ``pairs``: two bool arrays, or None (with a note when ``explicit``) when a key is not a
    setting of these runs.

    Raises:
        ReportError: ``strict`` and a key is not a setting of these runs.
    """
    match = np.ones(len(inc), dtype=bool)
    match_any = np.ones(len(every), dtype=bool)
    for key, value in pairs:
        try:
            col = _resolve_column(df, key)
        except ReportError:
            col = None
        if col is None or col not in inc.columns:
            if strict:
                raise ReportError(
                    f"--baseline {text!r}: {key!r} is not a setting of these runs; keys that tell variants apart: "
                    + (", ".join(_dotted(df, k) for k in label_keys) or "none")
                )
            if explicit:
                _note(lines, f"baseline key {key!r} is not a setting of these runs; no baseline")
            return None
        match &= inc[col].map(lambda v, t=value: _value_matches(v, t)).to_numpy(dtype=bool)
        match_any &= every[col].map(lambda v, t=value: _value_matches(v, t)).to_numpy(dtype=bool)
    return match, match_any


def _value_matches(v: Any, text: str) -> bool:
    """Whether config value ``v`` is what ``text`` (from ``--baseline``) says: ``2``, ``2.0`` and
    ``2`` agree; ``false``/``False`` match False; strings compare as written."""
    if labels.is_missing(v):
        return text.lower() in ("none", "null", "(none)", "")
    if labels.format_value(v) == text or str(v) == text:
        return True
    try:
        import yaml

        parsed = yaml.safe_load(text)
    except Exception:  # noqa: BLE001 - any unparsable text is simply not this value
        return False
    if isinstance(v, (bool, np.bool_)) or isinstance(parsed, bool):
        return isinstance(parsed, bool) and isinstance(v, (bool, np.bool_)) and bool(v) == parsed
    if isinstance(parsed, (int, float)) and isinstance(v, (int, float, np.integer, np.floating)):
        return float(v) == float(parsed)
    return False


def _note(lines: list[str], text: str) -> None:
    print(f"report: {text}; pick one with --baseline KEY=VALUE", file=sys.stderr)
    lines.append(f"Note: {text} (pick one with `--baseline KEY=VALUE`).")


def _variants_table(
    runs: pd.DataFrame, keys: list[str], data: ReportData, placed: pd.DataFrame
) -> pd.DataFrame | None:
    """Each (variant, facet) label with the full values of the keys behind it, its finished runs
    and the others (runs with metrics that did not finish, and ``placed`` runs without metrics)."""
    if not keys and not data.col and not data.row:
        return None
    cols = [c for c in (VARIANT, PANEL, PANEL_ROW) if c in runs.columns]
    done = ((runs["state"] == states.DONE) & (runs["problem"] == "")).to_numpy()
    key_values = runs[keys] if keys else None
    without = Counter(tuple(str(v) for v in r) for r in placed[cols].itertuples(index=False))
    rows = []
    for key, pos in runs.groupby(cols, observed=True, sort=True).indices.items():
        key = tuple(str(k) for k in (key if isinstance(key, tuple) else (key,)))
        finished = int(done[pos].sum())
        rows.append(
            {
                **dict(zip(cols, key, strict=True)),
                "settings": labels.describe_combo(keys, list(key_values.iloc[pos[0]])) if keys else "",
                "finished": finished,
                "other": len(pos) - finished + without[key],
            }
        )
    return pd.DataFrame(rows)


def _divergence_marks(
    df: pd.DataFrame, runs: pd.DataFrame, diverged: pd.DataFrame, metric: str, data: ReportData
) -> tuple[list[curves.Mark], pd.DataFrame | None]:
    """A mark per diverged run at the step it diverged, and its own curve up to there."""
    if diverged.empty or metric not in df.columns:
        return [], None
    s = data.settings
    ids = set(diverged.index)
    part = df[df[layout.RUN_ID].astype(object).isin(ids).to_numpy()].copy()
    for name in (VARIANT, PANEL, PANEL_ROW):
        if name in runs.columns:
            part[name] = part[layout.RUN_ID].astype(object).map(runs[name].astype(str))
    by = [b for b in (data.hue, data.col, data.row) if b]
    c = agg_mod.curves(part, metric, x=s.x, by=by, smoothing=s.smoothing, keep_runs=True)
    xs = x_values(part, s.x)
    marks = []
    for rid, r in diverged.iterrows():
        own = c.runs[c.runs[layout.RUN_ID] == str(rid)] if c.runs is not None else pd.DataFrame()
        step = int(r["marker_step"]) if not pd.isna(r["marker_step"]) else None
        at = (part[layout.RUN_ID].astype(object) == rid).to_numpy() & (part[layout.STEP] == step).to_numpy()
        x = float(xs[at][0]) if at.any() else (float(own["x"].max()) if len(own) else float("nan"))
        y = float(own["y"].iloc[-1]) if len(own) else float("nan")
        marks.append(
            curves.Mark(
                hue=str(r[VARIANT]) if data.hue else None,
                col=str(r[PANEL]) if data.col else None,
                row=str(r[PANEL_ROW]) if data.row else None,
                x=x,
                y=y,
            )
        )
    return marks, c.runs


def _sync_marks(inc: pd.DataFrame, data: ReportData, last: int) -> dict[tuple[Any, Any], list[float]]:
    """Per facet: the steps at which TRL syncs the reference model, when every run there syncs alike.

    TRL's ``SyncRefModelCallback`` copies (``ref_model_mixup_alpha`` = 1) or mixes the policy into the
    reference after every ``ref_model_sync_steps``-th optimizer step.
    """
    sync, period = "trainer.sync_ref_model", "trainer.ref_model_sync_steps"
    if sync not in inc.columns or period not in inc.columns:
        return {}
    out: dict[tuple[Any, Any], list[float]] = {}
    keys = [c for c in (PANEL, PANEL_ROW) if c in inc.columns]
    groups = inc.groupby(keys, observed=True) if keys else [((), inc)]
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        on = part[sync].map(lambda v: bool(v) if not labels.is_missing(v) else False)
        periods = set(part.loc[on, period].dropna().astype(int))
        if not on.all() or len(periods) != 1:
            continue
        n = periods.pop()
        if n <= 0:
            continue
        cv = str(key[0]) if data.col else None
        rv = str(key[-1]) if data.row else None
        out[(cv, rv)] = [float(k) for k in range(n, last + 1, n)]
    return out


def render_report(data: ReportData, out: Path) -> list[str]:
    """Draw and write everything of ``data`` into ``out``; returns ``index.md``'s lines."""
    s = data.settings
    lines = [f"# Report: {data.title}", ""]
    lines.extend(data.lines)
    lines.append("")
    if data.left_out:
        lines.extend(["## Runs left out" if not s.include_unfinished else "## Runs that did not finish", ""])
        lines.append(
            "With `--include-unfinished`, tables and figures also count the runs below that have metrics "
            '(each says "included, marked"); the others are left out:'
            if s.include_unfinished
            else "Tables and figures count finished runs only; these are left out "
            "(`--include-unfinished` adds those with metrics, marked):"
        )
        lines.append("")
        lines.extend(f"- {line}" for line in data.left_out)
        lines.append("")
    if data.empty:
        lines.append(
            "No metrics yet: nothing to plot."
            if data.runs.empty
            else "No metrics of finished runs yet: nothing to plot."
        )
        lines.append("")
        lines.extend(_findings_section(data, out))  # each finding still says what it lacks
        return lines

    first, then = (
        (_final_section, _curve_sections) if s.lead == "final" else (_curve_sections, _final_section)
    )
    parts = (
        _findings_section,
        first,
        then,
        _dynamics_section,
        _wseq_section,
        _aggregate_sections,
        _table_sections,
    )
    for part in parts:
        lines.extend(part(data, out))
    return lines


def _section(lines: list[str], title: str, what: str) -> None:
    lines.extend([f"## {title}", "", what, ""])


def _figure_section(lines: list[str], fig: Any, path: Path, alt: str, title: str, what: str) -> None:
    """Save ``fig`` as ``path`` (.png and .pdf) and add its section to ``lines``: title, caption
    (with how many points the y-limits cut, if any), image."""
    cut = style.points_beyond_y(fig)
    if cut:
        where = (
            f" ({'; '.join(f'{t}: {n}' for t, n in cut.items())})" if len(cut) > 1 or "" not in cut else ""
        )
        what += (
            f" The y-range holds the bulk of the values drawn (1st-99th percentile): {sum(cut.values())} point(s) "
            f"of the lines or bands lie beyond it{where} and are cut at its edge."
        )
    style.save(fig, path)
    _section(lines, title, what)
    lines.extend([f"![{alt}]({path.name}.png)", ""])


def _curve_sections(data: ReportData, out: Path) -> list[str]:
    """The learning-curve figures, one section each."""
    s = data.settings
    lines: list[str] = []
    for m, c in data.curve_sets.items():
        fig, _ = curves.plot_curve_set(
            c,
            **data.panels(),
            marks=data.marks.get(m, []),
            mark_runs=data.mark_runs.get(m),
            syncs=data.syncs,
            seeds=s.seeds,
            legend_title=data.legend_title,
            baseline=data.baseline,
        )
        stem = f"{_safe(m)}_{s.x}"
        extra = ""
        if data.marks.get(m):
            extra += " Dashed with × : a run that diverged, up to the step it diverged " + (
                "(also in the mean, `--include-unfinished`)."
                if s.include_unfinished
                else "(not in the mean)."
            )
        if s.include_unfinished and (data.runs.loc[data.runs["included"], "state"] != states.DONE).any():
            extra += " Runs that did not finish are in the mean up to their last logged step."
        if data.syncs:
            extra += " Dotted verticals: reference-model syncs."
        if s.seeds:
            extra += " Faint lines: each run."
        if agg_mod.is_ratio_metric(m):
            extra += " Off-policy steps only."
        if data.hue and not data.col and not data.row and len(data.hue_order) > curves.MAX_LINES:
            extra += (
                f" {len(data.hue_order)} variants: one panel each, in its colour with its band"
                + (f", {data.baseline} (the baseline) dashed black" if data.baseline else "")
                + ", the others light grey behind."
            )
        _figure_section(
            lines,
            fig,
            out / stem,
            m,
            f"{m} vs {agg_mod.X_LABELS[s.x]}",
            f"Compares the {m} learning curves of the variants. {c.caption}{extra}",
        )
        lines.extend([f"PDF: [{stem}.pdf]({stem}.pdf)", ""])
    return lines


def _final_section(data: ReportData, out: Path) -> list[str]:
    """The final-score figure."""
    s = data.settings
    lines: list[str] = []
    if data.scores is None or data.scores.empty:
        return lines
    fig, _ = finals.plot_final(
        data.scores,
        data.final,
        metric=s.metric,
        **data.panels(),
    )
    _figure_section(
        lines,
        fig,
        out / "final",
        "final",
        f"Final {s.metric} per variant",
        f"Compares where the variants end: one dot per run (its final score: {_score_rule(s.metric)}), "
        "the bar is the mean's 95% percentile-bootstrap interval over runs, as in the Final performance "
        "table (a hollow circle: one run, no interval). " + _scores_note(data, marked=True),
    )
    return lines


def _scores_note(data: ReportData, *, marked: bool = False) -> str:
    """How many runs each variant's final score pools, and which of them did not finish."""
    by = [b for b in (data.hue, data.col, data.row) if b]
    counts = data.scores.groupby(by, observed=True).size() if by else pd.Series([len(data.scores)])
    text = f"{_count_range(counts)} run(s) per variant."
    other = data.scores["state"] != states.DONE
    if other.any():
        diverged = int((data.scores["state"] == states.DIVERGED).sum())
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


def _dynamics_section(data: ReportData, out: Path) -> list[str]:
    """The training-dynamics figure."""
    s = data.settings
    lines: list[str] = []
    if data.dynamics:
        fig, _ = curves.plot_panels(
            _frame_for_panels(data),
            list(data.dynamics),
            x=s.x,
            hue=data.hue,
            col=data.col,
            colors=data.colors,
            on_policy=[cv for cv, _ in data.on_policy],
            legend_title=data.legend_title,
            aggs=data.dynamics,
        )
        ratio = [m for m in data.dynamics if agg_mod.is_ratio_metric(m)]
        _figure_section(
            lines,
            fig,
            out / f"dynamics_{s.x}",
            "dynamics",
            "Training dynamics",
            "Compares what the losses do to the policy: "
            + ", ".join(labels.metric_label(m) for m in data.dynamics)
            + (
                f". Not logged by any of these runs, so not drawn: {', '.join(data.dynamics_missing)}"
                if data.dynamics_missing
                else ""
            )
            + "".join(
                f". {labels.metric_label(m)}: not logged by {', '.join(v)}"
                for m, v in data.dynamics_absent.items()
            )
            + ". Same line, band and smoothing as the curves above"
            + (f"; {', '.join(ratio)} over off-policy steps only ({_off_policy_text(data)})" if ratio else "")
            + ".",
        )
    return lines


def _wseq_section(data: ReportData, out: Path) -> list[str]:
    """The w_seq figure."""
    s = data.settings
    lines: list[str] = []
    fig, _ = curves.plot_wseq(
        bands=data.wseq,
        hue=data.hue,
        x=s.x,
        colors=data.colors,
        col=data.col,
        split=s.wseq_split if data.wseq is not None and s.wseq_split in data.wseq.columns else None,
        hue_order=data.hue_order or None,
        col_values=data.col_values if data.col else None,
        on_policy=[cv for cv, _ in data.on_policy],
    )
    skipped = [cv for cv, _ in data.on_policy if cv is not None]
    infinite = (
        {q: int(np.isinf(data.wseq[q].to_numpy(dtype=float)).sum()) for q in ("p05", "p95")}
        if data.wseq is not None and len(data.wseq)
        else {}
    )
    _figure_section(
        lines,
        fig,
        out / "w_seq",
        "w_seq",
        "Sequence importance ratio w_seq",
        "How far each variant's sequence-level ratio w_seq = pi_theta / pi_old (product over the completion's "
        "tokens) drifts from 1, over off-policy steps only ("
        + _off_policy_text(data)
        + "): per step, the median "
        "over runs of each run's p05-p95 of w_seq over its completions (band) and p50 (line), each run smoothed "
        "on the log scale as the curves above; log axis fitted to the values drawn."
        + (f" Left out, on-policy throughout (w_seq ≡ 1): {'; '.join(map(str, skipped))}." if skipped else "")
        + (
            f" At {infinite['p95']} point(s) the p95 is beyond float range (w_seq = inf) and at {infinite['p05']} "
            "the p05 underflows to 0: drawn at the top or bottom edge."
            if sum(infinite.values())
            else ""
        ),
    )
    return lines


def _aggregate_sections(data: ReportData, out: Path) -> list[str]:
    """The rliable-style aggregate estimates and the performance profile."""
    s = data.settings
    lines: list[str] = []
    if data.final is None or data.final.empty:
        return lines
    by = [b for b in (data.hue, data.col, data.row) if b]
    table = _in_panel_order(data.final, data)
    names = [" · ".join(str(r[b]) for b in by) or "all" for _, r in table.iterrows()]
    colors = [data.colors.get(str(r[data.hue]), "0.3") if data.hue else "0.3" for _, r in table.iterrows()]
    fig, _ = finals.plot_aggregate(table, metric=s.metric, names=names, colors=colors, baseline=data.baseline)
    _figure_section(
        lines, fig, out / "aggregate", "aggregate", "Aggregate estimates", _aggregate_caption(data)
    )
    fig, _ = finals.plot_profile(
        data.profile,
        metric=s.metric,
        hue=data.hue,
        col=data.col,
        colors=data.colors,
        hue_order=data.hue_order or None,
        col_values=data.col_values if data.col else None,
        legend_title=data.legend_title,
    )
    _figure_section(
        lines,
        fig,
        out / "performance_profile",
        "performance profile",
        "Performance profile",
        f"Fraction of runs whose final {s.metric} exceeds each threshold τ (Agarwal et al. 2021): a curve "
        "further right is better across runs, not only on average. Shaded: each curve's 95% "
        f"stratified-bootstrap band ({data.profile.attrs.get('reps', 0):,} resamples of the variant's runs, "
        "seed 0, the percentile interval at each τ; as rliable's create_performance_profile); none for a "
        "variant with one run. With few runs per variant the steps are coarse and the bands wide. "
        + _scores_note(data),
    )
    return lines


def _in_panel_order(table: pd.DataFrame, data: ReportData) -> pd.DataFrame:
    """``table``'s rows panel by panel in the figures' order (row, then col values), variants in
    their order within each."""
    rank = {
        data.row: {v: k for k, v in enumerate(data.row_values)},
        data.col: {v: k for k, v in enumerate(data.col_values)},
        data.hue: {v: k for k, v in enumerate(data.hue_order)},
    }
    order = [b for b in (data.row, data.col, data.hue) if b]
    if not order:
        return table
    return table.sort_values(order, key=lambda c: c.astype(str).map(rank[c.name]), kind="stable")


def _aggregate_caption(data: ReportData) -> str:
    """What the aggregate-estimates figure shows."""
    return (
        f"Final {data.settings.metric} per variant as interval estimates (Agarwal et al. 2021): mean and IQM over "
        "runs with 95% percentile-bootstrap intervals (the Final performance table's)"
        + (
            f", and the probability that a run of the variant beats a run of {data.baseline} in the same panel "
            "(0.5 = no difference)"
            if data.baseline
            else ""
        )
        + ". A hollow circle has no interval (one run)"
        + ("; the baseline's own row in the last panel is empty" if data.baseline else "")
        + (
            "; with fewer than 4 runs per variant nothing is trimmed, so the IQM equals the mean"
            if data.final is not None and len(data.final) and data.final["runs"].max() < 4
            else ""
        )
        + ". "
        + _scores_note(data)
    )


def power_lines(data: ReportData) -> list[str]:
    """The line under the final-performance table, one per panel (or one overall): which
    differences of final score the runs' seeds cannot resolve (``data.resolvable``, from
    :func:`analysis.tables.resolvable_differences`, whose power and level it states)."""
    table = data.resolvable
    if table is None or table.empty:
        return []
    metric = data.settings.metric
    power, alpha = table.attrs.get("power", 0.8), table.attrs.get("alpha", 0.05)
    facets = [c for c in (data.col, data.row) if c]
    out = []
    for r in table.to_dict("records"):
        where = ", ".join(str(r[c]) for c in facets)
        head = f"Panel {where}: with" if facets else "With"
        lo, hi = int(r["n_min"]), int(r["n_max"])
        n = f"{lo}" if lo == hi else f"{lo}-{hi}"
        seeds = f"{n} seed{'s' if hi != 1 else ''} per variant"
        part = _panel_scores(data, r, facets)
        unfinished = _unfinished_text(part)
        if lo < 2 or not np.isfinite(r["resolvable"]):
            among = _among_the_others(data, part, metric, power, alpha)
            if among:
                out.append(f"{head} {seeds}, {among}{unfinished}")
                continue
            out.append(
                f"{head} {seeds}, no difference in final {metric} can be resolved: a variant with one run has no "
                f"spread to test against (run at least 2 seeds).{unfinished}"
            )
            continue
        if r["pooled_sd"] == 0:
            out.append(
                f"{head} {seeds}, final {metric} does not vary within any variant (pooled SD 0), so a t test "
                f"gives no resolution limit.{unfinished}"
            )
            continue
        at = f" (at the smallest, {lo})" if lo != hi else ""
        out.append(
            f"{head} {seeds}, differences in final {metric} smaller than {tables._fmt(r['resolvable'])} cannot be "
            f"resolved{at} ({100 * power:g}% power, two-sided {100 * alpha:g}% t test, pooled SD "
            f"{tables._fmt(r['pooled_sd'])} over the variants' final scores).{unfinished}"
        )
    return out


def _panel_scores(data: ReportData, r: Mapping[str, Any], facets: Sequence[str]) -> pd.DataFrame | None:
    """The rows of ``data.scores`` in the panel of ``r`` (a row of ``data.resolvable``); None
    without scores."""
    sc = data.scores
    if sc is None or sc.empty or not all(c in sc.columns for c in facets):
        return None
    mask = np.ones(len(sc), dtype=bool)
    for c in facets:
        mask &= (sc[c].astype(str) == str(r[c])).to_numpy()
    return sc[mask]


def _unfinished_text(part: pd.DataFrame | None) -> str:
    """A sentence on the unfinished runs a panel's final scores count (``--include-unfinished``)."""
    if part is None or "state" not in part.columns:
        return ""
    k = int((part["state"].astype(str) != states.DONE).sum())
    if not k:
        return ""
    return (
        f" The seeds count {k} unfinished run(s) (--include-unfinished), each scored where it stopped; "
        "finished runs alone may resolve less."
    )


def _among_the_others(
    data: ReportData, part: pd.DataFrame | None, metric: str, power: float, alpha: float
) -> str:
    """For a panel where some variants have one run but at least two have more: which variants
    no difference can involve, and what the others' seeds resolve among themselves ("" otherwise)."""
    if part is None or not data.hue or data.hue not in part.columns:
        return ""
    sizes = part.groupby(data.hue, observed=True, sort=False)["score"].size()
    multi, single = sizes[sizes >= 2], sizes[sizes < 2]
    if len(multi) < 2 or single.empty:
        return ""
    groups = [part.loc[part[data.hue] == v, "score"].to_numpy(dtype=np.float64) for v in multi.index]
    sd = stats.pooled_sd(*groups)
    lo, hi = int(multi.min()), int(multi.max())
    n = f"{lo}" if lo == hi else f"{lo}-{hi}"
    head = (
        f"no difference involving {', '.join(map(str, single.index))} can be resolved (one run: no spread to "
        f"test against; run at least 2 seeds); among the other {len(multi)} variants ({n} seeds each), "
    )
    if sd == 0:
        return (
            head
            + f"final {metric} does not vary within any variant (pooled SD 0), so a t test gives no limit."
        )
    x = stats.min_detectable_effect(lo, sd, power, alpha)
    return head + (
        f"differences in final {metric} smaller than {tables._fmt(x)} cannot be resolved ({100 * power:g}% power, two-sided "
        f"{100 * alpha:g}% t test, pooled SD {tables._fmt(sd)} over their final scores)."
    )


def _findings_section(data: ReportData, out: Path) -> list[str]:
    """The findings table, near the top of the report."""
    if data.findings is None or data.findings.empty:
        return []
    shown = findings_mod.display_table(data.findings)
    notes = findings_mod.note_lines(data.findings)
    tables.write_table(shown, out / "findings", raw=data.findings, notes=notes)
    lines: list[str] = []
    _section(lines, "Findings", shown.attrs["caption"])
    lines.extend(
        [tables.to_markdown(shown), *(f"{line}\n" for line in notes), "Files: findings.md/.csv/.tex", ""]
    )
    return lines


def _table_sections(data: ReportData, out: Path) -> list[str]:
    """The tables, written as markdown, CSV and LaTeX and shown in the index."""
    s = data.settings
    lines: list[str] = []
    caption = _timing_caption(data.baseline, AT_ONCE in data.timing.columns) + _load_caption(data.timing)
    if "speedup" in data.timing.columns and (data.timing["runs"] == 1).any():
        caption += (
            " Rows with runs = 1 rest on a single run: their speedup is one measurement with no spread "
            "(run more seeds before quoting it)."
        )
    tables.write_table(data.timing, out / "timing", caption=caption)
    _section(lines, "Timing", caption)
    lines.extend([tables.to_markdown(data.timing), "Files: timing.md, timing.csv, timing.tex", ""])
    power = power_lines(data)
    tables.write_table(data.final, out / "final_performance", notes=power)
    _section(lines, "Final performance", data.final.attrs["caption"])
    lines.extend([tables.to_markdown(data.final), *(f"{line}\n" for line in power)])
    lines.extend(["Files: final_performance.md/.csv/.tex", ""])
    tables.write_table(data.summary, out / "learning_check", extra_md={"Per run": data.check})
    data.check.to_csv(out / "learning_check_runs.csv", index=False)
    _section(lines, "Learning check", "Did each variant learn at all? " + data.summary.attrs["caption"])
    lines.extend(
        [tables.to_markdown(data.summary), "Files: learning_check.md/.csv/.tex, learning_check_runs.csv", ""]
    )
    if data.ttt is not None:
        tables.write_table(data.ttt, out / "time_to_target")
        _section(
            lines,
            f"Time to {s.metric} >= {s.target:g}",
            "Compares how fast each variant gets there. " + data.ttt.attrs.get("caption", ""),
        )
        lines.extend([tables.to_markdown(data.ttt), "Files: time_to_target.md/.csv/.tex", ""])
    if data.variants is not None and len(data.variants):
        v = data.variants.copy()
        v.attrs["display"] = {
            PANEL: "panel",
            PANEL_ROW: "panel row",
            "finished": "runs finished",
            "other": "runs not finished",
        }
        tables.write_table(
            v, out / "variants", caption="Each label of the figures and tables with the settings behind it."
        )
        _section(
            lines, "Variants", "The labels of the figures and tables with the full settings behind them."
        )
        lines.extend([tables.to_markdown(v), ""])
    return lines


def _frame_for_panels(data: ReportData) -> pd.DataFrame:
    """A small frame that carries the label columns in display order, for :func:`analysis.curves.plot_panels`."""
    cols = {}
    n = max(len(data.hue_order), len(data.col_values), 1)
    if data.hue:
        cols[data.hue] = pd.Categorical(
            [data.hue_order[k % len(data.hue_order)] for k in range(n)],
            categories=data.hue_order,
            ordered=True,
        )
    if data.col:
        cols[data.col] = pd.Categorical(
            [data.col_values[k % len(data.col_values)] for k in range(n)],
            categories=data.col_values,
            ordered=True,
        )
    frame = pd.DataFrame(cols)
    for m in data.dynamics:
        frame[m] = 0.0
    return frame


def _off_policy_text(data: ReportData) -> str:
    return {
        "recorded": "steps whose old log-probs came from an earlier policy, as recorded by the run",
        "inferred": "steps where some completion's w_seq differs from 1; these runs predate the recorded flag",
        "mixed": "recorded by the run, or for older runs inferred from w_seq differing from 1",
        "unknown": "every step: these runs record neither the flag nor w_seq",
    }.get(data.off_policy_how, "steps whose old log-probs came from an earlier policy")


def _score_rule(metric: str) -> str:
    return "its last evaluation" if metric == layout.EVAL_ACCURACY else "mean of its last 10% of logged steps"


def _timing_caption(baseline: str | None, at_once: bool) -> str:
    return (
        "Compares cost per variant: wall-clock seconds per optimizer step including generation "
        "(time/step_s; mean per step and total per run), median TRL step_time (s), generated and trained "
        "tokens per second, peak memory (MB, max over runs); means over runs"
        + (
            f"; speedup = {baseline} time per step / variant time per step in the same panel"
            if baseline
            else ""
        )
        + (
            f". '{AT_ONCE}': how many harness runs shared the run's CPUs or GPU while it trained (mean over its "
            "steps, rounded; other processes on the machine are not counted here); runs are only compared "
            "with runs executed alike, so a run that happened to run alone "
            "does not look faster."
            if at_once
            else ". Runs that shared the machine with other runs are slower per step: compare timings of runs "
            "executed alike (e.g. `executor.max_parallel: 1`, or one GPU per run)."
        )
    )


def _load_caption(timing: pd.DataFrame) -> str:
    """What the timing table's speedup is computed from, and which rows it leaves out for load
    (:func:`analysis.tables.timing_table`'s ``attrs``)."""
    measure = timing.attrs.get("measure")
    if measure is None or "speedup" not in timing.columns:
        return ""
    name = tables.MEASURE_NAMES[measure]
    if measure == layout.STEP_WALL_S:
        text = (
            " These runs recorded no CPU or GPU time (results older than those columns): the speedup is "
            "from wall time, which other work on the machine inflates; compare timings from a quiet machine."
        )
    else:
        what = "the run's process" if measure == layout.STEP_CPU_S else "the GPU"
        text = (
            " 'CPU s/step': CPU seconds of the run's process per step (every thread); 'steps loaded': the "
            "share of its steps measured while other work used more cores than the harness's runs left free."
            f" The speedup is computed from {name} ({what} per step), which other work on the machine "
            "inflates far less than wall time (benchmarks/load.py)"
        )
        text += (
            ", over the steps measured while no other work ran beyond the cores the harness's runs "
            f"left free (machine/other_cpus; margin {tables.LOAD_MARGIN_CPUS:g} cores)."
            if timing.attrs.get("load_known")
            else "; these runs recorded no machine load, so no step is left out."
        )
    left = timing.attrs.get("left_out") or []
    if left:
        rows = "; ".join(f"{label} ({share:.0%} of its steps loaded)" for label, share in left)
        text += (
            f" Left out of the speedup, because fewer than {tables.MIN_QUIET_SHARE:.0%} of their steps ran "
            f"on a quiet machine (or their baseline's did not): {rows}."
        )
    return text


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)


def make_report(
    grid_dir: str | Path,
    *,
    run_ids: Sequence[str] | None = None,
    all_runs: bool = False,
    baseline: str | None = None,
    x: str | None = None,
    hue: str | Sequence[str] | None = None,
    col: str | Sequence[str] | None = None,
    row: str | Sequence[str] | None = None,
    metric: str | None = None,
    target: float | None = None,
    ci: str | None = None,
    smoothing: Any = None,
    seeds: bool | None = None,
    include_unfinished: bool | None = None,
    wseq_split: str | None = None,
) -> Path:
    """Write the report of a grid's results folder and return the report folder.

    Arguments left None take the grid file's ``report:`` section (from ``grid.json``), then the
    defaults of :class:`ReportSettings`.

    Args:
        grid_dir: ``results/<grid>``.
        run_ids: report these runs; default the grid's runs as last planned (``grid.json``).
        all_runs: every run folder, labelled by what differs.
        baseline, x, hue, col, row, metric, target, ci, smoothing, seeds, include_unfinished,
            wseq_split: see :class:`ReportSettings` (``hue``/``col``/``row`` may be one key, a
            comma-separated string of keys or a list).

    Returns:
        The report folder (``grid_dir/report``).

    Raises:
        FileNotFoundError: if ``grid_dir`` has no ``runs/`` folder.
        ReportError: (a ValueError) if ``x`` is unknown or a key or metric does not fit the results.
    """
    grid_dir = Path(grid_dir)
    if x is not None and x not in _X_CHOICES:
        raise ReportError(f"x must be one of {_X_CHOICES}, got {x!r}")
    settings = ReportSettings.merged(
        _grid_section(grid_dir),
        hue=_keys(hue),
        col=_keys(col),
        row=_keys(row),
        baseline=baseline,
        x=x,
        metric=metric,
        target=target,
        ci=ci,
        smoothing=smoothing,
        seeds=seeds,
        include_unfinished=include_unfinished,
        wseq_split=wseq_split,
    )
    findings = _grid_findings(grid_dir)
    df, run_states, grid_info, _ = load_report_inputs(
        grid_dir, run_ids, all_runs=all_runs, settings=settings, extra_columns=[f.metric for f in findings]
    )
    title = grid_info.get("name", grid_dir.name) if grid_info else grid_dir.name
    strict = {k for v in (hue, col, row) for k in (_keys(v) or ())}
    given = [name for name, v in (("baseline", baseline), ("wseq_split", wseq_split)) if v is not None]
    data = compute_report(
        df,
        run_states,
        settings,
        title=str(title),
        strict_keys=strict,
        given=given,
        findings=findings,
        logged_metrics=_logged_for(grid_dir, df, findings),
    )
    data.lines.insert(
        0,
        f"Runs: {df.attrs.get('run_set', '')}; {df[layout.RUN_ID].nunique() if len(df) else 0} "
        f"with metrics, {len(df)} logged steps.",
    )
    if df.attrs.get("missing_runs"):
        data.lines.insert(1, f"Not found on disk (not started?): {len(df.attrs['missing_runs'])} run(s).")
    out = grid_dir / layout.REPORT_DIR
    _write_report(data, df.attrs.get("skipped", []), out)
    return out


def _grid_section(grid_dir: Path) -> Mapping[str, Any] | None:
    """The ``report:`` section of the grid's ``grid.json`` (None without one, or when the file
    cannot be read: :func:`load_report_inputs` names it then).

    Raises:
        ReportError: listing every problem of the section (:func:`check_section`).
    """
    try:
        grid_info = read_grid(grid_dir) if (grid_dir / layout.RUNS_DIR).is_dir() else None
    except ValueError:
        grid_info = None  # load_report_inputs names the damaged file
    section = grid_info.get("report") if isinstance(grid_info, dict) else None
    problems = check_section(section, str(grid_dir / layout.GRID_FILE))
    if problems:
        raise ReportError(
            "; ".join(problems) + " (fix the grid file's report: section and run `grpo-harness run` or "
            "`plan` again, or give the layout on the command line)"
        )
    return section if isinstance(section, Mapping) else None


def _grid_findings(grid_dir: Path) -> list[findings_mod.Finding]:
    """The findings recorded in the grid's ``grid.json`` (none without the file or the section,
    or when the file cannot be read: :func:`load_report_inputs` names it then).

    Raises:
        ReportError: a damaged findings record, listing its problems.
    """
    try:
        grid_info = read_grid(grid_dir) if (grid_dir / layout.RUNS_DIR).is_dir() else None
    except ValueError:
        return []
    section = grid_info.get("findings") if isinstance(grid_info, dict) else None
    try:
        return findings_mod.read_findings(section, str(grid_dir / layout.GRID_FILE))
    except ValueError as e:
        raise ReportError(
            f"{e} (fix the grid file's findings: section and record it again with `grpo-harness run` or "
            "`submit`: done runs are skipped)"
        ) from e


def findings_results(grid_dir: str | Path) -> pd.DataFrame:
    """The verdicts on a results folder's findings, as its report computes them
    (:func:`analysis.findings.findings_table` over the grid's finished runs).

    Args:
        grid_dir: ``results/<grid>``, whose ``grid.json`` records a ``findings:`` section.

    Returns:
        The findings table.

    Raises:
        FileNotFoundError: no ``runs/`` folder.
        ReportError: ``grid.json`` records no findings (the message says how to add them), or a
            damaged record.
    """
    grid_dir = Path(grid_dir)
    if not (grid_dir / layout.RUNS_DIR).is_dir():
        raise FileNotFoundError(_not_a_grid_folder(grid_dir))
    path = grid_dir / layout.GRID_FILE
    if not path.is_file():
        raise ReportError(
            f"{path} does not exist, so nothing says which runs each finding compares; run `grpo-harness run "
            "GRID.yaml` (done runs are skipped) or `grpo-harness submit` for the grid whose results these are"
        )
    try:
        read_grid(grid_dir)
    except ValueError as e:
        raise ReportError(
            f"{e}; write it again with `grpo-harness run GRID.yaml` (done runs are skipped) or `grpo-harness submit`"
        ) from e
    findings = _grid_findings(grid_dir)
    if not findings:
        raise ReportError(
            f"{path} records no findings: section; add one to the grid file (see the "
            "README, Findings) and record it with `grpo-harness run GRID.yaml` (done runs are skipped), or "
            "`grpo-harness submit`"
        )
    settings = ReportSettings.merged(_grid_section(grid_dir))
    df, run_states, _, _ = load_report_inputs(
        grid_dir, settings=settings, extra_columns=[f.metric for f in findings]
    )
    logged = _logged_for(grid_dir, df, findings)
    df, _, without = _runs_without_metrics(df, run_states)
    finished: list[str] = []
    if not df.empty:
        # the report's score metric plays no part: a finding reads its own (the step is always there)
        runs, _, _ = _run_table(df, run_states, replace(settings, metric=layout.STEP))
        finished, without = findings_runs(runs, without, df)
    return findings_mod.findings_table(df, findings, finished, unfinished=without, logged=logged)


def _logged_for(grid_dir: Path, df: pd.DataFrame, findings: Sequence[findings_mod.Finding]) -> list[str]:
    """The metric names a few runs' files hold, read only when no run of ``df`` has a value of a
    finding's metric (to suggest the name meant); [] otherwise."""
    if all(f.metric in df.columns and df[f.metric].notna().any() for f in findings):
        return []
    import pyarrow as pa
    import pyarrow.parquet as pq

    names: set[str] = set()
    ids = list(df[layout.RUN_ID].unique()[:8]) if len(df) else []
    for rid in ids:
        for path in layout.metric_paths(layout.run_dir(grid_dir, str(rid)))[:1]:
            with contextlib.suppress(OSError, ValueError, pa.ArrowException):  # the load names a damaged file
                names.update(pq.read_schema(path).names)
    return sorted(names - {layout.RUN_ID, layout.STEP})


def _write_report(data: ReportData, skipped: Sequence[tuple[str, str]], out: Path) -> None:
    """Write the report's figures, tables and ``index.md`` (listing the ``skipped`` files,
    ``(path, reason)``) into ``out``, replacing a previous report's.

    Raises:
        ReportError: if ``out`` cannot be written.
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
        # One report at a time per folder: a second one waits, then replaces the first's outputs
        # whole (two interleaved reports would leave figures that index.md does not list).
        with FileLock(str(out / ".report.lock")):
            for old in out.iterdir():  # a previous report's figures and tables must not outlive their data
                if old.is_file() and old.suffix in REPORT_SUFFIXES:
                    old.unlink()
            lines = render_report(data, out)
            if skipped:
                lines.extend(["## Files not loaded", ""])
                lines.extend(f"- `{path}`: {reason}" for path, reason in skipped)
                lines.append("")
            (out / "index.md").write_text("\n".join(lines))
    except OSError as e:
        raise ReportError(
            f"cannot write the report into {out}: {e.strerror or e} ({e.filename or out}); "
            "free space or fix its permissions, then run `grpo-harness report` again"
        ) from e


def _keys(value: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return tuple(k.strip() for k in value.split(",") if k.strip())
    return tuple(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``report`` subcommand's arguments to ``parser``."""
    parser.add_argument("grid", type=Path, help="a grid's results folder, results/<grid>")
    parser.add_argument(
        "--baseline",
        default=None,
        help="reference variant: KEY=VALUE[,KEY=VALUE] or a variant label (default: the grid's report "
        "section, else loss_type=grpo)",
    )
    parser.add_argument("--x", choices=_X_CHOICES, default=None, help="x axis of the curves (default: step)")
    parser.add_argument(
        "--hue", default=None, help="key(s) compared as colours, comma-separated (default: loss_type)"
    )
    parser.add_argument("--col", default=None, help="key(s) faceted into panel columns, comma-separated")
    parser.add_argument("--row", default=None, help="key(s) faceted into panel rows, comma-separated")
    parser.add_argument("--metric", default=None, help="curve and table metric (default: reward)")
    parser.add_argument(
        "--target", type=float, default=None, help="also tabulate time to reach METRIC >= TARGET"
    )
    parser.add_argument("--ci", choices=("t", "bootstrap"), default=None, help="curve band (default: t)")
    parser.add_argument(
        "--smooth",
        default=None,
        metavar="auto|none|window=N|ema=A",
        help="smoothing of each run before averaging (default: auto, a trailing mean over a tenth of each "
        "run's logged points)",
    )
    parser.add_argument("--seeds", action="store_true", default=None, help="also draw each run faintly")
    parser.add_argument(
        "--include-unfinished",
        action="store_true",
        default=None,
        help="also count runs that did not finish (diverged, failed, stopped), marked",
    )
    parser.add_argument(
        "--wseq-split",
        default=None,
        metavar="COLUMN",
        help="split the w_seq figure by a column, e.g. reuse_index",
    )
    parser.add_argument(
        "--all",
        dest="all_runs",
        action="store_true",
        help="every run folder, not just the grid as currently specified; runs labelled by what differs",
    )


def parse_smoothing(text: str | None) -> Any:
    """``auto``/``none``/``window=N``/``ema=A`` → a smoothing setting; None when not given.

    Raises:
        ValueError: for anything else.
    """
    if text is None:
        return None
    if text in ("auto", "none"):
        return text
    kind, _, value = text.partition("=")
    if kind == "window":
        if value.isdigit() and int(value) >= 1:
            return {"window": int(value)}
        raise ValueError(
            f"the window is a whole number of logged points, at least 1 (e.g. window=20), got {value!r}"
        )
    if kind == "ema":
        try:
            a = float(value)
        except ValueError:
            a = float("nan")
        if 0 < a <= 1:
            return {"ema": a}
        raise ValueError(
            f"the EMA weight of the newest point must be in (0, 1] (e.g. ema=0.1; smaller is smoother), got {value!r}"
        )
    raise ValueError("use auto, none, window=N (e.g. window=20) or ema=A (e.g. ema=0.1)")


def main(args: argparse.Namespace) -> int:
    """Run :func:`make_report` from parsed arguments; print where the outputs went.

    Returns:
        0 on success, 2 when the folder or an argument is invalid (message on stderr).
    """
    try:
        smoothing = parse_smoothing(getattr(args, "smooth", None))
    except ValueError as e:
        print(f"report: --smooth {args.smooth!r}: {e}", file=sys.stderr)
        return 2
    target = getattr(args, "target", None)
    if target is not None and not math.isfinite(target):
        print(f"report: --target {target}: give a finite value (e.g. 0.5)", file=sys.stderr)
        return 2
    try:
        out = make_report(
            args.grid,
            smoothing=smoothing,
            all_runs=getattr(args, "all_runs", False),
            baseline=getattr(args, "baseline", None),
            x=getattr(args, "x", None),
            hue=getattr(args, "hue", None),
            col=getattr(args, "col", None),
            row=getattr(args, "row", None),
            metric=getattr(args, "metric", None),
            target=target,
            ci=getattr(args, "ci", None),
            seeds=getattr(args, "seeds", None),
            include_unfinished=getattr(args, "include_unfinished", None),
            wseq_split=getattr(args, "wseq_split", None),
        )
    except (FileNotFoundError, NotADirectoryError, ReportError) as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    files = sorted(p.name for p in out.iterdir() if p.is_file())
    print(f"report written to {out}/ ({len(files)} files); open {out / 'index.md'}")
    return 0
