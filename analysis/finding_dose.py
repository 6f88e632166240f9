"""Dose-response findings: does a run's metric move with a setting's value the way a paper says?

A dose-response finding (:mod:`analysis.settings.finding_dose`) names one numeric setting
(``dose.key``) and several of its values; each value's runs form a *level*. Per run the value is
the window mean of the metric, as for a two-arm finding (:func:`analysis.findings.window_stats`);
the verdict rests on the ordinary least-squares slope of those values on the setting's value (or
its natural log, ``scale: log``), over runs (:func:`analysis.power.slope_fit`):

- effect = the slope, with its Student t interval (``n - 2`` degrees of freedom);
- P(>) = the probability that a run at the highest value has a larger value than a run at the
  lowest (Mann-Whitney U / nm), with its stratified-bootstrap interval, as for two arms;
- the verdict as for two arms (:func:`analysis.finding_measures.resolved` on the slope's interval);
  for "not resolved", the seeds per value at which a two-sided 5% t test of the slope detects the
  observed slope with 80% power at the observed residual SD, over the finding's values
  (:func:`analysis.power.seeds_for_slope_power`, Dupont & Plummer 1998);
- the p-value of the claimed direction: one-sided, from the slope's t.

Pure functions; the texts that explain a dose-response row in the findings table are here too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis import stats
from analysis.finding_measures import DIRECTIONS, NOT_RESOLVED, resolved, why_no_value
from analysis.power import one_sided_p, seeds_for_slope_power, slope_fit
from analysis.scores import bootstrap_reps
from analysis.settings.finding_dose import SCALES, level_label
from analysis.tables import fmt

__all__ = [
    "SCALES",
    "DoseValues",
    "caption_text",
    "dose_values",
    "dose_verdict",
    "level_label",
    "metric_text",
    "record_problems",
    "values_text",
    "x_of",
]


def x_of(values: Sequence[float] | np.ndarray, scale: str) -> np.ndarray:
    """The regression's x of setting values: the values (``linear``) or their natural log (``log``)."""
    v = np.asarray(values, dtype=np.float64)
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    return np.log(v) if scale == "log" else v


@dataclass(frozen=True)
class DoseValues:
    """A dose-response finding's per-run values (:func:`dose_values`).

    Attributes:
        values: the finding's setting values, in its order.
        x: shape ``(n,)``: the setting value of each counted run (not transformed).
        y: shape ``(n,)``: its window mean.
        ids: the counted runs, level by level.
        left: ``(level label, run id, why)`` of each run given that has no value.
    """

    values: tuple[float, ...]
    x: np.ndarray
    y: np.ndarray
    ids: tuple[str, ...]
    left: tuple[tuple[str, str, str], ...]


def dose_values(
    st: pd.DataFrame,
    metric: str,
    window: tuple[float, float],
    values: Sequence[float],
    arms: Mapping[str, Sequence[str]],
) -> DoseValues:
    """Each level's finished runs with a window mean.

    Args:
        st: :func:`analysis.findings.window_stats` of ``metric`` over ``window``.
        metric, window: the finding's (for the reasons a run is left out).
        values: the finding's setting values.
        arms: ``{level label: finished run ids}``, labels by :func:`level_label`.

    Returns:
        A :class:`DoseValues`; a run without a window mean is left out with why.
    """
    xs, ys, ids, left = [], [], [], []
    for v in values:
        label = level_label(v)
        for r in dict.fromkeys(arms.get(label, ())):
            if r in st.index and np.isfinite(st.at[r, "value"]):
                xs.append(float(v))
                ys.append(float(st.at[r, "value"]))
                ids.append(r)
            else:
                left.append((label, r, why_no_value(st, r, metric, window)))
    return DoseValues(
        tuple(float(v) for v in values),
        np.array(xs, dtype=np.float64),
        np.array(ys, dtype=np.float64),
        tuple(ids),
        tuple(left),
    )


