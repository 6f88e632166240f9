"""One vocabulary of run states: what ``status``, ``plan``/``run`` and the report say of a run
folder, from its files alone and with a scheduler's queue as a hint."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import filelock
import pytest

from analysis import states
from harness import layout
from harness.cluster import status


def _run_folder(tmp_path, name: str, *files: str, owner_pid: int | None = None):
    d = tmp_path / "runs" / name
    d.mkdir(parents=True)
    for f in files:
        (d / f).write_text("{}")
    if owner_pid is not None:
        (d / layout.OWNER_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": owner_pid}))
    return d


def _dead_pid() -> int:
    pid = os.getpid() + 100_000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid += 1


@pytest.mark.parametrize(
    "files, owner, state",
    [
        ((), None, layout.PENDING),
        ((layout.CONFIG_FILE,), None, layout.STOPPED),
        ((layout.CONFIG_FILE,), "alive", layout.RUNNING),
        ((layout.CONFIG_FILE,), "dead", layout.STOPPED),
        ((layout.CONFIG_FILE, layout.FAILED_FILE), None, layout.FAILED),
        ((layout.CONFIG_FILE, layout.DIVERGED_FILE), None, layout.DIVERGED),
        ((layout.CONFIG_FILE, layout.DIVERGED_FILE, layout.DONE_FILE), None, layout.DONE),
    ],
)
def test_status_plan_and_report_say_the_same_of_a_local_run(tmp_path, files, owner, state):
    pid = {"alive": os.getpid(), "dead": _dead_pid(), None: None}[owner]
    d = _run_folder(tmp_path, "r", *files, owner_pid=pid)
    if owner == "alive":  # the owner holds the run's lock, as training.train does
        lock = filelock.FileLock(str(d / layout.RUN_LOCK_FILE))
        lock.acquire()
    assert layout.files_state(d) == state
    assert status.run_status(d, queue={}).state == state
    if state != layout.PENDING:  # the report reads only runs that have a folder with files
        assert states.read_states(tmp_path, ["r"]).loc["r", "state"] == state
    assert state in layout.RUN_STATES


def test_a_zombie_owner_trains_nothing(tmp_path):
    """A killed run's process whose parent died too is a zombie until init reaps it (a container's
    init may never do so): it holds no lock, so the run is stopped, and a re-run may take it."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            pass  # exited, not yet waited for: a zombie
        d = _run_folder(tmp_path, "r", layout.CONFIG_FILE, owner_pid=child.pid)
        assert layout.files_state(d) == layout.STOPPED
        assert not layout.pid_alive(child.pid) and layout.pid_alive(os.getpid())
    finally:
        child.wait()


def test_a_recycled_pid_owns_nothing(tmp_path):
    """The owner file names a live process (this one) that does not hold the run's lock: the pid
    was reused after the owner died, so the run is stopped, not running."""
    d = _run_folder(tmp_path, "r", layout.CONFIG_FILE, owner_pid=os.getpid())
    assert layout.files_state(d) == layout.STOPPED
    lock = filelock.FileLock(str(d / layout.RUN_LOCK_FILE))
    with lock:
        assert layout.files_state(d) == layout.RUNNING  # held through another open file: still seen
    assert layout.files_state(d) == layout.STOPPED


def test_the_queue_is_a_hint_for_submitted_runs(tmp_path):
    d = _run_folder(tmp_path, "r", layout.CONFIG_FILE)
    (d / layout.JOB_FILE).write_text(json.dumps({"job_id": "12_3"}))
    assert status.run_status(d, queue={"12_3": "PENDING"}).state == layout.QUEUED
    assert status.run_status(d, queue={"12_3": "RUNNING"}).state == layout.RUNNING
    assert status.run_status(d, queue={"12_3": "REQUEUE_HOLD"}).state == layout.REQUEUED
    gone = status.run_status(d, queue={}, accounting={"12_3": "CANCELLED"})
    assert gone.state == layout.STOPPED
    assert (
        gone.error
        == "slurm: job CANCELLED (cancelled); no complete checkpoint, so the next submit starts it over"
    )
    assert status.run_status(d, queue={}, accounting={"12_3": "OUT_OF_MEMORY"}).state == layout.FAILED
    (d / layout.DONE_FILE).write_text("{}")
    assert status.run_status(d, queue={"12_3": "RUNNING"}).state == layout.DONE  # the files win


def test_every_state_the_report_knows_is_in_the_vocabulary():
    assert set(states.STATES) <= set(layout.RUN_STATES)
    assert len(set(layout.RUN_STATES)) == len(layout.RUN_STATES) == 8


def test_terminal_tables_never_wrap_and_split_on_whitespace():
    from harness.cli import text_table

    long = "x" * 300
    lines = text_table(["run_id", "value", "state"], [["a", long, "done"], ["bb", "1", layout.STOPPED]])
    assert len(lines) == 3
    assert lines[0].split() == ["run_id", "value", "state"]
    assert lines[1].split() == ["a", long, "done"] and lines[2].split() == ["bb", "1", "stopped"]
    assert lines[1].index(long) == lines[2].index("1") == lines[0].index("value")  # aligned columns


def test_a_job_that_failed_after_the_run_stopped_is_stopped(tmp_path):
    """With a grace time, a preempted job that checkpointed and exited reads FAILED in sacct: the
    run's own end record (stopped) wins, and the next submit resumes it."""
    d = _run_folder(tmp_path, "r", layout.CONFIG_FILE)
    (d / layout.JOB_FILE).write_text(json.dumps({"job_id": "12_3"}))
    (d / layout.ATTEMPTS_FILE).write_text(
        json.dumps({"started_at": "t0"})
        + "\n"
        + json.dumps({"outcome": "stopped", "detail": "at step 7"})
        + "\n"
    )
    row = status.run_status(d, queue={}, accounting={"12_3": "FAILED"})
    assert row.state == layout.STOPPED
    assert (
        row.error
        == "slurm: job FAILED after the run stopped; no complete checkpoint, so the next submit starts it over"
    )


@pytest.mark.parametrize(
    ("final", "state", "words"),
    [
        (
            "PREEMPTED",
            layout.STOPPED,
            "(preempted); no complete checkpoint, so the next submit starts it over",
        ),
        ("TIMEOUT", layout.STOPPED, "(ran past its time limit (executor.timeout_min))"),
        ("NODE_FAIL", layout.STOPPED, "(its node failed)"),
        (
            "OUT_OF_MEMORY",
            layout.FAILED,
            "raise executor.mem_gb (or lower the batch), then submit --retry-failed",
        ),
        ("FAILED", layout.FAILED, "fix it, then submit --retry-failed"),
    ],
)
def test_scheduler_ends_map_to_one_state_each(tmp_path, final, state, words):
    d = _run_folder(tmp_path, "r", layout.CONFIG_FILE)
    (d / layout.JOB_FILE).write_text(json.dumps({"job_id": "12_3"}))
    row = status.run_status(d, queue={}, accounting={"12_3": final})
    assert row.state == state and words in row.error and row.error.startswith(f"slurm: job {final}")
