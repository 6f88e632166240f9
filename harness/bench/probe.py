"""The stand-in trainer of a loss configuration the benchmark times.

:func:`make_loss_stand_in` builds the stand-in trainer (:class:`harness.losses.stand_in.LossProbe`)
for one of :data:`harness.bench.settings.LOSS_VARIANTS` (TRL's loss types with the settings their
papers recommend, and the named variants such as GSPO), on which TRL's own ``_compute_loss`` runs
without a model. The benchmark (``bench losses``) and the reduction tests both go through it, so a
TRL upgrade that changes a loss shows up in both.
"""

from __future__ import annotations

from typing import Any

from harness.bench.settings import LOSS_VARIANTS, LossVariant
from harness.losses.stand_in import LossBatch, LossProbe


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
