"""What a run does before its first optimizer step, said where a display and its log can tell.

Until its first step a run can spend minutes elsewhere: setting up, building an embedded model or
waiting for another process's build of it (:mod:`harness.models.build_progress`), building its
dataset, loading the model and starting the trainer (a DeepSpeed engine), evaluating the starting
policy. :class:`RunPhases` writes each phase into the run's ``progress.json`` (rank 0;
:func:`harness.layout.read_phase`, the kinds in :data:`harness.layout.PHASES`), which the first
step's progress replaces, and says it on stderr (the run's log). It is also where a run asked to
stop before its first step stops: nothing is trained yet, so there is nothing to checkpoint, and
:class:`RunStopped` ends the attempt.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from harness import layout
from harness.layout import atomic_write_json
from harness.models.build_progress import BuildProgress, BuildWatch, build_text


class RunStopped(Exception):
    """A stop was asked for before the run's first optimizer step (its phase says where it was)."""


class RunPhases:
    """A run's phases before its first step.

    Args:
        run_dir: ``results/<grid>/runs/<run_id>``.
        write: whether this process writes ``progress.json`` and says the phases (rank 0).
        stop_requested: polled at each phase and each word of a build; when it returns True the
            next one raises :class:`RunStopped`.
        stream: where the phases are said (stderr, the run's log).
    """

    def __init__(
        self,
        run_dir: str | Path,
        write: bool = True,
        stop_requested: Callable[[], bool] | None = None,
        stream: TextIO | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.write = write
        self.stop_requested = stop_requested
        self.stream = stream
        self.kind: str | None = None
        self.text = ""
        self.since = time.time()

    def enter(self, kind: str, text: str, stoppable: bool = True, say: bool = True) -> None:
        """The run is now at ``kind`` (one of :data:`harness.layout.PHASES`), doing ``text``:
        ``progress.json`` rewritten (``since`` kept while the kind stays), and ``text`` said on
        stderr when it is new (and ``say``).

        Raises:
            RunStopped: a stop was asked for (unless not ``stoppable``: inside the trainer, where
                every rank must stop at the same step, the next step boundary stops it).
        """
        if stoppable and self.stop_requested is not None and self.stop_requested():
            where = f" ({self.text})" if self.text else ""
            raise RunStopped(f"stopped on request before the first step{where}")
        if kind != self.kind:
            self.kind, self.since = kind, time.time()
        new, self.text = text != self.text, text
        if not self.write:
            return
        if new and say:
            stamp = time.strftime("%H:%M:%S")
            print(f"[{stamp}] {text}", file=self.stream or sys.stderr, flush=True)
        record = {"phase": text, "kind": kind, "since": self.since, "updated_at": time.time()}
        with contextlib.suppress(OSError):  # a display's nicety: never fail a run over it
            atomic_write_json(self.run_dir / layout.PROGRESS_FILE, record)

    def on_build(self, progress: BuildProgress) -> None:
        """A word of the embedded model's build, or of the wait for another process's build: the
        phase is :data:`harness.layout.PHASE_MODEL` or :data:`harness.layout.PHASE_WAITING`
        (the build says itself on stderr: not said again here)."""
        kind = layout.PHASE_WAITING if progress.waiting else layout.PHASE_MODEL
        self.enter(kind, build_text(progress), say=False)

    def watch(self, who: str) -> BuildWatch:
        """What the model cache is given: ``who`` (``run d320cbaf4b``) and :meth:`on_build`."""
        return BuildWatch(who=who, on_progress=self.on_build)
