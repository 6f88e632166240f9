"""SLURM through submitit: submit a grid as job arrays, tell run states, cancel.

The run's own files are the truth (DONE, DIVERGED, FAILED markers, metrics); SLURM's queue is a hint
used only to tell queued and running jobs apart from finished ones, so ``status`` stays right when
``sacct`` is missing or accounting is off. Every submit of a grid holds a file lock on the grid's
folder while it decides what to submit and records the job ids, so two submits at the same moment
never submit a run twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from harness import layout
from harness.grid import RunSpec
from harness.metrics import atomic_write_json
from harness.spec import ExecutorSettings

JOB_FILE = layout.JOB_FILE
FAILED_FILE = layout.FAILED_FILE
SUBMIT_LOCK = ".submit.lock"
SNAPSHOTS_DIR = ".snapshots"
SLURM_LOGS_DIR = "slurm_logs"


def _run(cmd: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def slurm_available() -> str | None:
    """None when a SLURM controller answers here, else the reason it does not."""
    if shutil.which("sbatch") is None or shutil.which("squeue") is None:
        return "sbatch/squeue not on PATH"
    out = _run(["sinfo", "-h", "-o", "%T"], timeout=15)
    if out is None or out.returncode != 0:
        return f"sinfo failed: {(out.stderr.strip() if out else 'no answer')[:200]}"
    if not out.stdout.strip():
        return "sinfo lists no nodes"
    return None


def unknown_partitions(executors: Iterable[ExecutorSettings]) -> list[str]:
    """Partitions the executors name that this cluster's ``sinfo`` does not list ([] when sinfo
    cannot tell). A comma-separated ``partition`` names several, as in sbatch."""
    out = _run(["sinfo", "-h", "-o", "%R"], timeout=15)
    if out is None or out.returncode != 0:
        return []
    known = {line.strip() for line in out.stdout.splitlines() if line.strip()}
    wanted = {p.strip() for e in executors if e.partition for p in e.partition.split(",") if p.strip()}
    return sorted(wanted - known)


def max_array_size() -> int:
    """The cluster's ``MaxArraySize`` (scontrol show config); 1001, SLURM's default, when unknown."""
    out = _run(["scontrol", "show", "config"])
    if out is not None and out.returncode == 0:
        for line in out.stdout.splitlines():
            if line.strip().startswith("MaxArraySize"):
                try:
                    return int(line.split("=", 1)[1].strip())
                except ValueError:
                    break
    return 1001


def queue_states(job_ids: Iterable[str]) -> dict[str, str]:
    """``{job id: state}`` for the given jobs still known to the queue (squeue); array tasks as "123_4".

    Jobs that finished are absent. Returns {} when squeue is unavailable.
    """
    ids = sorted({j.split("_")[0] for j in job_ids if j})
    if not ids:
        return {}
    out = _run(["squeue", "-h", "-r", "-o", "%i %T", "-j", ",".join(ids)])
    states: dict[str, str] = {}
    if out is None or out.returncode != 0:
        return states
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1]
    return states


def accounting_states(job_ids: Iterable[str]) -> dict[str, str]:
    """``{job id: state}`` from ``sacct`` when it works (a hint only); {} when it does not."""
    ids = sorted({j.split("_")[0] for j in job_ids if j})
    if not ids or shutil.which("sacct") is None:
        return {}
    out = _run(["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(ids)])
    if out is None or out.returncode != 0:
        return {}
    states = {}
    for line in out.stdout.splitlines():
        parts = line.split("|")
        if len(parts) == 2:
            states[parts[0]] = parts[1].split()[0] if parts[1] else ""
    return states


@dataclass(frozen=True)
class RunStatus:
    """One run as ``status`` shows it."""

    run_id: str
    state: str  # pending | queued | running | requeued | done | diverged | failed | stopped
    job_id: str = ""
    last_step: int | None = None
    last_reward: float | None = None
    log: str = ""
    error: str = ""
    varying: dict | None = None


def read_json_object(path: Path) -> dict | None:
    """A JSON object file's content; None when it is missing, unreadable, not JSON or not an object."""
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):  # ValueError covers bad JSON and bad UTF-8
        return None
    return obj if isinstance(obj, dict) else None


