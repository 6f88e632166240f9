"""Nothing silent: an embedded model's build says how far it is (its progress file beside the
cache's lock, read by every process waiting on the lock), a run says each phase before its first
step (its progress.json, its log), and the driver's display and `status` show them."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock

from harness import layout
from harness.cluster import progress, status
from harness.models import build_progress as bp
from harness.models.tiny import cached_build
from harness.train.phases import RunPhases, RunStopped


def test_a_build_says_its_stage_its_step_and_its_eta():
    sft = bp.BuildProgress(model="tiny-steps", stage=bp.SFT, step=340, max_steps=1500, s_per_step=0.3)
    assert bp.build_text(sft) == "building model tiny-steps: SFT step 340/1500, ETA 0:05:48"
    data = bp.BuildProgress(model="tiny-steps", stage=bp.DATA, examples=8192)
    assert bp.build_text(data) == "building model tiny-steps: generating 8192 SFT examples"
    waiting = bp.BuildProgress(
        model="tiny-steps",
        stage=bp.SFT,
        step=3,
        max_steps=30,
        builder="run d320cbaf4b (pid 7 on vm)",
        waiting=True,
    )
    assert (
        bp.build_text(waiting)
        == "waiting for the tiny-steps build by run d320cbaf4b (pid 7 on vm): SFT step 3/30"
    )
    unknown = bp.BuildProgress(model="tiny", waiting=True)  # the builder has not written its file yet
    assert bp.build_text(unknown) == "waiting for the tiny build by another process"


def test_the_progress_file_holds_what_the_build_said_last(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bp, "BUILD_PROGRESS_EVERY_S", 0.0)
    told = []
    report = bp.BuildReport(tmp_path / "k.progress.json", "tiny", bp.BuildWatch("run abc", told.append))
    report(bp.DATA, examples=64)
    report(bp.SFT, 0, 4)
    report(bp.SFT, 2, 4)
    seen = bp.read_build_progress(tmp_path / "k.progress.json")
    assert (seen.stage, seen.step, seen.max_steps, seen.waiting) == (bp.SFT, 2, 4, False)
    assert seen.builder.startswith("run abc (pid ") and seen.s_per_step is not None
    assert [(p.stage, p.step) for p in told] == [(bp.DATA, 0), (bp.SFT, 0), (bp.SFT, 2)]
    err = capsys.readouterr().err  # the build's own log: a line per stage, then every 30 s
    assert "building model tiny: generating 64 SFT examples" in err and "SFT step 0/4" in err
    assert bp.read_build_progress(tmp_path / "missing.json") is None


def _fake_build(out: Path, report) -> dict:
    report(bp.DATA, examples=8)
    for step in range(3):
        report(bp.SFT, step, 2)
    out.mkdir(parents=True)
    return {"build_seconds": 0.0}


def test_cached_build_tells_its_watch_and_leaves_no_progress_file(tmp_path):
    told = []
    path = cached_build(tmp_path, "k", _fake_build, "tiny", bp.BuildWatch("run abc", told.append))
    assert path.is_dir() and told and not told[-1].waiting
    assert not bp.build_progress_path(tmp_path, "k").exists()


def test_a_watch_that_raises_stops_the_build_and_frees_the_lock(tmp_path):
    def stop(progress):
        if progress.stage == bp.SFT:
            raise RunStopped("asked to stop")

    with pytest.raises(RunStopped):
        cached_build(tmp_path, "k", _fake_build, "tiny", bp.BuildWatch("run abc", stop))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.lock"]  # no temporary folder, no progress
    with FileLock(str(tmp_path / "k.lock")).acquire(timeout=0):
        pass


def test_a_process_waiting_for_the_build_reads_its_progress(tmp_path, monkeypatch):
    """Another process holds the lock and writes its progress; the waiter's watch is told of it
    as waiting, and once the folder is there the waiter takes it without building."""
    import harness.models.tiny as tiny

    monkeypatch.setattr(tiny, "WAIT_POLL_S", 0.1)
    record = {"model": "tiny", "stage": "sft", "step": 3, "max_steps": 30, "builder": "run xyz (pid 1 on vm)"}
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path), json.dumps(record)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "holding"
    told = []

    def watch(progress):
        told.append(progress)
        if len(told) == 2:  # let the builder finish
            (tmp_path / "go").touch()

    path = cached_build(
        tmp_path, "k", lambda out, report: pytest.fail("built twice"), "tiny", bp.BuildWatch("", watch)
    )
    assert holder.wait(timeout=60) == 0
    assert path == tmp_path / "k" and told and all(p.waiting for p in told)
    assert bp.build_text(told[0]) == "waiting for the tiny build by run xyz (pid 1 on vm): SFT step 3/30"


_HOLDER = """
import json, sys, time
from pathlib import Path
from filelock import FileLock
d = Path(sys.argv[1])
with FileLock(str(d / "k.lock")):
    (d / "k.progress.json").write_text(sys.argv[2])
    print("holding", flush=True)
    while not (d / "go").exists():
        time.sleep(0.05)
    (d / "k").mkdir()
    (d / "k.progress.json").unlink()
