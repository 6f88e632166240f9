"""One run across two SLURM nodes (``scripts/slurm-cluster.sh up --nodes 2``): one process per node.

Through the CLI, a run with ``executor: {nodes: 2, tasks_per_node: 1}`` in the cluster's ``multi``
partition trains with torch.distributed (gloo) over the two nodes' addresses, is requeued with
``scontrol requeue`` mid-run and resumes from its checkpoint. Checked: it ran on two distinct hosts
as ranks 0 and 1, rank 0 alone wrote the run's records, the w_seq statistics of every step pool the
completions of both ranks, and with a hard reference sync after every step the KL is zero at each
step that generates (right after a sync), across the requeue too.

Skipped with the reason when no two-node cluster answers here; failing instead when CI=true.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import FAST_TINY, assert_whole_reference, cli, require_cluster

from harness import layout
from harness.cluster import slurm, status
from harness.train import checkpoints

PARTITION = os.environ.get("SLURM_MULTI_PARTITION_NAME", "multi")
USABLE = ("idle", "mixed", "allocated", "completing")


def _two_nodes() -> str | None:
    """None when the ``multi`` partition has two usable nodes, else why not."""
    reason = slurm.slurm_available()
    if reason:
        return reason
    out = status.scheduler_command(["sinfo", "-h", "-N", "-p", PARTITION, "-o", "%N %T"], timeout=15)
    if out is None or out.returncode != 0:
        return f"sinfo -p {PARTITION} failed"
    rows = [line.split() for line in out.stdout.splitlines()]
    usable = {row[0] for row in rows if len(row) == 2 and row[1].rstrip("*~#") in USABLE}
    if len(usable) < 2:
        return f"partition {PARTITION!r} has {len(usable)} usable node(s), not 2"
    return None


_reason = _two_nodes()
require_cluster(
    _reason,
    in_ci=f"a two-node SLURM cluster is required in CI: {_reason}",
    otherwise=f"no two-node SLURM cluster ({_reason}); run `bash scripts/slurm-cluster.sh up --nodes 2`",
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STEPS = 30  # 0.3-0.6 s a step here: still running when the requeue lands after step 8
PER_RANK = 16  # completions per rank and optimizer step (per_device_train_batch_size, no accumulation)
SYNC_EVERY = 1


#: DeepSpeed ZeRO stage 3 on DeepSpeed's CPU accelerator (gloo), batch sizes from the trainer's
ZERO3 = {
    "zero_optimization": {"stage": 3},
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
}


def _args(results: Path, deepspeed: dict | None) -> list[str]:
    return [
        "ablations/smoke.yaml",
        "--results",
        str(results),
        *[f"-otiny.{k}={v}" for k, v in FAST_TINY.items()],
        "-oname=multinode",
        "-ogrid.seed=[0]",
        "-ogrid.loss_type=[grpo]",
        "-otask.train_size=256",
        f"-otrainer.max_steps={STEPS}",
        f"-otrainer.per_device_train_batch_size={PER_RANK}",
        "-otrainer.beta=0.1",
        "-otrainer.sync_ref_model=true",
        f"-otrainer.ref_model_sync_steps={SYNC_EVERY}",
        "-otrainer.ref_model_mixup_alpha=1.0",
        "-oharness.eval_steps=0",
        "-oharness.checkpoint_steps=10",
        "-oharness.flush_every=1",
        "-oexecutor.name=slurm",
        f"-oexecutor.partition={PARTITION}",
        "-oexecutor.nodes=2",
        "-oexecutor.tasks_per_node=1",
        "-oexecutor.timeout_min=20",
        "-oexecutor.mem_gb=4",
        *([f"-otrainer.deepspeed={json.dumps(deepspeed)}"] if deepspeed else []),
    ]


def _wait(what, timeout: float, every: float = 0.5):
    """``what()`` once it is truthy; AssertionError after ``timeout`` seconds."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        got = what()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what.__doc__ or what}")


def _logged_step(run_dir: Path) -> int:
    """The newest step with metrics (0 before the first)."""
    from harness.layout import read_metrics

    table = read_metrics(run_dir)
    return max(table.column("step").to_pylist()) if table is not None and table.num_rows else 0


