"""The plugin path of ``GRPOTrainer._compute_loss``: TRL's loss with a plugin's formula in the middle.

TRL 1.16 chooses its loss with ``if self.loss_type == ...`` inside ``_compute_loss`` and has no hook
there, so a plugin run goes through :func:`plugin_loss` instead, which keeps everything around the
formula as TRL has it (``trl/trainer/grpo_trainer.py``, ``GRPOTrainer._compute_loss``):

1. log-probs and entropies from the trainer's own ``_get_per_token_logps_and_entropies`` (the
   harness's w_seq capture sees them); TRL's ``get_high_entropy_mask`` (``top_entropy_quantile``)
   and ``get_off_policy_mask`` (``off_policy_mask_threshold``);
2. ``old_per_token_logps`` (the detached current log-probs when TRL skipped them), the log-ratio,
   the importance-sampling level's log weights, the KL term ``exp(ref - logp) - (ref - logp) - 1``
   times the ratio when ``use_bias_correction_kl``;
3. the plugin's per-token (B, T) or per-sequence (B, 1) loss, then the off-policy and entropy
   masks, vLLM's importance-sampling ratio (unless the plugin applies it itself), ``+ beta * KL``;
4. the reduction (TRL's five, :func:`reduce_loss`, with ``num_items_in_batch`` and gradient
   accumulation as TRL normalises them) or the plugin's own;
5. the entropy bonus (static or adaptive), the router aux loss, and the metrics under TRL's names
   (``kl``, ``entropy``, ``policy_loss``, ``entropy_coef``, ``aux_loss``) plus the plugin's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from harness.losses import LossPlugin
from harness.trl_boundary import grpo_config_defaults


class ReadOnlyConfig:
    """Read-only view of the trainer's ``GRPOConfig`` (attribute access; setting raises)."""

    def __init__(self, args: Any) -> None:
        object.__setattr__(self, "_args", args)

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_args"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"LossInputs.config is read-only (tried to set {name!r})")


@dataclass(frozen=True)
class LossInputs:
    """What a plugin function receives for one micro-batch (B completions padded to T tokens).

    Attributes:
        per_token_logps: (B, T) log pi_theta of the completion tokens (nats), with grad.
        old_per_token_logps: (B, T) log pi_old (no grad); equal to ``per_token_logps.detach()`` when
            TRL skipped computing them (on-policy: every ratio is exactly 1).
        ref_per_token_logps: (B, T) log pi_ref, or None when ``beta == 0`` (no reference model).
        advantages: (B, 1) per-sequence (TRL's GRPO advantages), or (B, T) from a subclass.
        mask: (B, T) completion mask (times the tool mask when present), 1 for tokens to train on;
            a row may be all zeros.
        log_ratio: (B, T) ``per_token_logps - old_per_token_logps``.
        log_importance_weights: the importance-sampling level's log weights: (B, T) ``log_ratio`` at
            ``importance_sampling_level: token``; (B, 1) the masked token mean of ``log_ratio``
            (GSPO's length-normalised sequence ratio, arXiv:2507.18071 eq. 7) at ``sequence``.
        importance_sampling_ratio: (B, T) or (B, 1) vLLM's truncated/masked IS ratio pi_old / pi_vllm,
            or None without vLLM's correction.
        entropies: (B, T) per-token entropies of pi_theta (nats), no grad.
        epsilon_low, epsilon_high: TRL's clip range (``epsilon``, ``epsilon_high or epsilon``).
        config: read-only ``GRPOConfig`` of the run (``config.beta``, ``config.delta``, ...).
        hparams: the plugin's hyperparameters (name -> value), read-only.
    """

    per_token_logps: torch.Tensor
    old_per_token_logps: torch.Tensor
    ref_per_token_logps: torch.Tensor | None
    advantages: torch.Tensor
    mask: torch.Tensor
    log_ratio: torch.Tensor
    log_importance_weights: torch.Tensor
    importance_sampling_ratio: torch.Tensor | None
    entropies: torch.Tensor
    epsilon_low: float
    epsilon_high: float
    config: Any
    hparams: Mapping[str, Any]


