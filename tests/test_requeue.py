"""Preemption, requeue and resume: every step exactly once, resumed from a checkpoint."""

import json
import os
import signal
import subprocess
import time

import pyarrow.parquet as pq
import submitit
from helpers import FAST_TINY, cli, make_spec

from harness import layout
from harness.cluster import status
from harness.cluster.executors import TrainingJob
from harness.layout import read_metrics
from harness.train.metrics import MetricsWriter


def test_writer_resume_keeps_each_step_once(tmp_path):
    """Preempted at step 37 of 100 with checkpoints every 10 steps: restart from 30, no doubles."""
    w = MetricsWriter(tmp_path, "r", flush_every=4)
    for s in range(1, 38):
        w.append({"step": s, "reward": float(s)})
    w.flush()  # what a kill leaves on disk (the writer flushes every few steps)
    w2 = MetricsWriter(tmp_path, "r", flush_every=4)
    w2.truncate_after(30)
    assert read_metrics(tmp_path).column("step").to_pylist() == list(range(1, 31))
    for s in range(31, 101):
        w2.append({"step": s, "reward": -float(s)})
    w2.compact()
    table = pq.read_table(tmp_path / layout.METRICS_DIR / layout.COMPACT_FILE)
    assert table.column("step").to_pylist() == list(range(1, 101))
    rewards = table.column("reward").to_pylist()
    assert rewards[29] == 30.0 and rewards[30] == -31.0  # rows 31..37 of the first attempt are gone
    assert sorted(p.name for p in (tmp_path / layout.METRICS_DIR).iterdir()) == [layout.COMPACT_FILE]


def test_unreadable_part_is_set_aside_never_deleted(tmp_path):
    w = MetricsWriter(tmp_path, "r", flush_every=4)
    for s in range(1, 13):
        w.append({"step": s, "reward": float(s)})
    parts = sorted((tmp_path / layout.METRICS_DIR).glob("part-*.parquet"))
    assert len(parts) == 3
    damaged = parts[1].read_bytes()[:-40]  # steps 5..8, its footer cut off
    parts[1].write_bytes(damaged)
    w2 = MetricsWriter(tmp_path, "r", flush_every=4)
    w2.truncate_after(10)
    kept = tmp_path / layout.METRICS_DIR / (parts[1].name + ".unreadable")
    assert w2.quarantined == [kept] and kept.read_bytes() == damaged
    assert read_metrics(tmp_path).column("step").to_pylist() == [1, 2, 3, 4, 9, 10]
    w2.compact()
    assert kept.exists() and w2.quarantined == [kept]


def _wait_for_step(run_dir, step, proc_alive, timeout=600):
    t0 = time.time()
    while time.time() - t0 < timeout:
        table = read_metrics(run_dir)
        if table is not None and table.num_rows and max(table.column("step").to_pylist()) >= step:
            return
        assert proc_alive(), "the job ended before reaching the step"
        time.sleep(0.2)
    raise AssertionError(f"step {step} not reached in {timeout} s")


