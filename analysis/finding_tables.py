"""The findings tables as text: the report's (:func:`display_table`), what ``grpo-harness
findings`` prints (:func:`compact_table`), the notes under them (:func:`note_lines`), the caption
(:func:`caption`, with :func:`holm_text` on the family-wise columns), and two results folders'
verdicts side by side (:func:`confirmation_table`, ``grpo-harness findings A --confirm B``).

Each takes the frame of :func:`analysis.findings.findings_table`; nothing here computes a number
of the runs.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis import finding_dose, finding_measures
from analysis.finding_measures import FROM_START, NOT_RESOLVED, OPPOSITE, REPRODUCED, WINDOW
from analysis.tables import Table, fmt

__all__ = [
    "COMPACT_COLUMNS",
    "HOLM_COLUMNS",
    "caption",
    "compact_table",
    "confirmation_table",
    "display_table",
    "holm_text",
    "note_lines",
    "replication",
    "verdict_text",
]


#: The columns of :func:`compact_table` before the Holm columns.
COMPACT_COLUMNS = ["claim", "paper", "metric", "effect [95% CI]", "P(>) [CI]", "verdict"]
#: The columns both tables add after the unadjusted verdict (:func:`holm_text` says what they are).
HOLM_COLUMNS = ["p (one-sided)", "Holm p", "Holm verdict"]


def caption(
    *,
    reps: Sequence[int],
    seed: int,
    confidence: float = 0.95,
    finished_runs: int | None = None,
    measures: Collection[str] = (),
    family: int | None = None,
    dose: bool = False,
) -> str:
    """What the findings table shows and how its numbers were made (``reps``: the resamples the
    findings' bootstraps used, one or several values; ``measures``: the findings' measures, each
    beside ``window`` explained by :func:`analysis.finding_measures.caption_text`; ``family``: the
    findings with a p-value, Holm's m; ``dose``: whether a dose-response finding is among them,
    explained by :func:`analysis.finding_dose.caption_text`)."""
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
        + finding_dose.caption_text(dose)
        + holm_text(family)
    )


def holm_text(family: int | None) -> str:
    """The caption's sentences on the p-values and the Holm columns (``family``: the findings with
    a p-value, None when not known)."""
    m = "" if family is None else f" (here m = {family})"
    return (
        " The columns after the verdict control the family-wise error over the grid's findings; the verdict "
        "and the columns before it are each finding's own, unadjusted. p (one-sided): the p-value of the side "
        "the paper finds, from the t statistic the effect's interval uses (Welch's for two arms, to-target "
        "findings too; the one-sample t of the runs' differences for from-start findings; the slope's t for "
        "dose-response findings), so the unadjusted verdict is reproduced exactly when it is below 0.025 (the "
        "interval is two-sided). Holm p: Holm's (1979) step-down adjustment over the m findings of this grid "
        f"that have a p-value{m}: the i-th smallest p times m - i + 1, made non-decreasing and capped at 1. "
        "Holm verdict: reproduced when the Holm p is below 0.05 and the unadjusted verdict is reproduced (the "
        "adjustment only withdraws verdicts), which holds the chance that any reproduced verdict of the grid "
        "is a false positive at 5% or less; not reproduced otherwise; – without a p-value (fewer than 2 runs in "
        "an arm, or no spread to test against)."
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
    if isinstance(r.get("dose_key"), str) and r["dose_key"]:
        return finding_dose.metric_text(r)
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
            **_holm_cells(r),
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
    *HOLM_COLUMNS,
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
    """The findings of ``table`` (:func:`analysis.findings.findings_table`) in text columns, what
    ``grpo-harness findings`` prints (and the README's findings table is pasted from): claim (after
    the finding's id) | paper (without ``scaled``, which the report's table keeps) | metric | effect
    [95% CI] | P(>) [CI] | verdict | p (one-sided) | Holm p | Holm verdict; a "not resolved" verdict
    says how many seeds per arm would resolve it (or why no number can)."""
    rows = []
    for r in table.frame.to_dict("records"):
        rows.append(
            {
                "claim": f"{r['finding']}: {r['claim']}",
                "paper": r["paper"],
                "metric": _metric_text(r),
                "effect [95% CI]": _shown_interval(r, "effect"),
                "P(>) [CI]": _shown_interval(r, "p_improve"),
                "verdict": verdict_text(r),
                **_holm_cells(r),
            }
        )
    return pd.DataFrame(rows, columns=[*COMPACT_COLUMNS, *HOLM_COLUMNS])


def _holm_cells(r: Mapping[str, Any]) -> dict[str, str]:
    """A findings row's p-value, its Holm-adjusted p and the Holm verdict, as text ("–" where the
    row has none)."""
    return {
        "p (one-sided)": fmt(r.get("p_value")),
        "Holm p": fmt(r.get("p_holm")),
        "Holm verdict": r.get("holm_verdict") or "–",
    }


def verdict_text(r: Mapping[str, Any]) -> str:
    """A findings row's verdict as ``grpo-harness findings`` prints it: a "not resolved" verdict
    with the seeds per arm (runs, paired; seeds per value) that would resolve it, or why no number
    can."""
    text = r["verdict"]
    paired = r.get("measure") == FROM_START
    dose = isinstance(r.get("dose_key"), str) and bool(r["dose_key"])
    unit = "runs, paired," if paired else ("seeds/value" if dose else "seeds/arm")
    if text == NOT_RESOLVED and not math.isnan(r["seeds_80"]):
        text += f" ({_seeds(r['seeds_80'])} {unit} for 80% power)"
    elif text == NOT_RESOLVED and r["effect"] == 0:
        text += (
            " (the runs' mean difference is 0)"
            if paired
            else (" (the slope is 0)" if dose else " (the arms' means are equal)")
        )
    elif text == NOT_RESOLVED:
        text += " (no spread to size it by)"
    return text


def replication(a: str, b: str) -> str:
    """What two unadjusted verdicts on one finding say together: ``replicated`` when both are
    reproduced, ``replicated (opposite)`` when both are opposite, ``contradicted`` when one is
    reproduced and the other opposite, ``not replicated`` when only one resolves, and ``neither
    resolved`` otherwise (not resolved, or not enough runs, in both)."""
    resolved = {REPRODUCED, OPPOSITE}
    if a == b == REPRODUCED:
        return "replicated"
    if a == b == OPPOSITE:
        return "replicated (opposite)"
    if {a, b} == resolved:
        return "contradicted"
    if a in resolved or b in resolved:
        return "not replicated"
    return "neither resolved"


def confirmation_table(first: Table, second: Table, labels: Sequence[str]) -> pd.DataFrame:
    """Two results folders' verdicts on the same findings side by side (``grpo-harness findings A
    --confirm B``): claim | paper | metric | per folder (``labels``) its effect [95% CI] and its
    verdict | replicated (:func:`replication` of the two unadjusted verdicts). The findings are
    ``first``'s, in its order; ``second`` must hold each of them (the caller checks)."""
    a_label, b_label = labels
    other = {r["finding"]: r for r in second.frame.to_dict("records")}
    rows = []
    for r in first.frame.to_dict("records"):
        s = other[r["finding"]]
        rows.append(
            {
                "claim": f"{r['finding']}: {r['claim']}",
                "paper": r["paper"],
                "metric": _metric_text(r),
                f"{a_label}: effect [95% CI]": _shown_interval(r, "effect"),
                f"{a_label}: verdict": verdict_text(r),
                f"{b_label}: effect [95% CI]": _shown_interval(s, "effect"),
                f"{b_label}: verdict": verdict_text(s),
                "replicated": replication(r["verdict"], s["verdict"]),
            }
        )
    columns = ["claim", "paper", "metric"]
    columns += [f"{x}: {c}" for x in (a_label, b_label) for c in ("effect [95% CI]", "verdict")]
    return pd.DataFrame(rows, columns=[*columns, "replicated"])
