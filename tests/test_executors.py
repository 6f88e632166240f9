"""The local executor changes the thread variables only for its jobs: the driver's environment is
the same after a grid as before it."""

from __future__ import annotations

import os

import pytest

from harness.cluster import executors
from harness.settings.schema import ExecutorSettings

NAMES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def test_thread_environment_sets_then_restores(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    with executors._thread_environment(3):
        assert [os.environ[n] for n in NAMES] == ["3", "3"]
    assert os.environ["OMP_NUM_THREADS"] == "7"
    assert "MKL_NUM_THREADS" not in os.environ
    with pytest.raises(RuntimeError), executors._thread_environment(2):
        raise RuntimeError("a run that raises still restores")
    assert os.environ["OMP_NUM_THREADS"] == "7" and "MKL_NUM_THREADS" not in os.environ


@pytest.mark.parametrize("in_process", [False, True])
def test_execute_local_leaves_the_driver_environment_as_it_was(tmp_path, monkeypatch, in_process):
    for n in NAMES:
        monkeypatch.delenv(n, raising=False)
    out = executors.execute_local(
        [], tmp_path, ExecutorSettings(threads_per_run=2), in_process=in_process, show_progress=False
    )
    assert out == []
    assert not any(n in os.environ for n in NAMES)


def test_local_parallelism_counts_every_process_of_a_run(monkeypatch):
    """A run of 2 processes x 1 thread on 4 cores: two at once, not four."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)))
    assert executors.default_parallel(ExecutorSettings(threads_per_run=1)) == 4
    assert executors.default_parallel(ExecutorSettings(threads_per_run=1, tasks_per_node=2)) == 2
    assert executors.default_parallel(ExecutorSettings(threads_per_run=2, tasks_per_node=2)) == 1
    assert executors.default_parallel(ExecutorSettings(threads_per_run=4, tasks_per_node=2)) == 1
    assert executors.default_parallel(ExecutorSettings(max_parallel=3, tasks_per_node=2)) == 3
