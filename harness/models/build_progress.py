"""How far an embedded model's build is, for the processes that wait for it and for displays.

A build (:func:`harness.models.tiny.cached_build`) goes through three stages: its SFT examples
are generated (:data:`DATA`), the SFT warm start trains (:data:`SFT`, step k of N) and the model is
saved (:data:`SAVE`). The building process rewrites a progress file beside the cache's lock
(``<key>.progress.json``, :func:`build_progress_path`) about every :data:`BUILD_PROGRESS_EVERY_S`
seconds; a process that waits on the lock reads it, so every run that needs the model can say how
far its build is. Both say it on stderr (a run's log) every :data:`BUILD_LOG_EVERY_S` seconds and
tell their :class:`BuildWatch`, through which a run writes its phase (``progress.json``) and
can stop the build or the wait by raising.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A build's stages, in order: its SFT examples generated, the SFT warm start, the save.
DATA, SFT, SAVE = "data", "sft", "save"
#: Seconds between two rewrites of a build's progress file (each also a call of its watch).
BUILD_PROGRESS_EVERY_S = 1.0
#: Seconds between two lines on stderr (a run's log) of a build, or of a wait for one.
BUILD_LOG_EVERY_S = 30.0
#: Seconds a process waiting for another's build sleeps on the lock between two looks at its
#: progress file (and two calls of its watch).
WAIT_POLL_S = 1.0

#: What a build tells as it goes: ``report(stage, step=0, max_steps=0, examples=0)``.
Report = Callable[..., None]


@dataclass(frozen=True)
class BuildProgress:
    """Where a build stands: ``model`` (its name, ``tiny-steps``), ``stage`` (:data:`DATA`,
    :data:`SFT`, :data:`SAVE`, or ``""`` when unknown: a waiter that found no progress file),
    SFT ``step`` of ``max_steps``, the SFT ``examples`` being generated, ``started_at`` and
    ``updated_at`` (Unix seconds), ``s_per_step`` (mean wall seconds of the SFT steps so far),
    ``builder`` (who builds: ``run d320cbaf4b (pid 123 on vm)``) and ``waiting`` (the process that
    holds this record waits for the build; another one builds)."""

    model: str
    stage: str = ""
    step: int = 0
    max_steps: int = 0
    examples: int = 0
    started_at: float = 0.0
    updated_at: float = 0.0
    s_per_step: float | None = None
    builder: str = ""
    waiting: bool = False

    @property
    def eta_s(self) -> float | None:
        """Seconds of SFT left at its speed so far; None before the first step."""
        if self.stage != SFT or not self.s_per_step or self.max_steps <= 0:
            return None
        return max(self.max_steps - self.step, 0) * self.s_per_step


def read_build_progress(path: Path) -> BuildProgress | None:
    """The :class:`BuildProgress` of a progress file; None when it is missing or unreadable (the
    build has not written it yet, or has just ended)."""
    try:
        info = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not isinstance(info.get("model"), str):
        return None
    fields = {f.name: f.type for f in dataclasses.fields(BuildProgress)}
    kept = {k: v for k, v in info.items() if k in fields and k != "waiting"}
    try:
        return BuildProgress(**kept)
    except TypeError:
        return None


def clock(seconds: float | None) -> str:
    """``3725`` -> ``"1:02:05"``; ``"?"`` for None."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = int(round(max(seconds, 0.0)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def build_text(p: BuildProgress) -> str:
    """What a build is doing, in one line: ``building model tiny-steps: SFT step 340/1500, ETA
    0:06:10``, or for a process that waits for it ``waiting for the tiny-steps build by run
    d320cbaf4b (pid 123 on vm): SFT step 340/1500, ETA 0:06:10``."""
    eta = f", ETA {clock(p.eta_s)}" if p.eta_s is not None else ""
    doing = {
        DATA: f"generating {p.examples} SFT examples" if p.examples else "generating the SFT examples",
        SFT: f"SFT step {p.step}/{p.max_steps}{eta}",
        SAVE: "saving",
    }.get(p.stage, p.stage)
    if p.waiting:
        head = f"waiting for the {p.model} build by {p.builder or 'another process'}"
        return f"{head}: {doing}" if doing else head
    return f"building model {p.model}: {doing}" if doing else f"building model {p.model}"


@dataclass(frozen=True)
class BuildWatch:
    """Who needs a model, and whom to tell how its build goes.

    ``who`` names the process in the words of those that wait for its build (``run d320cbaf4b``);
    ``on_progress(progress)`` is called with a :class:`BuildProgress` about every second while this
    process builds the model or waits for another's build (``progress.waiting``), and may raise to
    stop: the build's temporary folder is removed and the lock released."""

    who: str = ""
    on_progress: Callable[[BuildProgress], None] | None = None


def say(text: str) -> None:
    """A line on stderr (a run's log), stamped with the time of day."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


class BuildReport:
    """What a build tells as it goes (the ``report`` a build function is given): called as
    ``report(stage, step=0, max_steps=0, examples=0)``, it rewrites the progress file at ``path``
    at most every :data:`BUILD_PROGRESS_EVERY_S` seconds (at once on a new stage and the last SFT
    step), tells ``watch`` each time, and says it on stderr on a new stage and every
    :data:`BUILD_LOG_EVERY_S` seconds. Anything ``watch.on_progress`` raises goes through."""

    def __init__(self, path: Path, model: str, watch: BuildWatch | None = None):
        self.path = Path(path)
        self.model = model
        self.watch = watch or BuildWatch()
        where = f"pid {os.getpid()} on {socket.gethostname()}"
        self.builder = f"{self.watch.who} ({where})" if self.watch.who else where
        self.started_at = time.time()
        self._stage: str | None = None
        self._sft_t0 = time.monotonic()
        self._written = self._logged = -math.inf

    def __call__(self, stage: str, step: int = 0, max_steps: int = 0, examples: int = 0) -> None:
        now = time.monotonic()
        new = stage != self._stage
        if stage == SFT and step == 0:
            self._sft_t0 = now
        last = stage == SFT and max_steps > 0 and step >= max_steps
        if not (new or last or now - self._written >= BUILD_PROGRESS_EVERY_S):
            return
        self._stage, self._written = stage, now
        progress = BuildProgress(
            model=self.model,
            stage=stage,
            step=step,
            max_steps=max_steps,
            examples=examples,
            started_at=self.started_at,
            updated_at=time.time(),
            s_per_step=(now - self._sft_t0) / step if stage == SFT and step > 0 else None,
            builder=self.builder,
        )
        self._write(progress)
        if new or last or now - self._logged >= BUILD_LOG_EVERY_S:
            self._logged = now
            say(f"{build_text(progress)} ({clock(time.time() - self.started_at)} elapsed)")
        if self.watch.on_progress is not None:
            self.watch.on_progress(progress)

    def _write(self, progress: BuildProgress) -> None:
        """The progress file, written to a temporary name and renamed (a reader sees a whole one);
        a file that cannot be written only leaves the waiters less informed."""
        record: dict[str, Any] = dataclasses.asdict(progress)
        record.pop("waiting")
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with contextlib.suppress(OSError):
            tmp.write_text(json.dumps(record), encoding="utf-8")
            os.replace(tmp, self.path)


def build_progress_path(cache_dir: str | Path, key: str) -> Path:
    """The progress file of the build of ``cache_dir/key``, beside its lock."""
    return Path(cache_dir) / f"{key}.progress.json"
