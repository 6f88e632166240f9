"""The report's tables (markdown, CSV and LaTeX): timing (grouped by how many runs shared the
machine), final performance with the smallest difference its seeds can resolve under it, the
learning check, the time to a target, and the variants with the settings behind each label."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis import learning_check, states, time_to_target, timing
from analysis.panels import Facets
from analysis.power import min_detectable_effect, pooled_sd
from analysis.report.data import AT_ONCE, PANEL, PANEL_ROW, Counted
from analysis.report.page import Page, Section, heading
from analysis.report.sections.final import FinalNumbers, mark_unfinished
from analysis.scores import Resolvable
from analysis.settings.report import ReportSettings
from analysis.tables import Table, fmt
from harness import layout


@dataclass(frozen=True)
class TableNumbers:
    """The tables' numbers beside the final-performance table
    (:class:`analysis.report.sections.final.FinalNumbers`).

    Attributes:
        timing: :func:`analysis.timing.timing_table`, split by runs at once when recorded.
        check, summary: :func:`analysis.learning_check.learning_check` (one row per run) and
            :func:`analysis.learning_check.learning_summary` (per variant).
        ttt: :func:`analysis.time_to_target.time_to_target_table` (None without a target).
    """

    timing: timing.TimingTable
    check: Table
    summary: Table
    ttt: Table | None = None


def compute(c: Counted) -> TableNumbers:
    """The timing table, the learning check and the time to target of the counted runs, with
    display names (and unfinished runs counted per row with ``include_unfinished``)."""
    s, work, f, by = c.settings, c.work, c.facets, c.by
    timing_by = [*by, AT_ONCE] if c.at_once else list(by)
    names = c.display_names()
    table = timing.timing_table(work, by=timing_by, baseline=f.baseline, same=[AT_ONCE]).with_headers(names)
    check = learning_check.learning_check(work, s.metric, by=by, signal=c.flags)
    summary = learning_check.learning_summary(check, by=by).with_headers(names)
    if s.include_unfinished:
        table = mark_unfinished(table, c.runs, timing_by)
        summary = mark_unfinished(summary, c.runs, by)
        states_ = check.frame.copy()
        states_.insert(1, "state", states_[layout.RUN_ID].map(c.runs["state"]))
        check = check.with_frame(states_)
    ttt = None
    if s.target is not None:
        ttt = time_to_target.time_to_target_table(
            work, s.target, metric=s.metric, by=by, baseline=f.baseline, smoothing=s.smoothing
        ).with_headers(names)
    return TableNumbers(table, check, summary, ttt)


def render(numbers: TableNumbers, page: Page) -> list[str]:
    """The tables, written as markdown, CSV and LaTeX and shown in the index."""
    s, data = page.settings, page.data
    final: FinalNumbers = data.numbers("final")
    frame = numbers.timing.frame
    caption = timing_caption(page.facets.baseline, AT_ONCE in frame.columns) + load_caption(numbers.timing)
    if "speedup" in frame.columns and (frame["runs"] == 1).any():
        caption += (
            " Rows with runs = 1 rest on a single run: their speedup is one measurement with no spread "
            "(run more seeds before quoting it)."
        )
    lines = heading("Timing", caption)
    lines += [
        page.table(numbers.timing, "timing", caption=caption),
        "Files: timing.md, timing.csv, timing.tex",
        "",
    ]
    power = power_lines(final.resolvable, final.scores, page.facets, s.metric)
    lines += heading("Final performance", final.table.caption)
    lines += [page.table(final.table, "final_performance", notes=power), *(f"{line}\n" for line in power)]
    lines += ["Files: final_performance.md/.csv/.tex", ""]
    summary = page.table(numbers.summary, "learning_check", extra_md={"Per run": numbers.check})
    numbers.check.frame.to_csv(page.out / "learning_check_runs.csv", index=False)
    lines += heading("Learning check", "Did each variant learn at all? " + numbers.summary.caption)
    lines += [summary, "Files: learning_check.md/.csv/.tex, learning_check_runs.csv", ""]
    if numbers.ttt is not None:
        ttt = page.table(numbers.ttt, "time_to_target")
        lines += heading(
            f"Time to {s.metric} >= {s.target:g}",
            "Compares how fast each variant gets there. " + numbers.ttt.caption,
        )
        lines += [ttt, "Files: time_to_target.md/.csv/.tex", ""]
    if data.variants is not None and len(data.variants):
        display = {
            PANEL: "panel",
            PANEL_ROW: "panel row",
            "finished": "runs finished",
            "other": "runs not finished",
        }
        v = Table(data.variants, display=display)
        markdown = page.table(
            v, "variants", caption="Each label of the figures and tables with the settings behind it."
        )
        lines += heading(
            "Variants", "The labels of the figures and tables with the full settings behind them."
        )
        lines += [markdown, ""]
    return lines


def power_lines(
    resolvable: Resolvable | None, scores: pd.DataFrame | None, facets: Facets, metric: str
) -> list[str]:
    """The lines under the final-performance table, one per panel (or one overall): which
    differences of final score the runs' seeds cannot resolve (``resolvable``, from
    :func:`analysis.scores.resolvable_differences`, whose power and level it states; ``scores``:
    the runs' final scores with their labels and ``state``, to name the variants with one run and
    the unfinished runs counted)."""
    if resolvable is None or resolvable.frame.empty:
        return []
    power, alpha = resolvable.power, resolvable.alpha
    panels = [c for c in (facets.col, facets.row) if c]
    out = []
    for r in resolvable.frame.to_dict("records"):
        where = ", ".join(str(r[c]) for c in panels)
        head = f"Panel {where}: with" if panels else "With"
        lo, hi = int(r["n_min"]), int(r["n_max"])
        n = f"{lo}" if lo == hi else f"{lo}-{hi}"
        seeds = f"{n} seed{'s' if hi != 1 else ''} per variant"
        part = _panel_scores(scores, r, panels)
        unfinished = _unfinished_text(part)
        if lo < 2 or not np.isfinite(r["resolvable"]):
            among = _among_the_others(facets.hue, part, metric, power, alpha)
            if among:
                out.append(f"{head} {seeds}, {among}{unfinished}")
                continue
            out.append(
                f"{head} {seeds}, no difference in final {metric} can be resolved: a variant with one run has no "
                f"spread to test against (run at least 2 seeds).{unfinished}"
            )
            continue
        if r["pooled_sd"] == 0:
            out.append(
                f"{head} {seeds}, final {metric} does not vary within any variant (pooled SD 0), so a t test "
                f"gives no resolution limit.{unfinished}"
            )
            continue
        at = f" (at the smallest, {lo})" if lo != hi else ""
        out.append(
            f"{head} {seeds}, differences in final {metric} smaller than {fmt(r['resolvable'])} cannot be "
            f"resolved{at} ({100 * power:g}% power, two-sided {100 * alpha:g}% t test, pooled SD "
            f"{fmt(r['pooled_sd'])} over the variants' final scores).{unfinished}"
        )
    return out


def _panel_scores(
    sc: pd.DataFrame | None, r: Mapping[str, Any], panels: Sequence[str]
) -> pd.DataFrame | None:
    """The rows of the final scores ``sc`` in the panel of ``r`` (a row of the resolvable
    differences); None without scores."""
    if sc is None or sc.empty or not all(c in sc.columns for c in panels):
        return None
    mask = np.ones(len(sc), dtype=bool)
    for c in panels:
        mask &= (sc[c].astype(str) == str(r[c])).to_numpy()
    return sc[mask]


def _unfinished_text(part: pd.DataFrame | None) -> str:
    """A sentence on the unfinished runs a panel's final scores count (``--include-unfinished``)."""
    if part is None or "state" not in part.columns:
        return ""
    k = int((part["state"].astype(str) != states.DONE).sum())
    if not k:
        return ""
    return (
        f" The seeds count {k} unfinished run(s) (--include-unfinished), each scored where it stopped; "
        "finished runs alone may resolve less."
    )


