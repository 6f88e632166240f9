"""Interval estimates and aggregate scores over a handful of runs.

Two arms compared by a t test (Welch's interval, power, seeds needed, the smallest resolvable
difference) are :mod:`analysis.power`'s.

Small pure functions over numpy arrays. Score matrices follow rliable's convention: shape
``(n_runs, n_tasks)``, one column per task, one row per run (seed). A NaN entry marks a run that
does not exist for that task (tasks with fewer seeds than others); every function here ignores
those entries instead of propagating them.

References:
    Agarwal, Schwarzer, Castro, Courville, Bellemare (2021), "Deep Reinforcement Learning at the
    Edge of the Statistical Precipice", NeurIPS; the ``rliable`` library (IQM, stratified
    bootstrap, probability of improvement).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats as _st

__all__ = [
    "bootstrap_mean_interval",
    "iqm",
    "mean_score",
    "median_score",
    "nan_moments",
    "optimality_gap",
    "performance_profile",
    "percentile_interval",
    "percentile_mc_error",
    "performance_profile_ci",
    "probability_of_improvement",
    "stratified_bootstrap_ci",
    "stratified_bootstrap_cis",
    "stratified_bootstrap_replicates",
    "t_interval",
    "t_interval_from_moments",
]


def _check_bootstrap_args(reps: int, confidence: float) -> None:
    """Raises ValueError unless ``reps >= 1`` and ``0 < confidence < 1``."""
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


@functools.lru_cache(maxsize=4096)
def _t_quantile(p: float, dof: float) -> float:
    """Student-t quantile ``t_{p, dof}`` (``scipy.stats.t.ppf``); NaN for a NaN ``dof``."""
    return float("nan") if math.isnan(dof) else float(_st.t.ppf(p, dof))


def t_interval_from_moments(
    mean: np.ndarray, std: np.ndarray, n: np.ndarray, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Student-t confidence interval for a mean, from per-group moments (vectorised).

    ``mean ± t_{(1+confidence)/2, n-1} · std / sqrt(n)`` (Student 1908; the textbook small-sample
    interval). With 3-5 seeds the t quantile is 2.8-4.3, so a normal ``±1.96·se`` band would be far
    too narrow.

    Args:
        mean: sample means, any shape.
        std: sample standard deviations with ``ddof=1``, same shape as ``mean``.
        n: sample sizes, same shape (broadcastable).
        confidence: two-sided coverage in (0, 1).

    Returns:
        ``(lo, hi)``, arrays of the broadcast shape; NaN where ``n < 2`` (no spread estimate).

    Raises:
        ValueError: if ``confidence`` is not in (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    mean = np.asarray(mean, dtype=np.float64)
    std = np.asarray(std, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    dof = np.where(n >= 2, n - 1.0, np.nan)
    # The quantile depends on the sample size only, and a curve has few distinct sizes: evaluated
    # once per size (scipy's ppf costs about a microsecond per element).
    sizes, inverse = np.unique(dof, return_inverse=True)
    q = np.array([_t_quantile(0.5 + confidence / 2.0, float(d)) for d in sizes])
    q = q[inverse.reshape(dof.shape)] if q.size else np.full(dof.shape, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        half = q * std / np.sqrt(n)
    return mean - half, mean + half


def t_interval(
    x: np.ndarray, axis: int = -1, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and Student-t confidence interval over one axis, ignoring NaNs.

    Args:
        x: samples, e.g. shape ``(n_steps, n_seeds)`` with ``axis=-1``.
        axis: the axis holding the independent samples (runs/seeds).
        confidence: two-sided coverage in (0, 1).

    Returns:
        ``(mean, lo, hi)``, each ``x``'s shape without ``axis``. ``lo``/``hi`` are NaN where fewer
        than two finite samples exist; ``mean`` is NaN where there are none.

    Raises:
        ValueError: if ``confidence`` is not in (0, 1).

    Formula: see :func:`t_interval_from_moments`.
    """
    mean, std, n = nan_moments(x, axis)
    lo, hi = t_interval_from_moments(mean, std, n, confidence)
    return mean, lo, hi


