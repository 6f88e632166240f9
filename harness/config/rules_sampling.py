"""Validation rules on what a run samples and rewards: the task's reward functions (names,
settings, weights) and dynamic sampling. Each rule is ``(RunContext) -> list[Finding]``
(:mod:`harness.config.rules_base`), listed in :data:`harness.config.validate.RULES`."""

from __future__ import annotations

import difflib

from harness import rewards
from harness.config.rules_base import Finding, RunContext, err, warn
from harness.config.schema import DYNAMIC_SAMPLING_REWARD, DynamicSamplingSettings


def rule_rewards(ctx: RunContext) -> list[Finding]:
    """Each of ``task.rewards`` names a reward (the closest names suggested), its settings are its
    own and fit (a ``soft_punish_cache`` longer than ``max_completion_length``), and the weights
    are given once, one per reward."""
    out: list[Finding] = []
    task = ctx.run.task
    budget = ctx.value("max_completion_length")
    budget = budget if isinstance(budget, int) and not isinstance(budget, bool) else None
    modules = [str(m) for m in ctx.run.settings.get("plugins") or []]
    for name in task.reward_names:
        plugin, problems = rewards.find(name)
        out += [Finding("error", p) for p in problems]
        if plugin is None:
            out += [] if problems else err(rewards.unknown_problem(name, modules))
            continue
        out += [Finding("error", p) for p in plugin.setting_problems(task.reward_settings(name), budget)]
    return out + _weight_problems(ctx)


def _weight_problems(ctx: RunContext) -> list[Finding]:
    task = ctx.run.task
    names = list(task.reward_names)
    written = ctx.trainer.get("reward_weights")
    if written is not None and task.reward_weights is not None:
        return err(
            f"trainer.reward_weights = {written!r} and weights in task.rewards: the weights are given twice. "
            "Keep one: the weights in task.rewards' entries, or trainer.reward_weights (TRL's field)."
        )
    weights = ctx.value("reward_weights")
    if isinstance(weights, list | tuple) and len(weights) != len(names):
        return err(
            f"trainer.reward_weights = {list(weights)!r} has {len(weights)} weight(s) but task.rewards = "
            f"{names!r} has {len(names)} function(s); give one weight per reward, in task.rewards' order."
        )
    return []


def rule_dynamic_sampling(ctx: RunContext) -> list[Finding]:
    """Dynamic sampling's settings against the run: its metric is ``reward`` or one of the run's
    rewards; TRL's advantages must be computed per group (a batch-level std or TRL's
    ``normalize_then_sum`` would be taken over the dropped groups too); settings without
    ``enable`` cannot take effect."""
    ds = ctx.run.dynamic_sampling
    section = DynamicSamplingSettings.SECTION
    if not ds.enable:
        written = ctx.run.settings.get(section) or {}
        extra = sorted(k for k in written if k != "enable")
        if not extra:
            return []
        return warn(
            f"{section}.{', '.join(extra)} set without {section}.enable: true: dynamic sampling is off in "
            f"this run, so {'they have' if len(extra) > 1 else 'it has'} no effect. Set enable: true, or drop them."
        )
    out: list[Finding] = []
    names = list(ctx.run.task.reward_names)
    if ds.metric != DYNAMIC_SAMPLING_REWARD and ds.metric not in names:
        choices = [DYNAMIC_SAMPLING_REWARD, *names]
        close = difflib.get_close_matches(ds.metric, choices, n=1, cutoff=0.5)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        out += err(
            f"{section}.metric = {ds.metric!r} is neither 'reward' (the weighted sum TRL trains on) nor one of "
            f"this run's task.rewards ({', '.join(names)}).{hint}"
        )
    if ctx.value("scale_rewards") == "batch":
        out += err(
            f"{section}.enable with trainer.scale_rewards = 'batch': TRL would scale the advantages by the "
            "std over the whole generation batch, the dropped groups included. Use scale_rewards 'group' "
            "(TRL's default) or 'none'."
        )
    if ctx.value("multi_objective_aggregation") == "normalize_then_sum":
        out += err(
            f"{section}.enable with trainer.multi_objective_aggregation = 'normalize_then_sum': TRL would "
            "normalise the summed rewards over the whole generation batch, the dropped groups included. Use "
            "'sum_then_normalize' (TRL's default)."
        )
    return out