def _among_the_others(
    hue: str | None, part: pd.DataFrame | None, metric: str, power: float, alpha: float
) -> str:
    """For a panel where some variants have one run but at least two have more: which variants
    no difference can involve, and what the others' seeds resolve among themselves ("" otherwise)."""
    if part is None or not hue or hue not in part.columns:
        return ""
    sizes = part.groupby(hue, observed=True, sort=False)["score"].size()
    multi, single = sizes[sizes >= 2], sizes[sizes < 2]
    if len(multi) < 2 or single.empty:
        return ""
    groups = [part.loc[part[hue] == v, "score"].to_numpy(dtype=np.float64) for v in multi.index]
    sd = pooled_sd(*groups)
    lo, hi = int(multi.min()), int(multi.max())
    n = f"{lo}" if lo == hi else f"{lo}-{hi}"
    head = (
        f"no difference involving {', '.join(map(str, single.index))} can be resolved (one run: no spread to "
        f"test against; run at least 2 seeds); among the other {len(multi)} variants ({n} seeds each), "
    )
    if sd == 0:
        return (
            head
            + f"final {metric} does not vary within any variant (pooled SD 0), so a t test gives no limit."
        )
    x = min_detectable_effect(lo, sd, power, alpha)
    return head + (
        f"differences in final {metric} smaller than {fmt(x)} cannot be resolved ({100 * power:g}% power, two-sided "
        f"{100 * alpha:g}% t test, pooled SD {fmt(sd)} over their final scores)."
    )


