"""Verdicts on a grid's findings: does each paper's claim hold in these runs?

A grid file's ``findings:`` section (:mod:`harness.config.findings`) states, per finding, a paper's
claim, the metric that tests it, a window of each run, the direction the paper finds and two arms
of runs (baseline and variant); ``grid.json`` records each arm's run ids. Here, pure functions:

1. :func:`window_values`: one number per run, the nan-mean of the metric over the window;
2. :func:`verdict`: the arms' values in, the effect (variant mean - baseline mean) with its Welch
   t interval, the probability of improvement with its stratified-bootstrap interval, and the
   verdict (reproduced / opposite / not resolved, with the seeds per arm that would resolve the
   observed effect at 80% power);
3. :func:`findings_table`: a row per finding (numbers, for CSV), :func:`display_table` (the
   report's markdown and LaTeX) and :func:`compact_table` (``grpo-harness findings``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analysis import stats
from analysis.aggregate import factorize_runs
from analysis.power import pooled_sd, seeds_for_power, welch_interval
from analysis.scores import REPORT_REPS, bootstrap_reps
from analysis.tables import Table, fmt
from harness import layout

__all__ = [
    "DIRECTIONS",
    "Finding",
    "caption",
    "compact_table",
    "display_table",
    "findings_table",
    "note_lines",
    "read_findings",
    "verdict",
    "window_stats",
    "window_values",
]

DIRECTIONS = ("higher", "lower")
REPRODUCED, OPPOSITE, NOT_RESOLVED = "reproduced", "opposite", "not resolved"
#: Why an arm's run is left out when nothing else says: it is not among the runs read.
NOT_READ = "not among the runs read (not in grid.json's run_ids, or not given to this report)"


@dataclass(frozen=True)
class Finding:
    """One finding as ``grid.json`` records it (:func:`harness.config.findings.record`).

    Attributes:
        id: the finding's key in the grid file.
        claim, paper, scaled: the texts of the grid file (``scaled`` "" when not given).
        metric: a per-step metric column of the runs.
        window: ``(a, b)``, fractions of each run's logged steps, ``0 <= a < b <= 1``.
        direction: ``"higher"`` or ``"lower"``: what the paper finds for the variant's metric.
        baseline, variant: the selectors (``{dotted key: value}``), for display.
        arms: ``{"baseline": run ids, "variant": run ids}`` as the plan selected them.
        off_policy_only: only rows with ``off_policy == 1`` count.
    """

    id: str
    claim: str
    paper: str
    metric: str
    window: tuple[float, float]
    direction: str
    baseline: Mapping[str, Any] = field(default_factory=dict)
    variant: Mapping[str, Any] = field(default_factory=dict)
    arms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    scaled: str = ""
    off_policy_only: bool = False


def read_findings(section: Any, where: str) -> list[Finding]:
    """The findings recorded in ``grid.json`` (its ``findings`` value), checked again: the file may
    come from an older version or have been edited by hand.

    Args:
        section: the recorded value (None or ``{}``: no findings).
        where: the file, for the messages.

    Returns:
        One :class:`Finding` per entry, in order.

    Raises:
        ValueError: listing every problem, each naming the file, the finding and the key.
    """
    if not section:
        return []
    if not isinstance(section, Mapping):
        raise ValueError(
            f"{where}: findings is {type(section).__name__}, not a mapping of finding id -> finding"
        )
    out, problems = [], []
    for fid, f in section.items():
        here = f"{where}: findings.{fid}"
        problem = _record_problem(f, here)
        if problem:
            problems.append(problem)
            continue
        window, arms = f["window"], f["arms"]
        out.append(
            Finding(
                id=str(fid),
                claim=f["claim"],
                paper=f["paper"],
                metric=f["metric"],
                window=(float(window[0]), float(window[1])),
                direction=f["direction"],
                baseline=dict(f.get("baseline") or {}),
                variant=dict(f.get("variant") or {}),
                arms={a: tuple(arms[a]) for a in ("baseline", "variant")},
                scaled=f.get("scaled") or "",
                off_policy_only=f.get("off_policy_only", False),
            )
        )
    if problems:
        raise ValueError("; ".join(problems))
    return out


def _record_problem(f: Any, here: str) -> str:
    """What is wrong with one recorded finding ``f`` ("" when nothing), starting with ``here``:
    every field :func:`read_findings` reads is checked, so a hand edit is named, never misread."""
    if not isinstance(f, Mapping):
        return f"{here} is {type(f).__name__}, not a mapping"
    bad = [
        k
        for k in ("claim", "paper", "metric", "direction")
        if not (isinstance(f.get(k), str) and f[k].strip())
    ]
    bad += [k for k in ("baseline", "variant") if not isinstance(f.get(k, {}), Mapping)]
    if not isinstance(f.get("scaled", ""), str | None):
        bad.append("scaled")
    if not isinstance(f.get("off_policy_only", False), bool):
        bad.append("off_policy_only")
    window = f.get("window")
    if not (
        isinstance(window, list | tuple)
        and len(window) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in window)
        and 0 <= window[0] < window[1] <= 1
    ):
        bad.append("window")
    if f.get("direction") not in DIRECTIONS:
        bad.append("direction")
    arms = f.get("arms")
    if not (
        isinstance(arms, Mapping)
        and all(
            isinstance(arms.get(a), list) and all(isinstance(r, str) for r in arms[a])
            for a in ("baseline", "variant")
        )
    ):
        bad.append("arms")
    if bad:
        why = (
            " (arms: the run ids of each arm, written by `grpo-harness run` or `submit`)"
            if "arms" in bad
            else ""
        )
        return f"{here}: {', '.join(dict.fromkeys(bad))} missing or malformed{why}"
    shared = sorted(set(arms["baseline"]) & set(arms["variant"]))
    if shared:
        more = f" and {len(shared) - 3} more" if len(shared) > 3 else ""
        return (
            f"{here}: arms baseline and variant share run(s) {', '.join(shared[:3])}{more} (a run cannot be "
            "compared with itself)"
        )
    return ""


def window_values(
    df: pd.DataFrame,
    metric: str,
    window: tuple[float, float],
    *,
    off_policy_only: bool = False,
) -> pd.Series:
    """Per run, the nan-mean of ``metric`` over a window of its logged steps.

    A run's ``n`` logged rows, ordered by step, are at positions ``i = 0 .. n-1``; the window
    ``(a, b)`` holds the rows with ``a <= i / n < b`` (so ``(0.5, 1.0)`` is the second half, ``(0,
    1)`` the whole run), counted over every logged row whether or not it has the metric (an eval
    metric logged every 25 steps keeps its place in the run). The value is the mean of the metric's
    finite values there (NaN where there are none).

    Args:
        df: frame from :func:`analysis.load.load` (``run_id``, ``step``, the metric and, with
            ``off_policy_only``, ``off_policy``).
        metric: the column averaged.
        window: ``(a, b)`` with ``0 <= a < b <= 1``.
        off_policy_only: only rows with ``off_policy == 1`` count (a frame without the column
            has none).

    Returns:
        Float values indexed by run id (str, sorted), one per run of ``df``; NaN for a run with no
        finite value in its window, and for every run when ``metric`` is not a column.

    Raises:
        ValueError: if the window is not ``0 <= a < b <= 1``.
    """
    return window_stats(df, metric, window, off_policy_only=off_policy_only)["value"].rename(metric)


def window_stats(
    df: pd.DataFrame,
    metric: str,
    window: tuple[float, float],
    *,
    off_policy_only: bool = False,
) -> pd.DataFrame:
    """:func:`window_values` with the counts behind each value, to say why a run has none.

    Returns:
        Indexed by run id (str, sorted): ``value`` (:func:`window_values`), ``rows`` (logged
        steps), ``finite`` (steps with a finite value of the metric, anywhere in the run),
        ``in_window`` (steps in the window), ``finite_in_window`` (of those, with a finite value)
        and ``kept`` (the steps averaged: those, off-policy ones only with ``off_policy_only``).
    """
    a, b = (float(w) for w in window)
    if not 0.0 <= a < b <= 1.0:
        raise ValueError(f"window must be 0 <= a < b <= 1, got {window!r}")
    codes, names = factorize_runs(df[layout.RUN_ID])
    index = pd.Index([str(n) for n in names], name=layout.RUN_ID, dtype=object)
    n = len(names)
    rows = np.bincount(codes, minlength=n) if len(df) else np.zeros(n, dtype=np.int64)
    if len(df) == 0:
        return _stats_frame(index, np.full(n, np.nan), rows, *(np.zeros(n, dtype=np.int64),) * 4)
    steps = df[layout.STEP].to_numpy()
    order = np.lexsort((steps, codes))
    c = codes[order]
    counts = np.bincount(c, minlength=len(names))
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    position = (np.arange(c.size) - np.repeat(starts, counts)) / np.maximum(counts[c], 1)
    inside = (position >= a) & (position < b)
    y = df[metric].to_numpy(dtype=np.float64)[order] if metric in df.columns else np.full(c.size, np.nan)
    finite = np.isfinite(y)
    keep = inside & finite
    counts_of = [np.bincount(c[m], minlength=n) for m in (finite, inside, keep)]
    if off_policy_only:
        off = (
            df[layout.OFF_POLICY].to_numpy(dtype=np.float64)[order]
            if layout.OFF_POLICY in df.columns
            else np.zeros(c.size)
        )
        keep &= off == 1
    kept = np.bincount(c[keep], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(c[keep], weights=y[keep], minlength=n) / kept
    return _stats_frame(index, mean, rows, *counts_of, kept)


def _stats_frame(index: pd.Index, value: np.ndarray, rows: np.ndarray, *counts: np.ndarray) -> pd.DataFrame:
    finite, in_window, finite_in_window, kept = counts
    out = pd.DataFrame(
        {
            "value": np.asarray(value, dtype=np.float64),
            "rows": rows,
            "finite": finite,
            "in_window": in_window,
            "finite_in_window": finite_in_window,
            "kept": kept,
        },
        index=index,
    )
    return out.sort_index()


def verdict(
    baseline: Sequence[float] | np.ndarray,
    variant: Sequence[float] | np.ndarray,
    direction: str,
    *,
    confidence: float = 0.95,
    power: float = 0.8,
    alpha: float = 0.05,
    reps: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """The verdict on one finding from each arm's per-run values.

    - effect = mean(variant) - mean(baseline), with the Welch t interval
      (:func:`analysis.power.welch_interval`; deterministic, and it keeps its coverage at 3-5
      seeds, where a percentile bootstrap undercovers);
    - P(variant > baseline): rliable's probability of improvement (Mann-Whitney U / nm,
      :func:`analysis.stats.probability_of_improvement`) with its stratified percentile bootstrap
      interval (Agarwal et al. 2021);
    - verdict: ``"reproduced"`` when the effect's interval excludes 0 on the side ``direction``
      names, ``"opposite"`` when it excludes 0 on the other side, ``"not resolved"`` otherwise;
      ``"not enough runs (...)"`` when an arm has fewer than 2 values;
    - for "not resolved", the seeds per arm at which a two-sided ``alpha`` two-sample t test
      detects the observed effect with ``power``, at the observed pooled SD
      (:func:`analysis.power.seeds_for_power`, noncentral t; NaN when the effect or the spread is 0).

    Args:
        baseline: the baseline arm's values, shape ``(n_b,)``; NaNs (runs without a value) dropped.
        variant: the variant arm's values, shape ``(n_v,)``; NaNs dropped.
        direction: ``"higher"`` or ``"lower"``, what the paper finds for the variant.
        confidence: coverage of both intervals.
        power, alpha: of the seeds-needed calculation.
        reps: bootstrap resamples of P(>) (default :func:`analysis.scores.bootstrap_reps`: 50,000
            for arms of up to 80 runs); seed: its seed.

    Returns:
        ``{"baseline_n", "baseline_mean", "variant_n", "variant_mean", "effect", "effect_lo",
        "effect_hi", "p_improve", "p_improve_lo", "p_improve_hi", "pooled_sd", "verdict",
        "seeds_80", "reps"}``; intervals NaN with fewer than 2 values in an arm, ``seeds_80`` NaN
        unless the verdict is "not resolved" (``inf`` beyond a million seeds), ``reps`` the
        resamples of P(>)'s interval (0 without one).

    Raises:
        ValueError: if ``direction`` is not higher or lower.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    b = np.asarray(baseline, dtype=np.float64).ravel()
    v = np.asarray(variant, dtype=np.float64).ravel()
    b, v = b[~np.isnan(b)], v[~np.isnan(v)]
    nan = float("nan")
    out: dict[str, Any] = {
        "baseline_n": int(b.size),
        "baseline_mean": float(b.mean()) if b.size else nan,
        "variant_n": int(v.size),
        "variant_mean": float(v.mean()) if v.size else nan,
        "effect": nan,
        "effect_lo": nan,
        "effect_hi": nan,
        "p_improve": nan,
        "p_improve_lo": nan,
        "p_improve_hi": nan,
        "pooled_sd": pooled_sd(b, v),
        "verdict": "",
        "seeds_80": nan,
        "reps": 0,
    }
    if b.size and v.size:
        out["effect"], out["effect_lo"], out["effect_hi"] = welch_interval(v, b, confidence)
        out["p_improve"] = stats.probability_of_improvement(v, b)
    if b.size < 2 or v.size < 2:
        out["effect_lo"] = out["effect_hi"] = nan
        out["verdict"] = f"not enough runs (baseline {b.size}, variant {v.size}; 2 per arm needed)"
        return out
    out["reps"] = bootstrap_reps(b.size + v.size) if reps is None else reps
    (values,) = stats.stratified_bootstrap_replicates(
        [stats.probability_of_improvement], v, b, reps=out["reps"], seed=seed
    )
    out["p_improve_lo"], out["p_improve_hi"] = stats.percentile_interval(values, confidence)
    lo, hi = out["effect_lo"], out["effect_hi"]
    side = "higher" if lo > 0 else ("lower" if hi < 0 else None)
    if side is None:
        out["verdict"] = NOT_RESOLVED
        out["seeds_80"] = seeds_for_power(out["effect"], out["pooled_sd"], power, alpha)
    else:
        out["verdict"] = REPRODUCED if side == direction else OPPOSITE
    return out


