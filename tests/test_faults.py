"""Faults: a kill at any moment never strands a run, and every ending says what happened.

The fault-injection test kills one run (kill -9, from inside the process: tests/fault_inject.py)
at several moments of its life, re-running it after each, and checks that the end result is the
uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers import REPO, as_a_terminal_starts_it, harness_command, make_spec, module_command

from harness import layout
from harness.cluster import status
from harness.train import checkpoints

#: Columns that measure the machine, not the training: they differ between any two runs (TRL's
#: ``step_time`` is its wall time of the step).
MACHINE = ("time/", "memory/", "machine/", "step_time")


def _metrics(run_dir: Path) -> pd.DataFrame:
    return pq.read_table(run_dir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()


def _attempt(spec_path: Path, run_dir: Path, point: str) -> int:
    command, env = module_command("fault_inject", str(spec_path), str(run_dir), point)
    proc = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**env, "OMP_NUM_THREADS": "1"}
    )
    return proc.returncode


@pytest.mark.slow
def test_kills_at_every_moment_end_in_the_uninterrupted_run(tmp_path, tiny_model, chain_sum_task):
    spec = make_spec(tiny_model, chain_sum_task, max_steps=8, num_iterations=2).with_settings(
        {
            "harness.checkpoint_steps": 2,
            "harness.flush_every": 1,
            "harness.samples_steps": 1,
            "harness.samples_n": 1,
        }
    )
    spec_path = tmp_path / "spec.pkl"
    spec_path.write_bytes(pickle.dumps(spec))
    whole, run_dir = tmp_path / "whole", tmp_path / "faulty"
    assert _attempt(spec_path, whole, "none") == 0
    kills = [
        ("step:3", 2),  # mid-run: resumes from checkpoint-2
        ("state:4", 2),  # inside checkpoint-4's save: an empty trainer_state.json, passed over
        ("marker:6", 6),  # checkpoint-6 saved, its marker not written: complete by inspection
        ("compact-write", 8),  # inside the final compaction, writing metrics.parquet
        ("compact-parts", 8),  # inside it, the parquet written and the parts not yet removed
    ]
    for point, resumes_from in kills:
        assert _attempt(spec_path, run_dir, point) == -signal.SIGKILL, point
        assert not (run_dir / layout.DONE_FILE).exists()
        row = status.run_status(run_dir, queue={})
        assert row.state == layout.STOPPED, point
        assert row.error.startswith("killed (its process ended without a word"), row.error
        assert f"running the grid again resumes it from step {resumes_from}" in row.error, (point, row.error)
        assert checkpoints.resume_point(run_dir / layout.CHECKPOINTS_DIR).step == resumes_from
    assert _attempt(spec_path, run_dir, "none") == 0
    done = json.loads((run_dir / layout.DONE_FILE).read_text())
    assert done["steps"] == 8 and done["resumed_from"] == 8 and "missing_steps" not in done
    a, b = _metrics(whole), _metrics(run_dir)
    assert list(b[layout.STEP]) == list(range(1, 9))
    deterministic = [c for c in a.columns if not c.startswith(MACHINE)]
    assert set(deterministic) <= set(b.columns)
    differ = [col for col in deterministic if not a[col].equals(b[col])]
    assert not differ, differ
    assert sorted(p.name for p in (run_dir / layout.METRICS_DIR).iterdir()) == [layout.COMPACT_FILE]
    samples = [json.loads(line) for line in (run_dir / layout.SAMPLES_FILE).read_text().splitlines()]
    expected = [json.loads(line) for line in (whole / layout.SAMPLES_FILE).read_text().splitlines()]
    assert samples == expected  # each step's samples once, as the uninterrupted run wrote them
    outcomes = [a.get("outcome") for a in layout.read_attempts(run_dir)]
    assert outcomes == [None] * len(kills) + ["done"]  # a killed attempt writes no end record


FAST_RUN = [
    "ablations/smoke.yaml",
    "-otiny.sft_steps=30",
    "-otiny.sft_examples=512",
    "-otask.train_size=256",
    "-ogrid.seed=[0]",
    "-oharness.eval_steps=0",
]


def _driver(results: Path, *extra: str, stderr=subprocess.PIPE, session: bool = False) -> subprocess.Popen:
    """``grpo-harness run`` of FAST_RUN; in a session of its own (``session``), for a kill of its whole
    process tree, it is started as a terminal starts it, else forked by the test process's
    preloaded interpreter (helpers.module_command)."""
    args = ["run", *FAST_RUN, "--results", str(results), *extra]
    command, env = ([sys.executable, "-m", "harness", *args], None) if session else harness_command(*args)
    return subprocess.Popen(
        command,
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=session,
        preexec_fn=as_a_terminal_starts_it,
    )


def _stop(proc: subprocess.Popen) -> None:
    """Stop a driver as a terminal's Ctrl-C would, so its runs end with it (a SIGKILL to the driver
    alone leaves submitit's local jobs training to their last step). A driver that outlasts 120 s
    after it is killed and the test fails: its Ctrl-C was lost."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError("the driver did not end within 120 s of its Ctrl-C") from None


