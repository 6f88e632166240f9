"""A grid in flight, as it shows: each run's step, reward, speed and ETA, and the grid's ETA.

Everything is read from the runs' own files (``progress.json``, which rank 0 rewrites after a
logged step at most every ``harness.train.recorder.PROGRESS_EVERY_S`` seconds, and always on the first
and last step and before a checkpoint, :func:`harness.layout.read_progress`), so the same view serves the driver of a local
``run`` and ``status --watch`` of a SLURM grid. Before its first step a run's ``progress.json``
holds its phase instead (:func:`harness.layout.read_phase`: building an embedded model, waiting for
another run's build of it, building the dataset, starting the trainer), shown as a line of its own
(:func:`phase_line`). In a terminal, :class:`GridDisplay` redraws a rich table in place; without
one (a log file, a pipe, CI) it prints one line per run in flight (its step, its phase, or that its
process is starting) at once and then every ``every_s`` seconds, and a line whenever a run ends.
:func:`heartbeat` says the same of a slow step of the command itself (checking a grid, writing
the report).
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from harness import layout

#: Seconds between two lines where no terminal redraws the display (a log, a pipe): under the 30 s a
#: watcher waits before taking a silent command for a hung one, with room for a slow round.
LINE_EVERY_S = 20.0


@dataclass(frozen=True)
class RunProgress:
    """One run's latest step: ``step`` of ``max_steps``, ``reward`` (latest logged, or None),
    ``s_per_step`` (mean wall seconds of its recent steps), ``updated_at`` (Unix seconds)."""

    run_id: str
    label: str
    step: int
    max_steps: int | None
    reward: float | None
    s_per_step: float | None
    updated_at: float

    @property
    def eta_s(self) -> float | None:
        """Seconds left at its recent speed; None when the speed or the step count is unknown."""
        if self.max_steps is None or not self.s_per_step:
            return None
        return max(self.max_steps - self.step, 0) * self.s_per_step


def read(run_dir: Path, label: str = "") -> RunProgress | None:
    """The run's :class:`RunProgress` from its ``progress.json``; None before its first step."""
    info = layout.read_progress(run_dir)
    if info is None:
        return None

    def number(key: str) -> float | None:
        v = info.get(key)
        return (
            float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None
        )

    max_steps = info.get("max_steps")
    return RunProgress(
        run_id=run_dir.name,
        label=label,
        step=info["step"],
        max_steps=max_steps if isinstance(max_steps, int) else None,
        reward=number("reward"),
        s_per_step=number("s_per_step"),
        updated_at=number("updated_at") or 0.0,
    )


@dataclass(frozen=True)
class RunPhase:
    """What a run does before its first step: ``kind`` (one of :data:`harness.layout.PHASES`),
    ``text`` (its own words: ``building model tiny-steps: SFT step 340/1500, ETA 0:06:10``),
    ``since`` (when the phase began) and ``updated_at`` (Unix seconds)."""

    run_id: str
    label: str
    kind: str
    text: str
    since: float
    updated_at: float


def read_phase(run_dir: Path, label: str = "") -> RunPhase | None:
    """The run's :class:`RunPhase` from its ``progress.json``; None once it has a step, or before
    its process has said anything."""
    info = layout.read_phase(run_dir)
    if info is None:
        return None

    def number(key: str) -> float:
        v = info.get(key)
        ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        return float(v) if ok else 0.0

    kind = info.get("kind")
    return RunPhase(
        run_id=Path(run_dir).name,
        label=label,
        kind=kind if isinstance(kind, str) else "",
        text=info["phase"],
        since=number("since"),
        updated_at=number("updated_at"),
    )


def phase_line(p: RunPhase, now: float | None = None) -> str:
    """A run before its first step as a log line: ``d320cbaf4b loss_type=grpo seed=0: building
    model tiny-steps: SFT step 340/1500, ETA 0:06:10 (for 0:02:10)``; the time is how long the
    phase has lasted, ``now`` (Unix seconds) by default the clock's."""
    now = time.time() if now is None else now
    label = f" {p.label}" if p.label else ""
    lasted = f" (for {duration(now - p.since)})" if p.since else ""
    return f"{p.run_id}{label}: {p.text}{lasted}"


