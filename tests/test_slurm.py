"""Against a real SLURM cluster (scripts/slurm-cluster.sh up): arrays, status, resubmission, requeue.

Skipped with the reason when no cluster answers here; failing instead when CI=true.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import FAST_TINY, REPO, cli, require_cluster

from harness import layout
from harness.cluster import slurm, status

_reason = slurm.slurm_available()
require_cluster(
    _reason,
    in_ci=f"SLURM is required in CI but not reachable: {_reason}",
    otherwise=f"no SLURM cluster reachable ({_reason}); run `bash scripts/slurm-cluster.sh up`",
)

pytestmark = pytest.mark.slurm
FAST = [f"-otiny.{k}={v}" for k, v in FAST_TINY.items()] + [
    "-otask.train_size=256",
    "-otrainer.per_device_train_batch_size=16",
    "-oharness.eval_steps=0",
    "-oexecutor.name=slurm",
    "-oexecutor.timeout_min=30",
    "-oexecutor.mem_gb=4",
]


def wait_until_finished(grid_dir: Path, timeout: float = 900) -> list:
    t0 = time.time()
    while time.time() - t0 < timeout:
        rows = status.grid_status(grid_dir)
        if all(r.state in ("done", "failed", "diverged", "stopped") for r in rows):
            return rows
        time.sleep(2)
    raise AssertionError(f"runs not finished after {timeout} s: {[(r.run_id, r.state) for r in rows]}")


def attempts(run_dir: Path) -> list[dict]:
    return layout.read_attempts(run_dir)


@pytest.fixture(scope="module")
def broken_model(tmp_path_factory) -> Path:
    """A folder that passes validation (it has a config.json) but cannot be loaded: the run raises."""
    path = tmp_path_factory.mktemp("broken-model")
    (path / "config.json").write_text('{"model_type": "no-such-architecture"}')
    return path


@pytest.fixture(scope="module")
def grid(tmp_path_factory, model_cache, tiny_model, broken_model):
    """6 good runs (3 loss types x 2 seeds) + 1 run whose model cannot load, submitted once."""
    results = tmp_path_factory.mktemp("slurm") / "results"
    grid_yaml = results.parent / "g.yaml"
    grid_yaml.write_text(
        (REPO / "ablations" / "smoke.yaml")
        .read_text()
        .replace("include: base.yaml", f"include: {REPO}/ablations/base.yaml")
        .replace("seed: [0, 1, 2]", "seed: [0, 1]")  # in the file: -o grid.seed would not reach "broken"
        + f"\nsubgrids:\n  good: {{}}\n  broken:\n    set: {{model: {broken_model}, loss_type: grpo, seed: 0}}\n"
    )
    args = [str(grid_yaml), "--results", str(results), *FAST, "-otrainer.max_steps=4"]
    proc = cli("submit", *args)
    assert "submitted array job" in proc.stdout
    grid_dir = results / "smoke"
    rows = wait_until_finished(grid_dir)
    return {"args": args, "grid_dir": grid_dir, "rows": rows, "broken": broken_model}


def test_array_runs_finish_with_complete_parquet(grid):
    rows = grid["rows"]
    good = [r for r in rows if r.varying.get("model") != str(grid["broken"])]
    assert len(rows) == 7 and len(good) == 6
    array_ids = {r.job_id.split("_")[0] for r in rows}
    assert len(array_ids) == 1  # one sbatch
    for r in good:
        assert r.state == "done", r
        run_dir = grid["grid_dir"] / layout.RUNS_DIR / r.run_id
        df = pq.read_table(run_dir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()
        assert list(df["step"]) == [1, 2, 3, 4]
        assert len(attempts(run_dir)) == 1
        prov = json.loads((run_dir / layout.PROVENANCE_FILE).read_text())
        assert prov["slurm_job_id"] and prov["git_commit"]  # the snapshot's commit


def test_failed_run_shows_log_and_error(grid):
    (bad,) = [r for r in grid["rows"] if r.varying.get("model") == str(grid["broken"])]
    assert bad.state == "failed"
    assert bad.log and Path(bad.log).exists()
    assert "no-such-architecture" in bad.error or "Error" in bad.error
    proc = cli("status", str(grid["grid_dir"]))
    assert "failed" in proc.stdout and bad.log in proc.stdout
    assert "6 done" in proc.stdout and "1 failed" in proc.stdout


def test_status_without_sacct(grid, tmp_path):
    """The run's own files are the truth: status is the same with sacct gone from PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("squeue", "sinfo", "scontrol", "sbatch", "scancel"):
        (bindir / tool).symlink_to(shutil.which(tool))
    env = {**os.environ, "PATH": f"{bindir}:{Path(sys.executable).parent}"}
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "status", str(grid["grid_dir"])],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "6 done" in proc.stdout and "1 failed" in proc.stdout


