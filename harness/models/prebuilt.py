"""Embedded models shipped already built, so that a first run need not spend minutes on the warm start.

An embedded model's build is a function of its cache key (the spec, the task's dataset, the build
format, the build's thread count and the versions of torch, transformers, TRL and tokenizers:
:func:`harness.models.tiny.tiny_model_key` and its kin). For the keys the ready grids use at the
CPU lock's versions (``requirements-cpu.txt``), the built folder is shipped under
``harness/models/prebuilt/<key>/``: exactly the files a build writes, plus :data:`ORIGIN_FILE`, which
says where and how it was built. :func:`harness.models.tiny.cached_build` copies it into the model
cache instead of building, unless :data:`NO_PREBUILT_ENV` is set. Any other key (other versions,
another task, another spec) is built as before.

A build is deterministic for a given CPU and library versions (:data:`harness.models.tiny.BUILD_THREADS`),
so a shipped folder is what a build on such a machine writes, bit for bit (``tests/test_prebuilt.py``
rebuilds one and compares). ``python scripts/prebuilt.py make`` (re)makes the shipped folders after
the lock changes; the tests fail while a ready grid's key has no shipped folder or a shipped folder
belongs to no ready grid.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

PREBUILT_DIR = Path(__file__).resolve().parent / "prebuilt"
ORIGIN_FILE = "prebuilt.json"  # where, how and with what the shipped folder was built
NO_PREBUILT_ENV = "GRPO_HARNESS_NO_PREBUILT"  # set to 1: build embedded models even where one is shipped


def shipped(key: str) -> Path | None:
    """The shipped folder of the embedded model ``key``, or None (none shipped, or
    :data:`NO_PREBUILT_ENV` set to anything but ``""``/``0``)."""
    if os.environ.get(NO_PREBUILT_ENV, "") not in ("", "0"):
        return None
    folder = PREBUILT_DIR / key
    return folder if (folder / ORIGIN_FILE).is_file() else None


def shipped_keys() -> list[str]:
    """Every key with a shipped folder, sorted."""
    if not PREBUILT_DIR.is_dir():
        return []
    return sorted(p.name for p in PREBUILT_DIR.iterdir() if (p / ORIGIN_FILE).is_file())


def install(source: Path, dest: Path) -> dict[str, Any]:
    """Copy the shipped folder ``source`` to ``dest`` (created; the caller renames it into the
    cache) file by file, without the source's permissions (an installed package may be read-only),
    each file checked against the digest its origin record holds; returns the origin record
    (:data:`ORIGIN_FILE`).

    Raises:
        FileExistsError: ``dest`` exists.
        ValueError: a file is missing or is not what the record says (a partial checkout).
        OSError: the copy failed (a full disk); ``dest`` may be partly written.
    """
    origin = read_origin(source)
    Path(dest).mkdir(parents=True)
    for name, digest in origin.get("files", {}).items():
        if not (Path(source) / name).is_file() or file_digest(Path(source) / name) != digest:
            raise ValueError(
                f"{source}/{name} is not the file shipped ({ORIGIN_FILE}); reinstall grpo-harness"
            )
    for path in Path(source).iterdir():
        if path.is_file():
            shutil.copyfile(path, Path(dest) / path.name)
    return origin


def file_digest(path: Path) -> str:
    """``sha256:<hex>`` of a file's bytes."""
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_origin(folder: Path) -> dict[str, Any]:
    """The origin record of a shipped folder: ``{"cpu": cpu_signature(), "command": ..., "key": ...}``."""
    return json.loads((Path(folder) / ORIGIN_FILE).read_text())


