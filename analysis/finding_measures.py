"""What a finding measures per run, beside the window mean of :mod:`analysis.findings`.

A finding's ``measure`` (:mod:`analysis.settings.findings`) says which number each run gives:

- ``window`` (the default): the nan-mean of the metric over a window of the run's logged steps
  (:func:`analysis.findings.window_stats`); two arms of runs compared by Welch's interval.
- ``to_target``: the x (optimizer step, or ``tokens/generated_total``, the completion tokens
  generated so far) of the run's first logged row whose metric is finite and ``>= target``
  (:func:`crossing_stats`); a run that never reaches the target gets the x of its last logged row
  and is *censored*: its true value is at least that. The target is a stated number or the
  baseline arm's mean of its runs' window means (:func:`to_target_values`). Two arms, as for
  ``window``.
- ``from_start``: each run's end (its window mean) minus its own start, the starting policy's eval
  before step 1 (``eval_start.json``): one paired difference per run (:func:`from_start_values`),
  judged by :func:`paired_verdict` (one-sample t interval, P(end > start), paired power).

Pure functions: frames and arrays in, frozen records and dicts out. The texts that explain each
measure in the findings table (:func:`metric_text`, :func:`caption_text`, :func:`censoring_note`)
are here too, so :mod:`analysis.findings` shows every measure in the same columns.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis import stats
from analysis.aggregate import factorize_runs
from analysis.power import paired_interval, paired_p, seeds_for_paired_power
from analysis.scores import bootstrap_reps
from analysis.settings.findings import (
    BASELINE_TARGET,
    DIRECTIONS,
    FROM_START,
    MEASURES,
    START,
    TO_TARGET,
    WINDOW,
    X_UNITS,
)
from analysis.tables import fmt
from harness import layout

__all__ = [
    "DIRECTIONS",
    "MEASURES",
    "START",
    "X_UNITS",
    "StartValues",
    "TargetValues",
    "caption_text",
    "censoring_note",
    "crossing_stats",
    "from_start_values",
    "metric_text",
    "paired_verdict",
    "record_problems",
    "resolved",
    "to_target_values",
    "why_no_value",
]

REPRODUCED, OPPOSITE, NOT_RESOLVED = "reproduced", "opposite", "not resolved"
_X_COLUMN = {"step": layout.STEP, "tokens": layout.TOKENS_GENERATED_TOTAL}
_X_TEXT = {"step": "steps", "tokens": f"generated tokens ({layout.TOKENS_GENERATED_TOTAL})"}


def resolved(lo: float, hi: float, direction: str) -> str:
    """The verdict of an effect's interval ``[lo, hi]``: reproduced when it excludes 0 on the side
    ``direction`` names, opposite when it excludes 0 on the other side, else not resolved."""
    side = "higher" if lo > 0 else ("lower" if hi < 0 else None)
    if side is None:
        return NOT_RESOLVED
    return REPRODUCED if side == direction else OPPOSITE


# --- to_target: the first crossing of a target ------------------------------------------------------


def crossing_stats(df: pd.DataFrame, metric: str, target: float, x: str = "step") -> pd.DataFrame:
    """Per run, the x of its first logged row whose ``metric`` is finite and ``>= target``.

    A run's rows are ordered by step. A run whose metric is finite somewhere but never reaches the
    target gets the x of its last logged row (any row, with or without the metric) and is censored:
    it ran that far without reaching it, so its true value is at least that.

    Args:
        df: frame from :func:`analysis.load.load` (``run_id``, ``step``, ``metric`` and, for
            ``x="tokens"``, ``tokens/generated_total``), one row per run and logged step.
        metric: the column compared with ``target`` (e.g. ``eval/accuracy``, NaN off eval steps).
        target: the level to reach (NaN: no run reaches it).
        x: ``"step"`` (the row's optimizer step) or ``"tokens"`` (its ``tokens/generated_total``).

    Returns:
        Indexed by run id (str, sorted): ``value`` (float: the x; NaN when the run has no finite
        metric, or no x at that row), ``censored`` (bool: never reached, ``value`` from its last
        row), ``at_step`` (int: the step of that row; -1 without rows), ``rows`` (logged steps),
        ``finite`` (steps with a finite metric).

    Raises:
        ValueError: for an ``x`` other than step or tokens.
    """
    if x not in X_UNITS:
        raise ValueError(f"x must be one of {X_UNITS}, got {x!r}")
    codes, names = factorize_runs(df[layout.RUN_ID])
    n = len(names)
    index = pd.Index([str(r) for r in names], name=layout.RUN_ID, dtype=object)
    steps = df[layout.STEP].to_numpy()
    order = np.lexsort((steps, codes))
    c = codes[order]
    y = df[metric].to_numpy(dtype=np.float64)[order] if metric in df.columns else np.full(c.size, np.nan)
    col = _X_COLUMN[x]
    xs = df[col].to_numpy(dtype=np.float64)[order] if col in df.columns else np.full(c.size, np.nan)
    finite = np.bincount(c[np.isfinite(y)], minlength=n)
    rows = np.bincount(c, minlength=n)
    last = np.cumsum(rows) - 1  # the last row of each run (rows are grouped by run)
    with np.errstate(invalid="ignore"):
        hit = np.flatnonzero(np.isfinite(y) & (y >= target))
    first = np.full(n, -1)
    runs_hit, at = np.unique(c[hit], return_index=True)  # c is sorted: the first hit of each run
    first[runs_hit] = hit[at]
    row = np.where(first >= 0, first, np.maximum(last, 0))
    has = (rows > 0) & (finite > 0)
    value = np.where(has, xs[row] if c.size else np.nan, np.nan)
    out = pd.DataFrame(
        {
            "value": value.astype(np.float64),
            "censored": has & (first < 0),
            "at_step": np.where(rows > 0, steps[order][row] if c.size else -1, -1).astype(np.int64),
            "rows": rows,
            "finite": finite,
        },
        index=index,
    )
    return out.sort_index()


@dataclass(frozen=True)
class TargetValues:
    """A ``to_target`` finding's per-run values (:func:`to_target_values`).

    Attributes:
        values: ``{"baseline": (n_b,), "variant": (n_v,)}`` float arrays, the runs with a value.
        censored: per arm, ``(run id, x)`` of each run counted that never reached the target.
        left: ``(arm, run id, why)`` of each run given that has no value.
        target: the level each run had to reach (NaN: none could be set).
        target_runs: the baseline runs whose window means make the target (0 for a stated one).
    """

    values: Mapping[str, np.ndarray]
    censored: Mapping[str, tuple[tuple[str, float], ...]]
    left: tuple[tuple[str, str, str], ...]
    target: float
    target_runs: int


def to_target_values(
    df: pd.DataFrame,
    metric: str,
    target: float | str,
    x: str,
    arms: Mapping[str, Sequence[str]],
    window_stats: pd.DataFrame | None = None,
) -> TargetValues:
    """Each arm's runs' x at their first crossing of the target (:func:`crossing_stats`).

    Args:
        df: the metrics frame (:func:`crossing_stats`).
        metric, x: as in :func:`crossing_stats`.
        target: a number, or ``"baseline"``: the mean over the baseline arm's runs (of ``arms``) of
            their window means, ``window_stats``' ``value``.
        arms: ``{"baseline": run ids, "variant": run ids}``, the finished runs to count.
        window_stats: :func:`analysis.findings.window_stats` of ``metric`` over the finding's window
            (needed for ``target="baseline"``).

    Returns:
        A :class:`TargetValues`. A run without a value is left out with why: no finite metric, no
        ``tokens/generated_total`` at its row, or no target (no baseline run has a window mean).

    Raises:
        ValueError: if ``target`` is neither ``"baseline"`` nor a number.
    """
    if target != BASELINE_TARGET and (isinstance(target, bool) or not isinstance(target, int | float)):
        raise ValueError(f"target must be {BASELINE_TARGET!r} or a number, got {target!r}")
    if target == BASELINE_TARGET:
        st = window_stats if window_stats is not None else pd.DataFrame({"value": []})
        base = st["value"].reindex(list(arms.get("baseline", ()))).to_numpy(dtype=np.float64)
        base = base[np.isfinite(base)]
        level, target_runs = (float(base.mean()) if base.size else math.nan), int(base.size)
    else:
        level, target_runs = float(target), 0
    cs = crossing_stats(df, metric, level, x)
    values: dict[str, np.ndarray] = {}
    censored: dict[str, tuple[tuple[str, float], ...]] = {}
    left: list[tuple[str, str, str]] = []
    for name in ("baseline", "variant"):
        ids = list(dict.fromkeys(arms.get(name, ())))
        if not math.isfinite(level):
            left += [
                (name, r, f"no target: no baseline run has a finite {metric} in the window") for r in ids
            ]
            ids = []
        counted = [r for r in ids if r in cs.index and np.isfinite(cs.at[r, "value"])]
        left += [(name, r, _why_no_crossing(cs, r, metric, x)) for r in ids if r not in counted]
        values[name] = cs["value"].reindex(counted).to_numpy(dtype=np.float64)
        censored[name] = tuple((r, float(cs.at[r, "value"])) for r in counted if cs.at[r, "censored"])
    return TargetValues(values, censored, tuple(left), level, target_runs)


def _why_no_crossing(cs: pd.DataFrame, run_id: str, metric: str, x: str) -> str:
    """Why run ``run_id`` has no x to the target (``cs``: :func:`crossing_stats`)."""
    if run_id not in cs.index or cs.at[run_id, "rows"] == 0:
        return "no logged step"
    rows = int(cs.at[run_id, "rows"])
    if cs.at[run_id, "finite"] == 0:
        return f"no finite {metric} at any of its {rows} logged step(s)"
    where = "its last logged step, never reaching the target" if cs.at[run_id, "censored"] else "its crossing"
    return f"no {_X_COLUMN[x]} at step {int(cs.at[run_id, 'at_step'])} ({where})"


def censoring_note(
    censored: Mapping[str, Sequence[tuple[str, float]]], x: str, effect: float, verdict: str
) -> str:
    """What the censored runs of a ``to_target`` finding mean for its numbers ("" when none).

    A censored value is a lower bound: it understates its arm's mean. Censored variant runs alone
    mean the true effect (variant - baseline) is at least the one shown, baseline runs alone at
    most; a verdict whose side the true values could pull back toward 0 is said to lean on them.
    """
    arms = [a for a in ("baseline", "variant") if censored.get(a)]
    if not arms:
        return ""
    unit = "step" if x == "step" else f"{layout.TOKENS_GENERATED_TOTAL} value"
    parts = []
    for a in arms:
        runs = ", ".join(f"`{r}` ({fmt(v)})" for r, v in list(censored[a])[:6])
        more = f" and {len(censored[a]) - 6} more" if len(censored[a]) > 6 else ""
        parts.append(f"{a} {runs}{more}")
    text = (
        f"target not reached (censored at the last logged {unit}): {'; '.join(parts)}; their true values are "
        "at least these, so their arm's mean understates its time"
    )
    if len(arms) == 2:
        return text + " (censored runs in both arms: the effect's bias has no known sign)"
    bound = "at least" if arms == ["variant"] else "at most"
    text += f", and the true effect (variant - baseline) is {bound} the one shown"
    at_risk = (arms == ["variant"] and effect < 0) or (arms == ["baseline"] and effect > 0)
    if verdict in (REPRODUCED, OPPOSITE) and at_risk:
        text += ": the verdict leans on them, whose true values could pull the effect back to 0 (longer runs would tell)"
    return text


# --- from_start: each run against its own starting policy ------------------------------------------


@dataclass(frozen=True)
class StartValues:
    """A ``from_start`` finding's pairs (:func:`from_start_values`).

    Attributes:
        ids: the runs with both ends, in order.
        start, end: shape ``(n,)`` each: the starting policy's value and the window mean.
        left: ``(arm, run id, why)`` of each run given that has no pair (arm ``"variant"``).
    """

    ids: tuple[str, ...]
    start: np.ndarray
    end: np.ndarray
    left: tuple[tuple[str, str, str], ...]


def from_start_values(
    window_stats: pd.DataFrame,
    starts: Mapping[str, Mapping[str, float]],
    metric: str,
    window: tuple[float, float],
    run_ids: Sequence[str],
) -> StartValues:
    """Each run's start and end of ``metric``.

    Args:
        window_stats: :func:`analysis.findings.window_stats` of ``metric`` over ``window`` (the end).
        starts: ``{run id: {eval metric: value}}``, each run's ``eval_start.json``
            (:func:`harness.layout.read_start_evals`); a run without the file is absent.
        metric, window: the finding's.
        run_ids: the finished runs to count.

    Returns:
        A :class:`StartValues`; a run without a window mean, without ``eval_start.json`` or without
        ``metric`` there is left out with why.
    """
    ids, start, end, left = [], [], [], []
    for r in dict.fromkeys(run_ids):
        has_end = r in window_stats.index and np.isfinite(window_stats.at[r, "value"])
        recorded = starts.get(r)
        value = (recorded or {}).get(metric)
        if not has_end:
            left.append(("variant", r, why_no_value(window_stats, r, metric, window)))
        elif recorded is None:
            left.append(
                ("variant", r, f"no readable {layout.START_EVAL_FILE}: its starting policy was not evaluated")
            )
        elif value is None or not math.isfinite(value):
            others = ", ".join(sorted(recorded)) or "no eval metric"
            left.append(
                ("variant", r, f"its {layout.START_EVAL_FILE} has no finite {metric} (it has {others})")
            )
        else:
            ids.append(r)
            start.append(float(value))
            end.append(float(window_stats.at[r, "value"]))
    return StartValues(
        tuple(ids), np.array(start, dtype=np.float64), np.array(end, dtype=np.float64), tuple(left)
    )


def paired_verdict(
    start: Sequence[float] | np.ndarray,
    end: Sequence[float] | np.ndarray,
    direction: str,
    *,
    confidence: float = 0.95,
    power: float = 0.8,
    alpha: float = 0.05,
    reps: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """The verdict on a ``from_start`` finding from each run's start and end (paired by run).

    - effect = mean(end - start) with the one-sample Student t interval of the differences
      (:func:`analysis.power.paired_interval`);
    - P(end > start): the fraction of runs whose difference is > 0 (a tie counts as not above),
      with the percentile bootstrap interval over runs (:func:`analysis.stats.stratified_bootstrap_replicates`
      of the mean of the indicators, one stratum);
    - verdict: :func:`resolved`, as for two arms; for "not resolved", the runs at which a two-sided
      ``alpha`` paired t test detects the observed mean difference with ``power`` at the observed SD
      of the differences (:func:`analysis.power.seeds_for_paired_power`).

    Args:
        start, end: shape ``(n,)`` each, one pair per run; a pair with a NaN is dropped.
        direction: ``"higher"`` (the runs end above their start) or ``"lower"``.
        confidence, power, alpha, reps, seed: as in :func:`analysis.findings.verdict`.

    Returns:
        :func:`analysis.findings.verdict`'s keys: ``baseline_*`` the starts, ``variant_*`` the
        ends (both ``n``), ``pooled_sd`` the SD of the differences, ``p_value`` the one-sided
        paired t test's p of ``direction`` (:func:`analysis.power.paired_p`).

    Raises:
        ValueError: if ``direction`` is not higher or lower, or the arrays differ in length.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    s, e = np.asarray(start, dtype=np.float64).ravel(), np.asarray(end, dtype=np.float64).ravel()
    if s.shape != e.shape:
        raise ValueError(f"start and end differ in length: {s.size} and {e.size}")
    keep = np.isfinite(s) & np.isfinite(e)
    s, e = s[keep], e[keep]
    d, n, nan = e - s, int(keep.sum()), math.nan
    out: dict[str, Any] = {
        "baseline_n": n,
        "baseline_mean": float(s.mean()) if n else nan,
        "variant_n": n,
        "variant_mean": float(e.mean()) if n else nan,
        **dict(zip(("effect", "effect_lo", "effect_hi"), paired_interval(d, confidence), strict=True)),
        "p_improve": float(np.mean(d > 0)) if n else nan,
        "p_improve_lo": nan,
        "p_improve_hi": nan,
        "pooled_sd": nan,
        "verdict": "",
        "seeds_80": nan,
        "reps": 0,
        "p_value": paired_p(d, direction),
    }
    if n < 2:
        out["verdict"] = f"not enough runs ({n} with a start and an end; 2 needed)"
        return out
    out["pooled_sd"] = 0.0 if out["effect_lo"] == out["effect_hi"] else float(d.std(ddof=1))  # no spread
    out["reps"] = bootstrap_reps(n) if reps is None else reps
    (values,) = stats.stratified_bootstrap_replicates(
        [stats.mean_score], (d > 0).astype(np.float64), reps=out["reps"], seed=seed
    )
    out["p_improve_lo"], out["p_improve_hi"] = stats.percentile_interval(values, confidence)
    out["verdict"] = resolved(out["effect_lo"], out["effect_hi"], direction)
    if out["verdict"] == NOT_RESOLVED:
        out["seeds_80"] = seeds_for_paired_power(out["effect"], out["pooled_sd"], power, alpha)
    return out


def why_no_value(st: pd.DataFrame, run_id: str, metric: str, window: tuple[float, float]) -> str:
    """Why a finished run has no window mean of ``metric`` (``st``: :func:`analysis.findings.window_stats`)."""
    if run_id not in st.index or st.at[run_id, "rows"] == 0:
        return "no logged step"
    r = st.loc[run_id]
    rows = int(r["rows"])
    span = f"{100 * window[0]:g}-{100 * window[1]:g}% of its steps"
    if r["finite"] == 0:
        return f"no finite {metric} at any of its {rows} logged step(s)"
    if r["in_window"] == 0:
        return f"its {rows} logged step(s) put none in the window ({span})"
    if r["finite_in_window"] == 0:
        return (
            f"no finite {metric} in the window ({span}: {int(r['in_window'])} step(s)); it has one at "
            f"{int(r['finite'])} of its {rows} steps, all outside"
        )
    return f"no off-policy step (off_policy == 1) with a finite {metric} in the window ({span})"


# --- texts ---------------------------------------------------------------------------------------


def metric_text(r: Mapping[str, Any]) -> str:
    """The "metric (window)" cell of a findings row (:func:`analysis.findings.findings_table`) of a
    ``to_target`` or ``from_start`` finding: what each run's value is."""
    span = f"{100 * r['window_lo']:g}-{100 * r['window_hi']:g}% of steps"
    if r["measure"] == FROM_START:
        return f"{r['metric']}: end (mean over {span}) minus start ({layout.START_EVAL_FILE}), per run"
    source = (
        "stated"
        if not r.get("target_runs")
        else f"the baseline's mean over {span}, {int(r['target_runs'])} run(s)"
    )
    return (
        f"{r['metric']}: {_X_TEXT[r['x']]} to reach {fmt(r['target'])} ({source}); not reached (censored at "
        f"the last step): baseline {int(r['censored_baseline'])} of {int(r['baseline_n'])}, variant "
        f"{int(r['censored_variant'])} of {int(r['variant_n'])}"
    )


def caption_text(measures: Collection[str]) -> str:
    """The sentences of the findings caption that explain the ``to_target`` and ``from_start``
    findings among ``measures`` ("" when there are none)."""
    out = ""
    if TO_TARGET in measures:
        out += (
            " To-target findings: per run, the x (optimizer steps, or tokens/generated_total: completion tokens "
            "generated so far, so a variant that generates more per step pays for it) of its first logged row "
            "whose metric is finite and at least the target (a stated number, or the baseline arm's mean of its "
            "runs' window means, taken as known: its own uncertainty is not carried into the interval); a run "
            "that never reaches it gets the x of its last logged row and is censored: its true value is at least "
            "that, so its arm's mean understates the time (the runs are named under the table). Direction lower: "
            "the variant reaches the target sooner."
        )
    if FROM_START in measures:
        out += (
            " From-start findings: per run, its end (the window mean) minus its own start (the starting policy's "
            "eval before step 1, eval_start.json); baseline mean: the starts, variant mean: the ends. Effect = "
            "mean difference with its one-sample Student t interval (paired by run); P(end > start): the fraction "
            "of runs whose difference is above 0 (a tie is not above) with its percentile bootstrap interval over "
            "runs; seeds for 80% power: runs at which a two-sided 5% paired t test detects the observed mean "
            "difference at the observed SD of the differences (noncentral t, Cohen 1988 ch. 2)."
        )
    return out


def record_problems(f: Mapping[str, Any]) -> list[str]:
    """The keys of a recorded finding (``grid.json``) whose measure-specific values are malformed:
    ``measure``, ``target`` and ``x`` (to_target), ``baseline`` (``start`` exactly for from_start,
    never otherwise) and ``window`` (absent only for a to_target finding with a stated target)."""
    measure = f.get("measure", WINDOW)
    if measure not in MEASURES:
        return ["measure"]
    bad = []
    target = f.get("target")
    number = isinstance(target, int | float) and not isinstance(target, bool) and math.isfinite(target)
    if measure == TO_TARGET:
        if not (number or target == BASELINE_TARGET):
            return ["target"]
        if f.get("x", "step") not in X_UNITS:
            bad.append("x")
    elif "target" in f or "x" in f:
        bad += [k for k in ("target", "x") if k in f]
    if (f.get("baseline") == START) != (measure == FROM_START):
        bad.append("baseline")
    needs_window = not (measure == TO_TARGET and target != BASELINE_TARGET)
    if needs_window != (f.get("window") is not None):
        bad.append("window")
    return bad