def _wait(predicate, timeout: float = 300, what: str = "") -> None:
    import time

    t0 = time.time()
    while time.time() - t0 < timeout:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"not reached in {timeout} s: {what}")


@pytest.mark.slow
def test_two_drivers_of_one_grid_leave_each_other_alone(tmp_path, model_cache):
    """A second `run` of a grid whose run another driver trains skips it with that word, and
    neither driver exits non-zero for it. Without a terminal each driver prints a line per run in
    flight every --progress-every seconds."""
    results = tmp_path / "results"
    args = ["-ogrid.loss_type=[grpo]", "-otrainer.max_steps=30", "--no-report", "--progress-every", "1"]
    first = _driver(results, *args)
    runs = results / "smoke" / layout.RUNS_DIR
    _wait(lambda: runs.exists() and any(layout.read_progress(d) for d in runs.iterdir()), what="first step")
    (run_dir,) = runs.iterdir()
    assert layout.files_state(run_dir) == layout.RUNNING
    second = _driver(results, *args)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    assert "skipped 1 run(s): being trained by another process" in out and "nothing to run" in out
    assert f"  run {run_dir.name} is being trained by another process (host " in out
    last = out.strip().splitlines()[-1]  # the last line says why nothing ran, and where the run is
    assert last.startswith("nothing to run; 1 left to another process (run ") and ", at step " in last, last
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    assert "1/1 run(s) finished" in out
    lines = [line for line in err.splitlines() if f"] {run_dir.name}: step " in line]  # one run: no label
    assert lines and all("/30, " in line and "s/step, ETA " in line for line in lines), err[-2000:]
    assert f"[1/1] {run_dir.name} done" in err


@pytest.mark.slow
def test_a_rerun_right_after_a_kill_of_the_whole_tree_resumes(tmp_path, model_cache):
    """SIGKILL to the driver, submitit's job and the run's process, then at once a new driver: the
    killed owner held the run's lock, which the kernel released, so the run resumes (not skipped
    as trained elsewhere, though the owner file still names the dead pid, maybe a zombie)."""
    results = tmp_path / "results"
    args = [
        "-ogrid.loss_type=[grpo]",
        "-otrainer.max_steps=40",
        "-oharness.checkpoint_steps=5",
        "--no-report",
    ]
    first = _driver(results, *args, session=True)
    runs = results / "smoke" / layout.RUNS_DIR

    def done_ckpt() -> bool:  # complete: its marker is written last, after every file is on disk
        from harness.train.checkpoints import COMPLETE_FILE

        return runs.exists() and any(
            (d / layout.CHECKPOINTS_DIR / "checkpoint-5" / COMPLETE_FILE).exists() for d in runs.iterdir()
        )

    _wait(done_ckpt, what="the checkpoint of step 5")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    (run_dir,) = runs.iterdir()
    assert (run_dir / layout.OWNER_FILE).exists()  # nothing of the killed run could clean up
    second = _driver(results, *args)
    out, err = second.communicate(timeout=600)
    assert second.returncode == 0, err
    assert "being trained by another process" not in out and "1/1 run(s) finished" in out, out
    done = json.loads((run_dir / layout.DONE_FILE).read_text())
    assert done["steps"] == 40 and done["resumed_from"] >= 5


def test_a_run_another_process_holds_is_no_failure(tmp_path):
    from harness.cli import _print_outcomes
    from harness.cluster.executors import outcome_of

    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    busy = outcome_of("r", run_dir, {"busy": True, "detail": "run r is being trained by another process"})
    assert busy.state == layout.RUNNING and busy.error.endswith("(skipped)")
    assert _print_outcomes([busy], tmp_path) == 0


