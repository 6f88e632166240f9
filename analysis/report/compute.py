"""Every number of a report (:func:`compute_report`): curves, bands, tables, final scores,
profiles and marks; nothing is drawn here."""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from analysis import aggregate as agg_mod
from analysis import curves, finding_figures, labels, states, wseq
from analysis import findings as findings_mod
from analysis import scores as scores_mod
from analysis.aggregate import Curves, x_values
from analysis.grouping import joined_keys
from analysis.load import LoadInfo
from analysis.offpolicy import is_ratio_metric, off_policy_rows
from analysis.report.baseline import _baseline_label, _variants_table
from analysis.report.compute_tables import finish_tables, table_jobs, with_at_once
from analysis.report.data import AT_ONCE, PANEL, PANEL_ROW, VARIANT, Layout, ReportData, ReportInputs, _Keys
from analysis.report.inputs import TRL_LOSS_TYPES
from analysis.report.pass_at_k import pass_at_k_numbers
from analysis.report.progression import progression_numbers
from analysis.report.runs import (
    _check_axes,
    _compared_lines,
    _included_rows,
    _label_variants,
    _left_out_and_notes,
    _orders,
    _place_runs_without_metrics,
    _run_table,
    _runs_without_metrics,
    _say,
    findings_runs,
)
from analysis.report.tasks import task_layout, task_section
from analysis.report_settings import DYNAMICS_METRICS, RECENT_DYNAMICS, ReportSettings
from analysis.report_values import REPORT_X, ReportError
from harness import layout


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
    """Every number of the report: curves, bands, w_seq bands, tables, final scores, profiles,
    and the verdict on each finding.

    Args:
        inputs: :func:`analysis.report.inputs.load_report_inputs`' record (every requested run,
            finished or not, and the runs' states).
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
    s, task_note = task_layout(inputs.frame, settings)
    if s.x not in REPORT_X:
        raise ReportError(f"x must be one of {REPORT_X}, got {s.x!r}")
    lines = [_say(task_note)] if task_note else []
    df, unreadable, without = _runs_without_metrics(
        inputs.frame, inputs.states, inputs.load, inputs.requested_runs
    )
    if df.empty:
        return ReportData(
            title=title,
            settings=s,
            lines=lines,
            left_out=[f"`{rid}`: {what}" for rid, what in without.items()],
            runs=pd.DataFrame(),
            findings=findings_mod.findings_table(df, findings, [], unfinished=without) if findings else None,
            empty=True,
        )
    _check_axes(df, s)
    c = _count_runs(df, inputs, s, without, unreadable, strict_keys, strict_baseline="baseline" in given)
    found, figures = None, ()
    if findings:
        finished, why = findings_runs(c.runs, without)
        found = findings_mod.findings_table(
            c.df, findings, finished, unfinished=why, logged=logged_metrics, starts=inputs.start_metrics
        )
        figures = tuple(
            finding_figures.finding_figure(c.df, f, r, finished, inputs.start_metrics, s.smoothing)
            for f, r in zip(findings, found.frame.to_dict("records"), strict=True)
        )
    head = {
        "title": title,
        "settings": s,
        "left_out": c.left_out,
        "variants": _variants_table(c.runs, c.keys.label, c.layout, c.placed),
        "findings": found,
        "finding_figures": figures,
        **progression_numbers(c.df, c.runs, without, s.progression),
        **c.layout.layout_fields(),
    }
    lines += c.lines
    if c.work.empty:
        return ReportData(**head, lines=lines, runs=c.runs, empty=True)
    lines += _check_wseq_split(c.work, s, strict="wseq_split" in given)
    off, off_policy_how, on_policy = _on_policy_panels(c.work, c.inc, c.layout)
    work, runs, at_once = with_at_once(c.work, c.runs)
    numbers, number_lines = _numbers(
        work, c.df, inputs.load, runs, c.flags, off, at_once, c.layout, s, c.keys
    )
    return ReportData(
        **head,
        **numbers,
        **pass_at_k_numbers(work, runs, inputs, c.layout, (c.keys.col, c.keys.row)),
        runs=runs,
        lines=[*lines, *number_lines],
        on_policy=on_policy,
        off_policy_how=off_policy_how,
        tasks=_tasks(work, runs, inputs, s, c.layout),
    )


@dataclass(frozen=True)
class _Counted:
    """The runs as the report counts and labels them (:func:`_count_runs`).

    Attributes:
        df: the metrics (categorical run ids), with an all-missing column for each key the layout
            names that no run sets.
        runs: one row per run with metrics (index ``run_id``): labels, state, ``included``
            (:func:`analysis.report.runs._run_table`), a diverged run's step where it went
            non-finite.
        flags: :func:`analysis.states.signal_flags` per run.
        inc: the rows of ``runs`` the report counts.
        work: the metric rows of the counted runs, with their label columns.
        keys: the config columns behind the labels.
        layout: the figures' layout, the baseline included.
        placed: the runs without metrics placed under a variant (one row each: their labels).
        lines: the report's opening lines so far: notes on the layout and the baseline, and what
            is compared.
        left_out: one line per run the report does not count (those without metrics first).
    """

    df: pd.DataFrame
    runs: pd.DataFrame
    flags: pd.DataFrame
    inc: pd.DataFrame
    work: pd.DataFrame
    keys: _Keys
    layout: Layout
    placed: pd.DataFrame
    lines: list[str]
    left_out: list[str]


def _count_runs(
    df: pd.DataFrame,
    inputs: ReportInputs,
    s: ReportSettings,
    without: dict[str, str],
    unreadable: dict[str, int],
    strict_keys: Collection[str],
    *,
    strict_baseline: bool,
) -> _Counted:
    """Which runs the report counts, their labels and panels, the baseline, and the lines on what
    is compared and on the runs left out (``df``: the metrics of the runs with any; ``without``:
    the requested runs without, with why; ``unreadable``: metrics files per run that could not be
    read)."""
    info = inputs.load
    runs, first, flags = _run_table(df, inputs.states, s)
    labelled = _label_variants(df, info, runs, first, s, strict_keys)
    if labelled.missing:  # keys no run sets: every run has them missing
        df = df.assign(**dict.fromkeys(labelled.missing, np.nan))
    keys = labelled.keys
    placed, left_without = _place_runs_without_metrics(inputs, labelled.runs, keys, without, labelled)
    runs, left_with, notes = _left_out_and_notes(df, labelled.runs, labelled, unreadable)
    inc = runs[runs["included"]]
    baseline, baseline_notes = _baseline_label(
        inc, df, labelled.hue, s.baseline, keys.label, info=info, runs=runs, strict=strict_baseline
    )
    layout_ = replace(_orders(labelled, runs, inc), baseline=baseline)
    return _Counted(
        df=df,
        runs=runs,
        flags=flags,
        inc=inc,
        work=_included_rows(df, runs),
        keys=keys,
        layout=layout_,
        placed=placed,
        lines=[
            *(_say(note) for note in labelled.notes),
            *baseline_notes,
            *_compared_lines(df, info, inc, layout_, s, keys, notes),
        ],
        left_out=[*left_without, *left_with],
    )


def _tasks(
    work: pd.DataFrame, runs: pd.DataFrame, inputs: ReportInputs, s: ReportSettings, layout_: Layout
) -> Any:
    """:func:`analysis.report.tasks.task_section` of the counted runs (None unless the runs are on
    several tasks)."""
    return task_section(
        work,
        runs,
        inputs,
        metric=s.metric,
        hue=layout_.hue,
        col=layout_.col,
        row=layout_.row,
        hue_order=layout_.hue_order,
        baseline=layout_.baseline,
        normalise=s.normalise,
        final_scores=scores_mod.final_scores,
        reps_of=scores_mod.bootstrap_reps,
    )


def _check_wseq_split(work: pd.DataFrame, s: ReportSettings, *, strict: bool) -> list[str]:
    """The note (or, ``strict``: raise :class:`ReportError` naming the choices) on a w_seq split by
    a column that no counted run recorded; none when a run recorded it."""
    split = s.wseq_split
    if not split or (split in work.columns and work[split].notna().any()):
        return []
    if strict:
        choices = [
            c for c in (layout.REUSE_INDEX, layout.POLICY_LAG) if c in work.columns and work[c].notna().any()
        ]
        raise ReportError(
            f"--wseq-split {split!r}: no counted run recorded it; "
            + (f"split by {' or '.join(choices)}" if choices else "these runs recorded no reuse index")
        )
    return [f"Note: no run recorded `{split}`, so the w_seq figure is not split by it."]


def _on_policy_panels(
    work: pd.DataFrame, inc: pd.DataFrame, layout_: Layout
) -> tuple[np.ndarray, str, list[tuple[Any, Any]]]:
    """Which rows are off-policy steps (bool, shape ``(len(work),)``), how that was told
    (:func:`analysis.offpolicy.off_policy_rows`), and the panels ``(col value, row value)`` that
    have none."""
    off, how = off_policy_rows(work)
    facet_cols = [c for c in (layout_.col, layout_.row) if c]
    if not facet_cols:
        return off, how, [] if off.any() else [(None, None)]
    # facets are per run: whether each run has an off-policy step, then any per facet
    rid_cats = work[layout.RUN_ID].cat.categories
    n_off = np.bincount(work[layout.RUN_ID].cat.codes.to_numpy()[off], minlength=len(rid_cats))
    run_off = pd.Series(n_off > 0, index=pd.Index([str(c) for c in rid_cats], dtype=object))
    any_off = run_off.reindex(inc.index, fill_value=False).groupby(joined_keys(inc, facet_cols)).any()
    on_policy = []
    for key, is_off in any_off.items():
        if not is_off:
            parts = key.split("\x1f") if len(facet_cols) > 1 else [key]
            on_policy.append((parts[0] if layout_.col else None, parts[-1] if layout_.row else None))
    return off, how, on_policy


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


def _metric_notes(
    work: pd.DataFrame, runs: pd.DataFrame, s: ReportSettings
) -> tuple[list[str], list[str], list[str], list[str]]:
    """The curve and dynamics metrics the runs logged, the dynamics metrics asked for that none
    did, and the notes: on each asked-for curve metric that no run logged, and on runs without the
    x axis's values."""
    lines: list[str] = []
    curve_metrics = [m for m in (list(s.curves) or [s.metric]) if m in work.columns]
    for m in list(s.curves) or [s.metric]:
        if m not in work.columns:
            lines.append(f"Note: no run logged `{m}`; its curve is not drawn.")
    dyn_metrics = [m for m in s.metrics if m in work.columns and work[m].notna().any()]
    recent = RECENT_DYNAMICS if tuple(s.metrics) == DYNAMICS_METRICS else ()
    dyn_missing = [m for m in s.metrics if m not in dyn_metrics and m not in recent]
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
    return curve_metrics, dyn_metrics, dyn_missing, lines


