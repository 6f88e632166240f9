"""The report's section "Across tasks" (:class:`analysis.report.data.TaskSection`, computed by
:func:`analysis.report.tasks.task_section` when the runs are on several tasks): the normalised
scores' aggregate estimates and performance profiles as figures, the aggregate and per-task
tables, and a caption that says how each task's scores were normalised."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis import style, tables
from analysis.finals import aggregate_figure
from analysis.labels import metric_label
from analysis.panels import fit_legend, line_handles, wrap_title
from analysis.report.data import TaskGroup, TaskSection
from analysis.report.page import Page, Section
from analysis.report.tasks import task_section
from analysis.tasks import TaskAggregate
from harness import layout

#: The panels of the aggregate figure: column of :attr:`TaskAggregate.aggregates`, title.
AGGREGATE_PANELS = (
    ("median", "Median"),
    ("iqm", "IQM"),
    ("mean", "Mean"),
    ("optimality_gap", "Optimality gap"),
)


def _fmt(v: float) -> str:
    return tables.fmt(v)


def score_words(section: TaskSection) -> str:
    """What a run's score is, in words."""
    if section.metric == layout.EVAL_ACCURACY:
        return "final greedy eval accuracy (its last evaluation on the task's held-out split)"
    return f"final {section.metric} (mean of its last 10% of logged steps)"


def range_sentence(section: TaskSection) -> str:
    """How each task's scores were normalised: the formula, then low and high with where they come
    from (the start eval, a stated value, or the default), per task."""
    ranges = list(section.ranges.values())
    if not ranges:
        return ""
    parts = []
    for r in ranges:
        low = {
            "start eval": f"low {_fmt(r.low)} (the starting policy's greedy eval before step 1"
            + (
                (
                    f", mean of {r.measured} runs, whose start evals differ by up to {_fmt(r.spread)}"
                    if r.spread > 0
                    else f", the same in all {r.measured} runs"
                )
                if r.measured > 1
                else ""
            )
            + ")",
            "stated": f"low {_fmt(r.low)} (stated)",
            "default": f"low {_fmt(r.low)} (no start eval and none stated: raw scores)",
        }[r.low_from]
        high = {
            "bound": f"high {_fmt(r.high)} (an accuracy is at most 1)",
            "stated": f"high {_fmt(r.high)} (stated)",
            "default": f"high {_fmt(r.high)} (none stated)",
        }[r.high_from]
        parts.append(f"{r.task}: {low}, {high}")
    text = (
        "Each run's score is normalised on its task: (score − low) / (high − low), 0 where training started "
        "and 1 at the reference (Agarwal et al. 2021, with the starting policy in the random agent's place). "
        + "; ".join(parts)
        + "."
    )
    if section.metric != layout.EVAL_ACCURACY:
        text += (
            " These runs did not evaluate (harness.eval_steps: 0), so no starting score was measured: "
            + (
                "the ends are the stated ones."
                if section.stated
                else "nothing was stated either, so the scores are not normalised (low 0, high 1)."
            )
        )
    return text


def _left_out_sentence(section: TaskSection, agg: TaskAggregate) -> str:
    """The tasks of the grid that the aggregate does not count, with why."""
    parts = [f"{t} ({why})" for t, why in agg.left_out.items()]
    parts += [
        f"{t} (no finished run; {what})" for t, what in section.unfinished.items() if t not in agg.left_out
    ]
    if not parts:
        return ""
    return " Not aggregated over: " + "; ".join(parts) + "."


def _bootstrap_words(agg: TaskAggregate, *, profile: bool = False) -> str:
    reps = agg.profile_reps if profile else agg.reps
    return (
        f"{100 * agg.confidence:g}% percentile intervals of the stratified bootstrap ({reps:,} resamples of "
        f"runs within each task, seed {agg.seed})"
    )


def render(section: TaskSection, page: Page) -> list[str]:
    """The markdown of the section, with its figures and tables written into ``page.out``."""
    return task_sections(section, page.out, page.facets.colors)


def task_sections(section: TaskSection | None, out: Path, colors: Mapping[str, str]) -> list[str]:
    """The markdown of the section, with its figures and tables written into ``out`` (``colors``:
    the variants' colours of the report's other figures)."""
    if section is None or not section.groups:
        if section is not None and section.unfinished:
            return [
                "## Across tasks",
                "",
                "No task has a finished run to aggregate over: "
                + "; ".join(f"{t} ({what})" for t, what in section.unfinished.items())
                + ".",
                "",
            ]
        return []
    lines = [
        "## Across tasks",
        "",
        f"Each run is scored by its {score_words(section)}. {range_sentence(section)}",
        "",
    ]
    for k, group in enumerate(section.groups):
        suffix = "" if len(section.groups) == 1 else f"_{k + 1}"
        if group.name:
            lines.extend([f"### {group.name}", ""])
        lines.extend(_group_lines(section, group, out, suffix, colors))
    return lines


