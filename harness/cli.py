"""``grpo-harness``: plan / run / submit / status / cancel / report / findings / bench.

A small entry point: each subcommand hands off to one function. Bad input is reported before
anything runs or is written, with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from harness import layout


def _grid_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("grid", type=Path, help="grid YAML, e.g. ablations/smoke.yaml")
    p.add_argument(
        "-o",
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting (dotted key, YAML value), e.g. -o trainer.max_steps=50; repeatable",
    )
    p.add_argument("--profile", default=None, help="apply a named profile of the grid file (e.g. paper)")
    p.add_argument("--results", type=Path, default=Path("results"), help="results root (default: results)")


def _load_plan(args: argparse.Namespace):
    """Load, expand and validate; print the findings, and return the plan (None on any error).

    Every stage is checked in one pass: when the file, a profile or an ``-o`` has problems, the
    cells of what passed (:attr:`harness.config.spec.SpecError.partial`) are still validated, and all the
    problems are printed together, grouped by where they come from
    (:func:`harness.config.validate.format_one_pass`)."""
    from harness.config.findings import plan_problems
    from harness.config.grid import expand
    from harness.config.spec import load_grid
    from harness.config.validate import format_one_pass, validate_plan
    from harness.settings.schema import SpecError

    left_out: frozenset[str] = frozenset()
    try:
        grid, file_problems = load_grid(args.grid, args.override, profile=args.profile), []
    except SpecError as e:
        grid, file_problems, left_out = e.partial, e.problems, e.left_out
    if file_problems:
        validation, arms = None, []
        if grid is not None:
            try:
                plan = expand(grid)
                validation, arms = validate_plan(plan), plan_problems(plan)
            except Exception:  # the file's problems are said either way; the cells wait for them
                validation, arms = None, []
        text = format_one_pass(str(args.grid), file_problems, validation, arms, left_out)
        print(f"error: {text}", file=sys.stderr)
        return None
    plan = expand(grid)
    validation = validate_plan(plan)
    text = validation.format(str(args.grid))
    if text:
        print(text, file=sys.stderr if not validation.ok else sys.stdout)
    findings = plan_problems(plan)  # arms that select no run, or share one
    if findings:
        print(f"error: {SpecError(findings, args.grid)}", file=sys.stderr)
    return plan if validation.ok and not findings else None


def _results_problem(grid_dir: Path) -> bool:
    """Print an error and return True when results cannot be written into ``grid_dir``
    (:func:`harness.layout.unwritable`); nothing is written either way."""
    why = layout.unwritable(grid_dir)
    if why:
        print(
            f"error: cannot write results to {grid_dir}: {why}; pass another --results folder.",
            file=sys.stderr,
        )
    return why is not None


def text_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A terminal table: a header line, then one line per row, columns left-aligned two spaces
    apart, no borders (so each line still splits on whitespace), never wrapped however wide.

    Drawn by tabulate (``plain``), which also renders the report's markdown tables: rich's table
    takes 0.2 s per 1,000 rows, a third of ``plan``'s time for a 1,000-run grid.
    """
    from tabulate import tabulate

    # the header goes in as a row: tabulate pads header cells by two more spaces than data cells
    text = tabulate(
        [list(header), *([str(x) for x in row] for row in rows)],
        tablefmt="plain",
        disable_numparse=True,
        stralign="left",
    )
    return [line.rstrip() for line in text.splitlines()]


