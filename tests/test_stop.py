"""One line on stop: Ctrl-C or SIGTERM to `grpo-harness run` stops its runs at their next step with a
checkpoint (before the first step: at once), prints one line per run left unfinished and the
command that resumes them, no traceback, and exits 130 or 143; that command then finishes every
run with each step's metrics exactly once."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest
from helpers import REPO, as_a_terminal_starts_it

from harness import layout
from harness.cli import resume_command, stopped_lines
from harness.cluster import stopping
from harness.cluster.executors import Outcome


def test_the_first_signal_asks_the_runs_to_stop_the_second_kills_them(monkeypatch):
    sent, killed = [], []
    monkeypatch.setattr(stopping, "signal_job", lambda job, signum: sent.append((job, signum)))
    monkeypatch.setattr(stopping, "kill_job", lambda job: killed.append(job) or True)
    stop = stopping.DriverStop()
    assert not stop.requested and stop.forward(["a"]) == [] and sent == []
    stop.note(signal.SIGINT)
    assert stop.requested and not stop.forced
    (news,) = stop.news(2)
    assert news.startswith("SIGINT received: launching no more runs; asking the 2 in flight to stop")
    assert "(Ctrl-C again stops them at once)" in news and stop.news(2) == []
    assert stop.forward(["a", "b"]) == [] and sent == [("a", signal.SIGTERM), ("b", signal.SIGTERM)]
    monkeypatch.setattr(stopping, "FORWARD_EVERY_S", 0.0)  # repeated: a process still starting may miss one
    stop.forward(["a"])
    assert sent[-1] == ("a", signal.SIGTERM) and killed == []
    stop.note(signal.SIGINT)
    assert stop.forced and stop.news(1)[0].startswith("SIGINT again: stopping the runs at once")
    assert stop.forward(["a"]) == ["a"] and killed == ["a"]


def test_in_the_drivers_process_a_second_signal_raises_as_ctrl_c_does():
    stop = stopping.DriverStop(in_process=True)
    stop.note(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        stop.note(signal.SIGTERM)
    assert stop.signum == signal.SIGTERM and stopping.GridStopped(stop.signum, []).exit_code == 143
    assert stopping.GridStopped(signal.SIGINT, []).exit_code == 130


def test_processes_started_for_the_runs_ignore_a_terminals_ctrl_c():
    probe = [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)"]
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's python has it
    try:
        with stopping.children_ignore_sigint():
            inside = subprocess.run(probe, capture_output=True, text=True).stdout.strip()
        assert inside == "True"
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back after
    finally:
        signal.signal(signal.SIGINT, before)


def test_the_stop_says_each_unfinished_run_and_the_command_that_resumes_them():
    """A line per run started and left unfinished (a failed one says the command leaves it); the
    runs not started yet in one line."""
    outcomes = [
        Outcome("a", layout.DONE),
        Outcome("b", layout.STOPPED, error="stopped on request (Ctrl-C or SIGTERM) at step 7; ..."),
        Outcome("c", layout.PENDING, error="not started"),
        Outcome("d", layout.PENDING, error="not started"),
        Outcome("e", layout.FAILED, error="RuntimeError: boom"),
    ]
    command = resume_command(["grpo-harness", "run", "g.yaml", "-o", "grid.seed=[0]"])
    assert command == "grpo-harness run g.yaml -o 'grid.seed=[0]'"
    lines = stopped_lines(stopping.GridStopped(signal.SIGTERM, outcomes), {"b": "seed=1"}, command)
    assert lines == [
        "stopped by SIGTERM: 4 of 5 run(s) unfinished",
        "  run b (seed=1): stopped on request (Ctrl-C or SIGTERM) at step 7; ...",
        "  run e: RuntimeError: boom (left by the command below; add --retry-failed to train it again)",
        "  2 run(s) not started",
        "resume: grpo-harness run g.yaml -o 'grid.seed=[0]'",
    ]
    module = resume_command([str(REPO / "harness" / "__main__.py"), "run", "g.yaml"])
    assert module == shlex.join([sys.executable, "-m", "harness", "run", "g.yaml"])


# ------------------------------------------------------------------------------------- through the CLI

#: Two runs on the tiny model with a 30-step warm start, 24 training steps each; no eval. A stop
#: reaches a run up to about a second after the driver's signal: at 0.1 s a step (a fast core), 8
#: steps ended before it, so the run finished instead of stopping mid-run.
MAX_STEPS = 24
RUN = [
    "run",
    "ablations/smoke.yaml",
    "-ogrid.seed=[0]",
    "-ogrid.loss_type=[grpo,dapo]",
    "-otiny.sft_steps=30",
    "-otiny.sft_examples=512",
    "-otask.train_size=256",
    "-oharness.eval_steps=0",
    f"-otrainer.max_steps={MAX_STEPS}",
    "-oharness.checkpoint_steps=4",
    "-oexecutor.max_parallel=2",
    "--no-report",
    "--progress-every",
    "1",
]


def _start(cmd: list[str], out: Path, env: dict) -> subprocess.Popen:
    """The driver in a session of its own (as a terminal's foreground job), its output to a file."""
    with open(out, "w") as f:
        return subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=as_a_terminal_starts_it,
        )