@dataclass(frozen=True)
class SequenceExtreme:
    """A metric reduced as TRL reduces ``clip_ratio/low_min`` and ``high_max``: per-sequence values
    (B,) (NaN for an empty row) gathered over processes, then their ``nanmin`` or ``nanmax``."""

    values: torch.Tensor
    how: str  # "min" or "max"


@dataclass(frozen=True)
class LossOutput:
    """What a plugin function returns.

    Attributes:
        loss: (B, T) per-token or (B, 1) per-sequence loss to minimise (a (B, 1) loss counts once
            per token of its row in the token reductions, as TRL's sequence-level losses do).
        metrics: name -> a (B, T) or (B, 1) tensor (logged as TRL's ``global_masked_mean``: the mean
            over unmasked tokens, or over sequences, across processes), a 0-d tensor or float (the
            mean over processes), or a :class:`SequenceExtreme`. Name them ``<loss name>/<what>``
            so that the report draws them (TRL's names are kept by the mirrors); a ``<what>``
            starting with ``ratio`` or ``clip_ratio`` is drawn over off-policy steps only.
    """

    loss: torch.Tensor
    metrics: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReductionContext:
    """What a plugin's own reduction receives besides the (B, T) loss and mask.

    Attributes:
        training: ``model.training`` (TRL divides by the accumulation steps only in training).
        gradient_accumulation_steps: ``current_gradient_accumulation_steps``.
        steps_per_generation: ``args.steps_per_generation``.
        num_items_in_batch: scalar tensor, completion tokens in the whole generation batch.
        num_processes: the world size.
        max_completion_length: ``args.max_completion_length``.
    """

    training: bool
    gradient_accumulation_steps: int
    steps_per_generation: int
    num_items_in_batch: torch.Tensor | None
    num_processes: int
    max_completion_length: int


def masked_seq_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) TRL's per-sequence mean of a (B, T) or (B, 1) tensor (NaN for an empty row)."""
    return x.squeeze(1) if x.shape[1] == 1 else (x * mask).sum(-1) / mask.sum(-1)


def clip_metrics(coef_1: torch.Tensor, advantages: torch.Tensor, inputs: LossInputs) -> dict[str, Any]:
    """TRL's clip metrics of the clipped-ratio losses (grpo, bnpo, dr_grpo, dapo, luspo) for a ratio
    ``coef_1`` ((B, T) or (B, 1)): fractions clipped low (ratio < 1 - epsilon_low, A < 0), high
    (ratio > 1 + epsilon_high, A > 0) and either, plus the min / max of the per-sequence fractions."""
    low = ((coef_1 < 1 - inputs.epsilon_low) & (advantages < 0)).float()
    high = ((coef_1 > 1 + inputs.epsilon_high) & (advantages > 0)).float()
    region = ((low > 0) | (high > 0)).float()
    return {
        "clip_ratio/low_mean": low,
        "clip_ratio/high_mean": high,
        "clip_ratio/region_mean": region,
        "clip_ratio/low_min": SequenceExtreme(masked_seq_mean(low, inputs.mask), "min"),
        "clip_ratio/high_max": SequenceExtreme(masked_seq_mean(high, inputs.mask), "max"),
    }