def findings_table(
    df: pd.DataFrame,
    findings: Sequence[Finding],
    finished: Collection[str],
    *,
    unfinished: Mapping[str, str] | None = None,
    logged: Collection[str] = (),
    confidence: float = 0.95,
    reps: int | None = None,
    seed: int = 0,
) -> Table:
    """One row per finding: each arm's finished runs' window values, and :func:`verdict`.

    Args:
        df: frame from :func:`analysis.load.load` with each finding's metric (runs of neither arm
            are ignored).
        findings: from :func:`read_findings`.
        finished: the run ids the verdicts may count (the report's finished runs); an arm's other
            runs are left out.
        unfinished: why each run of an arm that is not in ``finished`` is not (its state, e.g.
            "diverged at step 12 (loss)"); a run it does not name is :data:`NOT_READ`.
        logged: metric names the runs log, to suggest one for a metric that no run logs.
        confidence, reps, seed: as in :func:`verdict`.

    Returns:
        A :class:`analysis.tables.Table` whose caption is :func:`caption` and whose frame has the
        columns ``finding``, ``claim``, ``paper``, ``scaled``, ``metric``, ``window_lo``,
        ``window_hi``, ``off_policy_only``, ``direction``, ``baseline``, ``variant`` (the
        selectors as ``key=value`` text), then :func:`verdict`'s keys, then ``left_out`` (the
        arms' runs without a value and why, as text: "" when none) and ``note`` (what else limits
        the numbers: "" when nothing).
    """
    finished = {str(r) for r in finished}
    unfinished = {str(k): str(v) for k, v in (unfinished or {}).items()}
    rows = []
    cache: dict[tuple, pd.DataFrame] = {}
    used: set[str] = set()
    for f in findings:
        key = (f.metric, f.window, f.off_policy_only)
        if key not in cache:
            cache[key] = window_stats(df, f.metric, f.window, off_policy_only=f.off_policy_only)
        st = cache[key]
        arm, left = _arm_values(st, f, finished, unfinished)
        left_ids = {r for _, r, _ in left}
        used.update(r for name in ("baseline", "variant") for r in f.arms.get(name, ()) if r not in left_ids)
        out = verdict(
            arm["baseline"], arm["variant"], f.direction, confidence=confidence, reps=reps, seed=seed
        )
        rows.append(
            {
                "finding": f.id,
                "claim": f.claim,
                "paper": f.paper,
                "scaled": f.scaled,
                "metric": f.metric,
                "window_lo": f.window[0],
                "window_hi": f.window[1],
                "off_policy_only": f.off_policy_only,
                "direction": f.direction,
                "baseline": _selector_text(f.baseline),
                "variant": _selector_text(f.variant),
                **out,
                "left_out": _left_out_text(left, f.metric, st, logged),
                "note": _note(arm["baseline"], arm["variant"], out),
            }
        )
    table = pd.DataFrame(rows)
    drawn = sorted({int(n) for n in table.get("reps", []) if n})
    return Table(
        table,
        caption=caption(
            reps=drawn or [_default_reps(reps)], seed=seed, confidence=confidence, finished_runs=len(used)
        ),
    )


