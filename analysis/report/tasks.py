"""A grid over several tasks: tasks as panels, and the normalised scores aggregated over tasks.

:func:`task_layout` lays the tasks out as panels when the layout does not say otherwise;
:func:`task_section` computes the report's section "Across tasks" (:class:`TaskSection`): each
finished run's final score normalised on its task's range (:func:`analysis.tasks.task_ranges`:
the starting policy's eval before the first optimizer step up to 1, or stated ends), then per
variant the median, IQM, mean and optimality gap over tasks x runs, P(variant > baseline)
averaged over tasks, performance profiles, and the same statistics per task
(:func:`analysis.tasks.aggregate_over_tasks`, rliable's conventions). A planned task none of whose
runs finished is named with what happened to its runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from analysis import labels, states
from analysis import scores as scores_mod
from analysis import tasks as tasks_mod
from analysis.load import flatten_config
from analysis.report.data import PANEL, PANEL_ROW, Counted, ReportInputs, TaskGroup, TaskSection
from analysis.settings.report import ReportSettings
from harness import layout

#: The config column that names a run's task.
TASK_NAME = "task.name"


def task_keys(df: pd.DataFrame) -> list[str]:
    """The config columns that tell the runs' tasks apart: ``task.name``, then the fewest other
    ``task.*`` columns that tell apart the runs of one dataset with different settings (two entries
    of products with 2 and 3 factors are two tasks: ``task.kwargs.min_terms`` tells them apart);
    empty when the runs are on fewer than two datasets (a grid over one dataset's kwargs, a
    difficulty ablation, is laid out as its ``report:`` section says)."""
    if TASK_NAME not in df.columns:
        return []
    first = df.drop_duplicates(layout.RUN_ID) if layout.RUN_ID in df.columns else df
    first = first[first[TASK_NAME].notna()]
    if first[TASK_NAME].astype(str).nunique() < 2:
        return []
    columns = [c for c in first.columns if isinstance(c, str) and c.startswith("task.")]
    # a whole mapping (task.kwargs as a varying key) is told by its flattened keys
    columns = [c for c in columns if not any(o.startswith(c + ".") for o in columns)]
    shown = first[columns].astype(object).map(lambda v: repr(None if labels.is_missing(v) else v))

    def tasks_told(keys: list[str]) -> int:
        return len(shown[keys].drop_duplicates())

    every = tasks_told(columns)
    keys = [TASK_NAME]
    for c in columns:
        if tasks_told(keys) == every:
            break
        if c != TASK_NAME and tasks_told([*keys, c]) > tasks_told(keys):
            keys.append(c)
    return keys if every > 1 else []


def task_layout(df: pd.DataFrame, settings: ReportSettings) -> tuple[ReportSettings, str | None]:
    """The layout with the tasks as panels (:func:`task_keys`), when the runs are on several tasks
    and no layout key names the task: panel columns when ``col`` is free, else panel rows when
    ``row`` is; returns the layout and a note saying so (None when unchanged)."""
    keys = task_keys(df)
    if not keys:
        return settings, None
    named = {*(settings.hue or ()), *settings.col, *settings.row}
    if named & {*keys, "task", "name"}:
        return settings, None
    if not settings.col:
        return replace(settings, col=tuple(keys)), None
    if not settings.row:
        return replace(settings, row=tuple(keys)), None
    return settings, (
        "the runs are on several tasks, but the panels are taken (col and row): tasks are told apart in the "
        "labels; name task.name in --col or --row to give each task its panel"
    )


def task_section(c: Counted) -> TaskSection | None:
    """The section "Across tasks" of a report, or None when its counted runs are on fewer than two
    tasks: each run's final score (``eval/accuracy`` when the runs evaluate, else the report's
    metric; :func:`analysis.scores.final_scores`) normalised on its task's range (the settings'
    ``normalise`` states ends), aggregated over tasks per group of variants (the panels other than
    the task's) with ``analysis.scores.bootstrap_reps`` resamples.

    Returns:
        A :class:`TaskSection`, or None.
    """
    work, runs, inputs, f = c.work, c.runs, c.inputs, c.facets
    metric, normalise = c.settings.metric, c.settings.normalise
    hue, col, row, hue_order, baseline = f.hue, f.col, f.row, f.hue_order or (), f.baseline
    final_scores, reps_of = scores_mod.final_scores, scores_mod.bootstrap_reps
    stated_low, stated_high = (normalise or {}).get("low"), (normalise or {}).get("high")
    task_of = _task_labels(work, runs, inputs)
    all_tasks = list(dict.fromkeys(task_of.values()))
    if len(all_tasks) < 2:
        return None
    evaluates = layout.EVAL_ACCURACY in work.columns and work[layout.EVAL_ACCURACY].notna().any()
    score_metric = layout.EVAL_ACCURACY if evaluates else metric
    frame = _scored_runs(runs, task_of, final_scores(work, score_metric), hue, [col, row])
    starts: dict[str, list[float]] = {}
    for rid, value in inputs.start_evals.items():
        t = task_of.get(rid)
        if t is not None:
            starts.setdefault(t, []).append(value)
    scored_tasks = [t for t in all_tasks if (frame["task"] == t).any()]
    ranges = tasks_mod.task_ranges(
        scored_tasks,
        starts if evaluates else {},
        bounded=evaluates,
        stated_low=stated_low,
        stated_high=stated_high,
    )
    groups = []
    for name, part in frame.groupby("group", sort=False) if len(frame) else []:
        variants = [v for v in hue_order if (part["variant"] == v).any()] or None
        n = len(part)
        groups.append(
            TaskGroup(
                name or None,
                tasks_mod.aggregate_over_tasks(
                    part,
                    variant="variant",
                    task="task",
                    ranges=ranges,
                    baseline=baseline
                    if baseline is not None and (part["variant"] == baseline).any()
                    else None,
                    variants=variants,
                    tasks=scored_tasks,
                    reps=reps_of(n),
                    profile_reps=reps_of(n),
                ),
            )
        )
    return TaskSection(
        metric=score_metric,
        ranges=ranges,
        groups=tuple(groups),
        unfinished=_unfinished_tasks(all_tasks, scored_tasks, task_of, runs, inputs),
        stated=stated_low is not None or stated_high is not None,
    )


def _scored_runs(
    runs: pd.DataFrame,
    task_of: Mapping[str, str],
    scores: pd.Series,
    hue: str | None,
    facets: Sequence[str | None],
) -> pd.DataFrame:
    """One row per counted run with a finite score: ``variant`` (its ``hue`` label), ``task``,
    ``score`` and ``group`` (its panel labels other than the task's, joined; "" without)."""
    inc = runs[runs["included"]]
    frame = pd.DataFrame(
        {
            "variant": inc[hue].astype(str) if hue else "all",
            "task": [task_of.get(str(r)) for r in inc.index],
            "score": scores.reindex(inc.index.astype(object)).to_numpy(dtype=np.float64),
        },
        index=inc.index,
    )
    others = [c for c in facets if c and not _is_task_facet(inc, c, task_of)]
    frame["group"] = (
        inc[others].astype(str).agg(" · ".join, axis=1) if others else pd.Series("", index=inc.index)
    )
    return frame[frame["task"].notna() & np.isfinite(frame["score"].to_numpy())]


def _task_labels(work: pd.DataFrame, runs: pd.DataFrame, inputs: ReportInputs) -> dict[str, str]:
    """Each requested run's task as a label (``products``, or ``products, max_terms=3`` where two
    entries share a dataset), from its settings: the runs with metrics from ``runs``, the others
    from ``grid.json``'s varying values (a run that never logged a step still has a task)."""
    keys = task_keys(work) or task_keys(runs.reset_index()) or [TASK_NAME]
    rows: dict[str, dict[str, Any]] = {}
    for rid, values in inputs.grid_runs.items():
        flat = flatten_config({k: v for k, v in values.items() if k == "task" or k.startswith("task.")})
        rows[str(rid)] = {k: flat.get(k) for k in keys}
    for rid in runs.index:
        rows[str(rid)] = {k: runs.at[rid, k] if k in runs.columns else None for k in keys}
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=keys)
    frame = frame[frame[TASK_NAME].map(lambda v: not labels.is_missing(v))]
    if frame.empty:
        return {}
    names, _ = labels.label_runs(frame, keys)
    return {str(r): str(n) for r, n in zip(frame.index, names, strict=True)}


def _is_task_facet(inc: pd.DataFrame, column: str, task_of: Mapping[str, str]) -> bool:
    """Whether the panel label column ``column`` (``panel``, ``panel row``) tells the tasks apart
    and nothing else: one task per label and one label per task."""
    if column not in inc.columns or column not in (PANEL, PANEL_ROW):
        return False
    pairs = {(str(v), task_of.get(str(r))) for r, v in inc[column].items()}
    lab = {p[0] for p in pairs}
    tas = {p[1] for p in pairs}
    return len(pairs) == len(lab) == len(tas)


def _unfinished_tasks(
    all_tasks: Sequence[str],
    scored: Sequence[str],
    task_of: Mapping[str, str],
    runs: pd.DataFrame,
    inputs: ReportInputs,
) -> dict[str, str]:
    """``{task: "4 run(s): 3 failed, 1 not started"}`` for each task without a scored run."""
    out = {}
    run_state = {str(r): str(s) for r, s in runs["state"].items()} if "state" in runs.columns else {}
    st = inputs.states
    for task in all_tasks:
        if task in scored:
            continue
        ids = [r for r in inputs.requested_runs if task_of.get(r) == task]
        counts: dict[str, int] = {}
        for rid in ids:
            state = run_state.get(rid) or (str(st.loc[rid, "state"]) if rid in st.index else states.PENDING)
            word = "not started" if state == states.PENDING else state
            counts[word] = counts.get(word, 0) + 1
        what = ", ".join(f"{n} {w}" for w, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        out[task] = f"{len(ids)} run(s): {what}" if ids else "no run"
    return out


__all__ = ["TASK_NAME", "TaskGroup", "TaskSection", "task_keys", "task_layout", "task_section"]
