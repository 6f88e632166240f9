"""Per-step metrics on disk: atomic writes, the parquet writer, provenance (the TrainerCallback that
feeds the writer is in :mod:`harness.train.training`).

Every write goes to a temporary name in the same folder and is then renamed, so a run killed at
any moment leaves only complete parquet files where readers look (readers skip names starting
with "."). Parts are flushed every ``flush_every`` rows and compacted into one file at the end.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import socket
import sys
import time
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness import layout

#: ``pyarrow.parquet.write_table`` options of a part file (a few rows, merged into
#: ``metrics.parquet`` when the run is compacted): no dictionary encoding, compression or column
#: statistics, which on a part of 5 rows x 60 columns are a third of the CPU time of writing it.
PART_OPTIONS: dict[str, Any] = {"use_dictionary": False, "compression": "none", "write_statistics": False}


def _atomic_write_table(table: pa.Table, path: Path) -> None:
    """Write ``table`` as parquet at ``path``, atomically; a part file (its name starts with
    ``layout.PART_PREFIX``) with :data:`PART_OPTIONS`, ``metrics.parquet`` with pyarrow's defaults."""
    options = PART_OPTIONS if Path(path).name.startswith(layout.PART_PREFIX) else {}
    with layout.atomic_path(path) as tmp:
        pq.write_table(table, tmp, **options)


def rows_to_table(rows: list[Mapping[str, Any]]) -> pa.Table:
    """Rows of one run to an arrow table: ``run_id`` string, ``step`` int64, every other column float64.

    Missing values become nulls; non-finite floats are kept (NaN, inf), since a diverging run's
    last row is evidence. Built column by column (one ``pa.array`` per column, not one Python
    dict per cell): this runs on every flush of a training run.
    """
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    columns = {}
    for name in names:
        values = [row.get(name) for row in rows]
        if name == layout.RUN_ID:
            columns[name] = pa.array(values, pa.string())
        elif name == layout.STEP:
            columns[name] = pa.array(values, pa.int64())
        else:  # a list straight to arrow: half the CPU time of numpy arrays and a mask on a part's rows
            columns[name] = pa.array([None if v is None else float(v) for v in values], pa.float64())
    return pa.table(columns)


def _write_rows(
    rows: list[tuple[dict[str, Any], Callable[[], Mapping[str, Any]] | None]], path: Path
) -> None:
    """Write buffered ``(row, more)`` pairs as one part: each row with ``more()``'s columns added."""
    _atomic_write_table(
        rows_to_table([row if more is None else {**row, **more()} for row, more in rows]), path
    )


