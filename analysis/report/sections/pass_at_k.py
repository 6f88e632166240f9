"""pass@k against k (``pass_at_k.png`` and ``pass_at_k_table.md/.csv/.tex``), when a counted run
recorded the sampled eval: per variant and panel, the start (each run's ``eval_start.json``) and
the end (each run's last eval step), each the mean over seeds with its Student-t band; the caption
states the estimator, n, the temperature and the end step (:mod:`analysis.pass_at_k`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis import pass_at_k as pak
from analysis import states
from analysis.load import LoadInfo
from analysis.report.data import Counted
from analysis.report.page import Page, Section
from analysis.settings.report import ReportSettings
from analysis.tables import Table
from harness import layout
from harness.settings.schema import HarnessSettings

#: The run settings the caption states (the harness's sampled eval), read where the runs record them.
SAMPLED_N, SAMPLED_TEMPERATURE = "harness.sampled_eval_n", "harness.sampled_eval_temperature"


@dataclass(frozen=True)
class PassAtKNumbers:
    """The pass@k figure's and table's numbers.

    Attributes:
        points: :func:`analysis.pass_at_k.pass_at_k_points` per variant and panel.
        table: its table, with the caption of the figure and the table.
    """

    points: pak.PassAtK
    table: Table


def compute(c: Counted) -> PassAtKNumbers | None:
    """pass@k per variant and panel and its table with the caption; None when no counted run
    recorded a pass@k."""
    work = c.work
    cols = [col for col in pak.pass_at_k_columns(work.columns) if work[col].notna().any()]
    if not cols:
        return None
    by = c.by
    points = pak.pass_at_k_points(work, c.inputs.start_metrics, by)
    info = c.inputs.load
    caption = pak.pass_at_k_caption(
        points,
        n=_setting_values(work, info, SAMPLED_N),
        # a run that leaves the temperature unset samples at the section's default
        temperature=_setting_values(work, info, SAMPLED_TEMPERATURE)
        or [HarnessSettings.__dataclass_fields__["sampled_eval_temperature"].default],
    )
    other = int((c.included["state"] != states.DONE).sum())
    if other:
        caption += (
            f" Includes {other} run(s) that did not finish (`--include-unfinished`), at their last eval."
        )
    table = pak.pass_at_k_table(points, by, c.display_names())
    return PassAtKNumbers(points, Table(table.frame, caption=caption, display=table.display))


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


def render(numbers: PassAtKNumbers, page: Page) -> list[str]:
    """The pass@k figure and its table."""
    fig, _ = pak.pass_at_k_figure(numbers.points, page.facets)
    table = numbers.table
    lines = page.figure(fig, "pass_at_k", alt="pass@k", title="pass@k against k", caption=table.caption)
    markdown = page.table(table, "pass_at_k_table")
    return [*lines, markdown, "Files: pass_at_k.png/.pdf, pass_at_k_table.md/.csv/.tex", ""]


def columns(settings: ReportSettings) -> Sequence[str]:
    """Every pass@k column, and the sampled eval's n and temperature."""
    return [layout.PASS_AT_PREFIX, SAMPLED_N, SAMPLED_TEMPERATURE]


SECTION = Section("pass_at_k", compute, render, columns=columns)
