"""Three GRPO loss variants TRL 1.16 does not have, as loss plugins (entry points of the project).

``gmpo``: Geometric-Mean Policy Optimization (Zhao et al. 2025, "Geometric-Mean Policy Optimization",
arXiv:2507.20673, Section 3, the GMPO objective). GRPO maximises the arithmetic mean over a
completion's tokens of the clipped ``r_t A``; GMPO maximises their geometric mean,
``A * (prod_t r~_t) ** (1 / |o|)``, which an outlier token ratio moves much less. The clip acts on
each token's log-ratio, pessimistically for the advantage's sign, in log space:

    l~_t = sgn(A) * min(sgn(A) * l_t, sgn(A) * clip(l_t, -eps_low, eps_high)),   l_t = log r_t
    loss_i = -A_i * exp(mean_{t in o_i} l~_t)                                     (B, 1)

with the paper's wider range ``(e^-0.4, e^0.4)`` (``gmpo_clip_low``/``gmpo_clip_high`` = 0.4) and
the grpo reduction (the mean over completions of the per-completion loss). The ratio is always the
token-level one, whatever ``importance_sampling_level`` says.

``kl_cov``: KL-Cov (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning
Language Models", arXiv:2505.22617, Section 4, KL-Cov). Entropy collapses through the tokens whose
log-probability and advantage covary most; KL-Cov adds a KL-like penalty ``|log r_t|`` to the top
``kl_cov_ratio`` fraction of tokens ranked by the centred product

    Cov_t = (A_t - mean(A)) * (log pi_t - mean(log pi))        (means over the micro-batch's tokens)
    loss_t = -r_t A_t + kl_cov_coef * |log r_t| * [t among the top max(1, floor(k N)) of Cov]

and leaves the rest as the unclipped policy gradient ``-r_t A_t``; the paper uses k = 2e-3 (2e-4
for its 32B model) and coefficient 1. Reduction: dapo (the token mean over the generation batch).
The ranking runs over one micro-batch on one process.

Neither reads ``epsilon``, ``epsilon_high``, ``delta`` or ``importance_sampling_level``. On-policy
(every ratio exactly 1) both are plain policy gradients: GMPO's ``d/dθ exp(mean_t l_t)`` at l = 0 is
``mean_t d l_t``, GRPO's per-completion token mean; KL-Cov's ``|log r|`` is 0 with zero gradient
(``sign(0) = 0``), leaving ``-r A`` under the dapo reduction, which is TRL's dapo. Their
hyperparameters are therefore declared off-policy only, and ``on_policy_equivalent`` says whose
gradient each equals. (With TRL's entropy mask, ``top_entropy_quantile`` < 1, GMPO's sequence ratio
still spreads its gradient over every token while grpo trains the masked ones only: the
equivalence is then checked per run and not claimed, :mod:`harness.losses.declarations`.)

``clip_cov``: Clip-Cov (the same paper, Section 4, Clip-Cov): PPO's clipped surrogate on the token
ratios (TRL's, :func:`harness.losses.compute.ppo_clipped_surrogate`), except that a random
``max(1, floor(k N))`` of the tokens whose centred covariance ``Cov_t`` (as above) lies strictly
between ``clip_cov_lb`` and ``clip_cov_ub``, among those the PPO clip leaves active, lose their
gradient (their loss is set to 0); the paper's defaults k = 2e-4, band (1, 5). Reduction: dapo. The
covariance does not involve the ratio, so unlike KL-Cov it acts on on-policy steps too; the random
choice uses torch's global generator (seeded by the run).

The three follow verl's registry semantics (``verl/trainer/ppo/core_algos.py``: ``geo_mean``,
``kl_cov``, ``clip_cov``); the code is this project's.
"""

from __future__ import annotations

import torch

from harness.losses import Hyperparameter, PluginError, register_loss
from harness.losses.compute import LossInputs, LossOutput, ppo_clipped_surrogate


