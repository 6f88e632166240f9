"""A progression table in the shape of DAPO's Table 1 (Yu et al. 2025, arXiv:2503.14476): rows of
runs, each adding one technique to the row above ("Naive GRPO; + Overlong Filtering; +
Clip-Higher; ..."), each compared with the row above on the runs' final scores.

Pure: :func:`progression_table` takes each run's final score (:func:`analysis.scores.final_scores`)
and each row's run ids (as ``grid.json`` records them from the grid file's ``report:
progression:`` section) and returns a frozen :class:`ProgressionTable`. A row's mean carries its
Student-t interval; its difference to the row above Welch's interval
(:func:`analysis.power.welch_interval`) and P(row > row above) the stratified-bootstrap interval
of the findings' verdicts (:func:`analysis.findings.verdict`, the same two-arm comparison).
:func:`sampling_lines` says what dynamic sampling cost the rows that use it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import stats
from analysis.findings import NOT_READ, verdict
from analysis.scores import score_rule
from analysis.tables import Table, fmt
from harness import layout

__all__ = ["ProgressionTable", "progression_caption", "progression_table", "sampling_lines"]


@dataclass(frozen=True, kw_only=True)
class ProgressionTable(Table):
    """:func:`progression_table`'s answer: the table (:class:`analysis.tables.Table`, its caption
    stating the metric, the final-score rule, the intervals and the seeds per row) and what limits it.

    Attributes:
        left_out: one line per row with runs it selects but does not count, naming each run and why.
        notes: what else limits the numbers (rows of one run, rows without spread), one line each.
        reps: bootstrap resamples behind the P(> row above) intervals (0 when none was drawn).
    """

    left_out: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    reps: int = 0


_COLUMNS = [
    "row",
    "runs",
    "mean",
    "mean_lo",
    "mean_hi",
    "diff",
    "diff_lo",
    "diff_hi",
    "p_above",
    "p_above_lo",
    "p_above_hi",
]


def progression_table(
    scores: pd.Series,
    rows: Sequence[tuple[str, Sequence[str]]],
    *,
    metric: str,
    finished: Collection[str],
    unfinished: Mapping[str, str] | None = None,
    confidence: float = 0.95,
    reps: int | None = None,
    seed: int = 0,
) -> ProgressionTable:
    """One row per progression row: its runs, the mean of their final ``metric`` with its interval,
    and its comparison with the row above.

    Per row, the runs counted are those of its run ids that finished (``finished``) and have a
    finite score. ``mean``: their mean with its Student-t interval (``mean ± t_{(1+c)/2, n-1}
    s/√n``; NaN bounds for one run). ``diff``: this row's mean - the row above's, with the Welch t
    interval; ``p_above``: P(a run of this row scores higher than a run of the row above),
    Mann-Whitney U / nm (Agarwal et al. 2021), with its percentile bootstrap interval over each
    row's runs (:func:`analysis.findings.verdict`). Both are NaN for the first row, and when this
    row or the row above has fewer than 2 runs (no spread to test against).

    Args:
        scores: final score per run id (:func:`analysis.scores.final_scores`).
        rows: ``(label, run ids)`` per row, in the table's order.
        metric: the score's metric, for the caption.
        finished: the run ids that may count.
        unfinished: why each run not in ``finished`` is not (its state); others are
            :data:`analysis.findings.NOT_READ`.
        confidence, reps, seed: the intervals' coverage; the bootstrap's resamples (default
            :func:`analysis.scores.bootstrap_reps` of the two rows' runs) and seed.

    Returns:
        A :class:`ProgressionTable`: ``row``, ``runs``, ``mean`` (``mean_lo``, ``mean_hi``),
        ``diff`` (``_lo``, ``_hi``), ``p_above`` (``_lo``, ``_hi``).
    """
    finished = {str(r) for r in finished}
    why = {str(k): str(v) for k, v in (unfinished or {}).items()}
    out, left_out, notes, drawn = [], [], [], set()
    above = None
    for label, ids in rows:
        ids = list(dict.fromkeys(str(r) for r in ids))
        counted = [r for r in ids if r in finished and np.isfinite(scores.get(r, np.nan))]
        left = [
            (r, why.get(r, NOT_READ) if r not in finished else f"no finite final {metric}")
            for r in ids
            if r not in counted
        ]
        if left:
            left_out.append(f"{label}: " + "; ".join(f"`{r}` ({w})" for r, w in left) + ".")
        values = scores.reindex(counted).to_numpy(dtype=np.float64)
        mean, lo, hi = stats.t_interval(values, confidence=confidence) if values.size else (np.nan,) * 3
        row = dict.fromkeys(_COLUMNS, np.nan) | {"row": label, "runs": len(counted)}
        row |= {"mean": float(mean), "mean_lo": float(lo), "mean_hi": float(hi)}
        if above is not None and min(above.size, values.size) >= 2:
            v = verdict(above, values, "higher", confidence=confidence, reps=reps, seed=seed)
            row |= {k: v[f"effect{s}"] for k, s in (("diff", ""), ("diff_lo", "_lo"), ("diff_hi", "_hi"))}
            row |= {
                k: v[f"p_improve{s}"]
                for k, s in (("p_above", ""), ("p_above_lo", "_lo"), ("p_above_hi", "_hi"))
            }
            drawn.add(int(v["reps"]))
            if v["pooled_sd"] == 0:
                notes.append(
                    f"{label}: every run of it and of the row above has the same final {metric} (no run-to-run "
                    "spread), so the difference's interval is the difference itself: no test stands behind it."
                )
        elif above is not None:
            notes.append(
                f"{label}: no comparison with the row above ({above.size} and {values.size} run(s)): a row with "
                "fewer than 2 runs has no spread to test against; run at least 2 seeds per row."
            )
        out.append(row)
        above = values
    frame = pd.DataFrame(out, columns=_COLUMNS).astype({"runs": int})
    reps_used = max(drawn, default=0)
    return ProgressionTable(
        frame,
        caption=progression_caption(
            metric, frame["runs"].tolist(), reps=sorted(drawn), seed=seed, confidence=confidence
        ),
        display={
            "row": "",
            "runs": "runs (seeds)",
            "mean": f"final {metric} [{100 * confidence:g}% CI]",
            "diff": f"difference to row above [{100 * confidence:g}% Welch CI]",
            "p_above": f"P(> row above) [{100 * confidence:g}% CI]",
        },
        left_out=tuple(left_out),
        notes=tuple(notes),
        reps=reps_used,
    )


def progression_caption(
    metric: str, runs: Sequence[int], *, reps: Sequence[int] = (), seed: int = 0, confidence: float = 0.95
) -> str:
    """What the progression table shows and how its numbers were made (``runs``: the runs counted
    per row, in order; ``reps``: the resamples of its bootstraps)."""
    pct = f"{100 * confidence:g}%"
    seeds = f"{runs[0]} per row" if len(set(runs)) == 1 else f"{', '.join(map(str, runs))}, row by row"
    resamples = f"{reps[0]:,}" if len(reps) == 1 else f"{min(reps):,}-{max(reps):,}" if reps else "no"
    return (
        "Rows as the grid file's report: progression: lists them, each adding one technique to the row above. "
        f"Per row, its finished runs (seeds: {seeds}); each run's final {metric}: {score_rule(metric)}. Mean over runs with its "
        f"{pct} Student-t interval (df = runs - 1). Difference: the row's mean minus the row above's, with its {pct} "
        "Welch t interval (unequal variances, Welch-Satterthwaite df). P(> row above): the probability that a "
        "run of the row has the higher final value than a run of the row above (Mann-Whitney U / nm; Agarwal "
        f"et al. 2021), with its {pct} percentile bootstrap interval ({resamples} resamples of each row's runs, "
        f"seed {seed}). – where a row or the row above has fewer than 2 runs. Runs a row selects that did not "
        "finish, or have no final value, are left out and listed under the table."
    )


def sampling_lines(df: pd.DataFrame, rows: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    """What dynamic sampling cost each row whose runs recorded it (``dynamic_sampling/*``): per
    step, the groups drawn and kept, the generation batches and completions generated (means over
    the row's runs' steps), and the steps that ran out of generation batches.

    Args:
        df: frame from :func:`analysis.load.load` (rows of any runs).
        rows: ``(label, run ids)`` per row (the runs counted).

    Returns:
        One line per row with dynamic sampling; none for rows (or frames) without it.
    """
    if layout.DS_GROUPS_DRAWN not in df.columns:
        return []
    rid = df[layout.RUN_ID].astype(str)
    out = []
    for label, ids in rows:
        part = df[rid.isin(set(ids)).to_numpy()]
        drawn = part[layout.DS_GROUPS_DRAWN].to_numpy(dtype=np.float64)
        if not np.isfinite(drawn).any():
            continue

        def mean(column: str, part: pd.DataFrame = part) -> str:
            v = part[column].to_numpy(dtype=np.float64) if column in part.columns else np.array([np.nan])
            return fmt(float(np.nanmean(v))) if np.isfinite(v).any() else "–"

        short = (
            part[layout.DS_SHORT].to_numpy(dtype=np.float64)
            if layout.DS_SHORT in part.columns
            else drawn * np.nan
        )
        steps = int(np.isfinite(drawn).sum())
        out.append(
            f"{label}: dynamic sampling drew {mean(layout.DS_GROUPS_DRAWN)} groups per step to keep "
            f"{mean(layout.DS_GROUPS_KEPT)} ({mean(layout.DS_GEN_BATCHES)} generation batches, "
            f"{mean(layout.DS_COMPLETIONS_GENERATED)} completions generated per step; means over its runs' {steps} steps); "
            f"{int(np.nansum(short == 1.0))} of those steps ran out of generation batches (dynamic_sampling/short)."
        )
    return out
