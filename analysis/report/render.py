"""Drawing a report: the figures (PNG + PDF) and ``index.md`` (:func:`render_report`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from filelock import FileLock

from analysis import aggregate as agg_mod
from analysis import curves, dynamics, finals, labels, pass_at_k, states, style, tables, wseq
from analysis.offpolicy import is_ratio_metric
from analysis.report.data import REPORT_SUFFIXES, ReportData
from analysis.report.render_tables import (
    _findings_section,
    _frame_for_panels,
    _off_policy_text,
    _score_rule,
    _section,
    _table_sections,
    progression_section,
)
from analysis.report.render_tasks import task_sections
from analysis.report.runs import _count_range
from analysis.report_values import ReportError


def render_report(data: ReportData, out: Path) -> list[str]:
    """Draw and write everything of ``data`` into ``out``; returns ``index.md``'s lines."""
    s = data.settings
    lines = [f"# Report: {data.title}", ""]
    lines.extend(data.lines)
    lines.append("")
    if data.left_out:
        lines.extend(["## Runs left out" if not s.include_unfinished else "## Runs that did not finish", ""])
        lines.append(
            "With `--include-unfinished`, tables and figures also count the runs below that have metrics "
            '(each says "included, marked"); the others are left out:'
            if s.include_unfinished
            else "Tables and figures count finished runs only; these are left out "
            "(`--include-unfinished` adds those with metrics, marked):"
        )
        lines.append("")
        lines.extend(f"- {line}" for line in data.left_out)
        lines.append("")
    if data.empty:
        lines.append(
            "No metrics yet: nothing to plot."
            if data.runs.empty
            else "No metrics of finished runs yet: nothing to plot."
        )
        lines.append("")
        lines.extend(_findings_section(data, out))  # each finding still says what it lacks
        return lines

    first, then = (
        (_final_section, _curve_sections) if s.lead == "final" else (_curve_sections, _final_section)
    )
    parts = (
        _findings_section,
        progression_section,
        first,
        then,
        _tasks_section,
        _pass_at_k_section,
        _dynamics_section,
        _wseq_section,
        _aggregate_sections,
        _table_sections,
    )
    for part in parts:
        lines.extend(part(data, out))
    return lines


def _figure_section(lines: list[str], fig: Any, path: Path, alt: str, title: str, what: str) -> None:
    """Save ``fig`` as ``path`` (.png and .pdf) and add its section to ``lines``: title, caption
    (with how many points the y-limits cut, if any), image."""
    cut = style.points_beyond_y(fig)
    if cut:
        where = (
            f" ({'; '.join(f'{t}: {n}' for t, n in cut.items())})" if len(cut) > 1 or "" not in cut else ""
        )
        what += (
            f" The y-range holds the bulk of the values drawn (1st-99th percentile): {sum(cut.values())} point(s) "
            f"of the lines or bands lie beyond it{where} and are cut at its edge."
        )
    style.save(fig, path)
    _section(lines, title, what)
    lines.extend([f"![{alt}]({path.name}.png)", ""])


def _curve_sections(data: ReportData, out: Path) -> list[str]:
    """The learning-curve figures, one section each."""
    s = data.settings
    lines: list[str] = []
    for m, c in data.curve_sets.items():
        fig, _ = curves.plot_curve_set(
            c,
            **data.panels(),
            marks=data.marks.get(m, []),
            mark_runs=data.mark_runs.get(m),
            syncs=data.syncs,
            seeds=s.seeds,
            legend_title=data.legend_title,
            baseline=data.baseline,
        )
        stem = f"{_safe(m)}_{s.x}"
        extra = ""
        if data.marks.get(m):
            extra += " Dashed with × : a run that diverged, up to the step it diverged " + (
                "(also in the mean, `--include-unfinished`)."
                if s.include_unfinished
                else "(not in the mean)."
            )
        if s.include_unfinished and (data.runs.loc[data.runs["included"], "state"] != states.DONE).any():
            extra += " Runs that did not finish are in the mean up to their last logged step."
        if data.syncs:
            extra += " Dotted verticals: reference-model syncs."
        if s.seeds:
            extra += " Faint lines: each run."
        if is_ratio_metric(m):
            extra += " Off-policy steps only."
        if data.hue and not data.col and not data.row and len(data.hue_order) > curves.MAX_LINES:
            extra += (
                f" {len(data.hue_order)} variants: one panel each, in its colour with its band"
                + (f", {data.baseline} (the baseline) dashed black" if data.baseline else "")
                + ", the others light grey behind."
            )
        _figure_section(
            lines,
            fig,
            out / stem,
            m,
            f"{m} vs {agg_mod.X_LABELS[s.x]}",
            f"Compares the {m} learning curves of the variants. {c.caption}{extra}",
        )
        lines.extend([f"PDF: [{stem}.pdf]({stem}.pdf)", ""])
    return lines


