"""Checkpoints are complete or not used: the completion marker, resume with fall-back, pruning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.train import checkpoints


def fake_checkpoint(root: Path, step: int, *, marked: bool = True, state: str | None = None) -> Path:
    """A ``checkpoint-<step>`` folder as transformers leaves it (small files), marked complete."""
    ckpt = root / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"w" * 100)
    (ckpt / "optimizer.pt").write_bytes(b"o" * 200)
    (ckpt / "rng_state.pth").write_bytes(b"r" * 10)
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step}) if state is None else state)
    if marked:
        checkpoints.mark_complete(ckpt, step)
    return ckpt


def test_a_marked_checkpoint_is_complete_until_a_file_changes(tmp_path):
    ckpt = fake_checkpoint(tmp_path, 4)
    marker = json.loads((ckpt / checkpoints.COMPLETE_FILE).read_text())
    assert marker == {
        "step": 4,
        "files": {
            "model.safetensors": 100,
            "optimizer.pt": 200,
            "rng_state.pth": 10,
            "trainer_state.json": 18,
        },
    }
    assert checkpoints.problem(ckpt) is None
    (ckpt / "optimizer.pt").write_bytes(b"o" * 50)
    assert checkpoints.problem(ckpt) == "optimizer.pt has 50 bytes, 200 when it was saved"
    (ckpt / "model.safetensors").unlink()
    assert checkpoints.problem(ckpt) == "model.safetensors is missing"


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("", "trainer_state.json is empty (the save was interrupted)"),
        ('{"global_step": 4, "log_hi', "trainer_state.json is not valid JSON (truncated)"),
        (None, None),
    ],
)
def test_an_unmarked_checkpoint_is_judged_by_its_files(tmp_path, state, expected):
    ckpt = fake_checkpoint(tmp_path, 4, marked=False, state=state)
    assert checkpoints.problem(ckpt) == expected


def test_unmarked_checkpoint_without_weights_or_with_an_empty_optimizer(tmp_path):
    ckpt = fake_checkpoint(tmp_path, 4, marked=False)
    (ckpt / "optimizer.pt").write_bytes(b"")
    assert checkpoints.problem(ckpt) == "optimizer.pt is empty"
    (ckpt / "model.safetensors").unlink()
    assert checkpoints.problem(ckpt) == "no model weights"
    (ckpt / "trainer_state.json").unlink()
    assert "trainer_state.json is missing" in checkpoints.problem(ckpt)


def test_resume_falls_back_past_damaged_newer_checkpoints(tmp_path):
    fake_checkpoint(tmp_path, 2)
    fake_checkpoint(tmp_path, 4)
    fake_checkpoint(tmp_path, 6, marked=False, state="")
    (tmp_path / "checkpoint-8").mkdir()  # killed before the first file
    point = checkpoints.resume_point(tmp_path)
    assert (point.path.name, point.step) == ("checkpoint-4", 4)
    assert [name for name, _ in point.passed_over] == ["checkpoint-8", "checkpoint-6"]
    assert point.describe() == (
        "resumes from step 4 (checkpoint-4); checkpoint-8 is damaged: trainer_state.json is missing or "
        "unreadable (the save was interrupted); checkpoint-6 is damaged: trainer_state.json is empty "
        "(the save was interrupted)"
    )


def test_no_complete_checkpoint_and_no_folder(tmp_path):
    assert checkpoints.resume_point(tmp_path / "absent") == checkpoints.ResumePoint(None, 0)
    fake_checkpoint(tmp_path, 2, marked=False, state="")
    point = checkpoints.resume_point(tmp_path)
    assert point.path is None and point.step == 0
    assert point.describe().startswith("no complete checkpoint; checkpoint-2 is damaged")


def test_prune_keeps_the_newest_complete_ones(tmp_path):
    for step in (2, 4, 6):
        fake_checkpoint(tmp_path, step)
    fake_checkpoint(tmp_path, 3, marked=False, state="")  # damaged, older than a complete one
    fake_checkpoint(tmp_path, 8, marked=False, state="")  # damaged, newest: a save under way is left
    deleted = checkpoints.prune(tmp_path, keep=2)
    assert sorted(p.name for p in deleted) == ["checkpoint-2", "checkpoint-3"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-4", "checkpoint-6", "checkpoint-8"]


def test_prune_never_deletes_the_only_complete_checkpoint(tmp_path):
    fake_checkpoint(tmp_path, 2)
    fake_checkpoint(tmp_path, 4, marked=False, state="{")
    assert checkpoints.prune(tmp_path, keep=1) == []
    assert checkpoints.resume_point(tmp_path).step == 2


def test_a_synced_reference_round_trips_through_a_checkpoint_folder(tmp_path):
    """Without DeepSpeed: the synced reference model's weights are saved whole into the checkpoint
    folder and put back into another reference on resume; a run that does not sync saves none."""
    from types import SimpleNamespace

    import torch

    def trainer(ref, sync=True):
        accelerator = SimpleNamespace(state=SimpleNamespace(), unwrap_model=lambda m: m, is_main_process=True)
        return SimpleNamespace(
            ref_model=ref, args=SimpleNamespace(sync_ref_model=sync), accelerator=accelerator
        )

    torch.manual_seed(0)
    saved, other = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    checkpoints.save_ref_model(trainer(saved, sync=False), tmp_path)
    assert not (tmp_path / checkpoints.REF_MODEL).exists()
    checkpoints.save_ref_model(trainer(saved), tmp_path)
    assert (tmp_path / checkpoints.REF_MODEL).exists()
    assert not torch.equal(other.weight, saved.weight)
    checkpoints.load_ref_model(trainer(other), tmp_path)
    assert torch.equal(other.weight, saved.weight) and torch.equal(other.bias, saved.bias)