def _arm_values(
    st: pd.DataFrame, f: Finding, finished: Collection[str], unfinished: Mapping[str, str]
) -> tuple[dict[str, np.ndarray], list[tuple[str, str, str]]]:
    """Each arm's values (its finished runs with a value in the window; ``st``: :func:`window_stats`)
    and the runs left out, ``(arm, run id, why)``."""
    arm: dict[str, np.ndarray] = {}
    left: list[tuple[str, str, str]] = []
    for name in ("baseline", "variant"):
        ids = list(dict.fromkeys(f.arms.get(name, ())))
        counted = [r for r in ids if r in finished and r in st.index and np.isfinite(st.at[r, "value"])]
        arm[name] = st["value"].reindex(counted).to_numpy(dtype=np.float64)
        for r in ids:
            if r not in finished:
                left.append((name, r, unfinished.get(r, NOT_READ)))
            elif r not in counted:
                left.append((name, r, _why_no_value(st, r, f)))
    return arm, left


def _why_no_value(st: pd.DataFrame, run_id: str, f: Finding) -> str:
    """Why a finished run has no value for finding ``f`` (``st``: :func:`window_stats`)."""
    if run_id not in st.index or st.at[run_id, "rows"] == 0:
        return "no logged step"
    r = st.loc[run_id]
    rows = int(r["rows"])
    window = f"{100 * f.window[0]:g}-{100 * f.window[1]:g}% of its steps"
    if r["finite"] == 0:
        return f"no finite {f.metric} at any of its {rows} logged step(s)"
    if r["in_window"] == 0:
        return f"its {rows} logged step(s) put none in the window ({window})"
    if r["finite_in_window"] == 0:
        return (
            f"no finite {f.metric} in the window ({window}: {int(r['in_window'])} step(s)); it has one at "
            f"{int(r['finite'])} of its {rows} steps, all outside"
        )
    return f"no off-policy step (off_policy == 1) with a finite {f.metric} in the window ({window})"


