"""The report's pass@k figure and table as numbers (:func:`pass_at_k_numbers`): the counted runs'
pass@k at the start and at their last eval step per variant and panel, and the caption that states
the estimator, n, the temperature and the end step (:mod:`analysis.pass_at_k`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis import pass_at_k as pak
from analysis import states
from analysis.load import LoadInfo
from analysis.report.data import Layout, ReportInputs
from analysis.report.runs import display_names
from analysis.tables import Table
from harness import layout
from harness.settings.schema import HarnessSettings

#: The run settings the caption states (the harness's sampled eval), read where the runs record them.
SAMPLED_N, SAMPLED_TEMPERATURE = "harness.sampled_eval_n", "harness.sampled_eval_temperature"


def pass_at_k_numbers(
    work: pd.DataFrame,
    runs: pd.DataFrame,
    inputs: ReportInputs,
    layout_: Layout,
    panel_keys: tuple[Sequence[str], Sequence[str]],
) -> dict[str, Any]:
    """pass@k per variant and panel (:func:`analysis.pass_at_k.pass_at_k_points`) and its table
    with the caption, as the :class:`analysis.report.data.ReportData` fields ``pass_at_k`` and
    ``pass_at_k_table`` (both None when no counted run recorded a pass@k).

    Args:
        work: the counted runs' metric rows with their label columns.
        runs: one row per run (``state``, ``included``).
        inputs: what the report read (the starting policy's sampled eval per run, the load's record).
        layout_: the label columns and their order.
        panel_keys: the config keys behind the panel columns and rows (the table's headers).
    """
    cols = [c for c in pak.pass_at_k_columns(work.columns) if work[c].notna().any()]
    if not cols:
        return {"pass_at_k": None, "pass_at_k_table": None}
    by = [b for b in (layout_.hue, layout_.col, layout_.row) if b]
    points = pak.pass_at_k_points(work, inputs.start_metrics, by)
    info = inputs.load
    caption = pak.pass_at_k_caption(
        points,
        n=_setting_values(work, info, SAMPLED_N),
        # a run that leaves the temperature unset samples at the section's default
        temperature=_setting_values(work, info, SAMPLED_TEMPERATURE)
        or [HarnessSettings.__dataclass_fields__["sampled_eval_temperature"].default],
    )
    inc = runs[runs["included"]]
    other = int((inc["state"] != states.DONE).sum())
    if other:
        caption += (
            f" Includes {other} run(s) that did not finish (`--include-unfinished`), at their last eval."
        )
    table = pak.pass_at_k_table(points, by, display_names(layout_, info, *panel_keys))
    return {
        "pass_at_k": points,
        "pass_at_k_table": Table(table.frame, caption=caption, display=table.display),
    }


def _setting_values(work: pd.DataFrame, info: LoadInfo, key: str) -> list[Any]:
    """The finite values of run setting ``key`` among the counted runs: its column, else the value
    every run shares (``info.constant_config``); none when no run records it."""
    if key in work.columns:
        values = pd.to_numeric(work.drop_duplicates(layout.RUN_ID)[key], errors="coerce").to_numpy(
            dtype=np.float64
        )
        return [float(v) for v in values if np.isfinite(v)]
    value = info.constant_config.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool) and np.isfinite(value):
        return [float(value)]
    return []
