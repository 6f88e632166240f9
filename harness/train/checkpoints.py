"""Trainer checkpoints that are complete or not used: a completion marker, resume with fall-back, pruning.

transformers writes ``checkpoint-<step>/`` file by file (weights, optimizer, scheduler, RNG state,
``trainer_state.json`` last and not atomically), so a process killed while saving leaves a folder
that looks like a checkpoint and is not one. After transformers reports a save (the ``on_save``
callback), :func:`mark_complete` flushes every file to disk and writes :data:`COMPLETE_FILE` last,
listing each file with its size. A checkpoint counts only when :func:`problem` finds nothing wrong:
its marker's files are all there with their sizes, or, for a folder without a marker (written
before markers existed, or killed after ``trainer_state.json`` but before the marker), its
``trainer_state.json`` parses and its weights and optimizer state are there and not empty.

:func:`resume_point` takes the newest checkpoint that counts and names the newer ones it passed
over, and why. :func:`prune` keeps the newest ``keep`` complete checkpoints (the harness does the
pruning, not transformers' ``save_total_limit``, which deletes older checkpoints before the newest
is known to be complete).

Imports nothing heavy: ``status`` reads it to say whether, and from which step, a run resumes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from harness import layout

#: Written last into a checkpoint folder: ``{"step": N, "files": {name: bytes}}``.
COMPLETE_FILE = ".complete.json"
TRAINER_STATE = "trainer_state.json"
#: Files of which one holds the model's weights (full model, sharded index, or PEFT adapter).
WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "adapter_model.safetensors",
)
OPTIMIZER = "optimizer.pt"
#: The reference model's weights (a torch state dict) in a checkpoint of a run that syncs its
#: reference model (``trainer.sync_ref_model``): TRL saves only the policy, so without it a resumed
#: run would measure KL against the base model again. Written by rank 0 before the marker.
REF_MODEL = "ref_model.pt"
_NAME = re.compile(r"checkpoint-(\d+)")


@dataclass(frozen=True)
class ResumePoint:
    """Where a run resumes: ``path`` and ``step`` of the newest complete checkpoint (None, 0 when
    there is none) and the newer checkpoints passed over as ``(folder name, why)``."""

    path: Path | None
    step: int
    passed_over: tuple[tuple[str, str], ...] = field(default=())

    def describe(self) -> str:
        """One line: where the run resumes, and which newer checkpoints were damaged."""
        where = f"resumes from step {self.step} ({self.path.name})" if self.path else "no complete checkpoint"
        damaged = "; ".join(f"{name} is damaged: {why}" for name, why in self.passed_over)
        return f"{where}; {damaged}" if damaged else where


def checkpoints(ckpt_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(step, folder)`` of every ``checkpoint-<step>`` folder, newest first."""
    found = []
    try:
        entries = list(os.scandir(ckpt_dir))
    except OSError:
        return []
    for entry in entries:
        m = _NAME.fullmatch(entry.name)
        if m and entry.is_dir():
            found.append((int(m.group(1)), Path(entry.path)))
    return sorted(found, reverse=True)


def problem(ckpt: str | os.PathLike) -> str | None:
    """Why ``ckpt`` cannot be resumed from, in a few words; None when it is complete."""
    ckpt = Path(ckpt)
    marker = layout.read_json_object(ckpt / COMPLETE_FILE)
    if marker is not None and isinstance(marker.get("files"), dict):
        for name, size in marker["files"].items():
            try:
                now = (ckpt / name).stat().st_size
            except OSError:
                return f"{name} is missing"
            if now != size:
                return f"{name} has {now} bytes, {size} when it was saved"
        return None
    return _inspect(ckpt)


def _inspect(ckpt: Path) -> str | None:
    """:func:`problem` for a folder without a marker: the trainer state, weights and optimizer."""
    state = ckpt / TRAINER_STATE
    try:
        text = state.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return f"{TRAINER_STATE} is missing or unreadable (the save was interrupted)"
    if not text.strip():
        return f"{TRAINER_STATE} is empty (the save was interrupted)"
    try:
        if not isinstance(json.loads(text), dict):
            raise ValueError
    except ValueError:
        return f"{TRAINER_STATE} is not valid JSON (truncated)"
    if not any(_non_empty(ckpt / w) for w in WEIGHTS):
        return "no model weights"
    if (ckpt / OPTIMIZER).exists() and not _non_empty(ckpt / OPTIMIZER):
        return f"{OPTIMIZER} is empty"
    return None


