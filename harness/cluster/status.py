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
from harness.train import checkpoints, ending

__all__ = [
    "RunStatus",
    "accounting_states",
    "grid_run_dirs",
    "grid_status",
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
    from harness.layout import last_step_and_reward

    step, reward = last_step_and_reward(run_dir)
    progress = layout.read_progress(run_dir)  # rewritten every step; the metrics every few
    if progress is not None and (step is None or progress["step"] > step):
        step = progress["step"]
        reward = progress.get("reward") if isinstance(progress.get("reward"), int | float) else reward
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
        line = end_line(run_dir, state, step)
        return RunStatus(state=state, log="" if state == layout.DONE else log, error=line, **base)
    if state == layout.FAILED and job_id not in queue:
        info = read_json_object(run_dir / layout.FAILED_FILE) or {}
        line = end_line(run_dir, state, step)
        return RunStatus(state=state, log=info.get("log", log), error=line, **base)
    if job_id and job_id in queue:
        q = queue[job_id]
        if q == "RUNNING":
            return RunStatus(state=layout.RUNNING, **base)
        requeued = q.startswith("REQUEUE") or job.get("requeued")
        return RunStatus(state=layout.REQUEUED if requeued else layout.QUEUED, **base)
    if job_id:
        return _left_the_queue(run_dir, job_id, (accounting or {}).get(job_id, ""), log, base)
    if state == layout.STOPPED:  # started by a local `run`, its process gone
        return RunStatus(state=state, error=end_line(run_dir, state, step), **base)
    return RunStatus(state=state, **base)


def end_line(run_dir: Path, state: str, step: int | None = None) -> str:
    """What happened to a run that no process trains now, in one line, from its own files.

    done: nothing, or how many steps have no metrics; diverged: the step and metric; failed: the
    exception's own line (no space left is said first: the marker keeps only the error's text,
    read by :func:`harness.train.ending.says_no_space`); stopped: how it ended (its last attempt's
    end record, or none: killed) at which step, and whether and from where it resumes.
    """
    if state == layout.DONE:
        missing = (read_json_object(run_dir / layout.DONE_FILE) or {}).get("missing_steps")
        if isinstance(missing, list) and missing:
            return f"{len(missing)} step(s) without metrics (an unreadable metrics file was set aside): {_steps(missing)}"
        return ""
    if state == layout.DIVERGED:
        info = read_json_object(run_dir / layout.DIVERGED_FILE) or {}
        return f"diverged at step {info.get('step', '?')}: {info.get('metric', 'a metric')} is {info.get('value', 'not finite')}"
    if state == layout.FAILED:
        error = str((read_json_object(run_dir / layout.FAILED_FILE) or {}).get("error", "")) or "failed"
        if ending.says_no_space(error):
            return f"no space left on device ({error}); free space, then run the grid again"
        return error
    where = f" at step {step}" if step is not None else " before its first step"
    phase = layout.read_phase(run_dir) if step is None else None
    if phase is not None:  # what it was doing then: building its model, waiting for it, ...
        where += f" ({phase['phase']})"
    attempt = last_attempt(run_dir)
    then = resume_promise(run_dir, "running the grid again")
    if attempt.get("outcome") == ending.NO_SPACE:
        then = f"free space, then {then}"
    return f"{_how_it_stopped(attempt)}{where}; {then}"


def _how_it_stopped(attempt: dict[str, Any]) -> str:
    """A stopped run's last attempt in a few words: its end record's outcome, or killed when the
    attempt wrote none (no process can write after a SIGKILL)."""
    outcome = attempt.get("outcome")
    if outcome == ending.STOPPED and not attempt.get("slurm_job_id"):
        return "stopped on request (Ctrl-C or SIGTERM)"
    if outcome == ending.STOPPED:
        return "stopped on request (a preemption or time-limit signal)"
    if outcome == ending.FORCED:
        return f"{ending.FORCED} ({attempt.get('detail', 'a second signal')})"
    if outcome == ending.INTERRUPTED:
        return "interrupted (Ctrl-C, or the driver was stopped)"
    if outcome == ending.NO_SPACE:
        return f"no space left on device ({attempt.get('detail', '')})"
    if outcome == ending.KILLED:
        return KILLED_WORDS
    if outcome == ending.BY_SCHEDULER:
        return str(attempt.get("detail", outcome)).split(";")[0]
    if outcome:
        return f"ended as {outcome} ({attempt.get('detail', '')}), its marker since removed"
    return KILLED_WORDS


#: How ``status`` says an attempt that ended without a word (its end record, or none, is
#: :data:`harness.train.ending.KILLED`: a SIGKILL leaves its process no moment to write).
KILLED_WORDS = (
    "killed (its process ended without a word: kill -9, the out-of-memory killer or a lost machine)"
)


def _steps(steps: list) -> str:
    shown = ", ".join(str(s) for s in steps[:8])
    return shown + (f" and {len(steps) - 8} more" if len(steps) > 8 else "")


def last_attempt(run_dir: Path) -> dict[str, Any]:
    """The run's last attempt (:func:`harness.layout.read_attempts`), {} before any."""
    attempts = layout.read_attempts(run_dir)
    return attempts[-1] if attempts else {}


def resume_promise(run_dir: Path, how: str) -> str:
    """What ``how`` (running or submitting the grid again) does for a run that stopped: resume from
    its newest complete checkpoint, naming damaged newer ones, or start it over."""
    point = checkpoints.resume_point(run_dir / layout.CHECKPOINTS_DIR)
    if point.path is None:
        head = f"no complete checkpoint, so {how} starts it over"
    else:
        head = f"{how} resumes it from step {point.step}"
    damaged = "; ".join(f"{name} is damaged ({why})" for name, why in point.passed_over)
    return f"{head}; {damaged}" if damaged else head


#: How a SLURM job that left the queue without the run's own end marker ended, by its ``sacct``
#: state: the run's state and what to do. Stopped runs are submitted again by the next ``submit``
#: (they resume from their checkpoint); failed ones wait for ``--retry-failed``.
SCHEDULER_ENDS = {
    "CANCELLED": (layout.STOPPED, "cancelled"),
    "PREEMPTED": (layout.STOPPED, "preempted"),
    "TIMEOUT": (layout.STOPPED, "ran past its time limit (executor.timeout_min)"),
    "NODE_FAIL": (layout.STOPPED, "its node failed"),
    "OUT_OF_MEMORY": (
        layout.FAILED,
        "ran out of memory; raise executor.mem_gb (or lower the batch), then submit --retry-failed",
    ),
}


def _left_the_queue(run_dir: Path, job_id: str, final: str, log: str, base: dict[str, Any]) -> RunStatus:
    """A submitted run whose job is no longer queued and that has no end marker, by its ``sacct``
    state (:data:`SCHEDULER_ENDS`): stopped (resumable, resubmitted by the next ``submit``) or
    failed (waits for ``--retry-failed``); stopped too when sacct knows nothing (accounting off)."""
    error = ""
    with contextlib.suppress(OSError):
        # a log cut mid-write can end inside a multi-byte character
        error = ending.last_error_line(Path(log).read_text(errors="replace")) if log else ""
    if log and not Path(log).exists():
        log = ""  # the job never started, so SLURM wrote no log
    key = final.split()[0] if final else ""
    attempt = last_attempt(run_dir)
    if (
        attempt.get("outcome") in (ending.STOPPED, ending.INTERRUPTED, ending.NO_SPACE)
        and key not in SCHEDULER_ENDS
    ):
        # the run said it stopped (checkpointed on a signal): the scheduler's word for how the job
        # ended (FAILED for an exit code) does not make it a failure
        then = resume_promise(run_dir, "the next submit")
        return RunStatus(
            state=layout.STOPPED,
            log=log,
            error=f"slurm: job {key or 'ended'} after the run stopped; {then}",
            **base,
        )
    if key in SCHEDULER_ENDS:
        state, what = SCHEDULER_ENDS[key]
        then = resume_promise(run_dir, "the next submit") if state == layout.STOPPED else ""
        line = f"slurm: job {key} ({what})" + (f"; {then}" if then else "")
        return RunStatus(state=state, log=log, error=line, **base)
    if final and final != "COMPLETED":
        line = (
            f"slurm: job {final}" + (f": {error}" if error else "") + "; fix it, then submit --retry-failed"
        )
        return RunStatus(state=layout.FAILED, log=log, error=line, **base)
    if not (run_dir / layout.CONFIG_FILE).exists() and not error:
        error = f"job {job_id} left the queue before the run started (cancelled?); the next submit runs it"
    else:
        error = f"{error or 'its job left the queue'}; {resume_promise(run_dir, 'the next submit')}"
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
