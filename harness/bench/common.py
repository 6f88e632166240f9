"""Shared pieces of the micro-benchmarks: shapes, devices, machine description, timing, tables.

Timing uses :mod:`torch.utils.benchmark` (``Timer.timeit``; the timer synchronises CUDA around each
block when the callable runs on a GPU). The callables being compared are measured in short interleaved
blocks (A, B, B, A, ...), and their ratio is the median over cycles of the per-cycle ratio, so that load
from other processes on a shared machine hits all of them alike; the ratios are the quantities to read,
the absolute times less so.
"""

from __future__ import annotations

import csv
import os
import platform
import re
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils import benchmark

Shape = tuple[int, int]

# The B x T shapes of the per-call timings reported when VESPO was added to TRL (pull request #5199).
REPORTED_SIZES: tuple[Shape, ...] = (
    (8, 128),
    (16, 256),
    (32, 512),
    (64, 512),
    (128, 512),
    (32, 1024),
    (64, 1024),
    (128, 1024),
)


@dataclass(frozen=True)
class Preset:
    """Default sizes and measurement effort of a benchmark run.

    Attributes:
        name: ``"quick"`` or ``"full"``.
        sizes: the B x T shapes to time (B sequences, T completion tokens).
        min_run_time: seconds of timed calls per implementation, at least.
        repeats: timed blocks per implementation, at least.
        block_time: target seconds per timed block.
        max_time: wall-clock seconds per implementation and shape after which measuring stops early (once
            3 blocks each are in), so that a machine loaded by other processes cannot stretch a run.
    """

    name: str
    sizes: tuple[Shape, ...]
    min_run_time: float
    repeats: int
    block_time: float
    max_time: float


PRESETS: dict[str, Preset] = {
    # Three shapes spanning the reported range; both sub-benchmarks finish in well under a minute on 2 cores.
    "quick": Preset(
        "quick",
        ((8, 128), (32, 512), (128, 1024)),
        min_run_time=0.25,
        repeats=10,
        block_time=0.01,
        max_time=1.0,
    ),
    "full": Preset("full", REPORTED_SIZES, min_run_time=1.0, repeats=30, block_time=0.02, max_time=6.0),
}


def parse_sizes(text: str) -> list[Shape]:
    """Parse a comma-separated list of ``BxT`` shapes, e.g. ``"8x128,16x256"``.

    Args:
        text: shapes as ``<batch>x<tokens>`` separated by commas; spaces and an upper-case ``X`` are accepted.

    Returns:
        The shapes as ``(B, T)`` pairs, in the order given.

    Raises:
        ValueError: if an entry is not of the form ``<int>x<int>`` or a dimension is not positive.
    """
    shapes: list[Shape] = []
    for raw in text.split(","):
        item = raw.strip().lower()
        if not item:
            continue
        match = re.fullmatch(r"(\d+)\s*x\s*(\d+)", item)
        if match is None:
            raise ValueError(f"invalid size {raw.strip()!r}: expected <batch>x<tokens>, e.g. 8x128")
        batch, tokens = int(match.group(1)), int(match.group(2))
        if batch < 1 or tokens < 1:
            raise ValueError(f"invalid size {raw.strip()!r}: both dimensions must be >= 1")
        shapes.append((batch, tokens))
    if not shapes:
        raise ValueError("no sizes given")
    return shapes


def resolve_device(name: str) -> torch.device:
    """Turn ``"cpu"``, ``"cuda"`` or ``"auto"`` into a device.

    Args:
        name: ``"auto"`` picks the first CUDA device when one is available, the CPU otherwise.

    Returns:
        The device to run on.

    Raises:
        RuntimeError: if ``"cuda"`` is requested and no CUDA device is available.
        ValueError: if ``name`` is none of the three.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda was requested but torch sees no CUDA device")
        return torch.device("cuda")
    if name == "cpu":
        return torch.device("cpu")
    raise ValueError(f"unknown device {name!r}: expected cpu, cuda or auto")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def device_name(device: torch.device) -> str:
    """Human-readable name of the device: the GPU name for CUDA, the CPU model otherwise."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model()


def device_slug(device: torch.device) -> str:
    """Folder name for a device's results: ``"cpu"``, or the GPU name as a slug (e.g. ``"nvidia-h200"``)."""
    if device.type == "cuda":
        return _slug(torch.cuda.get_device_name(device))
    return "cpu"


