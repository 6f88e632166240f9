"""Validation rules on the trainer's settings and the loss: what TRL's ``GRPOConfig`` accepts but
the trainer rejects later or silently ignores.

An unknown ``loss_type`` (it fails only at the first loss computation), ranges that fail or mislead
in training, ``sync_ref_model`` with ``beta=0`` (the trainer raises when it starts), SAPO's or VESPO's
fields under a loss that does not read them, a ratio cap below 1, clip values that cannot act
on-policy, what a loss plugin declares it ignores, TRL's own warnings and features that fail once
the trainer starts. Each rule is ``(RunContext) -> list[Finding]`` (:mod:`harness.config.rules_base`),
listed in :data:`harness.config.validate.RULES`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness.config.rules_base import Finding, RunContext, err, warn
from harness.settings.runs import RunSpec
from harness.settings.schema import (
    canonical_json,
)
from harness.trl_boundary import (
    IMPORTANCE_SAMPLING_LEVELS,
    TRL_OFF_POLICY_ONLY_FIELDS,
    loss_types,
)

CLIP_KEYS = ("trainer.epsilon", "trainer.epsilon_high", "trainer.delta")
#: Settings that only act on ratios != 1: the clip range, and the loss-specific fields whose effect
#: vanishes at r = 1 (:data:`harness.trl_boundary.TRL_OFF_POLICY_ONLY_FIELDS`: VESPO's (k, lambda),
#: SAPO's temperatures).
OFF_POLICY_KEYS = (*CLIP_KEYS, *(f"trainer.{k}" for k in TRL_OFF_POLICY_ONLY_FIELDS))
REF_SYNC_KEYS = ("ref_model_sync_steps", "ref_model_mixup_alpha")


def rule_loss_type(ctx: RunContext) -> list[Finding]:
    """``loss_type`` names a TRL loss type or a loss plugin, whose hyperparameters and output are
    checked (:func:`harness.losses.loading.check_run`)."""
    lt = ctx.trainer.get("loss_type", ctx.value("loss_type"))
    if lt in loss_types() and not ctx.run.settings.get("plugins") and not _has_plugins():
        return []
    from harness.losses.loading import check_run

    return [f for p in check_run(ctx.run.settings, ctx.config) for f in err(p)]


def _has_plugins() -> bool:
    """Whether any loss plugin is loaded (its hyperparameters may then be set by mistake)."""
    import sys

    registry = sys.modules.get("harness.losses")
    return bool(registry is not None and registry.REGISTRY)


def rule_importance_sampling_level(ctx: RunContext) -> list[Finding]:
    level = ctx.value("importance_sampling_level")
    if level not in IMPORTANCE_SAMPLING_LEVELS:
        return err(
            f"trainer.importance_sampling_level = {level!r}; use 'token' (per-token ratios) or "
            "'sequence' (GSPO's length-normalised sequence ratio)."
        )
    return []


#: ``(trainer field, test of its resolved value, what it must be)``: ranges GRPOConfig accepts but
#: that fail or mislead in training (:func:`rule_ranges`).
RANGE_CHECKS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("epsilon", lambda v: v is not None and v >= 0, "must be >= 0 (the lower clip is 1 - epsilon)"),
    ("epsilon_high", lambda v: v is None or v >= 0, "must be >= 0 (or unset to equal epsilon)"),
    ("num_iterations", lambda v: v is not None and v >= 1, "must be >= 1 (updates per generation batch)"),
    ("beta", lambda v: v is not None and v >= 0, "must be >= 0 (KL coefficient; 0 = no reference model)"),
    ("ref_model_mixup_alpha", lambda v: v is not None and 0 <= v <= 1, "must lie in [0, 1]"),
    ("ref_model_sync_steps", lambda v: v is not None and v >= 1, "must be >= 1 optimizer step"),
    ("num_generations", lambda v: v is None or v >= 2, "must be >= 2 (advantages compare a group)"),
    ("temperature", lambda v: v is not None and v > 0, "must be > 0"),
    ("learning_rate", lambda v: v is not None and v >= 0, "must be >= 0"),
    ("delta", lambda v: v is None or v > 1, "must be > 1 (the upper clip of the ratio) or unset"),
    ("max_completion_length", lambda v: v is None or v >= 1, "must be >= 1 token"),
    ("steps_per_generation", lambda v: v is None or v >= 1, "must be >= 1"),
    ("per_device_train_batch_size", lambda v: v >= 1, "must be >= 1 completion"),
    ("gradient_accumulation_steps", lambda v: v >= 1, "must be >= 1"),
    (
        "max_steps",
        lambda v: v >= 1,
        "must be >= 1 optimizer step (the harness runs a fixed number of steps)",
    ),
    ("top_p", lambda v: v is None or 0 < v <= 1, "must lie in (0, 1]"),
    ("top_k", lambda v: v is None or v >= 0, "must be >= 0 (0 turns top-k filtering off)"),
    ("repetition_penalty", lambda v: v > 0, "must be > 0 (1.0 = no penalty)"),
    ("min_p", lambda v: v is None or 0 <= v <= 1, "must lie in [0, 1]"),
    ("vespo_k_pos", lambda v: v is None or v >= 0, "must be >= 0 (VESPO's gamma shape)"),
    ("vespo_k_neg", lambda v: v is None or v >= 0, "must be >= 0 (VESPO's gamma shape)"),
    *(
        (
            f"sapo_temperature_{sign}",
            lambda v: v is None or v > 0,
            "must be > 0 (SAPO's gate is (4 / tau) sigmoid(tau (r - 1)): tau = 0 divides by zero)",
        )
        for sign in ("pos", "neg")
    ),
)


def rule_ranges(ctx: RunContext) -> list[Finding]:
    out: list[Finding] = []
    checks = RANGE_CHECKS
    for name, ok, why in checks:
        v = ctx.value(name)
        if isinstance(v, float) and not math.isfinite(v):
            continue  # said once below
        try:
            good = ok(v)
        except TypeError:
            good = False
        if not good:
            out += err(f"trainer.{name} = {v!r} {why}.")
    for name, v in ctx.trainer.items():  # NaN passes every comparison above, and TRL's own checks
        bad = _not_finite(v)
        if bad is not None and bad is v:
            out += err(f"trainer.{name} = {v!r} must be finite; give a number.")
        elif bad is not None:
            out += err(f"trainer.{name} = {v!r} holds {bad!r}; every number in it must be finite.")
    weights = ctx.value("reward_weights")
    if isinstance(weights, list | tuple) and not all(_is_number(w) for w in weights):
        out += err(f"trainer.reward_weights = {weights!r}: give one number per reward, e.g. [1.0, 0.5].")
    if ctx.value("scale_rewards") not in ("group", "batch", "none", True, False):
        out += err(
            f"trainer.scale_rewards = {ctx.value('scale_rewards')!r}; use 'group', 'batch' or 'none' "
            "(TRL's advantage scaling)."
        )
    for name in ("vespo_lambda_pos", "vespo_lambda_neg"):
        v = ctx.value(name)
        if v is not None and v <= 0:
            out += err(f"trainer.{name} = {v!r} must be > 0 (VESPO's gamma rate; TRL floors it at 1e-4).")
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _not_finite(value: Any) -> float | None:
    """The first NaN or infinity in a setting (itself, or inside its lists and mappings), else None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else value
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, list | tuple) else ()
    for v in items:
        bad = _not_finite(v)
        if bad is not None:
            return bad
    return None


