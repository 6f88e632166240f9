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
from conftest import REPO
from test_trainer import make_spec

from harness import checkpoints, layout, status

#: Columns that measure the machine, not the training: they differ between any two runs (TRL's
#: ``step_time`` is its wall time of the step).
MACHINE = ("time/", "memory/", "machine/", "step_time")


def _metrics(run_dir: Path) -> pd.DataFrame:
    return pq.read_table(run_dir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()


def _attempt(spec_path: Path, run_dir: Path, point: str) -> int:
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "fault_inject.py"), str(spec_path), str(run_dir), point],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
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
