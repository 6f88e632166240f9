"""The table and findings sections of ``index.md``, and their captions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import finding_figures, states, style, tables, timing
from analysis import findings as findings_mod
from analysis.power import min_detectable_effect, pooled_sd
from analysis.report.data import AT_ONCE, PANEL, PANEL_ROW, ReportData
from analysis.scores import score_rule
from analysis.tables import Table, fmt
from harness import layout


def _section(lines: list[str], title: str, what: str) -> None:
    lines.extend([f"## {title}", "", what, ""])


def power_lines(data: ReportData) -> list[str]:
    """The line under the final-performance table, one per panel (or one overall): which
    differences of final score the runs' seeds cannot resolve (``data.resolvable``, from
    :func:`analysis.scores.resolvable_differences`, whose power and level it states)."""
    resolvable = data.resolvable
    if resolvable is None or resolvable.frame.empty:
        return []
    metric = data.settings.metric
    power, alpha = resolvable.power, resolvable.alpha
    facets = [c for c in (data.col, data.row) if c]
    out = []
    for r in resolvable.frame.to_dict("records"):
        where = ", ".join(str(r[c]) for c in facets)
        head = f"Panel {where}: with" if facets else "With"
        lo, hi = int(r["n_min"]), int(r["n_max"])
        n = f"{lo}" if lo == hi else f"{lo}-{hi}"
        seeds = f"{n} seed{'s' if hi != 1 else ''} per variant"
        part = _panel_scores(data, r, facets)
        unfinished = _unfinished_text(part)
        if lo < 2 or not np.isfinite(r["resolvable"]):
            among = _among_the_others(data, part, metric, power, alpha)
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


def _panel_scores(data: ReportData, r: Mapping[str, Any], facets: Sequence[str]) -> pd.DataFrame | None:
    """The rows of ``data.scores`` in the panel of ``r`` (a row of ``data.resolvable``); None
    without scores."""
    sc = data.scores
    if sc is None or sc.empty or not all(c in sc.columns for c in facets):
        return None
    mask = np.ones(len(sc), dtype=bool)
    for c in facets:
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
    data: ReportData, part: pd.DataFrame | None, metric: str, power: float, alpha: float
) -> str:
    """For a panel where some variants have one run but at least two have more: which variants
    no difference can involve, and what the others' seeds resolve among themselves ("" otherwise)."""
    if part is None or not data.hue or data.hue not in part.columns:
        return ""
    sizes = part.groupby(data.hue, observed=True, sort=False)["score"].size()
    multi, single = sizes[sizes >= 2], sizes[sizes < 2]
    if len(multi) < 2 or single.empty:
        return ""
    groups = [part.loc[part[data.hue] == v, "score"].to_numpy(dtype=np.float64) for v in multi.index]
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


def _findings_section(data: ReportData, out: Path) -> list[str]:
    """The findings table, near the top of the report."""
    if data.findings is None or data.findings.frame.empty:
        return []
    shown = findings_mod.display_table(data.findings)
    notes = findings_mod.note_lines(data.findings)
    tables.write_table(shown, out / "findings", raw=data.findings.frame, notes=notes)
    lines: list[str] = []
    _section(lines, "Findings", shown.caption)
    lines.extend(
        [tables.to_markdown(shown), *(f"{line}\n" for line in notes), "Files: findings.md/.csv/.tex", ""]
    )
    lines.extend(finding_figure_lines(data, out))
    return lines


def finding_figure_lines(data: ReportData, out: Path) -> list[str]:
    """Each finding's own figure (:func:`analysis.finding_figures.plot_finding`), saved as
    ``finding_<id>.png/.pdf``, and the lines that link them under the findings table."""
    if not data.finding_figures:
        return []
    lines = [
        "One figure per finding: its arms (or its dose levels) alone on its metric, mean over seeds with its "
        "95% Student-t band and the report's smoothing, the window shaded, an eval metric starting from the runs' "
        "start (eval_start.json, step 0); a dose-response finding also shows each run's window mean against the "
        "value with the least-squares line. The verdict and the effect are in each title.",
        "",
    ]
    for ff in data.finding_figures:
        fig, _ = finding_figures.plot_finding(ff)
        stem = "finding_" + "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in ff.id)
        style.save(fig, out / stem)
        lines.append(f"- {ff.id}: [{stem}.png]({stem}.png), [{stem}.pdf]({stem}.pdf) ({ff.verdict})")
    lines.append("")
    return lines


