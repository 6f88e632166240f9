"""harness.train.sharing: leases of runs on this machine and the count of runs sharing it."""

import json
import os
import socket
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from harness import layout
from harness.train import sharing


@pytest.fixture
def active(tmp_path, monkeypatch):
    folder = tmp_path / "active"
    monkeypatch.setenv(sharing.ACTIVE_DIR_ENV, str(folder))
    return folder


def write_lease(folder, name, pid, cpus, gpus=(), host=None):
    folder.mkdir(parents=True, exist_ok=True)
    lease = {
        "pid": pid,
        "host": host or socket.gethostname(),
        "run_id": name,
        "cpus": cpus,
        "gpus": list(gpus),
    }
    (folder / f"{name}.json").write_text(json.dumps(lease))
    return folder / f"{name}.json"


@pytest.fixture
def live_pid():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.fixture
def dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_active_dir_from_env(active):
    assert sharing.active_dir() == active


def test_overlapping_cpus_counted_disjoint_not(active, live_pid):
    lease = sharing.MachineLease("me", "cpu")
    lease.cpus = [0, 1]
    assert lease.register()
    assert lease.path.parent == active
    assert lease.count() == 1  # this run alone
    write_lease(active, "overlap-a", live_pid, [1, 2])
    write_lease(active, "overlap-b", os.getpid(), [0])
    write_lease(active, "disjoint", live_pid, [5, 6])
    write_lease(active, "other-host", live_pid, [0, 1], host="not-" + socket.gethostname())
    assert sharing.concurrent_runs([0, 1], (), active, own=lease.path) == 3
    lease.release()
    assert not any(p.name.startswith("me") for p in active.iterdir())
    assert lease.count() is None


def test_gpu_run_counts_shared_gpus_only(active, live_pid):
    write_lease(active, "same-gpu", live_pid, [7], gpus=["GPU-a"])
    write_lease(active, "other-gpu", live_pid, [0, 1], gpus=["GPU-b"])
    write_lease(active, "cpu-run", live_pid, [0, 1])
    assert sharing.concurrent_runs([0, 1], ["GPU-a"], active) == 2


def test_dead_lease_ignored_and_removed(active, live_pid, dead_pid):
    dead = write_lease(active, "dead", dead_pid, [0])
    write_lease(active, "live", live_pid, [0])
    assert sharing.concurrent_runs([0], (), active) == 2
    assert not dead.exists()


def test_damaged_lease_ignored(active, live_pid):
    active.mkdir(parents=True)
    (active / "torn.json").write_text('{"pid": ')
    (active / "list.json").write_text("[1, 2]")
    write_lease(active, "bad-cpus", live_pid, ["x"])
    write_lease(active, "live", live_pid, [0])
    assert sharing.concurrent_runs([0], (), active) == 2
    assert (active / "torn.json").exists()


def test_count_is_throttled(active, live_pid):
    lease = sharing.MachineLease("me", "cpu", min_interval_s=3600)
    lease.cpus = [0]
    with lease:
        assert lease.count() == 1
        write_lease(active, "live", live_pid, [0])
        assert lease.count() == 1  # not recounted yet
        lease.min_interval_s = 0
        assert lease.count() == 2
    assert lease.path is None


def test_file_in_place_of_folder_gives_no_count(tmp_path, monkeypatch):
    """A folder that cannot be written (a plain file in its place: unwritable even to root) only costs
    the count, never the run."""
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    monkeypatch.setenv(sharing.ACTIVE_DIR_ENV, str(blocker / "active"))
    lease = sharing.MachineLease("me", "cpu")
    assert lease.register() is False
    assert lease.count() is None


def test_run_records_concurrent_runs(tmp_path, active, tiny_model, chain_sum_task):
    from helpers import make_spec

    from harness.train.training import train

    spec = make_spec(tiny_model, chain_sum_task, max_steps=2)
    rdir = tmp_path / spec.run_id
    train(spec, rdir)
    df = pq.read_table(rdir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()
    assert layout.CONCURRENT_RUNS in df.columns
    assert (df[layout.CONCURRENT_RUNS] >= 1).all()
    assert not any(active.glob("*.json"))  # the lease is gone once the run ends


def test_gpu_ids(monkeypatch):
    """CUDA device UUIDs of the node's ranks' devices; none for a CPU run (no GPU needed here)."""
    import types

    import torch

    props = [types.SimpleNamespace(uuid=f"uuid-{i}") for i in range(3)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props[i])
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert sharing.gpu_ids("cpu") == []
    assert sharing.gpu_ids("cuda") == ["uuid-0"]
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert sharing.gpu_ids("cuda") == ["uuid-0", "uuid-1"]
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: 1 / 0)
    assert sharing.gpu_ids("cuda") == []