def starting_line(run_id: str, label: str, launched_s: float) -> str:
    """A run whose process has said nothing yet: ``d320cbaf4b loss_type=grpo: starting its
    process (launched 0:00:04 ago)``."""
    label = f" {label}" if label else ""
    return f"{run_id}{label}: starting its process (launched {duration(launched_s)} ago)"


@contextlib.contextmanager
def heartbeat(what: str, every_s: float = LINE_EVERY_S, stream: TextIO | None = None) -> Iterator[None]:
    """While the block runs, a line every ``every_s`` seconds on ``stream`` (stderr):
    ``[12:00:30] still checking the grid (0:00:30)``; nothing when it ends sooner."""
    done = threading.Event()
    t0 = time.monotonic()

    def beat() -> None:
        while not done.wait(every_s):
            stamp = time.strftime("%H:%M:%S")
            print(
                f"[{stamp}] still {what} ({duration(time.monotonic() - t0)})",
                file=stream or sys.stderr,
                flush=True,
            )

    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def grid_eta(
    in_flight: Sequence[RunProgress],
    steps_not_started: int,
    parallel: int,
    run_speeds: Mapping[str, float] | None = None,
) -> float | None:
    """Seconds until the grid ends: the longest ETA of the runs in flight, or, when runs wait, the
    steps left of every run (those in flight and ``steps_not_started``) over ``parallel`` slots,
    whichever is longer. None while no speed is known.

    ``run_speeds`` (``{run_id: wall seconds per step}``, each a run's mean over all the steps it
    was watched, runs that ended included) steadies the estimate: a run in flight that has one is
    timed at it rather than at its recent steps (a run that reuses each generation batch alternates
    slow generation steps and fast ones), and the waiting steps at their mean over runs, rather than
    at the mean of the runs in flight alone (which swings as runs of cheaper or dearer arms start).
    """
    speeds = dict(run_speeds or {})
    per_run = [(p, speeds.get(p.run_id) or p.s_per_step) for p in in_flight]
    known = [v for _, v in per_run if v]
    if not known:
        return None
    etas = [max(p.max_steps - p.step, 0) * v for p, v in per_run if v and p.max_steps is not None]
    longest = max(etas, default=0.0)
    if steps_not_started <= 0:
        return longest
    waiting_speed = sum(speeds.values()) / len(speeds) if speeds else sum(known) / len(known)
    left = sum(etas) + steps_not_started * waiting_speed
    return max(longest, left / max(parallel, 1))


def duration(seconds: float | None) -> str:
    """``3725`` -> ``"1:02:05"``; ``"?"`` for None."""
    if seconds is None:
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def line(p: RunProgress) -> str:
    """One run in flight as a log line: ``d320cbaf4b loss_type=grpo seed=0: step 120/450, reward
    0.312, 0.25 s/step, ETA 0:01:22``."""
    of = f"/{p.max_steps}" if p.max_steps else ""
    reward = f", reward {p.reward:.3f}" if p.reward is not None else ""
    speed = f", {p.s_per_step:.2f} s/step" if p.s_per_step else ""
    label = f" {p.label}" if p.label else ""
    return f"{p.run_id}{label}: step {p.step}{of}{reward}{speed}, ETA {duration(p.eta_s)}"


def label_of(varying: Mapping[str, Any]) -> str:
    """A run's varying values as ``loss_type=grpo seed=0`` (last part of each key), leaving out
    the keys its sub-grid does not set (None)."""
    return " ".join(f"{k.split('.')[-1]}={v}" for k, v in varying.items() if v is not None)


