"""Validation of every run of a plan before anything runs, is written or is submitted.

Two layers, both applied to every cell and all problems listed at once:

1. TRL's own ``GRPOConfig(**trainer)``, constructed for the device the run will execute on (a GPU
   grid validates on a CPU-only login node: TRL's bf16 check is told a GPU is there).
2. The harness's rule table :data:`RULES`, for what ``GRPOConfig`` accepts but the trainer rejects
   later or silently ignores (``loss_type="nope"`` fails only at the first loss computation;
   ``sync_ref_model`` with ``beta=0`` raises when the trainer starts; clip values do nothing on-policy).
   The rules are :mod:`harness.config.rules_trainer` (the trainer's settings and the loss) and
   :mod:`harness.config.rules_run` (between sections, the model, where the run executes).

Each rule is a function ``(RunContext) -> list[Finding]`` (:mod:`harness.config.rules_base`), tested
one by one. Then the plan's own checks: the cells the sections refused (under their run ids), the
``report:`` choices no run can fill, a finding's arm whose runs can give it no value
(:mod:`harness.config.finding_values`), embedded-model sections no run reads; and the one-pass
listing of a grid's problems (:func:`format_one_pass`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness.config import finding_values
from harness.config.grid import Plan
from harness.config.rules_base import Finding, Rule, RunContext, Validation, err, error_lines
from harness.config.rules_run import (
    rule_cannot_act,
    rule_context_length,
    rule_device,
    rule_gpus_per_process,
    rule_packages,
    rule_peft,
    rule_report_to,
    rule_sampled_eval,
    rule_seed,
    rule_sharding,
    rule_task_and_model,
    rule_tiny_template,
)
from harness.config.rules_sampling import rule_dynamic_sampling, rule_rewards, sampled_metric_problems
from harness.config.rules_trainer import (
    clip_sibling_counts,
    rule_clip_effect,
    rule_importance_sampling_level,
    rule_loss_fields,
    rule_loss_type,
    rule_plugin_declarations,
    rule_ranges,
    rule_ratio_cap,
    rule_ref_sync,
    rule_trainer_features,
    rule_trl_warnings,
)
from harness.losses import grpo_config_kwargs
from harness.settings.runs import RunSpec
from harness.settings.schema import (
    EMBEDDED_MODEL_SECTIONS,
    ExecutorSettings,
    SpecError,
    canonical_json,
)
from harness.trl_boundary import VALIDATION_DIR, checked_grpo_config, grpo_config_defaults, resolve_device

#: Where a grid-file problem comes from, by how its message begins (:func:`problem_origin`).
ORIGINS = (
    ("-o ", "-o overrides"),
    ("--profile", "the profile"),
    ("profiles", "the profile"),
    ("executor", "the executor section"),
    ("report", "the report section"),
    ("findings", "the findings section"),
    ("plugins", "the loss plugins"),
    ("loss '", "the loss plugins"),
    ("plugin ", "the loss plugins"),
)


def problem_origin(problem: str) -> str:
    """Where a :class:`harness.settings.schema.SpecError` problem comes from: ``-o overrides``, ``the
    profile``, ``the executor section``, ``the report section``, ``the findings section``, ``the
    loss plugins``, or ``the file's keys and values``."""
    return next(
        (name for prefix, name in ORIGINS if problem.startswith(prefix)), "the file's keys and values"
    )


def format_one_pass(
    source: str,
    file_problems: Sequence[str],
    validation: Validation | None,
    arms: Sequence[str],
    left_out: Iterable[str] = (),
) -> str:
    """Every problem of a grid in one listing: the file's, grouped by :func:`problem_origin`; then
    the errors of the cells of what passed (settings with problems left out at their defaults, one
    line per distinct message with the runs it covers; a message naming a ``left_out`` key is the
    default's, not the grid's, and is not shown); then the findings' arms. One origin and nothing
    else keeps the plain listing of :class:`harness.settings.schema.SpecError`."""
    import re

    names = [re.escape(k) for k in left_out]
    default = re.compile(rf"(?<![\w.])({'|'.join(names)})(?!\w)") if names else None
    errors = (
        [f for f in validation.errors if not (default and default.search(f.message))] if validation else []
    )
    groups: dict[str, list[str]] = {}
    for p in dict.fromkeys(file_problems):
        groups.setdefault(problem_origin(p), []).append(p)
    for f in errors:  # a plan-level error of a section (report.baseline no cell has) goes with it
        origin = problem_origin(f.message)
        if not f.run_id and origin != problem_origin("") and f.message not in groups.get(origin, []):
            groups.setdefault(origin, []).append(f.message)
    cells = error_lines([f for f in errors if f.run_id or problem_origin(f.message) == problem_origin("")])
    if len(groups) == 1 and not cells and not arms:
        return str(SpecError(next(iter(groups.values())), source))
    n = sum(map(len, groups.values())) + len(cells) + len(arms)
    lines = [f"{source}: {n} problem{'s' if n != 1 else ''}; nothing was run or written:"]
    sections = [*groups.items()]
    sections += [("the cells (checked with the settings above left out, at their defaults)", cells)]
    sections += [("the findings' arms", list(arms))]
    for title, items in sections:
        if items:
            lines += [f"  {title}:", *(f"    - {p}" for p in items)]
    if validation is None:
        lines.append("  (the cells are checked once the problems above are fixed)")
    return "\n".join(lines)