def read_job(run_dir: Path) -> dict | None:
    """The run's submission record (job id, snapshot, log folder), or None if never submitted
    (or the record is damaged: the run then counts as not submitted)."""
    job = read_json_object(run_dir / JOB_FILE)
    if job is None or not isinstance(job.get("job_id", ""), str):
        return None
    return job


def run_status(
    run_dir: Path,
    queue: dict[str, str],
    accounting: dict[str, str] | None = None,
    planned: dict[str, Any] | None = None,
) -> RunStatus:
    """State of one run from its files, with SLURM's queue state as a hint for unfinished runs.

    Order of truth: DONE > DIVERGED > FAILED marker > queue (queued/running/requeued) > the job left
    the queue without a marker ("failed" with SLURM's final state when sacct knows it, else "stopped")
    > a local run: "running" while its process lives, else "stopped" (interrupted; resumable)
    > never started ("pending"). ``planned``: the run's varying values from ``grid.json``, shown until
    the run writes its own ``config.json``.
    """
    run_id = run_dir.name
    job = read_job(run_dir) or {}
    job_id = job.get("job_id", "")
    from harness.metrics import last_step_and_reward

    step, reward = last_step_and_reward(run_dir)
    log = job.get("stderr", "")
    log = log if isinstance(log, str) else ""
    config = (read_json_object(run_dir / layout.CONFIG_FILE) or {}).get("varying")
    if not isinstance(config, dict):
        config = planned if isinstance(planned, dict) else {}
    base = {"run_id": run_id, "job_id": job_id, "last_step": step, "last_reward": reward, "varying": config}
    if (run_dir / layout.DONE_FILE).exists():
        return RunStatus(state="done", **base)
    if (run_dir / layout.DIVERGED_FILE).exists():
        return RunStatus(state="diverged", log=log, **base)
    failed = run_dir / FAILED_FILE
    if failed.exists() and job_id not in queue:
        info = read_json_object(failed) or {}
        return RunStatus(state="failed", log=info.get("log", log), error=info.get("error", ""), **base)
    if job_id and job_id in queue:
        q = queue[job_id]
        if q == "RUNNING":
            state = "running"
        elif q.startswith("REQUEUE") or job.get("requeued"):
            state = "requeued"
        else:
            state = "queued"
        return RunStatus(state=state, **base)
    if job_id:
        final = (accounting or {}).get(job_id, "")
        from harness.executors import last_error_line

        error = ""
        with contextlib.suppress(OSError):
            # a log cut mid-write can end inside a multi-byte character
            error = last_error_line(Path(log).read_text(errors="replace")) if log else ""
        if log and not Path(log).exists():
            log = ""  # the job never started, so SLURM wrote no log
        if final.startswith("CANCELLED"):
            return RunStatus(
                state="stopped", log=log, error=error or f"slurm: {final}; submit again to resume", **base
            )
        if final and final != "COMPLETED":
            return RunStatus(state="failed", log=log, error=error or f"slurm: {final}", **base)
        if not error and not (run_dir / layout.CONFIG_FILE).exists():
            error = f"job {job_id} left the queue before the run started (cancelled?); submit again to run it"
        return RunStatus(state="stopped", log=log, error=error, **base)
    if (run_dir / layout.CONFIG_FILE).exists():  # started by a local `run`
        if _owner_alive(run_dir):
            return RunStatus(state="running", **base)
        where = f" at step {step}" if step is not None else ""
        return RunStatus(
            state="stopped", error=f"interrupted{where}; running the grid again resumes it", **base
        )
    return RunStatus(state="pending", **base)


def _owner_alive(run_dir: Path) -> bool:
    """Whether the process that wrote the run's owner file (a local run) is alive on this host."""
    owner = read_json_object(run_dir / layout.OWNER_FILE)
    if owner is None:
        return False
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False  # os.kill(0 or -1, 0) would signal a group and always succeed
    if owner.get("host") != socket.gethostname():
        return True  # another machine's process: cannot tell, trust the file (removed at exit)
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True  # alive, another user's
    except (ProcessLookupError, OverflowError):
        return False
    return True