def rule_ref_sync(ctx: RunContext) -> list[Finding]:
    out: list[Finding] = []
    if ctx.value("sync_ref_model") and not ctx.value("beta"):
        out += err(
            "trainer.sync_ref_model = true with beta = 0: with beta = 0 TRL loads no reference model, so "
            "there is nothing to sync (the trainer raises). Set beta > 0 (e.g. 0.04) or sync_ref_model: false."
        )
    explicit = [k for k in REF_SYNC_KEYS if k in ctx.trainer]
    if explicit and not ctx.value("sync_ref_model"):
        out += err(
            f"trainer.{', trainer.'.join(explicit)} set without sync_ref_model: they have no effect. "
            "Set sync_ref_model: true, or drop them."
        )
    return out


def rule_loss_fields(ctx: RunContext) -> list[Finding]:
    """SAPO's or VESPO's own fields (:data:`harness.losses.SPECIFIC_LOSS_FIELDS`) set for a run
    whose loss does not read them: TRL's table for a built-in, a plugin's declared ``reads``
    (:func:`harness.losses.loss_reads`). A plugin that declares nothing may read them: accepted."""
    from harness import losses

    lt = ctx.loss_type
    reads = losses.loss_reads(lt)
    explicit = [k for k in losses.SPECIFIC_LOSS_FIELDS if k in ctx.trainer]
    unread = [k for k in explicit if reads is not None and k not in reads]
    if not unread:
        return []
    readers = [t for t in loss_types() if set(unread) <= set(losses.loss_reads(t) or ())]
    readers += [p.name for p in losses.REGISTRY.values() if p.reads and set(unread) <= set(p.reads)]
    where = f"loss_type: {readers[0]}" if readers else "the loss that reads them"
    return err(
        f"trainer.{', trainer.'.join(unread)} set while loss_type = {lt!r}, which does not read "
        f"{'it' if len(unread) == 1 else 'them'} (it reads {', '.join(reads) or 'none of the loss fields'}); "
        f"only {', '.join(readers) or 'other losses'} {'reads' if len(readers) == 1 else 'read'} "
        f"{'it' if len(unread) == 1 else 'them'}. Put {'it' if len(unread) == 1 else 'them'} in a sub-grid with {where}."
    )


