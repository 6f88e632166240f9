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

import json
import os
import platform
import shutil
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
    """Copy the shipped folder ``source`` to ``dest`` (which must not exist; the caller renames it
    into the cache) and return its origin record (:data:`ORIGIN_FILE`).

    Raises:
        FileExistsError: ``dest`` exists.
        OSError: the copy failed (a full disk); ``dest`` may be partly written.
    """
    shutil.copytree(source, dest)
    return read_origin(source)


def read_origin(folder: Path) -> dict[str, Any]:
    """The origin record of a shipped folder: ``{"cpu": cpu_signature(), "command": ..., "key": ...}``."""
    return json.loads((Path(folder) / ORIGIN_FILE).read_text())


def cpu_signature() -> dict[str, str]:
    """What the bits of a build depend on besides the key: the machine's architecture, its CPU's
    model name (``/proc/cpuinfo``; ``platform.processor()`` elsewhere) and the instruction set torch
    dispatches its CPU kernels on (``torch.backends.cpu.get_cpu_capability()``: ``AVX512``,
    ``AVX2``, ``DEFAULT``...)."""
    import torch

    name = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "machine": platform.machine(),
        "cpu": name,
        "capability": torch.backends.cpu.get_cpu_capability(),
    }


def write_origin(folder: Path, key: str, command: str) -> None:
    """Write :data:`ORIGIN_FILE` into ``folder``: the key, this machine's :func:`cpu_signature` and
    the ``command`` that made it."""
    record = {"key": key, "cpu": cpu_signature(), "command": command}
    (Path(folder) / ORIGIN_FILE).write_text(json.dumps(record, indent=2) + "\n")