def _numbers(
    work: pd.DataFrame,
    df: pd.DataFrame,
    info: LoadInfo,
    runs: pd.DataFrame,
    flags: pd.DataFrame,
    off: np.ndarray,
    at_once: bool,
    layout_: Layout,
    s: ReportSettings,
    keys: _Keys,
) -> tuple[dict[str, Any], list[str]]:
    """Every curve, band and table of the report, computed on a thread pool: they are independent
    of each other, and numpy and pandas release the GIL in their loops.

    Returns:
        ``(fields, lines)``: the :class:`ReportData` fields of the curves, marks, dynamics, w_seq
        bands and tables, and the notes on metrics the runs did not log.
    """
    curve_metrics, dyn_metrics, dyn_missing, lines = _metric_notes(work, runs, s)
    by = [c for c in (layout_.hue, layout_.col, layout_.row) if c]
    dyn_by = [b for b in (layout_.hue, layout_.col) if b]
    timing_by = [*by, AT_ONCE] if at_once else list(by)
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
        jobs = table_jobs(pool, work, s, layout_.baseline, by, timing_by, flags)
        ci_, di_ = curve_index.result(), dyn_index.result()
        jobs["wseq"] = pool.submit(
            wseq.wseq_bands, work, by=dyn_by, x=s.x, rows=off, smoothing=s.smoothing, split=split, index=di_
        )
        curve_jobs = {m: pool.submit(_curves_of, work, m, s, off, by, ci_, s.seeds) for m in curve_metrics}
        dyn_jobs = {m: pool.submit(_curves_of, work, m, s, off, dyn_by, di_) for m in dyn_metrics}
        absent_jobs = (
            {m: pool.submit(_not_logged, work, m, layout_.hue_order) for m in dyn_metrics}
            if layout_.hue
            else {}
        )
        diverged = runs[(runs["state"] == states.DIVERGED)]
        curve_sets = {m: job.result() for m, job in curve_jobs.items()}
        marked = {m: _divergence_marks(df, runs, diverged, m, s, layout_) for m in curve_sets}
        dynamics = {m: job.result() for m, job in dyn_jobs.items()}
        dynamics_absent = {m: absent for m, job in absent_jobs.items() if (absent := job.result())}
        results = {k: job.result() for k, job in jobs.items()}
    inc = runs[runs["included"]]
    fields = {
        "curve_sets": curve_sets,
        "marks": {m: marks for m, (marks, _) in marked.items()},
        "mark_runs": {m: own for m, (_, own) in marked.items()},
        "syncs": _sync_marks(inc, layout_, int(work[layout.STEP].max())) if s.x == "step" else {},
        "dynamics": dynamics,
        "dynamics_missing": dyn_missing,
        "dynamics_absent": dynamics_absent,
        "wseq": results["wseq"],
        **finish_tables(results, info, runs, by, timing_by, keys, s, layout_),
    }
    return fields, lines


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
        rows=off if is_ratio_metric(metric) else None,
        keep_runs=keep_runs,
        index=index,
    )