def rule_ratio_cap(ctx: RunContext) -> list[Finding]:
    """A loss that caps the ratio at a field (``min(r, epsilon_high)``: TRL's cispo, or a plugin's
    declared ``ratio_cap``, :func:`harness.losses.ratio_cap`) with a cap below 1."""
    from harness import losses

    field = losses.ratio_cap(ctx.loss_type)
    if field is None:
        return []
    cap = ctx.value(field)
    cap = ctx.value("epsilon") if cap is None else cap  # TRL: epsilon_high defaults to epsilon
    if isinstance(cap, (int, float)) and cap < 1:
        return err(
            f"trainer.{field} = {cap!r} with loss_type {ctx.loss_type}: the loss uses {field} as an "
            f"absolute cap on the ratio (min(ratio, {field}), as CISPO), so a cap below 1 down-weights even "
            f"on-policy tokens. Set {field} >= 1 (e.g. 5.0)."
        )
    return []


#: Why a setting cannot matter in on-policy cells (the start of their warnings).
ON_POLICY_CELLS = (
    "in on-policy cells (gradient_accumulation_steps % (steps_per_generation * num_iterations) == 0): "
    "TRL then uses the current log-probs as the old ones, every ratio is exactly 1"
)


def is_on_policy(ctx: RunContext) -> bool:
    """TRL's condition for reusing the current log-probs as old ones (ratio exactly 1).

    ``gradient_accumulation_steps % (steps_per_generation * num_iterations) == 0`` and no vLLM
    importance-sampling correction (TRL ``_generate_and_score_completions``).
    """
    from harness.trl_boundary import reuses_current_logps

    return reuses_current_logps(ctx.value)


def _off_policy_keys() -> tuple[str, ...]:
    """:data:`OFF_POLICY_KEYS` and the registered plugins' hyperparameters declared off-policy only
    (:attr:`harness.losses.Hyperparameter.off_policy_only`), as ``trainer.<name>`` keys."""
    from harness import losses

    return (*OFF_POLICY_KEYS, *(f"trainer.{n}" for n in sorted(losses.off_policy_only_names())))


