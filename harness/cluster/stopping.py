"""Stopping a local ``run`` cleanly: Ctrl-C or SIGTERM to the driver.

The first SIGINT or SIGTERM stops the driver launching runs and asks every run in flight to stop
at its next optimizer-step boundary with a checkpoint, by the same SIGTERM that does it in a SLURM
job (:class:`harness.cluster.executors.TrainingJob`): sent to submitit's local controller, which
forwards it to the run's processes, again every :data:`FORWARD_EVERY_S` seconds until they end (a
process still starting may miss one). A run that has not reached its first step stops at once
(:class:`harness.train.phases.RunStopped`): nothing is trained yet. A second signal kills the
runs' processes at once; each then resumes from its last periodic checkpoint.

Submitit's controllers and the runs' processes are started with SIGINT ignored
(:func:`children_ignore_sigint`), so that a Ctrl-C in the terminal, which reaches every process of
the terminal's foreground group, reaches the driver alone and is handled once, by it.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

#: Seconds between two SIGTERMs the driver sends each run in flight while it waits for it to stop.
FORWARD_EVERY_S = 2.0


class GridStopped(Exception):
    """``run`` was stopped by ``signum``; ``outcomes`` has every run of the grid's driver, in
    order (:class:`harness.cluster.executors.Outcome`: the finished ones, those it stopped, those
    it never started)."""

    def __init__(self, signum: int, outcomes: list):
        super().__init__(f"stopped by {signal_name(signum)}")
        self.signum = signum
        self.outcomes = outcomes

    @property
    def exit_code(self) -> int:
        """What a shell reports for a process that signal ended: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


def signal_name(signum: int) -> str:
    """``2`` -> ``"SIGINT"``."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class DriverStop:
    """The stop of a local ``run``'s driver, as its SIGINT and SIGTERM handlers set it.

    ``signum`` is the first signal (None before any), ``count`` how many came. Inside
    :meth:`installed` the handlers only count (the driver's loop acts on it); with ``in_process``
    (the debug executor, where the run trains inside the driver) a second signal raises
    ``KeyboardInterrupt`` there, the run's own way to stop at once.
    """

    def __init__(self, in_process: bool = False):
        self.in_process = in_process
        self.signum: int | None = None
        self.count = 0
        self._said = 0
        self._forwarded = (0, -math.inf)  # (count, time.monotonic()) of the last SIGTERMs sent

    @property
    def requested(self) -> bool:
        return self.count > 0

    @property
    def forced(self) -> bool:
        return self.count > 1

    def note(self, signum: int, frame: Any = None) -> None:
        """The signal handler: count the signal (and, in process, raise at the second)."""
        self.count += 1
        if self.signum is None:
            self.signum = signum
        if self.in_process and self.count > 1:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self) -> Iterator[DriverStop]:
        """:meth:`note` as the handler of SIGINT and SIGTERM inside the block (in the main thread:
        only it can have handlers; elsewhere the block changes nothing)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.signal(s, self.note) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def news(self, in_flight: int) -> list[str]:
        """What the driver says of the signals that came since it last asked: the stop it
        started, then the stop at once."""
        lines = []
        name = signal_name(self.signum or signal.SIGINT)
        again = "Ctrl-C" if self.signum == signal.SIGINT else "SIGTERM"
        if self._said < 1 <= self.count:
            lines.append(
                f"{name} received: launching no more runs; asking the {in_flight} in flight to stop at "
                f"their next step, each saving a checkpoint ({again} again stops them at once)"
            )
        if self._said < 2 <= self.count:
            lines.append(
                f"{name} again: stopping the runs at once; each resumes from its last checkpoint "
                "(the steps since are trained again)"
            )
        self._said = self.count
        return lines

    def forward(self, jobs: Iterable[Any]) -> list[Any]:
        """Ask each local job of ``jobs`` (submitit's) to stop: SIGTERM at once after a new signal
        and every :data:`FORWARD_EVERY_S` seconds; after a second signal, kill its processes.
        Returns the jobs killed by this call."""
        jobs, now = list(jobs), time.monotonic()
        if not self.requested:
            return []
        if self.forced:
            return [job for job in jobs if kill_job(job)]
        count, at = self._forwarded
        if count != self.count or now - at >= FORWARD_EVERY_S:
            self._forwarded = (self.count, now)
            for job in jobs:
                signal_job(job, signal.SIGTERM)
        return []


@contextlib.contextmanager
def children_ignore_sigint() -> Iterator[None]:
    """SIGINT ignored inside the block, so that processes started in it (submitit's controller, and
    through it the run's processes) inherit that and a terminal's Ctrl-C reaches only the driver.
    A Ctrl-C in the block itself (the time of a ``fork``) is lost. Outside the main thread,
    nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _job_processes(job: Any) -> tuple[Any, list[Any]]:
    """``(controller, every process of the job)`` of a submitit local job that still runs: the
    controller (``submitit.local._local``; under a shell when the executor has setup lines) and all
    its processes, as psutil's; ``(None, [])`` when it has ended."""
    import psutil

    popen = getattr(job, "_process", None)  # submitit's LocalJob keeps its controller's Popen here
    if popen is None or popen.poll() is not None:
        return None, []
    try:
        root = psutil.Process(popen.pid)
        family = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None, []
    for p in family:
        with contextlib.suppress(psutil.Error):
            if "submitit.local._local" in " ".join(p.cmdline()):
                return p, family
    return None, family


def signal_job(job: Any, signum: int) -> bool:
    """Send ``signum`` to a local job's controller, which forwards it to the run's processes;
    False when the job has ended (or its controller is not up yet)."""
    import psutil

    controller, _ = _job_processes(job)
    if controller is None:
        return False
    try:
        controller.send_signal(signum)
    except psutil.Error:
        return False
    return True


def kill_job(job: Any) -> bool:
    """SIGKILL every process of a local job, the run's first (so no controller restarts it);
    False when it has ended."""
    import psutil

    _, family = _job_processes(job)
    for p in reversed(family):
        with contextlib.suppress(psutil.Error):
            p.kill()
    return bool(family)