class MetricsWriter:
    """Buffers per-step rows of one run and writes them as parquet parts, atomically.

    Args:
        run_dir: the run's folder; parts go to ``run_dir/metrics/``.
        run_id: written into every row.
        flush_every: rows buffered before a part is written (a killed run loses at most twice this
            many steps: the rows buffered and those of a part being written).
        background: write the parts of :meth:`append` in a background thread, off the training
            step (one thread, in order); :meth:`flush`, :meth:`truncate_after` and :meth:`compact`
            wait for it and write on the caller's thread. An error of a background write is raised
            by the next call of any of them, or of :meth:`append`.

    A resumed run that re-logs steps it had already written (after restarting from an earlier
    checkpoint) replaces them: :meth:`compact` and :func:`read_metrics` keep the last row per step,
    and :meth:`truncate_after` drops rows past the checkpoint on resume.

    A part that cannot be read (a damaged disk or copy) is never deleted: :meth:`truncate_after` and
    :meth:`compact` rename it to ``<part>.parquet.unreadable`` and list it in :attr:`quarantined`.
    """

    def __init__(self, run_dir: str | Path, run_id: str, flush_every: int = 5, background: bool = False):
        self.dir = Path(run_dir) / layout.METRICS_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id
        self.flush_every = max(1, int(flush_every))
        self._rows: list[tuple[dict[str, Any], Callable[[], Mapping[str, Any]] | None]] = []
        existing = sorted(self.dir.glob(f"{layout.PART_PREFIX}*.parquet"))
        self._next_part = 1 + max((self._part_index(p) for p in existing), default=0)
        self.quarantined: list[Path] = []
        self.background = background
        self._worker: Any = None  # a one-thread ThreadPoolExecutor, made at the first background write
        self._inflight: list[Any] = []  # futures of the background writes not yet waited for

    def _read_all(self) -> pa.Table | None:
        """:func:`read_metrics` of this run, with unreadable files set aside (renamed, kept)."""
        unreadable: list[Path] = []
        table = layout.read_metrics(self.dir.parent, unreadable)
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

    def append(self, row: Mapping[str, Any], more: Callable[[], Mapping[str, Any]] | None = None) -> None:
        """Buffer one row (must hold ``step``); flushes when ``flush_every`` rows are buffered.

        ``more``, if given, returns further columns of the row; it is called when the row is written
        (in the background thread for a background write), so that work the row needs but the
        training step does not (the w_seq statistics) stays off the step. Its error is raised like a
        write's.
        """
        if layout.STEP not in row:
            raise KeyError(f"metrics row has no '{layout.STEP}' key: {sorted(row)}")
        self._rows.append(({layout.RUN_ID: self.run_id, **row}, more))
        if len(self._rows) < self.flush_every:
            return
        if not self.background:
            self.flush()
            return
        self._raise_failed()
        rows, path = self._rows, self._take_part_path()
        self._rows = []
        if self._worker is None:
            from concurrent.futures import ThreadPoolExecutor

            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metrics-writer")
        self._inflight.append(self._worker.submit(_write_rows, rows, path))

    def _take_part_path(self) -> Path:
        path = self.dir / f"{layout.PART_PREFIX}{self._next_part:06d}.parquet"
        self._next_part += 1
        return path

    def _raise_failed(self) -> None:
        """Raise the error of a finished background write, if one failed; forget the finished ones."""
        done = [f for f in self._inflight if f.done()]
        self._inflight = [f for f in self._inflight if not f.done()]
        for f in done:
            f.result()

    def wait(self) -> None:
        """Wait for the background writes; raises the first error one met (OSError, ArrowException)."""
        pending, self._inflight = self._inflight, []
        for f in pending:
            f.result()

    def flush(self) -> Path | None:
        """Wait for the background writes, then write buffered rows to a new part file on this
        thread; returns its path (None when nothing was buffered)."""
        self.wait()
        if not self._rows:
            return None
        path = self._take_part_path()
        _write_rows(self._rows, path)
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
        """Flush, merge all parts into ``metrics.parquet`` (one row per step) and delete the parts;
        the background thread ends (a later :meth:`append` starts another)."""
        self.flush()
        if self._worker is not None:
            self._worker.shutdown(wait=True)
            self._worker = None
        table = self._read_all()
        if table is None:
            return None
        parts = sorted(self.dir.glob(f"{layout.PART_PREFIX}*.parquet"))
        path = self.dir / layout.COMPACT_FILE
        _atomic_write_table(table, path)
        for p in parts:
            p.unlink(missing_ok=True)
        return path