def cpu_signature() -> dict[str, str]:
    """What the bits of a build depend on besides the key: the machine's architecture, its CPU as
    ``/proc/cpuinfo`` names it (model name, family, model and stepping; ``platform.processor()``
    elsewhere), a digest of its instruction-set flags, and the instruction set torch dispatches
    its CPU kernels on (``torch.backends.cpu.get_cpu_capability()``: ``AVX512``, ``AVX2``...). A
    virtual machine's generic model name covers several microarchitectures; family, model and
    flags tell them apart."""
    import torch

    fields = {"model name": platform.processor(), "cpu family": "", "model": "", "stepping": "", "flags": ""}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in fields and not fields[key.strip()]:
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    flags = " ".join(sorted(fields["flags"].split()))
    return {
        "machine": platform.machine(),
        "cpu": fields["model name"],
        "family": fields["cpu family"],
        "model": fields["model"],
        "stepping": fields["stepping"],
        "flags": hashlib.sha256(flags.encode()).hexdigest()[:16],
        "capability": torch.backends.cpu.get_cpu_capability(),
    }


def write_origin(
    folder: Path, key: str, command: str, cpu: dict[str, str] | None = None, trajectory: dict | None = None
) -> None:
    """Write :data:`ORIGIN_FILE` into ``folder``: the key, the CPU that built it (this machine's
    :func:`cpu_signature` unless given), the ``command`` that made it, each file's digest and, where
    given, the build's weights at :data:`TRAJECTORY_STEP` (:func:`trajectory_at`)."""
    files = {
        p.name: file_digest(p)
        for p in sorted(Path(folder).iterdir())
        if p.is_file() and p.name != ORIGIN_FILE
    }
    record = {"key": key, "cpu": cpu or cpu_signature(), "command": command, "files": files}
    if trajectory is not None:
        record["trajectory"] = trajectory
    (Path(folder) / ORIGIN_FILE).write_text(json.dumps(record, indent=2) + "\n")


#: The warm-start step at which a shipped build's trajectory is recorded (:func:`trajectory_at`):
#: a rebuild that far takes a tenth of a full ``tiny-steps`` build, and a change to the build's data,
#: model, optimizer or schedule shows there.
TRAJECTORY_STEP = 100


class _Reached(Exception):
    """The build reached the step a trajectory is taken at."""


def weights_record(model: Any) -> dict[str, Any]:
    """A model's weights in brief: ``{"digest": "sha256:<hex>"}`` over every parameter's float32
    bytes in ``named_parameters`` order, and ``{"norms": {name: L2 norm}}``."""
    import torch

    h, norms = hashlib.sha256(), {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            t = p.detach().to(torch.float32).contiguous().cpu()
            h.update(name.encode())
            h.update(t.numpy().tobytes())
            norms[name] = float(t.norm())
    return {"digest": "sha256:" + h.hexdigest(), "norms": norms}


def trajectory_at(
    build: Callable[..., Any], out_dir: Path, step: int = TRAJECTORY_STEP, whole: bool = False
) -> dict[str, Any]:
    """Run an embedded model's ``build(out_dir)`` until its warm start has taken ``step`` optimizer
    steps (the schedule is the whole build's: the state at ``step`` is the one a full build passes
    through) and return :func:`weights_record` of the model then, with ``step``. ``build`` is one of
    :func:`harness.models.names.embedded_build`'s; nothing is saved, unless ``whole``: then the build
    goes on to its end and saves into ``out_dir`` as it would alone.

    Raises:
        ValueError: the build ended before ``step``.
    """
    from harness.models import tiny

    seen: dict[str, Any] = {}
    run_sft = tiny.run_sft

    def until(spec, model, tokenizer, columns, work_dir, report=None):
        def report_until(stage, step_done=None, total=None, **kw):
            if report is not None:
                report(stage, step_done, total, **kw)
            if stage == tiny.SFT and step_done == step:
                seen.update(weights_record(model), step=step)
                if not whole:
                    raise _Reached

        return run_sft(spec, model, tokenizer, columns, work_dir, report_until)

    tiny.run_sft = until
    try:
        build(out_dir)
    except _Reached:
        return seen
    finally:
        tiny.run_sft = run_sft
    if seen:
        return seen
    raise ValueError(f"the build ended before step {step} of its warm start")
