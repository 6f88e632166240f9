"""Shapes, timing settings, presets and loss configurations of the micro-benchmarks: the one
definition of each.

This module imports neither torch nor TRL, so that the CLI can build its parser (whose help texts quote
the presets' values) without loading them; :mod:`harness.bench.common` re-exports the timing names.
The loss configurations timed (:data:`LOSS_VARIANTS`) are derived from the record of TRL's losses
(:func:`harness.trl_boundary.loss_names`): a loss TRL adds is timed, at TRL's defaults, without an
edit here.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from harness.trl_boundary import NAMED_LOSS_VARIANTS, loss_names

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


@dataclass(frozen=True)
class LossVariant:
    """A loss configuration of ``GRPOTrainer``.

    Attributes:
        name: table name (``"gspo"`` is TRL's ``grpo`` loss with sequence-level importance sampling).
        loss_type: TRL ``GRPOConfig.loss_type``.
        importance_sampling_level: TRL ``GRPOConfig.importance_sampling_level`` (``"token"`` or ``"sequence"``).
        config: other ``GRPOConfig`` fields, as recommended by the variant's paper.
        source: where the variant and its settings come from.
    """

    name: str
    loss_type: str
    importance_sampling_level: str = "token"
    config: dict[str, Any] = field(default_factory=dict)
    source: str = ""


#: What the benchmark sets beyond TRL's defaults for a built-in loss, as its paper recommends, and
#: where that comes from (``importance_sampling_level`` given here or by the named variant). A loss
#: of :func:`harness.trl_boundary.loss_names` that is not here is timed at TRL's defaults.
PAPER_SETTINGS: dict[str, tuple[dict[str, Any], str]] = {
    "grpo": ({}, "DeepSeekMath (arXiv:2402.03300); per-sequence token mean"),
    "dr_grpo": ({}, "Dr. GRPO (arXiv:2503.20783); token sum / (B * max_completion_length)"),
    "dapo": (
        {"epsilon_high": 0.28},
        "DAPO (arXiv:2503.14476); token sum / tokens in the generation batch; epsilon_high 0.28",
    ),
    "bnpo": ({}, "TRL loss_type='bnpo'; token sum / tokens in the local batch"),
    "cispo": (
        {"epsilon_high": 5.0},
        "MiniMax-M1 (arXiv:2506.13585); epsilon_max 5.0 as in ScaleRL (arXiv:2510.13786)",
    ),
    "sapo": ({}, "SAPO (arXiv:2511.20347); TRL default temperatures 1.0 / 1.05"),
    "luspo": (
        {"importance_sampling_level": "sequence"},
        "LUSPO (arXiv:2602.05261); sequence-level ratio, loss summed per sequence",
    ),
    "vespo": ({}, "VESPO (arXiv:2602.10693); TRL default k and lambda"),
    "gspo": (
        {"epsilon": 3e-4, "epsilon_high": 4e-4},
        "GSPO (arXiv:2507.18071, section 5.1); grpo loss, sequence-level ratio",
    ),
}


def loss_variants() -> dict[str, LossVariant]:
    """One :class:`LossVariant` per built-in loss of :func:`harness.trl_boundary.loss_names`, in its
    order: a named variant's ``loss_type`` and level from
    :data:`harness.trl_boundary.NAMED_LOSS_VARIANTS`, the paper's settings from
    :data:`PAPER_SETTINGS` (TRL's defaults for a loss not there)."""
    out = {}
    for name in loss_names():
        named = NAMED_LOSS_VARIANTS.get(name, {})
        config, source = PAPER_SETTINGS.get(name, ({}, f"TRL loss_type={name!r} at TRL's defaults"))
        config = dict(config)
        level = config.pop("importance_sampling_level", named.get("importance_sampling_level", "token"))
        out[name] = LossVariant(name, named.get("loss_type", name), level, config, source)
    return out


#: The loss configurations ``bench losses`` times, by name (:func:`loss_variants`).
LOSS_VARIANTS: dict[str, LossVariant] = loss_variants()
