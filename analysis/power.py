"""Two arms of runs compared by a t test: the Welch interval of their difference, the pooled SD,
the power of the two-sample t test, the seeds it needs and the smallest difference it resolves;
the paired case: the one-sample t interval of per-run differences, its power and seeds; a
dose-response: the least-squares slope of per-run values on a setting's value with its t interval,
its power and the seeds per value it needs; each test's one-sided p-value in a claimed direction,
and Holm's step-down adjustment of a family of them.

Small pure functions over numpy arrays, each with its source (Student 1908; Welch 1947; Cohen
1988, ch. 2; Draper & Smith 1998, ch. 1; Dupont & Plummer 1998; Holm 1979); the findings' verdicts
and the report's line under the final-performance table rest on them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

__all__ = [
    "SlopeFit",
    "holm",
    "min_detectable_effect",
    "one_sample_t_power",
    "one_sided_p",
    "paired_interval",
    "paired_p",
    "pooled_sd",
    "seeds_for_paired_power",
    "seeds_for_power",
    "seeds_for_slope_power",
    "slope_fit",
    "slope_power",
    "smallest_n",
    "t_test_power",
    "welch_interval",
    "welch_p",
]


def welch_interval(
    variant: np.ndarray, baseline: np.ndarray, confidence: float = 0.95
) -> tuple[float, float, float]:
    """Difference of means ``mean(variant) - mean(baseline)`` with its Welch t interval.

    Welch (1947), "The generalization of Student's problem when several different population
    variances are involved", Biometrika 34: ``d ± t_{(1+c)/2, ν} · se`` with
    ``se = sqrt(s_v²/n_v + s_b²/n_b)`` and the Welch-Satterthwaite degrees of freedom
    ``ν = se⁴ / ((s_v²/n_v)²/(n_v-1) + (s_b²/n_b)²/(n_b-1))``; computed by
    ``scipy.stats.ttest_ind(variant, baseline, equal_var=False).confidence_interval``. Welch rather
    than Student's pooled interval because two arms of a grid need not have equal spread; rather
    than a bootstrap because it is deterministic (a verdict cannot flip with a resampling seed)
    and keeps its coverage at 3-5 seeds per arm, where a percentile bootstrap undercovers (its
    resamples hold at most n distinct values).

    Args:
        variant: the variant's per-run values, shape ``(n_v,)``; NaNs are dropped.
        baseline: the baseline's per-run values, shape ``(n_b,)``; NaNs are dropped.
        confidence: two-sided coverage in (0, 1).

    Returns:
        ``(difference, lo, hi)``. ``lo``/``hi`` are NaN when an arm has fewer than two values (no
        spread estimate), and equal the difference when both arms have zero spread.

    Raises:
        ValueError: if ``confidence`` is not in (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    v = np.asarray(variant, dtype=np.float64).ravel()
    b = np.asarray(baseline, dtype=np.float64).ravel()
    v, b = v[~np.isnan(v)], b[~np.isnan(b)]
    if v.size == 0 or b.size == 0:
        return float("nan"), float("nan"), float("nan")
    diff = float(v.mean() - b.mean())
    if v.size < 2 or b.size < 2:
        return diff, float("nan"), float("nan")
    if v.var(ddof=1) == 0 and b.var(ddof=1) == 0:
        return diff, diff, diff
    ci = _st.ttest_ind(v, b, equal_var=False).confidence_interval(confidence)
    return diff, float(ci.low), float(ci.high)


def pooled_sd(*groups: np.ndarray) -> float:
    """Pooled standard deviation of several groups: ``sqrt(Σ (n_i - 1) s_i² / Σ (n_i - 1))``.

    The within-group spread of a one-way layout (e.g. Cohen 1988, Eq. 2.3.2 for two groups); a
    group with fewer than two values adds nothing.

    Args:
        *groups: each a 1-D array of values; NaNs are dropped.

    Returns:
        The pooled SD, NaN when no group has two values.
    """
    ss, dof = 0.0, 0
    for g in groups:
        g = np.asarray(g, dtype=np.float64).ravel()
        g = g[~np.isnan(g)]
        if g.size >= 2:
            ss += float(np.sum((g - g.mean()) ** 2))
            dof += g.size - 1
    return math.sqrt(ss / dof) if dof else float("nan")


def t_test_power(effect_size: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided two-sample Student t test with ``n`` runs per group.

    Cohen (1988), "Statistical Power Analysis for the Behavioral Sciences", ch. 2: with a
    standardised effect ``d = |difference| / SD``, the t statistic follows a noncentral t with
    ``2n - 2`` degrees of freedom and noncentrality ``d · sqrt(n / 2)``; the power is
    ``P(T > t_crit) + P(T < -t_crit)``, ``t_crit = t_{1 - alpha/2, 2n-2}``, from
    ``scipy.stats.nct`` (exact, not a normal approximation, which overstates power at few seeds).

    Args:
        effect_size: the standardised difference ``d`` (its sign does not matter).
        n: runs per group, at least 2.
        alpha: two-sided significance level in (0, 1).

    Returns:
        The power in [alpha, 1]; NaN for ``n < 2`` or a non-finite ``effect_size``.
    """
    if n < 2 or not math.isfinite(effect_size):
        return float("nan")
    dof = 2 * n - 2
    crit = _st.t.ppf(1.0 - alpha / 2.0, dof)
    nc = abs(effect_size) * math.sqrt(n / 2.0)
    return float(_st.nct.sf(crit, dof, nc) + _st.nct.cdf(-crit, dof, nc))


def seeds_for_power(
    effect: float, sd: float, power: float = 0.8, alpha: float = 0.05, max_n: int = 1_000_000
) -> float:
    """Fewest runs per group at which a two-sided two-sample t test detects ``effect`` with ``power``.

    The smallest ``n >= 2`` with :func:`t_test_power` ``(|effect| / sd, n, alpha) >= power``
    (power grows with ``n``: found by doubling, then bisection), at the spread ``sd`` taken as
    known (e.g. the observed pooled SD, :func:`pooled_sd`).

    Args:
        effect: the difference of means to detect (units of the metric).
        sd: the common standard deviation of a run's value (same units).
        power: the power wanted, in (alpha, 1).
        alpha: two-sided significance level.
        max_n: the largest ``n`` searched.

    Returns:
        ``n`` as a float (a whole number); ``inf`` when even ``max_n`` runs are not enough; NaN when
        ``effect`` or ``sd`` is 0 or not finite (no effect to detect, or no spread to scale it).
    """
    if not (math.isfinite(effect) and math.isfinite(sd)) or effect == 0 or sd <= 0:
        return float("nan")
    d = abs(effect) / sd
    return smallest_n(lambda n: t_test_power(d, n, alpha), power, max_n)


def smallest_n(power_at: Callable[[int], float], power: float, max_n: int = 1_000_000) -> float:
    """The smallest ``n >= 2`` with ``power_at(n) >= power``, for a power that grows with ``n``:
    found by doubling, then bisection.

    Returns:
        ``n`` as a float (a whole number); ``inf`` when ``power_at(max_n) < power``.
    """
    if power_at(2) >= power:
        return 2.0
    lo, hi = 2, 4
    while power_at(hi) < power:
        if hi >= max_n:
            return float("inf")
        lo, hi = hi, min(2 * hi, max_n)
    while hi - lo > 1:  # power(lo) < power <= power(hi)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if power_at(mid) >= power else (mid, hi)
    return float(hi)


def paired_interval(differences: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean of paired differences (one per run, e.g. a run's end minus its own start) with the
    one-sample Student t interval.

    Student (1908), "The probable error of a mean", Biometrika 6: ``mean ± t_{(1+c)/2, n-1} · s /
    sqrt(n)`` over the ``n`` differences, ``s`` their SD (ddof 1); computed by
    ``scipy.stats.ttest_1samp(differences, 0).confidence_interval``. Pairing each run with itself
    removes the run-to-run spread of the level both ends share, which a two-sample interval would
    count.

    Args:
        differences: shape ``(n,)``; NaNs are dropped.
        confidence: two-sided coverage in (0, 1).

    Returns:
        ``(mean, lo, hi)``; ``lo``/``hi`` NaN with fewer than two differences, and equal to the mean
        when every difference is the same (no spread; equal up to float rounding, within 1e-12 of
        their magnitude, counts as the same: a t interval of rounding noise would be no result).

    Raises:
        ValueError: if ``confidence`` is not in (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    d = np.asarray(differences, dtype=np.float64).ravel()
    d = d[~np.isnan(d)]
    if d.size == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(d.mean())
    if d.size < 2:
        return mean, float("nan"), float("nan")
    if np.ptp(d) <= 1e-12 * np.abs(d).max():  # equal up to float rounding (0.7 - 0.2 vs 0.75 - 0.25)
        return mean, mean, mean
    ci = _st.ttest_1samp(d, 0.0).confidence_interval(confidence)
    return mean, float(ci.low), float(ci.high)


def one_sample_t_power(effect_size: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided one-sample (or paired) t test over ``n`` differences.

    Cohen (1988), ch. 2, Cases 3 and 4 (one sample; paired observations, tested as one sample of
    differences with ``d_z`` = mean difference / SD of the differences); G*Power's "difference from constant" (Faul, Erdfelder,
    Lang, Buchner 2007, Behavior Research Methods 39): the t statistic follows a noncentral t with
    ``n - 1`` degrees of freedom and noncentrality ``d_z · sqrt(n)``; the power is
    ``P(T > t_crit) + P(T < -t_crit)``, ``t_crit = t_{1 - alpha/2, n-1}`` (``scipy.stats.nct``).

    Args:
        effect_size: ``d_z`` (its sign does not matter).
        n: the number of differences (runs), at least 2.
        alpha: two-sided significance level in (0, 1).

    Returns:
        The power in [alpha, 1]; NaN for ``n < 2`` or a non-finite ``effect_size``.
    """
    if n < 2 or not math.isfinite(effect_size):
        return float("nan")
    dof = n - 1
    crit = _st.t.ppf(1.0 - alpha / 2.0, dof)
    nc = abs(effect_size) * math.sqrt(n)
    return float(_st.nct.sf(crit, dof, nc) + _st.nct.cdf(-crit, dof, nc))


def seeds_for_paired_power(
    effect: float, sd: float, power: float = 0.8, alpha: float = 0.05, max_n: int = 1_000_000
) -> float:
    """Fewest runs at which a two-sided paired t test detects a mean difference ``effect`` with
    ``power``: the smallest ``n >= 2`` with :func:`one_sample_t_power` ``(|effect| / sd, n, alpha) >=
    power``, at the SD of the differences ``sd`` taken as known.

    Returns:
        ``n`` as a float (a whole number); ``inf`` beyond ``max_n``; NaN when ``effect`` or ``sd``
        is 0 or not finite.
    """
    if not (math.isfinite(effect) and math.isfinite(sd)) or effect == 0 or sd <= 0:
        return float("nan")
    d = abs(effect) / sd
    return smallest_n(lambda n: one_sample_t_power(d, n, alpha), power, max_n)


def min_detectable_effect(n: int, sd: float, power: float = 0.8, alpha: float = 0.05) -> float:
    """Smallest difference of means that a two-sided two-sample t test with ``n`` runs per group
    detects with ``power``: ``d* · sd``, where ``d*`` solves :func:`t_test_power` ``(d*, n, alpha) =
    power`` (``scipy.optimize.brentq`` on the noncentral t power, Cohen 1988 ch. 2).

    Differences smaller than this cannot be resolved by ``n`` seeds per variant at that spread.

    Args:
        n: runs per group.
        sd: the common standard deviation of a run's value (e.g. :func:`pooled_sd`).
        power: the power wanted, in (alpha, 1).
        alpha: two-sided significance level.

    Returns:
        The difference, in the units of ``sd``; NaN for ``n < 2`` or a non-finite ``sd``; 0 when
        ``sd`` is 0.
    """
    if n < 2 or not math.isfinite(sd) or sd < 0:
        return float("nan")
    if sd == 0:
        return 0.0
    from scipy.optimize import brentq

    hi = 1.0
    while t_test_power(hi, n, alpha) < power:
        hi *= 2.0
    d = brentq(lambda x: t_test_power(x, n, alpha) - power, 0.0, hi, xtol=1e-10)
    return float(d * sd)


# --- one-sided p-values in a claimed direction, and Holm's adjustment --------------------------------

#: ``direction`` to scipy's ``alternative``: the variant (the end, the slope) above or below.
_ALTERNATIVE = {"higher": "greater", "lower": "less"}


def _alternative(direction: str) -> str:
    if direction not in _ALTERNATIVE:
        raise ValueError(f"direction must be one of {tuple(_ALTERNATIVE)}, got {direction!r}")
    return _ALTERNATIVE[direction]


def one_sided_p(t: float, dof: float, direction: str) -> float:
    """The one-sided p-value of a t statistic in ``direction``: ``P(T >= t)`` for ``"higher"``,
    ``P(T <= t)`` for ``"lower"``, ``T`` Student's t with ``dof`` degrees of freedom; NaN when
    ``t`` or ``dof`` is not finite (no test)."""
    alt = _alternative(direction)
    if not (math.isfinite(t) and math.isfinite(dof)) or dof <= 0:
        return float("nan")
    return float(_st.t.sf(t, dof) if alt == "greater" else _st.t.cdf(t, dof))


def welch_p(variant: np.ndarray, baseline: np.ndarray, direction: str) -> float:
    """One-sided p-value of Welch's t test that ``mean(variant) - mean(baseline)`` lies on the side
    of ``direction``: the t statistic and Welch-Satterthwaite degrees of freedom of
    :func:`welch_interval`'s interval (``scipy.stats.ttest_ind(variant, baseline, equal_var=False,
    alternative=...)``), so the interval excludes 0 on that side exactly when this p is below
    ``(1 - confidence) / 2``.

    Returns:
        The p-value; NaN when an arm has fewer than two values, or neither arm has any spread (the
        interval is the difference itself: no test stands behind it).
    """
    alt = _alternative(direction)
    v = np.asarray(variant, dtype=np.float64).ravel()
    b = np.asarray(baseline, dtype=np.float64).ravel()
    v, b = v[~np.isnan(v)], b[~np.isnan(b)]
    if v.size < 2 or b.size < 2 or (v.var(ddof=1) == 0 and b.var(ddof=1) == 0):
        return float("nan")
    return float(_st.ttest_ind(v, b, equal_var=False, alternative=alt).pvalue)


def paired_p(differences: np.ndarray, direction: str) -> float:
    """One-sided p-value of the one-sample t test that the mean of ``differences`` lies on the side
    of ``direction`` (the t statistic of :func:`paired_interval`; ``scipy.stats.ttest_1samp(d, 0,
    alternative=...)``); NaN with fewer than two differences or when they are all the same (up to
    float rounding, as :func:`paired_interval` counts it)."""
    alt = _alternative(direction)
    d = np.asarray(differences, dtype=np.float64).ravel()
    d = d[~np.isnan(d)]
    if d.size < 2 or np.ptp(d) <= 1e-12 * np.abs(d).max():
        return float("nan")
    return float(_st.ttest_1samp(d, 0.0, alternative=alt).pvalue)


def holm(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment of a family of p-values (Holm 1979, "A simple sequentially
    rejective multiple test procedure", Scandinavian Journal of Statistics 6: 65-70).

    The ``m`` finite p-values sorted ascending, ``p_(1) <= ... <= p_(m)``, get
    ``p~_(i) = max_{j <= i} min(1, (m - j + 1) · p_(j))``; rejecting every hypothesis whose adjusted
    p is below ``alpha`` is Holm's procedure, which keeps the probability of any false rejection in
    the family at most ``alpha`` whatever the tests' dependence. ``[0.01, 0.04, 0.03, 0.005]`` gives
    ``[0.03, 0.06, 0.06, 0.02]``.

    Args:
        p_values: shape ``(k,)``; a NaN (no test) is no member of the family and stays NaN.

    Returns:
        The adjusted p-values, shape ``(k,)``, in the input's order.
    """
    p = np.asarray(p_values, dtype=np.float64).ravel()
    out = np.full(p.shape, np.nan)
    tested = np.flatnonzero(np.isfinite(p))
    m = tested.size
    if m == 0:
        return out
    order = tested[np.argsort(p[tested], kind="stable")]
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out


# --- dose-response: the least-squares slope ------------------------------------------------------


@dataclass(frozen=True)
class SlopeFit:
    """The ordinary least-squares line of ``y`` on ``x`` (:func:`slope_fit`).

    Attributes:
        slope, intercept: the fitted line ``y = intercept + slope · x``.
        lo, hi: the slope's t interval (NaN without one; both the slope for an exact fit).
        se: the slope's standard error ``s / sqrt(Sxx)``.
        resid_sd: ``s``, the residual SD ``sqrt(SSE / (n - 2))``.
        t: ``slope / se`` (NaN for an exact fit or without a fit).
        dof: ``n - 2``.
        n: the points fitted.
        exact: every point on the line (no residual spread; up to float rounding).
    """

    slope: float
    intercept: float
    lo: float
    hi: float
    se: float
    resid_sd: float
    t: float
    dof: int
    n: int
    exact: bool = False


def slope_fit(x: np.ndarray, y: np.ndarray, confidence: float = 0.95) -> SlopeFit:
    """The ordinary least-squares slope of ``y`` on ``x`` with its Student t interval.

    Draper & Smith (1998), "Applied Regression Analysis", 3rd ed., §1.4 (the same in Montgomery,
    Peck & Vining, "Introduction to Linear Regression Analysis", §2.3): ``b = Sxy / Sxx`` with
    ``Sxx = Σ (x_i - x̄)²``, ``Sxy = Σ (x_i - x̄)(y_i - ȳ)``; the residual variance
    ``s² = Σ (y_i - a - b x_i)² / (n - 2)``; ``se(b) = s / sqrt(Sxx)``; the interval
    ``b ± t_{(1+c)/2, n-2} · se(b)``, exact under independent normal errors of one variance
    (``scipy.stats.linregress`` gives the same slope and ``stderr``).

    Args:
        x, y: shape ``(n,)`` each; a pair with a NaN is dropped.
        confidence: two-sided coverage in (0, 1).

    Returns:
        A :class:`SlopeFit`; NaN slope with fewer than 2 distinct ``x``, NaN interval with fewer
        than 3 points; for an exact fit (no residual spread) the interval is the slope itself.

    Raises:
        ValueError: if ``confidence`` is not in (0, 1) or the arrays differ in length.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    xs, ys = np.asarray(x, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()
    if xs.shape != ys.shape:
        raise ValueError(f"x and y differ in length: {xs.size} and {ys.size}")
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    n, nan = int(xs.size), float("nan")
    sxx = float(np.sum((xs - xs.mean()) ** 2)) if n else 0.0
    if n < 2 or sxx <= 0:
        return SlopeFit(nan, nan, nan, nan, nan, nan, nan, max(n - 2, 0), n)
    slope = float(np.sum((xs - xs.mean()) * (ys - ys.mean())) / sxx)
    intercept = float(ys.mean() - slope * xs.mean())
    if n < 3:
        return SlopeFit(slope, intercept, nan, nan, nan, nan, nan, 0, n)
    resid = ys - intercept - slope * xs
    s = math.sqrt(float(np.sum(resid**2)) / (n - 2))
    if s <= 1e-12 * max(float(np.abs(ys).max()), 1e-300):  # every point on the line, up to rounding
        return SlopeFit(slope, intercept, slope, slope, 0.0, 0.0, nan, n - 2, n, exact=True)
    se = s / math.sqrt(sxx)
    half = float(_st.t.ppf(0.5 + confidence / 2.0, n - 2)) * se
    return SlopeFit(slope, intercept, slope - half, slope + half, se, s, slope / se, n - 2, n)


def slope_power(slope: float, sd: float, levels: Sequence[float], k: int, alpha: float = 0.05) -> float:
    """Power of the two-sided t test of a zero slope with ``k`` runs at each of ``levels``.

    Dupont & Plummer (1998), "Power and sample size calculations for studies involving linear
    regression", Controlled Clinical Trials 19: 589-601: with ``n = k · L`` runs at ``L`` levels,
    ``Sxx = k · Σ_l (x_l - x̄)²``, the statistic ``b / se(b)`` follows a noncentral t with
    ``n - 2`` degrees of freedom and noncentrality ``|slope| · sqrt(Sxx) / sd`` (``sd`` the SD of a
    run's value about the line); the power is ``P(T > t_crit) + P(T < -t_crit)``,
    ``t_crit = t_{1 - alpha/2, n-2}`` (``scipy.stats.nct``), as :func:`t_test_power` is for two arms.

    Returns:
        The power; NaN when ``n - 2 < 1``, ``sd`` is not positive or the levels do not vary.
    """
    x = np.asarray(levels, dtype=np.float64)
    dof = k * x.size - 2
    sxx = k * float(np.sum((x - x.mean()) ** 2)) if x.size else 0.0
    if dof < 1 or sxx <= 0 or not (math.isfinite(slope) and math.isfinite(sd)) or sd <= 0:
        return float("nan")
    crit = _st.t.ppf(1.0 - alpha / 2.0, dof)
    nc = abs(slope) * math.sqrt(sxx) / sd
    return float(_st.nct.sf(crit, dof, nc) + _st.nct.cdf(-crit, dof, nc))


def seeds_for_slope_power(
    slope: float,
    sd: float,
    levels: Sequence[float],
    power: float = 0.8,
    alpha: float = 0.05,
    max_n: int = 1_000_000,
) -> float:
    """Fewest runs per level (seeds per value, the same at every level, at least 2) at which a
    two-sided ``alpha`` t test of the slope detects ``slope`` with ``power``
    (:func:`slope_power`), at the residual SD ``sd`` taken as known.

    Returns:
        ``k`` as a float (a whole number); ``inf`` beyond ``max_n``; NaN when ``slope`` or ``sd``
        is 0 or not finite, or the levels do not vary.
    """
    x = np.asarray(levels, dtype=np.float64)
    if not (math.isfinite(slope) and math.isfinite(sd)) or slope == 0 or sd <= 0 or np.ptp(x) == 0:
        return float("nan")
    return smallest_n(lambda k: slope_power(slope, sd, x, k, alpha), power, max_n)