def progression_section(data: ReportData, out: Path) -> list[str]:
    """The progression table (the ``report:`` section's ``progression``), near the top of the
    report, with the runs it leaves out and its notes under it; or why it is not made."""
    lines: list[str] = []
    table = data.progression
    if table is None:
        if data.progression_lines:
            _section(lines, "Progression", " ".join(data.progression_lines))
        return lines
    notes = list(data.progression_lines)
    tables.write_table(table, out / "progression", notes=notes)
    _section(lines, f"Progression: final {data.settings.progression.metric}", table.caption)
    lines.extend(
        [tables.to_markdown(table), *(f"{line}\n" for line in notes), "Files: progression.md/.csv/.tex", ""]
    )
    return lines


def _table_sections(data: ReportData, out: Path) -> list[str]:
    """The tables, written as markdown, CSV and LaTeX and shown in the index."""
    s = data.settings
    lines: list[str] = []
    timing_frame = data.timing.frame
    caption = _timing_caption(data.baseline, AT_ONCE in timing_frame.columns) + _load_caption(data.timing)
    if "speedup" in timing_frame.columns and (timing_frame["runs"] == 1).any():
        caption += (
            " Rows with runs = 1 rest on a single run: their speedup is one measurement with no spread "
            "(run more seeds before quoting it)."
        )
    tables.write_table(data.timing, out / "timing", caption=caption)
    _section(lines, "Timing", caption)
    lines.extend([tables.to_markdown(data.timing), "Files: timing.md, timing.csv, timing.tex", ""])
    power = power_lines(data)
    tables.write_table(data.final, out / "final_performance", notes=power)
    _section(lines, "Final performance", data.final.caption)
    lines.extend([tables.to_markdown(data.final), *(f"{line}\n" for line in power)])
    lines.extend(["Files: final_performance.md/.csv/.tex", ""])
    tables.write_table(data.summary, out / "learning_check", extra_md={"Per run": data.check})
    data.check.frame.to_csv(out / "learning_check_runs.csv", index=False)
    _section(lines, "Learning check", "Did each variant learn at all? " + data.summary.caption)
    lines.extend(
        [tables.to_markdown(data.summary), "Files: learning_check.md/.csv/.tex, learning_check_runs.csv", ""]
    )
    if data.ttt is not None:
        tables.write_table(data.ttt, out / "time_to_target")
        _section(
            lines,
            f"Time to {s.metric} >= {s.target:g}",
            "Compares how fast each variant gets there. " + data.ttt.caption,
        )
        lines.extend([tables.to_markdown(data.ttt), "Files: time_to_target.md/.csv/.tex", ""])
    if data.variants is not None and len(data.variants):
        v = Table(
            data.variants,
            display={
                PANEL: "panel",
                PANEL_ROW: "panel row",
                "finished": "runs finished",
                "other": "runs not finished",
            },
        )
        tables.write_table(
            v, out / "variants", caption="Each label of the figures and tables with the settings behind it."
        )
        _section(
            lines, "Variants", "The labels of the figures and tables with the full settings behind them."
        )
        lines.extend([tables.to_markdown(v), ""])
    return lines


def _frame_for_panels(data: ReportData) -> pd.DataFrame:
    """A small frame that carries the label columns in display order, for :func:`analysis.dynamics.plot_panels`."""
    cols = {}
    n = max(len(data.hue_order), len(data.col_values), 1)
    if data.hue:
        cols[data.hue] = pd.Categorical(
            [data.hue_order[k % len(data.hue_order)] for k in range(n)],
            categories=data.hue_order,
            ordered=True,
        )
    if data.col:
        cols[data.col] = pd.Categorical(
            [data.col_values[k % len(data.col_values)] for k in range(n)],
            categories=data.col_values,
            ordered=True,
        )
    frame = pd.DataFrame(cols)
    for m in data.dynamics:
        frame[m] = 0.0
    return frame


def _off_policy_text(data: ReportData) -> str:
    return {
        "recorded": "steps whose old log-probs came from an earlier policy, as recorded by the run",
        "inferred": "steps where some completion's w_seq differs from 1; these runs predate the recorded flag",
        "mixed": "recorded by the run, or for older runs inferred from w_seq differing from 1",
        "unknown": "every step: these runs record neither the flag nor w_seq",
    }.get(data.off_policy_how, "steps whose old log-probs came from an earlier policy")


def _score_rule(metric: str) -> str:
    return score_rule(metric)


def _timing_caption(baseline: str | None, at_once: bool) -> str:
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


def _load_caption(timing_table: timing.TimingTable) -> str:
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