"""


def test_a_run_writes_each_phase_and_stops_at_one_when_asked(tmp_path, capsys):
    asked = []
    phases = RunPhases(tmp_path, stop_requested=lambda: bool(asked))
    phases.enter(layout.PHASE_DATASET, "building the dataset: chain_sum, 64 training and 16 eval items")
    info = layout.read_phase(tmp_path)
    assert info["kind"] == layout.PHASE_DATASET and info["phase"].startswith("building the dataset")
    assert layout.read_progress(tmp_path) is None  # no step yet: the step readers see nothing
    assert "building the dataset: chain_sum" in capsys.readouterr().err  # the run's log
    phases.on_build(bp.BuildProgress(model="tiny", stage=bp.SFT, step=1, max_steps=4, waiting=True))
    assert layout.read_phase(tmp_path)["kind"] == layout.PHASE_WAITING
    asked.append(True)
    phases.enter(layout.PHASE_EVAL, "evaluating the starting policy", stoppable=False)  # inside the trainer
    with pytest.raises(RunStopped, match=r"before the first step \(evaluating the starting policy\)"):
        phases.enter(layout.PHASE_TRAINER, "starting the trainer")
    (tmp_path / layout.PROGRESS_FILE).write_text(json.dumps({"step": 1, "phase": "x"}))
    assert layout.read_phase(tmp_path) is None  # a step replaces the phase


def _phase_file(run_dir: Path, text: str, kind: str = layout.PHASE_MODEL, at: float | None = None) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    at = time.time() if at is None else at
    record = {"phase": text, "kind": kind, "since": at - 5, "updated_at": at}
    (run_dir / layout.PROGRESS_FILE).write_text(json.dumps(record))


def test_without_a_terminal_every_run_gets_a_line_from_the_first_update(tmp_path):
    """A run at a step, one building its model, one whose process has not said anything yet, and
    one whose progress.json is an earlier attempt's: a line each at the first update, none at an
    update right after it."""
    grid = tmp_path / "g"
    stepped = layout.run_dir(grid, "a")
    stepped.mkdir(parents=True)
    info = {"step": 3, "max_steps": 10, "reward": 0.5, "s_per_step": 0.2, "updated_at": time.time()}
    (stepped / layout.PROGRESS_FILE).write_text(json.dumps(info))
    _phase_file(layout.run_dir(grid, "b"), "building model tiny: SFT step 3/30, ETA 0:00:09")
    _phase_file(layout.run_dir(grid, "d"), "an earlier attempt's words", at=time.time() - 3600)
    out = io.StringIO()
    labels = {"a": "seed=0", "b": "seed=1", "c": "seed=2", "d": "seed=3"}
    display = progress.GridDisplay(grid, labels, dict.fromkeys(labels, 10), 4, live=False, stream=out)
    display.update(["a", "b", "c", "d"])
    lines = [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines[0].startswith("a seed=0: step 3/10, reward 0.500")
    assert lines[1].startswith("b seed=1: building model tiny: SFT step 3/30, ETA 0:00:09 (for 0:00:0")
    assert lines[2] == "c seed=2: starting its process (launched 0:00:00 ago)"
    assert lines[3] == "d seed=3: starting its process (launched 0:00:00 ago)"
    assert lines[4].startswith("runs: 0/4 done, 4 in flight")
    display.update(["a", "b", "c", "d"])  # within every_s: nothing more
    assert len(out.getvalue().splitlines()) == 5


def _step_file(run_dir: Path, step: int, s_per_step: float, at: float, max_steps: int = 100) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    info = {"step": step, "max_steps": max_steps, "reward": 0.5, "s_per_step": s_per_step, "updated_at": at}
    (run_dir / layout.PROGRESS_FILE).write_text(json.dumps(info))


def test_the_grid_eta_times_the_waiting_steps_at_the_mean_speed_of_every_run_watched():
    """A run's mean speed over the steps it was watched, kept after it ends, times the steps of the
    runs still waiting; the recent speed of a run just started does not swing the estimate."""
    p = progress.RunProgress("b", "", step=2, max_steps=100, reward=None, s_per_step=0.5, updated_at=0.0)
    # without run speeds: the recent 0.5 s/step for b's 98 steps and for the 200 waiting, over 2 slots
    assert progress.grid_eta([p], 200, 2) == pytest.approx((98 + 200) * 0.5 / 2)
    # a ended at 2 s/step over its steps: the waiting steps go at 2; b at its recent speed still
    assert progress.grid_eta([p], 200, 2, {"a": 2.0}) == pytest.approx((98 * 0.5 + 200 * 2.0) / 2)
    # once b has its own mean (1.0), it is timed at it, and the waiting steps at the mean of a and b
    assert progress.grid_eta([p], 200, 2, {"a": 2.0, "b": 1.0}) == pytest.approx((98 * 1.0 + 200 * 1.5) / 2)
    assert progress.grid_eta([p], 0, 2, {"b": 1.0}) == pytest.approx(98.0)  # nothing waits: b's own ETA


def test_the_display_keeps_a_runs_mean_speed_after_it_ends(tmp_path):
    grid, t0 = tmp_path / "g", time.time()
    labels = {"a": "", "b": "", "c": ""}
    display = progress.GridDisplay(grid, labels, dict.fromkeys(labels, 100), 1, live=False, every_s=0.0)
    _step_file(layout.run_dir(grid, "a"), 1, s_per_step=0.1, at=t0)
    display.in_flight(["a"])
    _step_file(layout.run_dir(grid, "a"), 1 + progress.RUN_SPEED_MIN_STEPS - 1, s_per_step=0.1, at=t0 + 30)
    display.in_flight(["a"])
    assert display.run_speeds == {}  # too few steps watched to stand for the run
    _step_file(
        layout.run_dir(grid, "a"), 41, s_per_step=0.1, at=t0 + 80
    )  # recent steps fast, the run 2 s/step
    display.in_flight(["a"])
    assert display.run_speeds == {"a": pytest.approx(2.0)}
    display.ended_run("a", layout.DONE)
    _step_file(layout.run_dir(grid, "b"), 2, s_per_step=0.1, at=t0 + 90)
    summary = display._summary(display.in_flight(["b"]), 1)
    # b's 98 steps at its recent 0.1 s, c's 100 at a's 2 s (one slot): 210 s
    assert summary == "runs: 1/3 done, 1 in flight, 1 waiting; grid ETA 0:03:30"


def test_status_shows_a_run_that_builds_or_waits_for_its_model(tmp_path):
    from harness.cli import format_status

    grid = tmp_path / "g"
    run_dir = layout.run_dir(grid, "r")
    _phase_file(
        run_dir, "waiting for the tiny build by run q (pid 1 on vm): SFT step 3/30", layout.PHASE_WAITING
    )
    (run_dir / layout.CONFIG_FILE).write_text("{}")
    lock = FileLock(str(run_dir / layout.RUN_LOCK_FILE))
    (run_dir / layout.OWNER_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
    with lock:  # this process trains it, as far as the files tell
        row = status.run_status(run_dir, queue={})
        text = format_status([row], grid)
    assert row.state == layout.RUNNING and row.last_step is None
    assert "running: r: waiting for the tiny build by run q (pid 1 on vm): SFT step 3/30 (for 0:00:0" in text


def test_a_stop_before_the_first_step_says_where_the_run_was(tmp_path):
    run_dir = tmp_path / "r"
    _phase_file(run_dir, "building model tiny: SFT step 3/30")
    (run_dir / layout.CONFIG_FILE).write_text("{}")
    attempts = [
        {"started_at": "t", "host": "vm"},
        {"ended_at": "t", "outcome": "stopped", "detail": "at step 0"},
    ]
    (run_dir / layout.ATTEMPTS_FILE).write_text("".join(json.dumps(a) + "\n" for a in attempts))
    assert status.end_line(run_dir, layout.STOPPED) == (
        "stopped on request (Ctrl-C or SIGTERM) before its first step (building model tiny: SFT step 3/30); "
        "no complete checkpoint, so running the grid again starts it over"
    )


def test_a_slow_step_of_the_command_has_a_heartbeat():
    out = io.StringIO()
    with progress.heartbeat("checking the grid", every_s=0.01, stream=out):
        for _ in range(1000):  # until the first beat, however loaded the machine
            if out.getvalue():
                break
            time.sleep(0.01)
    assert out.getvalue().splitlines()[0].split("] ", 1)[1].startswith("still checking the grid (0:00:")


def test_the_trainer_phase_names_the_step_it_starts_at():
    """A fresh start says step 1; a resume from checkpoint-41 says step 42, the step it trains next."""
    from types import SimpleNamespace

    from harness.train.checkpoints import ResumePoint
    from harness.train.training import _starting_words

    config = SimpleNamespace(max_steps=150, deepspeed=None)
    assert _starting_words(config, ResumePoint(None, 0)) == "starting the trainer; then step 1 of 150"
    resumed = _starting_words(config, ResumePoint(Path("/r/checkpoint-41"), 41))
    assert resumed == "starting the trainer, resuming from checkpoint-41; then step 42 of 150"


def test_the_grid_counts_a_stopped_run_apart_from_the_done_ones(tmp_path):
    """After a stop, the summary line says how many runs are done and how many stopped, not that
    every run 'ended' as if the grid had finished."""
    labels = {"a": "", "b": "", "c": ""}
    display = progress.GridDisplay(tmp_path / "g", labels, dict.fromkeys(labels, 10), 2, live=False)
    display.ended_run("a", layout.DONE)
    display.ended_run("b", layout.STOPPED)
    display.ended_run("c", layout.STOPPED)
    summary = display._summary([], 0)
    assert summary.startswith("runs: 1/3 done, 2 stopped, 0 in flight, 0 waiting")
