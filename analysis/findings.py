"""Verdicts on a grid's findings: does each paper's claim hold in these runs?

A grid file's ``findings:`` section (:mod:`harness.config.findings`) states, per finding, a paper's
claim, the metric that tests it, a window of each run, the direction the paper finds and two arms
of runs (baseline and variant); ``grid.json`` records each arm's run ids. Here, pure functions:

1. :func:`window_values`: one number per run, the nan-mean of the metric over the window (a
   finding's ``measure`` may instead be ``to_target`` or ``from_start``: the steps or tokens to a
   target, or each run's end against its own start; :mod:`analysis.finding_measures`);
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

from analysis import finding_measures, stats
from analysis.aggregate import factorize_runs
from analysis.finding_measures import (
    DIRECTIONS,
    FROM_START,
    NOT_RESOLVED,
    TO_TARGET,
    WINDOW,
)
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

#: Why an arm's run is left out when nothing else says: it is not among the runs read.
NOT_READ = "not among the runs read (not in grid.json's run_ids, or not given to this report)"


@dataclass(frozen=True)
class Finding:
    """One finding as ``grid.json`` records it (:func:`harness.config.findings.record`).

    Attributes:
        id: the finding's key in the grid file.
        claim, paper, scaled: the texts of the grid file (``scaled`` "" when not given).
        metric: a per-step metric column of the runs.
        window: ``(a, b)``, fractions of each run's logged steps, ``0 <= a < b <= 1``; None only for
            a ``to_target`` finding with a stated target.
        direction: ``"higher"`` or ``"lower"``: what the paper finds for the variant's metric (for
            ``to_target``, its steps or tokens; for ``from_start``, its end against its start).
        baseline, variant: the selectors (``{dotted key: value}``), for display; ``baseline`` is
            ``{}`` for ``from_start`` (each run's own start).
        arms: ``{"baseline": run ids, "variant": run ids}`` as the plan selected them (for
            ``from_start`` both the variant's).
        off_policy_only: only rows with ``off_policy == 1`` count.
        measure: ``"window"``, ``"to_target"`` or ``"from_start"`` (:mod:`analysis.finding_measures`).
        target: ``to_target``'s level, a number or ``"baseline"``; None otherwise.
        x: ``to_target``'s x, ``"step"`` or ``"tokens"``.
    """

    id: str
    claim: str
    paper: str
    metric: str
    window: tuple[float, float] | None
    direction: str
    baseline: Mapping[str, Any] = field(default_factory=dict)
    variant: Mapping[str, Any] = field(default_factory=dict)
    arms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    scaled: str = ""
    off_policy_only: bool = False
    measure: str = WINDOW
    target: float | str | None = None
    x: str = "step"


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
        window, arms, target = f.get("window"), f["arms"], f.get("target")
        out.append(
            Finding(
                id=str(fid),
                claim=f["claim"],
                paper=f["paper"],
                metric=f["metric"],
                window=None if window is None else (float(window[0]), float(window[1])),
                direction=f["direction"],
                baseline=dict(f["baseline"]) if isinstance(f.get("baseline"), Mapping) else {},
                variant=dict(f.get("variant") or {}),
                arms={a: tuple(arms[a]) for a in ("baseline", "variant")},
                scaled=f.get("scaled") or "",
                off_policy_only=f.get("off_policy_only", False),
                measure=f.get("measure", WINDOW),
                target=target if isinstance(target, str) or target is None else float(target),
                x=f.get("x", "step"),
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
    from_start = f.get("measure") == FROM_START
    bad += finding_measures.record_problems(f)
    bad += [
        k
        for k in ("baseline", "variant")
        if not isinstance(f.get(k, {}), Mapping) and not (k == "baseline" and from_start)
    ]
    if not isinstance(f.get("scaled", ""), str | None):
        bad.append("scaled")
    if not isinstance(f.get("off_policy_only", False), bool):
        bad.append("off_policy_only")
    window = f.get("window")
    if "window" not in bad and not (
        window is None
        or isinstance(window, list | tuple)
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
    if shared and not from_start:
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
    out["verdict"] = finding_measures.resolved(out["effect_lo"], out["effect_hi"], direction)
    if out["verdict"] == NOT_RESOLVED:
        out["seeds_80"] = seeds_for_power(out["effect"], out["pooled_sd"], power, alpha)
    return out


def findings_table(
    df: pd.DataFrame,
    findings: Sequence[Finding],
    finished: Collection[str],
    *,
    unfinished: Mapping[str, str] | None = None,
    logged: Collection[str] = (),
    starts: Mapping[str, Mapping[str, float]] | None = None,
    confidence: float = 0.95,
    reps: int | None = None,
    seed: int = 0,
) -> Table:
    """One row per finding: each arm's finished runs' values (per the finding's ``measure``), and
    :func:`verdict` (:func:`analysis.finding_measures.paired_verdict` for ``from_start``).

    Args:
        df: frame from :func:`analysis.load.load` with each finding's metric (runs of neither arm
            are ignored) and, for a ``to_target`` finding over tokens, ``tokens/generated_total``.
        findings: from :func:`read_findings`.
        finished: the run ids the verdicts may count (the report's finished runs); an arm's other
            runs are left out.
        unfinished: why each run of an arm that is not in ``finished`` is not (its state, e.g.
            "diverged at step 12 (loss)"); a run it does not name is :data:`NOT_READ`.
        logged: metric names the runs log, to suggest one for a metric that no run logs.
        starts: ``{run id: {eval metric: value}}``, each run's ``eval_start.json``
            (:func:`harness.layout.read_start_evals`), the start of ``from_start`` findings.
        confidence, reps, seed: as in :func:`verdict`.

    Returns:
        A :class:`analysis.tables.Table` whose caption is :func:`caption` and whose frame has the
        columns ``finding``, ``claim``, ``paper``, ``scaled``, ``metric``, ``window_lo``,
        ``window_hi``, ``off_policy_only``, ``direction``, ``baseline``, ``variant`` (the
        selectors as ``key=value`` text), then :func:`verdict`'s keys, then ``left_out`` (the
        arms' runs without a value and why, as text: "" when none) and ``note`` (what else limits
        the numbers: "" when nothing). When a finding's measure is not ``window``, also
        ``measure``, ``target`` (the level reached; NaN but for to_target), ``target_runs`` (the
        baseline runs it averages; 0 when stated), ``x`` and ``censored_baseline``,
        ``censored_variant`` (the arms' runs that never reached it). For ``from_start`` the
        ``baseline_*`` keys are the runs' starts, ``variant_*`` their ends and ``pooled_sd`` the SD
        of their differences.
    """
    finished = {str(r) for r in finished}
    unfinished = {str(k): str(v) for k, v in (unfinished or {}).items()}
    rows = []
    cache: dict[tuple, pd.DataFrame] = {}
    used: set[str] = set()
    options = {"confidence": confidence, "reps": reps, "seed": seed}
    for f in findings:
        row, counted = _finding_row(df, f, finished, unfinished, starts or {}, cache, logged, options)
        rows.append(row)
        used.update(counted)
    table = pd.DataFrame(rows)
    kinds = {f.measure for f in findings}
    if kinds <= {WINDOW}:
        table = table.drop(columns=list(_MEASURE_DEFAULTS), errors="ignore")
    drawn = sorted({int(n) for n in table.get("reps", []) if n})
    return Table(
        table,
        caption=caption(
            reps=drawn or [_default_reps(reps)],
            seed=seed,
            confidence=confidence,
            finished_runs=len(used),
            measures=kinds,
        ),
    )


#: The columns a findings frame adds when a finding's measure is not ``window``, with a window
#: finding's values.
_MEASURE_DEFAULTS = {
    "measure": WINDOW,
    "target": float("nan"),
    "target_runs": 0,
    "x": "",
    "censored_baseline": 0,
    "censored_variant": 0,
}


def _finding_row(
    df: pd.DataFrame,
    f: Finding,
    finished: Collection[str],
    unfinished: Mapping[str, str],
    starts: Mapping[str, Mapping[str, float]],
    cache: dict[tuple, pd.DataFrame],
    logged: Collection[str],
    options: Mapping[str, Any],
) -> tuple[dict[str, Any], set[str]]:
    """One finding's row of :func:`findings_table` and the runs it counted."""
    ids, left = _finished_ids(f, finished, unfinished)
    st = None
    if f.window is not None:
        key = (f.metric, f.window, f.off_policy_only)
        if key not in cache:
            cache[key] = window_stats(df, f.metric, f.window, off_policy_only=f.off_policy_only)
        st = cache[key]
    extra: dict[str, Any] = {**_MEASURE_DEFAULTS, "measure": f.measure}
    if f.measure == TO_TARGET:
        tv = finding_measures.to_target_values(df, f.metric, f.target, f.x, ids, st)
        left += tv.left
        out = verdict(tv.values["baseline"], tv.values["variant"], f.direction, **options)
        censoring = finding_measures.censoring_note(tv.censored, f.x, out["effect"], out["verdict"])
        note = "; ".join(t for t in (_note(tv.values["baseline"], tv.values["variant"], out), censoring) if t)
        extra.update(target=tv.target, target_runs=tv.target_runs, x=f.x)
        extra.update({f"censored_{a}": len(tv.censored[a]) for a in ("baseline", "variant")})
    elif f.measure == FROM_START:
        sv = finding_measures.from_start_values(st, starts, f.metric, f.window, ids["variant"])
        left += sv.left
        out = finding_measures.paired_verdict(sv.start, sv.end, f.direction, **options)
        note = _paired_note(out)
    else:
        arm, more = _arm_values(st, f, ids)
        left += more
        out = verdict(arm["baseline"], arm["variant"], f.direction, **options)
        note = _note(arm["baseline"], arm["variant"], out)
    window = f.window or (float("nan"), float("nan"))
    row = {
        "finding": f.id,
        "claim": f.claim,
        "paper": f.paper,
        "scaled": f.scaled,
        "metric": f.metric,
        "window_lo": window[0],
        "window_hi": window[1],
        "off_policy_only": f.off_policy_only,
        "direction": f.direction,
        "baseline": _selector_text(f.baseline) if f.measure != FROM_START else finding_measures.START,
        "variant": _selector_text(f.variant),
        **out,
        "left_out": _left_out_text(_in_arm_order(f, left), f.metric, _none_logged(df, f.metric), logged),
        "note": note,
        **extra,
    }
    left_ids = {r for _, r, _ in left}
    return row, {r for name in ids for r in ids[name] if r not in left_ids}


def _in_arm_order(f: Finding, left: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """``left`` (``(arm, run id, why)``) ordered as the arms list their runs, baseline first."""
    arms = ("variant",) if f.measure == FROM_START else ("baseline", "variant")
    pos = {(a, r): (k, i) for k, a in enumerate(arms) for i, r in enumerate(dict.fromkeys(f.arms.get(a, ())))}
    return sorted(left, key=lambda t: pos.get((t[0], t[1]), (len(arms), 0)))


def _finished_ids(
    f: Finding, finished: Collection[str], unfinished: Mapping[str, str]
) -> tuple[dict[str, list[str]], list[tuple[str, str, str]]]:
    """Each arm's finished runs, and the others ``(arm, run id, why)`` (a ``from_start`` finding's
    one arm is its variant's runs)."""
    names = ("variant",) if f.measure == FROM_START else ("baseline", "variant")
    ids: dict[str, list[str]] = {}
    left: list[tuple[str, str, str]] = []
    for name in names:
        given = list(dict.fromkeys(f.arms.get(name, ())))
        ids[name] = [r for r in given if r in finished]
        left += [(name, r, unfinished.get(r, NOT_READ)) for r in given if r not in finished]
    return ids, left


def _arm_values(
    st: pd.DataFrame, f: Finding, ids: Mapping[str, Sequence[str]]
) -> tuple[dict[str, np.ndarray], list[tuple[str, str, str]]]:
    """Each arm's values (its finished runs ``ids`` with a value in the window; ``st``:
    :func:`window_stats`) and the runs left out, ``(arm, run id, why)``."""
    arm: dict[str, np.ndarray] = {}
    left: list[tuple[str, str, str]] = []
    for name in ("baseline", "variant"):
        counted = [r for r in ids[name] if r in st.index and np.isfinite(st.at[r, "value"])]
        arm[name] = st["value"].reindex(counted).to_numpy(dtype=np.float64)
        left += [
            (name, r, finding_measures.why_no_value(st, r, f.metric, f.window))
            for r in ids[name]
            if r not in counted
        ]
    return arm, left


def _none_logged(df: pd.DataFrame, metric: str) -> bool:
    """Whether the frame has runs but no finite value of ``metric`` in any of them."""
    if len(df) == 0:
        return False
    return metric not in df.columns or not np.isfinite(df[metric].to_numpy(dtype=np.float64)).any()


def _left_out_text(
    left: Sequence[tuple[str, str, str]], metric: str, none_logged: bool, logged: Collection[str]
) -> str:
    """The arms' runs left out, grouped by arm and reason: "variant: `a`, `b` (diverged ...)";
    a metric that no run of the frame logs (``none_logged``) says so, with the closest logged names."""
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
    if none_logged and any(why.startswith("no finite") for *_, why in left):
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


def _paired_note(out: Mapping[str, Any]) -> str:
    """What limits a ``from_start`` verdict beyond its numbers: every run moved by the same amount."""
    if out["variant_n"] >= 2 and out["pooled_sd"] == 0:
        return (
            "every run's end minus start is the same (no run-to-run spread), so the interval is the "
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
    *,
    reps: Sequence[int],
    seed: int,
    confidence: float = 0.95,
    finished_runs: int | None = None,
    measures: Collection[str] = (),
) -> str:
    """What the findings table shows and how its numbers were made (``reps``: the resamples the
    findings' bootstraps used, one or several values; ``measures``: the findings' measures, each
    beside ``window`` explained by :func:`analysis.finding_measures.caption_text`)."""
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
        + finding_measures.caption_text(measures)
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
    if r.get("measure", WINDOW) != WINDOW:
        return finding_measures.metric_text(r)
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
        paired = r.get("measure") == FROM_START
        if text == NOT_RESOLVED and not math.isnan(r["seeds_80"]):
            text += f" ({_seeds(r['seeds_80'])} {'runs, paired,' if paired else 'seeds/arm'} for 80% power)"
        elif text == NOT_RESOLVED and r["effect"] == 0:
            text += " (the runs' mean difference is 0)" if paired else " (the arms' means are equal)"
        elif text == NOT_RESOLVED:
            text += " (no spread to size it by)"
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