def _sequence_advantages(inputs: LossInputs) -> torch.Tensor:
    """(B, 1) advantages: as given, or the masked token mean of (B, T) ones."""
    a = inputs.advantages
    if a.shape[1] == 1:
        return a
    return ((a * inputs.mask).sum(-1) / inputs.mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)


@register_loss(
    "gmpo",
    reduction="grpo",
    paper="GMPO, Zhao et al. 2025, arXiv:2507.20673, Section 3",
    hyperparameters=[
        Hyperparameter(
            "gmpo_clip_low", float, 0.4, "lower clip of the token log-ratio (nats)", minimum=0.0,
            off_policy_only=True,
        ),
        Hyperparameter(
            "gmpo_clip_high", float, 0.4, "upper clip of the token log-ratio (nats)", minimum=0.0,
            off_policy_only=True,
        ),
    ],
    reads=(),
    on_policy_equivalent="grpo",
)  # fmt: skip
def gmpo(inputs: LossInputs) -> LossOutput:
    """GMPO's per-completion loss ``-A * exp(mean_t l~_t)`` (B, 1) (module docstring).

    Metrics: ``gmpo/clip_ratio/high`` and ``gmpo/clip_ratio/low`` (fraction of tokens whose
    log-ratio left the clip range, for A > 0 and A < 0), ``gmpo/ratio_mean`` (the geometric-mean
    sequence ratio, mean over completions).
    """
    low, high = inputs.hparams["gmpo_clip_low"], inputs.hparams["gmpo_clip_high"]
    advantages = _sequence_advantages(inputs)
    sign = torch.sign(advantages)
    log_ratio = inputs.log_ratio
    clamped = torch.clamp(log_ratio, -low, high)
    pessimistic = sign * torch.min(sign * log_ratio, sign * clamped)
    mask = inputs.mask
    mean_log = (pessimistic * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)
    ratio = torch.exp(mean_log)
    clipped = (log_ratio != clamped).float()
    metrics = {
        "gmpo/clip_ratio/high": clipped * (advantages > 0),
        "gmpo/clip_ratio/low": clipped * (advantages < 0),
        "gmpo/ratio_mean": ratio.detach(),
    }
    return LossOutput(-advantages * ratio, metrics)


