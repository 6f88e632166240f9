"""Every number of a report (:func:`compute_report`): curves, bands, tables, final scores,
profiles and marks; nothing is drawn here."""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis import aggregate as agg_mod
from analysis import curves, finals, labels, states, tables
from analysis import findings as findings_mod
from analysis.aggregate import Curves, off_policy_rows, x_values
from analysis.load import LoadInfo
from analysis.report.baseline import _baseline_label, _variants_table
from analysis.report.data import AT_ONCE, PANEL, PANEL_ROW, VARIANT, ReportData, ReportInputs, _Keys
from analysis.report.inputs import TRL_LOSS_TYPES
from analysis.report.runs import (
    _check_axes,
    _compared_lines,
    _display_names,
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
from analysis.report.settings import ReportError, ReportSettings
from harness import layout
from harness.config.report_section import REPORT_X


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
    s = settings
    if s.x not in REPORT_X:
        raise ReportError(f"x must be one of {REPORT_X}, got {s.x!r}")
    data = ReportData(title=title, settings=s, lines=[], left_out=[], runs=pd.DataFrame())
    info, run_states = inputs.load, inputs.states
    df, unreadable, without = _runs_without_metrics(inputs.frame, run_states, info, inputs.requested_runs)
    if df.empty:
        data.left_out.extend(f"`{rid}`: {what}" for rid, what in without.items())
        data.empty = True
        if findings:
            data.findings = findings_mod.findings_table(df, findings, [], unfinished=without)
        return data
    _check_axes(df, s)
    runs, first, flags = _run_table(df, run_states, s)
    labelled = _label_variants(df, info, runs, first, s, strict_keys)
    runs, keys = labelled.runs, labelled.keys
    for note in labelled.notes:
        _say(data, note)
    data.hue, data.col, data.row = labelled.hue, labelled.col, labelled.row
    data.legend_title = labelled.legend_title
    placed = _place_runs_without_metrics(inputs, runs, keys, without, data)
    notes = _left_out_and_notes(df, runs, data, unreadable)
    data.runs = runs
    inc = runs[runs["included"]]
    work = _included_rows(df, runs)
    _orders(data, runs, inc)
    data.baseline = _baseline_label(
        inc,
        df,
        data.hue,
        s.baseline,
        data.lines,
        keys.label,
        info=info,
        runs=runs,
        strict="baseline" in given,
    )
    _compared_lines(df, info, inc, data, keys, notes)
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
    _numbers(work, df, info, runs, flags, off, data, keys)
    return data


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
    info: LoadInfo,
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
    _finish_tables(data, results, info, runs, by, timing_by, keys)


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
    info: LoadInfo,
    runs: pd.DataFrame,
    by: list[str],
    timing_by: list[str],
    keys: _Keys,
) -> None:
    """The tables with display names (and unfinished runs marked, per row of each: the timing
    table's rows also split by runs at once), the final scores per run and the performance
    profile."""
    s = data.settings
    names = _display_names(data, info, keys.col, keys.row)
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
