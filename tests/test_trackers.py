"""Experiment trackers against the real packages, offline: W&B (offline mode), trackio (local) and
TensorBoard. One tracker run per harness run, named from the grid, continued by a resumed run, with
the harness's own per-step values beside TRL's."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from helpers import cli, tracker_spec, train_stopped_then_resumed

from harness.train import trackers

HARNESS_KEYS = ("w_seq/mean", "off_policy", "reuse_index", "policy_lag")


def test_names_come_from_the_grid():
    spec = tracker_spec([], Path("."))
    run = trackers.tracker_run(spec)
    assert (run.project, run.group, run.name) == (
        "trk",
        "clip: loss_type=dapo, epsilon_high=0.28",
        "clip: loss_type=dapo, epsilon_high=0.28, seed=1",
    )
    assert run.tags == ("trainer.loss_type", "trainer.epsilon_high", "seed") and run.id == spec.run_id
    assert run.config["settings"]["trainer"]["loss_type"] == "dapo" and run.config["run_id"] == spec.run_id
    assert trackers.folder_name(run.name) == "clip_loss_type=dapo_epsilon_high=0.28_seed=1"
    assert trackers.named("none") == [] and trackers.named(["tensorboard", "mlflow"]) == ["tensorboard"]


# --- W&B: its transaction log, read with its own record type -------------------------------------


def _wandb_records(path: Path) -> list:
    """The records of a ``run-<id>.wandb`` file (a 7-byte W&B header, then LevelDB's log format:
    32 KiB blocks of chunks, each ``crc32c (4) | length (2) | type (1) | data``), parsed with W&B's
    own protobuf ``Record``."""
    from wandb.proto.wandb_internal_pb2 import Record

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, out, pending = 32768, 7, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0 and length == 0:
            continue
        if kind == 1:  # full
            out.append(chunk)
        elif kind == 2:  # first
            pending = chunk
        elif kind == 3:  # middle
            pending += chunk
        elif kind == 4:  # last
            out.append(pending + chunk)
    return [Record.FromString(c) for c in out]


def test_wandb_offline_one_run_continued_after_a_resume(tmp_path, model_cache, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    spec = tracker_spec(["wandb"], model_cache)
    run_dir = train_stopped_then_resumed(spec, tmp_path)
    files = sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 2  # one per attempt, both of the same run
    steps, runs = [], []
    for f in files:
        for rec in _wandb_records(f):
            kind = rec.WhichOneof("record_type")
            if kind == "run":
                runs.append(rec.run)
            elif kind == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
                if "train/global_step" in items and "train/loss" in items:
                    steps.append(items)
    assert {r.run_id for r in runs} == {spec.run_id}
    first, named = runs[0], trackers.tracker_run(spec)
    assert (first.project, first.run_group, first.display_name) == ("trk", named.group, named.name)
    assert list(first.tags) == ["trainer.loss_type", "trainer.epsilon_high", "seed"]
    config = {i.key: json.loads(i.value_json) for i in first.config.update}
    assert config["grpo_harness"]["run_id"] == spec.run_id
    assert [int(s["train/global_step"]) for s in steps] == [1, 2, 3, 4]
    for key in HARNESS_KEYS:
        assert all(f"train/{key}" in s for s in steps), key
    assert [s["train/off_policy"] for s in steps] == [0, 1, 0, 1]
    # wandb's own CLI finds the two attempts' logs, both of the one W&B run (id = the run id), which
    # `wandb sync` uploads as one run, the second resuming the first
    import subprocess
    import sys

    wandb_cli = Path(sys.executable).parent / "wandb"
    folders = [str(f.parent) for f in files]
    proc = subprocess.run([str(wandb_cli), "sync", "--dry-run", *folders], capture_output=True, text=True)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Would sync 2 run(s)" in said, said
    assert said.count(f"run-{spec.run_id}.wandb") == 2, said


TRACKIO_CHECK = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from helpers import tracker_spec, train_stopped_then_resumed
from harness.train import trackers
spec = tracker_spec(["trackio"], None)
train_stopped_then_resumed(spec, Path(sys.argv[1]))
from trackio.sqlite_storage import SQLiteStorage
run = trackers.tracker_run(spec)
print(json.dumps({"runs": SQLiteStorage.get_runs(run.project), "name": run.name,
                  "logs": SQLiteStorage.get_logs(run.project, run.name)}, default=str))
"""


def test_trackio_local_one_run_continued_after_a_resume(tmp_path, model_cache):
    """In a fresh process: trackio reads ``TRACKIO_DIR`` once, when it is imported."""
    pytest.importorskip("trackio")
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio")}
    proc = subprocess.run(
        [sys.executable, "-c", TRACKIO_CHECK, str(tmp_path), str(Path(__file__).parent)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["runs"] == [out["name"]]
    steps = [row for row in out["logs"] if "train/loss" in row]
    assert [int(r["train/global_step"]) for r in steps] == [1, 2, 3, 4]
    for key in HARNESS_KEYS:
        assert all(f"train/{key}" in r for r in steps), key


def test_tensorboard_one_folder_per_run_continued_after_a_resume(tmp_path, model_cache):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    spec = tracker_spec(["tensorboard"], model_cache)
    train_stopped_then_resumed(spec, tmp_path)
    root = tmp_path / spec.grid / trackers.TENSORBOARD_DIR
    (folder,) = root.iterdir()
    assert folder.name == trackers.folder_name(trackers.tracker_run(spec).name)
    acc = EventAccumulator(str(folder))
    acc.Reload()
    assert [e.step for e in acc.Scalars("train/loss")] == [1, 2, 3, 4]
    for key in HARNESS_KEYS:
        assert [e.step for e in acc.Scalars(f"train/{key}")] == [1, 2, 3, 4], key
    text = acc.Tensors("grpo_harness/text_summary")[0].tensor_proto.string_val[0].decode()
    assert spec.run_id in text


def test_only_rank_0_of_a_two_process_run_logs(tmp_path, model_cache, monkeypatch):
    """Two processes (DDP on CPU): one W&B run and one TensorBoard folder, each step logged once."""
    pytest.importorskip("wandb")
    pytest.importorskip("tensorboard")
    import yaml
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    settings = tracker_spec(["wandb", "tensorboard"], model_cache).settings
    trainer = {k: v for k, v in settings["trainer"].items() if k != "seed"}  # the grid's seed seeds it
    grid = {
        **settings,
        "trainer": trainer,
        "name": "trk2",
        "executor": {"name": "local", "tasks_per_node": 2},
    }
    path = tmp_path / "trk2.yaml"
    path.write_text(yaml.safe_dump(grid))
    cli("run", str(path), "--results", str(tmp_path / "results"), "--no-report")
    (run_dir,) = (tmp_path / "results" / "trk2" / "runs").iterdir()
    assert len(json.loads((run_dir / "provenance.json").read_text())["hosts"]) == 2
    (log,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    steps = [
        items["train/global_step"]
        for rec in _wandb_records(log)
        if rec.WhichOneof("record_type") == "history"
        for items in [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}]
        if "train/loss" in items
    ]
    assert steps == [1, 2, 3, 4]
    (folder,) = (tmp_path / "results" / "trk2" / trackers.TENSORBOARD_DIR).iterdir()
    acc = EventAccumulator(str(folder))
    acc.Reload()
    assert [e.step for e in acc.Scalars("train/loss")] == [1, 2, 3, 4]
    assert len(list(folder.iterdir())) == 1  # one event file: rank 1 opened no writer