def _task_starts(grid_dir: Path) -> list[tuple[str, str]]:
    """(hostname, global rank) of every task start submitit logged, in every job's logs."""
    pattern = re.compile(r"Starting with JobEnvironment\(.*hostname=([^,]+),.*global_rank=(\d+)\(")
    starts = []
    for log in sorted((grid_dir / slurm.SLURM_LOGS_DIR).rglob("*_log.out")):
        starts += pattern.findall(log.read_text(errors="replace"))
    return starts


@pytest.mark.parametrize("deepspeed", [None, ZERO3], ids=["ddp", "zero3"])
def test_a_run_trains_across_two_nodes_and_resumes_after_a_requeue(
    tmp_path, model_cache, tiny_model, summary, deepspeed
):
    """With DDP (``trainer.deepspeed`` unset) and with DeepSpeed ZeRO-3, whose parameters, gradients
    and optimizer states are sharded over the two nodes: the synced reference is sharded too, so the
    checkpoints' ``ref_model.pt`` must be gathered whole, and the requeued run resumes from
    DeepSpeed's checkpoint (each rank's shard)."""
    results = tmp_path / "results"
    t0 = time.time()
    proc = cli("submit", *_args(results, deepspeed))
    assert "per run: 2 node(s) x 1 task(s)" in proc.stdout, proc.stdout
    grid_dir = results / "multinode"
    (run_dir,) = list((grid_dir / layout.RUNS_DIR).iterdir())
    _wait(lambda: _logged_step(run_dir) >= 8, timeout=300)
    logged = _logged_step(run_dir)
    job = json.loads((run_dir / layout.JOB_FILE).read_text())
    # SIGTERM to the tasks on both nodes, SIGKILL KillWait (5 s) later: both ranks agree on the next
    # step boundary, checkpoint there and exit; SLURM starts the job again (both nodes) after 10 s
    subprocess.run(["scontrol", "requeue", job["job_id"]], check=True)

    def finished():
        rows = status.grid_status(grid_dir)
        return rows if all(r.state in ("done", "failed", "diverged", "stopped") for r in rows) else None

    (row,) = _wait(finished, timeout=600, every=2)
    summary(f"run {row.run_id} {row.state} in {time.time() - t0:.0f} s (requeued at step {logged})")
    assert row.state == "done", row

    # (a) two nodes: two hosts, ranks 0 and 1, in the harness's records and in submitit's task logs
    tries = layout.read_attempts(run_dir)
    assert len(tries) == 2  # rank 0 alone writes: one start and one end record per attempt
    assert len((run_dir / layout.ATTEMPTS_FILE).read_text().splitlines()) == 4
    hosts = [t.get("hosts") for t in tries]
    assert all(h is not None and len(h) == 2 and len(set(h)) == 2 for h in hosts), tries
    prov = json.loads((run_dir / layout.PROVENANCE_FILE).read_text())
    assert prov["hosts"] == hosts[-1] and prov["host"] == hosts[-1][0]  # written by rank 0
    starts = _task_starts(grid_dir)
    expected = {(host, str(rank)) for ranks in hosts for rank, host in enumerate(ranks)}
    assert set(starts) == expected, starts
    assert len(starts) == 4  # two tasks, two attempts
    summary(f"hosts by rank, per attempt: {hosts}; submitit task starts (host, rank): {starts}")

    # (d) the requeue: resumed from the checkpoint at the first step boundary after the signal
    done = json.loads((run_dir / layout.DONE_FILE).read_text())
    assert done["steps"] == STEPS and tries[1]["resume_from_step"] == done["resumed_from"]
    assert done["resumed_from"] > logged, (done, logged)
    assert "SIGTERM received: checkpointing at the next optimizer step" in Path(job["stdout"]).read_text()
    df = pq.read_table(run_dir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas().set_index("step")
    assert list(df.index) == list(range(1, STEPS + 1))
    kept = [p for _, p in checkpoints.checkpoints(run_dir / layout.CHECKPOINTS_DIR)]
    assert kept and all((p / checkpoints.REF_MODEL).exists() for p in kept)  # the synced reference
    assert_whole_reference(kept[-1] / checkpoints.REF_MODEL, tiny_model)
    if deepspeed:  # DeepSpeed's own checkpoint, one optimizer shard per rank, is what it resumed from
        shards = sorted(q.name for q in kept[-1].glob("global_step*/*optim_states.pt"))
        assert len(shards) == 2, shards

    # (b) w_seq pools both ranks' completions: twice one rank's, at every step
    pooled = df["w_seq/n"] + df["w_seq/n_masked"]
    summary(
        f"w_seq completions per step (n + n_masked): {sorted(set(pooled.astype(int)))} over {len(df)} steps "
        f"({PER_RANK} per rank x 2 ranks); w_seq/n at steps 1-6: {df['w_seq/n'].iloc[:6].astype(int).tolist()}"
    )
    assert (pooled == 2 * PER_RANK).all()

    # (c) hard sync after every step, num_iterations = 2: a step that generates (reuse_index 1, its
    # reference log-probs taken then) measures KL against the policy itself, 0; a step that reuses
    # the batch after an update has KL > 0. After the requeue the reference comes from the
    # checkpoint (TRL's own checkpoint has only the policy: KL against the base model otherwise);
    # TRL restarts its generation cycle there, which reuse_index records. TRL logs the mean of the
    # ranks' KL, each >= 0 (k3 estimator), so <= 1e-6 holds for both ranks.
    kl, fresh = df["kl"], df[layout.REUSE_INDEX] == 1
    resumed = done["resumed_from"]
    summary(
        f"kl by step (g: generated at that step; resumed after step {resumed}): "
        + " ".join(f"{s}{'g' if fresh[s] else ''}:{v:.1e}" for s, v in kl.items())
    )
    assert fresh.sum() >= STEPS // 2 and fresh[1] and fresh[resumed + 1]
    assert (kl[fresh] <= 1e-6).all(), kl[fresh][kl[fresh] > 1e-6]
    assert (kl[~fresh] > 1e-6).all(), kl[~fresh][kl[~fresh] <= 1e-6]


def test_dynamic_sampling_keeps_the_same_groups_on_both_nodes(tmp_path, model_cache, summary):
    """Dynamic sampling across the two nodes: both ranks filter the rewards gathered from both and
    choose the same rows (the trainer checks it at every generation and raises otherwise); each
    trains its half, and the step's w_seq statistics pool the trained completions of both."""
    results = tmp_path / "results"
    args = [
        a for a in _args(results, None) if not a.startswith(("-otrainer.max_steps", "-oharness.checkpoint"))
    ]
    cli(
        "submit",
        *args,
        "-otrainer.max_steps=6",
        "-oharness.checkpoint_steps=3",
        "-odynamic_sampling.enable=true",
    )
    grid_dir = results / "multinode"
    (run_dir,) = list((grid_dir / layout.RUNS_DIR).iterdir())

    def finished():
        rows = status.grid_status(grid_dir)
        return rows if all(r.state in ("done", "failed", "diverged", "stopped") for r in rows) else None

    (row,) = _wait(finished, timeout=600, every=2)
    assert row.state == "done", row
    (attempt,) = layout.read_attempts(run_dir)
    assert len(set(attempt["hosts"])) == 2, attempt
    groups = [json.loads(line) for line in (run_dir / layout.DS_LOG_FILE).read_text().splitlines()]
    df = pq.read_table(run_dir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas().set_index("step")
    for g in groups:
        assert g["kept"] == (len(set(g["metric"])) > 1), g
    generating = sorted({g["step"] for g in groups})
    for step in generating:
        mine = [g for g in groups if g["step"] == step]
        assert df.loc[step, layout.DS_GROUPS_DRAWN] == len(mine)
        assert df.loc[step, layout.DS_GROUPS_TRAINED] == sum(g["trained"] for g in mine)
    trained = df[layout.DS_GROUPS_TRAINED].reindex(generating) * 8  # base.yaml: 8 completions a prompt
    pooled = (df["w_seq/n"] + df["w_seq/n_masked"]).reindex(generating)
    summary(f"dynamic sampling on two nodes: groups trained {df[layout.DS_GROUPS_TRAINED].tolist()}")
    assert pooled.tolist() == trained.tolist()
