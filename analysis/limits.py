"""y-limits of a figure that hold the bulk of what it draws: robust quantiles, the curves' final
values kept inside, a metric's natural range (never below 0 for a non-negative mean, never above
1 for a fraction). Pure: arrays in, ``(lo, hi)`` out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from harness import layout

__all__ = [
    "FIXED_LIMITS",
    "FRACTION_PREFIXES",
    "clamp_limits",
    "curve_limits",
    "fixed_limits",
    "robust_limits",
]


def robust_limits(values: np.ndarray, *, q: float = 0.01, pad: float = 0.06) -> tuple[float, float] | None:
    """y-limits that hold the bulk of ``values`` whatever a few outliers do.

    From the ``q`` and ``1 - q`` quantiles of the finite values, widened by ``pad`` of their span
    on each side (a span of 0 becomes ±5% of the value, or ±0.05 around 0).

    Args:
        values: any shape; NaN and inf are ignored.
        q: lower quantile in [0, 0.5).
        pad: fraction of the span added on each side.

    Returns:
        ``(lo, hi)`` with ``lo < hi``, or None without finite values.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0:
        return None
    lo, hi = (float(a) for a in np.quantile(v, [q, 1.0 - q]))
    span = hi - lo
    if span <= 0:
        span = abs(lo) * 0.1 or 0.1
        return lo - span / 2, hi + span / 2
    return lo - pad * span, hi + pad * span


#: Metrics that are fractions or probabilities: their axis never needs to go beyond [0, 1].
FRACTION_PREFIXES: tuple[str, ...] = (
    layout.EVAL_ACCURACY,
    layout.SAMPLED_ACCURACY,
    layout.PASS_AT_PREFIX,
    layout.WSEQ_ESS_FRAC,
    "clip_ratio/",
    "cispo_clip_ratio",
    "frac_",
    "completions/clipped_ratio",
)


def curve_limits(curves_: Sequence[np.ndarray], bands: Sequence[np.ndarray]) -> tuple[float, float] | None:
    """y-limits for curves with bands: robust over everything drawn (:func:`robust_limits`), then
    widened so that every curve's last point, its final value, is inside.

    Args:
        curves_: each curve's mean values in x order.
        bands: band values (``lo``, ``hi``), any shapes.
    """
    values = [np.ravel(v) for v in (*curves_, *bands)]
    lim = robust_limits(np.concatenate(values)) if values else None
    ends = [float(c[np.isfinite(c)][-1]) for c in curves_ if np.isfinite(c).any()]
    if lim is None or not ends:
        return lim
    lo, hi = min(lim[0], min(ends)), max(lim[1], max(ends))
    pad = 0.04 * (hi - lo) if hi > lo else 0.0
    return (lo - pad if lo < lim[0] else lo, hi + pad if hi > lim[1] else hi)


def clamp_limits(
    lim: tuple[float, float] | None, metric: str, means: np.ndarray
) -> tuple[float, float] | None:
    """Keep y-limits inside a metric's natural range: not below 0 when every mean is >= 0 (a band
    may dip below, the quantity cannot), not above 1 for a fraction (:data:`FRACTION_PREFIXES`).

    Args:
        lim: limits from :func:`robust_limits`, or None.
        metric: the metric's column name.
        means: the mean values drawn (any shape).
    """
    if lim is None:
        return None
    m = np.asarray(means, dtype=np.float64)
    m = m[np.isfinite(m)]
    lo, hi = lim
    margin = 0.03 * (hi - lo)
    if m.size and m.min() >= 0:
        lo = max(lo, -margin)
    if metric.startswith(FRACTION_PREFIXES):
        hi = min(hi, 1.0 + margin)
    return (lo, hi) if hi > lo else lim


#: Metrics drawn on a fixed y-range whatever their values: ESS/N is read against its whole range
#: (1: every completion weighs the same; 1/N: one carries the weight), so its axis is [0, 1] even
#: when every value sits near 1.
FIXED_LIMITS: dict[str, tuple[float, float]] = {layout.WSEQ_ESS_FRAC: (0.0, 1.0)}


def fixed_limits(metric: str) -> tuple[float, float] | None:
    """The y-limits of a metric drawn on a fixed range (:data:`FIXED_LIMITS`), widened by 3% of the
    range on each side so that values at its ends stay visible; None for any other metric."""
    lim = FIXED_LIMITS.get(metric)
    if lim is None:
        return None
    margin = 0.03 * (lim[1] - lim[0])
    return lim[0] - margin, lim[1] + margin


def metric_limits(
    metric: str, curves_: Sequence[np.ndarray], bands: Sequence[np.ndarray], means: np.ndarray
) -> tuple[float, float] | None:
    """The y-limits of a panel of ``metric``'s curves: its fixed range (:func:`fixed_limits`),
    else :func:`curve_limits` of what is drawn kept in the metric's natural range
    (:func:`clamp_limits` with the mean values ``means``)."""
    return fixed_limits(metric) or clamp_limits(curve_limits(curves_, bands), metric, means)
