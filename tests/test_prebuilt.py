"""Embedded models shipped built (harness.models.prebuilt): the model cache installs a shipped folder
instead of building; the shipped folders are exactly the keys the shipped grids use at the lock's
versions; a rebuild equals the shipped folder bit for bit on the CPU that made it."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import tempfile
from pathlib import Path

import pytest

from harness.models import prebuilt
from harness.models.tiny import cached_build

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("prebuilt_script", REPO / "scripts" / "prebuilt.py")
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)


def on_the_lock() -> bool:
    """Whether the libraries that are part of a key are at the lock's versions."""
    from importlib.metadata import version

    pins = dict(
        line.split("==", 1)
        for line in (REPO / "requirements-cpu.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    keyed = ("torch", "transformers", "trl", "tokenizers", "reasoning-gym")  # harness.models.tiny's key
    return all(version(name) == pins[name] for name in keyed)


def needs_the_lock() -> None:
    if not on_the_lock():
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs on the lock's versions (scripts/setup.sh)", pytrace=False)
        pytest.skip("the shipped keys hold the lock's library versions: bash scripts/setup.sh")


def fake_shipped(root: Path, key: str) -> Path:
    folder = root / key
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "tiny_model.json").write_text(json.dumps({"build_seconds": 1.0}))
    prebuilt.write_origin(folder, key, "test", {"cpu": "x", "capability": "y"})
    return folder


def refuse_to_build(out: Path, report) -> dict:
    raise AssertionError("built although a copy is shipped")


def test_the_cache_installs_a_shipped_folder_instead_of_building(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(prebuilt, "PREBUILT_DIR", tmp_path / "shipped")
    monkeypatch.delenv(prebuilt.NO_PREBUILT_ENV, raising=False)
    source = fake_shipped(tmp_path / "shipped", "tiny-k")
    got = cached_build(tmp_path / "cache", "tiny-k", refuse_to_build)
    assert got == tmp_path / "cache" / "tiny-k"
    assert sorted(p.name for p in got.iterdir()) == sorted(p.name for p in source.iterdir())
    assert (got / "model.safetensors").read_bytes() == b"weights"
    assert "installed the copy shipped with grpo-harness" in capsys.readouterr().err
    assert not list((tmp_path / "cache").glob(".tiny-k.*")), "no temporary folder left behind"


def test_no_prebuilt_builds_even_where_a_copy_is_shipped(tmp_path, monkeypatch):
    monkeypatch.setattr(prebuilt, "PREBUILT_DIR", tmp_path / "shipped")
    monkeypatch.setenv(prebuilt.NO_PREBUILT_ENV, "1")
    fake_shipped(tmp_path / "shipped", "tiny-k")
    built = []

    def build(out: Path, report) -> dict:
        out.mkdir()
        (out / "model.safetensors").write_bytes(b"mine")
        built.append(out)
        return {"build_seconds": 0.0}

    got = cached_build(tmp_path / "cache", "tiny-k", build)
    assert built and (got / "model.safetensors").read_bytes() == b"mine"


def test_a_shipped_file_that_is_not_the_one_recorded_is_refused_and_nothing_is_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(prebuilt, "PREBUILT_DIR", tmp_path / "shipped")
    monkeypatch.delenv(prebuilt.NO_PREBUILT_ENV, raising=False)
    source = fake_shipped(tmp_path / "shipped", "tiny-k")
    (source / "model.safetensors").write_bytes(b"weig")  # a partial checkout
    with pytest.raises(ValueError, match="model.safetensors is not the file shipped"):
        cached_build(tmp_path / "cache", "tiny-k", refuse_to_build)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["tiny-k.lock"]


def test_a_read_only_shipped_folder_installs(tmp_path, monkeypatch):
    monkeypatch.setattr(prebuilt, "PREBUILT_DIR", tmp_path / "shipped")
    monkeypatch.delenv(prebuilt.NO_PREBUILT_ENV, raising=False)
    source = fake_shipped(tmp_path / "shipped", "tiny-k")
    for p in source.iterdir():
        p.chmod(0o444)
    source.chmod(0o555)
    try:
        got = cached_build(tmp_path / "cache", "tiny-k", refuse_to_build)
        assert (got / "model.safetensors").read_bytes() == b"weights"
    finally:
        source.chmod(0o755)


def test_a_key_without_a_shipped_folder_is_built(tmp_path, monkeypatch):
    monkeypatch.setattr(prebuilt, "PREBUILT_DIR", tmp_path / "shipped")
    fake_shipped(tmp_path / "shipped", "tiny-other")
    with pytest.raises(AssertionError, match="built although"):
        cached_build(tmp_path / "cache", "tiny-k", refuse_to_build)


def test_the_shipped_folders_are_the_shipped_grids_keys():
    """After the lock changes (scripts/lock.sh), every key changes: this fails until
    `python scripts/prebuilt.py make` ships the new folders and removes the stale ones."""
    needs_the_lock()
    wanted = set(script.wanted())
    shipped = set(prebuilt.shipped_keys())
    assert wanted - shipped == set(), "not shipped: python scripts/prebuilt.py make"
    assert shipped - wanted == set(), "shipped for no grid: python scripts/prebuilt.py make removes them"
    for key in shipped:
        origin = prebuilt.read_origin(prebuilt.PREBUILT_DIR / key)
        assert origin["key"] == key and origin["cpu"]["capability"] and origin["cpu"]["flags"]
        assert set(origin["files"]) >= {"model.safetensors", "config.json", "tiny_model.json"}


def test_differences_name_the_files_that_differ_and_ignore_the_build_time(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, seconds, weights in ((a, 1.0, b"w"), (b, 2.0, b"w")):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(weights)
        (folder / "tiny_model.json").write_text(json.dumps({"build_seconds": seconds, "sft": [1]}))
    assert script.differences(a, b) == []
    (b / "model.safetensors").write_bytes(b"v")
    (b / "tiny_model.json").write_text(json.dumps({"build_seconds": 2.0, "sft": [2]}))
    (b / "extra.json").write_text("{}")
    assert script.differences(a, b) == [
        "extra.json: only in the second",
        "model.safetensors: differs",
        "tiny_model.json: ['sft']",
    ]


#: Warm starts this long are rebuilt whole in the tests (``tiny``'s 600 steps: about a minute); a
#: longer one (``tiny-steps``'s 1,500: about 8 minutes on 2 cores) is rebuilt to its recorded
#: trajectory step, and whole by ``python scripts/prebuilt.py check``.
WHOLE_REBUILD_STEPS = 600


#: How far the weights' global norm (the root of the tensors' summed squared norms) at the
#: trajectory step may lie from the recorded one on another CPU than the builder's, and how far each
#: tensor's norm: kernels that round differently move the weights apart step by step. Measured with
#: the shipped tiny build (Intel Xeon, AVX-512) rebuilt on an AMD EPYC (AVX2) to step 100: global
#: norm 0.036% apart; weight matrices up to 1.7%, small biases up to 9.6%; the tiny-steps build's
#: embedding 0.15%.
CROSS_CPU_GLOBAL_RTOL = 5e-3
CROSS_CPU_TENSOR_RTOL = 0.25


def differs_by_cpu(origin: dict) -> bool:
    """Whether this machine's CPU is another than the one that built a shipped folder: its kernels
    may round differently, so a rebuild's bits may differ while the model is the same."""
    if origin["cpu"] == prebuilt.cpu_signature():
        return False
    print(f"built on {origin['cpu']}, here {prebuilt.cpu_signature()}", file=sys.stderr)
    return True


def rebuilt_whole(key: str) -> bool:
    """Whether the suite rebuilds ``key`` whole (its warm start is at most :data:`WHOLE_REBUILD_STEPS`)."""
    return script.wanted().get(key, (0, 0, 10**9))[2] <= WHOLE_REBUILD_STEPS


def check_trajectory(key: str, origin: dict, got: dict) -> None:
    """A rebuild's weights at prebuilt.TRAJECTORY_STEP against those recorded: bit for bit where
    the CPU is the one that built ``key``; on another CPU, their global norm within
    :data:`CROSS_CPU_GLOBAL_RTOL` and every tensor's within :data:`CROSS_CPU_TENSOR_RTOL`."""
    assert "trajectory" in origin, f"{key}: no trajectory recorded; python scripts/prebuilt.py make"
    recorded = origin["trajectory"]
    assert got["step"] == recorded["step"] == prebuilt.TRAJECTORY_STEP
    if not differs_by_cpu(origin):
        assert got["digest"] == recorded["digest"], f"{key}: the rebuild left the shipped build's path"
        return
    assert got["norms"].keys() == recorded["norms"].keys()
    for name, norm in recorded["norms"].items():
        assert abs(got["norms"][name] - norm) <= CROSS_CPU_TENSOR_RTOL * max(abs(norm), 1e-6), name
    ours, theirs = (math.hypot(*t["norms"].values()) for t in (got, recorded))
    assert abs(ours - theirs) <= CROSS_CPU_GLOBAL_RTOL * theirs, (ours, theirs)


@pytest.mark.slow
@pytest.mark.parametrize("key", [k for k in prebuilt.shipped_keys() if not rebuilt_whole(k)])
def test_a_rebuild_follows_the_shipped_build(key):
    """Rebuilt to its warm start's step prebuilt.TRAJECTORY_STEP (the schedule is the whole
    build's, so that state is one the shipped build passed through), a shipped model's weights are
    the recorded ones (:func:`check_trajectory`). A build short enough is rebuilt whole instead, and
    its trajectory checked on the way (:func:`test_a_rebuild_equals_the_shipped_folder`)."""
    needs_the_lock()
    origin = prebuilt.read_origin(prebuilt.PREBUILT_DIR / key)
    check_trajectory(key, origin, script.trajectory(script.wanted()[key][1]))


@pytest.mark.slow
@pytest.mark.parametrize(
    "key",
    [k for k in prebuilt.shipped_keys() if rebuilt_whole(k)],
)
def test_a_rebuild_equals_the_shipped_folder(key):
    """Rebuilt from scratch, a shipped model passes through the recorded trajectory
    (:func:`check_trajectory`) and is the same bit for bit where the CPU is the one that built it
    (the build is deterministic for a CPU and library versions). On another CPU the bits may differ;
    the rebuild must then still be the same model: the same files, tensors and shapes, and the warm
    start's mean SFT loss within 5%."""
    needs_the_lock()
    grid, build, _ = script.wanted()[key]
    shipped = prebuilt.PREBUILT_DIR / key
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "model"
        check_trajectory(key, prebuilt.read_origin(shipped), prebuilt.trajectory_at(build, out, whole=True))
        diff = script.differences(shipped, out)
        if not differs_by_cpu(prebuilt.read_origin(shipped)):
            assert diff == [], f"{key} ({grid}) rebuilt differs: {diff}; python scripts/prebuilt.py make"
            return
        from safetensors import safe_open

        def shapes(folder: Path) -> dict:
            with safe_open(str(folder / "model.safetensors"), "pt") as f:
                return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 (safe_open is not iterable)

        assert shapes(out) == shapes(shipped)
        assert sorted(p.name for p in out.iterdir()) == sorted(
            p.name for p in shipped.iterdir() if p.name != prebuilt.ORIGIN_FILE
        )
        losses = [
            json.loads((f / "tiny_model.json").read_text())["sft"]["train_loss"] for f in (shipped, out)
        ]
        assert abs(losses[1] - losses[0]) <= 0.05 * abs(losses[0]), losses


@pytest.mark.slow
def test_a_trajectory_is_taken_on_the_way_and_a_whole_build_goes_on_to_save(tmp_path):
    from helpers import SMALL_MODEL, SMALL_TASK

    from harness.models.names import embedded_build
    from harness.settings.schema import TaskSpec, TinyModelSpec

    _, build = embedded_build("tiny", TaskSpec(**SMALL_TASK), TinyModelSpec(**SMALL_MODEL))
    stopped = prebuilt.trajectory_at(build, tmp_path / "stopped", step=2)
    assert not (tmp_path / "stopped" / "model.safetensors").exists()  # nothing saved
    whole = prebuilt.trajectory_at(build, tmp_path / "whole", step=2, whole=True)
    assert (tmp_path / "whole" / "model.safetensors").is_file()
    assert stopped == whole and whole["step"] == 2 and whole["digest"].startswith("sha256:")
    with pytest.raises(ValueError, match="ended before step 9"):
        prebuilt.trajectory_at(build, tmp_path / "short", step=9, whole=True)
