"""The report's entry points: :func:`make_report` and the ``report`` command's arguments."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analysis.report.compute import compute_report
from analysis.report.inputs import _grid_findings, _grid_section, _logged_for, load_report_inputs
from analysis.report.render import _write_report
from analysis.report.settings import _X_CHOICES, ReportError, ReportSettings, _keys, parse_smoothing
from harness import layout


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
    if x is not None and x not in _X_CHOICES:
        raise ReportError(f"x must be one of {_X_CHOICES}, got {x!r}")
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
    df, run_states, grid_info, _ = load_report_inputs(
        grid_dir, run_ids, all_runs=all_runs, settings=settings, extra_columns=[f.metric for f in findings]
    )
    title = grid_info.get("name", grid_dir.name) if grid_info else grid_dir.name
    strict = {k for v in (hue, col, row) for k in (_keys(v) or ())}
    given = [name for name, v in (("baseline", baseline), ("wseq_split", wseq_split)) if v is not None]
    data = compute_report(
        df,
        run_states,
        settings,
        title=str(title),
        strict_keys=strict,
        given=given,
        findings=findings,
        logged_metrics=_logged_for(grid_dir, df, findings),
    )
    data.lines.insert(
        0,
        f"Runs: {df.attrs.get('run_set', '')}; {df[layout.RUN_ID].nunique() if len(df) else 0} "
        f"with metrics, {len(df)} logged steps.",
    )
    if df.attrs.get("missing_runs"):
        data.lines.insert(1, f"Not found on disk (not started?): {len(df.attrs['missing_runs'])} run(s).")
    out = grid_dir / layout.REPORT_DIR
    _write_report(data, df.attrs.get("skipped", []), out)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``report`` subcommand's arguments to ``parser``."""
    parser.add_argument("grid", type=Path, help="a grid's results folder, results/<grid>")
    parser.add_argument(
        "--baseline",
        default=None,
        help="reference variant: KEY=VALUE[,KEY=VALUE] or a variant label (default: the grid's report "
        "section, else loss_type=grpo)",
    )
    parser.add_argument("--x", choices=_X_CHOICES, default=None, help="x axis of the curves (default: step)")
    parser.add_argument(
        "--hue", default=None, help="key(s) compared as colours, comma-separated (default: loss_type)"
    )
    parser.add_argument("--col", default=None, help="key(s) faceted into panel columns, comma-separated")
    parser.add_argument("--row", default=None, help="key(s) faceted into panel rows, comma-separated")
    parser.add_argument("--metric", default=None, help="curve and table metric (default: reward)")
    parser.add_argument(
        "--target", type=float, default=None, help="also tabulate time to reach METRIC >= TARGET"
    )
    parser.add_argument("--ci", choices=("t", "bootstrap"), default=None, help="curve band (default: t)")
    parser.add_argument(
        "--smooth",
        default=None,
        metavar="auto|none|window=N|ema=A",
        help="smoothing of each run before averaging (default: auto, a trailing mean over a tenth of each "
        "run's logged points)",
    )
    parser.add_argument("--seeds", action="store_true", default=None, help="also draw each run faintly")
    parser.add_argument(
        "--include-unfinished",
        action="store_true",
        default=None,
        help="also count runs that did not finish (diverged, failed, stopped), marked",
    )
    parser.add_argument(
        "--wseq-split",
        default=None,
        metavar="COLUMN",
        help="split the w_seq figure by a column, e.g. reuse_index",
    )
    parser.add_argument(
        "--all",
        dest="all_runs",
        action="store_true",
        help="every run folder, not just the grid as currently specified; runs labelled by what differs",
    )


def main(args: argparse.Namespace) -> int:
    """Run :func:`make_report` from parsed arguments; print where the outputs went.

    Returns:
        0 on success, 2 when the folder or an argument is invalid (message on stderr).
    """
    try:
        smoothing = parse_smoothing(getattr(args, "smooth", None))
    except ValueError as e:
        print(f"report: --smooth {args.smooth!r}: {e}", file=sys.stderr)
        return 2
    target = getattr(args, "target", None)
    if target is not None and not math.isfinite(target):
        print(f"report: --target {target}: give a finite value (e.g. 0.5)", file=sys.stderr)
        return 2
    try:
        out = make_report(
            args.grid,
            smoothing=smoothing,
            all_runs=getattr(args, "all_runs", False),
            baseline=getattr(args, "baseline", None),
            x=getattr(args, "x", None),
            hue=getattr(args, "hue", None),
            col=getattr(args, "col", None),
            row=getattr(args, "row", None),
            metric=getattr(args, "metric", None),
            target=target,
            ci=getattr(args, "ci", None),
            seeds=getattr(args, "seeds", None),
            include_unfinished=getattr(args, "include_unfinished", None),
            wseq_split=getattr(args, "wseq_split", None),
        )
    except (FileNotFoundError, NotADirectoryError, ReportError) as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    files = sorted(p.name for p in out.iterdir() if p.is_file())
    print(f"report written to {out}/ ({len(files)} files); open {out / 'index.md'}")
    return 0
