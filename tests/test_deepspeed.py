"""DeepSpeed ZeRO stages 1, 2 and 3 with two processes on this machine's CPUs (DeepSpeed's CPU
accelerator; gloo between the processes), through the CLI and submitit's local executor.

Checked against the same grid's run without DeepSpeed (two processes, DDP):
- every per-step metric the harness records (TRL's loss, reward, KL, clipped fractions, grad norm,
  the w_seq statistics, the off-policy flags, greedy accuracy) agrees within float32 summation
  order (:data:`RTOL`, :data:`ATOL`): the completions sampled are the same, so the rewards are equal;
- a hard reference sync every 2 steps (mixup alpha 1) gives KL 0 at each step after a sync, under
  every stage, ZeRO-3's sharded reference included;
- ``ref_model.pt`` holds the whole reference under ZeRO-3 (gathered, not one rank's shard) and
  equals the DDP run's;
- a ZeRO-2 run killed (SIGKILL, the whole process group) after a checkpoint resumes from DeepSpeed's
  checkpoint when run again: every step recorded once, and the metrics are those of the run that
  was never killed.

The two-node SLURM run under ZeRO-3, requeued mid-run, is in ``tests/test_multinode.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import FAST_TINY, SMALL_TASK, assert_whole_reference, cli

from harness import compare, layout
from harness.layout import read_metrics
from harness.train import checkpoints

pytest.importorskip("deepspeed", reason="the deepspeed extra (pip install -e '.[deepspeed]')")
pytestmark = pytest.mark.slow

STEPS = 12
SYNC_EVERY = 2
#: harness.compare's default tolerance: float32 sums taken in another order (DeepSpeed reduces
#: gradients in buckets; ZeRO-3 gathers parameters layer by layer). Measured on this grid: at most
#: about 1e-4 absolute on grad_norm (1e-5 relative) and 1e-5 on the w_seq statistics; the sampled
#: completions, and so the rewards, are identical.
RTOL, ATOL = compare.RTOL, compare.ATOL
#: torch's extensions folder of the module's runs (TORCH_EXTENSIONS_DIR), in its temporary folder
EXTENSIONS = "torch_extensions"


def _zero(stage: int) -> dict:
    return {
        "zero_optimization": {"stage": stage},
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
    }


def _grid(path: Path, deepspeed: list) -> Path:
    grid = {
        "name": "zero",
        "model": "tiny",
        "tiny": FAST_TINY,
        "task": {**SMALL_TASK, "train_size": 256, "eval_size": 16},
        "trainer": {
            "max_steps": STEPS,
            "per_device_train_batch_size": 8,
            "num_generations": 4,
            "max_completion_length": 6,
            "num_iterations": 2,  # every other step reuses its batch after an update: w_seq != 1
            "learning_rate": 1.0e-3,
            "beta": 0.1,
            "sync_ref_model": True,
            "ref_model_sync_steps": SYNC_EVERY,
            "ref_model_mixup_alpha": 1.0,
        },
        "harness": {"device": "cpu", "eval_steps": 6, "checkpoint_steps": 2, "flush_every": 1},
        "executor": {"name": "local", "tasks_per_node": 2},
        "grid": {"trainer.deepspeed": deepspeed},
    }
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    return path


def _runs(grid_dir: Path) -> dict[int, Path]:
    """ZeRO stage (0: no DeepSpeed) -> run folder."""
    out = {}
    for run_dir in (grid_dir / layout.RUNS_DIR).iterdir():
        ds = json.loads((run_dir / layout.CONFIG_FILE).read_text())["config"]["trainer"].get("deepspeed")
        out[ds["zero_optimization"]["stage"] if ds else 0] = run_dir
    return out


def _metrics(run_dir: Path) -> pd.DataFrame:
    return read_metrics(run_dir).to_pandas().set_index("step")


def _disagree(run_dir: Path, reference: Path) -> list[str]:
    """The metric columns of ``run_dir`` that differ from ``reference``'s beyond the tolerance, at
    the same steps (``grpo-harness compare``)."""
    steps, diffs = compare.compare_runs(run_dir, reference)
    assert steps == list(range(1, STEPS + 1))
    return [d.column for d in diffs if not d.agrees]


@pytest.fixture(scope="module")
def zero_runs(tmp_path_factory, model_cache, tiny_model) -> dict[int, Path]:
    """The grid run without DeepSpeed and under ZeRO-1, 2 and 3, uninterrupted, with torch's
    extensions folder (where DeepSpeed compiles its ops) in the module's temporary folder."""
    root = tmp_path_factory.mktemp("zero")
    grid = _grid(root / "zero.yaml", [None, _zero(1), _zero(2), _zero(3)])
    before = os.environ.get("TORCH_EXTENSIONS_DIR")
    os.environ["TORCH_EXTENSIONS_DIR"] = str(root / EXTENSIONS)
    try:
        cli("run", str(grid), "--results", str(root / "results"), "--no-report", timeout=1200)
    finally:
        if before is None:
            del os.environ["TORCH_EXTENSIONS_DIR"]
        else:
            os.environ["TORCH_EXTENSIONS_DIR"] = before
    runs = _runs(root / "results" / "zero")
    assert sorted(runs) == [0, 1, 2, 3]
    return runs


