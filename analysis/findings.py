"""Verdicts on a grid's findings: does each paper's claim hold in these runs?

A grid file's ``findings:`` section (:mod:`analysis.settings.findings`) states, per finding, a paper's
claim, the metric that tests it, a window of each run, the direction the paper finds and two arms
of runs (baseline and variant); ``grid.json`` records each arm's run ids. Here, pure functions:

1. :func:`window_values`: one number per run, the nan-mean of the metric over the window (a
   finding's ``measure`` may instead be ``to_target`` or ``from_start``: the steps or tokens to a
   target, or each run's end against its own start; :mod:`analysis.finding_measures`);
2. :func:`verdict`: the arms' values in, the effect (variant mean - baseline mean) with its Welch
   t interval, the probability of improvement with its stratified-bootstrap interval, and the
   verdict (reproduced / opposite / not resolved, with the seeds per arm that would resolve the
   observed effect at 80% power);
3. :func:`findings_table`: a row per finding (numbers, for CSV), with each finding's one-sided
   p-value in the paper's direction and Holm's adjustment over the grid's findings; its texts,
   :func:`display_table` (the report's markdown and LaTeX) and :func:`compact_table` (``grpo-harness
   findings``), are :mod:`analysis.finding_tables`'.

A dose-response finding (one setting at several values) is judged by the slope of the runs' window
means on the value (:mod:`analysis.finding_dose`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analysis import finding_dose, finding_measures, stats
from analysis.aggregate import factorize_runs
from analysis.finding_measures import (
    DIRECTIONS,
    FROM_START,
    NOT_RESOLVED,
    REPRODUCED,
    TO_TARGET,
    WINDOW,
)
from analysis.finding_tables import caption, compact_table, display_table, note_lines
from analysis.power import holm, pooled_sd, seeds_for_power, welch_interval, welch_p
from analysis.scores import REPORT_REPS, bootstrap_reps
from analysis.tables import Table
from harness import layout

__all__ = [
    "DIRECTIONS",
    "Finding",
    "caption",
    "compact_table",
    "display_table",
    "findings_table",
    "holm_verdicts",
    "note_lines",
    "read_findings",
    "verdict",
    "window_stats",
    "window_values",
]

#: Why an arm's run is left out when nothing else says: it is not among the runs read.
NOT_READ = "not among the runs read (not in grid.json's run_ids, or not given to this report)"
#: The family-wise level of the Holm verdict.
HOLM_ALPHA = 0.05


@dataclass(frozen=True)
class Finding:
    """One finding as ``grid.json`` records it (:func:`analysis.settings.findings.record`).

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
        dose: a dose-response finding's ``{"key": dotted key, "values": [numbers], "scale":
            "linear" | "log"}``; None otherwise. Its ``arms`` are then ``{level label: run ids}``
            (:func:`analysis.finding_dose.level_label`), one per value.
        select: a dose-response finding's shared selector (the grid file's ``arms``), for display.
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
    dose: Mapping[str, Any] | None = None
    select: Mapping[str, Any] = field(default_factory=dict)

    @property
    def arm_names(self) -> tuple[str, ...]:
        """The arms whose runs count: baseline and variant; the variant alone for ``from_start``;
        each value's level for a dose-response finding."""
        if self.dose is not None:
            return tuple(finding_dose.level_label(v) for v in self.dose["values"])
        return ("variant",) if self.measure == FROM_START else ("baseline", "variant")


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
        dose = f.get("dose")
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
                arms={a: tuple(arms[a]) for a in (arms if dose else ("baseline", "variant"))},
                scaled=f.get("scaled") or "",
                off_policy_only=f.get("off_policy_only", False),
                measure=f.get("measure", WINDOW),
                target=target if isinstance(target, str) or target is None else float(target),
                x=f.get("x", "step"),
                dose=None if dose is None else {"scale": "linear", **dose},
                select=dict(f.get("select") or {}),
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
    from_start, dose = f.get("measure") == FROM_START, "dose" in f
    bad += finding_measures.record_problems(f)
    bad += finding_dose.record_problems(f) if dose else []
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
    if not dose and not (
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
    shared = [] if dose else sorted(set(arms["baseline"]) & set(arms["variant"]))
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
        "seeds_80", "reps", "p_value"}``; intervals NaN with fewer than 2 values in an arm,
        ``seeds_80`` NaN unless the verdict is "not resolved" (``inf`` beyond a million seeds),
        ``reps`` the resamples of P(>)'s interval (0 without one), ``p_value`` the one-sided Welch
        p of ``direction`` (:func:`analysis.power.welch_p`; NaN without a test).

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
        "p_value": welch_p(v, b, direction),
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
        selectors as ``key=value`` text), then :func:`verdict`'s keys but ``p_value``, then ``left_out`` (the
        arms' runs without a value and why, as text: "" when none) and ``note`` (what else limits
        the numbers: "" when nothing). When a finding's measure is not ``window``, also
        ``measure``, ``target`` (the level reached; NaN but for to_target), ``target_runs`` (the
        baseline runs it averages; 0 when stated), ``x`` and ``censored_baseline``,
        ``censored_variant`` (the arms' runs that never reached it). For ``from_start`` the
        ``baseline_*`` keys are the runs' starts, ``variant_*`` their ends and ``pooled_sd`` the SD
        of their differences. When a finding is a dose-response one, also ``dose_key``,
        ``dose_values`` (text), ``dose_scale``, ``dose_runs`` and ``dose_levels`` (the runs and
        values fitted; :func:`analysis.finding_dose.dose_verdict` for its other keys). Last,
        ``p_value`` (one-sided, in the paper's direction), ``p_holm`` and ``holm_verdict``
        (:func:`holm_verdicts`, over these findings).
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
    has_dose = any(f.dose is not None for f in findings)
    if not has_dose:
        table = table.drop(columns=list(_DOSE_DEFAULTS), errors="ignore")
    table = holm_verdicts(table)
    drawn = sorted({int(n) for n in table.get("reps", []) if n})
    return Table(
        table,
        caption=caption(
            reps=drawn or [_default_reps(reps)],
            seed=seed,
            confidence=confidence,
            finished_runs=len(used),
            measures=kinds,
            family=int(np.isfinite(table["p_value"].to_numpy(dtype=np.float64)).sum()) if len(table) else 0,
            dose=has_dose,
        ),
    )


def holm_verdicts(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (a findings frame with ``p_value`` and ``verdict``) with its last two columns
    added: ``p_holm``, Holm's step-down adjustment of the findings' p-values
    (:func:`analysis.power.holm`; the findings without one are no member of the family), and
    ``holm_verdict``: ``reproduced`` when ``p_holm`` is below :data:`HOLM_ALPHA` and the unadjusted
    verdict is reproduced, ``not reproduced`` otherwise, "" without a p-value."""
    p = table["p_value"].to_numpy(dtype=np.float64) if "p_value" in table else np.full(len(table), np.nan)
    adjusted = holm(p)
    passed = (adjusted < HOLM_ALPHA) & (table["verdict"].to_numpy() == REPRODUCED) if len(table) else []
    holm_verdict = [
        "" if not np.isfinite(a) else (REPRODUCED if ok else f"not {REPRODUCED}")
        for a, ok in zip(adjusted, passed, strict=True)
    ]
    return table.assign(p_holm=adjusted, holm_verdict=holm_verdict)


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
#: The columns a findings frame adds when a finding is a dose-response one, with another's values.
_DOSE_DEFAULTS = {"dose_key": "", "dose_values": "", "dose_scale": "", "dose_runs": 0, "dose_levels": 0}


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
    out, more, note, extra = _measured(df, f, ids, st, starts, options)
    left += more
    window = f.window or (float("nan"), float("nan"))
    p_value = out.pop("p_value")
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
        "baseline": _baseline_text(f),
        "variant": _variant_text(f),
        **out,
        "left_out": _left_out_text(_in_arm_order(f, left), f.metric, _none_logged(df, f.metric), logged),
        "note": note,
        **extra,
        "p_value": p_value,
    }
    left_ids = {r for _, r, _ in left}
    return row, {r for name in ids for r in ids[name] if r not in left_ids}


def _baseline_text(f: Finding) -> str:
    """The raw table's ``baseline`` cell: the selector, ``start`` (from_start), or a dose-response
    finding's shared selector."""
    if f.dose is not None:
        return _selector_text(f.select)
    return _selector_text(f.baseline) if f.measure != FROM_START else finding_measures.START


def _variant_text(f: Finding) -> str:
    """The raw table's ``variant`` cell: the selector, or a dose-response finding's key and values
    (``epsilon_high in [0.2, 0.28]``)."""
    if f.dose is not None:
        key = str(f.dose["key"]).removeprefix("trainer.")
        return f"{key} in [{', '.join(_value_text(v) for v in f.dose['values'])}]"
    return _selector_text(f.variant)


def _measured(
    df: pd.DataFrame,
    f: Finding,
    ids: Mapping[str, Sequence[str]],
    st: pd.DataFrame | None,
    starts: Mapping[str, Mapping[str, float]],
    options: Mapping[str, Any],
) -> tuple[dict[str, Any], list[tuple[str, str, str]], str, dict[str, Any]]:
    """A finding's verdict per its measure (or its dose), the runs left out, the note and the
    measure's own columns."""
    extra: dict[str, Any] = {**_MEASURE_DEFAULTS, "measure": f.measure, **_DOSE_DEFAULTS}
    left: list[tuple[str, str, str]] = []
    if f.dose is not None:
        dv = finding_dose.dose_values(st, f.metric, f.window, f.dose["values"], ids)
        left += dv.left
        out = finding_dose.dose_verdict(
            dv.x, dv.y, f.direction, scale=f.dose["scale"], values=dv.values, **options
        )
        extra.update(
            dose_key=f.dose["key"],
            dose_values=finding_dose.values_text(f.dose["values"]),
            dose_scale=f.dose["scale"],
            dose_runs=out.pop("dose_runs"),
            dose_levels=out.pop("dose_levels"),
        )
        note = _dose_note(out)
    elif f.measure == TO_TARGET:
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
    return out, left, note, extra


def _in_arm_order(f: Finding, left: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """``left`` (``(arm, run id, why)``) ordered as the arms list their runs, baseline first."""
    arms = f.arm_names
    pos = {(a, r): (k, i) for k, a in enumerate(arms) for i, r in enumerate(dict.fromkeys(f.arms.get(a, ())))}
    return sorted(left, key=lambda t: pos.get((t[0], t[1]), (len(arms), 0)))


def _finished_ids(
    f: Finding, finished: Collection[str], unfinished: Mapping[str, str]
) -> tuple[dict[str, list[str]], list[tuple[str, str, str]]]:
    """Each arm's finished runs, and the others ``(arm, run id, why)`` (a ``from_start`` finding's
    one arm is its variant's runs; a dose-response finding's arms are its levels)."""
    names = f.arm_names
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


def _dose_note(out: Mapping[str, Any]) -> str:
    """What limits a dose-response verdict beyond its numbers: every run on the fitted line."""
    if out["pooled_sd"] == 0:
        return (
            "every run lies on the fitted line (no residual spread), so the interval is the slope itself: no "
            "test stands behind it; check that the metric varies with the seed"
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