RULES: tuple[Rule, ...] = (
    rule_loss_type,
    rule_importance_sampling_level,
    rule_ranges,
    rule_ref_sync,
    rule_cannot_act,
    rule_loss_fields,
    rule_ratio_cap,
    rule_clip_effect,
    rule_plugin_declarations,
    rule_trl_warnings,
    rule_device,
    rule_gpus_per_process,
    rule_task_and_model,
    rule_context_length,
    rule_seed,
    rule_sampled_eval,
    rule_trainer_features,
    rule_rewards,
    rule_dynamic_sampling,
    rule_tiny_template,
    rule_packages,
    rule_report_to,
    rule_peft,
    rule_sharding,
)


def _where(varying: Mapping[str, Any], keys: Sequence[str]) -> str:
    """A cell's values on ``keys``, as the report lists them: ``loss_type='nope', seed=0``."""
    parts = [f"{k.split('.')[-1]}={varying.get(k)!r}" for k in keys if k in varying]
    return ", ".join(parts) or "the only run"


def validate_run(
    run: RunSpec,
    executor: ExecutorSettings,
    varying_keys: tuple[str, ...],
    clip_siblings: int = 1,
    contexts: dict[str, RunContext] | None = None,
) -> list[Finding]:
    """All findings for one run: TRL's ``GRPOConfig`` first, then every rule of :data:`RULES`; the
    run's :class:`RunContext` goes to ``contexts`` under its run id when given."""
    device = resolve_device(run.harness.device, executor)
    nproc = executor.num_processes
    kwargs, findings = _trl_kwargs(run, device, executor.name == "slurm")
    verdict = checked_grpo_config(kwargs, device, elsewhere=executor.name == "slurm", num_processes=nproc)
    if verdict["error"]:
        on = f"{device}, {nproc} processes (executor.nodes {executor.nodes} x tasks_per_node {executor.tasks_per_node})"
        if nproc > 1 and "global" in verdict["error"]:
            fix = (
                f" The global batch counts every process: per_device_train_batch_size x {nproc}. Make "
                "generation_batch_size a multiple of it, or change executor.nodes / tasks_per_node."
            )
        else:
            fix = ""
        where = on if nproc > 1 else device
        findings += err(f"TRL's GRPOConfig rejects these settings (on {where}): {verdict['error']}{fix}")
    ctx = RunContext(run, dict(run.trainer), verdict["values"], varying_keys, clip_siblings, executor)
    if contexts is not None:
        contexts[run.run_id] = ctx
    for rule in RULES:
        try:
            findings += rule(ctx)
        except Exception as e:  # a rule must never hide the others
            findings += err(f"{rule.__name__} could not check this run: {type(e).__name__}: {e}")
    where = _where(run.varying, varying_keys)
    return [Finding(f.level, f.message, run.run_id, where) for f in findings]


def _trl_kwargs(run: RunSpec, device: str, elsewhere: bool) -> tuple[dict[str, Any], list[Finding]]:
    """What :func:`validate_run` gives TRL's ``GRPOConfig``, and the findings on ``trainer.deepspeed``.

    ``GRPOConfig`` with a DeepSpeed config imports deepspeed and reads the config. Where deepspeed is
    not installed (a login node; a CPU laptop) the rest of the settings are still checked by TRL
    without it: for a SLURM run deepspeed is the job environment's business and only the config's
    existence is checked here; a local run gets an error naming the missing package.
    """
    import importlib.util

    from harness.config import scale

    kwargs = grpo_config_kwargs(run, device, VALIDATION_DIR)
    ds = kwargs.get("deepspeed")
    if ds is None:
        return kwargs, []
    scale.quiet_cpu_fallback()  # before TRL's GRPOConfig imports deepspeed
    findings: list[Finding] = []
    if isinstance(ds, str):
        if os.path.isdir(ds):
            findings += err(
                f"trainer.deepspeed = {ds!r} is a folder; give the path of a DeepSpeed JSON config file in it, "
                "or the config itself as a mapping."
            )
        elif not os.path.isfile(ds):  # transformers opens it as written: no ~ expansion
            findings += err(
                f"trainer.deepspeed = {ds!r}: no such file"
                f"{'' if os.path.isabs(ds) else f' (relative to {os.getcwd()})'}; give the path of a "
                "DeepSpeed JSON config on a filesystem the jobs see, or the config itself as a mapping."
            )
        else:
            try:
                config = scale.deepspeed_config(ds)
            except (OSError, ValueError) as e:
                findings += err(
                    f"trainer.deepspeed = {ds!r}: the file does not parse as JSON ({e}); fix the file."
                )
    else:
        config = ds
    if not findings:
        where = "trainer.deepspeed" if not isinstance(ds, str) else f"trainer.deepspeed = {ds!r}"
        findings += [Finding("error", m) for m in scale.shape_problems(where, config)]
    if findings or importlib.util.find_spec("deepspeed") is None:
        del kwargs["deepspeed"]  # TRL checks the rest without it
    if importlib.util.find_spec("deepspeed") is None and not elsewhere:  # one message for every run
        findings += err(
            "trainer.deepspeed is set but deepspeed is not installed here; pip install "
            "'grpo-harness[deepspeed]' (or pip install deepspeed), or drop the setting."
        )
    return kwargs, findings


