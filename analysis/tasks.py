"""Scores over several tasks, as rliable aggregates them (Agarwal et al. 2021).

A variant is run on several tasks with several seeds each. Its scores form a matrix of shape
``(n_runs, n_tasks)``: one column per task, one row per run (seed), NaN where a task has fewer runs
than another. A set of variants is a ``score_dict`` ``{variant: matrix}``, the columns in one task
order, exactly what rliable's ``library.get_interval_estimates`` and
``library.create_performance_profile`` take; :func:`get_interval_estimates` and
:func:`create_performance_profile` take and return the same shapes.

The aggregate functions, each a ``(n_runs, n_tasks)`` matrix to a number (NaN entries ignored),
are :mod:`analysis.stats`' (rliable's names in brackets):

=========================================  =================================================
:func:`analysis.stats.mean_score`          mean over tasks of the per-task mean (``aggregate_mean``)
:func:`analysis.stats.median_score`        median over tasks of the per-task mean (``aggregate_median``)
:func:`analysis.stats.iqm`                 25% trimmed mean of all runs x tasks (``aggregate_iqm``)
:func:`analysis.stats.optimality_gap`      ``gamma - mean(min(score, gamma))`` (``aggregate_optimality_gap``)
:func:`analysis.stats.probability_of_improvement`  P(X > Y) per task, averaged over tasks (``probability_of_improvement``)
=========================================  =================================================

:data:`AGGREGATES` names the first four, :func:`aggregate_metrics` evaluates them together (in
rliable's customary order: median, IQM, mean, optimality gap). Intervals are percentile intervals
of the stratified bootstrap (each replicate resamples the runs of every task, with replacement,
among that task's own runs; two matrices, as for P(X > Y), are resampled independently:
rliable's ``StratifiedBootstrap`` and ``StratifiedIndependentBootstrap``), computed by
:func:`analysis.stats.stratified_bootstrap_replicates`.

Scores are put on one scale per task before they are pooled (:func:`normalise`):
``(score - low) / (high - low)``, where ``low`` is the starting policy's score on the task (its
greedy eval before the first optimizer step, ``eval_start.json``, :data:`harness.layout.START_EVAL_FILE`)
and ``high`` the best score possible (1 for an accuracy) or a stated reference: 0 is where
training started, 1 a perfect score. This is rliable's (and the Atari benchmarks') normalisation
``(score - random) / (human - random)`` with the starting policy in the place of the random one.

References:
    Agarwal, Schwarzer, Castro, Courville, Bellemare (2021), "Deep Reinforcement Learning at the
    Edge of the Statistical Precipice", NeurIPS: Sections 3-4 (stratified bootstrap, IQM,
    optimality gap, probability of improvement, performance profiles); the ``rliable`` library.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis import stats

__all__ = [
    "AGGREGATES",
    "TaskAggregate",
    "TaskRange",
    "aggregate_metrics",
    "aggregate_over_tasks",
    "create_performance_profile",
    "get_interval_estimates",
    "normalise",
    "score_dict",
    "task_ranges",
]

#: The aggregates of :func:`aggregate_metrics`, in its order: name to function of a ``(n_runs,
#: n_tasks)`` matrix (rliable's ``aggregate_median``, ``aggregate_iqm``, ``aggregate_mean``,
#: ``aggregate_optimality_gap`` with ``gamma = 1``).
AGGREGATES: Mapping[str, Callable[[np.ndarray], float]] = {
    "median": stats.median_score,
    "iqm": stats.iqm,
    "mean": stats.mean_score,
    "optimality_gap": stats.optimality_gap,
}


def aggregate_metrics(scores: np.ndarray) -> np.ndarray:
    """Median, IQM, mean and optimality gap (``gamma = 1``) of a score matrix, as one array.

    The ``func`` rliable's examples pass to ``get_interval_estimates``: ``np.array([aggregate_median,
    aggregate_iqm, aggregate_mean, aggregate_optimality_gap])`` of the scores (Agarwal et al. 2021;
    :data:`AGGREGATES` for each formula). :func:`get_interval_estimates` evaluates it on every
    bootstrap replicate at once.

    Args:
        scores: shape ``(n_runs, n_tasks)`` (1-D: one task); NaN entries are ignored.

    Returns:
        Shape ``(4,)``: median, IQM, mean, optimality gap (NaN when no score is finite).
    """
    return np.array([f(scores) for f in AGGREGATES.values()], dtype=np.float64)


def _as_matrices(scores: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
    """One score matrix or a tuple/list of them (as rliable's ``score_dict`` values), each 2-D."""
    mats = [scores] if isinstance(scores, np.ndarray) else list(scores)
    out = []
    for m in mats:
        m = np.asarray(m, dtype=np.float64)
        out.append(m[:, None] if m.ndim == 1 else m)
    return out


def get_interval_estimates(
    score_dict: Mapping[str, np.ndarray | Sequence[np.ndarray]],
    func: Callable[..., Any],
    *,
    reps: int = 50_000,
    confidence_interval_size: float = 0.95,
    seed: int = 0,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Point estimates and stratified-bootstrap percentile intervals, per variant.

    rliable's ``library.get_interval_estimates`` (Agarwal et al. 2021) with its defaults (50,000
    replicates, 95%, the percentile method), written on :func:`analysis.stats.stratified_bootstrap_replicates`:
    for each key, ``func`` on the scores as given, and the percentile interval of ``func`` over
    replicates that resample, within every task, as many runs as the task has, with replacement
    (NaN entries, missing runs, are never drawn). A tuple of matrices (``(scores_x, scores_y)``
    for :func:`analysis.stats.probability_of_improvement`) is resampled independently per matrix.
    :func:`aggregate_metrics` and each function of :data:`AGGREGATES` or
    ``probability_of_improvement`` are evaluated on all replicates at once; any other ``func`` is
    called once per replicate. Unlike the report's tables, an interval is returned even when no
    task has two runs (then it is the point estimate itself, as in rliable).

    Args:
        score_dict: ``{variant: scores}``, ``scores`` a ``(n_runs, n_tasks)`` matrix (1-D: one
            task) or a tuple of such matrices with equal ``n_tasks``.
        func: the statistic, taking one matrix per element of ``scores``; it returns a number or a
            1-D array of ``k`` numbers.
        reps: bootstrap replicates.
        confidence_interval_size: two-sided coverage in (0, 1).
        seed: seed of the ``numpy.random.Generator``; every key is resampled from this seed.

    Returns:
        ``(point_estimates, interval_estimates)``: ``{variant: array of shape (k,)}`` and
        ``{variant: array of shape (2, k)}``, row 0 the lower and row 1 the upper bounds (rliable's
        layout; ``k = 1`` for a scalar ``func``).

    Raises:
        ValueError: if ``reps < 1``, the coverage is not in (0, 1), or the matrices of one key
            differ in their number of tasks.
    """
    if not 0.0 < confidence_interval_size < 1.0:
        raise ValueError(f"confidence_interval_size must be in (0, 1), got {confidence_interval_size}")
    alpha = (1.0 - confidence_interval_size) / 2.0
    funcs = list(AGGREGATES.values()) if func is aggregate_metrics else [func]
    points: dict[str, np.ndarray] = {}
    intervals: dict[str, np.ndarray] = {}
    for key, scores in score_dict.items():
        mats = _as_matrices(scores)
        if len({m.shape[1] for m in mats}) > 1:
            raise ValueError(
                f"{key!r}: the matrices have {[m.shape[1] for m in mats]} tasks; give equal numbers"
            )
        points[key] = np.atleast_1d(np.asarray(func(*mats), dtype=np.float64))
        values = stats.stratified_bootstrap_replicates(funcs, *mats, reps=reps, seed=seed)
        reps_by_stat = np.column_stack([np.asarray(v, dtype=np.float64).reshape(reps, -1) for v in values])
        with warnings.catch_warnings():  # a statistic NaN on every replicate: its interval is NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            intervals[key] = np.nanquantile(reps_by_stat, [alpha, 1.0 - alpha], axis=0)
    return points, intervals


def create_performance_profile(
    score_dict: Mapping[str, np.ndarray],
    tau_list: Sequence[float] | np.ndarray,
    *,
    reps: int = 2000,
    confidence_interval_size: float = 0.95,
    seed: int = 0,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Performance profiles (score distributions) with their stratified-bootstrap bands, per variant.

    rliable's ``library.create_performance_profile`` with ``use_score_distribution=True`` and its
    defaults (2,000 replicates, 95%, percentile; Agarwal et al. 2021, Section 4 and Fig. 5): at
    each threshold tau, the fraction of all runs x tasks with score ``> tau``, and that fraction's
    percentile interval over the stratified bootstrap (:func:`analysis.stats.performance_profile_ci`).

    Args:
        score_dict: ``{variant: (n_runs, n_tasks) matrix}`` (1-D: one task); NaN entries are
            missing runs, never counted or drawn.
        tau_list: thresholds, shape ``(k,)``.
        reps, confidence_interval_size, seed: as in :func:`get_interval_estimates`.

    Returns:
        ``(profiles, profile_cis)``: ``{variant: array (k,)}`` and ``{variant: array (2, k)}``
        (lower, upper). A band is NaN where no task of the variant has two runs (a resample can
        only return the runs themselves); rliable would return the profile itself there.

    Raises:
        ValueError: if ``reps < 1`` or the coverage is not in (0, 1).
    """
    taus = np.asarray(tau_list, dtype=np.float64)
    profiles, cis = {}, {}
    for key, scores in score_dict.items():
        profile, lo, hi = stats.performance_profile_ci(
            scores, taus, reps=reps, confidence=confidence_interval_size, seed=seed
        )
        profiles[key], cis[key] = profile, np.vstack([lo, hi])
    return profiles, cis


# --------------------------------------------------------------------------------------------------
# Normalisation


@dataclass(frozen=True)
class TaskRange:
    """Where a task's scores are put on the common scale: ``low`` becomes 0, ``high`` 1.

    Attributes:
        task: the task's name.
        low: the starting policy's score (mean of its runs' start evals), or a stated one.
        high: the reference score: 1 for a score bounded by 1, or a stated one.
        low_from: ``"start eval"``, ``"stated"`` or ``"default"`` (0: nothing measured or stated).
        high_from: ``"bound"`` (the score is at most 1), ``"stated"`` or ``"default"`` (1).
        measured: runs whose start eval the low averages (0 unless ``low_from`` is start eval).
        spread: largest minus smallest of those start evals (0 when the runs agree, as greedy
            evals of one starting model on one eval split do).
    """

    task: str
    low: float
    high: float
    low_from: str
    high_from: str
    measured: int = 0
    spread: float = 0.0

    @property
    def usable(self) -> bool:
        """Whether scores can be normalised: both ends finite and ``high > low``."""
        return bool(np.isfinite(self.low) and np.isfinite(self.high) and self.high > self.low)


def _stated(value: float | Mapping[str, float] | None, task: str) -> float | None:
    """A stated end of the range for ``task``: one number for every task, or a per-task mapping."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        v = value.get(task)
        return None if v is None else float(v)
    return float(value)


def task_ranges(
    tasks: Sequence[str],
    starts: Mapping[str, Sequence[float]] | None = None,
    *,
    bounded: bool = True,
    stated_low: float | Mapping[str, float] | None = None,
    stated_high: float | Mapping[str, float] | None = None,
) -> dict[str, TaskRange]:
    """Each task's range for :func:`normalise`.

    ``low`` is the mean of the task's start evals (the starting policy's greedy score, measured
    before the first optimizer step) when any run recorded one, else the stated low, else 0.
    ``high`` is the stated high, else 1 (for a score bounded by 1, ``bounded``, the best score
    possible). Agarwal et al. 2021 normalise by ``(score - random) / (human - random)``; the
    starting policy plays the random agent's part.

    Args:
        tasks: the task names.
        starts: ``{task: start evals of its runs}`` (NaN or missing: not measured).
        bounded: whether the score is at most 1 (an accuracy or a correctness reward).
        stated_low, stated_high: one number for every task or ``{task: number}``.

    Returns:
        ``{task: TaskRange}`` in the order of ``tasks``.
    """
    out = {}
    for task in tasks:
        measured = np.asarray(list((starts or {}).get(task, ())), dtype=np.float64)
        measured = measured[np.isfinite(measured)]
        low_stated, high_stated = _stated(stated_low, task), _stated(stated_high, task)
        if measured.size:  # equal evals (one model, one eval split) give the value itself
            low = float(measured[0] if np.all(measured == measured[0]) else measured.mean())
            low_from = "start eval"
        elif low_stated is not None:
            low, low_from = low_stated, "stated"
        else:
            low, low_from = 0.0, "default"
        if high_stated is not None:
            high, high_from = high_stated, "stated"
        else:
            high, high_from = 1.0, "bound" if bounded else "default"
        spread = float(measured.max() - measured.min()) if measured.size else 0.0
        out[task] = TaskRange(task, low, high, low_from, high_from, int(measured.size), spread)
    return out


def normalise(scores: np.ndarray, low: np.ndarray | float, high: np.ndarray | float) -> np.ndarray:
    """Normalised scores ``(score - low) / (high - low)``, per task.

    Agarwal et al. 2021 (and the Atari benchmarks' human-normalised score): 0 at ``low``, 1 at
    ``high``; a score below the start is negative, one above the reference exceeds 1.

    Args:
        scores: shape ``(n_runs, n_tasks)`` (or any shape whose last axis is the task).
        low: shape ``(n_tasks,)`` or a number: each task's low end (its starting policy's score).
        high: the same shape: each task's high end (1 for an accuracy, or a stated reference).

    Returns:
        An array of ``scores``' shape (NaN stays NaN).

    Raises:
        ValueError: where a task's ``high <= low`` (nothing to normalise by), naming the column.
    """
    s = np.asarray(scores, dtype=np.float64)
    lo = np.broadcast_to(np.asarray(low, dtype=np.float64), s.shape[-1:] if s.ndim else ())
    hi = np.broadcast_to(np.asarray(high, dtype=np.float64), lo.shape)
    bad = np.flatnonzero(~(hi > lo)) if lo.ndim else ([] if hi > lo else [0])
    if len(bad):
        k = int(bad[0])
        raise ValueError(
            f"task column {k}: high {float(hi.ravel()[k])!r} is not above low {float(lo.ravel()[k])!r}; "
            "state a reference score above the starting policy's"
        )
    return (s - lo) / (hi - lo)


# --------------------------------------------------------------------------------------------------
# From per-run scores to the aggregate over tasks


def score_dict(
    runs: pd.DataFrame,
    *,
    variant: str,
    task: str,
    tasks: Sequence[str],
    score: str = "score",
    variants: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """Per-run scores as rliable's ``score_dict``: ``{variant: (n_runs, n_tasks) matrix}``.

    Args:
        runs: one row per run with the ``score``, ``variant`` and ``task`` columns.
        variant, task, score: the columns.
        tasks: the matrices' column order (tasks not listed are left out).
        variants: the keys in order (default: in order of appearance).

    Returns:
        For each variant a matrix with one column per task of ``tasks`` and as many rows as its
        task with the most runs, NaN-padded (a task without runs is an all-NaN column).
    """
    names = list(variants) if variants is not None else list(dict.fromkeys(runs[variant].astype(str)))
    v_of = runs[variant].astype(str).to_numpy()
    t_of = runs[task].astype(str).to_numpy()
    values = runs[score].to_numpy(dtype=np.float64)
    out = {}
    for name in names:
        cols = [values[(v_of == name) & (t_of == t)] for t in tasks]
        cols = [c[np.isfinite(c)] for c in cols]
        mat = np.full((max((c.size for c in cols), default=0), len(tasks)), np.nan)
        for j, c in enumerate(cols):
            mat[: c.size, j] = c
        out[name] = mat
    return out


@dataclass(frozen=True)
class TaskAggregate:
    """:func:`aggregate_over_tasks`' answer.

    Attributes:
        tasks: the tasks aggregated over (every matrix's columns, in order).
        left_out: ``{task: why}`` for each task of the runs that is not aggregated over.
        ranges: ``{task: TaskRange}`` of every task of the runs.
        matrices: ``{variant: (n_runs, n_tasks) matrix}`` of normalised scores over ``tasks``.
        aggregates: one row per variant: ``variant``, ``runs``, ``tasks``, and for each of
            :data:`AGGREGATES` and ``p_improve`` (P(variant > baseline), averaged over tasks) the
            estimate with ``_lo``/``_hi`` (NaN intervals where no task has two runs; NaN
            ``p_improve`` for the baseline itself or without one).
        per_task: one row per (task, variant): ``task``, ``variant``, ``runs``, ``low``, ``high``,
            ``raw`` (mean score), ``normalised`` and ``iqm`` with intervals, ``p_improve`` with its
            interval: the same statistics on that task's column alone.
        profile: one row per variant and threshold: ``variant``, ``tau``, ``fraction``, ``lo``,
            ``hi``, ``runs`` (:func:`create_performance_profile` over every run of ``tasks``).
        baseline: the variant P(>) compares with (None without).
        reps, profile_reps, confidence, seed: the bootstraps' settings.
    """

    tasks: tuple[str, ...]
    left_out: Mapping[str, str]
    ranges: Mapping[str, TaskRange]
    matrices: Mapping[str, np.ndarray]
    aggregates: pd.DataFrame
    per_task: pd.DataFrame
    profile: pd.DataFrame
    baseline: str | None
    reps: int
    profile_reps: int
    confidence: float
    seed: int = 0


def _estimates(
    mat: np.ndarray, base: np.ndarray | None, *, reps: int, confidence: float, seed: int
) -> dict[str, float]:
    """:data:`AGGREGATES` of ``mat`` and P(mat > base), each with its stratified-bootstrap
    interval (NaN where no task has two runs, in either matrix for P)."""
    nan = float("nan")
    out: dict[str, float] = {}
    most = np.sum(~np.isnan(mat), axis=0).max(initial=0)
    values = (
        stats.stratified_bootstrap_replicates(list(AGGREGATES.values()), mat, reps=reps, seed=seed)
        if most >= 2
        else [None] * len(AGGREGATES)
    )
    for (name, f), v in zip(AGGREGATES.items(), values, strict=True):
        lo, hi = stats.percentile_interval(v, confidence) if v is not None else (nan, nan)
        out.update({name: f(mat), f"{name}_lo": lo, f"{name}_hi": hi})
    p = lo = hi = nan
    if base is not None:
        p = stats.probability_of_improvement(mat, base)
        if min(most, np.sum(~np.isnan(base), axis=0).max(initial=0)) >= 2:
            (v,) = stats.stratified_bootstrap_replicates(
                [stats.probability_of_improvement], mat, base, reps=reps, seed=seed
            )
            lo, hi = stats.percentile_interval(v, confidence)
    out.update({"p_improve": p, "p_improve_lo": lo, "p_improve_hi": hi})
    return out


def aggregate_over_tasks(
    runs: pd.DataFrame,
    *,
    variant: str,
    task: str,
    ranges: Mapping[str, TaskRange],
    baseline: str | None = None,
    variants: Sequence[str] | None = None,
    tasks: Sequence[str] | None = None,
    score: str = "score",
    reps: int = 50_000,
    profile_reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    points: int = 101,
) -> TaskAggregate:
    """Normalised scores of every variant aggregated over tasks, per task, and as profiles.

    Each run's score is normalised on its task's range (:func:`normalise`); the tasks aggregated
    over are those whose range is usable and on which every variant has a run (a task missing for
    one variant would make the variants' aggregates incomparable: it is named in ``left_out``).
    Then, per variant, over its ``(n_runs, n_tasks)`` matrix of normalised scores (Agarwal et al.
    2021, as :func:`get_interval_estimates` with :func:`aggregate_metrics`): median, IQM, mean and
    optimality gap with stratified-bootstrap percentile intervals; P(variant > baseline), the
    Mann-Whitney probability per task averaged over tasks, with the interval of the independent
    stratified bootstrap; and the performance profile of every run with its band. The per-task
    rows are the same statistics on one column each (with one task they equal the aggregate:
    same draws, same seed).

    Args:
        runs: one row per run: the ``score``, ``variant`` and ``task`` columns.
        variant, task, score: the columns.
        ranges: :func:`task_ranges` of the tasks.
        baseline: the variant P(>) compares with (None: no P column).
        variants: the variants in display order (default: order of appearance).
        tasks: the tasks in order (default: sorted names of the runs' tasks).
        reps: bootstrap replicates of the intervals (rliable: 50,000).
        profile_reps: replicates of the profiles' bands (rliable: 2,000).
        confidence: two-sided coverage in (0, 1).
        seed: bootstrap seed.
        points: thresholds of the profiles, evenly spaced over the normalised scores' range (and
            0, the starting policy's score).

    Returns:
        A :class:`TaskAggregate`.

    Raises:
        KeyError: a column is missing.
        ValueError: if ``reps`` or ``profile_reps`` < 1 or the coverage is not in (0, 1).
    """
    for c in (variant, task, score):
        if c not in runs.columns:
            raise KeyError(f"column {c!r} not in the runs")
    frame = runs[np.isfinite(runs[score].to_numpy(dtype=np.float64))].copy()
    frame[variant] = frame[variant].astype(str)
    frame[task] = frame[task].astype(str)
    names = list(variants) if variants is not None else list(dict.fromkeys(frame[variant]))
    names = [v for v in names if (frame[variant] == v).any()]
    all_tasks = list(tasks) if tasks is not None else sorted(frame[task].unique())
    kept, left_out = _tasks_kept(frame, variant, task, names, all_tasks, ranges)
    low = np.array([ranges[t].low for t in kept])
    high = np.array([ranges[t].high for t in kept])
    raw = score_dict(frame, variant=variant, task=task, tasks=kept, score=score, variants=names)
    mats = {v: normalise(m, low, high) if kept else m for v, m in raw.items()}
    base = mats.get(baseline) if baseline is not None else None
    aggregates, per_task = _estimate_tables(
        raw,
        mats,
        kept,
        ranges,
        baseline if base is not None else None,
        reps=reps,
        confidence=confidence,
        seed=seed,
    )
    return TaskAggregate(
        tasks=tuple(kept),
        left_out=left_out,
        ranges=dict(ranges),
        matrices=mats,
        aggregates=aggregates,
        per_task=per_task,
        profile=_profile_frame(mats, points=points, reps=profile_reps, confidence=confidence, seed=seed),
        baseline=baseline if base is not None else None,
        reps=reps,
        profile_reps=profile_reps,
        confidence=confidence,
        seed=seed,
    )


def _tasks_kept(
    frame: pd.DataFrame,
    variant: str,
    task: str,
    names: Sequence[str],
    all_tasks: Sequence[str],
    ranges: Mapping[str, TaskRange],
) -> tuple[list[str], dict[str, str]]:
    """The tasks every variant of ``names`` has a scored run on and whose range is usable, and
    ``{task: why}`` for the others."""
    left_out: dict[str, str] = {}
    for t in all_tasks:
        have = set(frame.loc[frame[task] == t, variant])
        why = _why_left_out(ranges.get(t), have, [v for v in names if v not in have])
        if why:
            left_out[t] = why
    return [t for t in all_tasks if t not in left_out], left_out


def _why_left_out(r: TaskRange | None, have: set[str], missing: Sequence[str]) -> str | None:
    """Why a task is not aggregated over (None: it is): no range, an unusable range, no scored run,
    or variants without a scored run on it."""
    if r is None:
        return "no range"
    if not r.usable:
        return f"its high {r.high:.3g} is not above its low {r.low:.3g} (the starting policy's score)"
    if not have:
        return "no scored run"
    return f"no scored run of {', '.join(missing)}" if missing else None


#: The statistics of a per-task row (:attr:`TaskAggregate.per_task`), before ``mean`` is renamed.
_PER_TASK = (
    "mean",
    "mean_lo",
    "mean_hi",
    "iqm",
    "iqm_lo",
    "iqm_hi",
    "p_improve",
    "p_improve_lo",
    "p_improve_hi",
)


def _estimate_tables(
    raw: Mapping[str, np.ndarray],
    mats: Mapping[str, np.ndarray],
    kept: Sequence[str],
    ranges: Mapping[str, TaskRange],
    baseline: str | None,
    **boot: Any,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:attr:`TaskAggregate.aggregates` and :attr:`TaskAggregate.per_task` of the normalised
    matrices ``mats`` (``raw``: the same scores before normalising); ``boot``: ``reps``,
    ``confidence`` and ``seed`` of :func:`_estimates`."""
    base = mats.get(baseline) if baseline is not None else None
    rows, task_rows = [], []
    for v, m in mats.items():
        compare = base if base is not None and v != baseline else None
        counts = np.sum(~np.isnan(m), axis=0)
        rows.append(
            {
                "variant": v,
                "runs": int(counts.sum()),
                "tasks": int((counts > 0).sum()),
                **_estimates(m, compare, **boot),
            }
        )
        for j, t in enumerate(kept):
            col = _column(m, j)
            est = _estimates(col, None if compare is None else _column(compare, j), **boot)
            task_rows.append(
                {
                    "task": t,
                    "variant": v,
                    "runs": len(col),
                    "low": ranges[t].low,
                    "high": ranges[t].high,
                    "raw": float(np.nanmean(raw[v][:, j])) if len(col) else float("nan"),
                    **{k: est[k] for k in _PER_TASK},
                }
            )
    aggregates = pd.DataFrame(rows, columns=["variant", "runs", "tasks", *_estimate_columns()])
    per_task = pd.DataFrame(task_rows, columns=["task", "variant", "runs", "low", "high", "raw", *_PER_TASK])
    per_task = per_task.rename(
        columns={"mean": "normalised", "mean_lo": "normalised_lo", "mean_hi": "normalised_hi"}
    )
    order = {t: k for k, t in enumerate(kept)}
    per_task = per_task.sort_values("task", key=lambda c: c.map(order), kind="stable").reset_index(drop=True)
    return aggregates, per_task


def _column(mat: np.ndarray, j: int) -> np.ndarray:
    """Column ``j`` of ``mat`` as a one-task matrix of its present runs."""
    col = mat[:, j]
    return col[~np.isnan(col)][:, None]


def _estimate_columns() -> list[str]:
    names = [*AGGREGATES, "p_improve"]
    return [c for n in names for c in (n, f"{n}_lo", f"{n}_hi")]


def _profile_frame(
    mats: Mapping[str, np.ndarray], *, points: int, reps: int, confidence: float, seed: int
) -> pd.DataFrame:
    """Each variant's profile over a common grid of thresholds (the normalised scores' range and 0,
    2% beyond each end), with its band."""
    columns = ["variant", "tau", "fraction", "lo", "hi", "runs"]
    finite = np.concatenate([m[np.isfinite(m)] for m in mats.values()]) if mats else np.zeros(0)
    if finite.size == 0:
        return pd.DataFrame(columns=columns)
    lo, hi = min(finite.min(), 0.0), max(finite.max(), 0.0)  # 0, the starting policy, always shown
    span = hi - lo or 1.0
    taus = np.linspace(lo - 0.02 * span, hi + 0.02 * span, points)
    profiles, cis = create_performance_profile(
        mats, taus, reps=reps, confidence_interval_size=confidence, seed=seed
    )
    parts = [
        pd.DataFrame(
            {
                "variant": v,
                "tau": taus,
                "fraction": profiles[v],
                "lo": cis[v][0],
                "hi": cis[v][1],
                "runs": int(np.isfinite(mats[v]).sum()),
            }
        )
        for v in mats
    ]
    return pd.concat(parts, ignore_index=True)[columns]