def _final_section(data: ReportData, out: Path) -> list[str]:
    """The final-score figure."""
    s = data.settings
    lines: list[str] = []
    if data.scores is None or data.scores.empty:
        return lines
    fig, _ = finals.plot_final(
        data.scores,
        data.final.frame,
        metric=s.metric,
        **data.panels(),
    )
    _figure_section(
        lines,
        fig,
        out / "final",
        "final",
        f"Final {s.metric} per variant",
        f"Compares where the variants end: one dot per run (its final score: {_score_rule(s.metric)}), "
        "the bar is the mean's 95% percentile-bootstrap interval over runs, as in the Final performance "
        "table (a hollow circle: one run, no interval). " + _scores_note(data, marked=True),
    )
    return lines


def _scores_note(data: ReportData, *, marked: bool = False) -> str:
    """How many runs each variant's final score pools, and which of them did not finish."""
    by = [b for b in (data.hue, data.col, data.row) if b]
    counts = data.scores.groupby(by, observed=True).size() if by else pd.Series([len(data.scores)])
    text = f"{_count_range(counts)} run(s) per variant."
    other = data.scores["state"] != states.DONE
    if other.any():
        diverged = int((data.scores["state"] == states.DIVERGED).sum())
        text += (
            f" Includes {int(other.sum())} run(s) that did not finish (`--include-unfinished`), scored on "
            "their last logged steps"
            + (
                f" and drawn as × (diverged, {diverged}) or a hollow triangle (stopped or running)"
                if marked
                else ""
            )
            + "."
        )
    return text


def _tasks_section(data: ReportData, out: Path) -> list[str]:
    """The normalised scores across tasks (:mod:`analysis.report.render_tasks`), when the runs are
    on several tasks."""
    return task_sections(data.tasks, out, data.colors)


def _pass_at_k_section(data: ReportData, out: Path) -> list[str]:
    """The pass@k figure and its table, when a counted run recorded a sampled eval."""
    lines: list[str] = []
    if data.pass_at_k is None or data.pass_at_k_table is None:
        return lines
    fig, _ = pass_at_k.plot_pass_at_k(
        data.pass_at_k,
        hue=data.hue,
        col=data.col,
        row=data.row,
        colors=data.colors,
        hue_order=data.hue_order,
        col_values=data.col_values,
        row_values=data.row_values,
        legend_title=data.legend_title,
    )
    table = data.pass_at_k_table
    _figure_section(lines, fig, out / "pass_at_k", "pass@k", "pass@k against k", table.caption)
    tables.write_table(table, out / "pass_at_k_table")
    lines.extend([tables.to_markdown(table), "Files: pass_at_k.png/.pdf, pass_at_k_table.md/.csv/.tex", ""])
    return lines


def _dynamics_section(data: ReportData, out: Path) -> list[str]:
    """The training-dynamics figure."""
    s = data.settings
    lines: list[str] = []
    if data.dynamics:
        fig, _ = dynamics.plot_panels(
            _frame_for_panels(data),
            list(data.dynamics),
            x=s.x,
            hue=data.hue,
            col=data.col,
            colors=data.colors,
            on_policy=[cv for cv, _ in data.on_policy],
            legend_title=data.legend_title,
            aggs=data.dynamics,
        )
        ratio = [m for m in data.dynamics if is_ratio_metric(m)]
        _figure_section(
            lines,
            fig,
            out / f"dynamics_{s.x}",
            "dynamics",
            "Training dynamics",
            "Compares what the losses do to the policy: "
            + ", ".join(labels.metric_label(m) for m in data.dynamics)
            + (
                f". Not logged by any of these runs, so not drawn: {', '.join(data.dynamics_missing)}"
                if data.dynamics_missing
                else ""
            )
            + "".join(
                f". {labels.metric_label(m)}: not logged by {', '.join(v)}"
                for m, v in data.dynamics_absent.items()
            )
            + ". Same line, band and smoothing as the curves above"
            + (f"; {', '.join(ratio)} over off-policy steps only ({_off_policy_text(data)})" if ratio else "")
            + ".",
        )
    return lines


