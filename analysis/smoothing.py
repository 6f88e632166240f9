"""Smoothing of each run's series before curves are averaged: EMA and trailing means (one window
for all runs or one per run), the report's ``"auto"`` rule (a tenth of each run's points) and the
caption that states the rule.

Pure: arrays in, arrays out, no frame and no drawing. :mod:`analysis.aggregate` smooths each run
with these before it averages over runs; the time-to-target table smooths each run the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy.signal import lfilter

from analysis.settings.report_values import AUTO, parse_smoothing

__all__ = [
    "auto_window",
    "resolve_smoothing",
    "smooth",
    "smooth_runs",
    "smoothing_caption",
    "trailing_mean_rows",
    "window_lo",
    "windowed_mean",
]


def smooth(y: np.ndarray, *, ema: float | None = None, window: int | None = None) -> np.ndarray:
    """Smooth one run's series along axis 0 (columns are independent runs).

    ``ema``: exponential moving average ``s_t = a·y_t + (1-a)·s_{t-1}``, ``s_0 = y_0`` (pandas
    ``ewm(alpha=a, adjust=False)``). ``window``: trailing mean over the last ``window`` points
    (fewer at the start). Give at most one.

    Args:
        y: shape ``(n_points,)`` or ``(n_points, n_runs)``, no NaNs.
        ema: smoothing weight in (0, 1]; 1 means no smoothing.
        window: points in the rolling window, >= 1.

    Returns:
        Array of ``y``'s shape.

    Raises:
        ValueError: if both or an invalid value are given.
    """
    y = np.asarray(y, dtype=np.float64)
    if ema is not None and window is not None:
        raise ValueError("give either ema or window, not both")
    if y.shape[0] == 0:
        return y
    if ema is not None:
        if not 0.0 < ema <= 1.0:
            raise ValueError(f"ema must be in (0, 1], got {ema}")
        zi = ((1.0 - ema) * y[:1])[None] if y.ndim > 1 else np.array([(1.0 - ema) * y[0]])
        out, _ = lfilter([ema], [1.0, -(1.0 - ema)], y, axis=0, zi=zi.reshape((1, *y.shape[1:])))
        return out
    if window is not None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        return trailing_mean_rows(y.reshape(y.shape[0], -1).T, int(window)).T.reshape(y.shape)
    return y


def trailing_mean_rows(mat: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over the last ``window`` columns of each row (fewer at the start), no NaNs.

    The rows of ``mat`` (shape ``(runs, points)``) are independent runs; one cumulative sum and
    slices (no gather). :func:`smooth` with ``window`` is this along axis 0.
    """
    n = mat.shape[1]
    cs = np.cumsum(mat, axis=1)
    out = np.empty_like(cs)
    head = min(window, n)
    out[:, :head] = cs[:, :head] / np.arange(1, head + 1)
    if n > window:
        np.subtract(cs[:, window:], cs[:, : n - window], out=out[:, window:])
        out[:, window:] /= window
    return out


def smooth_runs(
    y: np.ndarray, starts: np.ndarray, *, ema: float | None = None, window: int | None = None
) -> np.ndarray:
    """:func:`smooth` applied to each run of a concatenation of runs, every run on its own.

    The trailing window is computed for all runs at once from one cumulative sum (a window never
    reaches back into the previous run); an EMA runs run by run.

    Args:
        y: shape ``(n,)``, the runs' series one after another, no NaNs (±inf allowed: a window
            holding one is infinite, and only that window).
        starts: shape ``(n_runs,)``, increasing, ``starts[0] == 0``: where each run begins.
        ema, window: as in :func:`smooth`; ``window`` may also give one window per run.

    Returns:
        Shape ``(n,)``.
    """
    y = np.asarray(y, dtype=np.float64)
    if y.size == 0 or (ema is None and window is None):
        return y
    if ema is not None:
        out = y.copy()
        ends = np.r_[starts[1:], y.size]
        for a, b in zip(starts, ends, strict=True):
            out[a:b] = smooth(y[a:b], ema=ema)
        return out
    return windowed_mean(y, window_lo(starts, y.size, window))


def window_lo(starts: np.ndarray, n: int, window: int | np.ndarray) -> np.ndarray:
    """For each of ``n`` points of concatenated runs (run ``k`` begins at ``starts[k]``), where its
    trailing window begins: ``max(i + 1 - window, start of its run)``, shape ``(n,)``.

    Raises:
        ValueError: a window below 1, or a per-run ``window`` whose shape is not ``starts``'.
    """
    if np.ndim(window):  # one window per run
        w = np.asarray(window, dtype=np.int64)
        if w.shape != np.shape(starts) or (w < 1).any():
            raise ValueError("window: one value >= 1 per run expected")
        window = np.repeat(w, np.diff(np.r_[starts, n]))
    elif window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    # the first row of each row's run: starts spread forward by a running maximum
    run_start = np.zeros(n, dtype=np.int64)
    run_start[starts] = starts
    np.maximum.accumulate(run_start, out=run_start)
    lo = np.arange(1, n + 1) - (window if np.ndim(window) else int(window))
    np.maximum(lo, run_start, out=lo)
    return lo


