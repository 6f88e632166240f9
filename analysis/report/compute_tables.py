"""The report's tables as numbers (:func:`analysis.report.compute.compute_report` runs them): the
table jobs, their display names, the unfinished runs they count, the runs that shared the machine,
and the final scores per run with their profile and resolution limit."""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import pandas as pd

from analysis import finals, learning_check, states, time_to_target
from analysis import scores as scores_mod
from analysis import timing as timing_mod
from analysis.grouping import joined_keys
from analysis.load import LoadInfo
from analysis.report.data import AT_ONCE, Layout, _Keys
from analysis.report.runs import display_names
from analysis.report_settings import ReportSettings
from analysis.tables import Table
from harness import layout

T = TypeVar("T", bound=Table)


def with_at_once(work: pd.DataFrame, runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, bool]:
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


def table_jobs(
    pool: Any,
    work: pd.DataFrame,
    s: ReportSettings,
    baseline: str | None,
    by: list[str],
    timing_by: list[str],
    flags: pd.DataFrame,
) -> dict[str, Any]:
    """The report's tables submitted to ``pool`` (a ``concurrent.futures`` executor): futures of
    ``timing``, ``final`` (the table and the per-run scores), ``check`` and, with a target,
    ``ttt``."""
    jobs = {
        "timing": pool.submit(timing_mod.timing_table, work, by=timing_by, baseline=baseline, same=[AT_ONCE]),
        "final": pool.submit(_final_tables, work, s.metric, by, baseline),
        "check": pool.submit(learning_check.learning_check, work, s.metric, by=by, signal=flags),
    }
    if s.target is not None:
        jobs["ttt"] = pool.submit(
            time_to_target.time_to_target_table,
            work,
            s.target,
            metric=s.metric,
            by=by,
            baseline=baseline,
            smoothing=s.smoothing,
        )
    return jobs


def _final_tables(
    work: pd.DataFrame, metric: str, by: list[str], baseline: str | None
) -> tuple[scores_mod.FinalTable, pd.Series]:
    """The final-performance table and the per-run scores it rests on."""
    scores = scores_mod.final_scores(work, metric)
    return scores_mod.final_performance_table(work, metric, by=by, baseline=baseline, scores=scores), scores


def finish_tables(
    results: dict[str, Any],
    info: LoadInfo,
    runs: pd.DataFrame,
    by: list[str],
    timing_by: list[str],
    keys: _Keys,
    s: ReportSettings,
    layout_: Layout,
) -> dict[str, Any]:
    """The tables with display names (and unfinished runs marked, per row of each: the timing
    table's rows also split by runs at once), the final scores per run and the performance
    profile, as :class:`ReportData` fields."""
    names = display_names(layout_, info, keys.col, keys.row)
    (final, scores), timing, check = results["final"], results["timing"], results["check"]
    summary = learning_check.learning_summary(check, by=by).with_headers(names)
    timing, final = timing.with_headers(names), final.with_headers(names)
    if s.include_unfinished:
        timing = _mark_unfinished(timing, runs, timing_by)
        final = _mark_unfinished(final, runs, by)
        summary = _mark_unfinished(summary, runs, by)
        states_ = check.frame.copy()
        states_.insert(1, "state", states_[layout.RUN_ID].map(runs["state"]))
        check = check.with_frame(states_)
    sc = runs.loc[runs["included"], list(by)].copy()
    for b in by:
        sc[b] = sc[b].astype(str)
    sc["score"] = scores.set_axis(scores.index.astype(object)).reindex(sc.index)
    sc["state"] = runs.loc[sc.index, "state"].astype(str)
    sc = sc.dropna(subset=["score"])
    return {
        "timing": timing,
        "final": final,
        "check": check,
        "summary": summary,
        "ttt": results["ttt"].with_headers(names) if s.target is not None else None,
        "scores": sc,
        "profile": finals.profile_frame(sc, [b for b in (layout_.hue, layout_.col) if b]),
        "resolvable": scores_mod.resolvable_differences(
            sc, layout_.hue, [b for b in (layout_.col, layout_.row) if b]
        ),
    }


def _mark_unfinished(table: T, runs: pd.DataFrame, by: list[str]) -> T:
    """``table`` with a column ``not_finished`` counting the included runs that did not finish,
    per row (rows matched on ``by``); as given when it is empty or without ``by``."""
    if table.frame.empty or not by:
        return table
    inc = runs[runs["included"]]
    unfinished = (inc["state"] != states.DONE).groupby(joined_keys(inc, by)).sum()
    tkey = pd.Series(joined_keys(table.frame, by))
    counts = tkey.map(unfinished).fillna(0).astype(int).to_numpy()
    return table.with_frame(table.frame.assign(not_finished=counts)).with_headers(
        {"not_finished": "of which not finished"}
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
