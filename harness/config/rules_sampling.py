"""Validation rules on what a run samples and rewards: the task's reward functions (names,
settings, weights) and dynamic sampling. Each rule is ``(RunContext) -> list[Finding]``
(:mod:`harness.config.rules_base`), listed in :data:`harness.config.validate.RULES`; and, over a
whole plan, the sampled eval's metrics that the report or a finding reads but no run records
(:func:`sampled_metric_problems`)."""

from __future__ import annotations

import difflib
from typing import Any

from harness import layout, rewards
from harness.config.rules_base import Finding, RunContext, err, warn
from harness.models.passk import ks_for
from harness.settings.schema import DYNAMIC_SAMPLING_REWARD, DynamicSamplingSettings


def rule_rewards(ctx: RunContext) -> list[Finding]:
    """Each of ``task.rewards`` names a reward (the closest names suggested), its settings are its
    own and fit (a ``soft_punish_cache`` longer than ``max_completion_length``), and the weights
    are given once, one per reward."""
    out: list[Finding] = []
    task = ctx.run.task
    budget = ctx.value("max_completion_length")
    budget = budget if isinstance(budget, int) and not isinstance(budget, bool) else None
    listed = ctx.run.settings.get("plugins") or []
    modules = [listed] if isinstance(listed, str) else [str(m) for m in listed]
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
    weights = ctx.value("reward_weights")
    if ds.metric == DYNAMIC_SAMPLING_REWARD and isinstance(weights, list | tuple) and not any(weights):
        out += warn(
            f"{section}.metric = 'reward' with every reward weight 0 ({list(weights)!r}): every group's reward is 0, "
            "so every group is dropped and every step runs short. Give a reward a weight, or filter on one "
            f"reward by its name ({section}.metric: {names[0]})."
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


def records(run: Any, metric: str) -> bool:
    """Whether ``run`` (a :class:`harness.settings.runs.RunSpec`) records the sampled eval's
    ``metric``: ``eval/sampled_accuracy``, or ``eval/pass@k`` for a k its ``sampled_eval_n``
    reports (:func:`harness.models.passk.ks_for`), at its eval steps."""
    h = run.harness
    if h.eval_steps == 0 or h.sampled_eval_n == 0:
        return False
    k = layout.pass_at_k(metric)
    return metric == layout.SAMPLED_ACCURACY or (k is not None and k in ks_for(h.sampled_eval_n))


def _named_sampled_metrics(plan: Any) -> list[tuple[str, str, list[Any], str]]:
    """``(where, metric, runs that must record it, level)`` of every sampled-eval metric that the
    ``report:`` and ``findings:`` sections name (any name under ``eval/pass@``, well formed or not;
    a finding's with no runs: its arms are checked one by one, :mod:`harness.config.finding_values`)."""
    report = plan.grid.report or {}
    runs = list(plan.runs)
    named = [("report.metric", report.get("metric"), runs, "error")]
    named.append(
        ("report.progression.metric", (report.get("progression") or {}).get("metric"), runs, "error")
    )
    for key in ("curves", "metrics"):
        values = report.get(key)
        named += [
            (f"report.{key}", m, runs, "warning")
            for m in ([values] if isinstance(values, str) else values or [])
        ]
    for fid, f in (plan.grid.findings or {}).items():
        # the name alone: whether each arm's runs record it is harness.config.finding_values'
        named.append((f"findings.{fid}.metric", f.get("metric"), [], "error"))
    sampled = (layout.SAMPLED_ACCURACY, layout.PASS_AT_PREFIX)
    return [(w, m, r, lv) for w, m, r, lv in named if isinstance(m, str) and m.startswith(sampled)]


def sampled_metric_problems(plan: Any) -> list[Finding]:
    """The sampled eval's metrics that the report or a finding reads but no run records: a
    pass@k whose k is no positive integer, or (the report's) that no run's ``sampled_eval_n``
    reports (k = 1, 2, 4, ... up to n, and n), or any of them with the sampled eval off in every run
    concerned; a finding's arms whose runs record none are :mod:`harness.config.finding_values`'s.
    An error where a table or a verdict rests on it, a warning for a panel."""
    out = []
    for where, metric, runs, level in _named_sampled_metrics(plan):
        if metric != layout.SAMPLED_ACCURACY and layout.pass_at_k(metric) is None:
            out.append(
                Finding(
                    level,
                    f"{where} = {metric}: no run records it; pass@k columns are eval/pass@K with K a "
                    "positive integer (1, 2, 4, ... up to harness.sampled_eval_n). Fix the name.",
                )
            )
            continue
        if not runs or any(records(r, metric) for r in runs):
            continue
        out.append(
            Finding(level, f"{where} = {metric}, but none of its runs records it: {unrecorded(runs, metric)}")
        )
    return out


def unrecorded(runs: list[Any], metric: str) -> str:
    """Why ``runs`` record no ``metric`` of the sampled eval, and the fix."""
    ns = sorted({r.harness.sampled_eval_n for r in runs if r.harness.eval_steps > 0})
    if not any(ns):
        return (
            "the sampled eval is off in every one (harness.sampled_eval_n = 0, or harness.eval_steps = 0). Set "
            "harness.sampled_eval_n > 0 and harness.eval_steps > 0, or read a metric the runs record."
        )
    recorded = sorted({k for n in ns if n for k in ks_for(n)})
    return (
        f"they have harness.sampled_eval_n = {', '.join(map(str, ns))}, which reports pass@k for k = "
        f"{', '.join(map(str, recorded))} (1, 2, 4, ... up to n, and n itself). Set harness.sampled_eval_n to "
        f"at least {layout.pass_at_k(metric)}, or read a metric the runs record."
    )