def provenance(device: str) -> dict[str, Any]:
    """Where and with what a run executed: git commit and dirty flag, versions, host, device.

    ``HARNESS_SNAPSHOT_COMMIT`` (set when code is snapshotted at submit time) overrides the git
    look-up, since a snapshot folder need not be a git checkout.
    """
    import torch
    import transformers
    import trl

    import harness

    commit, dirty = layout.code_commit()
    return {
        "git_commit": os.environ.get("HARNESS_SNAPSHOT_COMMIT") or commit,
        "git_dirty": dirty,
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


def _read_proc(path: str) -> bytes | None:
    """The first bytes of a ``/proc`` file (one ``open``/``read``/``close``), None when unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 512)
    except OSError:
        return None
    finally:
        os.close(fd)


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _machine_busy_s() -> float | None:
    """CPU seconds every core of the machine has spent busy since boot: the ``cpu`` line of Linux
    ``/proc/stat`` (proc(5)), user + nice + system + irq + softirq + steal clock ticks over
    ``SC_CLK_TCK``; None where there is no such file."""
    data = _read_proc("/proc/stat")
    if not data or not data.startswith(b"cpu "):
        return None
    try:
        f = [int(x) for x in data.split(b"\n", 1)[0].split()[1:9]]
        return (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) / _CLK_TCK
    except (ValueError, IndexError):
        return None


def _cpu_stall_us() -> float | None:
    """Microseconds during which some runnable task of the machine waited for a CPU, since boot
    (Linux pressure stall information, ``/proc/pressure/cpu``, the ``some ... total=`` field); None
    where the kernel does not report it."""
    data = _read_proc("/proc/pressure/cpu")
    try:
        return float(data.split(b"\n", 1)[0].rsplit(b"total=", 1)[1])
    except (AttributeError, IndexError, ValueError):
        return None


def _process_cpu_s(pids: list[int]) -> dict[int, float]:
    """CPU seconds (user + system, in clock ticks like :func:`_machine_busy_s`) of each of processes
    ``pids``; a process that is gone or cannot be read is left out."""
    out = {}
    for pid in pids:
        if pid == os.getpid():  # this process: times(2), without a file to read
            t = os.times()
            out[pid] = t.user + t.system
            continue
        try:
            import psutil

            t = psutil.Process(pid).cpu_times()
        except Exception:
            continue
        out[pid] = t.user + t.system
    return out


class StepClock:
    """Times a run's optimizer steps with the measures other work on the machine cannot inflate,
    beside the wall clock, and measures that other work.

    Per interval (:meth:`start` to :meth:`stop`; what runs between a ``stop`` and the next
    ``start``, such as an eval, is not counted) it adds up wall seconds (``time.perf_counter``),
    CPU seconds of this process (``time.process_time``: user + system of every thread), GPU
    seconds on CUDA (``torch.cuda.Event`` pairs recorded at start and stop, their ``elapsed_time``;
    it includes gaps where the GPU waited for the host), and for the machine: CPU seconds its cores
    were busy minus those of the harness's own processes (this one and ``harness_pids()``, read
    from ``/proc`` through psutil), and the CPU pressure stall time (``/proc/pressure/cpu``).

    Args:
        device: ``"cuda"`` records GPU time when ``torch.cuda.is_available()``; anything else does not.
        harness_pids: the process ids of the harness's other runs on this machine (called at most
            every ``refresh_s`` seconds); None: this process alone.
        refresh_s: seconds between two calls of ``harness_pids``.
        machine_every_s: seconds between two reads of the machine (see :meth:`stop`).

    Raises nothing for an unreadable ``/proc``: the machine's columns are then left out.
    """

    def __init__(self, device: str, harness_pids=None, refresh_s: float = 2.0, machine_every_s: float = 1.0):
        self.cuda = False
        if str(device).startswith("cuda"):
            import torch

            self.cuda = torch.cuda.is_available()
        self.harness_pids = harness_pids
        self.refresh_s = refresh_s
        self.machine_every_s = machine_every_s
        self._rates: dict[str, float] = {}  # the machine's latest rates, for steps between reads
        self._pids: list[int] = [os.getpid()]
        self._pids_at = -math.inf
        self._open: tuple | None = None
        self._machine: tuple | None = None  # the last read of the machine (_sample_machine)
        self._events: list[tuple[Any, Any]] = []
        self._reset()

    def _reset(self) -> None:
        self._steps = 0
        self._sums = dict.fromkeys(("wall", "cpu", "machine_wall", "other", "stall"), 0.0)
        self._known = {"other": True, "stall": True}

    def _pids_now(self) -> list[int]:
        now = time.monotonic()
        if self.harness_pids is not None and now - self._pids_at >= self.refresh_s:
            self._pids_at = now
            with contextlib.suppress(Exception):
                self._pids = sorted({os.getpid(), *(int(p) for p in self.harness_pids())})
        return self._pids

    def _sample_machine(self) -> tuple:
        busy, stall = _machine_busy_s(), _cpu_stall_us()
        ours = _process_cpu_s(self._pids_now()) if busy is not None else None
        return time.perf_counter(), busy, ours, stall

    def start(self) -> None:
        """Begin an interval (a step, or the rest of one after an eval)."""
        if self.cuda:
            import torch

            begin = torch.cuda.Event(enable_timing=True)
            begin.record()
            self._events.append((begin, None))
        if self._machine is None:
            self._machine = self._sample_machine()
        self._open = (time.perf_counter(), time.process_time())

    def stop(self) -> None:
        """End the interval begun by :meth:`start` (steps are counted by :meth:`step_done`).
        Does nothing without an open interval. The machine is read here when ``machine_every_s``
        has passed since its last read (reading ``/proc/stat`` costs the kernel more than the
        rest of the clock): its columns are rates over the time between two reads (what ran
        between intervals included), and a step between reads gets the latest rates."""
        if self._open is None:
            return
        w0, c0 = self._open
        self._sums["wall"] += time.perf_counter() - w0
        self._sums["cpu"] += time.process_time() - c0
        self._open = None
        if self.cuda and self._events and self._events[-1][1] is None:
            import torch

            finish = torch.cuda.Event(enable_timing=True)
            finish.record()
            self._events[-1] = (self._events[-1][0], finish)
        then = self._machine
        if then is not None and time.perf_counter() - then[0] < self.machine_every_s:
            return
        now = self._sample_machine()
        self._machine = now
        if then is None:
            return
        self._sums["machine_wall"] += now[0] - then[0]
        if None in (then[1], now[1], then[2], now[2]):
            self._known["other"] = False
        else:
            ours = sum(
                now[2][p] - then[2][p] for p in then[2].keys() & now[2].keys()
            )  # started/ended: not ours
            self._sums["other"] += max((now[1] - then[1]) - ours, 0.0)
        if then[3] is None or now[3] is None:
            self._known["stall"] = False
        else:
            self._sums["stall"] += (now[3] - then[3]) / 1e6

    def step_done(self) -> None:
        """Count one optimizer step in the intervals since the last :meth:`take`."""
        self._steps += 1

    def take(self) -> dict[str, float]:
        """Per-step means since the last call, keyed by :mod:`harness.layout`'s column names:
        ``time/step_s``, ``time/step_cpu_s`` (seconds per step), ``time/step_gpu_s`` (CUDA only),
        ``machine/other_cpus`` (mean cores busy with other work: busy CPU seconds of the machine
        minus the harness's, over wall seconds), ``machine/cpu_stall`` (stall seconds over wall
        seconds, 0 to 1), ``machine/load_1m``, ``machine/cpus``; then resets. Machine columns the
        system does not report are left out."""
        steps, s = max(self._steps, 1), self._sums
        out = {layout.STEP_WALL_S: s["wall"] / steps, layout.STEP_CPU_S: s["cpu"] / steps}
        if self.cuda and self._events:
            out[layout.STEP_GPU_S] = self._gpu_seconds() / steps
        if s["machine_wall"] > 0:
            self._rates = {}
            if self._known["other"]:
                self._rates[layout.OTHER_CPUS] = s["other"] / s["machine_wall"]
            if self._known["stall"]:
                self._rates[layout.CPU_STALL] = min(s["stall"] / s["machine_wall"], 1.0)
        out.update(self._rates)
        with contextlib.suppress(OSError, AttributeError):
            out[layout.LOAD_1M] = os.getloadavg()[0]
        out[layout.CPUS] = float(os.cpu_count() or 1)
        self._reset()
        return out

    def _gpu_seconds(self) -> float:
        """Seconds between the recorded CUDA event pairs (waits for the last one); an interval
        still open keeps its start event for the next :meth:`take`."""
        total, keep = 0.0, []
        for begin, finish in self._events:
            if finish is None:
                keep.append((begin, None))
                continue
            finish.synchronize()
            total += begin.elapsed_time(finish) / 1e3  # milliseconds
        self._events = keep
        return total
