"""The runs of several results folders read as one report's inputs (``grpo-harness report A B
--across KEYS``): the ``report:`` section the layout starts from, and one :class:`ReportInputs`
whose run ids are ``<folder label>/<run id>`` with a :data:`analysis.report.across.FOLDER` column.
Which runs are compared is :func:`analysis.report.across.compare`'s answer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from analysis.load import LoadInfo, RunConfigs, join_config
from analysis.report.across import FOLDER, Comparison, Grid
from analysis.report.data import ReportInputs
from analysis.report.inputs import grid_findings, grid_section, load_report_inputs, report_columns
from analysis.report.runs import value_text
from analysis.settings.report import ReportSettings
from harness import layout


def report_section(comparison: Comparison) -> tuple[Mapping[str, Any] | None, list[str]]:
    """The ``report:`` section the layout starts from (the first folder's) and notes on the
    others: a section that differs, findings that are judged within each grid only.

    Raises:
        ReportError: a folder's damaged section (:func:`analysis.report.inputs.grid_section`).
    """
    sections = [grid_section(g.path) for g in comparison.grids]
    notes = []
    with_progression = [
        g for g, s in zip(comparison.grids, sections, strict=True) if s and s.get("progression")
    ]
    if with_progression:
        # its rows name the run ids of one folder: a progression is made in that folder's report
        sections = [{k: v for k, v in s.items() if k != "progression"} if s else s for s in sections]
        notes.append(
            "a progression (report: progression:) compares the runs of one grid: it is in each folder's own "
            "report, " + ", ".join(f"`grpo-harness report {g.path}`" for g in with_progression)
        )
    if any(s != sections[0] for s in sections[1:]):
        notes.append(
            f"the folders' report: sections differ; the layout starts from {comparison.grids[0].label}'s"
        )
    if any(grid_findings(g.path) for g in comparison.grids):
        notes.append(
            "findings are judged within each grid, not across folders: `grpo-harness findings "
            + " ".join(str(g.path) for g in comparison.grids)
            + "`"
        )
    return sections[0], notes


def load_inputs(comparison: Comparison, settings: ReportSettings) -> ReportInputs:
    """The compared runs of every folder as one :class:`ReportInputs`: run ids prefixed with their
    folder's label, a :data:`FOLDER` column, the settings joined over all the folders' runs (a key
    constant within each folder but not across them becomes a column), the runs that have not
    started or whose ``config.json`` is damaged kept (they are listed as in a one-folder report).

    Reads each folder's metrics through its cache (``results/<grid>/.cache``).
    """
    own = replace(settings, col=_without_folder(settings.col), row=_without_folder(settings.row))
    parts = []
    for g in comparison.grids:
        kept = set(comparison.kept[g.label])
        ids = [r for r in g.ids if r in kept or r not in g.settings]
        parts.append((g, load_report_inputs(g.path, ids, settings=own)))
    return _combine(comparison, parts, [*report_columns(settings), *comparison.facets])


def _without_folder(keys: Sequence[str]) -> tuple[str, ...]:
    return tuple(k for k in keys if k != FOLDER)


def _combine(
    comparison: Comparison, parts: Sequence[tuple[Grid, ReportInputs]], columns: Sequence[str]
) -> ReportInputs:
    """One :class:`ReportInputs` from each folder's, the settings joined as :func:`analysis.load.load`
    joins them (``columns``: the columns the report reads, whose settings are joined even when
    constant)."""
    ids: list[str] = []
    rows: list[dict[str, Any]] = []
    codes, steps, folder_codes = [], [], []
    for k, (g, inp) in enumerate(parts):
        present = [str(r) for r in inp.frame[layout.RUN_ID].cat.categories]
        codes.append(inp.frame[layout.RUN_ID].cat.codes.to_numpy().astype(np.int64) + len(ids))
        steps.append(inp.frame[layout.STEP].to_numpy())
        folder_codes.append(np.full(len(inp.frame), k, dtype=np.int32))
        ids += [f"{g.label}/{r}" for r in present]
        rows += [dict(g.settings.get(r, {})) for r in present]
    code = np.concatenate(codes) if codes else np.zeros(0, dtype=np.int64)
    metrics = list(dict.fromkeys(m for _, inp in parts for m in inp.load.metric_columns if m != FOLDER))
    data: dict[str, Any] = {
        layout.RUN_ID: pd.Categorical.from_codes(code, categories=pd.Index(ids, dtype=object)),
        layout.STEP: np.concatenate(steps).astype(np.int64, copy=False),
    }
    for m in metrics:
        data[m] = np.concatenate(
            [
                inp.frame[m].to_numpy(dtype=np.float64)
                if m in inp.frame.columns
                else np.full(len(inp.frame), np.nan)
                for _, inp in parts
            ]
        )
    varying = list(dict.fromkeys(v for _, inp in parts for v in inp.load.varying))
    keys = list(dict.fromkeys(k for r in rows for k in r))
    config_cols, aliases, constant = join_config(RunConfigs(rows, keys, varying), code, data, columns)
    data[FOLDER] = pd.Categorical.from_codes(
        np.concatenate(folder_codes), categories=pd.Index([g.label for g, _ in parts], dtype=object)
    )
    return ReportInputs(
        frame=pd.DataFrame(data, copy=False),
        states=pd.concat([_prefixed(g, inp.states) for g, inp in parts]),
        grid_info=None,
        run_set="; ".join(f"{g.label}: {g.run_set}" for g in comparison.grids),
        requested_runs=tuple(f"{g.label}/{r}" for g, inp in parts for r in inp.requested_runs),
        grid_runs=_grid_runs(comparison),
        load=LoadInfo(
            skipped=tuple(s for _, inp in parts for s in inp.load.skipped),
            missing_runs=tuple(f"{g.label}/{r}" for g, inp in parts for r in inp.load.missing_runs),
            damaged_runs={
                f"{g.label}/{r}": why for g, inp in parts for r, why in inp.load.damaged_runs.items()
            },
            metric_columns=tuple(metrics),
            config_columns=tuple(config_cols),
            constant_config=constant,
            varying=tuple(varying),
            aliases=aliases,
        ),
        start_evals={f"{g.label}/{r}": v for g, inp in parts for r, v in inp.start_evals.items()},
        start_metrics={f"{g.label}/{r}": v for g, inp in parts for r, v in inp.start_metrics.items()},
    )


def _prefixed(g: Grid, frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    out.index = pd.Index([f"{g.label}/{r}" for r in frame.index], dtype=object, name=frame.index.name)
    return out


def _grid_runs(comparison: Comparison) -> dict[str, dict[str, Any]]:
    """``grid.json``'s values of each planned run, under its prefixed id, with its folder and the
    facets' values its folder has alone (so a run that has not started is listed in its panel)."""
    out = {}
    for g in comparison.grids:
        single = {}
        for k in comparison.facets:
            values = {value_text(s.get(k)) for s in g.settings.values()}
            if k != FOLDER and len(values) == 1:
                single[k] = next(iter(g.settings.values())).get(k)
        for r, values in g.grid_runs.items():
            if isinstance(values, Mapping):
                out[f"{g.label}/{r}"] = {**values, **single, FOLDER: g.label}
    return out