def table(in_flight: Sequence[RunProgress], summary: str, before: Sequence[str] = ()):
    """The rich table of the runs in flight, then the lines of the runs ``before`` their first step
    (:func:`phase_line`, :func:`starting_line`), then ``summary`` (counts, grid ETA) on a line of
    its own."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    t = Table(box=None, pad_edge=False)
    for name, justify in (
        ("run", "left"),
        ("", "left"),
        ("step", "right"),
        ("reward", "right"),
        ("s/step", "right"),
    ):
        t.add_column(name, justify=justify, no_wrap=True)
    t.add_column("ETA", justify="right", no_wrap=True)
    for p in in_flight:
        t.add_row(
            p.run_id,
            p.label,
            f"{p.step}/{p.max_steps}" if p.max_steps else str(p.step),
            "" if p.reward is None else f"{p.reward:.3f}",
            "" if not p.s_per_step else f"{p.s_per_step:.2f}",
            duration(p.eta_s),
        )
    parts = [t] if in_flight else []
    return Group(*parts, *(Text(line) for line in before), Text(summary))


#: Seconds before a run is first shown that its process may have written its first record (the
#: driver shows a run within half a second of launching it).
LAUNCH_SLACK_S = 2.0

#: Steps a run must have been watched over before its mean speed stands in for its recent one in
#: the grid's ETA (:func:`grid_eta`): 16 spans a whole generation batch of the reusing runs.
RUN_SPEED_MIN_STEPS = 16


class GridDisplay:
    """What the driver of a local ``run`` shows while runs train.

    Args:
        grid_dir: ``results/<grid>``.
        labels: ``{run_id: label}`` of every run this driver trains, in order.
        max_steps: ``{run_id: max_steps}`` (None where unknown), for the grid's ETA.
        parallel: runs at once.
        live: redraw a table in place (a terminal); else print lines to ``stream``.
        every_s: seconds between two rounds of lines when not ``live`` (the first round comes at
            the first :meth:`update`).
    """

    def __init__(
        self,
        grid_dir: Path,
        labels: Mapping[str, str],
        max_steps: Mapping[str, int | None],
        parallel: int,
        live: bool,
        every_s: float = LINE_EVERY_S,
        stream: TextIO | None = None,
    ):
        self.grid_dir = Path(grid_dir)
        self.labels = dict(labels)
        self.max_steps = dict(max_steps)
        self.parallel = parallel
        self.live = live
        self.every_s = every_s
        self.stream = stream or sys.stderr
        # run id -> how its job ended (a state of harness.layout.RUN_STATES: done, stopped, ...), in
        # the order the runs ended
        self.outcomes: dict[str, str] = {}
        self._last_lines = -math.inf
        # run id -> (time.monotonic(), time.time()) when it was first shown: what a run's files said
        # before is an earlier attempt's
        self._launched: dict[str, tuple[float, float]] = {}
        # run id -> (step, updated_at) of the first progress seen, and the mean wall seconds per step
        # since then, once it spans RUN_SPEED_MIN_STEPS steps (kept after the run ends)
        self._first_seen: dict[str, tuple[int, float]] = {}
        self.run_speeds: dict[str, float] = {}
        self._live = None

    def __enter__(self) -> GridDisplay:
        if self.live:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(
                self._renderable([]), console=Console(file=self.stream), refresh_per_second=2, transient=False
            )
            self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.update(self._renderable([]))  # the last frame: every run ended
            self._live.stop()
            self._live = None

    def _fresh(self, run_id: str, updated_at: float) -> bool:
        """Whether a record written at ``updated_at`` (Unix seconds) is of this driver's attempt
        of the run, not an earlier one's (a run's process replaces it as it starts)."""
        launched = self._launched.get(run_id)
        return launched is None or updated_at >= launched[1] - LAUNCH_SLACK_S

    def in_flight(self, run_ids: Iterable[str]) -> list[RunProgress]:
        """The progress of ``run_ids`` that have logged a step (in this driver's attempt)."""
        out = []
        for rid in run_ids:
            p = read(layout.run_dir(self.grid_dir, rid), self.labels.get(rid, ""))
            if p is not None and self._fresh(rid, p.updated_at):
                out.append(p)
                step0, t0 = self._first_seen.setdefault(rid, (p.step, p.updated_at))
                if p.step - step0 >= RUN_SPEED_MIN_STEPS and p.updated_at > t0:
                    self.run_speeds[rid] = (p.updated_at - t0) / (p.step - step0)
        return out

    def before_first_step(self, run_ids: Iterable[str], stepped: Iterable[str] = ()) -> list[str]:
        """A line per run of ``run_ids`` not in ``stepped`` (those with a step): its phase
        (:func:`phase_line`), or that its process is starting (:func:`starting_line`)."""
        skip, now, lines = set(stepped), time.monotonic(), []
        for rid in run_ids:
            if rid in skip:
                continue
            label = self.labels.get(rid, "")
            phase = read_phase(layout.run_dir(self.grid_dir, rid), label)
            if phase is not None and self._fresh(rid, phase.updated_at):
                lines.append(phase_line(phase))
            else:
                lines.append(starting_line(rid, label, now - self._launched.get(rid, (now, 0.0))[0]))
        return lines

    def _summary(self, in_flight: Sequence[RunProgress], active: int) -> str:
        waiting = [r for r in self.labels if r not in self.outcomes][active:]
        steps_left = sum(self.max_steps.get(r) or 0 for r in waiting)
        eta = grid_eta(in_flight, steps_left, self.parallel, self.run_speeds)
        n = len(self.labels)
        counts = Counter(self.outcomes.values())
        done = counts[layout.DONE]
        # a run that ended otherwise (stopped, failed, diverged) is said so, not counted as done
        others = "".join(
            f", {counts[state]} {state}"
            for state in layout.RUN_STATES
            if state != layout.DONE and counts[state]
        )
        return (
            f"runs: {done}/{n} done{others}, {active} in flight, {len(waiting)} waiting; "
            f"grid ETA {duration(eta)}"
        )

    def _renderable(self, active: Sequence[str]):
        in_flight = self.in_flight(active)
        before = self.before_first_step(active, [p.run_id for p in in_flight])
        return table(in_flight, self._summary(in_flight, len(active)), before)

    def update(self, active: Sequence[str]) -> None:
        """Show the runs in flight (``active``: their run ids): redraw the table, or print a line
        per run (its step, its phase before the first step, or that its process is starting) and
        the grid's counts, at the first call and then when ``every_s`` has passed."""
        now = time.monotonic()
        for rid in active:
            self._launched.setdefault(rid, (now, time.time()))
        if self._live is not None:
            self._live.update(self._renderable(active))
            return
        if now - self._last_lines < self.every_s:
            return
        self._last_lines = now
        in_flight = self.in_flight(active)
        stepped = {p.run_id: p for p in in_flight}
        before = iter(self.before_first_step(active, stepped))
        stamp = time.strftime("%H:%M:%S")
        for rid in active:
            text = line(stepped[rid]) if rid in stepped else next(before)
            print(f"[{stamp}] {text}", file=self.stream, flush=True)
        print(f"[{stamp}] {self._summary(in_flight, len(active))}", file=self.stream, flush=True)

    def note(self, text: str) -> None:
        """A line of the driver's own (a stop asked for), above the table or among the lines."""
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stream, flush=True)

    def ended_run(self, run_id: str, state: str, detail: str = "") -> None:
        """A run's job ended: count it, and say so in one line (a done run with its final reward
        as the report scores it, :func:`harness.layout.final_reward`)."""
        from harness.layout import final_reward

        self.outcomes[run_id] = state
        final = final_reward(layout.run_dir(self.grid_dir, run_id)) if state == layout.DONE else None
        reward = f", final reward {final[0]:.3f} (mean of its last {final[1]} logged)" if final else ""
        text = f"[{len(self.outcomes)}/{len(self.labels)}] {run_id} {state}{reward}" + (
            f": {detail}" if detail else ""
        )
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stream, flush=True)