def dose_verdict(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    direction: str,
    *,
    scale: str = "linear",
    values: Sequence[float] = (),
    confidence: float = 0.95,
    power: float = 0.8,
    alpha: float = 0.05,
    reps: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """The verdict on a dose-response finding from each run's setting value ``x`` and value ``y``.

    Args:
        x, y: shape ``(n,)`` each, one pair per run (``x`` the setting's value, not transformed);
            a pair with a NaN is dropped.
        direction: ``"higher"`` (the metric rises with the value) or ``"lower"``.
        scale: ``"linear"`` (regress on the value) or ``"log"`` (on its natural log).
        values: the finding's setting values, the design the seeds per value are counted over
            (default: the distinct ``x``).
        confidence, power, alpha, reps, seed: as in :func:`analysis.findings.verdict`.

    Returns:
        :func:`analysis.findings.verdict`'s keys: ``baseline_*`` the runs at the lowest value,
        ``variant_*`` at the highest, ``effect*`` the slope and its interval (per unit of the value,
        or of its log), ``p_improve*`` P(a run at the highest value > a run at the lowest),
        ``pooled_sd`` the residual SD, ``seeds_80`` seeds per value, ``p_value`` one-sided in
        ``direction``; and ``dose_runs`` (runs fitted), ``dose_levels`` (values with runs).

    Raises:
        ValueError: if ``direction`` is not higher or lower, or ``x`` and ``y`` differ in length.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    xs, ys = np.asarray(x, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()
    if xs.shape != ys.shape:
        raise ValueError(f"x and y differ in length: {xs.size} and {ys.size}")
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    fit = slope_fit(x_of(xs, scale), ys, confidence)
    levels = np.unique(xs)
    out = _extremes(xs, ys, levels)
    out.update(
        effect=fit.slope,
        effect_lo=fit.lo,
        effect_hi=fit.hi,
        pooled_sd=fit.resid_sd,
        verdict="",
        seeds_80=math.nan,
        reps=0,
        p_value=one_sided_p(fit.t, fit.dof, direction),
        dose_runs=int(xs.size),
        dose_levels=int(levels.size),
    )
    if xs.size < 3 or levels.size < 2:
        out["verdict"] = (
            f"not enough runs ({xs.size} at {levels.size} value(s); a slope needs 3 runs at 2 or more values)"
        )
        return out
    out.update(_extreme_poi(xs, ys, levels, confidence, reps, seed))
    out["verdict"] = resolved(fit.lo, fit.hi, direction)
    if out["verdict"] == NOT_RESOLVED:
        design = x_of(values if len(values) else levels, scale)
        out["seeds_80"] = seeds_for_slope_power(fit.slope, fit.resid_sd, design, power, alpha)
    return out


def _extremes(xs: np.ndarray, ys: np.ndarray, levels: np.ndarray) -> dict[str, Any]:
    """The runs at the lowest value (``baseline_*``) and at the highest (``variant_*``)."""
    nan = math.nan
    lo = ys[xs == levels[0]] if levels.size else ys[:0]
    hi = ys[xs == levels[-1]] if levels.size >= 2 else ys[:0]
    return {
        "baseline_n": int(lo.size),
        "baseline_mean": float(lo.mean()) if lo.size else nan,
        "variant_n": int(hi.size),
        "variant_mean": float(hi.mean()) if hi.size else nan,
        "p_improve": stats.probability_of_improvement(hi, lo) if lo.size and hi.size else nan,
        "p_improve_lo": nan,
        "p_improve_hi": nan,
    }


def _extreme_poi(
    xs: np.ndarray, ys: np.ndarray, levels: np.ndarray, confidence: float, reps: int | None, seed: int
) -> dict[str, Any]:
    """P(a run at the highest value > a run at the lowest)'s stratified-bootstrap interval, when
    both levels have 2 runs or more (none otherwise)."""
    lo, hi = ys[xs == levels[0]], ys[xs == levels[-1]]
    if lo.size < 2 or hi.size < 2:
        return {}
    n = bootstrap_reps(lo.size + hi.size) if reps is None else reps
    (values,) = stats.stratified_bootstrap_replicates(
        [stats.probability_of_improvement], hi, lo, reps=n, seed=seed
    )
    a, b = stats.percentile_interval(values, confidence)
    return {"p_improve_lo": a, "p_improve_hi": b, "reps": n}


# --- texts ---------------------------------------------------------------------------------------


def metric_text(r: Mapping[str, Any]) -> str:
    """The "metric (window)" cell of a dose-response row (:func:`analysis.findings.findings_table`):
    the metric, its window, what the slope is per unit of, and the values."""
    key = str(r["dose_key"]).removeprefix("trainer.")
    per = f"ln {key}" if r["dose_scale"] == "log" else key
    return (
        f"{r['metric']} ({100 * r['window_lo']:g}-{100 * r['window_hi']:g}% of steps"
        + (", off-policy" if r["off_policy_only"] else "")
        + f"): slope per unit of {per}, {key} = {r['dose_values']}; {int(r['dose_runs'])} runs at "
        f"{int(r['dose_levels'])} values"
    )


def values_text(values: Sequence[Any]) -> str:
    """A finding's setting values as text: ``0.2, 0.28, 0.4, 0.8``."""
    return ", ".join(fmt(float(v)) for v in values)


def caption_text(has_dose: bool) -> str:
    """The sentences of the findings caption that explain dose-response findings ("" without)."""
    if not has_dose:
        return ""
    return (
        " Dose-response findings (one setting at several values, each value's runs a level): per run the "
        "window mean, as for two arms; effect = the ordinary least-squares slope of the runs' values on the "
        "setting's value (or its natural log, where the metric cell says ln) with its Student t interval "
        "(n - 2 degrees of freedom, se = residual SD / sqrt(Sxx); Draper & Smith 1998, §1.4); baseline mean: "
        "the runs at the lowest value, variant mean: at the highest; P(>): the probability that a run at the "
        "highest value beats a run at the lowest, with its stratified-bootstrap interval; seeds for 80% power: "
        "seeds per value (the same at every value) at which a two-sided 5% t test of the slope detects the "
        "observed slope at the observed residual SD (noncentral t with n - 2 degrees of freedom; Dupont & "
        "Plummer 1998)."
    )


def record_problems(f: Mapping[str, Any]) -> list[str]:
    """The keys of a recorded dose-response finding (``grid.json``) that are malformed: ``dose``
    (``key`` a text, ``values`` two or more distinct finite numbers, ``scale`` linear or log, and
    positive values for log), ``select`` (a mapping), ``arms`` (one list of run ids per value,
    keyed by :func:`level_label`, and nothing else)."""
    dose, bad = f.get("dose"), []
    values = dose.get("values") if isinstance(dose, Mapping) else None
    numbers = (
        isinstance(values, list)
        and len(values) >= 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values)
        and len({float(v) for v in values}) == len(values)
    )
    if not (
        numbers
        and isinstance(dose.get("key"), str)
        and dose.get("scale", "linear") in SCALES
        and (dose.get("scale") != "log" or min(values) > 0)
    ):
        return ["dose"]
    if not isinstance(f.get("select", {}), Mapping):
        bad.append("select")
    arms = f.get("arms")
    labels = [level_label(v) for v in values]
    if not (
        isinstance(arms, Mapping)
        and sorted(arms) == sorted(labels)
        and all(isinstance(arms[a], list) and all(isinstance(r, str) for r in arms[a]) for a in labels)
    ):
        bad.append("arms")
    return bad