def test_resubmit_is_idempotent_and_resubmits_a_deleted_done(grid):
    proc = cli("submit", *grid["args"])
    assert "nothing to submit" in proc.stdout
    assert "skipped 6 run(s): done" in proc.stdout
    assert "skipped 1 run(s): failed (use --retry-failed)" in proc.stdout
    victim = next(r for r in grid["rows"] if r.state == "done")
    run_dir = grid["grid_dir"] / layout.RUNS_DIR / victim.run_id
    (run_dir / layout.DONE_FILE).unlink()
    proc = cli("submit", *grid["args"])
    assert "submitting 1 run(s)" in proc.stdout
    wait_until_finished(grid["grid_dir"])
    assert (run_dir / layout.DONE_FILE).exists()
    assert len(attempts(run_dir)) == 2
    others = [r for r in grid["rows"] if r.state == "done" and r.run_id != victim.run_id]
    assert all(len(attempts(grid["grid_dir"] / layout.RUNS_DIR / r.run_id)) == 1 for r in others)


def _single_run_args(tmp_path, name: str, steps: int, extra=()) -> list[str]:
    return [
        "ablations/smoke.yaml",
        "--results",
        str(tmp_path / "results"),
        *FAST,
        f"-oname={name}",
        "-ogrid.seed=[0]",
        "-ogrid.loss_type=[grpo]",
        f"-otrainer.max_steps={steps}",
        "-oharness.checkpoint_steps=5",
        "-oharness.flush_every=1",
        *extra,
    ]


def _single_run(tmp_path, name: str, steps: int, extra=()):
    results = tmp_path / "results"
    cli("submit", *_single_run_args(tmp_path, name, steps, extra))
    grid_dir = results / name
    (run_dir,) = list((grid_dir / layout.RUNS_DIR).iterdir())
    return grid_dir, run_dir


def _wait_step(run_dir: Path, step: int, timeout: float = 600) -> None:
    from harness.layout import read_metrics

    t0 = time.time()
    while time.time() - t0 < timeout:
        t = read_metrics(run_dir)
        if t is not None and t.num_rows and max(t.column("step").to_pylist()) >= step:
            return
        time.sleep(0.5)
    raise AssertionError(f"step {step} not reached")


