"""A finding's arms whose runs can never give it a value, refused when the grid is planned.

A run logs a metric only where its settings make it, and a finding reads only some of its rows:

- an eval metric (greedy or sampled accuracy, pass@k: :func:`harness.layout.is_eval_metric`) is
  logged at the eval steps, none with ``harness.eval_steps: 0``; the sampled ones only where
  ``harness.sampled_eval_n`` reports them (:func:`harness.config.rules_sampling.records`);
- a ``from_start`` finding's start is the run's ``eval_start.json``, written only where it evaluates;
- ``dynamic_sampling/...`` columns only with ``dynamic_sampling.enable``;
- ``rewards/<name>/mean`` and ``/std`` only for a reward of the run's ``task.rewards``;
- ``off_policy_only: true`` keeps the rows with ``off_policy == 1``, which an on-policy run never
  writes: TRL reuses the current log-probs as the old ones when ``gradient_accumulation_steps %
  (steps_per_generation * num_iterations) == 0`` (:func:`harness.config.rules_trainer.is_on_policy`).

An arm none of whose runs can give the finding a value leaves its verdict without one whatever
the runs do: :func:`problems` names the finding, the arm, why and the fix, as errors of the
plan's validation (:func:`harness.config.validate.validate_plan`). An arm that selects no run is
:func:`harness.config.findings.plan_problems`'s; an arm only some of whose runs do not evaluate is
warned about by ``plan`` (:func:`harness.config.findings.plan_lines`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from analysis.settings.findings import FROM_START, arm_runs, finding_selectors, setting_text
from harness import layout
from harness.config.findings import origin_text
from harness.config.rules_base import RunContext
from harness.config.rules_sampling import records, unrecorded
from harness.config.rules_trainer import is_on_policy


@dataclass(frozen=True)
class _Need:
    """What a run must have for a finding to read a value from it: ``ok(run, ctx)``, and
    ``text(runs, ctxs, n)``: why the ``runs`` that lack it (of the arm's ``n``) give none, and the fix."""

    ok: Callable[[Any, RunContext], bool]
    text: Callable[[Sequence[Any], Sequence[RunContext], int], str]


def _runs_do(k: int, n: int, singular: str, plural: str) -> str:
    """``k`` runs of an arm's ``n`` and what they do: ``every run has``, ``2 of the 3 runs have``."""
    if k == n:
        return f"every run {singular}"
    return f"{k} of the {n} runs {singular if k == 1 else plural}"


def _off_policy_text(runs: Sequence[Any], ctxs: Sequence[RunContext], n: int) -> str:
    triples = []
    for ctx in ctxs:
        ga = ctx.value("gradient_accumulation_steps") or 1
        triples.append((ga, ctx.value("steps_per_generation") or ga, ctx.value("num_iterations") or 1))
    shown = "; ".join(
        f"trainer.gradient_accumulation_steps = {ga}, trainer.steps_per_generation = {spg}, "
        f"trainer.num_iterations = {mu}"
        for ga, spg, mu in sorted(set(triples))
    )
    mu = max(ga // spg + 1 for ga, spg, _ in triples)
    return (
        f"off_policy_only = true counts only the steps with off_policy == 1, and "
        f"{_runs_do(len(runs), n, 'is', 'are')} on-policy ({shown}: gradient_accumulation_steps is a multiple "
        "of steps_per_generation x num_iterations, so TRL reuses the current log-probs as the old ones and "
        f"no step is off-policy); give them off-policy steps (e.g. num_iterations: {mu}, which makes "
        "steps_per_generation x num_iterations exceed gradient_accumulation_steps), or drop off_policy_only"
    )


def _eval_text(metric: str, from_start: bool) -> Callable[[Sequence[Any], Sequence[RunContext], int], str]:
    start = " (as is a from_start finding's start, eval_start.json, written only where a run evaluates)"

    def text(runs: Sequence[Any], ctxs: Sequence[RunContext], n: int) -> str:
        return (
            f"metric {metric} is logged at the eval steps only{start if from_start else ''}, and "
            f"{_runs_do(len(runs), n, 'sets', 'set')} harness.eval_steps = 0; set "
            "harness.eval_steps > 0 for them"
            + ("" if from_start else ", or read a metric every step logs (e.g. reward)")
        )

    return text


def _sampled_text(metric: str) -> Callable[[Sequence[Any], Sequence[RunContext], int], str]:
    def text(runs: Sequence[Any], ctxs: Sequence[RunContext], n: int) -> str:
        why = unrecorded(list(runs), metric).rstrip(".")
        who = "no run records" if len(runs) == n else _runs_do(len(runs), n, "records no", "record no")
        return f"{who} metric {metric}: {why[0].lower()}{why[1:]}"

    return text


def _sampling_text(metric: str) -> Callable[[Sequence[Any], Sequence[RunContext], int], str]:
    def text(runs: Sequence[Any], ctxs: Sequence[RunContext], n: int) -> str:
        return (
            f"metric {metric} is logged only by runs with dynamic sampling on, and "
            f"{_runs_do(len(runs), n, 'has', 'have')} dynamic_sampling.enable = false; set dynamic_sampling.enable: "
            "true for them, or read another metric"
        )

    return text


def _reward_text(metric: str, name: str) -> Callable[[Sequence[Any], Sequence[RunContext], int], str]:
    def text(runs: Sequence[Any], ctxs: Sequence[RunContext], n: int) -> str:
        given = sorted({", ".join(r.task.reward_names) for r in runs})
        return (
            f"metric {metric} is logged only by runs whose task.rewards name {name}, and "
            f"{_runs_do(len(runs), n, 'names', 'name')} "
            f"{' or '.join(f'[{g}]' for g in given)}; add {name} to their task.rewards, or read the mean of "
            "one of theirs (rewards/NAME/mean)"
        )

    return text


def _reward_name(metric: str) -> str | None:
    """``name`` of a ``rewards/<name>/mean`` or ``/std`` metric; None for another."""
    parts = metric.split("/")
    if len(parts) == 3 and parts[0] == "rewards" and parts[1] and parts[2] in ("mean", "std"):
        return parts[1]
    return None


def _needs(finding: Mapping[str, Any]) -> list[_Need]:
    """What a run must have for ``finding`` to read a value from it."""
    metric = str(finding["metric"])
    out = []
    if finding.get("off_policy_only"):
        out.append(_Need(lambda run, ctx: not is_on_policy(ctx), _off_policy_text))
    from_start = finding.get("measure") == FROM_START
    if metric == layout.SAMPLED_ACCURACY or layout.pass_at_k(metric) is not None:  # at the eval steps too
        out.append(_Need(lambda run, ctx: records(run, metric), _sampled_text(metric)))
    elif layout.is_eval_metric(metric) or from_start:  # from_start: eval/ metrics only, and the start
        out.append(_Need(lambda run, ctx: run.harness.eval_steps > 0, _eval_text(metric, from_start)))
    if metric.startswith(layout.DS_PREFIX):
        out.append(_Need(lambda run, ctx: run.dynamic_sampling.enable, _sampling_text(metric)))
    name = _reward_name(metric)
    if name is not None:
        out.append(_Need(lambda run, ctx: name in run.task.reward_names, _reward_text(metric, name)))
    return out


def _arm_names(fid: str, finding: Mapping[str, Any]) -> dict[str, str]:
    """Each arm of :func:`analysis.settings.findings.finding_selectors` as a message names it:
    ``findings.F.variant``, a dose-response level ``findings.D.dose.values[1]``."""
    selectors = finding_selectors(finding)
    if "dose" in finding:
        return {label: f"findings.{fid}.dose.values[{i}]" for i, label in enumerate(selectors)}
    return {arm: f"findings.{fid}.{arm}" for arm in selectors}


def problems(plan: Any, contexts: Mapping[str, RunContext]) -> list[str]:
    """Each finding of the plan with arms whose every run lacks what the finding reads (see the
    module's note), naming the finding, the arms, why and the fix: one problem per finding and
    reason (arms that lack it alike are named together).

    Args:
        plan: the :class:`harness.config.grid.Plan`.
        contexts: each run's :class:`harness.config.rules_base.RunContext` by run id, with TRL's
            resolved settings (a run without one is read as written, TRL's defaults beside).
    """
    out = []
    for fid, finding in plan.grid.findings.items():
        needs = _needs(finding)
        names = _arm_names(fid, finding)
        arms: dict[str, list[str]] = {}  # the reasons -> the arms they leave without a value
        for arm, selector in finding_selectors(finding).items() if needs else ():
            runs = arm_runs(plan.runs, selector)
            ctxs = [contexts.get(r.run_id) or RunContext(r, dict(r.trainer), None, ()) for r in runs]
            why = _unvalued(needs, runs, ctxs)
            if why:
                arms.setdefault(why, []).append(f"{names[arm]} ({setting_text(selector)})")
        for why, named in arms.items():
            which = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"
            out.append(
                f"{which}: no run of {'the arm' if len(named) == 1 else 'these arms'} can give the finding a "
                f"value, so it can have no verdict: {why}." + origin_text(plan.grid.source, fid)
            )
    return out


def _unvalued(needs: Sequence[_Need], runs: Sequence[Any], ctxs: Sequence[RunContext]) -> str:
    """Why no run of an arm (``runs``, their contexts ``ctxs``) meets every need, and the fixes;
    "" when one does, or when the arm has no run (:func:`harness.config.findings.plan_problems`)."""
    pairs = list(zip(runs, ctxs, strict=True))
    if not runs or any(all(need.ok(r, c) for need in needs) for r, c in pairs):
        return ""
    texts = []
    for need in needs:
        lacking = [(r, c) for r, c in pairs if not need.ok(r, c)]
        if lacking:
            texts.append(need.text([r for r, _ in lacking], [c for _, c in lacking], len(runs)))
    return "; and ".join(texts)
