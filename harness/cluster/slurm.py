"""SLURM through submitit: submit a grid as job arrays, and cancel them.

What state a run is in is :mod:`harness.cluster.status`'s question; this module only submits and asks the
scheduler. Every submit of a grid holds a file lock on the grid's folder while it decides what to
submit and records the job ids, so two submits at the same moment never submit a run twice.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from harness import layout
from harness.cluster.status import (
    accounting_states,
    grid_run_dirs,
    queue_states,
    read_job,
    run_status,
    scheduler_command,
)
from harness.layout import atomic_write_json
from harness.settings.runs import RunSpec
from harness.settings.schema import ExecutorSettings, canonical_json
from harness.train import ending

SUBMIT_LOCK = ".submit.lock"
SNAPSHOTS_DIR = ".snapshots"
SLURM_LOGS_DIR = "slurm_logs"


def slurm_available() -> str | None:
    """None when a SLURM controller answers here, else the reason it does not."""
    if shutil.which("sbatch") is None or shutil.which("squeue") is None:
        return "sbatch/squeue not on PATH"
    out = scheduler_command(["sinfo", "-h", "-o", "%T"], timeout=15)
    if out is None or out.returncode != 0:
        return f"sinfo failed: {(out.stderr.strip() if out else 'no answer')[:200]}"
    if not out.stdout.strip():
        return "sinfo lists no nodes"
    return None


def unknown_partitions(executors: Iterable[ExecutorSettings]) -> list[str]:
    """Partitions the executors name that this cluster's ``sinfo`` does not list ([] when sinfo
    cannot tell). A comma-separated ``partition`` names several, as in sbatch."""
    out = scheduler_command(["sinfo", "-h", "-o", "%R"], timeout=15)
    if out is None or out.returncode != 0:
        return []
    known = {line.strip() for line in out.stdout.splitlines() if line.strip()}
    wanted = {p.strip() for e in executors if e.partition for p in e.partition.split(",") if p.strip()}
    return sorted(wanted - known)


def max_array_size() -> int:
    """The cluster's ``MaxArraySize`` (scontrol show config); 1001, SLURM's default, when unknown."""
    out = scheduler_command(["scontrol", "show", "config"])
    if out is not None and out.returncode == 0:
        for line in out.stdout.splitlines():
            if line.strip().startswith("MaxArraySize"):
                try:
                    return int(line.split("=", 1)[1].strip())
                except ValueError:
                    break
    return 1001


@contextlib.contextmanager
def code_snapshot(grid_dir: Path) -> Iterator[tuple[Path, str | None]]:
    """Copy the harness's code to ``<grid>/.snapshots/<time>/`` for the jobs submitted meanwhile.

    Jobs start in the snapshot (``--chdir``, see :func:`_submit_array`) and import ``harness`` and
    ``analysis`` from it ahead of the installed checkout (the working folder comes first on
    ``sys.path``), so editing the checkout while jobs wait in the queue does not change what they
    run. Yields the snapshot folder and the git commit (with a "-dirty" suffix when the checkout
    had uncommitted changes), or None outside git.
    """
    import harness

    root = Path(harness.__file__).resolve().parent.parent
    commit, dirty = layout.code_commit()
    if commit and dirty:
        commit += "-dirty"
    snap = grid_dir.resolve() / SNAPSHOTS_DIR / time.strftime("%Y%m%d-%H%M%S")
    n = 0
    while snap.exists():
        n += 1
        snap = snap.with_name(f"{snap.name.split('.')[0]}.{n}")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for pkg in ("harness", "analysis"):
        shutil.copytree(root / pkg, snap / pkg, ignore=ignore)
    if commit:
        (snap / "COMMIT").write_text(commit + "\n")
    yield snap, commit


def resources_of(executor: ExecutorSettings) -> dict[str, Any]:
    """submitit ``update_parameters`` keywords for SLURM from the executor settings."""
    params: dict[str, Any] = {
        "timeout_min": executor.timeout_min,
        "nodes": executor.nodes,
        "tasks_per_node": executor.tasks_per_node,
        "slurm_array_parallelism": executor.array_parallelism,
        # USR2 this long before the time limit (a checkpoint at the next step, then a requeue);
        # a quarter of a short limit, so a 1-minute job is not signalled as it starts
        "slurm_signal_delay_s": min(60, max(5, executor.timeout_min * 15)),
    }
    if executor.gpus_per_node:
        params["gpus_per_node"] = executor.gpus_per_node
    params["cpus_per_task"] = executor.cpus_per_task or executor.threads_per_run
    if executor.mem_gb is not None:
        params["mem_gb"] = executor.mem_gb
    for name in ("partition", "account", "qos", "constraint"):
        value = getattr(executor, name)
        if value:
            params[f"slurm_{name}"] = value
    if executor.additional_parameters:
        params["slurm_additional_parameters"] = dict(executor.additional_parameters)
    return params


def gpu_hours(n_runs: int, executor: ExecutorSettings) -> float:
    """GPU-hours requested: runs x nodes x GPUs per node x time limit (hours)."""
    return n_runs * executor.nodes * executor.gpus_per_node * executor.timeout_min / 60


@dataclass
class SubmitResult:
    """What a submit did: job ids per array, runs submitted, and runs skipped by reason."""

    arrays: list[tuple[str, int]]  # (array job id, tasks)
    submitted: list[str]
    skipped: dict[str, list[str]]  # reason -> run ids
    snapshot: Path | None = None


def pending_runs(
    runs: Sequence[RunSpec], grid_dir: Path, retry_failed: bool = False, record: bool = False
) -> tuple[list, dict]:
    """Runs to submit, and the others by reason, from each run's state (:mod:`harness.cluster.status`).

    Pending and stopped runs are submitted: never started, or interrupted, cancelled, preempted,
    timed out or on a failed node (they resume from their checkpoint). Failed and diverged runs
    (a marker, or a job that ran out of memory or failed) only with ``retry_failed``; done, queued
    and running runs never. With ``record``, a run whose job the scheduler ended without the
    attempt saying so gets that ending in its attempts log (:func:`harness.train.ending.record_missing_end`).
    """
    dirs = {r.run_id: layout.run_dir(grid_dir, r.run_id) for r in runs}
    jobs = {rid: (read_job(d) or {}).get("job_id", "") for rid, d in dirs.items()}
    queue = queue_states(jobs.values())
    ended = [
        j for rid, j in jobs.items() if j and j not in queue and layout.files_state(dirs[rid]) != layout.DONE
    ]
    accounting = accounting_states(ended)
    todo, skipped = [], {"done": [], "queued or running": [], "failed (use --retry-failed)": []}
    for run in runs:
        row = run_status(dirs[run.run_id], queue, accounting)
        state = row.state
        if record and row.job_id and state in (layout.STOPPED, layout.FAILED):
            ending.record_missing_end(dirs[run.run_id], row.error, ending.BY_SCHEDULER)
        if state == layout.DONE:
            skipped["done"].append(run.run_id)
        elif state in (layout.QUEUED, layout.RUNNING, layout.REQUEUED):
            skipped["queued or running"].append(run.run_id)
        elif state in (layout.FAILED, layout.DIVERGED) and not retry_failed:
            skipped["failed (use --retry-failed)"].append(run.run_id)
        else:
            todo.append(run)
    return todo, {k: v for k, v in skipped.items() if v}


def submit(
    runs: Sequence[RunSpec],
    grid_dir: Path,
    executor: ExecutorSettings,
    retry_failed: bool = False,
    hold: bool = False,
    dry_run: bool = False,
    printer=print,
) -> SubmitResult:
    """Submit every pending run of ``runs`` as SLURM job arrays (one ``sbatch`` per array).

    Runs are grouped by the resources they resolve to (the grid's executor block updated by each
    run's own ``executor.*`` settings); each group goes in arrays of at most the cluster's
    ``MaxArraySize - 1`` tasks. ``hold=True`` submits held jobs (for benchmarks). Each run's job id is
    recorded in ``runs/<id>/job.json`` before the grid's submit lock is released.

    Raises:
        RuntimeError: sbatch failed (its message included); runs of that array are not recorded.
    """
    grid_dir = Path(grid_dir).resolve()
    if not dry_run:
        grid_dir.mkdir(parents=True, exist_ok=True)
    # a dry run writes nothing, not even the lock file
    with FileLock(str(grid_dir / SUBMIT_LOCK)) if not dry_run else contextlib.nullcontext():
        todo, skipped = pending_runs(runs, grid_dir, retry_failed, record=not dry_run)
        for reason, ids in skipped.items():
            printer(f"skipped {len(ids)} run(s): {reason}")
        result = SubmitResult(arrays=[], submitted=[], skipped=skipped)
        if not todo:
            printer("nothing to submit")
            return result
        plans = _array_plans(todo, executor, printer)
        if dry_run:
            return result
        for rid in (r.run_id for r in todo):
            ending.clear_markers(layout.run_dir(grid_dir, rid))
        with code_snapshot(grid_dir) as (snap, commit):
            result.snapshot = snap
            try:
                for settings, chunk in plans:
                    _submit_array(settings, chunk, grid_dir, snap, commit, hold, result)
                    printer(f"submitted array job {result.arrays[-1][0]} ({result.arrays[-1][1]} task(s))")
            except RuntimeError:
                if not result.arrays:  # no job will ever read this snapshot
                    shutil.rmtree(snap, ignore_errors=True)
                raise
    return result


def _array_plans(
    todo: Sequence[RunSpec], executor: ExecutorSettings, printer
) -> list[tuple[ExecutorSettings, Sequence[RunSpec]]]:
    """``(resources, runs)`` of each array to submit: runs grouped by the resources they resolve to,
    each group cut into arrays of at most the cluster's ``MaxArraySize - 1`` tasks; what each group
    asks for is printed."""
    limit = max_array_size() - 1
    plans = []
    for settings, group in group_by_resources(todo, executor):
        chunks = [group[i : i + limit] for i in range(0, len(group), limit)]
        plans += [(settings, chunk) for chunk in chunks]
        cpus = resources_of(settings)["cpus_per_task"]
        mem = settings.mem_gb if settings.mem_gb is not None else "default"
        printer(
            f"submitting {len(group)} run(s) as {len(chunks)} array(s) of at most {limit}; "
            f"per run: {settings.nodes} node(s) x {settings.tasks_per_node} task(s), "
            f"{cpus} CPU(s)/task, {settings.gpus_per_node} GPU(s)/node, {mem} GB, "
            f"{settings.timeout_min} min; {gpu_hours(len(group), settings):.1f} GPU-hours requested"
        )
    return plans


def group_by_resources(
    runs: Sequence[RunSpec], executor: ExecutorSettings
) -> list[tuple[ExecutorSettings, list]]:
    """Runs grouped by the executor settings they resolve to (the grid's, updated by each run's own)."""
    import dataclasses

    groups: dict[str, tuple[ExecutorSettings, list]] = {}
    for run in runs:
        settings = run.executor_settings(executor)
        groups.setdefault(canonical_json(dataclasses.asdict(settings)), (settings, []))[1].append(run)
    return list(groups.values())


def _submit_array(
    settings: ExecutorSettings,
    chunk: Sequence[RunSpec],
    grid_dir: Path,
    snap: Path,
    commit: str | None,
    hold: bool,
    result: SubmitResult,
) -> None:
    """One ``sbatch`` for ``chunk``; records each run's job id in its ``job.json``."""
    import submitit

    from harness.cluster.executors import TrainingJob

    params = resources_of(settings)
    setup = [
        f"export OMP_NUM_THREADS={settings.threads_per_run}",
        f"export HARNESS_SNAPSHOT_COMMIT={commit or 'unknown'}",
        f"export PYTHONPATH={snap}${{PYTHONPATH:+:$PYTHONPATH}}",
        *settings.setup,
    ]
    ex = submitit.AutoExecutor(folder=grid_dir / SLURM_LOGS_DIR / "%j", cluster="slurm")
    extra = dict(params.pop("slurm_additional_parameters", {}))
    extra.setdefault("chdir", str(snap))  # the job's working folder, first on its sys.path
    if hold:
        extra["hold"] = True
    params.setdefault("name", f"grpo-{grid_dir.name}")  # squeue shows the grid, not "submitit"
    ex.update_parameters(**params, slurm_setup=setup, slurm_additional_parameters=extra)
    jobs = [TrainingJob(r, str(layout.run_dir(grid_dir, r.run_id)), settings.threads_per_run) for r in chunk]
    logs = grid_dir / SLURM_LOGS_DIR
    before = set(logs.iterdir()) if logs.exists() else set()
    try:
        submitted = ex.submit_array(jobs)
    except Exception as e:  # submitit raises its own error type carrying sbatch's stderr
        for f in (set(logs.iterdir()) if logs.exists() else set()) - before:
            if f.is_file():  # submitit's pickles and script for the array that was not submitted
                f.unlink(missing_ok=True)
        raise RuntimeError(f"sbatch failed: {e}") from e
    array_id = submitted[0].job_id.split("_")[0]
    result.arrays.append((array_id, len(submitted)))
    for run, job in zip(chunk, submitted, strict=True):
        rdir = layout.run_dir(grid_dir, run.run_id)
        rdir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(
            rdir / layout.JOB_FILE,
            {
                "job_id": job.job_id,
                "array_job_id": array_id,
                "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "snapshot": str(snap),
                "commit": commit,
                "stdout": str(job.paths.stdout),
                "stderr": str(job.paths.stderr),
            },
        )
        result.submitted.append(run.run_id)


def cancel(grid_dir: Path) -> list[str]:
    """``scancel`` every queued or running job of the grid's runs; returns the job ids cancelled."""
    dirs = grid_run_dirs(Path(grid_dir), all_runs=True)
    jobs = [(read_job(d) or {}).get("job_id", "") for d in dirs]
    queue = queue_states(jobs)
    active = [j for j in jobs if j in queue]
    if active:
        # whole arrays in one id each when all their tasks are ours, else task by task
        arrays: dict[str, list[str]] = {}
        for j in active:
            arrays.setdefault(j.split("_")[0], []).append(j)
        queued_per_array = {a: sum(1 for q in queue if q.split("_")[0] == a) for a in arrays}
        targets = [a if len(ids) == queued_per_array[a] else " ".join(ids) for a, ids in arrays.items()]
        subprocess.run(
            ["scancel", *" ".join(targets).split()], check=False, capture_output=True, text=True, timeout=60
        )
    return active