@pytest.mark.parametrize("how", ["scontrol-requeue", "usr2"])
def test_requeued_run_resumes_from_checkpoint(tmp_path, model_cache, tiny_model, how):
    # still running when the signal lands, a second or two after step 8 (52 steps of 0.3-0.6 s here);
    # SLURM's KillWait is 5 s, far more than a step
    steps = 60
    grid_dir, run_dir = _single_run(tmp_path, f"requeue-{how}", steps, ["-oharness.checkpoint_steps=10"])
    _wait_step(run_dir, 8)
    from harness.layout import read_metrics

    logged = max(read_metrics(run_dir).column("step").to_pylist())
    job = json.loads((run_dir / layout.JOB_FILE).read_text())
    job_id = job["job_id"]
    if how == "scontrol-requeue":
        # SIGTERM, then SIGKILL KillWait (5 s) later: the run checkpoints at the next step and exits
        subprocess.run(["scontrol", "requeue", job_id], check=True)
    else:
        # submitit's preemption signal: checkpoint at the next step, requeued by submitit
        subprocess.run(["scancel", "--signal=USR2", job_id], check=True)
    (row,) = wait_until_finished(grid_dir, timeout=900)
    assert row.state == "done"
    done = json.loads((run_dir / layout.DONE_FILE).read_text())
    assert done["steps"] == steps
    tries = attempts(run_dir)
    assert len(tries) == 2 and tries[1]["resume_from_step"] == done["resumed_from"]
    # a checkpoint at the first step boundary after the signal, not only the periodic ones (every 10)
    assert done["resumed_from"] > logged
    signal_name = "SIGTERM" if how == "scontrol-requeue" else "SIGUSR2"
    assert (
        f"{signal_name} received: checkpointing at the next optimizer step" in Path(job["stdout"]).read_text()
    )
    df = pq.read_table(run_dir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()
    assert list(df["step"]) == list(range(1, steps + 1))


def test_two_simultaneous_submits_run_each_run_once(tmp_path, model_cache, tiny_model):
    results = tmp_path / "results"
    args = [
        sys.executable,
        "-m",
        "harness",
        "submit",
        "ablations/smoke.yaml",
        "--results",
        str(results),
        *FAST,
        "-oname=concurrent",
        "-ogrid.seed=[0]",
        "-otrainer.max_steps=2",
    ]
    procs = [
        subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    submitted = sum(int(o.split("submitting ")[1].split(" ")[0]) for o, _ in outs if "submitting " in o)
    assert submitted == 3
    rows = wait_until_finished(results / "concurrent")
    assert [r.state for r in rows] == ["done"] * 3
    for r in rows:
        assert len(attempts(results / "concurrent" / layout.RUNS_DIR / r.run_id)) == 1


def _submit_smoke(results: Path, *overrides: str):
    """``submit ablations/smoke.yaml`` into ``results`` with ``overrides``; the CompletedProcess."""
    return cli("submit", "ablations/smoke.yaml", "--results", str(results), *overrides, check=False)


def test_unknown_partition_is_refused_before_anything_is_written(tmp_path):
    results = tmp_path / "results"
    proc = _submit_smoke(results, "-oexecutor.partition=nosuchpart")
    assert proc.returncode == 2 and "no such partition" in proc.stderr and "nosuchpart" in proc.stderr
    assert not results.exists()


def test_failed_sbatch_leaves_no_submission_debris(tmp_path):
    results = tmp_path / "results"
    proc = _submit_smoke(results, "-ogrid.seed=[0]", "-oexecutor.additional_parameters={nosuchflag: 1}")
    assert proc.returncode == 1 and "sbatch failed" in proc.stderr
    grid_dir = results / "smoke"
    assert not list(grid_dir.glob("runs/*/job.json"))
    assert not [p for p in (grid_dir / "slurm_logs").rglob("*") if p.is_file()]
    assert not list((grid_dir / ".snapshots").iterdir())


def _wait_left_queue(job_id: str, timeout: float = 300) -> str:
    """Wait until ``job_id`` is out of SLURM's queue; its final state from sacct."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if job_id not in status.queue_states([job_id]):
            final = status.accounting_states([job_id]).get(job_id, "")
            if final and final not in ("RUNNING", "PENDING", "REQUEUED"):
                return final
        time.sleep(1)
    raise AssertionError(f"job {job_id} still queued after {timeout} s")


@pytest.mark.parametrize("how", ["preempt", "scancel"])
def test_preempted_or_cancelled_run_is_resubmitted_by_the_next_submit_and_resumes(
    tmp_path, model_cache, tiny_model, how
):
    """PreemptMode=CANCEL (the cluster's "urgent" partition preempts the default one) and a plain
    scancel end the job for good; the run is stopped, resumable, and the next submit (no
    --retry-failed) sends it again, to resume from its checkpoint."""
    steps = 80  # still running when the urgent job takes the node, a scheduling pass after step 12
    extra = ["-oharness.checkpoint_steps=10", "-oexecutor.cpus_per_task=2"]  # the whole node
    grid_dir, run_dir = _single_run(tmp_path, f"end-{how}", steps, extra)
    _wait_step(run_dir, 12)
    job_id = json.loads((run_dir / layout.JOB_FILE).read_text())["job_id"]
    urgent = None
    if how == "preempt":
        out = subprocess.run(
            ["sbatch", "--parsable", "-p", "urgent", "-c", "2", "--wrap", "sleep 2", "-o", "/dev/null"],
            capture_output=True,
            text=True,
            check=True,
        )
        urgent = out.stdout.strip()
    else:
        subprocess.run(["scancel", job_id], check=True)
    final = _wait_left_queue(job_id)
    assert final == ("PREEMPTED" if how == "preempt" else "CANCELLED")
    (row,) = status.grid_status(grid_dir)
    assert row.state == layout.STOPPED
    word = "preempted" if how == "preempt" else "cancelled"
    assert row.error.startswith(f"slurm: job {final} ({word}); the next submit resumes it from step "), (
        row.error
    )
    proc = cli("submit", *_single_run_args(tmp_path, f"end-{how}", steps, extra))
    assert "submitting 1 run(s)" in proc.stdout, proc.stdout
    (row,) = wait_until_finished(grid_dir, timeout=900)
    assert row.state == "done"
    done = json.loads((run_dir / layout.DONE_FILE).read_text())
    assert done["steps"] == steps and done["resumed_from"] >= 10
    df = pq.read_table(run_dir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()
    assert list(df["step"]) == list(range(1, steps + 1))
    if urgent:
        assert _wait_left_queue(urgent) == "COMPLETED"


def test_a_job_past_its_time_limit_is_stopped_and_resubmitted(tmp_path, model_cache, tiny_model):
    """A job that never reaches a step boundary before its time limit (here, a setup line that
    outlasts timeout_min) ends TIMEOUT: the run is stopped, and the next submit sends it again."""
    extra = ["-oexecutor.timeout_min=1", "-oexecutor.setup=[sleep 600]"]
    grid_dir, run_dir = _single_run(tmp_path, "timeout", 4, extra)
    job_id = json.loads((run_dir / layout.JOB_FILE).read_text())["job_id"]
    assert _wait_left_queue(job_id, timeout=400) == "TIMEOUT"
    (row,) = status.grid_status(grid_dir)
    assert row.state == layout.STOPPED
    assert row.error == (
        "slurm: job TIMEOUT (ran past its time limit (executor.timeout_min)); no complete checkpoint, "
        "so the next submit starts it over"
    )
    proc = cli("submit", *_single_run_args(tmp_path, "timeout", 4, ["-oexecutor.timeout_min=30"]))
    assert "submitting 1 run(s)" in proc.stdout
    (row,) = wait_until_finished(grid_dir, timeout=900)
    assert row.state == "done"


def test_an_out_of_memory_job_waits_for_retry_failed(tmp_path):
    """sacct's OUT_OF_MEMORY is a failure: shown with its fix, and not resubmitted on its own."""
    d = tmp_path / "runs" / "r"
    d.mkdir(parents=True)
    (d / layout.CONFIG_FILE).write_text('{"varying": {}}')
    (d / layout.JOB_FILE).write_text(json.dumps({"job_id": "99_0"}))
    row = status.run_status(d, queue={}, accounting={"99_0": "OUT_OF_MEMORY"})
    assert (
        row.state == layout.FAILED and "raise executor.mem_gb" in row.error and "--retry-failed" in row.error
    )