def nan_moments(x: np.ndarray, axis: int = -1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, sample standard deviation (ddof=1) and count over ``axis``, ignoring NaNs.

    Args:
        x: any shape, e.g. ``(n_points, n_runs)`` with ``axis=1``.
        axis: the axis to reduce.

    Returns:
        ``(mean, std, n)`` of ``x``'s shape without ``axis``; mean is NaN where ``n == 0``, std
        where ``n < 2``. Unlike ``np.nanstd`` it emits no warnings for such slices.
    """
    x = np.asarray(x, dtype=np.float64)
    present = ~np.isnan(x)
    if present.all() and x.shape[axis] >= 2:  # no gaps: plain moments, a few passes fewer
        n = np.full(np.delete(x.shape, axis), x.shape[axis])
        return x.mean(axis=axis), x.std(axis=axis, ddof=1), n
    n = present.sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        total = np.where(present, x, 0.0).sum(axis=axis)
        mean = np.where(n > 0, total / np.maximum(n, 1), np.nan)
        dev = np.where(present, x - np.expand_dims(mean, axis), 0.0)
        var = np.where(n >= 2, np.sum(dev * dev, axis=axis) / np.maximum(n - 1, 1), np.nan)
    return mean, np.sqrt(var), n


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean: the 25%-trimmed mean of all scores pooled over runs and tasks.

    Agarwal et al. 2021 (rliable ``metrics.aggregate_iqm``: ``scipy.stats.trim_mean(scores, 0.25,
    axis=None)``). ``trim_mean`` removes ``int(0.25 · N)`` values from each end, so with fewer than
    4 scores nothing is trimmed and the IQM equals the mean.

    Args:
        scores: any shape, typically ``(n_runs, n_tasks)``; NaN entries are ignored.

    Returns:
        The IQM, NaN when no finite score exists.
    """
    flat = np.asarray(scores, dtype=np.float64).ravel()
    flat = flat[~np.isnan(flat)]
    if flat.size == 0:
        return float("nan")
    return float(_st.trim_mean(flat, 0.25))


def mean_score(scores: np.ndarray) -> float:
    """Mean over tasks of the per-task mean over runs (rliable ``aggregate_mean``), ignoring NaNs.

    Args:
        scores: shape ``(n_runs, n_tasks)``; a 1-D array is one task.

    Returns:
        The mean, NaN when no finite score exists.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim == 1:
        s = s[:, None]
    present = ~np.isnan(s)
    n = present.sum(axis=0)
    if not n.any():
        return float("nan")
    per_task = np.where(present, s, 0.0).sum(axis=0)[n > 0] / n[n > 0]
    return float(per_task.mean())


def _task_means(scores: np.ndarray) -> np.ndarray:
    """Per task (column of a ``(n_runs, n_tasks)`` matrix; 1-D: one task), the mean of its present
    scores; tasks without any are left out."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim == 1:
        s = s[:, None]
    present = ~np.isnan(s)
    n = present.sum(axis=0)
    return np.where(present, s, 0.0).sum(axis=0)[n > 0] / n[n > 0]


def median_score(scores: np.ndarray) -> float:
    """Median over tasks of the per-task mean over runs, ignoring NaNs.

    Agarwal et al. 2021, rliable ``metrics.aggregate_median``: ``np.median(np.mean(scores,
    axis=0))``. With one task it is that task's mean over runs.

    Args:
        scores: shape ``(n_runs, n_tasks)``; a 1-D array is one task.

    Returns:
        The median, NaN when no finite score exists.
    """
    per_task = _task_means(scores)
    return float(np.median(per_task)) if per_task.size else float("nan")


def optimality_gap(scores: np.ndarray, gamma: float = 1.0) -> float:
    """How far the scores fall short of ``gamma``: ``gamma - mean(min(score, gamma))``.

    Agarwal et al. 2021, Section 4 (rliable ``metrics.aggregate_optimality_gap``:
    ``gamma - np.mean(np.minimum(scores, gamma))`` over all runs and tasks); lower is better, and
    a score above ``gamma`` counts as ``gamma``. On a matrix with a NaN (a task with fewer runs) the
    mean is taken per task first and then over tasks, as :func:`mean_score` does, so every task
    weighs the same; on a full matrix that is rliable's mean over all entries.

    Args:
        scores: shape ``(n_runs, n_tasks)`` (1-D: one task), e.g. normalised scores, where
            ``gamma = 1`` is the reference score.
        gamma: the threshold, in the scores' units.

    Returns:
        The gap, NaN when no finite score exists.
    """
    s = np.asarray(scores, dtype=np.float64)
    return float(gamma - mean_score(np.minimum(s, gamma)))


def probability_of_improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """P(X > Y): probability that a run of X beats a run of Y on a task, averaged over tasks.

    Agarwal et al. 2021, rliable ``metrics.probability_of_improvement``: per task, the Mann-Whitney
    U statistic of X against Y divided by ``n·m`` (ties count one half); then the mean over tasks.
    Identical score vectors give exactly 0.5, as in rliable.

    Args:
        scores_x: shape ``(n, n_tasks)``; NaNs (missing runs) are dropped per task.
        scores_y: shape ``(m, n_tasks)``, same number of tasks.

    Returns:
        A probability in [0, 1]; NaN when no task has runs on both sides.

    Raises:
        ValueError: if the two matrices have different numbers of tasks.
    """
    x = np.asarray(scores_x, dtype=np.float64)
    y = np.asarray(scores_y, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if y.ndim == 1:
        y = y[:, None]
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"scores_x has {x.shape[1]} tasks, scores_y has {y.shape[1]}")
    probs = []
    for task in range(x.shape[1]):
        xt = x[:, task][~np.isnan(x[:, task])]
        yt = y[:, task][~np.isnan(y[:, task])]
        if xt.size == 0 or yt.size == 0:
            continue
        if xt.shape == yt.shape and np.array_equal(xt, yt):
            probs.append(0.5)
            continue
        u = _st.mannwhitneyu(xt, yt, alternative="greater").statistic
        probs.append(float(u) / (xt.size * yt.size))
    return float(np.mean(probs)) if probs else float("nan")


def _draw_counts(
    scores: np.ndarray, rng: np.random.Generator, reps: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per task: its present scores ``(n,)`` and how often each is drawn in each replicate ``(reps, n)``.

    A replicate draws, for every task, as many runs as that task has, with replacement, from that
    task's own runs; a missing run (NaN) is never drawn. A replicate is fully described by how many
    times it drew each run, which lets the batched statistics work in O(reps · n).
    """
    out = []
    for task in range(scores.shape[1]):
        idx = np.flatnonzero(~np.isnan(scores[:, task]))
        if idx.size == 0:
            out.append((np.zeros(0), np.zeros((reps, 0))))
            continue
        draws = rng.integers(0, idx.size, size=(reps, idx.size))  # = rng.choice(idx.size, ..., replace=True)
        flat = draws + (np.arange(reps) * idx.size)[:, None]
        counts = np.bincount(flat.ravel(), minlength=reps * idx.size).reshape(reps, idx.size)
        out.append((scores[idx, task], counts.astype(np.float64)))
    return out


def _mean_counts(tasks: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    # mean over tasks of each task's resampled mean
    per_task = [c @ v / v.size for v, c in tasks if v.size]
    return np.mean(per_task, axis=0) if per_task else np.full(len(tasks[0][1]) if tasks else 0, np.nan)


def _iqm_counts(tasks: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    # scipy.stats.trim_mean(all scores, 0.25): drop int(n/4) from each end of the pooled sorted
    # scores, average the rest. With the pooled values sorted once, the copies of value i kept by a
    # replicate are its copies between sorted positions k and n - k.
    present = [(v, c) for v, c in tasks if v.size]
    if not present:
        return np.full(tasks[0][1].shape[0] if tasks else 0, np.nan)
    values = np.concatenate([v for v, _ in present])
    counts = np.concatenate([c for _, c in present], axis=1)
    order = np.argsort(values, kind="stable")
    values, counts = values[order], counts[:, order]
    n = values.size
    k = int(0.25 * n)
    upper = np.cumsum(counts, axis=1)
    lower = upper - counts
    kept = np.clip(np.minimum(upper, n - k) - np.maximum(lower, k), 0, None)
    return kept @ values / (n - 2 * k)


def _median_counts(tasks: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    # median over tasks of each task's resampled mean
    per_task = [c @ v / v.size for v, c in tasks if v.size]
    return np.median(per_task, axis=0) if per_task else np.full(len(tasks[0][1]) if tasks else 0, np.nan)


def _optimality_gap_counts(tasks: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    # gamma = 1 minus the mean over tasks of each task's resampled mean of min(score, 1)
    return 1.0 - _mean_counts([(np.minimum(v, 1.0), c) for v, c in tasks])


def _poi_counts(x: list[tuple[np.ndarray, np.ndarray]], y: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    # Mann-Whitney U / (n·m) per task, U = #(x > y) + #(x == y) / 2 over all pairs of the replicate:
    # with draw counts cx, cy and the pairwise comparison G of the task's runs, U = cx · G · cy. G is
    # never formed: with x sorted once, the drawn x below (or equal to) each y are a prefix sum of
    # cx, so a replicate costs O(n + m) instead of O(n·m).
    probs = []
    for (xv, cx), (yv, cy) in zip(x, y, strict=True):
        if xv.size == 0 or yv.size == 0:
            continue
        order = np.argsort(xv, kind="stable")
        below = np.concatenate([np.zeros((cx.shape[0], 1)), np.cumsum(cx[:, order], axis=1)], axis=1)
        le = below[:, np.searchsorted(xv[order], yv, side="right")]  # drawn x <= y_j
        lt = below[:, np.searchsorted(xv[order], yv, side="left")]  # drawn x < y_j
        wins = xv.size - le + 0.5 * (le - lt)  # each replicate draws xv.size runs of x
        probs.append((wins * cy).sum(axis=1) / (xv.size * yv.size))
    if not probs:
        return np.full(x[0][1].shape[0] if x else 0, np.nan)
    return np.mean(probs, axis=0)


def stratified_bootstrap_ci(
    func: Callable[..., float],
    *score_matrices: np.ndarray,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Point estimate and percentile bootstrap interval, resampling runs within each task.

    Agarwal et al. 2021 (rliable ``StratifiedBootstrap`` / ``StratifiedIndependentBootstrap`` with
    the percentile method): each replicate draws, for every task, as many runs as that task has,
    with replacement; several matrices (e.g. X and Y for :func:`probability_of_improvement`) are
    resampled independently. rliable uses 50,000 replicates, as the report does
    (:data:`analysis.scores.REPORT_REPS`); at 2,000 the endpoints of a 10-run x 4-task matrix moved
    by up to 0.022 between bootstrap seeds. :func:`iqm`, :func:`mean_score`, :func:`median_score`,
    :func:`optimality_gap` (at its default ``gamma = 1``) and :func:`probability_of_improvement` are
    evaluated on all replicates at once; any other ``func`` is called once per replicate.

    Args:
        func: statistic taking the matrices in order, e.g. :func:`iqm` or
            :func:`probability_of_improvement`.
        *score_matrices: each of shape ``(n_runs_i, n_tasks)`` (1-D means one task).
        reps: number of bootstrap replicates.
        confidence: two-sided coverage in (0, 1).
        seed: seed of the ``numpy.random.Generator``; equal seeds give identical intervals.

    Returns:
        ``(estimate, lo, hi)``: ``func`` on the original data and the percentile interval.

    Raises:
        ValueError: if no matrix is given, ``reps < 1`` or ``confidence`` is not in (0, 1).
    """
    return stratified_bootstrap_cis([func], *score_matrices, reps=reps, confidence=confidence, seed=seed)[0]


def stratified_bootstrap_cis(
    funcs: Sequence[Callable[..., float]],
    *score_matrices: np.ndarray,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> list[tuple[float, float, float]]:
    """:func:`stratified_bootstrap_ci` of several statistics on the same replicates.

    The runs are drawn once and every statistic is evaluated on those draws, so each result equals
    the one :func:`stratified_bootstrap_ci` gives for that statistic with the same ``seed``.

    Args:
        funcs: the statistics, each as ``func`` of :func:`stratified_bootstrap_ci`.
        *score_matrices, reps, confidence, seed: as in :func:`stratified_bootstrap_ci`.

    Returns:
        One ``(estimate, lo, hi)`` per statistic, in order.

    Raises:
        ValueError: if no matrix is given, ``reps < 1`` or ``confidence`` is not in (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    values = stratified_bootstrap_replicates(funcs, *score_matrices, reps=reps, seed=seed)
    mats = [np.asarray(m, dtype=np.float64) for m in score_matrices]
    mats = [m[:, None] if m.ndim == 1 else m for m in mats]
    out = []
    for func, v in zip(funcs, values, strict=True):
        lo, hi = percentile_interval(v, confidence)
        out.append((float(func(*mats)), lo, hi))
    return out


def stratified_bootstrap_replicates(
    funcs: Sequence[Callable[..., float]],
    *score_matrices: np.ndarray,
    reps: int = 2000,
    seed: int = 0,
) -> list[np.ndarray]:
    """Each statistic on every replicate of the stratified bootstrap of :func:`stratified_bootstrap_ci`.

    Args:
        funcs: the statistics, each as ``func`` of :func:`stratified_bootstrap_ci`.
        *score_matrices: each of shape ``(n_runs_i, n_tasks)`` (1-D means one task), resampled
            independently.
        reps: number of bootstrap replicates.
        seed: seed of the ``numpy.random.Generator``; every statistic sees the same draws.

    Returns:
        One array of shape ``(reps,)`` per statistic, in order (NaN where a replicate leaves it
        undefined).

    Raises:
        ValueError: if no matrix is given or ``reps < 1``.
    """
    if not score_matrices:
        raise ValueError("at least one score matrix is required")
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    mats = []
    for m in score_matrices:
        m = np.asarray(m, dtype=np.float64)
        mats.append(m[:, None] if m.ndim == 1 else m)
    rng = np.random.default_rng(seed)
    # Replicates are drawn and evaluated in blocks of about a million draw counts: the statistics'
    # temporaries then stay small (at 50,000 replicates of 125 runs, whole-array passes spend more
    # time faulting in fresh memory than computing).
    block = max(1, _BLOCK_CELLS // max(1, sum(m.shape[0] * m.shape[1] for m in mats)))
    parts: list[list[np.ndarray]] = [[] for _ in funcs]
    for start in range(0, reps, block):
        n = min(block, reps - start)
        counts = [_draw_counts(m, rng, n) for m in mats]
        for values, func in zip(parts, funcs, strict=True):
            batched = _BATCHED.get(func)
            if batched is not None:
                values.append(np.asarray(batched(*counts), dtype=np.float64))
            else:
                values.append(
                    np.array(
                        [
                            func(*(_replicate(m, c, k) for m, c in zip(mats, counts, strict=True)))
                            for k in range(n)
                        ],
                        dtype=np.float64,
                    )
                )
    return [np.concatenate(values) for values in parts]


def percentile_interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """The percentile interval of bootstrap replicates (Efron & Tibshirani 1993, ch. 13): their
    ``(1 - confidence)/2`` and ``(1 + confidence)/2`` quantiles (``numpy.quantile``, linear).

    Args:
        values: a statistic's replicates, shape ``(reps,)``; NaNs are dropped.
        confidence: two-sided coverage in (0, 1).

    Returns:
        ``(lo, hi)``; NaN when no replicate is finite.
    """
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return float("nan"), float("nan")
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(v, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def percentile_mc_error(values: np.ndarray, confidence: float = 0.95, batches: int = 10) -> float:
    """Monte Carlo error of a percentile interval's endpoints: how much they would move with
    another bootstrap seed.

    Batch means (e.g. Efron & Tibshirani 1993, ch. 19; Glasserman 2003, §1.1): the replicates are
    independent, so the endpoints of ``batches`` disjoint equal slices of them vary like ``batches``
    independent bootstraps of ``reps / batches`` replicates; the standard error of the endpoint from
    all of them is their standard deviation (ddof=1) divided by ``sqrt(batches)``.

    Args:
        values: a statistic's replicates, shape ``(reps,)``; NaNs are dropped.
        confidence: two-sided coverage of the interval.
        batches: slices, at least 2.

    Returns:
        The larger of the two endpoints' standard errors, in the statistic's units; NaN when
        fewer than ``batches`` replicates are finite.
    """
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size < batches or batches < 2:
        return float("nan")
    alpha = (1.0 - confidence) / 2.0
    slices = v[: v.size - v.size % batches].reshape(batches, -1)  # equal slices (a remainder left out)
    ends = np.quantile(slices, [alpha, 1.0 - alpha], axis=1)  # shape (2, batches)
    return float(np.max(np.std(ends, axis=1, ddof=1)) / math.sqrt(batches))


#: Draw counts (replicates x runs) evaluated at once by :func:`stratified_bootstrap_cis`.
_BLOCK_CELLS = 1 << 20


def bootstrap_mean_interval(
    values: np.ndarray,
    present: np.ndarray | None = None,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the mean over runs, for many points at once.

    Resamples runs (columns) with replacement, the same draw for every row, so a curve's band is
    one coherent resampling of seeds (Efron & Tibshirani 1993, percentile method). Rows are
    grouped by which runs are present, and each group is resampled among its own runs only.

    Args:
        values: shape ``(n_points, n_runs)``, e.g. the metric of each run at each step.
        present: boolean mask of the same shape; default ``~isnan(values)``.
        reps: number of bootstrap replicates.
        confidence: two-sided coverage in (0, 1).
        seed: seed of the ``numpy.random.Generator``.

    Returns:
        ``(lo, hi)``, each shape ``(n_points,)``; NaN for rows with fewer than two runs.

    Raises:
        ValueError: if ``reps < 1`` or ``confidence`` is not in (0, 1).
    """
    _check_bootstrap_args(reps, confidence)
    v = np.asarray(values, dtype=np.float64)
    mask = ~np.isnan(v) if present is None else np.asarray(present, dtype=bool) & ~np.isnan(v)
    lo = np.full(v.shape[0], np.nan)
    hi = np.full(v.shape[0], np.nan)
    alpha = (1.0 - confidence) / 2.0
    rng = np.random.default_rng(seed)
    patterns, inverse = np.unique(mask, axis=0, return_inverse=True)
    inverse = np.asarray(inverse).ravel()
    for k, pattern in enumerate(patterns):
        cols = np.flatnonzero(pattern)
        if cols.size < 2:
            continue
        rows = np.flatnonzero(inverse == k)
        draws = rng.integers(0, cols.size, size=(reps, cols.size))
        # Chunked so the (rows, reps, runs) gather stays around 32 MB whatever the curve length.
        chunk = max(1, 4_000_000 // (reps * cols.size))
        for start in range(0, rows.size, chunk):
            r = rows[start : start + chunk]
            means = v[np.ix_(r, cols)][:, draws].mean(axis=-1)
            lo[r], hi[r] = np.quantile(means, [alpha, 1.0 - alpha], axis=1)
    return lo, hi


def _replicate(scores: np.ndarray, counts: list[tuple[np.ndarray, np.ndarray]], k: int) -> np.ndarray:
    """Replicate ``k`` as a score matrix (each task's draws, NaN-padded to the task's rows)."""
    out = np.full(scores.shape, np.nan)
    for task, (values, c) in enumerate(counts):
        drawn = np.repeat(values, c[k].astype(np.int64))
        out[: drawn.size, task] = drawn
    return out


_BATCHED: dict[Callable[..., float], Callable[..., np.ndarray]] = {
    iqm: _iqm_counts,
    mean_score: _mean_counts,
    median_score: _median_counts,
    optimality_gap: _optimality_gap_counts,
    probability_of_improvement: _poi_counts,
}


def performance_profile(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Fraction of runs whose score exceeds each threshold (a run-score distribution).

    Agarwal et al. 2021, Section 4 ("performance profiles"; rliable
    ``plot_utils.plot_performance_profiles`` over ``create_performance_profile``): for each
    threshold tau, the share of runs with ``score > tau``, pooled over tasks. Unlike a mean, it
    shows the whole distribution of final scores, so a variant that wins only in one lucky seed
    is visible as such.

    Args:
        scores: any shape, typically ``(n_runs, n_tasks)``; NaN entries (missing runs) are ignored.
        taus: thresholds, shape ``(k,)``.

    Returns:
        Shape ``(k,)``, non-increasing in tau; NaN everywhere when there are no scores.
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    s = np.sort(s[~np.isnan(s)])
    t = np.asarray(taus, dtype=np.float64)
    if s.size == 0:
        return np.full(t.shape, np.nan)
    return 1.0 - np.searchsorted(s, t, side="right") / s.size


def performance_profile_ci(
    scores: np.ndarray,
    taus: np.ndarray,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A performance profile (:func:`performance_profile`) with its stratified-bootstrap band.

    As rliable's ``create_performance_profile`` (Agarwal et al. 2021, Section 4 and Fig. 5):
    each replicate draws, for every task, as many runs as that task has, with replacement (the
    stratified bootstrap of :func:`stratified_bootstrap_ci`), and recomputes the fraction of
    scores above each threshold; the band is the percentile interval at each threshold. A
    replicate's profile at tau is the share of its drawn scores above tau, found from the draw
    counts of the scores sorted once, so a replicate costs O(runs + thresholds).

    Args:
        scores: shape ``(n_runs, n_tasks)`` (1-D: one task); NaN entries (missing runs) are never
            drawn.
        taus: thresholds, shape ``(k,)``.
        reps: bootstrap replicates (rliable's default for profiles is 2,000).
        confidence: two-sided coverage in (0, 1).
        seed: seed of the ``numpy.random.Generator``; equal seeds give identical bands.

    Returns:
        ``(profile, lo, hi)``, each shape ``(k,)``: the profile of the scores themselves and the
        band's edges; all NaN when there are no scores, ``lo``/``hi`` NaN when no task has two runs
        (a resample can then only return the runs themselves).

    Raises:
        ValueError: if ``reps < 1`` or ``confidence`` is not in (0, 1).
    """
    _check_bootstrap_args(reps, confidence)
    s = np.asarray(scores, dtype=np.float64)
    s = s[:, None] if s.ndim == 1 else s
    t = np.asarray(taus, dtype=np.float64)
    profile = performance_profile(s, t)
    nan = np.full(t.shape, np.nan)
    if np.sum(~np.isnan(s), axis=0).max(initial=0) < 2:
        return profile, nan, nan.copy()
    tasks = [(v, c) for v, c in _draw_counts(s, np.random.default_rng(seed), reps) if v.size]
    values = np.concatenate([v for v, _ in tasks])
    counts = np.concatenate([c for _, c in tasks], axis=1)
    order = np.argsort(values, kind="stable")
    # above[:, j]: draws of the sorted scores from position j on; searchsorted gives, per tau,
    # the first sorted position whose score exceeds it
    above = np.cumsum(counts[:, order][:, ::-1], axis=1)[:, ::-1]
    above = np.concatenate([above, np.zeros((reps, 1))], axis=1)
    first = np.searchsorted(values[order], t, side="right")
    # the profile is a step function: thresholds between the same two scores share one quantile
    steps, inverse = np.unique(first, return_inverse=True)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(above[:, steps] / values.size, [alpha, 1.0 - alpha], axis=0)
    return profile, lo[inverse], hi[inverse]