def timing_caption(baseline: str | None, at_once: bool) -> str:
    """What the timing table compares: time per step and throughput, the speedup's definition, and
    how runs that shared the machine are kept apart."""
    return (
        "Compares cost per variant: wall-clock seconds per optimizer step including generation "
        "(time/step_s; mean per step and total per run), median TRL step_time (s), generated and trained "
        "tokens per second, peak memory (MB, max over runs); means over runs"
        + (
            f"; speedup = {baseline} time per step / variant time per step in the same panel"
            if baseline
            else ""
        )
        + (
            f". '{AT_ONCE}': how many harness runs shared the run's CPUs or GPU while it trained (mean over its "
            "steps, rounded; other processes on the machine are not counted here); runs are only compared "
            "with runs executed alike, so a run that happened to run alone "
            "does not look faster."
            if at_once
            else ". Runs that shared the machine with other runs are slower per step: compare timings of runs "
            "executed alike (e.g. `executor.max_parallel: 1`, or one GPU per run)."
        )
    )


def load_caption(timing_table: timing.TimingTable) -> str:
    """What the timing table's speedup is computed from, and which rows it leaves out for load
    (:func:`analysis.timing.timing_table`'s :class:`analysis.timing.TimingTable`)."""
    measure = timing_table.measure
    if "speedup" not in timing_table.frame.columns:
        return ""
    name = timing.MEASURE_NAMES[measure]
    if measure == layout.STEP_WALL_S:
        text = (
            " These runs recorded no CPU or GPU time (results older than those columns): the speedup is "
            "from wall time, which other work on the machine inflates; compare timings from a quiet machine."
        )
    else:
        what = "the run's process" if measure == layout.STEP_CPU_S else "the GPU"
        text = (
            " 'CPU s/step': CPU seconds of the run's process per step (every thread); 'steps loaded': the "
            "share of its steps measured while other work used more cores than the harness's runs left free."
            f" The speedup is computed from {name} ({what} per step), which other work on the machine "
            "inflates far less than wall time (benchmarks/load.py)"
        )
        text += (
            ", over the steps measured while no other work ran beyond the cores the harness's runs "
            f"left free (machine/other_cpus; margin {timing.LOAD_MARGIN_CPUS:g} cores)."
            if timing_table.load_known
            else "; these runs recorded no machine load, so no step is left out."
        )
    left = timing_table.left_out
    if left:
        rows = "; ".join(f"{label} ({share:.0%} of its steps loaded)" for label, share in left)
        text += (
            f" Left out of the speedup, because fewer than {timing.MIN_QUIET_SHARE:.0%} of their steps ran "
            f"on a quiet machine (or their baseline's did not): {rows}."
        )
    return text


def columns(settings: ReportSettings) -> Sequence[str]:
    """The timing table's columns beside wall time: CPU and GPU time, the machine's load, TRL's
    step time, trained tokens and peak memory."""
    return [
        layout.STEP_CPU_S,
        layout.STEP_GPU_S,
        layout.OTHER_CPUS,
        layout.CPUS,
        layout.RUN_THREADS,
        "step_time",
        layout.TOKENS_TRAINED,
        layout.PEAK_MEMORY_MB,
    ]


SECTION = Section("tables", compute, render, columns=columns)