@pytest.mark.slow
def test_unwritable_results_is_one_error_and_writes_nothing(tmp_path):
    command, env = harness_command("run", *FAST_RUN, "--results", "/proc/grpo-harness-results")
    proc = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: cannot write results to /proc/grpo-harness-results/smoke: /proc")
    assert not Path("/proc/grpo-harness-results").exists()


def test_local_run_skips_failed_and_diverged_runs_unless_retry_failed(tmp_path):
    from harness.cluster.executors import FAILED_REASON, pending_local
    from harness.config.grid import expand
    from harness.config.spec import load_grid

    plan = expand(load_grid(REPO / "ablations" / "smoke.yaml", ["grid.seed=[0]"]))
    grid_dir = tmp_path / "smoke"
    states = [layout.DIVERGED_FILE, layout.FAILED_FILE, layout.DONE_FILE]
    for run, marker in zip(plan.runs, states, strict=True):
        d = layout.run_dir(grid_dir, run.run_id)
        d.mkdir(parents=True)
        (d / layout.CONFIG_FILE).write_text("{}")
        (d / marker).write_text("{}")
    todo, skipped = pending_local(plan.runs, grid_dir)
    assert todo == [] and skipped == {
        "done": [plan.runs[2].run_id],
        FAILED_REASON: [r.run_id for r in plan.runs[:2]],
    }
    todo, skipped = pending_local(plan.runs, grid_dir, retry_failed=True)
    assert todo == list(plan.runs[:2]) and skipped == {"done": [plan.runs[2].run_id]}


def test_missing_steps_are_said_by_status_and_the_driver(tmp_path, capsys):
    from harness.cli import _print_outcomes, format_status
    from harness.cluster.executors import outcome_of

    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / layout.DONE_FILE).write_text(json.dumps({"steps": 30, "missing_steps": [6, 7, 8]}))
    row = status.run_status(run_dir, queue={})
    assert row.state == layout.DONE
    said = "3 step(s) without metrics (an unreadable metrics file was set aside): 6, 7, 8"
    assert row.error == said
    assert f"r done: {said}" in format_status([row])
    assert _print_outcomes([outcome_of("r", run_dir)], tmp_path) == 0
    assert f"run r done: {said}" in capsys.readouterr().out


@pytest.mark.slow
def test_a_terminal_shows_every_run_in_flight_within_30_s_of_the_first_step(tmp_path, model_cache):
    import pty
    import re
    import select
    import time

    results = tmp_path / "results"
    master, slave = pty.openpty()
    proc = _driver(
        results, "-ogrid.loss_type=[grpo,dapo]", "-otrainer.max_steps=400", "--no-report", stderr=slave
    )
    os.close(slave)
    runs = results / "smoke" / layout.RUNS_DIR
    seen, text, first_step = set(), "", None
    deadline = time.time() + 600
    try:
        while time.time() < deadline and len(seen) < 2:
            if select.select([master], [], [], 0.5)[0]:
                text += os.read(master, 65536).decode(errors="replace")
            plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
            # a table row: run id, label, step/max, reward, s/step, ETA
            rows = re.findall(
                r"([0-9a-f]{10})\s+loss_type=\w+\s+(\d+)/400\s+([\d.]+)\s+([\d.]+)\s+\d+:\d\d:\d\d", plain
            )
            seen |= {rid for rid, *_ in rows}
            # the first step is on disk or already on the terminal (a row past step 0), whichever the
            # poll sees first: both can land between two polls
            stepped = runs.exists() and any(layout.read_progress(d) for d in runs.iterdir())
            if first_step is None and (stepped or any(int(step) > 0 for _, step, *_ in rows)):
                first_step = time.time()
            if first_step is not None:
                assert time.time() - first_step < 30 or len(seen) == 2, "a run in flight is not shown"
    finally:
        _stop(proc)
        os.close(master)
    assert len(seen) == 2, "a run in flight was never shown"
    assert any(layout.read_progress(d) for d in runs.iterdir()), "no run reached its first step"
    assert "grid ETA" in text