def test_zero_stages_record_the_metrics_of_the_run_without_deepspeed(zero_runs, summary):
    plain = _metrics(zero_runs[0])
    assert list(plain.index) == list(range(1, STEPS + 1))
    for stage in (1, 2, 3):
        run_dir = zero_runs[stage]
        assert (run_dir / layout.DONE_FILE).exists()
        prov = json.loads((run_dir / layout.PROVENANCE_FILE).read_text())
        assert len(prov["hosts"]) == 2  # two processes
        zero = _metrics(run_dir)
        worst = {
            c: float(np.nanmax(np.abs(plain[c].to_numpy(float) - zero[c].to_numpy(float))))
            for c in ("loss", "grad_norm", "kl", "w_seq/mean", "w_seq/max", "eval/accuracy")
        }
        summary(
            f"ZeRO-{stage} vs DDP, max |diff| per column: "
            + ", ".join(f"{c} {v:.1e}" for c, v in worst.items())
        )
        assert _disagree(run_dir, zero_runs[0]) == [], f"ZeRO-{stage}"
        assert (zero["reward"].dropna() == plain["reward"].dropna()).all()  # the same completions
        assert zero["off_policy"].sum() == STEPS // 2 and zero["eval/accuracy"].notna().sum() == 2
        # hard sync every 2 steps, each optimizer step generating anew every other step: KL is 0 at
        # every step right after a sync (and at step 1, against the base model itself)
        fresh = zero[layout.REUSE_INDEX] == 1
        assert list(zero.index[fresh]) == list(range(1, STEPS + 1, SYNC_EVERY))
        assert (zero["kl"][fresh] <= 1e-6).all(), zero["kl"]
        assert (zero["kl"][~fresh] > 1e-6).all(), zero["kl"]


def test_deepspeed_on_cpu_compiles_no_op(zero_runs):
    """DeepSpeed's CPU shared-memory collective (deepspeed_shm_comm, used by tensor-parallel
    inference alone) is not compiled when a run's engine starts: that build took 1-2 minutes of
    both cores of a 2-core machine, silently (harness.train.training.skip_deepspeed_shm_op)."""
    folder = next(iter(zero_runs.values())).parents[3] / EXTENSIONS
    built = sorted(p.name for p in folder.rglob("*.so")) if folder.exists() else []
    assert built == [], built


def test_zero3_saves_the_whole_reference(zero_runs, tiny_model):
    import torch

    for stage in (0, 3):
        kept = [p for _, p in checkpoints.checkpoints(zero_runs[stage] / layout.CHECKPOINTS_DIR)]
        assert kept and all((p / checkpoints.REF_MODEL).exists() for p in kept)
    last = {
        stage: torch.load(
            checkpoints.checkpoints(zero_runs[stage] / layout.CHECKPOINTS_DIR)[-1][1] / checkpoints.REF_MODEL,
            weights_only=True,
        )
        for stage in (0, 3)
    }
    path = checkpoints.checkpoints(zero_runs[3] / layout.CHECKPOINTS_DIR)[-1][1] / checkpoints.REF_MODEL
    assert_whole_reference(path, tiny_model)
    assert last[0].keys() == last[3].keys()
    for key, value in last[0].items():
        torch.testing.assert_close(last[3][key], value, rtol=RTOL, atol=ATOL)


def _logged_step(run_dir: Path) -> int:
    table = read_metrics(run_dir) if (run_dir / layout.METRICS_DIR).exists() else None
    return max(table.column("step").to_pylist()) if table is not None and table.num_rows else 0


def test_a_killed_zero2_run_resumes_from_its_deepspeed_checkpoint(zero_runs, tmp_path, model_cache, summary):
    grid = _grid(tmp_path / "zero.yaml", [_zero(2)])
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "harness", "run", str(grid), "--results", str(results), "--no-report"]
    driver = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    runs_dir = results / "zero" / layout.RUNS_DIR
    t0 = time.time()
    while time.time() - t0 < 300:
        run_dirs = list(runs_dir.iterdir()) if runs_dir.exists() else []
        if run_dirs and _logged_step(run_dirs[0]) >= 5:
            break
        assert driver.poll() is None, driver.stdout.read().decode()
        time.sleep(0.05)
    os.killpg(driver.pid, signal.SIGKILL)  # the driver, submitit's local job and both ranks
    driver.wait()  # and at once a new driver: the killed rank 0's lock was released by the kernel
    (run_dir,) = run_dirs
    killed_at = _logged_step(run_dir)
    assert killed_at < STEPS and not (run_dir / layout.DONE_FILE).exists()

    proc = cli("run", str(grid), "--results", str(results), "--no-report", timeout=600)
    assert (run_dir / layout.DONE_FILE).exists(), proc.stdout + proc.stderr
    done = json.loads((run_dir / layout.DONE_FILE).read_text())
    summary(f"killed after step {killed_at}; resumed from the checkpoint of step {done['resumed_from']}")
    assert done["steps"] == STEPS and 2 <= done["resumed_from"] <= killed_at
    assert any(run_dir.glob(f"{layout.CHECKPOINTS_DIR}/checkpoint-*/global_step*/*optim_states.pt"))
    resumed = _metrics(run_dir)
    assert list(resumed.index) == list(range(1, STEPS + 1))  # every step once
    assert _disagree(run_dir, zero_runs[2]) == []
