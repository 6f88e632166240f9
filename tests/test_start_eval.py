"""The starting policy's greedy eval (``eval_start.json``): measured once before the first optimizer
step, never again on resume, and invisible to training (same metrics rows with and without it)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from helpers import make_spec

from harness import layout

#: Columns that measure the machine, not the training (as in test_faults.py).
MACHINE = ("time/", "memory/", "machine/", "step_time")


def _metrics(run_dir):
    return pq.read_table(run_dir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()


def _training_columns(frame):
    return [
        c
        for c in frame.columns
        if not c.startswith(MACHINE) and c not in (layout.EVAL_ACCURACY, layout.RUN_ID)
    ]


@pytest.mark.slow
def test_the_start_eval_is_recorded_once_and_leaves_training_as_it_was(tmp_path, tiny_model, chain_sum_task):
    from harness.train.training import train

    quiet = make_spec(tiny_model, chain_sum_task, max_steps=4, num_iterations=2)
    evaluated = quiet.with_settings({"harness.eval_steps": 2, "harness.checkpoint_steps": 2})
    off_dir, on_dir = tmp_path / "off", tmp_path / "on"
    train(quiet, off_dir)
    train(evaluated, on_dir)
    assert not (off_dir / layout.START_EVAL_FILE).exists()  # eval off: nothing measured
    start = json.loads((on_dir / layout.START_EVAL_FILE).read_text())
    assert start[layout.STEP] == 0 and 0.0 <= start[layout.EVAL_ACCURACY] <= 1.0
    assert layout.read_start_eval(on_dir) == start[layout.EVAL_ACCURACY]
    a, b = _metrics(off_dir), _metrics(on_dir)
    assert list(b[layout.EVAL_ACCURACY].notna()) == [False, True, False, True]  # steps 2 and 4 only
    columns = _training_columns(a)
    assert set(columns) <= set(b.columns)
    differ = [c for c in columns if not a[c].equals(b[c])]
    assert not differ, differ  # the greedy evals drew nothing from the training RNG

    # stopped after step 2, then resumed: the start eval is neither measured again nor duplicated
    resumed = tmp_path / "resumed"
    calls = []
    assert train(evaluated, resumed, stop_requested=lambda: calls.append(1) or len(calls) >= 2)["steps"] == 2
    stamp = (resumed / layout.START_EVAL_FILE).stat().st_mtime_ns
    assert layout.read_start_eval(resumed) == start[layout.EVAL_ACCURACY]
    assert train(evaluated, resumed)["resumed_from"] == 2
    assert (resumed / layout.START_EVAL_FILE).stat().st_mtime_ns == stamp
    c = _metrics(resumed)
    assert list(c[layout.STEP]) == [1, 2, 3, 4]
    assert not [col for col in _training_columns(b) if not b[col].equals(c[col])]
    assert c[layout.EVAL_ACCURACY].equals(b[layout.EVAL_ACCURACY])
