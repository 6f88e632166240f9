"""Reading a grid's results folder for a report: the metrics, the runs' states, ``grid.json``,
its ``report:`` section and its findings."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import findings as findings_mod
from analysis import states
from analysis.load import SkippedFileWarning, list_runs, load_results, read_grid
from analysis.report.data import ReportInputs
from analysis.report.runs import findings_runs, run_table, runs_without_metrics
from analysis.settings.report import ReportSettings, baseline_pairs, recorded_problems
from analysis.settings.report_values import ReportError
from analysis.tables import Table
from harness import layout


def report_columns(settings: ReportSettings) -> list[str]:
    """The metric and config columns a report with ``settings`` reads (a projection: real runs log
    many more, and reading only these is most of what makes a 1,000-run report quick): what every
    report counts and lays its runs out by (the score, the states, the off-policy steps, the x
    axes, the layout's keys), then each section's own
    (:attr:`analysis.report.page.Section.columns`)."""
    import analysis.report.sections as sections_mod

    metrics = [
        settings.metric,
        *states.DIVERGENCE_METRICS,
        states.ZERO_STD,
        states.GRAD_NORM,
        layout.OFF_POLICY,
        layout.REUSE_INDEX,
        layout.CONCURRENT_RUNS,
        layout.STEP_WALL_S,
        layout.TOKENS_GENERATED,
        layout.TOKENS_GENERATED_TOTAL,
        layout.ELAPSED_S,
        "w_seq/min",
        "w_seq/max",
    ]
    keys = [*(settings.hue or ()), *settings.col, *settings.row]
    keys += [k for k, _ in (baseline_pairs(settings.baseline or "") or [])]
    config = ["trainer.max_steps", "trainer.loss_type", "trainer.importance_sampling_level"]
    config += [k if "." in k or k in ("seed", "model") else f"trainer.{k}" for k in keys]
    sections = [c for section in sections_mod.SECTIONS for c in section.columns(settings)]
    return list(dict.fromkeys([*metrics, *sections, *config]))


def load_report_inputs(
    grid_dir: str | Path,
    run_ids: Sequence[str] | None = None,
    *,
    all_runs: bool = False,
    settings: ReportSettings | None = None,
    extra_columns: Sequence[str] = (),
) -> ReportInputs:
    """The metrics frame, the runs' states, ``grid.json`` and a phrase naming the run set, as a
    :class:`ReportInputs` (which also unpacks as ``frame, states, grid_info, run_set``).

    With ``settings`` only the columns that report needs are read (:func:`report_columns`, and
    ``extra_columns``, e.g. the findings' metrics); without, every column.

    Raises:
        FileNotFoundError: no ``runs/`` folder.
        ReportError: a damaged ``grid.json``.
    """
    grid_dir = Path(grid_dir)
    grid_info, ids, run_set = read_run_set(grid_dir, run_ids, all_runs=all_runs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SkippedFileWarning)
        loaded = load_results(
            grid_dir,
            ids,
            columns=None
            if settings is None
            else list(
                dict.fromkeys([*report_columns(settings), *extra_columns, *_plugin_prefixes(grid_dir, ids)])
            ),
            cache_dir=grid_dir / layout.GRID_CACHE_DIR,
        )
    for w in caught:
        if issubclass(w.category, SkippedFileWarning):
            print(f"report: {w.message}", file=sys.stderr)
        elif "not found" not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    present = set(list_runs(grid_dir))
    st = states.read_states(grid_dir, [r for r in ids if r in present])
    grid_runs = grid_info.get("runs") if grid_info else None
    return ReportInputs(
        frame=loaded.frame,
        states=st,
        grid_info=grid_info,
        run_set=run_set,
        requested_runs=tuple(ids),
        grid_runs=grid_runs if isinstance(grid_runs, Mapping) else {},
        load=loaded.info,
        start_evals=start_evals(grid_dir, [r for r in ids if r in present]),
        start_metrics=start_metrics(grid_dir, [r for r in ids if r in present]),
    )


def start_evals(grid_dir: Path, run_ids: Sequence[str]) -> dict[str, float]:
    """``{run_id: the starting policy's greedy accuracy}`` of the runs that measured it
    (:func:`harness.layout.read_start_eval`)."""
    out = {}
    for rid in run_ids:
        value = layout.read_start_eval(layout.run_dir(grid_dir, rid))
        if value is not None:
            out[rid] = value
    return out


def start_metrics(grid_dir: Path, run_ids: Sequence[str]) -> dict[str, dict[str, float]]:
    """``{run_id: {eval metric: value}}`` of the starting policy (greedy and sampled accuracy,
    pass@k), for each run with an ``eval_start.json`` (:func:`harness.layout.read_start_evals`)."""
    out = {}
    for rid in run_ids:
        folder = layout.run_dir(grid_dir, rid)
        if (folder / layout.START_EVAL_FILE).exists():
            out[rid] = layout.read_start_evals(folder)
    return out


def read_run_set(
    grid_dir: Path, run_ids: Sequence[str] | None = None, *, all_runs: bool = False
) -> tuple[dict[str, Any] | None, list[str], str]:
    """``grid.json`` (None without one), the run ids a report of ``grid_dir`` covers, in order, and
    a phrase naming them: every run folder with ``all_runs``, else ``run_ids``, else ``grid.json``'s
    runs as last planned, else every run folder.

    Raises:
        FileNotFoundError: no ``runs/`` folder.
        ReportError: a damaged ``grid.json``.
    """
    if not (grid_dir / layout.RUNS_DIR).is_dir():
        raise FileNotFoundError(_not_a_grid_folder(grid_dir))
    try:
        grid_info = read_grid(grid_dir)
    except ValueError as e:
        raise ReportError(f"{e}; fix or delete it, or use --all") from e
    return (grid_info, *_run_set(grid_dir, grid_info, run_ids, all_runs))


def _run_set(
    grid_dir: Path, grid_info: Mapping[str, Any] | None, run_ids: Sequence[str] | None, all_runs: bool
) -> tuple[list[str], str]:
    if all_runs:
        ids = list_runs(grid_dir)
        return ids, f"all {len(ids)} run folder(s) in {grid_dir}/{layout.RUNS_DIR}"
    if run_ids is not None:
        ids = list(run_ids)
        return ids, f"{len(ids)} run(s) given on the command line"
    if grid_info and isinstance(grid_info.get("run_ids"), list):
        ids = [str(r) for r in grid_info["run_ids"]]
        return ids, f"the {len(ids)} run(s) of {layout.GRID_FILE} (the grid as currently specified)"
    ids = list_runs(grid_dir)
    return ids, f"all {len(ids)} run folder(s) (no {layout.GRID_FILE})"


def _plugin_prefixes(grid_dir: Path, ids: Sequence[str]) -> list[str]:
    """``"<name>/"`` for each loss plugin a run's ``config.json`` names as its ``loss_type`` (the
    columns of its metrics, read beside the report's own:
    :func:`analysis.report.sections.dynamics.plugin_metrics`)."""
    import json

    from analysis.report.sections.dynamics import TRL_LOSS_TYPES

    names: set[str] = set()
    for rid in ids:
        try:
            data = json.loads((layout.run_dir(grid_dir, rid) / layout.CONFIG_FILE).read_text())
            name = data["config"]["trainer"]["loss_type"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(name, str) and name not in TRL_LOSS_TYPES:
            names.add(name)
    return [f"{n}/" for n in sorted(names)]


def _not_a_grid_folder(path: Path) -> str:
    """Why ``path`` is not a grid's results folder, and which folders near it are."""
    near = path if path.is_dir() else path.parent
    grids = (
        sorted(str(p.parent) for p in near.glob(f"*/{layout.RUNS_DIR}") if p.is_dir())
        if near.is_dir()
        else []
    )
    what = "does not exist" if not path.exists() else f"has no '{layout.RUNS_DIR}' folder"
    hint = (
        f"; grid results folders there: {', '.join(grids[:8])}" + (" ..." if len(grids) > 8 else "")
        if grids
        else "; give results/<grid>, the folder `grpo-harness run` wrote"
    )
    return f"{path} {what}{hint}"


def grid_section(grid_dir: Path) -> Mapping[str, Any] | None:
    """The ``report:`` section of the grid's ``grid.json`` (None without one, or when the file
    cannot be read: :func:`load_report_inputs` names it then).

    Raises:
        ReportError: listing every problem of the section (:func:`analysis.settings.report.recorded_problems`).
    """
    try:
        grid_info = read_grid(grid_dir) if (grid_dir / layout.RUNS_DIR).is_dir() else None
    except ValueError:
        grid_info = None  # load_report_inputs names the damaged file
    section = grid_info.get("report") if isinstance(grid_info, dict) else None
    problems = recorded_problems(section, str(grid_dir / layout.GRID_FILE))
    if problems:
        raise ReportError(
            "; ".join(problems) + " (fix the grid file's report: section and run `grpo-harness run` or "
            "`plan` again, or give the layout on the command line)"
        )
    return section if isinstance(section, Mapping) else None


def grid_findings(grid_dir: Path) -> list[findings_mod.Finding]:
    """The findings recorded in the grid's ``grid.json`` (none without the file or the section,
    or when the file cannot be read: :func:`load_report_inputs` names it then).

    Raises:
        ReportError: a damaged findings record, listing its problems.
    """
    try:
        grid_info = read_grid(grid_dir) if (grid_dir / layout.RUNS_DIR).is_dir() else None
    except ValueError:
        return []
    section = grid_info.get("findings") if isinstance(grid_info, dict) else None
    try:
        return findings_mod.read_findings(section, str(grid_dir / layout.GRID_FILE))
    except ValueError as e:
        raise ReportError(
            f"{e} (fix the grid file's findings: section and record it again with `grpo-harness run` or "
            "`submit`: done runs are skipped)"
        ) from e


def findings_results(grid_dir: str | Path) -> Table:
    """The verdicts on a results folder's findings, as its report computes them
    (:func:`analysis.findings.findings_table` over the grid's finished runs).

    Args:
        grid_dir: ``results/<grid>``, whose ``grid.json`` records a ``findings:`` section.

    Returns:
        The findings table (:func:`analysis.findings.findings_table`: the frame and its caption).

    Raises:
        FileNotFoundError: no ``runs/`` folder.
        ReportError: ``grid.json`` records no findings (the message says how to add them), or a
            damaged record.
    """
    grid_dir = Path(grid_dir)
    if not (grid_dir / layout.RUNS_DIR).is_dir():
        raise FileNotFoundError(_not_a_grid_folder(grid_dir))
    path = grid_dir / layout.GRID_FILE
    if not path.is_file():
        raise ReportError(
            f"{path} does not exist, so nothing says which runs each finding compares; run `grpo-harness run "
            "GRID.yaml` (done runs are skipped) or `grpo-harness submit` for the grid whose results these are"
        )
    try:
        read_grid(grid_dir)
    except ValueError as e:
        raise ReportError(
            f"{e}; write it again with `grpo-harness run GRID.yaml` (done runs are skipped) or `grpo-harness submit`"
        ) from e
    findings = grid_findings(grid_dir)
    if not findings:
        raise ReportError(
            f"{path} records no findings: section; add one to the grid file (see the "
            "README, Findings) and record it with `grpo-harness run GRID.yaml` (done runs are skipped), or "
            "`grpo-harness submit`"
        )
    settings = ReportSettings.merged(grid_section(grid_dir))
    inputs = load_report_inputs(grid_dir, settings=settings, extra_columns=[f.metric for f in findings])
    run_states = inputs.states
    logged = logged_names(grid_dir, inputs.frame, findings)
    df, _, without = runs_without_metrics(inputs.frame, run_states, inputs.load, inputs.requested_runs)
    finished: list[str] = []
    if not df.empty:
        # the report's score metric plays no part: a finding reads its own (the step is always there)
        runs, _, _ = run_table(df, run_states, replace(settings, metric=layout.STEP))
        finished, without = findings_runs(runs, without, df)
    return findings_mod.findings_table(
        df, findings, finished, unfinished=without, logged=logged, starts=inputs.start_metrics
    )


def logged_names(grid_dir: Path, df: pd.DataFrame, findings: Sequence[findings_mod.Finding]) -> list[str]:
    """The metric names a few runs' files hold, read only when no run of ``df`` has a value of a
    finding's metric (to suggest the name meant); [] otherwise."""
    if all(f.metric in df.columns and df[f.metric].notna().any() for f in findings):
        return []
    import pyarrow as pa
    import pyarrow.parquet as pq

    names: set[str] = set()
    ids = list(df[layout.RUN_ID].unique()[:8]) if len(df) else []
    for rid in ids:
        for path in layout.metric_paths(layout.run_dir(grid_dir, str(rid)))[:1]:
            with contextlib.suppress(OSError, ValueError, pa.ArrowException):  # the load names a damaged file
                names.update(pq.read_schema(path).names)
    return sorted(names - {layout.RUN_ID, layout.STEP})