def _group_lines(
    section: TaskSection, group: TaskGroup, out: Path, suffix: str, colors: Mapping[str, str]
) -> list[str]:
    """One group's subsections: the aggregate figure and table, the profile, the per-task table
    (their files named with ``suffix``)."""
    agg = group.aggregate
    left = _left_out_sentence(section, agg)
    if not agg.tasks:
        return [f"No task can be aggregated over.{left}", ""]
    variants = list(agg.aggregates["variant"])
    palette = {**style.variant_colors(variants), **{v: c for v, c in colors.items() if v in variants}}
    head = "####" if suffix else "###"
    lines: list[str] = []
    caption = aggregate_caption(agg) + left
    style.save(task_aggregate_figure(agg, colors=palette)[0], out / f"tasks_aggregate{suffix}")
    lines += [f"{head} Aggregate estimates over tasks", "", caption, ""]
    lines += [f"![aggregate over tasks](tasks_aggregate{suffix}.png)", ""]
    table = aggregate_table(agg)
    tables.write_table(table, out / f"tasks_aggregate_table{suffix}", caption=caption)
    lines += [tables.to_markdown(table), f"Files: tasks_aggregate_table{suffix}.md/.csv/.tex", ""]
    style.save(
        task_profile_figure(agg, colors=palette, metric=section.metric)[0], out / f"tasks_profile{suffix}"
    )
    lines += [f"{head} Performance profile over tasks", "", profile_caption(agg, section.metric), ""]
    lines += [f"![performance profile over tasks](tasks_profile{suffix}.png)", ""]
    per_task, per_caption = per_task_table(agg), per_task_caption(agg)
    tables.write_table(per_task, out / f"tasks_per_task{suffix}", caption=per_caption)
    lines += [f"{head} Per task", "", per_caption, ""]
    lines += [tables.to_markdown(per_task), f"Files: tasks_per_task{suffix}.md/.csv/.tex", ""]
    return lines


def aggregate_caption(agg: TaskAggregate) -> str:
    """What the aggregate figure and table show: the tasks, the runs, each statistic and its
    interval."""
    n_runs = agg.aggregates["runs"]
    lo, hi = int(n_runs.min()), int(n_runs.max())
    per_variant = f"{lo}" if lo == hi else f"{lo}-{hi}"
    return (
        f"Compares the variants over {len(agg.tasks)} task(s) ({'; '.join(agg.tasks)}), {per_variant} run(s) per "
        "variant in all: the median over tasks of each task's mean normalised score, the IQM (25% trimmed mean "
        "of every run's normalised score, pooled over tasks), the mean over tasks of each task's mean, and the "
        "optimality gap (1 − the mean of min(score, 1); lower is better)"
        + (
            f", and P(variant > {agg.baseline}): the probability that a run of the variant beats a run of "
            f"{agg.baseline} on the same task (Mann-Whitney U / nm), averaged over tasks (0.5: no difference)"
            if agg.baseline
            else ""
        )
        + f"; bars: {_bootstrap_words(agg)}, as rliable's get_interval_estimates (Agarwal et al. 2021). "
        "A hollow circle has no interval (one run per task)"
        + (f"; {agg.baseline}'s own row in the last panel is empty" if agg.baseline else "")
        + ("; with fewer than 4 runs in all nothing is trimmed and the IQM equals the mean" if hi < 4 else "")
        + "."
    )


def profile_caption(agg: TaskAggregate, metric: str) -> str:
    """What the profile figure shows, and its band."""
    return (
        f"Fraction of all runs on the {len(agg.tasks)} tasks whose normalised {metric_label(metric)} exceeds each "
        "threshold τ (a score distribution, Agarwal et al. 2021, Section 4): a curve further right is better "
        f"across runs and tasks, not only on average. Shaded: its band, {_bootstrap_words(agg, profile=True)}, as "
        "rliable's create_performance_profile; none for a variant with one run per task. Dotted: τ = 0 (the "
        "starting policy)" + (" and τ = 1 (the reference)" if agg.profile["tau"].max() >= 1.0 else "") + "."
    )


def per_task_caption(agg: TaskAggregate) -> str:
    """What the per-task table shows."""
    return (
        "The same statistics per task, beside the aggregate: runs, the task's low and high, the mean raw score, "
        "the mean and IQM of the normalised scores"
        + (f" and P(> {agg.baseline}) on that task" if agg.baseline else "")
        + f", {_bootstrap_words(agg)}. With one task the aggregate is this row"
        + (
            "; with fewer than 4 runs nothing is trimmed and the IQM equals the mean"
            if agg.per_task["runs"].max() < 4
            else ""
        )
        + "."
    )