@pytest.mark.slow
def test_a_full_disk_stops_the_run_and_the_report_then_both_resume(tmp_path, model_cache):
    """Results on a 14 MB tmpfs fill up at the second checkpoint: the run stops (no FAILED
    marker), the report step says it cannot write and `run` exits 1 without touching the runs;
    with space freed, a plain `run` resumes the run from its last checkpoint and writes the report."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=14m", "tmpfs", str(disk)], capture_output=True
    )
    if mount.returncode != 0:  # not root, or no CAP_SYS_ADMIN: a small disk cannot be made here
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.decode().strip()}")
    try:
        args = ["-ogrid.loss_type=[grpo]", "-otrainer.max_steps=12", "-oharness.checkpoint_steps=2"]
        args += ["-oharness.keep_checkpoints=3"]
        first = _driver(disk, *args)
        out, err = first.communicate(timeout=600)
        assert first.returncode == 1, err
        (run_dir,) = (disk / "smoke" / layout.RUNS_DIR).iterdir()
        assert not (run_dir / layout.FAILED_FILE).exists() and not (run_dir / layout.DONE_FILE).exists()
        assert f"run {run_dir.name} stopped: no space left on device (" in err
        assert "free space, then running the grid again resumes it from step 2" in err
        assert "report: cannot write the report into" in err and "the runs' results are unchanged" in err
        assert "Traceback" not in err
        subprocess.run(["mount", "-o", "remount,size=300m", str(disk)], check=True)
        second = _driver(disk, *args)
        out, err = second.communicate(timeout=600)
        assert second.returncode == 0, err
        done = json.loads((run_dir / layout.DONE_FILE).read_text())
        assert done["steps"] == 12 and done["resumed_from"] == 2
        assert list(_metrics(run_dir)[layout.STEP]) == list(range(1, 13))
        assert (disk / "smoke" / layout.REPORT_DIR / "index.md").exists()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_status_watch_ends_once_nothing_is_in_flight(tmp_path):
    grid = tmp_path / "g"
    run_dir = grid / layout.RUNS_DIR / "r"
    run_dir.mkdir(parents=True)
    (run_dir / layout.CONFIG_FILE).write_text('{"varying": {"trainer.loss_type": "grpo"}}')
    (run_dir / layout.DONE_FILE).write_text('{"steps": 4}')
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "status", str(grid), "--watch", "0.2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("1 done") == 1 and "loss_type" in proc.stdout


def test_a_killed_attempt_gets_its_end_record_from_whoever_saw_it_end(tmp_path):
    """A SIGKILL leaves the attempt no moment to write: the driver that saw its job end writes the
    end record (once), and so does the next submit for a job the scheduler ended."""
    from harness.cluster import slurm
    from harness.cluster.executors import outcome_of

    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / layout.CONFIG_FILE).write_text("{}")
    (run_dir / layout.ATTEMPTS_FILE).write_text(json.dumps({"started_at": "t0"}) + "\n")
    first = outcome_of("r", run_dir)
    assert first.state == layout.STOPPED and first.error.startswith(status.KILLED_WORDS)
    outcome_of("r", run_dir)
    (attempt,) = layout.read_attempts(run_dir)
    assert attempt["outcome"] == "killed" and attempt["detail"] == first.error
    assert len((run_dir / layout.ATTEMPTS_FILE).read_text().splitlines()) == 2
    assert status.run_status(run_dir, queue={}).error == first.error

    from harness.config.grid import expand
    from harness.config.spec import load_grid

    (run,) = expand(
        load_grid(REPO / "ablations" / "smoke.yaml", ["grid.seed=[0]", "grid.loss_type=[grpo]"])
    ).runs
    d = layout.run_dir(tmp_path / "g", run.run_id)
    d.mkdir(parents=True)
    (d / layout.CONFIG_FILE).write_text("{}")
    (d / layout.JOB_FILE).write_text(json.dumps({"job_id": "999999_0"}))  # long gone from the queue
    (d / layout.ATTEMPTS_FILE).write_text(json.dumps({"started_at": "t0"}) + "\n")
    todo, _ = slurm.pending_runs([run], tmp_path / "g", record=False)
    assert todo == [run] and "outcome" not in layout.read_attempts(d)[-1]  # a dry run writes nothing
    slurm.pending_runs([run], tmp_path / "g", record=True)
    assert layout.read_attempts(d)[-1]["outcome"] == "ended by the scheduler"
