"""Executing runs through submitit: "local" (a process per run), "debug" (in-process), "slurm".

The layer is thin on purpose: a run is one picklable callable (:class:`TrainingJob`), and the executors
differ only in how submitit is set up. Local execution never runs more jobs at once than
``max_parallel`` (default: cores // threads_per_run), each with its torch threads set to match.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import submitit

from harness import layout
from harness.cluster.status import end_line, resume_promise
from harness.layout import last_step_and_reward
from harness.settings.runs import RunSpec
from harness.settings.schema import ExecutorSettings
from harness.train import ending


class TrainingJob(submitit.helpers.Checkpointable):
    """The callable every executor runs: ``harness.train.training.train(spec, run_dir)``.

    Preemption and time limits: submitit sends USR2 shortly before SLURM stops the job. The handler
    installed here only sets a flag; the run saves a trainer checkpoint at the next optimizer-step
    boundary and stops, and then submitit's own handler is called, which calls :meth:`checkpoint`
    (requeue the same callable), requeues the job and exits. The requeued job resumes from that
    checkpoint. SIGTERM in a SLURM job (``scontrol requeue``, ``scancel``, a node going down; SLURM
    sends SIGKILL ``KillWait`` seconds later, and submitit itself ignores SIGTERM) also checkpoints at
    the next step boundary, then exits without requeueing: SLURM decides whether the job comes back.
    A job killed before reaching a step boundary resumes from the latest periodic checkpoint.

    A local job (submitit's local executor) takes SIGTERM the same way: the driver of ``run`` sends
    it on Ctrl-C or SIGTERM (:mod:`harness.cluster.stopping`), and the job returns the run's
    summary once the checkpoint is written, for the driver to read the run's files. Before the
    run's first step a stop needs no checkpoint and comes at once
    (:class:`harness.train.phases.RunStopped`). In the driver's own process (the debug executor)
    the driver's handlers stand and ``driver_stop`` says when it asks for a stop.

    With several tasks (``nodes * tasks_per_node``) the job runs one process per task, on one node
    or several; ``torch.distributed`` is set up from submitit's job environment (env:// variables:
    ``MASTER_ADDR`` is the job's first node's name, which must resolve on every node) and only rank 0
    writes files. Every rank builds or waits for the model first (the model cache's file lock).

    A run that raises leaves a FAILED marker (error line, log path) before re-raising, unless it
    diverged or stopped on a full disk (:func:`harness.train.ending.mark_failed`).
    """

    def __init__(self, spec: RunSpec, run_dir: str, threads: int = 1, driver_stop=None):
        self.spec = spec
        self.run_dir = run_dir
        self.threads = threads
        self.driver_stop = driver_stop  # in the driver's process only: never pickled with a job

    def __call__(self) -> dict:
        import signal

        os.environ.setdefault("OMP_NUM_THREADS", str(self.threads))
        job_env = _job_environment()
        on_slurm = job_env is not None and job_env.cluster == "slurm"
        requested, restore = _stop_on_signals(on_slurm, term=job_env is not None)

        def stop() -> bool:
            return bool(requested["stop"] or (self.driver_stop is not None and self.driver_stop()))

        try:
            summary = self._train(job_env, stop)
        finally:
            previous = restore()
        if summary.get("preempted") and job_env is not None:
            if requested["signal"] == signal.SIGUSR2 and callable(previous):
                previous(signal.SIGUSR2, None)  # submitit: checkpoint(), scontrol requeue, exit
            if requested["signal"] == signal.SIGTERM and on_slurm:
                # checkpointed: now end as SIGTERM would have ended us, so SLURM records the job as
                # preempted, cancelled or requeued (an exit with an error reads as FAILED)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)
            if on_slurm:
                raise RuntimeError(
                    f"run stopped at step {summary['steps']} on request; resume by running it again"
                )
        return summary

    def _train(self, job_env, stop) -> dict:
        """The run's training in this process (its model built first when the job has several
        tasks); ``{"busy": ...}`` when another process trains it."""
        from harness.train.phases import RunPhases, RunStopped
        from harness.train.training import RunBusy, train

        log = ""
        rdir = Path(self.run_dir)
        try:
            if job_env is not None:
                log = str(job_env.paths.stderr).replace("%t", str(job_env.global_rank))
                if job_env.num_tasks > 1:
                    from harness.train.training import prepare_model

                    # a single-process build, before torch.distributed
                    prepare_model(self.spec, self.run_dir, RunPhases(rdir, job_env.global_rank == 0, stop))
                    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
            return train(
                self.spec, rdir, threads=self.threads, stop_requested=stop, stop_before_first_step=stop
            )
        except RunBusy as e:  # another process trains it: nothing of this run was touched
            return {"busy": True, "detail": str(e)}
        except RunStopped:  # asked to stop while the model was built, before the run started
            return {"run_id": self.spec.run_id, "steps": 0, "preempted": True}
        except Exception as e:
            if job_env is None or job_env.global_rank == 0:
                ending.mark_failed(rdir, e, log)
            raise


def _stop_on_signals(on_slurm: bool, term: bool = True):
    """Install handlers that only ask the run to stop at its next optimizer step: USR2 (submitit's
    preemption and time-limit signal) and, with ``term`` (a SLURM job, or a local job of ``run``'s
    driver), SIGTERM (``scontrol requeue``, ``scancel``, preemption, a node going down, the driver
    stopping; on SLURM, SIGKILL follows after ``KillWait``).

    Returns ``(requested, restore)``: ``requested["stop"]`` and ``requested["signal"]`` as the
    handlers set them, and a function that puts the previous handlers back and returns the previous
    USR2 handler (submitit's, which requeues the job).
    """
    import signal

    requested: dict[str, Any] = {"stop": False, "signal": None}
    previous = signal.getsignal(signal.SIGUSR2)
    previous_term = signal.getsignal(signal.SIGTERM)

    def on_signal(signum, frame):  # runs between two bytecodes of training: only set a flag
        if requested["stop"]:
            return  # the driver repeats its SIGTERM until the run ends: said once
        requested["stop"] = True
        requested["signal"] = signum
        if signum == signal.SIGUSR2:
            then = "then requeueing"
        elif on_slurm:
            then = "then exiting (SLURM requeues or ends the job)"
        else:
            then = "then exiting (at once before the first step); running the grid again resumes the run"
        print(
            f"{signal.Signals(signum).name} received: checkpointing at the next optimizer step, {then}",
            flush=True,
        )

    signal.signal(signal.SIGUSR2, on_signal)
    if term:
        signal.signal(signal.SIGTERM, on_signal)

    def restore():
        signal.signal(signal.SIGUSR2, previous)
        if term:
            signal.signal(signal.SIGTERM, previous_term)
        return previous

    return requested, restore


def _job_environment():
    """submitit's JobEnvironment when running inside a submitit job, else None."""
    try:
        return submitit.JobEnvironment()
    except RuntimeError:
        return None


@dataclass
class Outcome:
    """How one run's job ended: ``state`` in :data:`harness.layout.RUN_STATES` (done, diverged,
    failed, stopped; running when another process trains it and this driver left it alone) and
    ``error``, what happened in one line (:func:`harness.cluster.status.end_line`)."""

    run_id: str
    state: str
    log: str = ""
    error: str = ""


def outcome_of(
    run_id: str, run_dir: Path, result: Any = None, log: str = "", raised: BaseException | str = ""
) -> Outcome:
    """The outcome of a run whose job has ended, read from the run's own files
    (:func:`harness.layout.files_state`).

    The job's ``result`` says whether another process held the run; ``raised``, the job's error
    as the driver got it (the exception in the driver's process, submitit's text of it from a
    local job), names an ending the attempt could not write (an early error, a full disk):
    :func:`harness.train.ending.job_error` tells which. A stopped run whose attempt wrote no end
    record and that raised nothing more was killed: its end record is written here
    (:func:`harness.train.ending.record_missing_end`).
    """
    if isinstance(result, dict) and result.get("busy"):
        return Outcome(run_id, layout.RUNNING, log, f"{result.get('detail', 'busy')} (skipped)")
    state = layout.files_state(run_dir)
    if state == layout.RUNNING:  # its lock was taken between our check and the job's start
        return Outcome(run_id, state, log, f"{layout.trained_elsewhere(run_dir)} (skipped)")
    end = None
    if state == layout.STOPPED and raised and not ending.attempt_ended(run_dir):
        end = ending.job_error(raised, run_dir)
    if end is not None and end.outcome == ending.NO_SPACE:
        then = resume_promise(run_dir, "running the grid again")
        return Outcome(run_id, state, log, f"no space left on device ({end.detail}); free space, then {then}")
    if end is not None:
        return Outcome(run_id, layout.FAILED, log, end.detail)
    step = last_step_and_reward(run_dir)[0] if state == layout.STOPPED else None
    line = end_line(run_dir, state, step)
    if state == layout.STOPPED:
        ending.record_missing_end(run_dir, line)  # the attempts log says it too (the attempt could not)
    return Outcome(run_id, state, log, line)


def default_parallel(executor: ExecutorSettings) -> int:
    """Runs at once locally: ``max_parallel``, or cores // (threads_per_run x processes per run), at
    least 1 (a run of ``tasks_per_node`` processes takes that many times the threads)."""
    if executor.max_parallel:
        return executor.max_parallel
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // (max(1, executor.threads_per_run) * executor.num_processes))


def pending_local(
    runs: Sequence[RunSpec], grid_dir: Path, retry_failed: bool = False
) -> tuple[list[RunSpec], dict[str, list[str]]]:
    """The runs a local ``run`` trains, and the others by reason (as ``submit`` chooses):
    pending and stopped runs are trained (a stopped one resumes); done runs and runs another
    process trains now never; failed and diverged runs only with ``retry_failed``."""
    todo: list[RunSpec] = []
    skipped: dict[str, list[str]] = {"done": [], BUSY_REASON: [], FAILED_REASON: []}
    for run in runs:
        state = layout.files_state(layout.run_dir(grid_dir, run.run_id))
        if state == layout.DONE:
            skipped["done"].append(run.run_id)
        elif state == layout.RUNNING:
            skipped[BUSY_REASON].append(run.run_id)
        elif state in (layout.FAILED, layout.DIVERGED) and not retry_failed:
            skipped[FAILED_REASON].append(run.run_id)
        else:
            todo.append(run)
    return todo, {k: v for k, v in skipped.items() if v}


FAILED_REASON = "failed or diverged (use --retry-failed)"
BUSY_REASON = "being trained by another process"


def execute_local(
    runs: Sequence[RunSpec],
    grid_dir: Path,
    executor: ExecutorSettings,
    in_process: bool = False,
    show_progress: bool = True,
    progress_every_s: float | None = None,
) -> list[Outcome]:
    """Run ``runs`` on this machine, at most :func:`default_parallel` at a time.

    ``in_process=True`` (executor "debug") calls the job directly, one after another, so a
    debugger can stop inside the trainer. Each local job logs to ``runs/<id>/logs/``. While runs
    train, :class:`harness.cluster.progress.GridDisplay` shows each one in flight: a table redrawn in place
    when ``show_progress`` (a terminal), else a line per run every ``progress_every_s`` seconds on
    stderr (None: :data:`harness.cluster.progress.LINE_EVERY_S`). Returns one :class:`Outcome` per run, in order; never raises for a failed run.

    Raises:
        harness.cluster.stopping.GridStopped: SIGINT or SIGTERM stopped the driver: the runs in
            flight stopped at their next step with a checkpoint (:mod:`harness.cluster.stopping`),
            and it holds every run's outcome, those never started included.
    """
    from harness.cluster.progress import LINE_EVERY_S, GridDisplay, label_of
    from harness.cluster.stopping import DriverStop, GridStopped

    outcomes: dict[str, Outcome] = {}
    threads = executor.threads_per_run
    parallel = 1 if in_process else default_parallel(executor)
    display = GridDisplay(
        grid_dir,
        {r.run_id: label_of(r.varying) for r in runs},
        {r.run_id: r.trainer.get("max_steps") for r in runs},
        parallel,
        live=show_progress,
        every_s=LINE_EVERY_S if progress_every_s is None else progress_every_s,
    )

    def finish(outcome: Outcome) -> None:
        outcomes[outcome.run_id] = outcome
        display.ended_run(outcome.run_id, outcome.state)

    from harness.cluster.preload import serving, usable, wanted

    stop = DriverStop(in_process=in_process)
    active: list[tuple[RunSpec, submitit.Job]] = []
    devices = [r.harness.device for r in runs]
    # the jobs inherit the threads, and the preloaded interpreter's socket
    with (
        display,
        stop.installed(),
        _thread_environment(threads),
        serving(
            usable(in_process, executor.setup, devices),
            start=wanted(in_process, len(runs), executor.setup, devices),
        ) as python,
    ):
        try:
            if in_process:
                _run_in_process(runs, grid_dir, threads, finish, stop)
            else:
                launch = functools.partial(_launch, executor=executor, threads=threads, python=python)
                _drive(list(runs), active, parallel, grid_dir, launch, finish, display, stop)
        except KeyboardInterrupt:  # in process, a second signal: the run stopped at once
            pass
        except BaseException:
            # submitit's local jobs outlive their parent; stop them so no orphan keeps writing
            from harness.cluster.stopping import kill_job

            for _, job in active:
                kill_job(job)
            raise
    ordered = [outcomes.get(r.run_id) or _not_started(r.run_id, grid_dir) for r in runs]
    if stop.requested:
        raise GridStopped(stop.signum, ordered)
    return ordered


def _not_started(run_id: str, grid_dir: Path) -> Outcome:
    """The outcome of a run the driver never got to (a stop came first), or that was interrupted
    in its process (the debug executor)."""
    rdir = layout.run_dir(grid_dir, run_id)
    state = layout.files_state(rdir)
    if state == layout.PENDING:
        return Outcome(run_id, state, error="not started")
    step = last_step_and_reward(rdir)[0] if state == layout.STOPPED else None
    return Outcome(run_id, state, error=end_line(rdir, state, step))


@contextlib.contextmanager
def _thread_environment(threads: int) -> Iterator[None]:
    """Set ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` to ``threads`` for the block, then put back
    what was there (or nothing), so the driver's own environment is unchanged afterwards."""
    names = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update({name: str(threads) for name in names})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _run_in_process(runs: Sequence[RunSpec], grid_dir: Path, threads: int, finish, stop) -> None:
    """The debug executor: each run called directly, one after another, until ``stop`` (a
    :class:`harness.cluster.stopping.DriverStop`) is requested."""
    for spec in runs:
        if stop.requested:
            return
        rdir = layout.run_dir(grid_dir, spec.run_id)
        result, raised = None, ""
        try:
            result = TrainingJob(spec, str(rdir), threads, driver_stop=lambda: stop.requested)()
        except Exception as e:  # one failed run must not stop the grid; its files say why
            raised = e
        finish(outcome_of(spec.run_id, rdir, result, raised=raised))


def _drive(queue, active, parallel, grid_dir, launch, finish, display, stop) -> None:
    """Keep at most ``parallel`` local jobs running until ``queue`` and ``active`` are empty,
    showing the runs in flight on ``display`` as they go. Once ``stop`` (a
    :class:`harness.cluster.stopping.DriverStop`) is requested, launch nothing more and ask the
    jobs in flight to stop until they have ended."""
    killed: set[str] = set()
    while active or (queue and not stop.requested):
        while queue and len(active) < parallel and not stop.requested:
            spec = queue.pop(0)
            active.append((spec, launch(spec, grid_dir)))
        time.sleep(0.5)
        if stop.requested:
            for text in stop.news(len(active)):
                display.note(text)
            gone = {id(job) for job in stop.forward(job for _, job in active)}
            killed |= {spec.run_id for spec, job in active if id(job) in gone}
        display.update([spec.run_id for spec, _ in active])
        active[:] = _collect(active, grid_dir, finish, killed, stop)


def _launch(
    spec: RunSpec, grid_dir: Path, executor: ExecutorSettings, threads: int, python: str | None = None
) -> submitit.Job:
    """Submit one run as a local job (submitit's controller, then the run's processes, started
    with SIGINT ignored: a terminal's Ctrl-C is the driver's to handle). ``python``: the command
    that starts the job's processes, the preloaded interpreter's client
    (:mod:`harness.cluster.preload`), or None for submitit's own (this Python)."""
    from harness.cluster.stopping import children_ignore_sigint

    rdir = layout.run_dir(grid_dir, spec.run_id)
    ex = submitit.LocalExecutor(folder=rdir / layout.LOGS_DIR, **({"python": python} if python else {}))
    ex.update_parameters(
        timeout_min=executor.timeout_min,
        tasks_per_node=executor.tasks_per_node,
        **local_gpus(executor),
        # no shell in between unless setup lines ask for one (harness.cluster.stopping finds the
        # controller under it)
        **({"setup": list(executor.setup)} if executor.setup else {}),
    )
    with children_ignore_sigint():
        return ex.submit(TrainingJob(spec, str(rdir), threads))


def local_gpus(executor: ExecutorSettings, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The GPUs of a local job, for submitit's local executor, which sets every job's
    ``CUDA_VISIBLE_DEVICES`` to its first ``gpus_per_node`` devices (none, hiding every GPU, when
    it is 0): ``executor.gpus_per_node`` of the GPUs this process sees, or all of them when it is 0;
    ``{}`` on a machine without one. The GPUs seen are ``CUDA_VISIBLE_DEVICES``'s where it is set
    (as numbers; ``visible_gpus`` keeps them), else the machine's ``/dev/nvidiaN`` devices."""
    environ = os.environ if environ is None else environ
    text = environ.get("CUDA_VISIBLE_DEVICES")
    if text is not None:
        parts = [p.strip() for p in text.split(",") if p.strip()]
        visible = tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None
        count = len(parts)
    else:
        count = len([p for p in Path("/dev").glob("nvidia[0-9]*") if p.name[6:].isdigit()])
        visible = tuple(range(count))
    n = min(executor.gpus_per_node or count, count)
    if n == 0:
        return {}
    return {"gpus_per_node": n, **({"visible_gpus": visible} if visible is not None else {})}


def _collect(active, grid_dir: Path, finish, killed: set[str], stop) -> list:
    """``finish`` the outcome of each job of ``active`` that has ended; returns those still running.
    A run in ``killed`` (a second signal) gets its end record from here: its process could not
    write one."""
    from harness.cluster.stopping import signal_name

    still = []
    for spec, job in active:
        if not job.done():
            still.append((spec, job))
            continue
        rdir = layout.run_dir(grid_dir, spec.run_id)
        if spec.run_id in killed:
            ending.record_missing_end(rdir, f"by a second {signal_name(stop.signum)}", ending.FORCED)
        result, raised = None, ""
        try:
            result = job.results()[0]  # every task's; raises the first task error
        except Exception as e:  # submitit re-raises the job's error as text; the run's files say what it was
            raised = str(e)
        finish(outcome_of(spec.run_id, rdir, result, str(job.paths.stderr), raised))
    return still