def validate_plan(plan: Plan) -> Validation:
    """Validate every run of ``plan`` (and every cell its sections rejected); never raises for a bad
    cell. The grid's executor block was checked when the grid was loaded."""
    validation = Validation()
    executors: dict[str, ExecutorSettings | None] = {}
    for cell in plan.rejected:
        where = _where(cell.varying, plan.varying_keys)
        validation.findings += [Finding("error", p, cell.run_id, where) for p in cell.problems]
        validation.findings += _stand_in_errors(cell, plan, executors, validation, where)
    siblings = clip_sibling_counts(plan.runs)
    contexts: dict[str, RunContext] = {}
    for run in plan.runs:
        executor = _run_executor(run, plan.grid.executor, executors, validation)
        if executor is not None:
            validation.findings += validate_run(
                run, executor, plan.varying_keys, siblings[run.run_id], contexts
            )
    validation.findings += _report_cannot_act(plan) + _unused_sections(plan) + sampled_metric_problems(plan)
    validation.findings += [Finding("error", p) for p in finding_values.problems(plan, contexts)]
    for dropped, kept in plan.duplicates:
        validation.findings.append(
            Finding(
                "warning",
                f"cell ({_where(dropped.varying, tuple(dropped.varying))}) is the same run as "
                f"({_where(kept.varying, tuple(kept.varying))}), run {kept.run_id}; it runs once.",
            )
        )
    return validation


def _stand_in_errors(
    cell: Any, plan: Plan, executors: dict[str, ExecutorSettings | None], out: Validation, where: str
) -> list[Finding]:
    """The errors of a refused cell's other settings (:attr:`harness.config.grid.Rejected.stand_in`, the
    cell with the refused settings at their defaults), under the cell's run id; an error that names
    a left-out key is its default's, not the grid's, and is not said."""
    if cell.stand_in is None:
        return []
    executor = _run_executor(cell.stand_in, plan.grid.executor, executors, out)
    if executor is None:
        return []
    found = validate_run(cell.stand_in, executor, plan.varying_keys)
    return [
        Finding("error", f.message, cell.run_id, where)
        for f in found
        if f.level == "error" and not any(k in f.message for k in cell.left_out)
    ]


def _unused_sections(plan: Plan) -> list[Finding]:
    """An embedded model's section (``tiny:``, ``tiny_chat:``, ``tiny_steps:``) that no run's model
    reads: its values are dropped unchecked, so whatever it says (impossible values included) acts
    on nothing."""
    models = {run.model for run in plan.runs}
    if plan.rejected:  # cells refused for their sections have no run: count the models the grid names
        grid = plan.grid
        models.add(grid.base.get("model", "tiny"))
        axes = [*grid.axes, *(a for z in grid.zips for a in z)]
        for sub in grid.subgrids:
            axes += [*sub.axes, *(a for z in sub.zips for a in z)]
            models.update(v for k, v in sub.settings if k == "model")
        models.update(v for a in axes if a.key == "model" for v in a.values)
    used = {EMBEDDED_MODEL_SECTIONS.get(m) for m in models}
    out = []
    for model, section in EMBEDDED_MODEL_SECTIONS.items():
        if plan.grid.base.get(section) is not None and section not in used:
            out.append(
                Finding(
                    "warning",
                    f"{section}: is set, but no run's model reads it (only model {model!r} does): its values "
                    "are neither checked nor used. Drop the section, or set model: " + model + ".",
                )
            )
    return out