def windowed_mean(y: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Mean of ``y[lo[i]:i + 1]`` for every ``i`` (windows from :func:`window_lo`), shape ``(n,)``;
    a window holding ``+inf`` (``-inf``) is ``+inf`` (``-inf``), both: NaN."""
    n = y.size
    finite = np.isfinite(y)
    cs = np.empty(n + 1)
    cs[0] = 0.0
    np.cumsum(y if finite.all() else np.where(finite, y, 0.0), out=cs[1:])
    out = cs[1:] - cs[lo]
    out /= np.arange(1, n + 1) - lo
    if not finite.all():
        # A window holding +inf (-inf) has mean +inf (-inf), both: NaN; counted apart so an
        # infinite value never leaks past its own window (a running sum through inf would).
        pos = np.concatenate([[0], np.cumsum(y == np.inf)])
        neg = np.concatenate([[0], np.cumsum(y == -np.inf)])
        p, q = pos[1:] - pos[lo], neg[1:] - neg[lo]
        out = np.where(p > 0, np.where(q > 0, np.nan, np.inf), np.where(q > 0, -np.inf, out))
    return out


def auto_window(n_points: int) -> int:
    """The default smoothing window: a tenth of a run's logged points, at least 1.

    ``w = max(1, ceil(n / 10))``. A trailing mean over the last 10% of a run's points makes the
    curve's last value the run's final score (the final-performance table's "mean of the last 10%
    of logged steps"), and removes most of the per-step sampling noise of a small batch while
    keeping trends that span more than a tenth of training.

    Args:
        n_points: logged points per run (the median over the runs drawn).
    """
    return max(1, math.ceil(n_points / 10))


def resolve_smoothing(smoothing: Any, n_points: int) -> dict[str, Any]:
    """Smoothing keywords for :func:`smooth` from a report setting.

    Args:
        smoothing: ``"auto"`` (:func:`auto_window`), ``None`` or ``"none"`` (raw values),
            ``{"window": n}`` or ``{"ema": a}``.
        n_points: logged points per run, for ``"auto"``.

    Returns:
        ``{}``, ``{"window": n}`` or ``{"ema": a}``.

    Raises:
        ValueError: (:class:`analysis.settings.report_values.SmoothingError`) for anything
            :func:`analysis.settings.report_values.parse_smoothing` refuses, e.g. ``{"window": 2.5}``.
    """
    if smoothing is None or (isinstance(smoothing, Mapping) and not smoothing):
        return {}
    setting = parse_smoothing(smoothing)
    if setting == AUTO:
        w = auto_window(n_points)
        return {"window": w} if w > 1 else {}
    if setting == "none":
        return {}
    if "window" in setting:
        return {"window": setting["window"]} if setting["window"] > 1 else {}
    return dict(setting)


def smoothing_caption(
    kwargs: Mapping[str, Any], smoothing: Any, n_points: int, counts: np.ndarray | None = None
) -> str:
    """The sentence that states the smoothing rule of a figure (empty when none was asked for).

    Args:
        kwargs: the keywords applied (``{"window": n or per-run array}`` / ``{"ema": a}``).
        smoothing: the setting as given (``"auto"``, ``"none"``, a mapping, or None).
        n_points: median logged points per run.
        counts: logged points of each run drawn, for the auto rule's range of windows.
    """
    if not kwargs:
        return "" if smoothing is None else "Raw per-step values (no smoothing)."
    if "ema" in kwargs:
        return f"Each run smoothed before averaging: EMA with alpha = {kwargs['ema']:g}."
    if smoothing == AUTO:
        ns = np.asarray(counts if counts is not None and len(counts) else [n_points])
        ws = np.maximum(1, np.ceil(ns / 10)).astype(int)
        span = f"w = {ws.min()}" if ws.min() == ws.max() else f"w = {ws.min()}-{ws.max()}"
        pts = f"n = {ns.min()}" if ns.min() == ns.max() else f"n = {ns.min()}-{ns.max()}"
        return (
            "Each run smoothed before averaging: trailing mean over the last w = ⌈n/10⌉ of its own n "
            f"logged points ({span} for {pts}); the last point of a run's curve is its final score."
        )
    return f"Each run smoothed before averaging: trailing mean over the last w = {kwargs['window']} logged points."
