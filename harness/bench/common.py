"""Shared pieces of the micro-benchmarks: shapes, devices, machine description, timing, tables.

Timing uses :mod:`torch.utils.benchmark` (``Timer.timeit``; the timer synchronises CUDA around each
block when the callable runs on a GPU). The callables being compared are measured in short interleaved
blocks (A, B, B, A, ...), and their ratio is the median over cycles of the per-cycle ratio, so that load
from other processes on a shared machine hits all of them alike; the ratios are the quantities to read,
the absolute times less so. The shapes, timing settings and presets are defined in the torch-free
:mod:`harness.bench.settings` and re-exported here.
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

from harness.bench.settings import PRESETS, REPORTED_SIZES, Preset, Shape, TimingSettings, parse_sizes

__all__ = [
    "PRESETS",
    "REPORTED_SIZES",
    "BenchRun",
    "Preset",
    "Shape",
    "SideBySide",
    "Timing",
    "TimingSettings",
    "cpu_model",
    "device_name",
    "device_slug",
    "dtype_name",
    "format_ms",
    "format_shape",
    "header_lines",
    "load_average",
    "machine_info",
    "markdown_table",
    "parse_sizes",
    "resolve_device",
    "set_threads",
    "synchronize",
    "time_side_by_side",
    "write_csv",
    "write_report",
]


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


def header_lines(info: Mapping[str, str], preset: str, timing: TimingSettings) -> list[str]:
    """Markdown bullet lines describing the machine, versions and measurement settings.

    Args:
        info: the machine description from :func:`machine_info`.
        preset: preset name recorded in the timing line.
        timing: the measurement settings (``repeats`` blocks, ``min_run_time`` in s).

    Returns:
        The lines, without trailing newlines.
    """
    lines = [f"- machine: {info['machine']}"]
    if info["machine"] != info["cpu"]:
        lines.append(f"- host CPU: {info['cpu']}")
    lines += [
        f"- torch {info['torch']}, trl {info['trl']}, Python {info['python']}",
        f"- intra-op threads: {info['threads']}",
        f"- timing: torch.utils.benchmark Timer.timeit in interleaved blocks, at least {timing.repeats} blocks "
        f"and {timing.min_run_time:g} s per implementation (preset {preset}); times are medians per call, "
        "ratios are medians over cycles of the per-cycle ratio",
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
class BenchRun:
    """What one ``bench`` sub-command runs: where, at which shapes, how it is timed, where tables go.

    Attributes:
        device: where the timed code runs.
        sizes: the B x T shapes to time (B sequences, T completion tokens).
        timing: the measurement settings.
        num_threads: intra-op threads used while timing (recorded in the header).
        dtype: dtype of the timed token tensors (B x T).
        seed: input seed; shape i uses ``seed + i``.
        preset: name recorded in the header.
        out_dir: folder for the ``.md`` and ``.csv`` tables; nothing is written when None.
    """

    device: torch.device
    sizes: Sequence[Shape]
    timing: TimingSettings
    num_threads: int
    dtype: torch.dtype = torch.float32
    seed: int = 0
    preset: str = "custom"
    out_dir: Path | None = None


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
    timing: TimingSettings,
    num_threads: int,
    baseline: str | None = None,
    label: str = "",
) -> SideBySide:
    """Time several zero-argument callables the same way, in interleaved blocks.

    Each callable gets a ``torch.utils.benchmark.Timer`` (``num_threads`` intra-op threads; CUDA is
    synchronised around every block). Its ``timing.warmup`` untimed calls also estimate its per-call
    time, from which a block size is chosen so that a block lasts about ``timing.block_time`` seconds.
    Then measurement cycles run one ``Timer.timeit(block size)`` per callable (which itself warms up with
    two calls), the order reversing every cycle, until every callable has at least
    ``timing.min_run_time`` seconds of timed calls and ``timing.repeats`` blocks, or until
    ``timing.max_time`` wall-clock seconds per callable have passed and every callable has at least
    ``min(3, repeats)`` blocks. Per callable the result is the median of its per-block per-call times;
    the ratios are medians over cycles of the per-cycle ratio to ``baseline``. The callables run under
    the caller's autograd mode (wrap the call in ``torch.no_grad()`` to time inference-only code).

    Args:
        fns: name -> callable taking no argument.
        device: where the callables run.
        timing: the measurement settings (seconds and block counts, see :class:`TimingSettings`).
        num_threads: intra-op threads for the timers (``Timer(num_threads=...)``).
        baseline: the name ratios are relative to; the first name when None.
        label: label stored in the measurements.

    Returns:
        A :class:`SideBySide`, names in the order of ``fns``; times in milliseconds.

    Raises:
        ValueError: if ``fns`` is empty or ``baseline`` is not a name of ``fns``.
    """
    names = list(fns)
    if not names:
        raise ValueError("nothing to time")
    baseline = names[0] if baseline is None else baseline
    if baseline not in fns:
        raise ValueError(f"baseline {baseline!r} is not among {names}")
    timers = {
        name: benchmark.Timer(
            stmt="fn()", globals={"fn": fn}, num_threads=num_threads, label=label, description=name
        )
        for name, fn in fns.items()
    }
    with set_threads(num_threads):
        numbers = {name: _block_size(fn, device, timing) for name, fn in fns.items()}
    blocks = _measure_cycles(timers, numbers, timing)
    return _summarise(blocks, numbers, baseline)


def _block_size(fn: Callable[[], object], device: torch.device, timing: TimingSettings) -> int:
    """Calls per block so that a block lasts about ``timing.block_time`` s, from untimed warm-up calls."""
    durations = []
    for _ in range(max(2, timing.warmup)):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        durations.append(time.perf_counter() - start)
    return max(1, round(timing.block_time / max(min(durations[1:]), 1e-9)))


def _measure_cycles(
    timers: Mapping[str, benchmark.Timer], numbers: Mapping[str, int], timing: TimingSettings
) -> dict[str, list[benchmark.Measurement]]:
    """Interleaved measurement cycles (order reversed every other cycle) until the settings are met."""
    names = list(timers)
    blocks: dict[str, list[benchmark.Measurement]] = {name: [] for name in names}
    total = dict.fromkeys(names, 0.0)
    cycle = 0
    deadline = None if timing.max_time is None else time.perf_counter() + timing.max_time * len(names)
    while cycle < timing.repeats or min(total.values()) < timing.min_run_time:
        if deadline is not None and cycle >= min(3, timing.repeats) and time.perf_counter() > deadline:
            break
        for name in names if cycle % 2 == 0 else names[::-1]:
            measurement = timers[name].timeit(numbers[name])
            blocks[name].append(measurement)
            total[name] += measurement.median * numbers[name]
        cycle += 1
    return blocks


def _summarise(
    blocks: Mapping[str, list[benchmark.Measurement]], numbers: Mapping[str, int], baseline: str
) -> SideBySide:
    """Per-callable :class:`Timing` and per-cycle ratios to ``baseline`` from the measured blocks."""
    timings: dict[str, Timing] = {}
    ratios: dict[str, float] = {}
    quartiles: dict[str, tuple[float, float]] = {}
    base_per_call = [m.median for m in blocks[baseline]]
    for name, measured in blocks.items():
        (merged,) = benchmark.Measurement.merge(measured)
        timings[name] = Timing(
            median_ms=merged.median * 1e3,
            iqr_ms=merged.iqr * 1e3,
            min_ms=min(merged.times) * 1e3,
            blocks=len(measured),
            calls=len(measured) * numbers[name],
        )
        paired = [m.median / b for m, b in zip(measured, base_per_call, strict=True)]
        ratios[name] = statistics.median(paired)
        if len(paired) > 1:
            q1, _, q3 = statistics.quantiles(paired, n=4)
        else:
            q1 = q3 = paired[0]
        quartiles[name] = (q1, q3)
    return SideBySide(timings, baseline, ratios, quartiles)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]], align: Sequence[str]) -> str:
    """Render text cells as a pipe (GitHub) markdown table, through pandas' ``DataFrame.to_markdown``.

    Cells are printed as given (no number parsing, so ``"6.570"`` keeps its digits).

    Args:
        header: column names.
        rows: rows of cells, each as long as ``header``.
        align: ``"l"`` or ``"r"`` per column.

    Returns:
        The table, lines joined by newlines, no trailing newline.

    Raises:
        ValueError: if a row's length differs from the header's.
        ImportError: if ``tabulate`` (which pandas uses for markdown) is not installed.
    """
    import pandas as pd

    frame = pd.DataFrame(list(rows), columns=list(header), dtype=object)
    colalign = ["right" if a == "r" else "left" for a in align]
    return frame.to_markdown(index=False, tablefmt="pipe", colalign=colalign, disable_numparse=True)


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Write dict rows (all with the same keys) to ``path`` as CSV, creating the folder.

    Raises:
        ValueError: if a row has a key the first row lacks.
        OSError: if the file cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        writer.writerows(rows)


def write_report(out_dir: Path | None, stem: str, report: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """Write ``<out_dir>/<stem>.md`` (the markdown report) and ``<out_dir>/<stem>.csv`` (the rows).

    Nothing is written when ``out_dir`` is None.

    Raises:
        OSError: if a file cannot be written.
    """
    if out_dir is None:
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.md").write_text(report + "\n")
    write_csv(out_dir / f"{stem}.csv", rows)


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``."""
    return str(dtype).removeprefix("torch.")


def format_shape(shape: Shape) -> str:
    """``(8, 128)`` -> ``"8 x 128"``."""
    return f"{shape[0]} x {shape[1]}"


def format_ms(value: float) -> str:
    """Milliseconds with three significant decimals for sub-10 ms values."""
    return f"{value:.3f}" if value < 10 else f"{value:.2f}"
