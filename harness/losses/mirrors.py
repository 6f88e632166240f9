"""TRL's built-in losses re-implemented as plugins, to prove the plugin path faithful.

Each function is the formula of one branch of TRL 1.16's ``GRPOTrainer._compute_loss``; everything
around it (masks, KL, reductions, entropy bonus, metrics) is :mod:`harness.losses.compute`'s. With
the same settings a mirror gives TRL's loss, gradients and metrics (``tests/test_loss_plugins.py``):
that is what shows the plugin path keeps TRL's semantics. A grid can run them too:
``plugins: [harness.losses.mirrors]`` and ``loss_type: grpo_mirror``.

* ``<r>_mirror`` for r in grpo, bnpo, dr_grpo, dapo, luspo: PPO's clipped surrogate
  ``-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)`` (Schulman et al. 2017, arXiv:1707.06347 eq. 7;
  DeepSeekMath arXiv:2402.03300 eq. 3), ``r`` optionally capped at ``delta`` (two-sided clipping),
  reduced by r. GSPO (arXiv:2507.18071) is ``grpo_mirror`` at ``importance_sampling_level:
  sequence``, where ``r`` is the length-normalised sequence ratio.
* ``cispo_mirror``: ``-sg(min(r, eps_high)) A log pi`` (MiniMax-M1, arXiv:2506.13585 eq. 4), dapo
  reduction.
* ``vespo_mirror``: ``-phi(w) A log pi`` with TRL's gamma weight ``phi(w) = e^lambda w^k e^(-lambda w)``
  of the sequence ratio w (VESPO, arXiv:2602.10693), dapo reduction; it applies vLLM's IS ratio
  inside phi, as TRL's vespo does.
"""

from __future__ import annotations

import torch

from harness.losses import register_loss
from harness.losses.compute import LossInputs, LossOutput, ppo_clipped_surrogate


def clipped_surrogate(inputs: LossInputs) -> LossOutput:
    """PPO's clipped surrogate on the importance weights ((B, T) or (B, 1)), TRL's clip metrics."""
    return ppo_clipped_surrogate(inputs)


for _reduction in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):
    register_loss(
        f"{_reduction}_mirror",
        reduction=_reduction,
        paper=f"TRL's loss_type {_reduction} (PPO clipped surrogate, arXiv:1707.06347 eq. 7)",
        reads=("epsilon", "epsilon_high", "delta", "importance_sampling_level"),
    )(clipped_surrogate)


@register_loss(
    "cispo_mirror",
    reduction="dapo",
    paper="CISPO, MiniMax-M1 (arXiv:2506.13585) eq. 4",
    reads=("epsilon", "epsilon_high", "importance_sampling_level"),
    ratio_cap="epsilon_high",
)
def cispo(inputs: LossInputs) -> LossOutput:
    """``-sg(min(r, eps_high)) A log pi`` per token; metric ``cispo_clip_ratio`` (r > eps_high, A > 0)."""
    coef_1 = torch.exp(inputs.log_importance_weights)
    clamped = torch.clamp(coef_1, max=inputs.epsilon_high).detach()
    loss = -clamped * inputs.advantages * inputs.per_token_logps
    clipped = ((coef_1 > inputs.epsilon_high) & (inputs.advantages > 0)).float()
    return LossOutput(loss, {"cispo_clip_ratio": clipped})


@register_loss(
    "vespo_mirror",
    reduction="dapo",
    paper="VESPO (arXiv:2602.10693)",
    uses_importance_sampling_ratio=True,
    reads=("importance_sampling_level", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg"),
)
def vespo(inputs: LossInputs) -> LossOutput:
    """``-phi(w) A log pi`` with TRL's ``GRPOTrainer.get_gamma_weights`` (B, 1); metric
    ``vespo/phi_seq_mean``."""
    from trl import GRPOTrainer

    c = inputs.config
    phi = GRPOTrainer.get_gamma_weights(
        advantages=inputs.advantages,
        log_ratio_per_token=inputs.log_ratio,
        mask=inputs.mask,
        importance_sampling_ratio=inputs.importance_sampling_ratio,
        k_pos=c.vespo_k_pos,
        lambda_pos=c.vespo_lambda_pos,
        k_neg=c.vespo_k_neg,
        lambda_neg=c.vespo_lambda_neg,
    )
    loss = -phi * inputs.advantages * inputs.per_token_logps
    return LossOutput(loss, {"vespo/phi_seq_mean": phi})