def cpu_model() -> str:
    """The CPU model string (``/proc/cpuinfo`` on Linux, ``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def load_average() -> str:
    """The 1, 5 and 15 minute load averages as text, or ``""`` where the OS does not report them."""
    try:
        return ", ".join(f"{value:.2f}" for value in os.getloadavg())
    except (AttributeError, OSError):
        return ""


def machine_info(device: torch.device, num_threads: int) -> dict[str, str]:
    """Describe where a benchmark ran, for table headers and CSV columns.

    Args:
        device: the device the timed code ran on.
        num_threads: the intra-op thread count used while timing (``torch.get_num_threads()``).

    Returns:
        Keys ``device``, ``machine`` (GPU name or CPU model), ``cpu``, ``torch``, ``trl``, ``python``, ``threads``,
        ``cpus`` (logical CPUs of the host), ``load`` (load averages, may be empty).
    """
    import trl

    return {
        "device": device_slug(device),
        "machine": device_name(device),
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "trl": trl.__version__,
        "python": platform.python_version(),
        "threads": str(num_threads),
        "cpus": str(os.cpu_count() or ""),
        "load": load_average(),
    }


def header_lines(info: Mapping[str, str], preset: str, min_run_time: float, repeats: int) -> list[str]:
    """Markdown bullet lines describing the machine, versions and measurement settings (``min_run_time`` in s)."""
    lines = [f"- machine: {info['machine']}"]
    if info["machine"] != info["cpu"]:
        lines.append(f"- host CPU: {info['cpu']}")
    lines += [
        f"- torch {info['torch']}, trl {info['trl']}, Python {info['python']}",
        f"- intra-op threads: {info['threads']}",
        f"- timing: torch.utils.benchmark Timer.timeit in interleaved blocks, at least {repeats} blocks and "
        f"{min_run_time:g} s per implementation (preset {preset}); times are medians per call, ratios are "
        "medians over cycles of the per-cycle ratio",
    ]
    if info.get("load"):
        lines.append(
            f"- load average (1, 5, 15 min) at start: {info['load']} on {info.get('cpus', '?')} CPUs"
        )
        busy = float(info["load"].split(",")[0]) >= float(info.get("cpus") or "inf")
        if busy and info["device"] == "cpu" and int(info["threads"]) > 1:
            lines.append(
                "- warning: the host was fully loaded by other processes; a multi-threaded op then waits for a "
                "scheduler time slice (~10 ms) before its second thread runs, which can dominate these "
                "timings; compare with --threads 1"
            )
    return lines


@dataclass(frozen=True)
class Timing:
    """Per-call time of one callable.

    Attributes:
        median_ms: median over timed blocks of the mean per-call time in each block, in milliseconds.
        iqr_ms: interquartile range of the same per-block times, in milliseconds.
        min_ms: fastest block's mean per-call time, in milliseconds (least disturbed by other processes).
        blocks: number of timed blocks.
        calls: total number of timed calls.
    """

    median_ms: float
    iqr_ms: float
    min_ms: float
    blocks: int
    calls: int


@dataclass(frozen=True)
class SideBySide:
    """Result of :func:`time_side_by_side`.

    Attributes:
        timings: name -> :class:`Timing`.
        baseline: the name the ratios are relative to.
        ratios: name -> median over measurement cycles of ``time(name) / time(baseline)`` in the same cycle
            (1.0 for the baseline). Pairing blocks measured a few milliseconds apart cancels most of the
            load that other processes put on a shared machine.
        ratio_quartiles: name -> (25th, 75th) percentiles of the same per-cycle ratios.
    """

    timings: dict[str, Timing]
    baseline: str
    ratios: dict[str, float]
    ratio_quartiles: dict[str, tuple[float, float]]


@contextmanager
def set_threads(num_threads: int) -> Iterator[None]:
    """Run the body with ``torch.set_num_threads(num_threads)``, restoring the previous count after."""
    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def synchronize(device: torch.device) -> None:
    """Wait for queued work on ``device`` (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_side_by_side(
    fns: Mapping[str, Callable[[], object]],
    *,
    device: torch.device,
    min_run_time: float,
    repeats: int,
    num_threads: int,
    block_time: float = 0.01,
    max_time: float | None = None,
    warmup: int = 3,
    baseline: str | None = None,
    label: str = "",
) -> SideBySide:
    """Time several zero-argument callables the same way, in interleaved blocks.

    Each callable gets a ``torch.utils.benchmark.Timer`` (``num_threads`` intra-op threads; CUDA is
    synchronised around every block). Its ``warmup`` untimed calls also estimate its per-call time, from
    which a block size is chosen so that a block lasts about ``block_time`` seconds. Then measurement
    cycles run one ``Timer.timeit(block size)`` per callable (which itself warms up with two calls), the
    order reversing every cycle, until every callable has at least ``min_run_time`` seconds of timed
    calls and ``repeats`` blocks, or until ``max_time`` wall-clock seconds per callable have passed and
    every callable has at least ``min(3, repeats)`` blocks. Per callable the result is the median of its
    per-block per-call times; the ratios are medians over cycles of the per-cycle ratio to ``baseline``.
    The callables run under the caller's autograd mode (wrap the call in ``torch.no_grad()`` to time
    inference-only code).

    Args:
        fns: name -> callable taking no argument.
        device: where the callables run.
        min_run_time: seconds of timed calls per callable, at least.
        repeats: blocks per callable, at least (>= 1).
        num_threads: intra-op threads for the timers (``Timer(num_threads=...)``).
        block_time: target seconds per block.
        max_time: wall-clock budget in seconds per callable for the measurement cycles; None for no limit.
        warmup: untimed calls per callable before timing (at least 2).
        baseline: the name ratios are relative to; the first name when None.
        label: label stored in the measurements.

    Returns:
        A :class:`SideBySide`, names in the order of ``fns``.

    Raises:
        ValueError: if ``fns`` is empty, ``repeats`` < 1, ``min_run_time`` or ``block_time`` <= 0, or
            ``baseline`` is not a name of ``fns``.
    """
    names = list(fns)
    if not names:
        raise ValueError("nothing to time")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if min_run_time <= 0 or block_time <= 0:
        raise ValueError(f"min_run_time and block_time must be > 0 seconds, got {min_run_time}, {block_time}")
    baseline = names[0] if baseline is None else baseline
    if baseline not in fns:
        raise ValueError(f"baseline {baseline!r} is not among {names}")
    timers = {
        name: benchmark.Timer(
            stmt="fn()", globals={"fn": fn}, num_threads=num_threads, label=label, description=name
        )
        for name, fn in fns.items()
    }
    numbers = {}
    with set_threads(num_threads):
        for name, fn in fns.items():
            durations = []
            for _ in range(max(2, warmup)):
                synchronize(device)
                start = time.perf_counter()
                fn()
                synchronize(device)
                durations.append(time.perf_counter() - start)
            numbers[name] = max(1, round(block_time / max(min(durations[1:]), 1e-9)))

    blocks: dict[str, list[benchmark.Measurement]] = {name: [] for name in names}
    per_call: dict[str, list[float]] = {name: [] for name in names}
    total = dict.fromkeys(names, 0.0)
    cycle = 0
    deadline = None if max_time is None else time.perf_counter() + max_time * len(names)
    while cycle < repeats or min(total.values()) < min_run_time:
        if deadline is not None and cycle >= min(3, repeats) and time.perf_counter() > deadline:
            break
        for name in names if cycle % 2 == 0 else names[::-1]:
            measurement = timers[name].timeit(numbers[name])
            blocks[name].append(measurement)
            per_call[name].append(measurement.median)
            total[name] += measurement.median * numbers[name]
        cycle += 1

    timings: dict[str, Timing] = {}
    ratios: dict[str, float] = {}
    quartiles: dict[str, tuple[float, float]] = {}
    for name in names:
        (merged,) = benchmark.Measurement.merge(blocks[name])
        timings[name] = Timing(
            median_ms=merged.median * 1e3,
            iqr_ms=merged.iqr * 1e3,
            min_ms=min(merged.times) * 1e3,
            blocks=len(blocks[name]),
            calls=len(blocks[name]) * numbers[name],
        )
        paired = [a / b for a, b in zip(per_call[name], per_call[baseline], strict=True)]
        ratios[name] = statistics.median(paired)
        if len(paired) > 1:
            q1, _, q3 = statistics.quantiles(paired, n=4)
        else:
            q1 = q3 = paired[0]
        quartiles[name] = (q1, q3)
    return SideBySide(timings, baseline, ratios, quartiles)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]], align: Sequence[str]) -> str:
    """Render a markdown table; ``align`` holds ``"l"`` or ``"r"`` per column."""
    lines = ["| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join("---:" if a == "r" else "---" for a in align) + "|")
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Write dict rows (all with the same keys) to ``path`` as CSV, creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        writer.writerows(rows)


def format_shape(shape: Shape) -> str:
    """``(8, 128)`` -> ``"8 x 128"``."""
    return f"{shape[0]} x {shape[1]}"


def format_ms(value: float) -> str:
    """Milliseconds with three significant decimals for sub-10 ms values."""
    return f"{value:.3f}" if value < 10 else f"{value:.2f}"
