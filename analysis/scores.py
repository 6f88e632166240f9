"""Final performance: each run's final score, the table of mean, IQM and probability of
improvement per variant with stratified bootstrap intervals (rliable, Agarwal et al. 2021), and
the smallest difference of final scores the seeds can resolve.

Pure: a metrics frame in (from :func:`analysis.load.load`), records out
(:class:`FinalTable`, :class:`Resolvable`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis import stats
from analysis.aggregate import factorize_runs
from analysis.grouping import (
    baseline_has_own_panels,
    baseline_mask,
    by_list,
    by_run_and_step,
    joined_keys,
    key_dict,
    per_run,
    variant_groups,
)
from analysis.power import min_detectable_effect, pooled_sd
from analysis.tables import Table
from harness import layout

__all__ = [
    "BOOTSTRAP_CELLS",
    "REPORT_REPS",
    "FinalTable",
    "Resolvable",
    "bootstrap_reps",
    "final_performance_table",
    "final_scores",
    "resolvable_differences",
    "score_rule",
]


@dataclass(frozen=True, kw_only=True)
class FinalTable(Table):
    """:func:`final_performance_table`'s answer: the table (:class:`analysis.tables.Table`, with
    the caption that says how runs were scored, aggregated and compared) and its bootstrap.

    Attributes:
        reps: bootstrap resamples behind every interval of the table (:func:`bootstrap_reps`).
        mc_error: the largest Monte Carlo error of any interval endpoint, in the score's units
            (:func:`analysis.stats.percentile_mc_error`; NaN when no interval was drawn).
    """

    reps: int
    mc_error: float


@dataclass(frozen=True)
class Resolvable:
    """:func:`resolvable_differences`' answer: per panel, the smallest difference of final scores
    the seeds resolve, and the test it was sized for.

    Attributes:
        frame: one row per panel: ``*facets``, ``variants``, ``n_min``, ``n_max``, ``pooled_sd``,
            ``resolvable`` (score units).
        power: the test's power (0 to 1), e.g. 0.8.
        alpha: the test's two-sided level (0 to 1), e.g. 0.05.
    """

    frame: pd.DataFrame
    power: float = 0.8
    alpha: float = 0.05


def score_rule(metric: str) -> str:
    """How :func:`final_scores` (by default) scores a run on ``metric``, as captions say it: "its
    last evaluation" for an eval metric, else "mean of its last 10% of logged steps"."""
    return "its last evaluation" if layout.is_eval_metric(metric) else "mean of its last 10% of logged steps"


def final_scores(df: pd.DataFrame, metric: str, last_k: int | None = None) -> pd.Series:
    """Per-run score: for an eval metric (greedy or sampled accuracy, pass@k:
    :func:`harness.layout.is_eval_metric`) its last evaluation, else the mean of the last k logged
    steps (default: the last 10% of the run's logged steps, at least one).

    Returns:
        Score per run id (sorted), runs without a logged value left out.
    """
    y = df[metric].to_numpy(dtype=np.float64)
    keep = ~np.isnan(y)
    codes, names = factorize_runs(df[layout.RUN_ID])
    order = by_run_and_step(codes, df[layout.STEP].to_numpy(), keep)
    c, yv = codes[order], y[order]
    n_runs = len(names)
    counts = np.bincount(c, minlength=n_runs)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    pos_from_end = np.repeat(starts + counts, counts) - np.arange(c.size) - 1  # 0 = last logged step
    if layout.is_eval_metric(metric):
        k = np.ones(n_runs)
    else:
        k = np.maximum(1, np.ceil(0.1 * counts)) if last_k is None else np.full(n_runs, int(last_k))
    tail = pos_from_end < k[c]
    sums = np.bincount(c[tail], weights=yv[tail], minlength=n_runs)
    used = np.bincount(c[tail], minlength=n_runs)
    with np.errstate(invalid="ignore", divide="ignore"):
        score = sums / used
    out = pd.Series(
        score, index=pd.Index([str(n) for n in names], name=layout.RUN_ID, dtype=object), name=metric
    )
    return out[used > 0].sort_index()


#: Bootstrap resamples of the report's intervals: rliable's 50,000 (at 2,000 the endpoints of a
#: 10-run x 4-task matrix moved by up to 0.022 between bootstrap seeds; at 50,000 by under 0.005).
REPORT_REPS = 50_000
#: The most draw counts (resamples x runs, over every run a table bootstraps) before the report uses
#: fewer resamples (and says so, with their Monte Carlo error): 50,000 resamples up to 80 runs in
#: all (every ready grid), e.g. 4,000 for 1,000 runs (the analysis benchmark), never fewer than
#: 2,000. A draw count costs about 30 ns on one core, so a table's bootstrap stays under ~0.3 s.
BOOTSTRAP_CELLS = 4_000_000


