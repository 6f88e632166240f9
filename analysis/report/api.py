"""The report's entry points: :func:`make_report` and the ``report`` command's arguments."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import analysis.report.across as across_mod
import analysis.report.across_inputs as across_inputs
import analysis.report.across_output as across_output
from analysis.report.compute import compute_report
from analysis.report.data import ReportData, ReportInputs
from analysis.report.inputs import grid_findings, grid_section, load_report_inputs, logged_names
from analysis.report.render import write_report
from analysis.settings import report as report_settings
from analysis.settings.report import ReportSettings, given_keys, key_list
from analysis.settings.report_values import ReportError, SmoothingError
from harness import layout


def make_report(
    grid_dir: str | Path | Sequence[str | Path],
    *,
    run_ids: Sequence[str] | None = None,
    all_runs: bool = False,
    across: str | Sequence[str] | None = None,
    allow_different: str | Sequence[str] | None = None,
    out: str | Path | None = None,
    **settings: Any,
) -> Path:
    """Write the report of a grid's results folder, or one report of several, and return the
    report folder.

    Settings left out (or None) take the (first) grid file's ``report:`` section (from
    ``grid.json``), then the defaults of :class:`ReportSettings`.

    Args:
        grid_dir: ``results/<grid>``, or a list of results folders: one report across them
            (:mod:`analysis.report.across`: runs matched by their settings, ``across`` as panels).
        run_ids: report these runs (one folder only); default the grid's runs as last planned
            (``grid.json``).
        all_runs: every run folder, labelled by what differs.
        across: with several folders, the keys the comparison is about (one, comma-separated or a
            list; ``folder`` for the folders as such).
        allow_different: with several folders, keys that may differ between them uncompared.
        out: the report folder; default ``grid_dir/report`` for one folder, required for several.
            A new folder outside every compared one (it gets a ``sources.json``).
        **settings: any field of :class:`ReportSettings` by name (``hue``, ``x``, ``smoothing``,
            ...; ``hue``/``col``/``row`` may be one key, a comma-separated string of keys or a
            list), checked as the field checks it. The keys of ``hue``/``col``/``row`` must name
            columns of the results, a ``baseline`` or ``wseq_split`` what the results hold.

    Returns:
        The report folder.

    Raises:
        FileNotFoundError: if a folder has no ``runs/`` folder.
        ReportError: (a ValueError) if a setting is unknown or refused by its check, a key or
            metric does not fit the results, ``out`` is missing or unsafe, or the folders differ in
            a key neither named nor allowed (:func:`analysis.report.across.compare`); nothing is
            written then.
    """
    folders = [Path(grid_dir)] if isinstance(grid_dir, (str, Path)) else [Path(d) for d in grid_dir]
    given = {k: v for k, v in settings.items() if v is not None}
    ReportSettings.merged(None, **given)  # a setting that is refused stops the report before reading
    comparison = _comparison(folders, run_ids, across, allow_different, all_runs)
    grid_dir = folders[0]
    own = out is None and comparison is None
    report_dir = grid_dir / layout.REPORT_DIR if own else across_output.out_folder(out, folders)
    section, notes = across_inputs.report_section(comparison) if comparison else (grid_section(grid_dir), [])
    merged = ReportSettings.merged(section, **given)
    merged = across_mod.place(merged, comparison) if comparison else merged
    inputs, findings, title = _inputs(grid_dir, comparison, merged, run_ids, all_runs)
    data = compute_report(
        inputs,
        merged,
        title=title,
        strict_keys=given_keys(given) | set(comparison.facets if comparison else ()),
        given=list(given),
        findings=findings,
        logged_metrics=logged_names(grid_dir, inputs.frame, findings),
    )
    write_report(_opening(data, inputs, comparison, notes), inputs.load.skipped, report_dir)
    if not own:
        across_output.write_sources(report_dir, folders, comparison)
    return report_dir


def _comparison(
    folders: Sequence[Path],
    run_ids: Sequence[str] | None,
    across: str | Sequence[str] | None,
    allow_different: str | Sequence[str] | None,
    all_runs: bool,
) -> across_mod.Comparison | None:
    """:func:`analysis.report.across.compare` of several folders (None for one without
    ``across`` or ``allow_different``).

    Raises:
        ReportError: run ids with several folders, or what ``compare`` raises.
    """
    if len(folders) == 1 and not across and not allow_different:
        return None
    if run_ids is not None:
        raise ReportError("run ids name the runs of one folder; with several folders use --all or neither")
    return across_mod.compare(
        folders,
        across=key_list(across) or (),
        allow_different=key_list(allow_different) or (),
        all_runs=all_runs,
    )


def _inputs(
    grid_dir: Path,
    comparison: across_mod.Comparison | None,
    settings: ReportSettings,
    run_ids: Sequence[str] | None,
    all_runs: bool,
) -> tuple[ReportInputs, list[Any], str]:
    """What the report reads (one folder's, or the comparison's), the findings judged and the title."""
    if comparison is not None:
        return across_inputs.load_inputs(comparison, settings), [], comparison.title
    findings = grid_findings(grid_dir)
    inputs = load_report_inputs(
        grid_dir, run_ids, all_runs=all_runs, settings=settings, extra_columns=[f.metric for f in findings]
    )
    title = inputs.grid_info.get("name", grid_dir.name) if inputs.grid_info else grid_dir.name
    return inputs, findings, str(title)


def _opening(
    data: ReportData, inputs: ReportInputs, comparison: across_mod.Comparison | None, notes: Sequence[str]
) -> ReportData:
    """``data`` with the run set's lines first (and, across folders, the folders, what differs and
    the runs without a counterpart)."""
    df = inputs.frame
    head = [
        f"Runs: {inputs.run_set}; {df[layout.RUN_ID].nunique() if len(df) else 0} "
        f"with metrics, {len(df)} logged steps."
    ]
    if inputs.load.missing_runs:
        head.append(f"Not found on disk (not started?): {len(inputs.load.missing_runs)} run(s).")
    if comparison is None:
        return replace(data, lines=(*head, *data.lines))
    head += [*across_output.report_lines(comparison), *(f"Note: {n}." for n in notes), ""]
    return replace(
        data, lines=(*head, *data.lines), left_out=(*data.left_out, *across_output.left_out_lines(comparison))
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``report`` subcommand's arguments to ``parser``: the results folder(s), ``--all``,
    ``--across``, ``--allow-different``, ``--out``, and one flag per setting that has one
    (:func:`analysis.settings.report.add_arguments`)."""
    parser.add_argument(
        "grid",
        type=Path,
        nargs="+",
        metavar="GRID_DIR",
        help="a grid's results folder, results/<grid>; several make one report across them (--across, --out)",
    )
    report_settings.add_arguments(parser)
    parser.add_argument(
        "--all",
        dest="all_runs",
        action="store_true",
        help="every run folder, not just the grid as currently specified; runs labelled by what differs",
    )
    parser.add_argument(
        "--across",
        default=None,
        metavar="KEYS",
        help="several folders: the setting(s) that tell them apart and are compared, comma-separated "
        "(e.g. model, task); a panel per value. 'folder' compares the folders as such",
    )
    parser.add_argument(
        "--allow-different",
        dest="allow_different",
        action="append",
        default=None,
        metavar="KEY",
        help="several folders: a setting that may differ between them without being compared (listed in "
        "the report); repeatable. Any other difference stops the report",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="the report folder (default results/<grid>/report for one folder; required for several): a new "
        "folder outside the compared ones",
    )


def main(args: argparse.Namespace) -> int:
    """Run :func:`make_report` from parsed arguments (:func:`add_arguments`); print where the
    outputs went.

    Returns:
        0 on success, 2 when the folder or an argument is invalid (message on stderr).
    """
    try:
        given = report_settings.given_in(args)
    except SmoothingError as e:
        print(
            f"report: --smooth {args.smoothing!r}: {e} On the command line: auto, none, window=N or ema=A.",
            file=sys.stderr,
        )
        return 2
    except ReportError as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    try:
        grids = args.grid if isinstance(args.grid, list) else [args.grid]
        out = make_report(
            grids[0] if len(grids) == 1 else grids,
            all_runs=getattr(args, "all_runs", False),
            across=getattr(args, "across", None),
            allow_different=getattr(args, "allow_different", None),
            out=getattr(args, "out", None),
            **given,
        )
    except (FileNotFoundError, NotADirectoryError, ReportError) as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    files = sorted(p.name for p in out.iterdir() if p.is_file())
    print(f"report written to {out}/ ({len(files)} files); open {out / 'index.md'}")
    return 0