def ppo_clipped_surrogate(inputs: LossInputs, log_weights: torch.Tensor | None = None) -> LossOutput:
    """TRL's clipped surrogate, ``-min(r A, clip(r, 1 - epsilon_low, 1 + epsilon_high) A)`` with ``r``
    capped at ``delta`` when set (Schulman et al. 2017, arXiv:1707.06347 eq. 7; TRL's grpo, bnpo,
    dr_grpo, dapo and luspo branches), and TRL's clip metrics (:func:`clip_metrics`): a building
    block for plugins (``harness.losses.mirrors`` shows it gives TRL's loss).

    Args:
        inputs: the micro-batch.
        log_weights: log r, (B, T) or (B, 1); ``inputs.log_importance_weights`` (the run's
            ``importance_sampling_level``) when None.

    Returns:
        The loss, shaped like ``log_weights``, and the metrics ``clip_ratio/...``.
    """
    coef_1 = torch.exp(inputs.log_importance_weights if log_weights is None else log_weights)
    coef_2 = torch.clamp(coef_1, 1 - inputs.epsilon_low, 1 + inputs.epsilon_high)
    if inputs.config.delta is not None:
        coef_1 = torch.clamp(coef_1, max=inputs.config.delta)
    loss = -torch.min(coef_1 * inputs.advantages, coef_2 * inputs.advantages)
    return LossOutput(loss, clip_metrics(coef_1, inputs.advantages, inputs))


def _forward(trainer: Any, model: Any, inputs: Mapping[str, Any]):
    """TRL's forward of ``_compute_loss``: ``(per_token_logps, entropies, aux_loss, mask)``."""
    completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
    input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
    attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
    mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
    keys = (
        "pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes",
        "num_tiles", "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids",
    )  # fmt: skip
    logps, entropies, aux_loss = trainer._get_per_token_logps_and_entropies(
        model,
        input_ids,
        attention_mask,
        completion_ids.size(1),
        compute_entropy=True,
        compute_aux_loss=trainer.aux_loss_enabled,
        **{k: inputs.get(k) for k in keys},
    )
    return logps, entropies, aux_loss, mask


@dataclass
class _Batch:
    """The plugin's inputs and what the surrounding TRL code needs after the plugin ran."""

    inputs: LossInputs
    entropy_mask: torch.Tensor | None
    off_policy_mask: torch.Tensor | None
    per_token_kl: torch.Tensor | None


def _prepare(trainer: Any, inputs: Mapping[str, Any], forward, hparams: Mapping[str, Any]) -> _Batch:
    """Steps 1-2 of the module docstring: masks, ratios and the KL term, as TRL computes them."""
    logps, entropies, _, mask = forward
    entropy_mask = None
    if trainer.top_entropy_quantile < 1.0:
        entropy_mask = trainer.get_high_entropy_mask(entropies, mask, 1 - trainer.top_entropy_quantile)
    advantages = inputs["advantages"]
    advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    old = inputs.get("old_per_token_logps")
    old = logps.detach() if old is None else old
    off_policy_mask = None
    if trainer.off_policy_mask_threshold is not None:
        off_policy_mask = trainer.get_off_policy_mask(
            advantages=advantages,
            per_token_logps=logps,
            sampling_per_token_logps=inputs.get("sampling_per_token_logps", old),
            mask=mask,
            off_policy_threshold=trainer.off_policy_mask_threshold,
        )
    log_ratio = logps - old
    log_weights = level_log_weights(log_ratio, mask, trainer.importance_sampling_level)
    ref, per_token_kl = None, None
    if trainer.beta != 0.0:
        ref = inputs["ref_per_token_logps"]
        per_token_kl = torch.exp(ref - logps) - (ref - logps) - 1
        if trainer.args.use_bias_correction_kl:
            per_token_kl = per_token_kl * torch.exp(log_weights)
    batch = LossInputs(
        logps, old, ref, advantages, mask, log_ratio, log_weights, inputs.get("importance_sampling_ratio"),
        entropies, trainer.epsilon_low, trainer.epsilon_high, ReadOnlyConfig(trainer.args),
        MappingProxyType(dict(hparams)),
    )  # fmt: skip
    return _Batch(batch, entropy_mask, off_policy_mask, per_token_kl)