def _task_pids(controller_pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(controller_pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def test_usr2_checkpoints_requeues_and_resumes(tmp_path, tiny_model, chain_sum_task):
    """submitit's preemption signal (USR2): checkpoint at the next step, requeue, resume from it."""
    spec = make_spec(tiny_model, chain_sum_task, max_steps=16, num_iterations=2).with_settings(
        {"harness.checkpoint_steps": 100, "harness.flush_every": 1}  # no periodic checkpoint before
    )
    run_dir = tmp_path / spec.run_id
    ex = submitit.LocalExecutor(folder=tmp_path / "logs")
    ex.update_parameters(timeout_min=20)
    job = ex.submit(TrainingJob(spec, str(run_dir), 1))
    _wait_for_step(run_dir, 5, lambda: not job.done())
    pids = _task_pids(int(job.job_id))
    assert pids
    for pid in pids:
        os.kill(pid, signal.SIGUSR2)
    summary = job.result()
    assert summary["steps"] == 16
    resumed = summary["resumed_from"]
    assert resumed is not None and 5 <= resumed < 16
    df = pq.read_table(run_dir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()
    assert list(df["step"]) == list(range(1, 17))
    assert (run_dir / layout.DONE_FILE).exists()
    log = "".join(p.read_text() for p in (tmp_path / "logs").glob("*.out"))
    assert "USR2 received" in log


def test_kill_without_warning_resumes_from_periodic_checkpoint(tmp_path, model_cache):
    """SIGKILL mid-run (as after an `scontrol requeue` grace period): re-running resumes from the
    latest periodic checkpoint and the metrics still hold each step once."""
    results = tmp_path / "results"
    max_steps = 30  # far enough past the kill that a slow poll cannot let the run finish first
    args = [
        "ablations/smoke.yaml",
        "--results",
        str(results),
        *[f"-otiny.{k}={v}" for k, v in FAST_TINY.items()],
        "-otask.train_size=256",
        "-ogrid.seed=[0]",
        "-ogrid.loss_type=[grpo]",
        f"-otrainer.max_steps={max_steps}",
        "-otrainer.per_device_train_batch_size=16",
        "-oharness.checkpoint_steps=4",
        "-oharness.flush_every=1",
        "-oharness.eval_steps=0",
        "--executor",
        "debug",
        "--no-report",
    ]
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    grid_dir = results / "smoke"
    while not (grid_dir / layout.RUNS_DIR).exists():
        assert proc.poll() is None
        time.sleep(0.2)
    run_dir = next((grid_dir / layout.RUNS_DIR).iterdir())
    _wait_for_step(run_dir, 2, lambda: proc.poll() is None)
    (row,) = status.grid_status(grid_dir)
    assert row.state == "running"  # a local run: its owner process is alive
    _wait_for_step(run_dir, 9, lambda: proc.poll() is None)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (run_dir / layout.DONE_FILE).exists()
    (row,) = status.grid_status(grid_dir)
    assert row.state == "stopped" and row.error.startswith("killed (its process ended without a word")
    assert " at step " in row.error and "running the grid again resumes it from step " in row.error
    before = read_metrics(run_dir).column("step").to_pylist()
    assert 9 <= max(before) < max_steps, "the kill must land mid-run for this test to mean anything"
    cli("run", *args)
    done = json.loads((run_dir / layout.DONE_FILE).read_text())
    # the latest complete checkpoint at or before the kill (one being written when killed is skipped)
    last = 4 * (max(before) // 4)
    assert done["resumed_from"] in (last, last - 4) and done["resumed_from"] >= 8
    df = pq.read_table(run_dir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()
    assert list(df["step"]) == list(range(1, max_steps + 1))
    assert done["steps"] == max_steps
    assert [r.state for r in status.grid_status(grid_dir)] == ["done"]


def test_second_writer_is_refused(tmp_path, tiny_model, chain_sum_task):
    """A run being trained by another process (its lock held) is not touched by a second start."""
    import filelock
    import pytest

    from harness.train.training import RunBusy, train

    spec = make_spec(tiny_model, chain_sum_task, max_steps=2)
    run_dir = tmp_path / spec.run_id
    run_dir.mkdir()
    with filelock.FileLock(str(run_dir / ".run.lock")), pytest.raises(RunBusy, match="another process"):
        train(spec, run_dir)
    assert sorted(p.name for p in run_dir.iterdir()) == [".run.lock"]


def _spec_with(tiny_model, chain_sum_task, harness: dict, **trainer):
    return make_spec(tiny_model, chain_sum_task, **trainer).with_settings(
        {f"harness.{k}": v for k, v in harness.items()}
    )


def test_metrics_reach_disk_before_each_checkpoint(tmp_path, tiny_model, chain_sum_task, monkeypatch):
    """A kill right after a checkpoint must not leave steps that the resumed run will not log again."""
    from harness.train.trainer import HarnessGRPOTrainer

    spec = _spec_with(tiny_model, chain_sum_task, {"checkpoint_steps": 3, "flush_every": 100}, max_steps=6)
    run_dir = tmp_path / spec.run_id
    on_disk_at_save = []
    real_save = HarnessGRPOTrainer._save_checkpoint

    def save(self, *a, **kw):
        table = read_metrics(run_dir)
        on_disk_at_save.append((self.state.global_step, table.column("step").to_pylist() if table else []))
        return real_save(self, *a, **kw)

    monkeypatch.setattr(HarnessGRPOTrainer, "_save_checkpoint", save)
    from harness.train.training import train

    train(spec, run_dir)
    assert on_disk_at_save == [(3, [1, 2, 3]), (6, list(range(1, 7)))]


def test_killed_after_the_last_checkpoint_finishes_without_training_past_max_steps(
    tmp_path, tiny_model, chain_sum_task
):
    from harness.train.training import train

    spec = _spec_with(tiny_model, chain_sum_task, {"checkpoint_steps": 2, "flush_every": 1}, max_steps=4)
    run_dir = tmp_path / spec.run_id
    train(spec, run_dir)
    # what a kill between the final checkpoint and DONE leaves: parts, a checkpoint at max_steps, no DONE
    mdir = run_dir / layout.METRICS_DIR
    table = pq.read_table(mdir / layout.COMPACT_FILE)
    pq.write_table(table, mdir / "part-000001.parquet")
    (mdir / layout.COMPACT_FILE).unlink()
    (run_dir / layout.DONE_FILE).unlink()
    summary = train(spec, run_dir)
    assert summary["steps"] == 4 and summary["resumed_from"] == 4
    assert read_metrics(run_dir).column("step").to_pylist() == [1, 2, 3, 4]
    assert json.loads((run_dir / layout.DONE_FILE).read_text())["steps"] == 4
    assert not (run_dir / layout.CHECKPOINTS_DIR / "checkpoint-5").exists()


def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(
    tmp_path, tiny_model, chain_sum_task, capfd
):
    """A kill inside a checkpoint save leaves an empty trainer_state.json and no marker: the re-run
    resumes from the checkpoint before, says so, and ends with every step (metrics and samples)
    once, as an uninterrupted run."""
    from harness.train import checkpoints
    from harness.train.training import train

    harness = {"checkpoint_steps": 2, "flush_every": 1, "samples_steps": 1, "samples_n": 1}
    spec = _spec_with(tiny_model, chain_sum_task, harness, max_steps=6, num_iterations=2)
    whole = train(spec, tmp_path / "whole")
    assert whole["steps"] == 6
    run_dir = tmp_path / "broken"
    calls = []
    summary = train(spec, run_dir, stop_requested=lambda: calls.append(1) or len(calls) >= 5)
    assert summary.get("preempted") and summary["steps"] == 5
    ckpt_dir = run_dir / layout.CHECKPOINTS_DIR
    assert [s for s, _ in checkpoints.checkpoints(ckpt_dir)] == [5, 4]
    newest = ckpt_dir / "checkpoint-5"
    (newest / checkpoints.COMPLETE_FILE).unlink()
    (newest / "trainer_state.json").write_text("")
    capfd.readouterr()
    done = train(spec, run_dir)
    assert done["resumed_from"] == 4 and done["steps"] == 6
    err = capfd.readouterr().err
    assert "resumes from step 4 (checkpoint-4); checkpoint-5 is damaged: trainer_state.json is empty" in err
    attempts = layout.read_attempts(run_dir)
    assert [a["outcome"] for a in attempts] == ["stopped", "done"]
    assert attempts[-1]["resume_from_step"] == 4 and "checkpoint-5" in attempts[-1]["damaged_checkpoints"]
    a = pq.read_table(tmp_path / "whole" / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()
    b = pq.read_table(run_dir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()
    assert list(b["step"]) == list(range(1, 7))
    for col in ("loss", "reward", "w_seq/mean", "log_w_seq/mean", "entropy", "grad_norm"):
        assert a[col].equals(b[col]), col
    steps = [json.loads(line)["step"] for line in (run_dir / layout.SAMPLES_FILE).read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]
    # keep_checkpoints = 2 complete ones; the damaged checkpoint-5 is older than checkpoint-6: gone
    assert [s for s, _ in checkpoints.checkpoints(ckpt_dir)] == [6, 4]


def test_a_resumed_run_keeps_its_synced_reference_model(tmp_path, tiny_model, chain_sum_task):
    """With a hard reference sync after every step (beta > 0), the reference model is no longer the
    base model; TRL's checkpoint holds only the policy, the harness saves the reference beside it.
    Stopped at step 4 and resumed, the run's KL (0 at each step that generates) equals the
    uninterrupted run's at every step."""
    from harness.train import checkpoints
    from harness.train.training import train

    trainer = {"beta": 0.1, "sync_ref_model": True, "ref_model_sync_steps": 1, "ref_model_mixup_alpha": 1.0}
    spec = _spec_with(
        tiny_model, chain_sum_task, {"checkpoint_steps": 10}, max_steps=6, num_iterations=2, **trainer
    )
    train(spec, tmp_path / "whole")
    run_dir = tmp_path / "resumed"
    calls = []
    assert train(spec, run_dir, stop_requested=lambda: calls.append(1) or len(calls) >= 4)["steps"] == 4
    assert (run_dir / layout.CHECKPOINTS_DIR / "checkpoint-4" / checkpoints.REF_MODEL).exists()
    assert train(spec, run_dir)["resumed_from"] == 4
    a = pq.read_table(tmp_path / "whole" / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()
    b = pq.read_table(run_dir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()
    assert list(b["step"]) == list(range(1, 7))
    assert (b.loc[b["step"] % 2 == 1, "kl"] <= 1e-6).all()  # steps 1, 3, 5 generate; 5 after the resume
    for col in ("kl", "loss", "reward", "w_seq/mean"):
        assert a[col].equals(b[col]), (col, a[col].tolist(), b[col].tolist())
