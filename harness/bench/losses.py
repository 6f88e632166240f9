"""Forward + backward time of TRL's whole GRPO loss, for every loss type, through :class:`LossProbe`.

Each timed call runs TRL's installed ``GRPOTrainer._compute_loss`` on a stand-in trainer (no model:
the policy log-probabilities are a leaf tensor), then ``loss.backward()`` into that leaf. The time
therefore covers the loss arithmetic, TRL's metric bookkeeping (which calls ``.item()`` and so
synchronises a GPU) and the backward pass of the loss, and none of the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.bench import common
from harness.bench.probe import LOSS_VARIANTS, LossBatch, LossProbe, make_loss_batch, make_loss_stand_in

BASELINE = "grpo"


def loss_step(probe: LossProbe, batch: LossBatch) -> Callable[[], None]:
    """A zero-argument callable doing one forward + backward of TRL's loss.

    The call computes ``GRPOTrainer._compute_loss(probe, None, batch.inputs)``, back-propagates into
    ``batch.per_token_logps``, then drops the gradient and the metrics TRL appended, so that repeated
    calls do the same work.
    """
    logps = batch.per_token_logps
    inputs = batch.inputs

    def step() -> None:
        loss = probe.loss(inputs)
        loss.backward()
        logps.grad = None
        probe.clear_metrics()

    return step


@dataclass
class LossRow:
    """Times of all variants at one B x T shape.

    Attributes:
        shape: (B, T).
        timings: variant -> per-call time of forward + backward (milliseconds).
        ratios: variant -> median over measurement cycles of ``time(variant) / time(baseline)``.
        baseline: ``grpo`` when it was timed, else the first variant.
    """

    shape: common.Shape
    timings: dict[str, common.Timing]
    ratios: dict[str, float]
    baseline: str

    def ratio(self, name: str) -> float:
        """Paired time ratio of ``name`` to the baseline (``grpo``)."""
        return self.ratios[name]


def time_losses(
    sizes: Sequence[common.Shape],
    *,
    variants: Sequence[str],
    device: torch.device,
    min_run_time: float,
    repeats: int,
    num_threads: int,
    block_time: float = 0.01,
    max_time: float | None = None,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> list[LossRow]:
    """Time forward + backward of each loss variant at each shape, variants interleaved per shape.

    All variants at one shape see the same inputs (``make_loss_batch(B, T, seed=seed + i)``; off-policy
    old log-probs, random lengths, advantages of both signs).

    Args:
        sizes: B x T shapes.
        variants: keys of :data:`harness.bench.probe.LOSS_VARIANTS`.
        device: where to run.
        min_run_time: seconds of timed calls per variant, at least.
        repeats: timed blocks per variant, at least.
        num_threads: intra-op threads.
        block_time: target seconds per timed block.
        max_time: wall-clock seconds per implementation and shape after which timing stops early (None: no limit).
        dtype: dtype of the log-probabilities.
        seed: input seed.

    Returns:
        One :class:`LossRow` per shape.

    Raises:
        KeyError: if a variant name is unknown.
    """
    unknown = [name for name in variants if name not in LOSS_VARIANTS]
    if unknown:
        raise KeyError(f"unknown loss variants {unknown}; known: {', '.join(LOSS_VARIANTS)}")
    rows = []
    for index, (batch_size, seq_len) in enumerate(sizes):
        batch = make_loss_batch(batch_size, seq_len, seed=seed + index, device=device, dtype=dtype)
        steps = {name: loss_step(make_loss_stand_in(name, batch), batch) for name in variants}
        baseline = BASELINE if BASELINE in steps else next(iter(steps))
        result = common.time_side_by_side(
            steps,
            device=device,
            min_run_time=min_run_time,
            repeats=repeats,
            num_threads=num_threads,
            block_time=block_time,
            max_time=max_time,
            baseline=baseline,
            label=f"loss fwd+bwd {batch_size}x{seq_len}",
        )
        rows.append(LossRow((batch_size, seq_len), result.timings, result.ratios, baseline))
    return rows


def render_losses(
    rows: Sequence[LossRow],
    info: dict[str, str],
    *,
    preset: str,
    min_run_time: float,
    repeats: int,
    dtype: torch.dtype,
) -> str:
    """Markdown report: header, then one row per loss variant and one column per shape, ``ms (ratio to grpo)``."""
    names = list(rows[0].timings) if rows else []
    baseline = rows[0].baseline if rows else BASELINE
    header = ["loss", "TRL loss_type", "IS level", *(common.format_shape(row.shape) for row in rows)]
    body = []
    for name in names:
        variant = LOSS_VARIANTS[name]
        cells = [f"{common.format_ms(row.timings[name].median_ms)} ({row.ratio(name):.2f}x)" for row in rows]
        body.append([name, variant.loss_type, variant.importance_sampling_level, *cells])
    lines = [
        f"# GRPO loss forward + backward per call on {info['machine']}",
        "",
        "TRL's own `GRPOTrainer._compute_loss` (driven through a stand-in trainer, no model) followed by "
        "`loss.backward()` into the per-token log-probabilities; cells are ms per call and, in parentheses, "
        f"the time ratio to `{baseline}` (median over measurement cycles of the paired ratio).",
        "",
        *common.header_lines(info, preset, min_run_time, repeats),
        f"- inputs: {str(dtype).removeprefix('torch.')} log-probs, off-policy old log-probs (N(0, 0.05) drift), "
        "random completion lengths, advantages of both signs, beta 0 (TRL default), no vLLM; seeded",
        "",
        common.markdown_table(header, body, ["l", "l", "l", *("r" for _ in rows)]),
        "",
        "Variants and their settings:",
        "",
        *(f"- {n}: {LOSS_VARIANTS[n].source}" for n in names),
        "",
    ]
    return "\n".join(lines)


def losses_csv_rows(
    rows: Sequence[LossRow], info: dict[str, str], dtype: torch.dtype
) -> list[dict[str, Any]]:
    """Flat CSV rows: one per (shape, variant), times in milliseconds, machine columns repeated."""
    out = []
    for row in rows:
        for name, timing in row.timings.items():
            variant = LOSS_VARIANTS[name]
            out.append(
                {
                    "B": row.shape[0],
                    "T": row.shape[1],
                    "variant": name,
                    "loss_type": variant.loss_type,
                    "importance_sampling_level": variant.importance_sampling_level,
                    "dtype": str(dtype).removeprefix("torch."),
                    "ms": round(timing.median_ms, 6),
                    "iqr_ms": round(timing.iqr_ms, 6),
                    "min_ms": round(timing.min_ms, 6),
                    "baseline": row.baseline,
                    "ratio_to_baseline": round(row.ratio(name), 4),
                    "calls": timing.calls,
                    **info,
                }
            )
    return out


def run_losses(
    *,
    device: torch.device,
    sizes: Sequence[common.Shape],
    min_run_time: float,
    repeats: int,
    num_threads: int,
    block_time: float = 0.01,
    max_time: float | None = None,
    variants: Sequence[str] | None = None,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    preset: str = "custom",
    out_dir: Path | None = None,
) -> str:
    """The ``bench losses`` sub-command: time every loss variant and write the tables.

    Args:
        device: where to run.
        sizes: B x T shapes.
        min_run_time: seconds of timed calls per variant, at least.
        repeats: timed blocks per variant, at least.
        num_threads: intra-op threads (recorded in the header).
        block_time: target seconds per timed block.
        max_time: wall-clock seconds per implementation and shape after which timing stops early (None: no limit).
        variants: variant names; all of :data:`LOSS_VARIANTS` when None.
        dtype: dtype of the log-probabilities.
        seed: input seed.
        preset: name recorded in the header.
        out_dir: folder for ``losses.md`` and ``losses.csv``; nothing is written when None.

    Returns:
        The markdown report.

    Raises:
        KeyError: if a variant name is unknown.
    """
    names = list(LOSS_VARIANTS) if variants is None else list(variants)
    rows = time_losses(
        sizes,
        variants=names,
        device=device,
        min_run_time=min_run_time,
        repeats=repeats,
        num_threads=num_threads,
        block_time=block_time,
        max_time=max_time,
        dtype=dtype,
        seed=seed,
    )
    info = common.machine_info(device, num_threads)
    report = render_losses(rows, info, preset=preset, min_run_time=min_run_time, repeats=repeats, dtype=dtype)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "losses.md").write_text(report + "\n")
        common.write_csv(out_dir / "losses.csv", losses_csv_rows(rows, info, dtype))
    return report