def check_output(plugin: LossPlugin, out: Any, batch: LossInputs) -> LossOutput:
    """``out`` as a :class:`LossOutput`, checked: a tensor of shape (B, T) or (B, 1) and a floating
    dtype; metrics of the documented kinds.

    Raises:
        PluginError: naming the plugin, what it returned and what it must return.
    """
    from harness.losses import PluginError

    out = LossOutput(out) if isinstance(out, torch.Tensor) else out
    b, t = batch.per_token_logps.shape
    where = f"loss {plugin.name!r} ({plugin.module}.{plugin.function.__qualname__})"
    if not isinstance(out, LossOutput) or not isinstance(out.loss, torch.Tensor):
        raise PluginError(f"{where} returned {type(out).__name__}; return a LossOutput or a (B, T) tensor.")
    if tuple(out.loss.shape) not in ((b, t), (b, 1)):
        raise PluginError(
            f"{where} returned a loss of shape {tuple(out.loss.shape)} for B={b}, T={t}; return (B, T) per "
            "token or (B, 1) per sequence, unreduced (the reduction is the plugin's `reduction`)."
        )
    if not out.loss.dtype.is_floating_point:
        raise PluginError(f"{where} returned a {out.loss.dtype} loss; return a floating tensor.")
    for name, value in out.metrics.items():
        ok = isinstance(value, float | int | SequenceExtreme) or (
            isinstance(value, torch.Tensor) and (value.dim() == 0 or tuple(value.shape) in ((b, t), (b, 1)))
        )
        if not ok:
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise PluginError(
                f"{where}: metric {name!r} is {shape}; give a (B, T) or (B, 1) tensor, a scalar or a "
                "SequenceExtreme."
            )
    return out


def _masked(trainer: Any, plugin: LossPlugin, loss: torch.Tensor, batch: _Batch, inputs) -> torch.Tensor:
    """Step 3 after the plugin: off-policy and entropy masks, vLLM's IS ratio, ``+ beta * KL``."""
    if batch.off_policy_mask is not None:
        loss = loss * batch.off_policy_mask
    if batch.entropy_mask is not None:
        loss = loss * batch.entropy_mask
    is_correction = trainer.use_vllm and trainer.vllm_importance_sampling_correction
    if is_correction and not plugin.uses_importance_sampling_ratio:
        loss = loss * inputs["importance_sampling_ratio"]
    if trainer.beta != 0.0:
        loss = loss + trainer.beta * batch.per_token_kl
    return loss


def _dapo_mean(loss: torch.Tensor, mask: torch.Tensor, ctx: ReductionContext) -> torch.Tensor:
    """Token sum over ``num_items_in_batch`` rescaled to one accumulation window (TRL's dapo)."""
    normalizer = ctx.num_items_in_batch.clamp(min=1.0) / ctx.num_processes
    if ctx.training:  # in eval, the batch is neither split across steps nor accumulated
        normalizer = normalizer * ctx.gradient_accumulation_steps / ctx.steps_per_generation
    return (loss * mask).sum() / normalizer


