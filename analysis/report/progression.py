"""The report's progression table as numbers (:func:`progression_numbers`): the grid file's
``report: progression:`` rows, each row's finished runs scored as the final-performance table
scores them (:func:`analysis.scores.final_scores`) and compared with the row above
(:func:`analysis.progression.progression_table`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from analysis import progression as progression_mod
from analysis.report.runs import findings_runs
from analysis.report_values import Progression
from analysis.scores import final_scores
from harness import layout


def progression_numbers(
    df: pd.DataFrame, runs: pd.DataFrame, without: Mapping[str, str], progression: Progression | None
) -> dict[str, Any]:
    """The progression table and the lines under it (runs left out, notes, what dynamic sampling
    cost its rows), as the :class:`analysis.report.data.ReportData` fields ``progression`` and
    ``progression_lines``: the table None and one note when ``grid.json`` does not record the rows'
    runs, None and no line without a progression.

    A row counts its finished runs only, as the findings do, also with ``--include-unfinished``:
    each row is compared with the row above, and a run stopped early is scored on other steps.

    Args:
        df: the metrics of every run with any (categorical run ids).
        runs: one row per run with metrics (``state``, ...; :func:`analysis.report.runs.findings_runs`).
        without: the requested runs without metrics, with why.
        progression: the ``report: progression:`` setting, its rows' run ids from ``grid.json``.
    """
    if progression is None:
        return {"progression": None, "progression_lines": ()}
    if any(r.runs is None for r in progression.rows):
        note = (
            f"Note: {layout.GRID_FILE} does not record which runs each row of the report's progression selects, "
            "so its table is not made; record it with `grpo-harness run GRID.yaml` (done runs are skipped) or "
            "`grpo-harness submit`."
        )
        return {"progression": None, "progression_lines": (note,)}
    metric = progression.metric
    finished, why = findings_runs(runs, without, df)
    ids = {r for row in progression.rows for r in row.runs or ()}
    part = df[df[layout.RUN_ID].astype(str).isin(ids).to_numpy()]
    scores = final_scores(part, metric) if metric in part.columns else pd.Series(dtype=float)
    rows = [(r.label, r.runs or ()) for r in progression.rows]
    table = progression_mod.progression_table(scores, rows, metric=metric, finished=finished, unfinished=why)
    counted = [(label, [r for r in ids_ if r in set(finished)]) for label, ids_ in rows]
    lines = list(table.left_out) + list(table.notes) + progression_mod.sampling_lines(part, counted)
    if metric not in df.columns or not df[metric].notna().any():
        lines.insert(0, f"No run logged `{metric}`, the progression's metric.")
    return {"progression": table, "progression_lines": tuple(lines)}
