"""The on-disk memo of TRL's and reasoning-gym's verdicts: same answers, fewer imports, safe to break."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers import REPO

from harness import verdicts

# Validate a grid in a fresh process and report the findings plus which heavy libraries got imported.
PROBE = """
import json, sys
from harness.config.grid import expand
from harness.config.spec import load_grid
from harness.config.validate import validate_plan
plan = expand(load_grid(sys.argv[1], []))
report = validate_plan(plan)
print(json.dumps({"report": report.format("grid"), "ok": report.ok,
                  "imported": sorted(m for m in ("trl", "torch", "reasoning_gym") if m in sys.modules)}))
"""

GRID = """
name: memo
task: {name: chain_sum, kwargs: {min_terms: 2, max_terms: 2}}
harness: {device: cpu}  # "auto" on the local executor asks torch whether this machine has CUDA
trainer: {max_steps: 5, per_device_train_batch_size: 8, num_generations: 4, learning_rate: 1.0e-4}
grid:
  loss_type: [grpo, vespo, nope]
  seed: [0, 1]
subgrids:
  ok: {}
  rejected: {set: {trainer.per_device_train_batch_size: 3}}
  badtask: {set: {task.kwargs: {min_terms: 9, max_terms: 2}}}
"""


# Validate a grid once per memo folder, each in a child forked from one process that imported the
# heavy libraries first (as harness.cluster.preload does): a fresh validation each time, with the
# in-process caches of none before it, for the imports' cost once.
PROBE_EACH = """
import json, os, sys
import reasoning_gym, torch, trl  # noqa: F401
from harness.config.grid import expand
from harness.config.spec import load_grid
from harness.config.validate import validate_plan
for memo in sys.argv[2:]:
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os.environ["GRPO_HARNESS_VERDICTS"] = memo
        report = validate_plan(expand(load_grid(sys.argv[1], [])))
        print(json.dumps({"memo": memo, "report": report.format("grid")}), flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status:
        sys.exit(f"the validation with {memo} ended with status {status}")
"""


def _probe_each(grid, memo_dirs) -> dict:
    """``{memo folder: report}``: :data:`PROBE_EACH` over ``memo_dirs``."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE_EACH, str(grid), *map(str, memo_dirs)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {line["memo"]: line["report"] for line in lines}


def _probe(grid, memo_dir) -> dict:
    env = {**os.environ, verdicts.ENV: str(memo_dir)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(grid)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def grid(tmp_path):
    path = tmp_path / "memo.yaml"
    path.write_text(GRID)
    return path


@pytest.fixture(scope="module")
def cold_memo(tmp_path_factory):
    """The grid validated once with an empty memo: ``(grid, memo folder, probe result)``. Tests copy
    the memo before they damage it."""
    folder = tmp_path_factory.mktemp("cold")
    path = folder / "memo.yaml"
    path.write_text(GRID)
    memo = folder / "memo"
    return path, memo, _probe(path, memo)


def _copy_memo(cold_memo, tmp_path):
    grid, memo, result = cold_memo
    return grid, shutil.copytree(memo, tmp_path / "memo"), result


@pytest.mark.slow
def test_warm_validation_gives_the_same_findings_without_importing_trl_torch_or_reasoning_gym(
    cold_memo, tmp_path
):
    grid, memo, cold = _copy_memo(cold_memo, tmp_path)
    assert cold["imported"] == ["reasoning_gym", "torch", "trl"]
    assert not cold["ok"]
    # the findings this grid exists for: a loss TRL takes but the trainer does not, a batch TRL
    # rejects, a dataset that rejects its kwargs
    assert "'nope' is not a TRL loss type" in cold["report"]
    assert "TRL's GRPOConfig rejects these settings" in cold["report"]
    assert "rejects kwargs" in cold["report"]
    warm = _probe(grid, memo)
    assert warm["imported"] == []
    assert warm["report"] == cold["report"]
    namespaces = sorted(p.name for p in memo.iterdir())
    assert namespaces == ["embedded-lengths", "grpo-config", "grpo-config-fields", "reasoning-gym-dataset"]


@pytest.mark.slow
def test_corrupt_entries_are_recomputed_not_trusted(cold_memo, tmp_path):
    grid, memo, cold = _copy_memo(cold_memo, tmp_path)
    entries = list(memo.rglob("*.json"))
    assert entries
    for i, path in enumerate(entries):  # torn writes, foreign JSON, empty files
        path.write_text(['{"value": ', "[1, 2]", ""][i % 3])
    again = _probe(grid, memo)
    assert again["report"] == cold["report"]
    assert again["imported"] == ["reasoning_gym", "torch", "trl"]
    assert all(json.loads(p.read_text()).keys() == {"value"} for p in memo.rglob("*.json"))


#: Entries of the wrong shape, each given to every entry of a copy of the cold memo.
WRONG_SHAPES = [
    None,
    5,
    "abc",
    {},
    {"types": {"loss_type": "weird"}, "defaults": {}},
    {"values": {}, "error": "x"},
]


@pytest.mark.slow
def test_entries_of_the_wrong_shape_are_recomputed(cold_memo, tmp_path):
    grid, memo, cold = cold_memo
    copies = []
    for i, value in enumerate(WRONG_SHAPES):
        copy = shutil.copytree(memo, tmp_path / f"memo{i}")
        for path in copy.rglob("*.json"):
            path.write_text(json.dumps({"value": value}))
        copies.append(copy)
    again = _probe_each(grid, copies)
    assert sorted(again) == sorted(map(str, copies))
    for value, copy in zip(WRONG_SHAPES, copies, strict=True):
        assert again[str(copy)] == cold["report"], value
        assert all(json.loads(p.read_text())["value"] != value for p in copy.rglob("*.json")), value


def test_values_json_cannot_hold_do_not_collide_with_their_repr(tmp_path, monkeypatch):
    import datetime

    monkeypatch.setenv(verdicts.ENV, str(tmp_path))
    date = datetime.date(2024, 1, 1)
    assert verdicts.memo("ns", {"v": date}, lambda: "date") == "date"
    assert verdicts.memo("ns", {"v": repr(date)}, lambda: "string") == "string"


def test_an_entry_path_taken_by_a_folder_leaves_no_temporary_files(tmp_path, monkeypatch):
    monkeypatch.setenv(verdicts.ENV, str(tmp_path))
    verdicts.memo("ns", {"k": 1}, lambda: 1)
    (entry,) = (tmp_path / "ns").glob("*.json")
    entry.unlink()
    entry.mkdir()
    assert verdicts.memo("ns", {"k": 1}, lambda: 2) == 2
    assert sorted(p.name for p in (tmp_path / "ns").iterdir()) == [entry.name]


@pytest.mark.slow
def test_memo_off_stores_nothing(grid, tmp_path):
    memo = tmp_path / "memo"
    env_off = "off"
    cold = _probe(grid, env_off)
    assert cold["imported"] == ["reasoning_gym", "torch", "trl"]
    assert not memo.exists()


def test_memo_reads_back_and_keys_on_everything(tmp_path, monkeypatch):
    monkeypatch.setenv(verdicts.ENV, str(tmp_path))
    calls = []

    def ask(v):
        def compute():
            calls.append(v)
            return {"v": v, "inf": float("inf"), "list": [1, None]}

        return compute

    assert verdicts.memo("ns", {"a": 1}, ask(1)) == {"v": 1, "inf": float("inf"), "list": [1, None]}
    assert verdicts.memo("ns", {"a": 1}, ask(2))["v"] == 1  # read back, not recomputed
    assert verdicts.memo("ns", {"a": 2}, ask(3))["v"] == 3  # another key
    assert verdicts.memo("other", {"a": 1}, ask(4))["v"] == 4  # another namespace
    assert calls == [1, 3, 4]
    assert not list(tmp_path.rglob(".tmp-*"))  # no temporary files left behind


def test_a_new_library_version_asks_again(tmp_path, monkeypatch):
    from harness.trl_boundary import grpo_config_verdict

    monkeypatch.setenv(verdicts.ENV, str(tmp_path))
    kwargs = {"output_dir": "x", "use_cpu": True, "bf16": False, "report_to": "none", "num_generations": 2}
    first = grpo_config_verdict(kwargs, "cpu")
    assert first["error"] is None and first["values"]["num_generations"] == 2
    assert len(list(tmp_path.rglob("*.json"))) == 1
    real = verdicts.metadata.version
    monkeypatch.setattr(verdicts.metadata, "version", lambda d: "99.0" if d == "trl" else real(d))
    verdicts.versions.cache_clear()
    try:
        assert grpo_config_verdict(kwargs, "cpu") == first
        assert len(list(tmp_path.rglob("*.json"))) == 2
    finally:
        verdicts.versions.cache_clear()


def test_unwritable_memo_costs_only_speed(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(verdicts.ENV, str(blocker / "sub"))  # a folder under a file cannot be created
    assert verdicts.memo("ns", {"k": 1}, lambda: [1]) == [1]


def test_values_without_json_form_are_refused():
    class Thing:
        pass

    with pytest.raises(verdicts.NotJSON):
        verdicts.jsonable({"a": Thing()})
    assert verdicts.jsonable_items([("a", Thing()), ("b", (1, 2))]) == {"b": [1, 2]}