def aggregate_table(agg: TaskAggregate) -> pd.DataFrame:
    """One row per variant: runs, tasks, the four aggregates and P(> baseline), each ``x [lo, hi]``
    in markdown (columns ``name``, ``name_lo``, ``name_hi``)."""
    names = {"median": "median", "iqm": "IQM", "mean": "mean", "optimality_gap": "optimality gap"}
    return _headed(agg.aggregates, names, agg.baseline)


def per_task_table(agg: TaskAggregate) -> pd.DataFrame:
    """One row per task and variant (:attr:`TaskAggregate.per_task`), with readable headers."""
    names = {"raw": "mean raw score", "normalised": "normalised mean", "iqm": "normalised IQM"}
    return _headed(agg.per_task, names, agg.baseline)


def _headed(table: pd.DataFrame, names: Mapping[str, str], baseline: str | None) -> pd.DataFrame:
    """``table`` with the statistics (and their ``_lo``/``_hi``) renamed by ``names``, and
    ``p_improve`` as ``P(> baseline)``, or dropped without a baseline."""
    names = {**names, "p_improve": f"P(> {baseline})"} if baseline else dict(names)
    t = table if baseline else table.drop(columns=["p_improve", "p_improve_lo", "p_improve_hi"])
    columns = {}
    for c, name in names.items():
        columns.update({c: name, f"{c}_lo": f"{name}_lo", f"{c}_hi": f"{name}_hi"})
    return t.rename(columns=columns)


def task_aggregate_figure(agg: TaskAggregate, *, colors: Mapping[str, str]) -> tuple[Figure, np.ndarray]:
    """Interval estimates of the aggregates over tasks (:func:`analysis.finals.aggregate_figure`):
    one panel per aggregate (median, IQM, mean, optimality gap) and P(variant > baseline), one row
    per variant, a bar over its interval with a tick at the estimate (a hollow circle without an
    interval)."""
    names = list(agg.aggregates["variant"])
    return aggregate_figure(
        agg.aggregates,
        metric="normalised score",
        names=[wrap_title(v, 28) for v in names],
        colors=[colors.get(v, "0.3") for v in names],
        baseline=agg.baseline,
        panels=AGGREGATE_PANELS,
    )


def plot_task_profile(ax: Axes, agg: TaskAggregate, *, colors: Mapping[str, str]) -> None:
    """The performance profiles of the normalised scores over every run and task on ``ax``: one
    step line per variant with its bootstrap band, τ = 0 and τ = 1 dotted where in range."""
    profile = agg.profile
    for name in agg.aggregates["variant"]:
        p = profile[profile["variant"] == name]
        color = colors.get(name, "0.3")
        ax.step(p["tau"], p["fraction"], where="post", color=color, linewidth=1.1)
        if p[["lo", "hi"]].notna().all(axis=None):
            ax.fill_between(p["tau"], p["lo"], p["hi"], step="post", color=color, alpha=0.18, linewidth=0)
    lo, hi = (float(profile["tau"].min()), float(profile["tau"].max())) if len(profile) else (0.0, 1.0)
    for ref in (0.0, 1.0):
        if lo <= ref <= hi:
            ax.axvline(ref, color="0.45", linestyle=":", linewidth=0.8)
    ax.set_ylim(-0.03, 1.03)


def task_profile_figure(
    agg: TaskAggregate, *, colors: Mapping[str, str], metric: str
) -> tuple[Figure, np.ndarray]:
    """Performance profiles over every run and task (:func:`plot_task_profile`), the legend below."""
    names = list(agg.aggregates["variant"])
    with style.context():
        fig = style.figure(1, 1, panel_height=2.2)
        ax = fig.subplots()
        plot_task_profile(ax, agg, colors=colors)
        ax.set_xlabel(f"normalised {metric_label(metric)} threshold τ")
        ax.set_ylabel("fraction of runs > τ")
        fit_legend(fig, line_handles(names, {n: colors.get(n, "0.3") for n in names}), None)
    return fig, np.array([[ax]])


SECTION = Section("tasks", task_section, render)


__all__ = [
    "AGGREGATE_PANELS",
    "aggregate_caption",
    "aggregate_table",
    "per_task_caption",
    "per_task_table",
    "plot_task_profile",
    "task_aggregate_figure",
    "task_profile_figure",
    "profile_caption",
    "range_sentence",
    "score_words",
    "task_sections",
]
