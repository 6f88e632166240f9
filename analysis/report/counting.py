"""The runs as a report counts and labels them (:func:`count_runs`, a :class:`Counted` record):
which runs count, their variant and panel labels, the baseline, the figures' layout, the
off-policy steps and the panels on-policy throughout, how many runs shared the machine, and the
report's opening lines on what is compared and on the runs left out. Every section's numbers are
computed from it (:mod:`analysis.report.sections`)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from analysis.grouping import joined_keys
from analysis.offpolicy import off_policy_rows
from analysis.panels import Facets
from analysis.report.baseline import baseline_label, variants_table
from analysis.report.data import AT_ONCE, Counted, LabelKeys, ReportInputs
from analysis.report.runs import (
    check_axes,
    compared_lines,
    facet_orders,
    included_rows,
    label_variants,
    left_out_and_notes,
    place_runs_without_metrics,
    run_table,
    runs_without_metrics,
    say,
)
from analysis.report.tasks import task_layout
from analysis.settings.report import ReportSettings
from analysis.settings.report_values import REPORT_X, ReportError
from harness import layout


def count_runs(
    inputs: ReportInputs,
    settings: ReportSettings,
    *,
    strict_keys: Collection[str] = (),
    given: Collection[str] = (),
    findings: Sequence[Any] = (),
    logged: Collection[str] = (),
) -> Counted:
    """Which runs the report counts and how it lays them out.

    Args:
        inputs: :func:`analysis.report.inputs.load_report_inputs`' record.
        settings: the layout (the tasks become panels when the runs are on several and no key
            names them, :func:`analysis.report.tasks.task_layout`).
        strict_keys: layout keys that must name a column (typed on the command line); any other key
            that no run sets is all-missing (every run uses TRL's default).
        given: the settings typed on the command line: a ``baseline`` among them must name
            variants of these runs.
        findings: the grid's findings; logged: the metric names the runs log.

    Returns:
        A :class:`Counted`; with no run with metrics, its ``runs`` and ``work`` are empty and its
        lines the layout's note alone.

    Raises:
        ReportError: ``x``, a layout key, the baseline (given) or the metric does not fit the results.
    """
    s, task_note = task_layout(inputs.frame, settings)
    if s.x not in REPORT_X:
        raise ReportError(f"x must be one of {REPORT_X}, got {s.x!r}")
    lines = [say(task_note)] if task_note else []
    df, unreadable, without = runs_without_metrics(
        inputs.frame, inputs.states, inputs.load, inputs.requested_runs
    )
    common = {"settings": s, "inputs": inputs, "without": without, "findings": tuple(findings)}
    common.update(logged=tuple(logged), given=frozenset(given))
    if df.empty:
        return Counted(
            **common,
            df=df,
            runs=pd.DataFrame(),
            flags=pd.DataFrame(),
            work=df,
            facets=Facets(),
            keys=LabelKeys([], [], [], set()),
            off=np.zeros(0, dtype=bool),
            lines=tuple(lines),
            left_out=tuple(f"`{rid}`: {what}" for rid, what in without.items()),
        )
    check_axes(df, s)
    runs, first, flags = run_table(df, inputs.states, s)
    labelled = label_variants(df, inputs.load, runs, first, s, strict_keys)
    if labelled.missing:  # keys no run sets: every run has them missing
        df = df.assign(**dict.fromkeys(labelled.missing, np.nan))
    keys = labelled.keys
    placed, left_without = place_runs_without_metrics(inputs, labelled.runs, keys, without, labelled)
    runs, left_with, notes = left_out_and_notes(df, labelled.runs, labelled, unreadable)
    inc = runs[runs["included"]]
    baseline, baseline_notes = baseline_label(
        inc, df, labelled.hue, s.baseline, keys.label, info=inputs.load, runs=runs, strict="baseline" in given
    )
    facets = replace(facet_orders(labelled, runs, inc), baseline=baseline)
    lines += [
        *(say(note) for note in labelled.notes),
        *baseline_notes,
        *compared_lines(df, inputs.load, inc, facets, s, keys, notes),
    ]
    work = included_rows(df, runs)
    off, how, on_policy = _on_policy_panels(work, inc, facets)
    work, runs_, at_once = _with_at_once(work, runs) if not work.empty else (work, runs, False)
    return Counted(
        **common,
        df=df,
        runs=runs_,
        flags=flags,
        work=work,
        facets=replace(facets, on_policy=tuple(on_policy)),
        keys=keys,
        off=off,
        off_policy_how=how,
        at_once=at_once,
        lines=tuple(lines),
        left_out=(*left_without, *left_with),
        variants=variants_table(runs, keys.label, facets, placed),
    )


def _on_policy_panels(
    work: pd.DataFrame, inc: pd.DataFrame, facets: Facets
) -> tuple[np.ndarray, str, list[tuple[Any, Any]]]:
    """Which rows are off-policy steps (bool, shape ``(len(work),)``), how that was told
    (:func:`analysis.offpolicy.off_policy_rows`), and the panels ``(col value, row value)`` that
    have none."""
    if work.empty:
        return np.zeros(0, dtype=bool), "", []
    off, how = off_policy_rows(work)
    facet_cols = [c for c in (facets.col, facets.row) if c]
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
            on_policy.append((parts[0] if facets.col else None, parts[-1] if facets.row else None))
    return off, how, on_policy


def _with_at_once(work: pd.DataFrame, runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, bool]:
    """``work`` and ``runs`` with the :data:`AT_ONCE` column (how many runs shared the machine, a
    label per run: per row of ``work``, per run id of ``runs``) when the runs recorded it, and
    whether they did; otherwise both as given."""
    at_once = runs_at_once(work)
    if at_once is None:
        return work, runs, False
    per_run = pd.Categorical(at_once.reindex(work[layout.RUN_ID].cat.categories).fillna("unknown"))
    labelled_rows = pd.Categorical.from_codes(
        np.asarray(per_run.codes)[work[layout.RUN_ID].cat.codes.to_numpy()], categories=per_run.categories
    )
    return (
        work.assign(**{AT_ONCE: labelled_rows}),
        runs.assign(**{AT_ONCE: at_once.reindex(runs.index).fillna("unknown")}),
        True,
    )


def runs_at_once(work: pd.DataFrame) -> pd.Series | None:
    """Per run: how many runs shared its CPUs/GPU while it trained (``machine/concurrent_runs``,
    mean over its steps, rounded, as text; "unknown" where never recorded), indexed by the run id's
    categories; None when no run recorded it."""
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