def grid_run_dirs(grid_dir: Path, all_runs: bool = False) -> list[Path]:
    """Run folders of the grid as last planned (grid.json), or every run folder with ``all_runs``."""
    runs = grid_dir / layout.RUNS_DIR
    if not all_runs and (info := layout.read_grid(grid_dir)) is not None:
        ids = info.get("run_ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) and "/" not in i for i in ids):
            raise ValueError(f"{grid_dir / layout.GRID_FILE}: no list of run ids")
        return [runs / i for i in ids]
    return sorted(p for p in runs.iterdir() if p.is_dir()) if runs.exists() else []


def grid_status(grid_dir: Path, all_runs: bool = False) -> list[RunStatus]:
    """Status of every run of a grid folder (see :func:`run_status`)."""
    dirs = grid_run_dirs(grid_dir, all_runs)
    jobs = [(read_job(d) or {}).get("job_id", "") for d in dirs]
    queue = queue_states(jobs)
    pending_ids = [j for d, j in zip(dirs, jobs, strict=True) if j and not (d / layout.DONE_FILE).exists()]
    accounting = accounting_states(j for j in pending_ids if j not in queue)
    try:
        planned = (layout.read_grid(grid_dir) or {}).get("runs")
    except ValueError:  # a damaged grid.json (listed with all_runs): no planned values to show
        planned = None
    planned = planned if isinstance(planned, dict) else {}
    return [run_status(d, queue, accounting, planned.get(d.name)) for d in dirs]


@contextlib.contextmanager
def code_snapshot(grid_dir: Path) -> Iterator[tuple[Path, str | None]]:
    """Copy the harness's code to ``<grid>/.snapshots/<time>/`` and work from there while submitting.

    Jobs start in the snapshot (sbatch keeps the submitting directory) and import ``harness`` and
    ``analysis`` from it ahead of the installed checkout, so editing the checkout while jobs wait in
    the queue does not change what they run. Yields the snapshot folder and the git commit (with a
    "-dirty" suffix when the checkout had uncommitted changes), or None outside git.
    """
    import harness

    root = Path(harness.__file__).resolve().parent.parent
    from harness.metrics import _git

    commit = _git("rev-parse", "HEAD")
    if commit and _git("status", "--porcelain", "--untracked-files=no"):
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
    cwd = os.getcwd()
    os.chdir(snap)
    try:
        yield snap, commit
    finally:
        os.chdir(cwd)


def resources_of(executor: ExecutorSettings) -> dict[str, Any]:
    """submitit ``update_parameters`` keywords for SLURM from the executor settings."""
    params: dict[str, Any] = {
        "timeout_min": executor.timeout_min,
        "nodes": executor.nodes,
        "tasks_per_node": executor.tasks_per_node,
        "slurm_array_parallelism": executor.array_parallelism,
        "slurm_signal_delay_s": 60,
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


def pending_runs(runs: Sequence[RunSpec], grid_dir: Path, retry_failed: bool = False) -> tuple[list, dict]:
    """Runs to submit, and the others by reason (done, queued/running, failed without --retry-failed).

    Runs whose job left the queue without any marker (killed, or DONE deleted by hand) are submitted
    again; runs with a FAILED or DIVERGED marker only with ``retry_failed``.
    """
    dirs = {r.run_id: layout.run_dir(grid_dir, r.run_id) for r in runs}
    jobs = {rid: (read_job(d) or {}).get("job_id", "") for rid, d in dirs.items()}
    queue = queue_states(jobs.values())
    todo, skipped = [], {"done": [], "queued or running": [], "failed (use --retry-failed)": []}
    for run in runs:
        d = dirs[run.run_id]
        if (d / layout.DONE_FILE).exists():
            skipped["done"].append(run.run_id)
        elif jobs[run.run_id] and jobs[run.run_id] in queue:
            skipped["queued or running"].append(run.run_id)
        elif ((d / FAILED_FILE).exists() or (d / layout.DIVERGED_FILE).exists()) and not retry_failed:
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
    ``MaxArraySize`` tasks. ``hold=True`` submits held jobs (for benchmarks). Each run's job id is
    recorded in ``runs/<id>/job.json`` before the grid's submit lock is released.

    Raises:
        RuntimeError: sbatch failed (its message included); runs of that array are not recorded.
    """
    grid_dir = Path(grid_dir).resolve()
    if not dry_run:
        grid_dir.mkdir(parents=True, exist_ok=True)
    # a dry run writes nothing, not even the lock file
    with FileLock(str(grid_dir / SUBMIT_LOCK)) if not dry_run else contextlib.nullcontext():
        todo, skipped = pending_runs(runs, grid_dir, retry_failed)
        for reason, ids in skipped.items():
            printer(f"skipped {len(ids)} run(s): {reason}")
        result = SubmitResult(arrays=[], submitted=[], skipped=skipped)
        if not todo:
            printer("nothing to submit")
            return result
        limit = max_array_size() - 1
        plans = []
        for settings, group in group_by_resources(todo, executor):
            chunks = [group[i : i + limit] for i in range(0, len(group), limit)]
            plans.append((settings, chunks))
            cpus = resources_of(settings)["cpus_per_task"]
            mem = settings.mem_gb if settings.mem_gb is not None else "default"
            printer(
                f"submitting {len(group)} run(s) as {len(chunks)} array(s) of at most {limit}; "
                f"per run: {settings.nodes} node(s) x {settings.tasks_per_node} task(s), "
                f"{cpus} CPU(s)/task, {settings.gpus_per_node} GPU(s)/node, {mem} GB, "
                f"{settings.timeout_min} min; {gpu_hours(len(group), settings):.1f} GPU-hours requested"
            )
        if dry_run:
            return result
        for rid in (r.run_id for r in todo):
            for marker in (FAILED_FILE, layout.DIVERGED_FILE):
                (layout.run_dir(grid_dir, rid) / marker).unlink(missing_ok=True)
        with code_snapshot(grid_dir) as (snap, commit):
            result.snapshot = snap
            try:
                for settings, chunks in plans:
                    for chunk in chunks:
                        _submit_array(settings, chunk, grid_dir, snap, commit, hold, result)
                        printer(
                            f"submitted array job {result.arrays[-1][0]} ({result.arrays[-1][1]} task(s))"
                        )
            except RuntimeError:
                if not result.arrays:  # no job will ever read this snapshot
                    shutil.rmtree(snap, ignore_errors=True)
                raise
    return result


def group_by_resources(
    runs: Sequence[RunSpec], executor: ExecutorSettings
) -> list[tuple[ExecutorSettings, list]]:
    """Runs grouped by the executor settings they resolve to (the grid's, updated by each run's own)."""
    import dataclasses

    from harness.grid import canonical_json

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

    from harness.executors import RunJob

    params = resources_of(settings)
    setup = [
        f"export OMP_NUM_THREADS={settings.threads_per_run}",
        f"export HARNESS_SNAPSHOT_COMMIT={commit or 'unknown'}",
        f"export PYTHONPATH={snap}${{PYTHONPATH:+:$PYTHONPATH}}",
        *settings.setup,
    ]
    ex = submitit.AutoExecutor(folder=grid_dir / SLURM_LOGS_DIR / "%j", cluster="slurm")
    extra = dict(params.pop("slurm_additional_parameters", {}))
    if hold:
        extra["hold"] = True
    params.setdefault("name", f"grpo-{grid_dir.name}")  # squeue shows the grid, not "submitit"
    ex.update_parameters(**params, slurm_setup=setup, slurm_additional_parameters=extra)
    jobs = [RunJob(r, str(layout.run_dir(grid_dir, r.run_id)), settings.threads_per_run) for r in chunk]
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
            rdir / JOB_FILE,
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