def _left_out_text(
    left: Sequence[tuple[str, str, str]], metric: str, st: pd.DataFrame, logged: Collection[str]
) -> str:
    """The arms' runs left out, grouped by arm and reason: "variant: `a`, `b` (diverged ...)";
    a metric that no run of the frame logs says so, with the closest logged names."""
    if not left:
        return ""
    groups: dict[tuple[str, str], list[str]] = {}
    for name, rid, why in left:
        groups.setdefault((name, why), []).append(rid)
    parts = []
    for (name, why), ids in groups.items():
        shown = ", ".join(f"`{r}`" for r in ids[:6]) + (f" and {len(ids) - 6} more" if len(ids) > 6 else "")
        parts.append(f"{name} {shown} ({why})")
    text = "; ".join(parts)
    if len(st) and int(st["finite"].sum()) == 0 and any(why.startswith("no finite") for *_, why in left):
        import difflib

        close = difflib.get_close_matches(metric, [str(c) for c in logged], n=3, cutoff=0.6)
        text += f". No run logs {metric}" + (
            f": did you mean {' or '.join(repr(c) for c in close)}?"
            if close
            else " (check the metric's name)"
        )
    return text


def _note(baseline: np.ndarray, variant: np.ndarray, out: Mapping[str, Any]) -> str:
    """What limits a verdict beyond its numbers: both arms without any run-to-run spread."""
    if baseline.size >= 2 and variant.size >= 2 and out["pooled_sd"] == 0:
        return (
            "every run of each arm has the same value (no run-to-run spread), so the interval is the "
            "difference itself: no test stands behind it; check that the metric varies with the seed"
        )
    return ""


