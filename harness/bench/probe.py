"""The loss configurations the benchmark times: TRL's loss types and named variants of them.

:data:`LOSS_VARIANTS` holds one :class:`LossVariant` per configuration of ``GRPOTrainer``'s loss
(TRL's ``loss_type`` with the settings its paper recommends, and GSPO, grpo at sequence level);
:func:`make_loss_stand_in` builds the stand-in trainer (:class:`harness.losses.stand_in.LossProbe`)
for one of them, on which TRL's own ``_compute_loss`` runs without a model. The benchmark
(``bench losses``) and the reduction tests both go through it, so a TRL upgrade that changes a loss
shows up in both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.losses.stand_in import LossBatch, LossProbe


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


LOSS_VARIANTS: dict[str, LossVariant] = {
    v.name: v
    for v in (
        LossVariant("grpo", "grpo", source="DeepSeekMath (arXiv:2402.03300); per-sequence token mean"),
        LossVariant(
            "dr_grpo",
            "dr_grpo",
            source="Dr. GRPO (arXiv:2503.20783); token sum / (B * max_completion_length)",
        ),
        LossVariant(
            "dapo",
            "dapo",
            config={"epsilon_high": 0.28},
            source="DAPO (arXiv:2503.14476); token sum / tokens in the generation batch; epsilon_high 0.28",
        ),
        LossVariant("bnpo", "bnpo", source="TRL loss_type='bnpo'; token sum / tokens in the local batch"),
        LossVariant(
            "cispo",
            "cispo",
            config={"epsilon_high": 5.0},
            source="MiniMax-M1 (arXiv:2506.13585); epsilon_max 5.0 as in ScaleRL (arXiv:2510.13786)",
        ),
        LossVariant("sapo", "sapo", source="SAPO (arXiv:2511.20347); TRL default temperatures 1.0 / 1.05"),
        LossVariant(
            "luspo",
            "luspo",
            importance_sampling_level="sequence",
            source="LUSPO (arXiv:2602.05261); sequence-level ratio, loss summed per sequence",
        ),
        LossVariant("vespo", "vespo", source="VESPO (arXiv:2602.10693); TRL default k and lambda"),
        LossVariant(
            "gspo",
            "grpo",
            importance_sampling_level="sequence",
            config={"epsilon": 3e-4, "epsilon_high": 4e-4},
            source="GSPO (arXiv:2507.18071, section 5.1); grpo loss, sequence-level ratio",
        ),
    )
}


def make_loss_stand_in(variant: str | LossVariant, batch: LossBatch, **overrides: Any) -> LossProbe:
    """A :class:`LossProbe` for a named variant of :data:`LOSS_VARIANTS` (or a given :class:`LossVariant`).

    Args:
        variant: a key of :data:`LOSS_VARIANTS`, or a :class:`LossVariant`.
        batch: the log-probabilities and entropies the probe returns.
        **overrides: :class:`LossProbe` keyword arguments or ``GRPOConfig`` fields, applied over the variant's.

    Returns:
        The probe; call ``probe.loss(batch.inputs)``.

    Raises:
        KeyError: if ``variant`` is an unknown name.
    """
    if isinstance(variant, str):
        if variant not in LOSS_VARIANTS:
            raise KeyError(f"unknown loss variant {variant!r}; known: {', '.join(LOSS_VARIANTS)}")
        variant = LOSS_VARIANTS[variant]
    settings: dict[str, Any] = {
        "importance_sampling_level": variant.importance_sampling_level,
        **variant.config,
    }
    settings.update(overrides)
    return LossProbe(variant.loss_type, batch.per_token_logps, batch.entropies, **settings)
