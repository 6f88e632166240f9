"""Per-step metrics on disk: atomic writes, the parquet writer, provenance (the TrainerCallback that
feeds the writer is in :mod:`harness.training`).

Every write goes to a temporary name in the same folder and is then renamed, so a run killed at
any moment leaves only complete parquet files where readers look (readers skip names starting
with "."). Parts are flushed every ``flush_every`` rows and compacted into one file at the end.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness import layout


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (:func:`harness.layout.atomic_path`)."""
    with layout.atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(Path(path), (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def _atomic_write_table(table: pa.Table, path: Path) -> None:
    with layout.atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def rows_to_table(rows: list[Mapping[str, Any]]) -> pa.Table:
    """Rows of one run to an arrow table: ``run_id`` string, ``step`` int64, every other column float64.

    Missing values become nulls; non-finite floats are kept (NaN, inf), since a diverging run's
    last row is evidence.
    """
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    fields = []
    for name in names:
        if name == layout.RUN_ID:
            fields.append(pa.field(name, pa.string()))
        elif name == layout.STEP:
            fields.append(pa.field(name, pa.int64()))
        else:
            fields.append(pa.field(name, pa.float64()))
    clean = [
        {
            k: (float(v) if k not in (layout.RUN_ID, layout.STEP) and v is not None else v)
            for k, v in row.items()
        }
        for row in rows
    ]
    return pa.Table.from_pylist(clean, schema=pa.schema(fields))


def read_metrics(run_dir: str | Path, unreadable: list[Path] | None = None) -> pa.Table | None:
    """All metric rows of one run, one row per step (a later part wins on a repeated step).

    Reads ``metrics.parquet`` when the run was compacted, otherwise its parts in name order.
    Returns None when the run has no readable metrics. Raises nothing for unreadable parts: they
    are skipped (the writer never leaves one, but a disk can) and appended to ``unreadable``.
    """
    files = [Path(p) for p in layout.metric_paths(run_dir)]
    tables = []
    for f in files:
        try:
            tables.append(pq.read_table(f))
        except (pa.ArrowInvalid, OSError):
            if unreadable is not None:
                unreadable.append(f)
            continue
    if not tables:
        return None
    table = pa.concat_tables(tables, promote_options="permissive")
    return _dedupe_steps(table)


def last_step_and_reward(run_dir: str | Path) -> tuple[int | None, float | None]:
    """The run's last logged step and its latest logged ``reward`` (TRL logs reward only on the steps
    that generate, so the last row may have none); (None, None) without metrics."""
    try:
        table = read_metrics(run_dir)
    except (pa.ArrowException, ValueError, KeyError):  # clashing parts, no step column: nothing to show
        return None, None
    if table is None or not table.num_rows or layout.STEP not in table.column_names:
        return None, None
    reward = None
    if "reward" in table.column_names:
        values = [v for v in table.column("reward").to_pylist() if isinstance(v, int | float)]
        reward = float(values[-1]) if values else None
    step = table.column(layout.STEP)[-1].as_py()
    return (step if isinstance(step, int) else None), reward


def final_reward(run_dir: str | Path) -> tuple[float, int] | None:
    """The run's final reward as the report scores it, and over how many logged points: the mean
    of its last ``ceil(n / 10)`` logged rewards (the report smooths each run by a trailing mean
    over a tenth of its points, so its last point is this); None without rewards."""
    try:
        table = read_metrics(run_dir)
    except (pa.ArrowException, ValueError, KeyError):
        return None
    if table is None or "reward" not in table.column_names:
        return None
    values = [
        v for v in table.column("reward").to_pylist() if isinstance(v, int | float) and math.isfinite(v)
    ]
    if not values:
        return None
    w = math.ceil(len(values) / 10)
    return sum(values[-w:]) / w, w


def _dedupe_steps(table: pa.Table) -> pa.Table:
    steps = table.column(layout.STEP).to_pylist()
    last = {s: i for i, s in enumerate(steps)}
    keep = sorted(last.values(), key=lambda i: steps[i])
    return table.take(pa.array(keep, pa.int64()))


class MetricsWriter:
    """Buffers per-step rows of one run and writes them as parquet parts, atomically.

    Args:
        run_dir: the run's folder; parts go to ``run_dir/metrics/``.
        run_id: written into every row.
        flush_every: rows buffered before a part is written (a killed run loses at most this many steps).

    A resumed run that re-logs steps it had already written (after restarting from an earlier
    checkpoint) replaces them: :meth:`compact` and :func:`read_metrics` keep the last row per step,
    and :meth:`truncate_after` drops rows past the checkpoint on resume.

    A part that cannot be read (a damaged disk or copy) is never deleted: :meth:`truncate_after` and
    :meth:`compact` rename it to ``<part>.parquet.unreadable`` and list it in :attr:`quarantined`.
    """

    def __init__(self, run_dir: str | Path, run_id: str, flush_every: int = 5):
        self.dir = Path(run_dir) / layout.METRICS_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id
        self.flush_every = max(1, int(flush_every))
        self._rows: list[dict[str, Any]] = []
        existing = sorted(self.dir.glob(f"{layout.PART_PREFIX}*.parquet"))
        self._next_part = 1 + max((self._part_index(p) for p in existing), default=0)
        self.quarantined: list[Path] = []

    def _read_all(self) -> pa.Table | None:
        """:func:`read_metrics` of this run, with unreadable files set aside (renamed, kept)."""
        unreadable: list[Path] = []
        table = read_metrics(self.dir.parent, unreadable)
        for f in unreadable:
            target = f.with_name(f.name + ".unreadable")
            with contextlib.suppress(OSError):
                f.rename(target)
                self.quarantined.append(target)
        return table

    @staticmethod
    def _part_index(path: Path) -> int:
        try:
            return int(path.stem[len(layout.PART_PREFIX) :].split("-")[0])
        except ValueError:
            return 0

    def append(self, row: Mapping[str, Any]) -> None:
        """Buffer one row (must hold ``step``); flushes when ``flush_every`` rows are buffered."""
        if layout.STEP not in row:
            raise KeyError(f"metrics row has no '{layout.STEP}' key: {sorted(row)}")
        self._rows.append({layout.RUN_ID: self.run_id, **row})
        if len(self._rows) >= self.flush_every:
            self.flush()

    def flush(self) -> Path | None:
        """Write buffered rows to a new part file; returns its path (None when nothing was buffered)."""
        if not self._rows:
            return None
        path = self.dir / f"{layout.PART_PREFIX}{self._next_part:06d}.parquet"
        _atomic_write_table(rows_to_table(self._rows), path)
        self._next_part += 1
        self._rows = []
        return path

    def truncate_after(self, step: int) -> None:
        """Drop every written row with ``step`` > ``step`` (used when resuming from a checkpoint).

        Rewrites the surviving rows as one part before removing the old files, so a crash in
        between leaves duplicates (resolved by step) rather than a loss.
        """
        self.flush()
        table = self._read_all()
        old = list(self.dir.glob("*.parquet"))
        if table is None:
            return
        import pyarrow.compute as pc

        kept = table.filter(pc.less_equal(table.column(layout.STEP), step))
        path = self.dir / f"{layout.PART_PREFIX}{self._next_part:06d}.parquet"
        self._next_part += 1
        _atomic_write_table(kept, path)
        for f in old:
            if f != path:
                f.unlink(missing_ok=True)

    def compact(self) -> Path | None:
        """Flush, merge all parts into ``metrics.parquet`` (one row per step) and delete the parts."""
        self.flush()
        table = self._read_all()
        if table is None:
            return None
        parts = sorted(self.dir.glob(f"{layout.PART_PREFIX}*.parquet"))
        path = self.dir / layout.COMPACT_FILE
        _atomic_write_table(table, path)
        for p in parts:
            p.unlink(missing_ok=True)
        return path


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def provenance(device: str) -> dict[str, Any]:
    """Where and with what a run executed: git commit and dirty flag, versions, host, device.

    ``HARNESS_SNAPSHOT_COMMIT`` (set when code is snapshotted at submit time) overrides the git
    look-up, since a snapshot folder need not be a git checkout.
    """
    import torch
    import transformers
    import trl

    import harness

    commit = os.environ.get("HARNESS_SNAPSHOT_COMMIT") or _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "accelerate": metadata.version("accelerate"),
        "reasoning_gym": metadata.version("reasoning-gym"),
        "harness": harness.__version__,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "device": device,
        "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch_threads": torch.get_num_threads(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "slurm_array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID"),
    }
