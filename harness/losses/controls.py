"""Control variants: losses whose outcome is known before they run, so that a grid can show its
statistics see an effect (a findings grid's F5 controls, :mod:`analysis.findings`).

``negated_advantages``: TRL's grpo, clipped surrogate and reduction alike
(:func:`harness.losses.compute.ppo_clipped_surrogate`), with every advantage's sign flipped. It
raises the probability of the completions that scored below their group's mean and lowers the
others', so the reward it trains on falls; a grid compares it with grpo and expects a lower reward.
The other control, a variant that cannot learn, needs no plugin: ``learning_rate: 0``.
"""

from __future__ import annotations

import dataclasses

from harness.losses import register_loss
from harness.losses.compute import LossInputs, LossOutput, ppo_clipped_surrogate


@register_loss(
    "negated_advantages",
    reduction="grpo",
    paper="a control (harmed by construction): GRPO, arXiv:2402.03300, with -A for A",
    reads=("epsilon", "epsilon_high", "delta", "importance_sampling_level"),
)
def negated_advantages(inputs: LossInputs) -> LossOutput:
    """(B, T) or (B, 1) loss ``-min(r (-A), clip(r, 1 - eps_low, 1 + eps_high) (-A))``: TRL's
    clipped surrogate (Schulman et al. 2017, arXiv:1707.06347 eq. 7) with the advantages negated;
    TRL's clip metrics."""
    return ppo_clipped_surrogate(dataclasses.replace(inputs, advantages=-inputs.advantages))