def _report_cannot_act(plan: Plan) -> list[Finding]:
    """The ``report:`` section's choices no run can fill: an eval metric (greedy or sampled
    accuracy, pass@k: :func:`harness.layout.is_eval_metric`) when no run evaluates
    (``harness.eval_steps = 0`` everywhere): as ``report.metric``, the score of every table, or as
    a progression's metric, an error (the tables would be empty); as a panel of ``curves`` or
    ``metrics``, a warning. A ``baseline`` of KEY=VALUE pairs that no cell has
    (:func:`_baseline_missing`), an error: the report would compare nothing with it. A
    progression's row that selects no run, or two rows that share one
    (:func:`harness.config.report_check.progression_problems`), an error."""
    from harness import layout
    from harness.config.findings import metric_warning
    from harness.config.report_check import progression_problems

    report = plan.grid.report or {}
    out = _baseline_missing(plan, report.get("baseline"))
    out += [Finding("error", p) for p in progression_problems(plan)]
    progression = report.get("progression") or {}
    for key in ("metric", "curves", "metrics"):
        names = report.get(key)
        for name in [names] if isinstance(names, str) else names or []:
            said = metric_warning(name) if isinstance(name, str) else None
            if said:
                out.append(Finding("warning", f"report.{key}: {said}"))
    if progression and metric_warning(progression["metric"]):
        out.append(Finding("warning", f"report.progression.metric: {metric_warning(progression['metric'])}"))
    if not plan.runs or any(run.harness.eval_steps > 0 for run in plan.runs):
        return out
    for key, metric in (("metric", report.get("metric")), ("progression.metric", progression.get("metric"))):
        if isinstance(metric, str) and layout.is_eval_metric(metric):
            out.append(
                Finding(
                    "error",
                    f"report.{key} = {metric}, but no run evaluates (harness.eval_steps = 0): every table of "
                    "the report would be empty. Set harness.eval_steps > 0, or score on reward.",
                )
            )
    named = [(k, m) for k in ("curves", "metrics") for m in report.get(k) or [] if layout.is_eval_metric(m)]
    for metric in dict.fromkeys(m for _, m in named):
        keys = " and ".join(f"report.{k}" for k, m in named if m == metric)
        out.append(
            Finding(
                "warning",
                f"{keys} name {metric}, but no run evaluates (harness.eval_steps = 0): its panels "
                "would be empty. Set harness.eval_steps > 0, or drop it from the report section.",
            )
        )
    return out


def _baseline_missing(plan: Plan, baseline: Any) -> list[Finding]:
    """``report.baseline`` as KEY=VALUE pairs that no run of the plan has (a variant label, without
    ``=``, is left to the report). A key is a run setting or the last part of one the grid varies
    (``max_digits``); a trainer field the runs leave unset takes TRL's default, except where the
    grid varies it: the report labels such a run by what it states, nothing (``KEY=None``); values
    compare as text, or as numbers where both read as one."""
    from harness.config.keys import normalize_key

    if not isinstance(baseline, str) or "=" not in baseline or not plan.runs:
        return []
    pairs = [tuple(s.strip() for s in part.partition("=")[::2]) for part in baseline.split(",")]
    keys = {k.rsplit(".", 1)[-1]: k for k in plan.varying_keys}

    def value(run: RunSpec, key: str) -> Any:
        dotted = keys.get(key) or normalize_key(key)
        got = run.get(dotted, _UNSET)
        if got is _UNSET and dotted in plan.varying_keys:
            return None
        if got is _UNSET and dotted.startswith("trainer."):
            got = grpo_config_defaults().get(dotted.split(".", 1)[1], _UNSET)
        return got

    def same(got: Any, text: str) -> bool:
        if got is _UNSET or str(got).lower() == text.lower():
            return True
        try:
            return not isinstance(got, bool) and float(got) == float(text)
        except (TypeError, ValueError):
            return False

    if any(all(same(value(run, k), v) for k, v in pairs) for run in plan.runs):
        return []
    shown = "; ".join(
        f"{k} is {', '.join(sorted({str(value(run, k)) for run in plan.runs}))}" for k, _ in pairs
    )
    return [
        Finding(
            "error",
            f"report.baseline = {baseline!r}: no cell of this grid has it ({shown}), so the report would "
            "compare nothing with it. Name a cell's values, or drop the baseline.",
        )
    ]


_UNSET = object()


def _run_executor(
    run: RunSpec, grid_executor: ExecutorSettings, seen: dict[str, ExecutorSettings | None], out: Validation
) -> ExecutorSettings | None:
    """The executor a run executes under, or None when its own ``executor.*`` settings break the
    executor's rules (reported once per distinct setting)."""
    key = canonical_json(dict(run.executor))
    if key not in seen:
        try:
            seen[key] = run.executor_settings(grid_executor)
        except SpecError as e:
            seen[key] = None
            out.findings += [Finding("error", p) for p in e.problems]
    return seen[key]