def rule_clip_effect(ctx: RunContext) -> list[Finding]:
    """An axis that cannot change anything: this run has siblings differing only in clip, VESPO or
    off-policy-only plugin values, and either its loss ignores them or its updates are on-policy
    (every ratio exactly 1)."""
    if ctx.clip_siblings < 2:
        return []
    from harness import losses

    keys = OFF_POLICY_KEYS
    if ctx.trainer.get("loss_type") not in loss_types():  # a plugin: only what it declares off-policy only
        plugin = _trusted_plugin(ctx)
        if plugin is None:
            return []
        keys = tuple(f"trainer.{h.name}" for h in plugin.hyperparameters if h.off_policy_only)
    names = ", ".join(k.split(".", 1)[1] for k in keys if k in ctx.varying_keys)
    if not names:
        return []
    lt = ctx.value("loss_type")
    reads = set(losses.loss_reads(lt) or ("epsilon",))
    clip_only = not any(k in ctx.varying_keys for k in OFF_POLICY_KEYS[len(CLIP_KEYS) :])
    if lt in loss_types() and not reads & {"epsilon", "epsilon_high"} and clip_only:
        return warn(
            f"{names} varies, but loss_type {lt} has no hard clip and ignores it: these cells differ only in name."
        )
    if is_on_policy(ctx):
        return warn(
            f"{names} {'vary' if ', ' in names else 'varies'} {ON_POLICY_CELLS}, clipping never fires, VESPO's phi(1) = 1 for any (k, lambda), SAPO's gate has slope 1 at r = 1 for any temperature, and a loss plugin's "
            "off-policy-only hyperparameters act on nothing, so this axis has no effect there. To make it matter, reuse generation batches across optimizer steps: "
            "gradient_accumulation_steps must not be a multiple of steps_per_generation * num_iterations "
            "(e.g. num_iterations = 2 with the default steps_per_generation = gradient_accumulation_steps)."
        )
    return []


def clip_sibling_counts(runs: Sequence[RunSpec]) -> dict[str, int]:
    """For each run id, how many runs of ``runs`` share all its settings but the clip and VESPO values."""

    off_policy = set(_off_policy_keys())

    def key(run: RunSpec) -> str:
        trainer = {k: v for k, v in run.trainer.items() if f"trainer.{k}" not in off_policy}
        return canonical_json({**run.settings, "trainer": trainer})

    keys = {r.run_id: key(r) for r in runs}
    counts: dict[str, int] = {}
    for k in keys.values():
        counts[k] = counts.get(k, 0) + 1
    return {rid: counts[k] for rid, k in keys.items()}


def rule_plugin_declarations(ctx: RunContext) -> list[Finding]:
    """What a loss plugin declares it ignores (:attr:`harness.losses.LossPlugin.reads`): a field it
    does not read, set for its run, is a warning; and an on-policy run of a plugin that declares an
    ``on_policy_equivalent`` is told it trains with that TRL loss's gradient."""
    from harness import losses

    plugin = _trusted_plugin(ctx)
    if plugin is None:
        return []
    out: list[Finding] = []
    unread = [
        k
        for k in losses.ignored_fields(plugin)
        if k in ctx.trainer and k not in _path_reads(ctx) and k not in losses.SPECIFIC_LOSS_FIELDS
    ]  # SAPO's and VESPO's fields are rule_loss_fields' errors
    if unread:
        shown = ", ".join(f"trainer.{k}" for k in unread)
        reads = ", ".join(plugin.reads or ()) or "none of them"
        out += warn(
            f"{shown} set with loss_type {plugin.name}: the plugin declares the loss fields it reads "
            f"({reads}; {plugin.module}), so this has no effect on its runs and cells that differ "
            "only here differ only in name. Drop it from these cells (in a grid of several losses, set "
            "it only in the sub-grids of the losses that read it)."
        )
    if plugin.on_policy_equivalent and is_on_policy(ctx) and _verdict(ctx, plugin).equivalent_here:
        out += warn(
            f"loss_type {plugin.name} {ON_POLICY_CELLS}, and {plugin.name}'s gradient is {plugin.on_policy_equivalent}'s (declared by "
            f"{plugin.module}), so these runs are {plugin.on_policy_equivalent} runs up to rounding. To "
            "train the variant itself, reuse generation batches across optimizer steps (e.g. num_iterations = 2)."
        )
    return out


