"""What state each run of a grid is in: one vocabulary (``harness.layout.RUN_STATES``) for ``plan``,
``run``, ``submit``, ``status`` and ``report``.

The run's own files are the truth (``DONE``, ``DIVERGED``, ``FAILED`` markers, metrics, the owner
file of a local run); SLURM's queue is a hint used only to tell queued, running and requeued jobs
apart from ended ones, so ``status`` stays right when ``sacct`` is missing or accounting is off.

Order of truth, first match wins:

========== ===================================================================================
done       ``DONE``
diverged   ``DIVERGED``
failed     ``FAILED`` and the job is not in the queue (a requeued job clears it when it starts)
queued     the job is in the queue, pending (``running``, ``requeued`` likewise)
failed     the job left the queue without a marker and ``sacct`` says it ended badly
stopped    the job left the queue without a marker (cancelled, killed, or unknown to sacct); or a
           local run whose owner process is gone: interrupted, resumable
running    a local run whose owner process lives
pending    never started
========== ===================================================================================
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import layout
from harness.layout import read_json_object

__all__ = [
    "RunStatus",
    "accounting_states",
    "grid_run_dirs",
    "grid_status",
    "last_error_line",
    "latest_reward",
    "queue_states",
    "read_job",
    "run_status",
    "scheduler_command",
]


def scheduler_command(cmd: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess | None:
    """Run a scheduler command; None when it cannot be started or times out."""
    try:
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def queue_states(job_ids: Iterable[str]) -> dict[str, str]:
    """``{job id: state}`` for the given jobs still known to the queue (squeue); array tasks as "123_4".

    Jobs that finished are absent. Returns {} when squeue is unavailable.
    """
    ids = sorted({j.split("_")[0] for j in job_ids if j})
    if not ids:
        return {}
    out = scheduler_command(["squeue", "-h", "-r", "-o", "%i %T", "-j", ",".join(ids)])
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
    out = scheduler_command(["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(ids)])
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
    """One run as ``status`` shows it; ``state`` is one of :data:`harness.layout.RUN_STATES`."""

    run_id: str
    state: str
    job_id: str = ""
    last_step: int | None = None
    last_reward: float | None = None
    log: str = ""
    error: str = ""
    varying: dict | None = None


def read_job(run_dir: Path) -> dict | None:
    """The run's submission record (job id, snapshot, log folder), or None if never submitted
    (or the record is damaged: the run then counts as not submitted)."""
    job = read_json_object(run_dir / layout.JOB_FILE)
    if job is None or not isinstance(job.get("job_id", ""), str):
        return None
    return job


def last_error_line(text: str) -> str:
    """The last line of a log or traceback that names an error (or the last line)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln and not ln.startswith(("File ", "^", "~")) and ("Error" in ln or "Exception" in ln):
            return ln
    return lines[-1] if lines else ""


def latest_reward(run_dir: Path) -> float | None:
    """The run's last logged reward, or None."""
    from harness.metrics import last_step_and_reward

    return last_step_and_reward(run_dir)[1]


def run_status(
    run_dir: Path,
    queue: dict[str, str],
    accounting: dict[str, str] | None = None,
    planned: dict[str, Any] | None = None,
) -> RunStatus:
    """State of one run from its files, with SLURM's queue state as a hint for unfinished runs
    (the order of truth is in the module docstring).

    Args:
        run_dir: ``results/<grid>/runs/<run_id>``.
        queue: :func:`queue_states` of the grid's jobs.
        accounting: :func:`accounting_states` of its jobs that left the queue.
        planned: the run's varying values from ``grid.json``, shown until the run writes its own
            ``config.json``.
    """
    job = read_job(run_dir) or {}
    job_id = job.get("job_id", "")
    from harness.metrics import last_step_and_reward

    step, reward = last_step_and_reward(run_dir)
    log = job.get("stderr", "")
    log = log if isinstance(log, str) else ""
    config = (read_json_object(run_dir / layout.CONFIG_FILE) or {}).get("varying")
    if not isinstance(config, dict):
        config = planned if isinstance(planned, dict) else {}
    base = {
        "run_id": run_dir.name,
        "job_id": job_id,
        "last_step": step,
        "last_reward": reward,
        "varying": config,
    }
    state = layout.files_state(run_dir)
    if state in (layout.DONE, layout.DIVERGED):
        return RunStatus(state=state, log="" if state == layout.DONE else log, **base)
    if state == layout.FAILED and job_id not in queue:
        info = read_json_object(run_dir / layout.FAILED_FILE) or {}
        return RunStatus(state=state, log=info.get("log", log), error=info.get("error", ""), **base)
    if job_id and job_id in queue:
        q = queue[job_id]
        if q == "RUNNING":
            return RunStatus(state=layout.RUNNING, **base)
        requeued = q.startswith("REQUEUE") or job.get("requeued")
        return RunStatus(state=layout.REQUEUED if requeued else layout.QUEUED, **base)
    if job_id:
        return _left_the_queue(run_dir, job_id, (accounting or {}).get(job_id, ""), log, base)
    if state == layout.STOPPED:  # started by a local `run`, its process gone
        where = f" at step {step}" if step is not None else ""
        return RunStatus(state=state, error=f"interrupted{where}; running the grid again resumes it", **base)
    return RunStatus(state=state, **base)


def _left_the_queue(run_dir: Path, job_id: str, final: str, log: str, base: dict[str, Any]) -> RunStatus:
    """A submitted run whose job is no longer queued and that has no end marker: ``failed`` when
    sacct says the job ended badly, else ``stopped`` (cancelled, killed, or never started)."""
    error = ""
    with contextlib.suppress(OSError):
        # a log cut mid-write can end inside a multi-byte character
        error = last_error_line(Path(log).read_text(errors="replace")) if log else ""
    if log and not Path(log).exists():
        log = ""  # the job never started, so SLURM wrote no log
    if final.startswith("CANCELLED"):
        return RunStatus(
            state=layout.STOPPED, log=log, error=error or f"slurm: {final}; submit again to resume", **base
        )
    if final and final != "COMPLETED":
        return RunStatus(state=layout.FAILED, log=log, error=error or f"slurm: {final}", **base)
    if not error and not (run_dir / layout.CONFIG_FILE).exists():
        error = f"job {job_id} left the queue before the run started (cancelled?); submit again to run it"
    return RunStatus(state=layout.STOPPED, log=log, error=error, **base)


def grid_run_dirs(grid_dir: Path, all_runs: bool = False) -> list[Path]:
    """Run folders of the grid as last planned (grid.json), or every run folder with ``all_runs``.

    Raises:
        ValueError: ``grid.json`` is damaged or holds no list of run ids.
    """
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