def _wseq_section(data: ReportData, out: Path) -> list[str]:
    """The w_seq figure."""
    s = data.settings
    lines: list[str] = []
    fig, _ = wseq.plot_wseq(
        bands=data.wseq,
        hue=data.hue,
        x=s.x,
        colors=data.colors,
        col=data.col,
        split=s.wseq_split if data.wseq is not None and s.wseq_split in data.wseq.columns else None,
        hue_order=data.hue_order or None,
        col_values=data.col_values if data.col else None,
        on_policy=[cv for cv, _ in data.on_policy],
    )
    skipped = [cv for cv, _ in data.on_policy if cv is not None]
    infinite = (
        {q: int(np.isinf(data.wseq[q].to_numpy(dtype=float)).sum()) for q in ("p05", "p95")}
        if data.wseq is not None and len(data.wseq)
        else {}
    )
    _figure_section(
        lines,
        fig,
        out / "w_seq",
        "w_seq",
        "Sequence importance ratio w_seq",
        "How far each variant's sequence-level ratio w_seq = pi_theta / pi_old (product over the completion's "
        "tokens) drifts from 1, over off-policy steps only ("
        + _off_policy_text(data)
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
    return lines


def _aggregate_sections(data: ReportData, out: Path) -> list[str]:
    """The rliable-style aggregate estimates and the performance profile."""
    s = data.settings
    lines: list[str] = []
    if data.final is None or data.final.frame.empty:
        return lines
    by = [b for b in (data.hue, data.col, data.row) if b]
    table = _in_panel_order(data.final.frame, data)
    names = [" · ".join(str(r[b]) for b in by) or "all" for _, r in table.iterrows()]
    colors = [data.colors.get(str(r[data.hue]), "0.3") if data.hue else "0.3" for _, r in table.iterrows()]
    fig, _ = finals.plot_aggregate(table, metric=s.metric, names=names, colors=colors, baseline=data.baseline)
    _figure_section(
        lines, fig, out / "aggregate", "aggregate", "Aggregate estimates", _aggregate_caption(data)
    )
    fig, _ = finals.plot_profile(
        data.profile.frame,
        metric=s.metric,
        hue=data.hue,
        col=data.col,
        colors=data.colors,
        hue_order=data.hue_order or None,
        col_values=data.col_values if data.col else None,
        legend_title=data.legend_title,
    )
    _figure_section(
        lines,
        fig,
        out / "performance_profile",
        "performance profile",
        "Performance profile",
        f"Fraction of runs whose final {s.metric} exceeds each threshold τ (Agarwal et al. 2021): a curve "
        "further right is better across runs, not only on average. Shaded: each curve's 95% "
        f"stratified-bootstrap band ({data.profile.reps:,} resamples of the variant's runs, "
        "seed 0, the percentile interval at each τ; as rliable's create_performance_profile); none for a "
        "variant with one run. With few runs per variant the steps are coarse and the bands wide. "
        + _scores_note(data),
    )
    return lines


def _in_panel_order(table: pd.DataFrame, data: ReportData) -> pd.DataFrame:
    """``table``'s rows panel by panel in the figures' order (row, then col values), variants in
    their order within each."""
    rank = {
        data.row: {v: k for k, v in enumerate(data.row_values)},
        data.col: {v: k for k, v in enumerate(data.col_values)},
        data.hue: {v: k for k, v in enumerate(data.hue_order)},
    }
    order = [b for b in (data.row, data.col, data.hue) if b]
    if not order:
        return table
    return table.sort_values(order, key=lambda c: c.astype(str).map(rank[c.name]), kind="stable")


def _aggregate_caption(data: ReportData) -> str:
    """What the aggregate-estimates figure shows."""
    return (
        f"Final {data.settings.metric} per variant as interval estimates (Agarwal et al. 2021): mean and IQM over "
        "runs with 95% percentile-bootstrap intervals (the Final performance table's)"
        + (
            f", and the probability that a run of the variant beats a run of {data.baseline} in the same panel "
            "(0.5 = no difference)"
            if data.baseline
            else ""
        )
        + ". A hollow circle has no interval (one run)"
        + ("; the baseline's own row in the last panel is empty" if data.baseline else "")
        + (
            "; with fewer than 4 runs per variant nothing is trimmed, so the IQM equals the mean"
            if data.final is not None and len(data.final.frame) and data.final.frame["runs"].max() < 4
            else ""
        )
        + ". "
        + _scores_note(data)
    )


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)


def write_report(data: ReportData, skipped: Sequence[tuple[str, str]], out: Path) -> None:
    """Write the report's figures, tables and ``index.md`` (listing the ``skipped`` files,
    ``(path, reason)``) into ``out``, replacing a previous report's.

    Raises:
        ReportError: if ``out`` cannot be written.
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
        # One report at a time per folder: a second one waits, then replaces the first's outputs
        # whole (two interleaved reports would leave figures that index.md does not list).
        with FileLock(str(out / ".report.lock")):
            for old in out.iterdir():  # a previous report's figures and tables must not outlive their data
                if old.is_file() and old.suffix in REPORT_SUFFIXES:
                    old.unlink()
            lines = render_report(data, out)
            if skipped:
                lines.extend(["## Files not loaded", ""])
                lines.extend(f"- `{path}`: {reason}" for path, reason in skipped)
                lines.append("")
            (out / "index.md").write_text("\n".join(lines))
    except OSError as e:
        raise ReportError(
            f"cannot write the report into {out}: {e.strerror or e} ({e.filename or out}); "
            "free space or fix its permissions, then run `grpo-harness report` again"
        ) from e
