"""``grpo-harness compare``: two runs' metrics step by step, within a tolerance."""

from __future__ import annotations

import json
import math

import pytest
from helpers import cli

from harness import compare, layout
from harness.train.metrics import MetricsWriter


def _run(root, name: str, loss: list[float], deepspeed=None):
    run_dir = root / name
    writer = MetricsWriter(run_dir, name, flush_every=1)
    for step, value in enumerate(loss, start=1):
        writer.append({"step": step, "loss": value, "reward": 0.5, "kl": math.nan, "time/step_s": step * 7.0})
    writer.flush()
    config = {"config": {"seed": 0, "trainer": {"loss_type": "grpo", "deepspeed": deepspeed}}}
    (run_dir / layout.CONFIG_FILE).write_text(json.dumps(config))
    return run_dir


def test_columns_within_tolerance_agree_and_the_others_are_named(tmp_path):
    a = _run(tmp_path, "a", [1.0, 2.0, 3.0], deepspeed={"zero_optimization": {"stage": 3}})
    b = _run(tmp_path, "b", [1.0, 2.0 + 1e-6, 3.0])
    c = _run(tmp_path, "c", [1.0, 2.1, 3.0, 4.0])
    steps, diffs = compare.compare_runs(a, b)
    by = {d.column: d for d in diffs}
    assert steps == [1, 2, 3] and "time/step_s" not in by  # the machine's time is not the run's
    assert by["loss"].agrees and math.isclose(by["loss"].max_abs, 1e-6, rel_tol=1e-3)
    assert by["kl"].agrees and by["kl"].max_abs == 0.0  # NaN at both: equal
    steps, diffs = compare.compare_runs(a, c)
    assert steps == [1, 2, 3] and [d.column for d in diffs if not d.agrees] == ["loss"]
    assert compare.setting_differences(a, b) == {
        "trainer.deepspeed": ({"zero_optimization": {"stage": 3}}, None)
    }


@pytest.mark.slow
def test_the_command_exits_by_verdict(tmp_path):
    a, b = _run(tmp_path, "a", [1.0, 2.0]), _run(tmp_path, "b", [1.0, 2.5])
    assert cli("compare", str(a), str(a)).returncode == 0
    proc = cli("compare", str(a), str(b), check=False)
    assert proc.returncode == 1 and "2/3 columns agree; not: loss" in proc.stdout
    assert cli("compare", str(a), str(b), "--atol", "1").returncode == 0
    proc = cli("compare", str(a), str(tmp_path / "nothing"), check=False)
    assert proc.returncode == 2 and "no metrics recorded" in proc.stderr


def test_steps_limits_the_comparison(tmp_path):
    a, b = _run(tmp_path, "a", [1.0, 2.0, 3.0]), _run(tmp_path, "b", [1.0, 2.0, 9.0])
    assert [d.column for d in compare.compare_runs(a, b)[1] if not d.agrees] == ["loss"]
    steps, diffs = compare.compare_runs(a, b, steps=2)
    assert steps == [1, 2] and all(d.agrees for d in diffs)
    assert cli("compare", str(a), str(b), "--steps", "2").returncode == 0
