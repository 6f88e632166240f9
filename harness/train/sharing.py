"""How many runs share this machine's accelerator (or CPUs) with a run while it trains.

While a run trains, its first rank keeps a small JSON lease in a host-wide folder (default
``<tempdir>/grpo-harness-<uid>/active/``; ``$GRPO_HARNESS_ACTIVE_DIR`` overrides it)::

    {"pid": 1234, "host": "node7", "run_id": "...", "cpus": [0, 1, ...], "gpus": ["<cuda uuid>"],
     "proc_start": 123456}

Counting reads every lease of this host: a lease whose process is gone is removed; a live one counts
when it shares a GPU with this run (a run on a GPU), or when its CPU set overlaps this run's (a run on
CPU). The run itself is included, so a count is at least 1. Nothing here may fail a run: a folder that
cannot be created, written or read gives no count (None) instead of an exception.

Only the first rank of a run registers, with the GPUs of its node's ranks (``$LOCAL_WORLD_SIZE``
devices from index 0, accelerate's placement); the ranks of a multi-node run on other nodes are not
seen there.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness import layout
from harness.layout import atomic_write_json

ACTIVE_DIR_ENV = "GRPO_HARNESS_ACTIVE_DIR"


def active_dir() -> Path:
    """The folder of leases: ``$GRPO_HARNESS_ACTIVE_DIR``, else ``<tempdir>/grpo-harness-<uid>/active``.

    Only computes the path; raises nothing and creates nothing.
    """
    env = os.environ.get(ACTIVE_DIR_ENV)
    if env:
        return Path(env)
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"grpo-harness-{uid}" / "active"


def cpu_set() -> list[int]:
    """CPU indices this process may run on (``os.sched_getaffinity``; every core where unavailable)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def gpu_ids(device: str) -> list[str]:
    """Identities of the GPUs a run on ``device`` uses on this node: CUDA device UUIDs as torch prints
    them (PCI address, else index, when the UUID is unavailable) of devices ``0 .. $LOCAL_WORLD_SIZE - 1``; empty for a device
    other than ``"cuda"`` or when CUDA is unavailable. Raises nothing."""
    if not str(device).startswith("cuda"):
        return []
    try:
        import torch

        if not torch.cuda.is_available():
            return []
        n = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
        ids = []
        for i in range(min(n, torch.cuda.device_count())):
            props = torch.cuda.get_device_properties(i)
            ident = getattr(props, "uuid", None)
            if ident is not None:
                ids.append(str(ident))
            elif getattr(props, "pci_bus_id", None) is not None:
                ids.append(f"pci:{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}")
            else:
                ids.append(f"cuda:{i}")
        return ids
    except Exception:  # an identity is a nicety; the run must go on without it
        return []


def _proc_start(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot (Linux ``/proc``), None elsewhere.

    Tells a live lease from a dead one whose pid was reused by an unrelated process.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _alive(lease: dict[str, Any]) -> bool:
    pid = lease.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    if not layout.pid_alive(pid):
        return False
    started = lease.get("proc_start")
    now = _proc_start(pid) if isinstance(started, int) else None
    return now is None or now == started


def concurrent_runs(
    cpus: Iterable[int] | None = None,
    gpus: Iterable[str] = (),
    folder: str | Path | None = None,
    own: str | Path | None = None,
) -> int | None:
    """Live runs of this host that share a GPU with ``gpus`` (when non-empty) or CPUs with ``cpus``.

    Args:
        cpus: this run's CPU indices; None = :func:`cpu_set`.
        gpus: this run's GPU identities (:func:`gpu_ids`); empty for a run on CPU.
        folder: the lease folder; None = :func:`active_dir`.
        own: this run's lease file, counted as this run whatever it holds (may be None).

    Returns:
        The number of such runs, this one included (>= 1); None when the folder cannot be read.
        Leases of processes that are gone are removed (errors doing so are ignored); unreadable or
        damaged lease files and leases of other hosts are skipped. Raises nothing.
    """
    folder = Path(folder) if folder is not None else active_dir()
    own_name = Path(own).name if own is not None else None
    cpus = set(cpu_set() if cpus is None else cpus)
    gpus = set(gpus)
    host = socket.gethostname()
    try:
        names = [p for p in folder.iterdir() if p.suffix == ".json" and not p.name.startswith(".")]
    except OSError:
        return None
    count = 1
    for path in names:
        if path.name == own_name:
            continue
        try:
            lease = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(lease, dict) or lease.get("host") != host:
            continue
        if not _alive(lease):
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        try:
            theirs_gpu = {str(g) for g in lease.get("gpus") or ()}
            theirs_cpu = {int(c) for c in lease.get("cpus") or ()}
        except (TypeError, ValueError):
            continue
        if (gpus & theirs_gpu) if gpus else (cpus & theirs_cpu):
            count += 1
    return count


class MachineLease:
    """This run's lease while it trains, and a time-throttled count of the runs sharing its machine.

    Args:
        run_id: written into the lease (for people reading the folder).
        device: the run's device (``"cpu"`` or ``"cuda"``): a CUDA run counts runs on the same GPUs,
            a CPU run counts runs whose CPU sets overlap its own.
        folder: the lease folder; None = :func:`active_dir`.
        min_interval_s: seconds between two recounts; :meth:`count` returns the last one in between.

    No method raises for a folder that cannot be created, written or read: the count is then None.
    """

    def __init__(
        self, run_id: str, device: str, folder: str | Path | None = None, min_interval_s: float = 1.0
    ):
        self.folder = Path(folder) if folder is not None else active_dir()
        self.run_id = run_id
        self.cpus = cpu_set()
        self.gpus = gpu_ids(device)
        self.min_interval_s = min_interval_s
        self.path: Path | None = None
        self._last_count: int | None = None
        self._last_time = -float("inf")

    def register(self) -> bool:
        """Write the lease (atomically); True when it was written, False when the folder cannot be
        created or written (nothing raised)."""
        pid = os.getpid()
        host = socket.gethostname()
        path = self.folder / f"{host}-{pid}-{uuid.uuid4().hex[:12]}.json"
        lease = {
            "pid": pid,
            "host": host,
            "run_id": self.run_id,
            "cpus": self.cpus,
            "gpus": self.gpus,
            "proc_start": _proc_start(pid),
            "registered_at": time.time(),
        }
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write_json(path, lease)
        except OSError:
            return False
        self.path = path
        return True

    def count(self) -> int | None:
        """Live runs sharing this run's GPUs (or CPUs), this one included; recounted at most once per
        ``min_interval_s`` seconds. None when this run's lease was not written or the folder cannot be
        read. Raises nothing."""
        if self.path is None:
            return None
        now = time.monotonic()
        if now - self._last_time >= self.min_interval_s:
            self._last_count = concurrent_runs(self.cpus, self.gpus, self.folder, own=self.path)
            self._last_time = now
        return self._last_count

    def release(self) -> None:
        """Remove the lease (if written); raises nothing, and may be called more than once."""
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()
            self.path = None

    def __enter__(self) -> MachineLease:
        self.register()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