#: TRL's reductions of a (B, T) or (B, 1) loss over a (B, T) mask, before accumulation scaling.
_REDUCTIONS: dict[str, Callable[[torch.Tensor, torch.Tensor, ReductionContext], torch.Tensor]] = {
    "grpo": lambda loss, mask, ctx: ((loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean(),
    "bnpo": lambda loss, mask, ctx: (loss * mask).sum() / mask.sum().clamp(min=1.0),
    "dr_grpo": lambda loss, mask, ctx: (loss * mask).sum() / (loss.size(0) * ctx.max_completion_length),
    "luspo": lambda loss, mask, ctx: (loss * mask).sum(-1).mean(),
    "dapo": _dapo_mean,
}


def reduce_loss(name: str, loss: torch.Tensor, mask: torch.Tensor, ctx: ReductionContext):
    """TRL's reduction ``name`` of a per-token loss: ``(loss to back-propagate, policy loss)``.

    ``loss`` is (B, T) or (B, 1) (broadcast over the mask); in training the result is divided by the
    accumulation steps, except dapo's, whose normaliser already holds them (``num_items_in_batch /
    num_processes * GA / spg``).

    Raises:
        ValueError: ``name`` is not one of TRL's reductions.
    """
    if name not in _REDUCTIONS:
        raise ValueError(f"Unknown reduction: {name}")
    value = _REDUCTIONS[name](loss, mask, ctx)
    accumulation = ctx.gradient_accumulation_steps if ctx.training and name != "dapo" else 1.0
    return value / accumulation, value.detach()


def _reduce(trainer: Any, plugin: LossPlugin, loss: torch.Tensor, mask: torch.Tensor, inputs) -> tuple:
    ctx = ReductionContext(
        trainer.model.training, trainer.current_gradient_accumulation_steps, trainer.args.steps_per_generation,
        inputs.get("num_items_in_batch"), trainer.accelerator.num_processes, trainer.max_completion_length,
    )  # fmt: skip
    if isinstance(plugin.reduction, str):
        return reduce_loss(plugin.reduction, loss, mask, ctx)
    value = plugin.reduction(loss, mask, ctx)
    return value, value.detach()


def _entropy_bonus(trainer: Any, loss, policy_loss, forward, entropy_mask, mode: str) -> torch.Tensor:
    """TRL's entropy bonus ``loss - coef * H`` (H the mean entropy over the effective mask, scaled for
    accumulation), the adaptive coefficient's update at optimizer-step boundaries, and its metrics."""
    if not trainer._entropy_bonus_enabled:
        return loss
    _, entropies, _, mask = forward
    effective = mask if entropy_mask is None else mask * entropy_mask
    accumulation = trainer.current_gradient_accumulation_steps if mode == "train" else 1.0
    entropy_loss = (entropies * effective).sum() / effective.sum().clamp(min=1.0) / accumulation
    args = trainer.args
    coef = trainer.entropy_coef
    if trainer.use_adaptive_entropy and trainer._last_world_entropy > args.entropy_target:
        coef = 0.0
    loss = loss - coef * entropy_loss
    trainer._metrics[mode]["policy_loss"].append(trainer.accelerator.gather(policy_loss).nanmean().item())
    if trainer.use_adaptive_entropy and mode == "train":
        stats = torch.stack([(entropies * effective).sum(), effective.sum()]).detach()
        window = trainer._entropy_window_stats
        trainer._entropy_window_stats = stats if window is None else window + stats
        if trainer.accelerator.sync_gradients:
            totals = trainer.accelerator.reduce(trainer._entropy_window_stats, reduction="sum")
            world = (totals[0] / totals[1].clamp(min=1.0)).item()
            if world <= args.entropy_target:
                trainer.entropy_coef = min(
                    trainer.entropy_coef + args.entropy_coef_delta, args.entropy_coef_max
                )
            else:
                trainer.entropy_coef = max(
                    trainer.entropy_coef - args.entropy_coef_delta, args.entropy_coef_min
                )
            trainer._last_world_entropy = world
            trainer._entropy_window_stats = None
    if mode == "train" and trainer.accelerator.sync_gradients:
        trainer._metrics[mode]["entropy_coef"].append(trainer.entropy_coef)
    return loss


def _log_metrics(trainer: Any, mode: str, mask, batch: _Batch, entropies, metrics: Mapping[str, Any]) -> None:
    """TRL's ``kl`` and ``entropy``, then the plugin's metrics, into ``trainer._metrics[mode]``."""

    def global_masked_mean(x: torch.Tensor) -> float:
        if x.shape[1] == 1:
            local_sum, count = x.sum(), torch.tensor(float(x.shape[0]), device=x.device)
        else:
            local_sum, count = (x * mask).sum(), mask.sum().float()
        totals = trainer.accelerator.reduce(torch.stack([local_sum, count]), reduction="sum")
        return (totals[0] / totals[1].clamp(min=1.0)).item()

    log = trainer._metrics[mode]
    if trainer.beta != 0.0:
        log["kl"].append(global_masked_mean(batch.per_token_kl))
    log["entropy"].append(global_masked_mean(entropies))
    for name, value in metrics.items():
        log[name].append(_metric_value(trainer, value, global_masked_mean))


def _metric_value(trainer: Any, value: Any, global_masked_mean: Callable[[torch.Tensor], float]) -> float:
    from trl.trainer.utils import nanmax, nanmin

    if isinstance(value, SequenceExtreme):
        gathered = trainer.accelerator.gather(value.values.detach())
        return (nanmin(gathered) if value.how == "min" else nanmax(gathered)).item()
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return global_masked_mean(value.detach().float())
    scalar = torch.as_tensor(value, dtype=torch.float32)
    return trainer.accelerator.gather(scalar.detach().reshape(1)).nanmean().item()


def plugin_loss(
    trainer: Any, model: Any, inputs: Mapping[str, Any], plugin: LossPlugin, hparams
) -> torch.Tensor:
    """``GRPOTrainer._compute_loss`` for a plugin loss (the module docstring's steps 1-5).

    Args:
        trainer: the ``GRPOTrainer`` (or the stand-in, :class:`harness.losses.stand_in.LossProbe`).
        model: the policy (passed to ``_get_per_token_logps_and_entropies``).
        inputs: the micro-batch TRL's ``_prepare_inputs`` returned.
        plugin: the loss.
        hparams: its hyperparameter values.

    Returns:
        The scalar loss to back-propagate (normalised for gradient accumulation as TRL's reduction).

    Raises:
        PluginError: the plugin returned something of the wrong kind or shape.
    """
    forward = _forward(trainer, model, inputs)
    batch = _prepare(trainer, inputs, forward, hparams)
    out = check_output(plugin, plugin.function(batch.inputs), batch.inputs)
    per_token_loss = _masked(trainer, plugin, out.loss, batch, inputs)
    mask = batch.inputs.mask
    mode = "train" if trainer.model.training else "eval"
    loss, policy_loss = _reduce(trainer, plugin, per_token_loss, mask, inputs)
    loss = _entropy_bonus(trainer, loss, policy_loss, forward, batch.entropy_mask, mode)
    if trainer.aux_loss_enabled:
        normalizer = trainer.current_gradient_accumulation_steps if mode == "train" else 1.0
        loss = loss + trainer.router_aux_loss_coef * forward[2] / normalizer
        trainer._metrics[mode]["aux_loss"].append(
            trainer.accelerator.gather_for_metrics(forward[2]).mean().item()
        )
    _log_metrics(trainer, mode, mask, batch, forward[1], out.metrics)
    return loss


def level_log_weights(log_ratio: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """The importance-sampling level's log weights, as TRL's ``_compute_loss`` computes them: (B, T)
    ``log_ratio`` at ``token``; (B, 1) its masked mean per sequence at ``sequence`` (GSPO,
    arXiv:2507.18071 eq. 7; 0 for a row with no tokens).

    Raises:
        ValueError: another level.
    """
    if level == "token":
        return log_ratio
    if level == "sequence":
        return ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    raise ValueError(
        f"Unknown importance sampling level: {level}. Possible values are 'token' and 'sequence'."
    )


def synthetic_inputs(
    settings: Mapping[str, Any], hparams: Mapping[str, Any], level: str, **tensors: torch.Tensor | None
) -> LossInputs:
    """:class:`LossInputs` around drawn tensors (``per_token_logps`` with grad,
    ``old_per_token_logps``, ``ref_per_token_logps`` or None, ``advantages``, ``mask``,
    ``entropies``), with the log-ratio, the level's log weights, TRL's clip range and the read-only
    config from ``settings``: the batches that check a plugin before anything runs."""
    from types import SimpleNamespace

    logps, old, mask = tensors["per_token_logps"], tensors["old_per_token_logps"], tensors["mask"]
    log_ratio = logps - old
    epsilon, high = settings.get("epsilon", 0.2), settings.get("epsilon_high")
    return LossInputs(
        logps, old, tensors["ref_per_token_logps"], tensors["advantages"], mask, log_ratio,
        level_log_weights(log_ratio, mask, level), None, tensors["entropies"], epsilon,
        epsilon if high is None else high, ReadOnlyConfig(SimpleNamespace(**settings)),
        MappingProxyType(dict(hparams)),
    )  # fmt: skip


def _probe_inputs(settings: Mapping[str, Any], level: str, hparams: Mapping[str, Any]) -> LossInputs:
    """A seeded synthetic batch: B=3 completions, T=4 tokens, the last row empty, off-policy."""
    gen = torch.Generator().manual_seed(0)
    logps = (-3.0 * torch.rand(3, 4, generator=gen)).requires_grad_(True)
    old = logps.detach() + 0.1 * torch.randn(3, 4, generator=gen)
    return synthetic_inputs(
        settings, hparams, level, per_token_logps=logps, old_per_token_logps=old,
        ref_per_token_logps=logps.detach() + 0.05 if settings.get("beta") else None,
        advantages=torch.tensor([[1.0], [-0.5], [0.3]]),
        mask=torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.int32),
        entropies=2.0 * torch.rand(3, 4, generator=gen),
    )  # fmt: skip


def probe(plugin: LossPlugin, settings: Mapping[str, Any], level: str = "token") -> str | None:
    """Run ``plugin`` on a tiny synthetic batch (:func:`_probe_inputs`) with a run's trainer settings
    (``GRPOConfig`` values over TRL's defaults); the problem, with its fix, or None.

    Checked: the function does not raise, returns a floating (B, T) or (B, 1) tensor (or a
    :class:`LossOutput`), finite everywhere (row 2 has no tokens), that depends on
    ``per_token_logps``, with metrics of the documented kinds, and a callable reduction returns a
    scalar.
    """
    from harness import losses

    values = {**grpo_config_defaults(), **settings}
    batch = _probe_inputs(values, level, losses.plugin_settings(plugin, settings))
    where = f"loss {plugin.name!r} ({plugin.module}.{plugin.function.__qualname__})"
    try:
        out = check_output(plugin, plugin.function(batch), batch)
        bad = sorted({int(r) for r in (~torch.isfinite(out.loss.detach())).nonzero()[:, 0].tolist()})
        if bad:
            empty = (
                " (row 2 has no tokens: divide by mask.sum(...).clamp(min=1), as TRL does)"
                if 2 in bad
                else ""
            )
            return (
                f"{where} returned NaN or inf in row(s) {bad} of a synthetic batch of B=3, T=4{empty}; a "
                "non-finite value anywhere, masked or not, makes the reduced loss NaN. Fix the function."
            )
        if not out.loss.requires_grad:
            return (
                f"{where} returned a loss that does not depend on LossInputs.per_token_logps (no gradient), "
                "so nothing would train; build it from per_token_logps or log_importance_weights."
            )
        if not isinstance(plugin.reduction, str):
            ctx = ReductionContext(True, 1, 1, batch.mask.sum().float(), 1, 4)
            value = plugin.reduction(out.loss, batch.mask, ctx)
            if not isinstance(value, torch.Tensor) or value.dim() != 0:
                return (
                    f"{where}: its reduction returned {type(value).__name__}; return a 0-d tensor (the loss)."
                )
    except losses.PluginError as e:
        return f"{e} (found on a synthetic batch of B=3, T=4 before anything ran)"
    except Exception as e:
        return (
            f"{where} raised {type(e).__name__}: {e}{losses._where(e)} on a synthetic batch of B=3, T=4 "
            f"(importance_sampling_level {level}); fix the function."
        )
    return None
