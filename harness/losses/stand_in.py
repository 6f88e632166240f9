"""A stand-in for ``GRPOTrainer`` that lets TRL's own ``_compute_loss`` run without a model.

``GRPOTrainer._compute_loss(self, model, inputs)`` reads a handful of trainer attributes and calls
``self._get_per_token_logps_and_entropies(...)`` for the policy log-probabilities. :class:`LossProbe`
carries exactly those attributes (values mirrored from ``GRPOTrainer.__init__`` and TRL's
``GRPOConfig`` defaults) and returns given log-probabilities instead of running a model, so that::

    GRPOTrainer._compute_loss(probe, None, inputs)

executes TRL's installed loss code, unmodified, on synthetic tensors (:func:`make_loss_batch`). A
plugin's ``on_policy_equivalent`` is checked on it (:mod:`harness.losses.declarations`), and the
benchmark (``bench losses``, :mod:`harness.bench.probe`'s variants) and the reduction tests go
through it, so a TRL upgrade that changes a loss shows up in all three. An attribute that a future
TRL reads and the probe lacks raises an ``AttributeError`` naming it. Imports torch and TRL.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
from trl import GRPOConfig, GRPOTrainer


def trl_config_defaults() -> dict[str, Any]:
    """Default value of every ``GRPOConfig`` field, read from the dataclass without instantiating it.

    (Instantiating ``GRPOConfig`` runs ``TrainingArguments.__post_init__``, which inspects the hardware.)
    Fields with a ``default_factory`` get a fresh value; fields without a default are left out.
    """
    defaults: dict[str, Any] = {}
    for f in dataclasses.fields(GRPOConfig):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = f.default_factory()
    return defaults


class _SingleProcessAccelerator:
    """The parts of ``accelerate.Accelerator`` that ``_compute_loss`` uses, for one process."""

    num_processes = 1
    process_index = 0
    is_main_process = True
    sync_gradients = True

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Identity: one process holds everything."""
        return tensor

    def gather_for_metrics(self, tensor: torch.Tensor) -> torch.Tensor:
        """Identity: one process holds everything."""
        return tensor

    def reduce(self, tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        """Identity: a sum or mean over one process is the value itself."""
        return tensor

    def pad_across_processes(self, tensor: torch.Tensor, dim: int = 0, pad_index: float = 0) -> torch.Tensor:
        """Identity: nothing to pad to with one process."""
        return tensor


class LossProbe:
    """Minimal object on which ``GRPOTrainer._compute_loss`` runs, with given log-probabilities and no model.

    Build one per loss configuration, then call :meth:`loss` (or ``GRPOTrainer._compute_loss(probe, None,
    inputs)``) as often as needed. The probe returns the same ``per_token_logps`` tensor on every call;
    make it a leaf with ``requires_grad=True`` to get gradients from ``loss.backward()``.

    Attribute values follow ``GRPOTrainer.__init__``: ``epsilon_low = args.epsilon``, ``epsilon_high =
    args.epsilon_high or args.epsilon``, ``_entropy_bonus_enabled = entropy_coef != 0 or
    use_adaptive_entropy``; ``args`` holds the ``GRPOConfig`` defaults plus the overrides given here, with
    ``steps_per_generation`` defaulting to ``gradient_accumulation_steps`` as ``GRPOConfig.__post_init__``
    sets it. vLLM is off (``use_vllm=False``) and there is no auxiliary (router) loss.
    """

    get_gamma_weights = staticmethod(GRPOTrainer.get_gamma_weights)
    get_off_policy_mask = staticmethod(GRPOTrainer.get_off_policy_mask)
    get_high_entropy_mask = GRPOTrainer.get_high_entropy_mask

    def __init__(
        self,
        loss_type: str,
        per_token_logps: torch.Tensor,
        entropies: torch.Tensor | None = None,
        *,
        importance_sampling_level: str = "token",
        max_completion_length: int | None = None,
        gradient_accumulation_steps: int = 1,
        training: bool = True,
        **config: Any,
    ) -> None:
        """Set up the attributes ``_compute_loss`` reads.

        Args:
            loss_type: TRL ``loss_type`` (grpo, dr_grpo, dapo, bnpo, cispo, sapo, luspo, vespo).
            per_token_logps: (B x T) policy log-probabilities of the completion tokens returned to TRL.
            entropies: (B x T) per-token entropies (nats); zeros when None.
            importance_sampling_level: ``"token"`` or ``"sequence"`` (GSPO, LUSPO).
            max_completion_length: TRL ``max_completion_length`` (dr_grpo's constant); T when None.
            gradient_accumulation_steps: value of ``current_gradient_accumulation_steps`` (the train-mode
                normaliser of grpo, bnpo, dr_grpo, luspo, sapo).
            training: ``model.training``; False selects TRL's eval path (no accumulation normaliser).
            **config: any other ``GRPOConfig`` field, e.g. ``beta``, ``epsilon``, ``epsilon_high``, ``delta``,
                ``steps_per_generation``, ``top_entropy_quantile``, ``off_policy_mask_threshold``, ``entropy_coef``.

        Raises:
            ValueError: if ``per_token_logps`` is not 2-D, ``entropies`` has another shape, or a key of
                ``config`` is not a ``GRPOConfig`` field.
        """
        if per_token_logps.dim() != 2:
            raise ValueError(f"per_token_logps must be B x T, got shape {tuple(per_token_logps.shape)}")
        if entropies is None:
            entropies = torch.zeros_like(per_token_logps, requires_grad=False)
        if entropies.shape != per_token_logps.shape:
            raise ValueError(
                f"entropies shape {tuple(entropies.shape)} differs from per_token_logps {tuple(per_token_logps.shape)}"
            )
        defaults = trl_config_defaults()
        unknown = sorted(set(config) - set(defaults))
        if unknown:
            raise ValueError(f"not GRPOConfig fields: {', '.join(unknown)}")
        settings = {
            **defaults,
            **config,
            "loss_type": loss_type,
            "importance_sampling_level": importance_sampling_level,
            "gradient_accumulation_steps": gradient_accumulation_steps,
            "max_completion_length": max_completion_length or per_token_logps.shape[1],
            "use_vllm": False,
        }
        if settings.get("steps_per_generation") is None:
            settings["steps_per_generation"] = gradient_accumulation_steps
        self.args = SimpleNamespace(**settings)
        args = self.args

        self.per_token_logps = per_token_logps
        self.entropies = entropies
        self.model = SimpleNamespace(training=training)
        self.accelerator = _SingleProcessAccelerator()
        self._metrics: dict[str, defaultdict[str, list[float]]] = {
            "train": defaultdict(list),
            "eval": defaultdict(list),
        }
        self.current_gradient_accumulation_steps = gradient_accumulation_steps

        self.loss_type = args.loss_type
        self.importance_sampling_level = args.importance_sampling_level
        self.beta = args.beta
        self.epsilon_low = args.epsilon
        self.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
        self.max_completion_length = args.max_completion_length
        self.top_entropy_quantile = args.top_entropy_quantile
        self.off_policy_mask_threshold = args.off_policy_mask_threshold
        self.use_vllm = False
        self.vllm_importance_sampling_correction = args.vllm_importance_sampling_correction
        self.vllm_importance_sampling_mode = args.vllm_importance_sampling_mode
        self.aux_loss_enabled = False
        self.router_aux_loss_coef = args.router_aux_loss_coef
        self.entropy_coef = args.entropy_coef
        self.use_adaptive_entropy = args.use_adaptive_entropy
        self._entropy_bonus_enabled = self.entropy_coef != 0.0 or self.use_adaptive_entropy
        self._last_world_entropy = float("inf")
        self._entropy_window_stats = None

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes the probe does not have.
        raise AttributeError(
            f"LossProbe has no attribute {name!r}: the installed TRL's GRPOTrainer._compute_loss reads it, "
            "so the stand-in in harness/losses/stand_in.py needs it added"
        )

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Return the stored (B x T) log-probabilities and entropies instead of running a model.

        Raises:
            ValueError: if the batch size of ``input_ids`` or ``logits_to_keep`` (T) does not match the stored tensors.
        """
        batch, tokens = self.per_token_logps.shape
        if input_ids.shape[0] != batch or logits_to_keep != tokens:
            raise ValueError(
                f"inputs are {input_ids.shape[0]} x {logits_to_keep} completion tokens, "
                f"the probe holds log-probs for {batch} x {tokens}"
            )
        return self.per_token_logps, (self.entropies if compute_entropy else None), None

    def loss(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """TRL's loss on ``inputs``: ``GRPOTrainer._compute_loss(self, None, inputs)`` (a scalar tensor)."""
        return GRPOTrainer._compute_loss(self, None, inputs)

    def clear_metrics(self) -> None:
        """Drop the metric values ``_compute_loss`` appended (it appends a few floats per call)."""
        for mode in self._metrics.values():
            mode.clear()


@dataclass
class LossBatch:
    """Synthetic inputs of one ``_compute_loss`` call.

    Attributes:
        inputs: the dict ``_compute_loss`` receives: ``prompt_ids``/``prompt_mask`` (B x P),
            ``completion_ids``/``completion_mask`` (B x T, mask int32), ``advantages`` (B,),
            ``num_items_in_batch`` (scalar float: completion tokens in the generation batch) and, when
            off-policy, ``old_per_token_logps`` (B x T).
        per_token_logps: (B x T) leaf tensor with ``requires_grad=True``, the policy log-probabilities.
        entropies: (B x T) per-token entropies, no gradient.
    """

    inputs: dict[str, torch.Tensor]
    per_token_logps: torch.Tensor
    entropies: torch.Tensor


def make_loss_batch(
    batch_size: int,
    seq_len: int,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    prompt_length: int = 16,
    lengths: Sequence[int] | None = None,
    advantages: Sequence[float] | None = None,
    logps_value: float | None = None,
    on_policy: bool = False,
    log_ratio_std: float = 0.05,
) -> LossBatch:
    """Build synthetic ``_compute_loss`` inputs, generated on the CPU from ``seed``.

    Args:
        batch_size: B, number of completions.
        seq_len: T, padded completion length in tokens.
        seed: seed of the CPU generator.
        device: where the tensors live.
        dtype: dtype of the log-probabilities (float32 in TRL's usual setup).
        prompt_length: P, prompt tokens (only concatenated by TRL, never read otherwise).
        lengths: completion lengths (each in 1..T); uniform in ``[max(1, T // 8), T]`` when None.
        advantages: per-sequence advantages; N(0, 1) when None.
        logps_value: fill the log-probabilities with this constant; ``-Uniform(0, 3)`` nats when None.
        on_policy: leave out ``old_per_token_logps`` so TRL uses ``per_token_logps.detach()`` (ratio exactly 1);
            otherwise old log-probs differ from the policy's by N(0, ``log_ratio_std``) per token.
        log_ratio_std: standard deviation (nats) of the off-policy drift.

    Returns:
        A :class:`LossBatch`.

    Raises:
        ValueError: if a size is < 1, or ``lengths``/``advantages`` has the wrong length or a length is out of range.
    """
    if batch_size < 1 or seq_len < 1:
        raise ValueError(f"batch_size and seq_len must be >= 1, got {batch_size} x {seq_len}")
    gen = torch.Generator().manual_seed(seed)
    if lengths is None:
        length_t = torch.randint(max(1, seq_len // 8), seq_len + 1, (batch_size,), generator=gen)
    else:
        if len(lengths) != batch_size or not all(1 <= n <= seq_len for n in lengths):
            raise ValueError(f"lengths must be {batch_size} values in 1..{seq_len}, got {list(lengths)}")
        length_t = torch.tensor(list(lengths))
    if advantages is None:
        adv = torch.randn(batch_size, generator=gen)
    else:
        if len(advantages) != batch_size:
            raise ValueError(f"advantages must have {batch_size} values, got {len(advantages)}")
        adv = torch.tensor(list(advantages), dtype=torch.float32)
    mask = (torch.arange(seq_len).unsqueeze(0) < length_t.unsqueeze(1)).to(torch.int32)
    if logps_value is None:
        logps = -3.0 * torch.rand(batch_size, seq_len, generator=gen)
    else:
        logps = torch.full((batch_size, seq_len), float(logps_value))
    inputs = {
        "prompt_ids": torch.randint(0, 32_000, (batch_size, prompt_length), generator=gen),
        "prompt_mask": torch.ones(batch_size, prompt_length, dtype=torch.int32),
        "completion_ids": torch.randint(0, 32_000, (batch_size, seq_len), generator=gen) * mask,
        "completion_mask": mask,
        "advantages": adv,
        "num_items_in_batch": mask.sum().to(torch.float32),
    }
    if not on_policy:
        drift = torch.randn(batch_size, seq_len, generator=gen) * log_ratio_std
        inputs["old_per_token_logps"] = (logps - drift).to(dtype)
    entropies = 2.0 * torch.rand(batch_size, seq_len, generator=gen)
    inputs = {key: value.to(device) for key, value in inputs.items()}
    per_token_logps = logps.to(device=device, dtype=dtype).requires_grad_(True)
    return LossBatch(inputs, per_token_logps, entropies.to(device=device, dtype=dtype))