def bootstrap_reps(runs: int) -> int:
    """Resamples for the bootstraps of a table over ``runs`` runs in all: :data:`REPORT_REPS`, or
    fewer where that would take more than :data:`BOOTSTRAP_CELLS` draws (the cost is proportional
    to resamples x runs), but at least 2,000."""
    return int(min(REPORT_REPS, max(2000, BOOTSTRAP_CELLS // max(1, runs))))


def _task_column(df: pd.DataFrame, task: str | None) -> str | None:
    if task is not None:
        return task
    for cand in ("task.name", "task"):
        if cand in df.columns and df[cand].nunique(dropna=False) > 1:
            return cand
    return None


def _score_matrix(scores: pd.Series, tasks: pd.Series, task_order: list[str]) -> np.ndarray:
    """(max runs per task, n_tasks) matrix, NaN-padded where a task has fewer runs."""
    cols = [scores[(tasks == t).to_numpy()].to_numpy(dtype=np.float64) for t in task_order]
    height = max((c.size for c in cols), default=0)
    mat = np.full((height, len(cols)), np.nan)
    for j, c in enumerate(cols):
        mat[: c.size, j] = c
    return mat


def final_performance_table(
    df: pd.DataFrame,
    metric: str = "reward",
    *,
    by: str | Sequence[str] = "loss_type",
    last_k: int | None = None,
    task: str | None = None,
    baseline: Any = "grpo",
    reps: int | None = None,
    confidence: float = 0.95,
    seed: int = 0,
    scores: pd.Series | None = None,
) -> FinalTable:
    """Final performance per variant: mean and IQM over runs with stratified bootstrap intervals.

    A run's score is the mean of ``metric`` over its last ``last_k`` logged steps (default: the
    last 10% of its steps, at least one), or, for an eval metric (``eval/accuracy``,
    ``eval/sampled_accuracy``, ``eval/pass@k``), its last evaluation. Scores
    form an ``(runs, tasks)`` matrix per variant (one task unless ``task`` names a column or
    ``task.name`` varies). Aggregates and intervals follow Agarwal et al. 2021 (rliable): mean,
    IQM (25% trimmed mean), percentile intervals from a bootstrap over runs stratified by task,
    and the probability of improvement over the baseline (Mann-Whitney U / (n·m), averaged over
    tasks) with an independent stratified bootstrap interval.

    Args:
        df: frame from :func:`analysis.load.load`.
        metric: the score column (e.g. ``"reward"``, ``"eval/accuracy"``).
        by: variant column(s); the first is matched against ``baseline``.
        last_k: steps averaged at the end of each run.
        task: column that identifies tasks; default auto-detected as above.
        baseline: value of ``by[0]`` the probability of improvement is measured against.
        reps, confidence, seed: bootstrap replicates (default :func:`bootstrap_reps` of the scored
            runs), coverage and seed.
        scores: :func:`final_scores` of ``df`` when already computed (``last_k`` then unused).

    Returns:
        A :class:`FinalTable`: its frame has one row per variant: ``*by``, ``runs``, ``mean``,
        ``mean_lo``, ``mean_hi``, ``iqm``, ``iqm_lo``, ``iqm_hi``, ``p_improve``,
        ``p_improve_lo``, ``p_improve_hi`` (P(variant > baseline); NaN for the baseline itself;
        the three columns left out without a baseline). Intervals are NaN when no task has two
        runs. Its caption says how; beside it the resamples and the largest Monte Carlo error.

    Raises:
        KeyError: if ``metric`` or a ``by`` column is missing.
    """
    by = by_list(by)
    if metric not in df.columns:
        raise KeyError(f"metric {metric!r} not in frame")
    runs = per_run(df, by)
    runs["score"] = (final_scores(df, metric, last_k) if scores is None else scores).reindex(runs.index)
    task_col = _task_column(df, task)
    if task_col is not None:
        first_task = df.drop_duplicates(layout.RUN_ID).set_index(layout.RUN_ID)[task_col]
        runs["_task"] = first_task.reindex(runs.index).astype(object).astype(str).to_numpy()
    else:
        runs["_task"] = "all"
    runs = runs[runs["score"].notna()]
    task_order = sorted(runs["_task"].unique())
    base_mats, pooled_mat = _baseline_matrices(runs, by, baseline_mask(runs, by, baseline), task_order)
    if reps is None:
        reps = bootstrap_reps(len(runs))
    boot = {"reps": reps, "confidence": confidence, "seed": seed}
    rows = []
    for key, part in variant_groups(runs, by):
        key_t = key if isinstance(key, tuple) else (key,)
        labels = key_dict(by, key)
        is_base = by and str(labels[by[0]]) == str(baseline)
        base_mat = None if is_base else base_mats.get(tuple(str(v) for v in key_t[1:]), pooled_mat)
        mat = _score_matrix(part["score"], part["_task"], task_order)
        rows.append({**labels, "runs": len(part), **_final_estimates(mat, base_mat, **boot)})
    table = pd.DataFrame(rows)
    mc = table.pop("_mc_error") if "_mc_error" in table.columns else pd.Series(dtype=float)
    mc_error = float(mc.max()) if mc.notna().any() else float("nan")
    display = {"runs": "runs", "mean": "mean", "iqm": "IQM"}
    if baseline is None:
        table = table.drop(columns=["p_improve", "p_improve_lo", "p_improve_hi"])
    else:
        display["p_improve"] = f"P(> {baseline})"
    return FinalTable(
        table,
        caption=_final_caption(metric, last_k, task_col, baseline, mc_error=mc_error, **boot),
        display=display,
        reps=reps,
        mc_error=mc_error,
    )


def resolvable_differences(
    scores: pd.DataFrame,
    variant: str | None,
    facets: Sequence[str] = (),
    *,
    power: float = 0.8,
    alpha: float = 0.05,
) -> Resolvable:
    """Per panel, the smallest difference of final scores that its seeds can resolve.

    With ``n`` runs per variant and the variants' pooled SD ``s`` (:func:`analysis.power.pooled_sd`
    over each variant's final scores), a two-sided two-sample t test at level ``alpha`` detects a
    difference of means with probability ``power`` only from :func:`analysis.power.min_detectable_effect`
    ``(n, s)`` on (noncentral t, Cohen 1988 ch. 2); smaller differences cannot be told from noise.
    Where variants have different run counts, ``n`` is the smallest (what the least-run variant
    supports).

    Args:
        scores: one row per run: ``score`` (final score) and the ``variant`` and ``facets`` columns.
        variant: the column telling variants apart (None: all runs are one variant).
        facets: the columns telling panels apart (none: one row overall).
        power, alpha: of the test.

    Returns:
        A :class:`Resolvable`: its frame has one row per panel (in order of appearance):
        ``*facets``, ``variants``, ``n_min``, ``n_max`` (runs per variant), ``pooled_sd`` (NaN
        when no variant has two runs) and ``resolvable`` (the smallest resolvable difference, in
        the score's units; NaN when ``n_min < 2``); beside it ``power`` and ``alpha``.
    """
    facets = list(facets)
    frame = scores[np.isfinite(scores["score"].to_numpy(dtype=np.float64))]
    panels = frame.groupby(facets, observed=True, sort=False) if facets else [((), frame)]
    rows = []
    for key, part in panels:
        groups = (
            [g["score"].to_numpy(dtype=np.float64) for _, g in part.groupby(variant, observed=True)]
            if variant
            else [part["score"].to_numpy(dtype=np.float64)]
        )
        sizes = [g.size for g in groups]
        sd = pooled_sd(*groups)
        n_min = min(sizes, default=0)
        rows.append(
            {
                **key_dict(facets, key),
                "variants": len(groups),
                "n_min": n_min,
                "n_max": max(sizes, default=0),
                "pooled_sd": sd,
                "resolvable": min_detectable_effect(n_min, sd, power, alpha),
            }
        )
    out = pd.DataFrame(rows, columns=[*facets, "variants", "n_min", "n_max", "pooled_sd", "resolvable"])
    return Resolvable(out, power=power, alpha=alpha)


def _baseline_matrices(
    runs: pd.DataFrame, by: list[str], base_mask: np.ndarray | None, task_order: list[str]
) -> tuple[dict[tuple, np.ndarray], np.ndarray | None]:
    """The baseline's ``(runs, tasks)`` score matrices (:func:`_score_matrix`) per facet.

    Args:
        runs: one scored row per run (``score``, ``_task`` and the ``by`` columns).
        by: variant columns; the facet of a row is its values of ``by[1:]``.
        base_mask: which rows are baseline runs (None: no baseline).
        task_order: the matrices' column order.

    Returns:
        ``({facet values as strings: matrix}, pooled)``; ``pooled`` is the matrix of all baseline
        runs when the baseline sits in panels of its own (a facet without baseline runs then
        compares with it), else None. Both empty/None without baseline runs.
    """
    if base_mask is None or not base_mask.any():
        return {}, None
    base_runs = runs[base_mask]
    mats = {}
    for fkey, fpart in base_runs.groupby(by[1:], observed=True) if by[1:] else [((), base_runs)]:
        fkey = fkey if isinstance(fkey, tuple) else (fkey,)
        mats[tuple(str(v) for v in fkey)] = _score_matrix(fpart["score"], fpart["_task"], task_order)
    panel_of = joined_keys(runs, by[1:]) if by[1:] else np.zeros(len(runs))
    pooled = None
    if baseline_has_own_panels(panel_of, base_mask):
        pooled = _score_matrix(base_runs["score"], base_runs["_task"], task_order)
    return mats, pooled


def _final_estimates(
    mat: np.ndarray, base_mat: np.ndarray | None, *, reps: int, confidence: float, seed: int
) -> dict[str, float]:
    """Mean, IQM and P(improvement over ``base_mat``) of a ``(runs, tasks)`` score matrix, each
    with its stratified bootstrap interval (``*_lo``, ``*_hi``), and ``_mc_error``: the largest
    Monte Carlo error of those intervals' endpoints (:func:`analysis.stats.percentile_mc_error`).

    Intervals are NaN when no task has two runs (in either matrix, for P); P and its interval are
    NaN without ``base_mat``.
    """
    nan = float("nan")
    mean, iq = stats.mean_score(mat), stats.iqm(mat)
    mean_lo = mean_hi = iq_lo = iq_hi = p_lo = p_hi = nan
    errors = []
    if _most_runs_per_task(mat) >= 2:  # one run per task: a bootstrap over runs returns the run itself
        for values, name in zip(
            stats.stratified_bootstrap_replicates([stats.mean_score, stats.iqm], mat, reps=reps, seed=seed),
            ("mean", "iqm"),
            strict=True,
        ):
            lo, hi = stats.percentile_interval(values, confidence)
            mean_lo, mean_hi = (lo, hi) if name == "mean" else (mean_lo, mean_hi)
            iq_lo, iq_hi = (lo, hi) if name == "iqm" else (iq_lo, iq_hi)
            errors.append(stats.percentile_mc_error(values, confidence))
    if base_mat is not None:
        p = stats.probability_of_improvement(mat, base_mat)
        if min(_most_runs_per_task(m) for m in (mat, base_mat)) >= 2:
            (values,) = stats.stratified_bootstrap_replicates(
                [stats.probability_of_improvement], mat, base_mat, reps=reps, seed=seed
            )
            p_lo, p_hi = stats.percentile_interval(values, confidence)
            errors.append(stats.percentile_mc_error(values, confidence))
    else:
        p = nan
    errors = [e for e in errors if np.isfinite(e)]
    return {
        "_mc_error": max(errors) if errors else nan,
        "mean": mean,
        "mean_lo": mean_lo,
        "mean_hi": mean_hi,
        "iqm": iq,
        "iqm_lo": iq_lo,
        "iqm_hi": iq_hi,
        "p_improve": p,
        "p_improve_lo": p_lo,
        "p_improve_hi": p_hi,
    }


def _most_runs_per_task(mat: np.ndarray) -> int:
    """The largest number of scored runs (non-NaN rows) of any task (column) of ``mat``."""
    return np.sum(~np.isnan(mat), axis=0).max(initial=0)


def _final_caption(
    metric: str,
    last_k: int | None,
    task_col: str | None,
    baseline: Any,
    *,
    reps: int,
    confidence: float,
    seed: int,
    mc_error: float = float("nan"),
) -> str:
    """How :func:`final_performance_table` scored, aggregated and compared the runs."""
    how = (
        "last evaluation"
        if layout.is_eval_metric(metric)
        else (
            "mean of the last 10% of logged steps"
            if last_k is None
            else f"mean of the last {last_k} logged steps"
        )
    )
    strat = f", stratified by {task_col}" if task_col else ""
    return (
        f"Final {metric} per run ({how}); mean and IQM over runs with {100 * confidence:g}% percentile "
        f"bootstrap intervals ({reps:,} resamples of runs{strat}, seed {seed}"
        + (
            f"; fewer than rliable's {REPORT_REPS:,} to keep the report quick at this many runs"
            if reps < REPORT_REPS
            else ""
        )
        + (
            "; Monte Carlo error of the endpoints "
            + (f"at most {mc_error:.2g}" if mc_error >= 1e-4 else "below 0.0001")
            + ", SD over 10 batches of resamples / √10"
            if np.isfinite(mc_error)
            else ""
        )
        + ")"
        + (
            f"; P(> {baseline}): probability that a run of the variant beats a run of {baseline} "
            "(Mann-Whitney U / nm)."
            if baseline is not None
            else "."
        )
    )