def _default_reps(reps: int | None) -> int:
    """``reps``, or the report's default resamples for small arms."""
    return REPORT_REPS if reps is None else reps


def _selector_text(selector: Mapping[str, Any]) -> str:
    return ", ".join(f"{str(k).removeprefix('trainer.')}={_value_text(v)}" for k, v in selector.items())


def _value_text(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return {True: "true", False: "false", None: "null"}[v]
    return str(v)


def caption(
    *, reps: Sequence[int], seed: int, confidence: float = 0.95, finished_runs: int | None = None
) -> str:
    """What the findings table shows and how its numbers were made (``reps``: the resamples the
    findings' bootstraps used, one or several values)."""
    pct = f"{100 * confidence:g}%"
    resamples = f"{reps[0]:,}" if len(reps) == 1 else f"{min(reps):,}-{max(reps):,} (fewer for large arms)"
    return (
        "Each finding (a paper's claim, from the grid file's findings: section) tested on these runs. Per "
        "finding, one value per finished run"
        + (f" ({finished_runs} runs in all)" if finished_runs is not None else "")
        + ": the nan-mean of the metric over the window, a fraction of each run's logged steps (off-policy "
        "steps only where marked); the arms' other runs (not finished, or without a value in the window) are "
        f"left out and listed under the table with why. Effect = variant mean - baseline mean with its {pct} Welch t interval "
        "(unequal variances, Welch-Satterthwaite degrees of freedom): exact under normal run-to-run noise and "
        "deterministic, where a percentile bootstrap over 3-5 seeds undercovers and could flip a verdict with "
        f"its seed. P(variant > baseline): the probability that a run of the variant has the larger value "
        f"(Mann-Whitney U / nm; Agarwal et al. 2021) with its {pct} percentile bootstrap interval ({resamples} "
        f"resamples of each arm's runs, seed {seed}). Verdict: reproduced when the effect's interval excludes 0 "
        "on the side the paper finds, opposite when it excludes 0 on the other side, not resolved otherwise; "
        "none with fewer than 2 finished runs in an arm. Seeds for 80% power (not resolved only): runs per arm "
        "at which a two-sided 5% two-sample t test detects the observed effect with 80% power at the observed "
        "pooled SD (noncentral t); — when the effect or the spread is 0."
    )


def _interval(v: float, lo: float, hi: float) -> str:
    if not np.isfinite(v):
        return "–"
    return fmt(v) if math.isnan(lo) else f"{fmt(v)} [{fmt(lo)}, {fmt(hi)}]"


def _shown_interval(r: Mapping[str, Any], key: str) -> str:
    """``key`` (effect or p_improve) of a findings row with its interval, as text; "–" where an arm
    has fewer than 2 runs: a difference of means with no spread behind it is no result (the CSV
    keeps the number)."""
    if str(r["verdict"]).startswith("not enough runs"):
        return "–"
    return _interval(r[key], r[f"{key}_lo"], r[f"{key}_hi"])


def _seeds(n: float) -> str:
    if math.isnan(n):
        return "—"
    return "> 1,000,000" if math.isinf(n) else f"{int(n):,}"


def _metric_text(r: Mapping[str, Any]) -> str:
    return (
        f"{r['metric']} ({100 * r['window_lo']:g}-{100 * r['window_hi']:g}% of steps"
        + (", off-policy" if r["off_policy_only"] else "")
        + ")"
    )


def _paper_text(r: Mapping[str, Any]) -> str:
    return r["paper"] + (f"; scaled: {r['scaled']}" if r["scaled"] else "")


def display_table(table: Table) -> Table:
    """The report's findings table as text cells (markdown and LaTeX; the CSV keeps
    :func:`findings_table`'s numbers): finding | claim | paper | metric (window) | baseline mean (n)
    | variant mean (n) | effect [95% CI] | P(variant > baseline) [95% CI] | verdict | seeds for 80%
    power. ``table``'s caption is kept."""
    rows = [
        {
            "finding": r["finding"],
            "claim": r["claim"],
            "paper": _paper_text(r),
            "metric (window)": _metric_text(r),
            "baseline mean (n)": f"{fmt(r['baseline_mean'])} ({r['baseline_n']})",
            "variant mean (n)": f"{fmt(r['variant_mean'])} ({r['variant_n']})",
            "effect [95% CI]": _shown_interval(r, "effect"),
            "P(variant > baseline) [95% CI]": _shown_interval(r, "p_improve"),
            "verdict": r["verdict"],
            "seeds for 80% power": _seeds(r["seeds_80"]),
        }
        for r in table.frame.to_dict("records")
    ]
    return Table(pd.DataFrame(rows, columns=_DISPLAY_COLUMNS), caption=table.caption)


_DISPLAY_COLUMNS = [
    "finding",
    "claim",
    "paper",
    "metric (window)",
    "baseline mean (n)",
    "variant mean (n)",
    "effect [95% CI]",
    "P(variant > baseline) [95% CI]",
    "verdict",
    "seeds for 80% power",
]


def note_lines(table: Table, prefix: str = "") -> list[str]:
    """One line per finding of ``table`` (:func:`findings_table`) with runs left out or a note:
    "F1: left out variant `a` (why); note" (``prefix`` before each, e.g. the results folder); none
    when every run counted."""
    out = []
    for r in table.frame.to_dict("records"):
        parts = []
        if r.get("left_out"):
            parts.append(f"left out {r['left_out']}")
        if r.get("note"):
            parts.append(r["note"])
        if parts:
            text = "; ".join(parts)
            out.append(f"{prefix}{r['finding']}: {text}" + ("" if text.endswith((".", "?")) else "."))
    return out


def compact_table(table: Table) -> pd.DataFrame:
    """The findings of ``table`` (:func:`findings_table`) in six text columns, what ``grpo-harness findings`` prints (and the README's
    findings table is pasted from): claim (after the finding's id) | paper (without ``scaled``, which
    the report's table keeps) | metric | effect [95% CI] | P(>) [CI] | verdict;
    a "not resolved" verdict says how many seeds per arm would resolve it (or why no number can)."""
    rows = []
    for r in table.frame.to_dict("records"):
        text = r["verdict"]
        if text == NOT_RESOLVED and not math.isnan(r["seeds_80"]):
            text += f" ({_seeds(r['seeds_80'])} seeds/arm for 80% power)"
        elif text == NOT_RESOLVED:
            text += " (the arms' means are equal)" if r["effect"] == 0 else " (no spread to size it by)"
        rows.append(
            {
                "claim": f"{r['finding']}: {r['claim']}",
                "paper": r["paper"],
                "metric": _metric_text(r),
                "effect [95% CI]": _shown_interval(r, "effect"),
                "P(>) [CI]": _shown_interval(r, "p_improve"),
                "verdict": text,
            }
        )
    return pd.DataFrame(rows, columns=["claim", "paper", "metric", "effect [95% CI]", "P(>) [CI]", "verdict"])