def _not_logged(work: pd.DataFrame, metric: str, hue_order: list[str]) -> list[str]:
    """The variants that never log ``metric`` (VESPO has no clip fraction), to say so."""
    codes = work[VARIANT].cat.codes.to_numpy()
    present = ~np.isnan(work[metric].to_numpy(dtype=np.float64))
    counts = np.bincount(codes[present], minlength=len(work[VARIANT].cat.categories))
    logged = {str(work[VARIANT].cat.categories[k]) for k in np.flatnonzero(counts)}
    return [v for v in hue_order if v not in logged]


def _divergence_marks(
    df: pd.DataFrame,
    runs: pd.DataFrame,
    diverged: pd.DataFrame,
    metric: str,
    s: ReportSettings,
    layout_: Layout,
) -> tuple[list[curves.Mark], pd.DataFrame | None]:
    """A mark per diverged run at the step it diverged, and its own curve up to there."""
    if diverged.empty or metric not in df.columns:
        return [], None
    ids = set(diverged.index)
    part = df[df[layout.RUN_ID].astype(object).isin(ids).to_numpy()].copy()
    for name in (VARIANT, PANEL, PANEL_ROW):
        if name in runs.columns:
            part[name] = part[layout.RUN_ID].astype(object).map(runs[name].astype(str))
    by = [b for b in (layout_.hue, layout_.col, layout_.row) if b]
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
                hue=str(r[VARIANT]) if layout_.hue else None,
                col=str(r[PANEL]) if layout_.col else None,
                row=str(r[PANEL_ROW]) if layout_.row else None,
                x=x,
                y=y,
            )
        )
    return marks, c.runs


def _sync_marks(inc: pd.DataFrame, layout_: Layout, last: int) -> dict[tuple[Any, Any], list[float]]:
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
        cv = str(key[0]) if layout_.col else None
        rv = str(key[-1]) if layout_.row else None
        out[(cv, rv)] = [float(k) for k in range(n, last + 1, n)]
    return out