def _centred_covariance(inputs: LossInputs, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) ``(A_t - mean A) * (log pi_t - mean log pi)``, means over the micro-batch's unmasked
    tokens, no gradient; zeros when every token is masked."""
    a = inputs.advantages.expand_as(inputs.per_token_logps).detach()
    logp = inputs.per_token_logps.detach()
    if not mask.any():
        return torch.zeros_like(logp)
    return (a - a[mask].mean()) * (logp - logp[mask].mean())


@register_loss(
    "kl_cov",
    reduction="dapo",
    paper="KL-Cov, Cui et al. 2025, arXiv:2505.22617, Section 4",
    hyperparameters=[
        Hyperparameter(
            "kl_cov_ratio", float, 2e-3, "fraction of tokens penalised (top by covariance)",
            minimum=0.0, maximum=1.0, exclusive_minimum=True, off_policy_only=True,
        ),
        Hyperparameter(
            "kl_cov_coef", float, 1.0, "coefficient of the |log r| penalty", minimum=0.0,
            off_policy_only=True,
        ),
    ],
    reads=(),
    on_policy_equivalent="dapo",
)  # fmt: skip
def kl_cov(inputs: LossInputs) -> LossOutput:
    """KL-Cov's per-token loss (B, T) (module docstring).

    Metrics: ``kl_cov/selected_frac`` (fraction of tokens penalised), ``kl_cov/abs_log_ratio``
    (mean ``|log r|``), ``kl_cov/cov_mean`` (mean centred covariance over the micro-batch's tokens).
    """
    mask = inputs.mask.bool()
    advantages = inputs.advantages.expand_as(inputs.per_token_logps)
    log_ratio = inputs.log_ratio
    ratio = torch.exp(log_ratio)
    policy = -advantages * ratio
    selected = torch.zeros_like(policy)
    cov_mean = torch.zeros((), device=policy.device)
    n = int(mask.sum())
    if n > 0:
        cov = _centred_covariance(inputs, mask)
        cov_mean = cov[mask].mean()
        k = max(1, int(n * inputs.hparams["kl_cov_ratio"]))
        top = torch.topk(cov.masked_fill(~mask, float("-inf")).flatten(), k).indices
        selected.view(-1)[top] = 1.0
    loss = policy + selected * inputs.hparams["kl_cov_coef"] * log_ratio.abs()
    metrics = {
        "kl_cov/selected_frac": selected,
        "kl_cov/abs_log_ratio": log_ratio.abs().detach(),
        "kl_cov/cov_mean": cov_mean,
    }
    return LossOutput(loss, metrics)


@register_loss(
    "clip_cov",
    reduction="dapo",
    paper="Clip-Cov, Cui et al. 2025, arXiv:2505.22617, Section 4",
    hyperparameters=[
        Hyperparameter(
            "clip_cov_ratio", float, 2e-4, "fraction of tokens whose gradient is cut (drawn in the band)",
            minimum=0.0, maximum=1.0, exclusive_minimum=True,
        ),
        Hyperparameter("clip_cov_lb", float, 1.0, "lower bound of the covariance band (exclusive)"),
        Hyperparameter("clip_cov_ub", float, 5.0, "upper bound of the covariance band (exclusive)"),
    ],
    reads=("epsilon", "epsilon_high", "delta"),
)  # fmt: skip
def clip_cov(inputs: LossInputs) -> LossOutput:
    """Clip-Cov's per-token loss (B, T) (module docstring).

    Metrics: TRL's ``clip_ratio/...`` of the PPO clip, ``clip_cov/cut_frac`` (fraction of tokens
    whose gradient is cut), ``clip_cov/band_frac`` (fraction in the covariance band and not
    PPO-clipped), ``clip_cov/cov_mean`` (mean centred covariance over the micro-batch's tokens).

    Raises:
        PluginError: ``clip_cov_lb >= clip_cov_ub`` (an empty band).
    """
    low, high = inputs.hparams["clip_cov_lb"], inputs.hparams["clip_cov_ub"]
    if low >= high:
        raise PluginError(
            f"clip_cov: clip_cov_lb = {low} must be below clip_cov_ub = {high} (the band the cut tokens are drawn from)."
        )
    base = ppo_clipped_surrogate(inputs, inputs.log_ratio)
    mask = inputs.mask.bool()
    advantages = inputs.advantages.expand_as(inputs.per_token_logps)
    ratio = torch.exp(inputs.log_ratio)
    clipped = ratio if inputs.config.delta is None else torch.clamp(ratio, max=inputs.config.delta)
    clipped_active = (-advantages * torch.clamp(ratio, 1 - inputs.epsilon_low, 1 + inputs.epsilon_high)) > (
        -advantages * clipped
    )
    cov = _centred_covariance(inputs, mask)
    band = (cov > low) & (cov < high) & mask & ~clipped_active
    keep = torch.ones_like(base.loss)
    candidates = band.flatten().nonzero().squeeze(-1)
    if candidates.numel() > 0:
        k = max(1, int(int(mask.sum()) * inputs.hparams["clip_cov_ratio"]))
        chosen = candidates[torch.randperm(candidates.numel(), device=candidates.device)[:k]]
        keep.view(-1)[chosen] = 0.0
    metrics = {
        **base.metrics,
        "clip_cov/cut_frac": 1.0 - keep,
        "clip_cov/band_frac": band.float(),
        "clip_cov/cov_mean": cov[mask].mean() if mask.any() else torch.zeros(()),
    }
    return LossOutput(base.loss * keep, metrics)