def _wait(proc: subprocess.Popen, predicate, what: str, timeout: float = 600) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if predicate():
            return
        assert proc.poll() is None, f"the driver ended before {what}"
        time.sleep(0.2)
    raise AssertionError(f"not reached in {timeout} s: {what}")


def _ended(proc: subprocess.Popen, out: Path, results: Path) -> tuple[int, str]:
    rc = proc.wait(timeout=300)
    text = out.read_text()
    assert "Traceback" not in text, text[-3000:]
    left = [
        p.pid for p in psutil.process_iter(["cmdline"]) if str(results) in " ".join(p.info["cmdline"] or [])
    ]
    assert left == [], "a run's process outlived the driver"
    return rc, text


def _resume(text: str) -> list[str]:
    (line,) = [line for line in text.splitlines() if line.startswith("resume: ")]
    return shlex.split(line.removeprefix("resume: "))


def _phases(runs: Path) -> list[dict]:
    return [p for d in runs.glob("*") if (p := layout.read_phase(d))] if runs.exists() else []


def _step(runs: Path) -> int:
    return max([(layout.read_progress(d) or {}).get("step", 0) for d in runs.glob("*")] or [0])


@pytest.mark.slow
def test_ctrl_c_or_sigterm_stop_cleanly_and_the_same_command_resumes(tmp_path):
    """SIGINT to the driver's whole process group (a terminal's Ctrl-C) while the model is built,
    SIGTERM to the driver alone mid-run, SIGINT again between two runs; then the printed command."""
    results, cache, out = tmp_path / "results", tmp_path / "cache", tmp_path / "out.txt"
    env = {**os.environ, "GRPO_HARNESS_CACHE": str(cache)}
    runs = results / "smoke" / layout.RUNS_DIR
    cmd = [sys.executable, "-m", "harness", *RUN, "--results", str(results)]

    # 1. during the model's build: one run builds it, the other waits for it; `status` shows both
    proc = _start(cmd, out, env)

    def building() -> bool:
        return any(p["kind"] == layout.PHASE_MODEL and "SFT step" in p["phase"] for p in _phases(runs))

    _wait(proc, building, "the model's build")
    shown = subprocess.run(
        [sys.executable, "-m", "harness", "status", str(results / "smoke")],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout
    assert "running: " in shown and ": building model tiny: SFT step " in shown, shown
    os.killpg(proc.pid, signal.SIGINT)
    rc, text = _ended(proc, out, results)
    assert rc == 130 and "stopped by SIGINT: 2 of 2 run(s) unfinished" in text, text[-3000:]
    assert len(re.findall(r"^  run [0-9a-f]{10} \(loss_type=\w+\): .*before its first step", text, re.M)) == 2
    assert "building model tiny: SFT step" in text and "starting its process" in text  # the display said it
    assert sorted(p.name for p in cache.iterdir() if not p.name.endswith(".lock")) == []  # nothing half-built

    # 2. mid-run, SIGTERM to the driver alone: the run stops at its next step with a checkpoint
    proc = _start(_resume(text), out, env)
    _wait(proc, lambda: _step(runs) >= 2, "step 2")
    proc.send_signal(signal.SIGTERM)
    rc, text = _ended(proc, out, results)
    assert rc == 143 and "stopped by SIGTERM: " in text, text[-3000:]
    stopped = re.findall(
        r"^  run ([0-9a-f]{10}) .*at step (\d+); running the grid again resumes it from step \2$", text, re.M
    )
    assert stopped, text[-3000:]

    # 3. between runs: one at a time, SIGINT as soon as one is done; the other one is left
    done_before = {d.name for d in runs.iterdir() if (d / layout.DONE_FILE).exists()}
    proc = _start([*_resume(text), "-oexecutor.max_parallel=1"], out, env)

    def newly_done() -> bool:
        return any((d / layout.DONE_FILE).exists() and d.name not in done_before for d in runs.iterdir())

    _wait(proc, newly_done, "a run's end")
    os.killpg(proc.pid, signal.SIGINT)
    rc, text = _ended(proc, out, results)
    assert rc == 130 and "stopped by SIGINT: 1 of 2 run(s) unfinished" in text, text[-3000:]

    # the printed command finishes what is left; every step's metrics are there once
    proc = _start(_resume(text), out, env)
    rc, text = _ended(proc, out, results)
    assert rc == 0 and "run(s) finished" in text, text[-3000:]
    for run_dir in runs.iterdir():
        steps = (
            pq.read_table(run_dir / layout.METRICS_DIR / layout.COMPACT_FILE).column(layout.STEP).to_pylist()
        )
        assert steps == list(range(1, MAX_STEPS + 1)), (run_dir.name, steps)
    for run_id, step in stopped:  # resumed from the step it stopped at: nothing trained twice or lost
        starts = [a.get("resume_from_step") for a in layout.read_attempts(runs / run_id)]
        assert int(step) in starts, (run_id, step, starts)
        assert json.loads((runs / run_id / layout.DONE_FILE).read_text())["steps"] == MAX_STEPS


@pytest.mark.slow
def test_a_stop_takes_its_course_when_the_pipe_the_output_went_to_has_closed(tmp_path, model_cache):
    """``grpo-harness run ... | tee log`` and Ctrl-C: the terminal signals every process of the
    pipeline, ``tee`` ends first, and the driver's next line meets a closed pipe. The stop still
    takes its course: each run in flight checkpoints at its next step and records that it stopped
    on request, no process outlives the driver, and the exit status is SIGINT's (130), so a
    ``... && next`` does not go on."""
    results = tmp_path / "results"
    runs = results / "smoke" / layout.RUNS_DIR
    cmd = [sys.executable, "-m", "harness", *RUN, "--results", str(results)]
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=as_a_terminal_starts_it,
    )
    _wait(proc, lambda: _step(runs) >= 2, "step 2")
    proc.stdout.close()  # the reader (tee) has gone
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=300) == 130
    left = [
        p.pid for p in psutil.process_iter(["cmdline"]) if str(results) in " ".join(p.info["cmdline"] or [])
    ]
    assert left == [], "a run's process outlived the driver"
    for run_dir in runs.iterdir():
        if (run_dir / layout.DONE_FILE).exists():
            continue
        last = layout.read_attempts(run_dir)[-1]
        assert last.get("outcome") == "stopped", (run_dir.name, last)  # a killed run has no end record
        step = (layout.read_progress(run_dir) or {}).get("step", 0)
        if step:  # stopped after a step: its checkpoint is that step's
            assert (run_dir / layout.CHECKPOINTS_DIR / f"checkpoint-{step}").is_dir(), run_dir.name