def _trusted_plugin(ctx: RunContext) -> Any:
    """The run's loss plugin when its declarations hold at the run's settings; None for a built-in
    loss, for settings TRL refused, and for a refused declaration (an error of rule_loss_type:
    nothing is said on top of it)."""
    from harness import losses

    plugin = losses.REGISTRY.get(ctx.trainer.get("loss_type"))
    if plugin is None or ctx.config is None or _verdict(ctx, plugin).problems:
        return None
    return plugin


def _verdict(ctx: RunContext, plugin: Any) -> Any:
    """The checks of the plugin's declarations at this run's settings
    (:func:`harness.losses.declarations.check`, memoised)."""
    from harness import losses
    from harness.losses.declarations import check

    return check(plugin.name, ctx.config, losses.plugin_settings(plugin, ctx.trainer))


def _path_reads(ctx: RunContext) -> set[str]:
    """The loss fields the plugin path itself reads at this run's settings, whatever the plugin
    reads: ``importance_sampling_level`` weights the KL term under ``use_bias_correction_kl`` (with
    beta > 0) and shapes vLLM's importance-sampling ratio (harness.losses.compute, as TRL)."""
    kl = bool(ctx.value("beta")) and bool(ctx.value("use_bias_correction_kl"))
    vllm = bool(ctx.value("use_vllm")) and bool(ctx.value("vllm_importance_sampling_correction"))
    return {"importance_sampling_level"} if kl or vllm else set()


def rule_trl_warnings(ctx: RunContext) -> list[Finding]:
    lt, level = ctx.value("loss_type"), ctx.value("importance_sampling_level")
    if lt == "luspo" and level != "sequence":
        return warn("loss_type luspo with importance_sampling_level token: LUSPO's paper uses 'sequence'.")
    if lt == "vespo" and level != "token":
        return warn("loss_type vespo with importance_sampling_level sequence: VESPO expects 'token'.")
    if level == "sequence" and lt in ("bnpo", "dr_grpo", "dapo", "cispo"):
        return warn(
            f"importance_sampling_level sequence with loss_type {lt}: the loss sums per-token terms, weighting "
            "each sequence by its length; GSPO is loss_type grpo."
        )
    return []


def rule_trainer_features(ctx: RunContext) -> list[Finding]:
    """Settings TRL accepts that fail once the trainer starts: a TRL eval loop without an eval
    dataset, a scheduler without its arguments (the rewards' weights: :mod:`harness.config.rules_sampling`)."""
    out: list[Finding] = []
    strategy = ctx.value("eval_strategy")
    if strategy not in (None, "no"):
        out += err(
            f"trainer.eval_strategy = {strategy!r}: the harness gives TRL no eval dataset; it evaluates "
            "held-out prompts itself every harness.eval_steps. Drop eval_strategy."
        )
    if ctx.value("lr_scheduler_type") == "cosine_with_min_lr":
        kwargs = ctx.value("lr_scheduler_kwargs") or {}
        if not isinstance(kwargs, dict) or not {"min_lr", "min_lr_rate"} & set(kwargs):
            out += err(
                "trainer.lr_scheduler_type = 'cosine_with_min_lr' needs trainer.lr_scheduler_kwargs with "
                "min_lr or min_lr_rate (e.g. {min_lr_rate: 0.1}); transformers raises at the first step."
            )
    return out