def format_plan(plan, grid_dir: Path | None = None) -> str:
    """The plan as a plain-text table: one line per run with its varying values (and state)."""
    keys = list(plan.varying_keys)
    header = ["run_id", *(k.split(".")[-1] for k in keys)]
    if grid_dir is not None:
        header.append("state")
    rows = []
    for run in plan.runs:
        row = [run.run_id, *(json.dumps(run.varying.get(k)) for k in keys)]
        if grid_dir is not None:
            row.append(layout.files_state(layout.run_dir(grid_dir, run.run_id)))
        rows.append(row)
    lines = text_table(header, rows)
    g = plan.grid
    title = f"grid {g.name} ({g.source}): {len(plan.runs)} runs"
    if plan.duplicates:
        title += f", {len(plan.duplicates)} duplicate cell(s) dropped"
    applied = []
    if g.profile:
        settings = ", ".join(f"{k}={json.dumps(v)}" for k, v in g.profile_settings)
        applied.append(f"profile {g.profile}: {settings or 'no settings'}")
    if g.overrides:
        applied.append(f"overrides: {' '.join(g.overrides)}")
    shown = {k: v for k, v in g.report.items() if k != "progression"}
    if shown:
        applied.append("report: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in shown.items()))
    description = [g.description.strip()] if g.description else []
    from harness.config.findings import plan_lines as finding_lines
    from harness.config.report_check import progression_lines
    from harness.losses import plan_lines

    return "\n".join(
        [
            title,
            *description,
            *applied,
            *progression_lines(plan),
            *plan_lines(plan.runs),
            *finding_lines(plan),
            *lines,
        ]
    )


def cmd_plan(args: argparse.Namespace) -> int:
    plan = _load_plan(args)
    if plan is None:
        return 2
    grid_dir = args.results / plan.grid.name
    print(format_plan(plan, grid_dir if grid_dir.exists() else None))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    import dataclasses

    from harness.cluster.executors import BUSY_REASON, execute_local, pending_local
    from harness.cluster.progress import heartbeat, label_of
    from harness.cluster.stopping import GridStopped
    from harness.config.grid import plan_record

    with heartbeat(f"checking {args.grid}", args.progress_every):
        plan = _load_plan(args)
    if plan is None:
        return 2
    executor = plan.grid.executor
    if args.executor:
        executor = dataclasses.replace(executor, name=args.executor)
    if executor.name == "slurm":
        print("error: this grid's executor is slurm; use `grpo-harness submit`.", file=sys.stderr)
        return 2
    grid_dir = args.results / plan.grid.name
    if _results_problem(grid_dir):
        return 2
    print(format_plan(plan, grid_dir if grid_dir.exists() else None))
    layout.write_grid(grid_dir, plan_record(plan))
    todo, skipped = pending_local(plan.runs, grid_dir, retry_failed=args.retry_failed)
    for reason, ids in skipped.items():
        print(f"skipped {len(ids)} run(s): {reason}")
    busy = [_busy_line(grid_dir, rid) for rid in skipped.get(BUSY_REASON, [])]
    for line in busy:
        print(f"  {line}")
    _warn_changed_plugins(plan.runs, grid_dir, skipped.get("done", []))
    try:
        outcomes = execute_local(
            todo,
            grid_dir,
            executor,
            in_process=executor.name == "debug",
            show_progress=sys.stderr.isatty(),
            progress_every_s=args.progress_every,
        )
    except GridStopped as stopped:
        labels = {r.run_id: label_of(r.varying) for r in todo}
        print("\n".join(stopped_lines(stopped, labels, resume_command(args.command_line))), file=sys.stderr)
        return stopped.exit_code
    code = _print_outcomes(outcomes, grid_dir, busy)
    if args.no_report:
        return code
    try:
        with heartbeat("writing the report", args.progress_every):
            return max(code, _report_after_run(grid_dir))
    except KeyboardInterrupt:
        print(
            f"\ninterrupted (SIGINT) while writing the report; `grpo-harness report {grid_dir}` writes it",
            file=sys.stderr,
        )
        return 130


def resume_command(command_line: list[str]) -> str:
    """The command line that resumes what a stopped ``run`` left: the same one, quoted for a POSIX
    shell; ``python -m harness`` stays that (``sys.executable``, which the module was run by)."""
    import shlex

    prog, *rest = command_line or ["grpo-harness"]
    head = [sys.executable, "-m", "harness"] if Path(prog).name == "__main__.py" else [prog]
    return shlex.join([*head, *rest])


def stopped_lines(stopped, labels: dict[str, str], command: str) -> list[str]:
    """What ``run`` says when a signal stopped it (:class:`harness.cluster.stopping.GridStopped`):
    a line per run it had started and left unfinished (its id, its varying values from ``labels``,
    the step it reached, where it resumes; a run that failed or diverged says that the command
    leaves it, as ``run`` does without ``--retry-failed``), one line counting the runs it had not
    started yet, then the command that resumes the rest."""
    from harness.cluster.stopping import signal_name

    left = [o for o in stopped.outcomes if o.state != layout.DONE]
    name = signal_name(stopped.signum)
    if not left:
        return [f"stopped by {name} once every run had finished", f"resume: {command}"]
    lines = [f"stopped by {name}: {len(left)} of {len(stopped.outcomes)} run(s) unfinished"]
    started = [o for o in left if o.state != layout.PENDING]
    left_alone = " (left by the command below; add --retry-failed to train it again)"
    for o in started:
        label = f" ({labels[o.run_id]})" if labels.get(o.run_id) else ""
        kept = left_alone if o.state in (layout.FAILED, layout.DIVERGED) else ""
        lines.append(f"  run {o.run_id}{label}: {o.error or o.state}{kept}")
    if len(left) > len(started):
        lines.append(f"  {len(left) - len(started)} run(s) not started")
    lines.append(f"resume: {command}")
    return lines


def _busy_line(grid_dir: Path, run_id: str) -> str:
    """A run another process trains: who, and the step it has reached."""
    run_dir = layout.run_dir(grid_dir, run_id)
    progress = layout.read_progress(run_dir)
    phase = layout.read_phase(run_dir)
    at = f", at step {progress['step']} of {progress.get('max_steps')}" if progress else ""
    at = f", {phase['phase']}" if phase and not progress else at
    return f"run {run_id} is {layout.trained_elsewhere(run_dir)}{at}"


def _print_outcomes(outcomes, grid_dir: Path, busy: list[str] = ()) -> int:
    """One line per run that did not simply finish (what happened, its log), then the count, with
    the runs left to another process in it; returns 1 when a run failed, diverged or stopped, else 0
    (a run another process trains is left to it and is no failure)."""
    unfinished = (layout.FAILED, layout.DIVERGED, layout.STOPPED)
    for o in outcomes:
        if o.state == layout.DONE and not o.error:
            continue
        stream = sys.stderr if o.state in unfinished else sys.stdout
        print(
            f"run {o.run_id} {o.state}: {o.error}"
            + (f"\n  log: {o.log}" if o.log and o.state in unfinished else ""),
            file=stream,
        )
    finished = sum(o.state == layout.DONE for o in outcomes)
    left = f"; {len(busy)} left to another process ({'; '.join(busy)})" if busy else ""
    if outcomes:
        print(f"{finished}/{len(outcomes)} run(s) finished{left}; results in {grid_dir}/runs/")
    else:
        print(f"nothing to run{left}; results in {grid_dir}/runs/")
    return 1 if any(o.state in unfinished for o in outcomes) else 0


def _report_after_run(grid_dir: Path) -> int:
    """The report of ``grid_dir``; 1 with the reason when it cannot be made or written (the runs'
    files are never touched by it), else 0."""
    from analysis.report import ReportError, make_report

    try:
        out = make_report(grid_dir)
    except (ReportError, OSError) as e:
        print(f"report: {e}; the runs' results are unchanged", file=sys.stderr)
        return 1
    print(f"report: {out}/index.md")
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    from harness.cluster import slurm
    from harness.config.grid import plan_record

    plan = _load_plan(args)
    if plan is None:
        return 2
    reason = slurm.slurm_available() if not args.dry_run else None
    if reason:
        print(f"error: no SLURM cluster reachable from here ({reason}).", file=sys.stderr)
        return 2
    executors = [plan.grid.executor] + [r.executor_settings(plan.grid.executor) for r in plan.runs]
    unknown = slurm.unknown_partitions(executors) if not args.dry_run else []
    if unknown:
        print(
            f"error: {args.grid}: executor.partition = {', '.join(unknown)}: this cluster has no such "
            "partition (sinfo lists them); nothing was submitted.",
            file=sys.stderr,
        )
        return 2
    grid_dir = args.results / plan.grid.name
    if _results_problem(grid_dir):
        return 2
    print(format_plan(plan, grid_dir if grid_dir.exists() else None))
    if not args.dry_run:
        layout.write_grid(grid_dir, plan_record(plan))
    try:
        result = slurm.submit(
            plan.runs,
            grid_dir,
            plan.grid.executor,
            retry_failed=args.retry_failed,
            hold=args.hold,
            dry_run=args.dry_run,
        )
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    _warn_changed_plugins(plan.runs, grid_dir, result.skipped.get("done", []))
    if result.arrays:
        print(f"status: grpo-harness status {grid_dir}    cancel: grpo-harness cancel {grid_dir}")
    return 0


def _warn_changed_plugins(runs, grid_dir: Path, done: list[str]) -> None:
    """Warn (stderr) of skipped done runs whose loss plugin's source changed since they trained."""
    if not done:
        return
    from harness.losses.loading import changed_source_warnings

    for line in changed_source_warnings(runs, grid_dir, done):
        print(line, file=sys.stderr)


def format_status(rows, grid_dir: Path | None = None) -> str:
    """The status table: one line per run; a line per run that ended badly (what happened), per
    done run with missing steps, and per run in flight (step of max_steps, reward, speed, ETA:
    read from ``grid_dir``; before its first step, its phase: building or waiting for its model,
    building the dataset, starting the trainer); then counts per state."""
    from collections import Counter

    keys: list[str] = []
    for r in rows:
        for k in r.varying or {}:
            if k not in keys:
                keys.append(k)
    header = ["run_id", *(k.split(".")[-1] for k in keys), "state", "job", "step", "reward"]
    table = []
    for r in rows:
        reward = "" if r.last_reward is None else f"{r.last_reward:.3f}"
        step = "" if r.last_step is None else str(r.last_step)
        vals = [json.dumps((r.varying or {}).get(k)) for k in keys]
        table.append([r.run_id, *vals, r.state, r.job_id, step, reward])
    lines = text_table(header, table)
    for r in rows:
        if r.state in (layout.FAILED, layout.DIVERGED, layout.STOPPED) and (r.error or r.log):
            lines.append(f"{r.run_id} {r.state}: {r.error}" + (f"\n  log: {r.log}" if r.log else ""))
        elif r.state == layout.DONE and r.error:  # missing steps
            lines.append(f"{r.run_id} done: {r.error}")
    if grid_dir is not None:
        from harness.cluster import progress

        for r in (r for r in rows if r.state == layout.RUNNING):
            run_dir = layout.run_dir(grid_dir, r.run_id)
            p = progress.read(run_dir)
            phase = progress.read_phase(run_dir) if p is None else None  # before its first step
            if p is not None:
                lines.append(f"{r.state}: {progress.line(p)}")
            elif phase is not None:
                lines.append(f"{r.state}: {progress.phase_line(phase)}")
    counts = Counter(r.state for r in rows)
    lines.append(", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no runs")
    return "\n".join(lines)


def cmd_compare(args: argparse.Namespace) -> int:
    """Exit 0 when every metric column of the two runs agrees within tolerance, 1 when one does
    not, 2 when a folder has no metrics."""
    from harness import compare

    rtol = compare.RTOL if args.rtol is None else args.rtol
    atol = compare.ATOL if args.atol is None else args.atol
    try:
        text, agrees = compare.format_comparison(args.run_a, args.run_b, rtol, atol, args.steps)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(text)
    return 0 if agrees else 1


def cmd_status(args: argparse.Namespace) -> int:
    from harness.cluster import status

    grid_dir = args.grid_dir
    if not (grid_dir / layout.RUNS_DIR).is_dir():
        print(f"error: {grid_dir} has no runs/ folder (is it results/<grid>?).", file=sys.stderr)
        return 2
    try:
        status.grid_run_dirs(grid_dir, all_runs=args.all)
    except ValueError as e:  # a damaged grid.json; run files are read leniently by grid_status
        print(
            f"error: {e}: this is not a grid file; use --all to list every run folder.",
            file=sys.stderr,
        )
        return 2
    if not args.watch:
        print(format_status(status.grid_status(grid_dir, all_runs=args.all), grid_dir))
        return 0
    return _watch_status(grid_dir, args.all, args.watch)


def _watch_status(grid_dir: Path, all_runs: bool, every_s: float) -> int:
    """``status --watch``: the status table every ``every_s`` seconds (redrawn in place in a
    terminal) until no run is queued, running or requeued, or Ctrl-C."""
    import time

    from harness.cluster import status

    in_flight = (layout.QUEUED, layout.RUNNING, layout.REQUEUED)
    live = None
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text

        live = Live(Text(""), console=Console(), auto_refresh=False)
        live.start()
    try:
        while True:
            rows = status.grid_status(grid_dir, all_runs=all_runs)
            text = f"{time.strftime('%H:%M:%S')}  {grid_dir}\n{format_status(rows, grid_dir)}"
            if live is not None:
                live.update(Text(text), refresh=True)
            else:
                print(text + "\n", flush=True)
            if not any(r.state in in_flight for r in rows):
                return 0
            time.sleep(every_s)
    except KeyboardInterrupt:
        return 0
    finally:
        if live is not None:
            live.stop()


def cmd_cancel(args: argparse.Namespace) -> int:
    from harness.cluster import slurm

    if not (args.grid_dir / layout.RUNS_DIR).is_dir():
        print(f"error: {args.grid_dir} has no runs/ folder (is it results/<grid>?).", file=sys.stderr)
        return 2

    cancelled = slurm.cancel(args.grid_dir)
    shown = " ".join(cancelled[:10]) + (f" ... ({len(cancelled) - 10} more)" if len(cancelled) > 10 else "")
    print(f"cancelled {len(cancelled)} job(s)" + (f": {shown}" if cancelled else ""))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from analysis import report

    return report.main(args)


def cmd_findings(args: argparse.Namespace) -> int:
    """``grpo-harness findings results/GRID [...]``: the verdict on each finding of each folder, as
    a compact table (plain text, or markdown with ``--markdown``); exit 2 when a folder is not a
    results folder or records no findings. With ``--confirm B``, one folder's verdicts beside those
    of ``B``, the same grid on other seeds (:func:`analysis.report.confirm.confirm_findings`)."""
    import pandas as pd

    if args.confirm is not None:
        return _confirm_findings(args)

    from analysis.findings import compact_table, note_lines
    from analysis.report import ReportError, findings_results
    from analysis.tables import to_markdown

    frames, notes, errors = [], [], []
    for grid_dir in args.grid_dirs:
        try:
            found = findings_results(grid_dir)
        except (FileNotFoundError, NotADirectoryError, ReportError) as e:
            errors.append(f"error: {e}")
            continue
        frames.append(compact_table(found))
        notes += note_lines(found, prefix=f"{grid_dir}: " if len(args.grid_dirs) > 1 else "")
    if errors:  # every folder's problem at once, and no table: a partial one would read as complete
        print("\n".join(errors), file=sys.stderr)
        return 2
    table = pd.concat(frames, ignore_index=True)
    if args.markdown:
        print(to_markdown(table), end="")
        print("".join(f"\n{line}\n" for line in notes), end="")
    else:
        print("\n".join(text_table(list(table.columns), table.to_numpy().tolist())))
        print("".join(f"{line}\n" for line in notes), end="")
    return 0


def _confirm_findings(args: argparse.Namespace) -> int:
    """``grpo-harness findings A --confirm B``: both folders' verdicts side by side and whether each
    finding replicated; exit 2 when the folders are not one grid on other seeds (each mismatch named)."""
    from analysis.report import ReportError
    from analysis.report.confirm import confirm_findings
    from analysis.tables import to_markdown

    if len(args.grid_dirs) != 1:
        print(
            f"error: --confirm {args.confirm} confirms one results folder's findings; give one folder before it, "
            f"not {len(args.grid_dirs)}",
            file=sys.stderr,
        )
        return 2
    try:
        found = confirm_findings(args.grid_dirs[0], args.confirm)
    except (FileNotFoundError, NotADirectoryError, ReportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    table = found.table
    if args.markdown:
        print(to_markdown(table), end="")
        print("".join(f"\n{line}\n" for line in (found.summary(), *found.notes)), end="")
    else:
        print("\n".join(text_table(list(table.columns), table.to_numpy().tolist())))
        print("".join(f"{line}\n" for line in (found.summary(), *found.notes)), end="")
    return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The CLI parser. ``command`` (the first argument) lets other commands skip importing the
    report and bench modules (matplotlib, scipy, torch), which keeps ``plan``/``submit`` quick."""
    from harness.cluster.progress import LINE_EVERY_S

    parser = argparse.ArgumentParser(
        prog="grpo-harness", description="Run, record and report ablations of GRPO loss variants on TRL."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="show the runs of a grid (validated) without running or writing anything")
    _grid_args(p)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("run", help="run a grid on this machine (submitit local executor by default)")
    _grid_args(p)
    p.add_argument("--executor", choices=["local", "debug"], default=None, help="override executor.name")
    p.add_argument("--no-report", action="store_true", help="skip the report at the end")
    p.add_argument("--retry-failed", action="store_true", help="also train failed and diverged runs again")
    p.add_argument(
        "--progress-every",
        type=float,
        default=LINE_EVERY_S,
        metavar="SECONDS",
        help=f"without a terminal, a line per run in flight this often (default {LINE_EVERY_S:g})",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("submit", help="submit a grid to SLURM as job arrays (skips done and queued runs)")
    _grid_args(p)
    p.add_argument("--retry-failed", action="store_true", help="also resubmit failed and diverged runs")
    p.add_argument("--dry-run", action="store_true", help="print what would be submitted, submit nothing")
    p.add_argument("--hold", action="store_true", help="submit held jobs (release with scontrol release)")
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("status", help="state of every run of a results folder (files first, SLURM as a hint)")
    p.add_argument("grid_dir", type=Path, help="results/<grid>")
    p.add_argument("--all", action="store_true", help="every run folder, not only the grid as last planned")
    p.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=5.0,
        default=None,
        metavar="SECONDS",
        help="refresh every SECONDS (default 5) until no run is queued or running",
    )
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("cancel", help="cancel the queued and running SLURM jobs of a results folder")
    p.add_argument("grid_dir", type=Path, help="results/<grid>")
    p.set_defaults(func=cmd_cancel)

    _add_reading_commands(sub, command)
    return parser


def _add_reading_commands(sub, command: str | None) -> None:
    """The commands that read results: report, findings, compare, bench."""
    p = sub.add_parser(
        "report", help="figures and tables of a results folder, or one report across several (--across)"
    )
    if command in (None, "report"):
        from analysis import report

        report.add_arguments(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
        "findings", help="verdicts on the findings (papers' claims) of one or more results folders"
    )
    p.add_argument("grid_dirs", type=Path, nargs="+", metavar="GRID_DIR", help="results/<grid>, one or more")
    p.add_argument(
        "--markdown", action="store_true", help="print a markdown table (as the README's findings table)"
    )
    p.add_argument(
        "--confirm",
        type=Path,
        default=None,
        metavar="GRID_DIR_B",
        help="the same grid on other seeds: both folders' verdicts side by side, replicated when both agree",
    )
    p.set_defaults(func=cmd_findings)

    p = sub.add_parser(
        "compare",
        help="two runs' recorded metrics step by step (say, a run under DeepSpeed and its plain run)",
    )
    p.add_argument("run_a", type=Path, help="results/<grid>/runs/<run_id>")
    p.add_argument("run_b", type=Path, help="the run to compare it with (the reference)")
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance (default 1e-3)")
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance (default 1e-4)")
    p.add_argument("--steps", type=int, default=None, metavar="N", help="compare steps 1..N only")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("bench", help="loss micro-benchmarks (VESPO gamma weights, every loss type)")
    if command in (None, "bench"):
        from harness import bench

        bench.add_arguments(p)
        p.set_defaults(func=bench.main)


class OutlivesItsReader:
    """A text stream (stdout or stderr) whose writes outlive its reader: after the first
    BrokenPipeError (the reader at the pipe's other end, ``tee`` or a pager, has ended, as every
    process of a terminal's pipeline does on Ctrl-C), its file descriptor points to /dev/null and
    what is written is dropped. ``run`` writes through it, so that a stop still takes its course
    (the runs in flight checkpoint at their next step, the exit status says the signal) where its
    lines can no longer be read. Everything else is the wrapped stream's."""

    def __init__(self, stream: Any):
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.stream.fileno())
        os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def main(argv: list[str] | None = None) -> int:
    prog = sys.argv[0] if argv is None else "grpo-harness"
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    known = {"plan", "run", "submit", "status", "cancel", "report", "findings", "compare", "bench"}
    args = build_parser(command if command in known else None).parse_args(argv)
    args.command_line = [prog, *argv]  # what `run` prints to resume, when a signal stops it
    if args.command == "run":  # a grid outlives its output's reader (`| tee`, `| head`)
        sys.stdout, sys.stderr = OutlivesItsReader(sys.stdout), OutlivesItsReader(sys.stderr)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:  # Ctrl-C outside a grid's training (its check, a report, a table)
        print("\ninterrupted (SIGINT)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
