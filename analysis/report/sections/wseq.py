"""The sequence importance ratio (``w_seq.png``): per variant and panel, the median over runs of
each run's p05-p95 (band) and p50 of ``w_seq`` over off-policy steps, on a log axis fitted to the
values drawn; ``wseq_split`` draws each value of a column (a pass over a generation batch) apart."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import wseq
from analysis.report.data import Counted
from analysis.report.page import Page, Section
from analysis.settings.report import ReportSettings
from analysis.settings.report_values import ReportError
from harness import layout


@dataclass(frozen=True)
class WseqNumbers:
    """The w_seq figure's numbers.

    Attributes:
        bands: :func:`analysis.wseq.wseq_bands` of the counted runs' off-policy steps per variant
            and panel column (split by ``split``).
        split: the column the bands are split by (None: none, or no counted run recorded it).
        off_policy_how: how off-policy steps were told (:func:`analysis.offpolicy.off_policy_rows`).
        notes: why the figure is not split as asked.
    """

    bands: pd.DataFrame
    split: str | None = None
    off_policy_how: str = ""
    notes: tuple[str, ...] = ()


def compute(c: Counted) -> WseqNumbers:
    """The w_seq bands of the counted runs.

    Raises:
        ReportError: a ``wseq_split`` typed on the command line that no counted run recorded,
            naming the columns that would split it (from a grid's section it is a note instead).
    """
    s, work = c.settings, c.work
    notes = _check_split(work, s.wseq_split, strict="wseq_split" in c.given)
    split = s.wseq_split if s.wseq_split in work.columns and work[s.wseq_split].notna().any() else None
    by = [b for b in (c.facets.hue, c.facets.col) if b]
    bands = wseq.wseq_bands(
        work, by=by, x=s.x, rows=c.off, smoothing=s.smoothing, split=split, index=c.frame_index(by)
    )
    return WseqNumbers(bands, split, c.off_policy_how, tuple(notes))


def _check_split(work: pd.DataFrame, split: str | None, *, strict: bool) -> list[str]:
    """The note (or, ``strict``: raise :class:`ReportError` naming the choices) on a w_seq split by
    a column that no counted run recorded; none when a run recorded it."""
    if not split or (split in work.columns and work[split].notna().any()):
        return []
    if strict:
        choices = [
            c for c in (layout.REUSE_INDEX, layout.POLICY_LAG) if c in work.columns and work[c].notna().any()
        ]
        raise ReportError(
            f"--wseq-split {split!r}: no counted run recorded it; "
            + (f"split by {' or '.join(choices)}" if choices else "these runs recorded no reuse index")
        )
    return [f"Note: no run recorded `{split}`, so the w_seq figure is not split by it."]


def off_policy_text(how: str) -> str:
    """How the off-policy steps drawn were told, for captions (``how``:
    :func:`analysis.offpolicy.off_policy_rows`' answer)."""
    return {
        "recorded": "steps whose old log-probs came from an earlier policy, as recorded by the run",
        "inferred": "steps where some completion's w_seq differs from 1; these runs predate the recorded flag",
        "mixed": "recorded by the run, or for older runs inferred from w_seq differing from 1",
        "unknown": "every step: these runs record neither the flag nor w_seq",
    }.get(how, "steps whose old log-probs came from an earlier policy")


def render(numbers: WseqNumbers, page: Page) -> list[str]:
    """The w_seq figure."""
    bands, facets = numbers.bands, page.facets
    fig, _ = wseq.wseq_figure(bands, facets, x=page.settings.x, split=numbers.split)
    skipped = [cv for cv, _ in facets.on_policy if cv is not None]
    infinite = (
        {q: int(np.isinf(bands[q].to_numpy(dtype=float)).sum()) for q in ("p05", "p95")} if len(bands) else {}
    )
    return page.figure(
        fig,
        "w_seq",
        alt="w_seq",
        title="Sequence importance ratio w_seq",
        caption="How far each variant's sequence-level ratio w_seq = pi_theta / pi_old (product over the completion's "
        "tokens) drifts from 1, over off-policy steps only ("
        + off_policy_text(numbers.off_policy_how)
        + "): per step, the median "
        "over runs of each run's p05-p95 of w_seq over its completions (band) and p50 (line), each run smoothed "
        "on the log scale as the curves above; log axis fitted to the values drawn."
        + (f" Left out, on-policy throughout (w_seq ≡ 1): {'; '.join(map(str, skipped))}." if skipped else "")
        + (
            f" At {infinite['p95']} point(s) the p95 is beyond float range (w_seq = inf) and at {infinite['p05']} "
            "the p05 underflows to 0: drawn at the top or bottom edge."
            if sum(infinite.values())
            else ""
        ),
    )


def columns(settings: ReportSettings) -> Sequence[str]:
    """The w_seq quantiles and the split's column."""
    return [*wseq.WSEQ_Q, *([settings.wseq_split] if settings.wseq_split else [])]


SECTION = Section("wseq", compute, render, columns=columns, notes=lambda n: n.notes)