def _non_empty(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def resume_point(ckpt_dir: str | os.PathLike) -> ResumePoint:
    """The newest complete checkpoint under ``ckpt_dir`` (``runs/<id>/checkpoints``), passing over
    damaged newer ones (:func:`problem`)."""
    passed = []
    for step, path in checkpoints(ckpt_dir):
        why = problem(path)
        if why is None:
            return ResumePoint(path, step, tuple(passed))
        passed.append((path.name, why))
    return ResumePoint(None, 0, tuple(passed))


def mark_complete(ckpt: str | os.PathLike, step: int) -> None:
    """Flush every file of a saved checkpoint to disk, then write :data:`COMPLETE_FILE` listing
    them with their sizes (atomically, then flushed with its folder).

    Raises:
        OSError: a file cannot be read or the marker cannot be written (a full disk); the
        checkpoint then has no marker and is judged by inspection.
    """
    ckpt = Path(ckpt)
    files = {}
    for entry in sorted(os.scandir(ckpt), key=lambda e: e.name):
        if entry.is_file() and entry.name != COMPLETE_FILE and not entry.name.startswith("."):
            _fsync(entry.path)
            files[entry.name] = entry.stat().st_size
    with layout.atomic_path(ckpt / COMPLETE_FILE) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump({"step": step, "files": files}, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    _fsync(ckpt)


def _fsync(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def prune(ckpt_dir: str | os.PathLike, keep: int) -> list[Path]:
    """Delete checkpoints beyond the newest ``keep`` complete ones, and damaged ones older than the
    newest complete one; never the newest complete checkpoint. Returns the folders deleted."""
    complete_seen = 0
    deleted = []
    for _, path in checkpoints(ckpt_dir):
        complete = problem(path) is None
        if complete and complete_seen < max(keep, 1):
            complete_seen += 1
            continue
        if complete_seen == 0:  # damaged but newer than every complete one: a save may be under way
            continue
        shutil.rmtree(path, ignore_errors=True)
        deleted.append(path)
    return deleted


# --------------------------------------------------------------------------------------------------
# The reference model and the ranks around a save (DeepSpeed ZeRO-3 shards the weights)


def zero3(trainer) -> bool:
    """Whether the trainer's models are sharded by DeepSpeed ZeRO stage 3."""
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    return plugin is not None and plugin.zero_stage == 3


@contextlib.contextmanager
def whole_params(trainer, model, modifier_rank: int | None = None):
    """``model``'s module with every parameter whole for the block, under ZeRO-3
    (``deepspeed.zero.GatheredParameters``, a collective: every rank enters it; with
    ``modifier_rank`` set, that rank's changes are partitioned again on exit); the unwrapped module
    otherwise. For reading and writing weights, not for a forward pass on one rank."""
    module = trainer.accelerator.unwrap_model(model)
    if not zero3(trainer):
        yield module
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=modifier_rank):
        yield module


def save_ref_model(trainer, ckpt: Path, writes: bool = True) -> None:
    """The synced reference model's weights into checkpoint folder ``ckpt``
    (:data:`harness.train.checkpoints.REF_MODEL`), whole: under ZeRO-3 every rank takes part in gathering
    the shards and the rank with ``writes`` (rank 0) saves them. Nothing when the run does not sync
    its reference model: then it is the base model, which a resumed run loads."""
    ref = getattr(trainer, "ref_model", None)
    if ref is None or not trainer.args.sync_ref_model:
        return
    import torch

    with whole_params(trainer, ref) as module:
        if writes:
            weights = {k: v.detach().clone() for k, v in module.state_dict().items()}
            with layout.atomic_path(ckpt / REF_MODEL) as tmp:
                torch.save(weights, tmp)


def load_ref_model(trainer, ckpt: Path | None) -> None:
    """Put back the reference model saved in checkpoint folder ``ckpt`` (every rank; under ZeRO-3
    rank 0 loads the whole weights and DeepSpeed partitions them again), when the run resumes from
    one that holds it (:func:`save_ref_model`)."""
    ref = getattr(trainer, "ref_model", None)
    if ckpt is None or ref is None or not (ckpt / REF_MODEL).exists():
        return
    import torch

    weights = torch.load(ckpt / REF_MODEL, map_location="cpu", weights_only=True)
    with whole_params(trainer, ref, modifier_rank=0) as module:
        if not zero3(trainer) or trainer.accelerator.is_main_process:
            module.load_state_dict(weights)


def barrier() -> None:
    """Wait for every rank of a multi-process run (``torch.distributed``); nothing otherwise."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
