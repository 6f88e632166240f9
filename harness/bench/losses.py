"""Forward + backward time of TRL's whole GRPO loss, for every loss type and the loss plugins of
:data:`PLUGIN_VARIANTS` (through :func:`harness.losses.compute.plugin_loss`), via :class:`LossProbe`.

Each timed call runs TRL's installed ``GRPOTrainer._compute_loss`` on a stand-in trainer (no model:
the policy log-probabilities are a leaf tensor), then ``loss.backward()`` into that leaf. The time
therefore covers the loss arithmetic, TRL's metric bookkeeping (which calls ``.item()`` and so
synchronises a GPU) and the backward pass of the loss, and none of the model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.bench import common
from harness.bench.probe import make_loss_stand_in
from harness.bench.settings import LOSS_VARIANTS, LossVariant
from harness.losses.stand_in import LossBatch, LossProbe, make_loss_batch

BASELINE = "grpo"

#: Loss plugins timed beside TRL's built-ins (``loss_type`` is the plugin's name): the three variants
#: TRL lacks, and the grpo mirror, whose time against grpo is the cost of the plugin path itself.
PLUGIN_VARIANTS: dict[str, LossVariant] = {
    v.name: v
    for v in (
        LossVariant("gmpo", "gmpo", source="plugin: GMPO (arXiv:2507.20673); log-ratio clip 0.4"),
        LossVariant(
            "kl_cov", "kl_cov", source="plugin: KL-Cov (arXiv:2505.22617); top 0.2% of tokens, coef 1"
        ),
        LossVariant(
            "clip_cov", "clip_cov", source="plugin: Clip-Cov (arXiv:2505.22617); 0.02% of the band (1, 5) cut"
        ),
        LossVariant(
            "grpo_mirror", "grpo_mirror", source="plugin: TRL's grpo through the plugin interface (mirror)"
        ),
    )
}
VARIANTS: dict[str, LossVariant] = {**LOSS_VARIANTS, **PLUGIN_VARIANTS}


def plugin_stand_in(variant: LossVariant, batch: LossBatch) -> tuple[LossProbe, Any]:
    """The stand-in of a plugin variant (``GRPOConfig`` as a plugin run gets it) and its loss call."""
    from harness.losses import REGISTRY
    from harness.losses import mirrors as _mirrors  # noqa: F401  (registers the mirrors)
    from harness.losses import variants as _variants  # noqa: F401  (registers gmpo, kl_cov, clip_cov)
    from harness.losses.compute import plugin_loss

    plugin = REGISTRY[variant.loss_type]
    probe = make_loss_stand_in(dataclasses.replace(variant, loss_type=plugin.trl_loss_type), batch)
    hparams = plugin.defaults()
    return probe, lambda inputs: plugin_loss(probe, None, inputs, plugin, hparams)


def loss_step(
    probe: LossProbe, batch: LossBatch, loss: Callable[[Any], Any] | None = None
) -> Callable[[], None]:
    """A zero-argument callable doing one forward + backward of TRL's loss.

    The call computes ``GRPOTrainer._compute_loss(probe, None, batch.inputs)``, back-propagates into
    ``batch.per_token_logps`` (the B x T leaf), then drops the gradient and the metrics TRL appended, so
    that repeated calls do the same work.

    Args:
        probe: the stand-in trainer of one loss variant, holding ``batch.per_token_logps``.
        batch: the B x T inputs of the call.

        loss: the loss call instead of TRL's (a plugin's, :func:`plugin_stand_in`).

    Returns:
        The callable; it raises whatever TRL's loss raises (e.g. ``AttributeError`` for a trainer attribute
        the stand-in lacks).
    """
    logps = batch.per_token_logps
    inputs = batch.inputs
    compute = probe.loss if loss is None else loss

    def step() -> None:
        value = compute(inputs)
        value.backward()
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
    timing: common.TimingSettings,
    num_threads: int,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> list[LossRow]:
    """Time forward + backward of each loss variant at each shape, variants interleaved per shape.

    All variants at one shape see the same inputs (``make_loss_batch(B, T, seed=seed + i)``; off-policy
    old log-probs, random lengths, advantages of both signs).

    Args:
        sizes: B x T shapes (B sequences, T completion tokens).
        variants: keys of :data:`VARIANTS` (TRL's built-ins and :data:`PLUGIN_VARIANTS`).
        device: where to run.
        timing: the measurement settings (see :func:`common.time_side_by_side`).
        num_threads: intra-op threads.
        dtype: dtype of the (B x T) log-probabilities.
        seed: input seed.

    Returns:
        One :class:`LossRow` per shape, times in milliseconds.

    Raises:
        KeyError: if a variant name is unknown.
    """
    unknown = [name for name in variants if name not in VARIANTS]
    if unknown:
        raise KeyError(f"unknown loss variants {unknown}; known: {', '.join(VARIANTS)}")
    rows = []
    for index, (batch_size, seq_len) in enumerate(sizes):
        batch = make_loss_batch(batch_size, seq_len, seed=seed + index, device=device, dtype=dtype)
        steps = {}
        for name in variants:
            if name in PLUGIN_VARIANTS:
                probe, call = plugin_stand_in(PLUGIN_VARIANTS[name], batch)
                steps[name] = loss_step(probe, batch, call)
            else:
                steps[name] = loss_step(make_loss_stand_in(name, batch), batch)
        baseline = BASELINE if BASELINE in steps else next(iter(steps))
        result = common.time_side_by_side(
            steps,
            device=device,
            timing=timing,
            num_threads=num_threads,
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
    timing: common.TimingSettings,
    dtype: torch.dtype,
) -> str:
    """Markdown report: header, then one row per loss variant and one column per B x T shape.

    Cells read ``<ms per call> (<ratio to the baseline>x)``, the baseline being ``grpo`` when it was timed.

    Args:
        rows: the timings, one :class:`LossRow` per shape.
        info: the machine description from :func:`common.machine_info`.
        preset: preset name recorded in the header.
        timing: the measurement settings recorded in the header.
        dtype: dtype of the timed log-probabilities.

    Returns:
        The report, lines joined by newlines.

    Raises:
        KeyError: if a timed variant is not in :data:`VARIANTS`.
    """
    names = list(rows[0].timings) if rows else []
    baseline = rows[0].baseline if rows else BASELINE
    header = ["loss", "TRL loss_type", "IS level", *(common.format_shape(row.shape) for row in rows)]
    body = []
    for name in names:
        variant = VARIANTS[name]
        cells = [f"{common.format_ms(row.timings[name].median_ms)} ({row.ratio(name):.2f}x)" for row in rows]
        body.append([name, variant.loss_type, variant.importance_sampling_level, *cells])
    lines = [
        f"# GRPO loss forward + backward per call on {info['machine']}",
        "",
        "TRL's own `GRPOTrainer._compute_loss` (driven through a stand-in trainer, no model) followed by "
        "`loss.backward()` into the per-token log-probabilities; cells are ms per call and, in parentheses, "
        f"the time ratio to `{baseline}` (median over measurement cycles of the paired ratio).",
        "",
        *common.header_lines(info, preset, timing),
        f"- inputs: {common.dtype_name(dtype)} log-probs, off-policy old log-probs (N(0, 0.05) drift), "
        "random completion lengths, advantages of both signs, beta 0 (TRL default), no vLLM; seeded",
        "",
        common.markdown_table(header, body, ["l", "l", "l", *("r" for _ in rows)]),
        "",
        "Variants and their settings:",
        "",
        *(f"- {n}: {VARIANTS[n].source}" for n in names),
        "",
    ]
    return "\n".join(lines)


def losses_csv_rows(
    rows: Sequence[LossRow], info: dict[str, str], dtype: torch.dtype
) -> list[dict[str, Any]]:
    """Flat CSV rows: one per (B x T shape, variant), times in milliseconds, machine columns repeated.

    Raises:
        KeyError: if a timed variant is not in :data:`VARIANTS`.
    """
    out = []
    for row in rows:
        for name, timing in row.timings.items():
            variant = VARIANTS[name]
            out.append(
                {
                    "B": row.shape[0],
                    "T": row.shape[1],
                    "variant": name,
                    "loss_type": variant.loss_type,
                    "importance_sampling_level": variant.importance_sampling_level,
                    "dtype": common.dtype_name(dtype),
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


def run_losses(run: common.BenchRun, variants: Sequence[str] | None = None) -> str:
    """The ``bench losses`` sub-command: time every loss variant and write ``losses.md`` and ``losses.csv``.

    Args:
        run: device, B x T shapes, timing settings, threads, dtype of the log-probabilities, seed, preset
            name and output folder (nothing is written when ``run.out_dir`` is None).
        variants: variant names; all of :data:`VARIANTS` when None.

    Returns:
        The markdown report.

    Raises:
        KeyError: if a variant name is unknown.
    """
    names = list(VARIANTS) if variants is None else list(variants)
    rows = time_losses(
        run.sizes,
        variants=names,
        device=run.device,
        timing=run.timing,
        num_threads=run.num_threads,
        dtype=run.dtype,
        seed=run.seed,
    )
    info = common.machine_info(run.device, run.num_threads)
    report = render_losses(rows, info, preset=run.preset, timing=run.timing, dtype=run.dtype)
    common.write_report(run.out_dir, "losses", report, losses_csv_rows(rows, info, run.dtype))
    return report
