"""The report's entry points: :func:`make_report` and the ``report`` command's arguments."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analysis.report.compute import compute_report
from analysis.report.inputs import _grid_findings, _grid_section, _logged_for, load_report_inputs
from analysis.report.render import _write_report
from analysis.report.settings import ReportError, ReportSettings, _keys
from harness import layout
from harness.config import report_section
from harness.config.report_section import REPORT_X


def make_report(
    grid_dir: str | Path,
    *,
    run_ids: Sequence[str] | None = None,
    all_runs: bool = False,
    baseline: str | None = None,
    x: str | None = None,
    hue: str | Sequence[str] | None = None,
    col: str | Sequence[str] | None = None,
    row: str | Sequence[str] | None = None,
    metric: str | None = None,
    target: float | None = None,
    ci: str | None = None,
    smoothing: Any = None,
    seeds: bool | None = None,
    include_unfinished: bool | None = None,
    wseq_split: str | None = None,
) -> Path:
    """Write the report of a grid's results folder and return the report folder.

    Arguments left None take the grid file's ``report:`` section (from ``grid.json``), then the
    defaults of :class:`ReportSettings`.

    Args:
        grid_dir: ``results/<grid>``.
        run_ids: report these runs; default the grid's runs as last planned (``grid.json``).
        all_runs: every run folder, labelled by what differs.
        baseline, x, hue, col, row, metric, target, ci, smoothing, seeds, include_unfinished,
            wseq_split: see :class:`ReportSettings` (``hue``/``col``/``row`` may be one key, a
            comma-separated string of keys or a list).

    Returns:
        The report folder (``grid_dir/report``).

    Raises:
        FileNotFoundError: if ``grid_dir`` has no ``runs/`` folder.
        ReportError: (a ValueError) if ``x`` is unknown or a key or metric does not fit the results.
    """
    grid_dir = Path(grid_dir)
    if x is not None and x not in REPORT_X:
        raise ReportError(f"x must be one of {REPORT_X}, got {x!r}")
    settings = ReportSettings.merged(
        _grid_section(grid_dir),
        hue=_keys(hue),
        col=_keys(col),
        row=_keys(row),
        baseline=baseline,
        x=x,
        metric=metric,
        target=target,
        ci=ci,
        smoothing=smoothing,
        seeds=seeds,
        include_unfinished=include_unfinished,
        wseq_split=wseq_split,
    )
    findings = _grid_findings(grid_dir)
    inputs = load_report_inputs(
        grid_dir, run_ids, all_runs=all_runs, settings=settings, extra_columns=[f.metric for f in findings]
    )
    df, grid_info = inputs.frame, inputs.grid_info
    title = grid_info.get("name", grid_dir.name) if grid_info else grid_dir.name
    strict = {k for v in (hue, col, row) for k in (_keys(v) or ())}
    given = [name for name, v in (("baseline", baseline), ("wseq_split", wseq_split)) if v is not None]
    data = compute_report(
        inputs,
        settings,
        title=str(title),
        strict_keys=strict,
        given=given,
        findings=findings,
        logged_metrics=_logged_for(grid_dir, df, findings),
    )
    data.lines.insert(
        0,
        f"Runs: {inputs.run_set}; {df[layout.RUN_ID].nunique() if len(df) else 0} "
        f"with metrics, {len(df)} logged steps.",
    )
    if inputs.load.missing_runs:
        data.lines.insert(1, f"Not found on disk (not started?): {len(inputs.load.missing_runs)} run(s).")
    out = grid_dir / layout.REPORT_DIR
    _write_report(data, inputs.load.skipped, out)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``report`` subcommand's arguments to ``parser``: the results folder, ``--all``, and
    one flag per setting that has one (:func:`harness.config.report_section.add_arguments`)."""
    parser.add_argument("grid", type=Path, help="a grid's results folder, results/<grid>")
    report_section.add_arguments(parser)
    parser.add_argument(
        "--all",
        dest="all_runs",
        action="store_true",
        help="every run folder, not just the grid as currently specified; runs labelled by what differs",
    )


def main(args: argparse.Namespace) -> int:
    """Run :func:`make_report` from parsed arguments (:func:`add_arguments`); print where the
    outputs went.

    Returns:
        0 on success, 2 when the folder or an argument is invalid (message on stderr).
    """
    try:
        given = report_section.given_in(args)
    except report_section.SmoothingError as e:
        print(
            f"report: --smooth {args.smoothing!r}: {e} On the command line: auto, none, window=N or ema=A.",
            file=sys.stderr,
        )
        return 2
    except ReportError as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    try:
        out = make_report(args.grid, all_runs=getattr(args, "all_runs", False), **given)
    except (FileNotFoundError, NotADirectoryError, ReportError) as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    files = sorted(p.name for p in out.iterdir() if p.is_file())
    print(f"report written to {out}/ ({len(files)} files); open {out / 'index.md'}")
    return 0
