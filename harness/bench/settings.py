"""Shapes, timing settings and presets of the micro-benchmarks: the one definition of each.

This module imports neither torch nor TRL, so that the CLI can build its parser (whose help texts quote
the presets' values) without loading them; :mod:`harness.bench.common` re-exports every name here.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

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
class TimingSettings:
    """How long and how often each timed callable runs (see :func:`harness.bench.common.time_side_by_side`).

    Attributes:
        min_run_time: seconds of timed calls per callable, at least (> 0).
        repeats: timed blocks per callable, at least (>= 1).
        block_time: target seconds per timed block (> 0).
        max_time: wall-clock seconds per callable and shape after which measuring stops early (once
            ``min(3, repeats)`` blocks each are in), so that a machine loaded by other processes cannot
            stretch a run; None for no limit.
        warmup: untimed calls per callable before timing, which also estimate the per-call time (at least
            2 are made).

    Raises:
        ValueError: on construction, if ``repeats`` < 1 or ``min_run_time`` or ``block_time`` is not > 0.
    """

    min_run_time: float
    repeats: int
    block_time: float = 0.01
    max_time: float | None = None
    warmup: int = 3

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")
        if self.min_run_time <= 0 or self.block_time <= 0:
            raise ValueError(
                f"min_run_time and block_time must be > 0 seconds, got {self.min_run_time}, {self.block_time}"
            )

    def overridden(self, **changes: float | int | None) -> TimingSettings:
        """A copy with the given fields replaced, skipping those given as None (options left unset).

        Raises:
            TypeError: if a name is not a field.
            ValueError: if the result is invalid (see the class).
        """
        return dataclasses.replace(
            self, **{name: value for name, value in changes.items() if value is not None}
        )


@dataclass(frozen=True)
class Preset:
    """Default sizes and measurement effort of a benchmark run.

    Attributes:
        name: ``"quick"`` or ``"full"``.
        sizes: the B x T shapes to time (B sequences, T completion tokens).
        timing: the preset's :class:`TimingSettings`.
    """

    name: str
    sizes: tuple[Shape, ...]
    timing: TimingSettings


PRESETS: dict[str, Preset] = {
    # Three shapes spanning the reported range; both sub-benchmarks finish in well under a minute on 2 cores.
    "quick": Preset(
        "quick",
        ((8, 128), (32, 512), (128, 1024)),
        TimingSettings(min_run_time=0.25, repeats=10, block_time=0.01, max_time=1.0),
    ),
    "full": Preset(
        "full", REPORTED_SIZES, TimingSettings(min_run_time=1.0, repeats=30, block_time=0.02, max_time=6.0)
    ),
}


def parse_sizes(text: str) -> list[Shape]:
    """Parse a comma-separated list of ``BxT`` shapes, e.g. ``"8x128,16x256"``.

    Args:
        text: shapes as ``<batch>x<tokens>`` separated by commas; spaces and an upper-case ``X`` are accepted.

    Returns:
        The shapes as ``(B, T)`` pairs, in the order given.

    Raises:
        ValueError: if an entry is not of the form ``<int>x<int>``, a dimension is not positive, or no
            shape is given.
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
