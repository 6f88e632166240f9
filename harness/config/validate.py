"""Validation of every run of a plan before anything runs, is written or is submitted.

Two layers, both applied to every cell and all problems listed at once:

1. TRL's own ``GRPOConfig(**trainer)``, constructed for the device the run will execute on (a GPU
   grid validates on a CPU-only login node: TRL's bf16 check is told a GPU is there).
2. The harness's rule table :data:`RULES`, for what ``GRPOConfig`` accepts but the trainer rejects
   later or silently ignores (``loss_type="nope"`` fails only at the first loss computation;
   ``sync_ref_model`` with ``beta=0`` raises when the trainer starts; clip values do nothing on-policy).

Each rule is a function ``(RunContext) -> list[Finding]``, tested one by one.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.config import lora
from harness.config.grid import Plan
from harness.config.schema import (
    EMBEDDED_MODEL_SECTIONS,
    SFT_SEED_BASE,
    TINY,
    TINY_CHAT,
    TINY_STEPS,
    ExecutorSettings,
    RunSpec,
    SpecError,
    canonical_json,
)
from harness.trl_boundary import (
    IMPORTANCE_SAMPLING_LEVELS,
    VALIDATION_DIR,
    checked_grpo_config,
    cuda_available,
    grpo_config_defaults,
    grpo_config_kwargs,
    loss_types,
    resolve_device,
)

CLIP_KEYS = ("trainer.epsilon", "trainer.epsilon_high", "trainer.delta")
#: Settings that only act on ratios != 1: the clip range; VESPO's (k, lambda), since
#: phi(1) = e^lambda * 1^k * e^-lambda = 1 for every k and lambda (VESPO's gamma weight); SAPO's
#: temperatures, since its gate (4 / tau) sigmoid(tau (r - 1)) has slope 1 at r = 1 for every tau
#: (TRL's sapo branch of ``_compute_loss``), so the gradient at r = 1 is GRPO's.
OFF_POLICY_KEYS = (
    *CLIP_KEYS,
    *(f"trainer.{k}" for k in ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")),
    "trainer.sapo_temperature_pos",
    "trainer.sapo_temperature_neg",
)
REF_SYNC_KEYS = ("ref_model_sync_steps", "ref_model_mixup_alpha")


@dataclass(frozen=True)
class Finding:
    """One problem (``level="error"``) or caveat (``level="warning"``) of one run."""

    level: str
    message: str
    run_id: str = ""
    where: str = ""  # the run's varying values, "loss_type=nope, seed=0"


@dataclass
class Validation:
    """All findings of a plan. ``ok`` is False when any error was found."""

    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def format(self, source: str = "") -> str:
        """Human-readable listing, errors first: one line per distinct message (a message several
        runs share lists their ids; one run's gives its varying values), then the warnings, also
        one line per distinct message."""
        lines = []
        head = f"{source}: " if source else ""
        if self.errors:
            errors = _error_lines(self.errors)  # one per distinct problem, with the runs it covers
            n = len(errors)
            lines.append(f"{head}{n} error{'s' if n != 1 else ''}; nothing was run or written:")
            lines += [f"  - {line}" for line in errors]
        seen = set()
        for f in self.warnings:
            if f.message in seen:
                continue
            seen.add(f.message)
            ids = [g.run_id for g in self.warnings if g.message == f.message and g.run_id]
            n = max(len(ids), 1)
            which = f" [{', '.join(ids[:6])}{', ...' if len(ids) > 6 else ''}]" if ids else ""
            runs = f" ({n} run{'s' if n != 1 else ''}{which})" if ids else ""
            lines.append(f"warning{runs}: {f.message}")
        return "\n".join(lines)


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
    """Where a :class:`harness.config.spec.SpecError` problem comes from: ``-o overrides``, ``the
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
    else keeps the plain listing of :class:`harness.config.spec.SpecError`."""
    import re

    from harness.config.spec import SpecError

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
    cells = _error_lines([f for f in errors if f.run_id or problem_origin(f.message) == problem_origin("")])
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


def _error_lines(errors: Sequence[Finding]) -> list[str]:
    by_message: dict[str, list[Finding]] = {}
    for f in errors:
        by_message.setdefault(f.message, []).append(f)
    lines = []
    for message, found in by_message.items():
        ids = [f.run_id for f in found if f.run_id]
        if len(ids) > 1:
            shown = ", ".join(ids[:6]) + (", ..." if len(ids) > 6 else "")
            lines.append(f"{len(ids)} runs [{shown}]: {message}")
        elif ids:
            lines.append(f"run {ids[0]} ({found[0].where}): {message}")
        else:
            lines.append(message)
    return lines


@dataclass(frozen=True)
class RunContext:
    """What a rule sees: the run, its trainer settings as written, TRL's resolved config (or None)."""

    run: RunSpec
    trainer: Mapping[str, Any]  # settings as written in the grid (explicit keys only)
    config: Mapping[str, Any] | None  # GRPOConfig's resolved fields (JSON values), None if TRL rejected them
    varying_keys: tuple[str, ...]
    clip_siblings: int = 1  # runs of the plan identical to this one but for the clip values
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)

    @property
    def loss_type(self) -> Any:
        """The ``loss_type`` as the grid writes it: a plugin's name (TRL's resolved config holds its
        reduction instead)."""
        return self.trainer.get("loss_type", self.value("loss_type"))

    def value(self, name: str) -> Any:
        """A trainer field: TRL's resolved value when available, else as written, else TRL's default."""
        if self.config is not None:
            return self.config.get(name)
        if name in self.trainer:
            return self.trainer[name]
        return grpo_config_defaults().get(name)


# --- the rule table -----------------------------------------------------------------------------

Rule = Callable[[RunContext], list[Finding]]


def _err(msg: str) -> list[Finding]:
    return [Finding("error", msg)]


def _warn(msg: str) -> list[Finding]:
    return [Finding("warning", msg)]


def rule_loss_type(ctx: RunContext) -> list[Finding]:
    """``loss_type`` names a TRL loss type or a loss plugin, whose hyperparameters and output are
    checked (:func:`harness.losses.loading.check_run`)."""
    lt = ctx.trainer.get("loss_type", ctx.value("loss_type"))
    if lt in loss_types() and not ctx.run.settings.get("plugins") and not _has_plugins():
        return []
    from harness.losses.loading import check_run

    return [f for p in check_run(ctx.run.settings, ctx.config) for f in _err(p)]


def _has_plugins() -> bool:
    """Whether any loss plugin is loaded (its hyperparameters may then be set by mistake)."""
    import sys

    registry = sys.modules.get("harness.losses")
    return bool(registry is not None and registry.REGISTRY)


def rule_importance_sampling_level(ctx: RunContext) -> list[Finding]:
    level = ctx.value("importance_sampling_level")
    if level not in IMPORTANCE_SAMPLING_LEVELS:
        return _err(
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
            out += _err(f"trainer.{name} = {v!r} {why}.")
    for name, v in ctx.trainer.items():  # NaN passes every comparison above, and TRL's own checks
        bad = _not_finite(v)
        if bad is not None and bad is v:
            out += _err(f"trainer.{name} = {v!r} must be finite; give a number.")
        elif bad is not None:
            out += _err(f"trainer.{name} = {v!r} holds {bad!r}; every number in it must be finite.")
    weights = ctx.value("reward_weights")
    if isinstance(weights, list | tuple) and not all(_is_number(w) for w in weights):
        out += _err(f"trainer.reward_weights = {weights!r}: give one number per reward, e.g. [1.0, 0.5].")
    if ctx.value("scale_rewards") not in ("group", "batch", "none", True, False):
        out += _err(
            f"trainer.scale_rewards = {ctx.value('scale_rewards')!r}; use 'group', 'batch' or 'none' "
            "(TRL's advantage scaling)."
        )
    for name in ("vespo_lambda_pos", "vespo_lambda_neg"):
        v = ctx.value(name)
        if v is not None and v <= 0:
            out += _err(f"trainer.{name} = {v!r} must be > 0 (VESPO's gamma rate; TRL floors it at 1e-4).")
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
        out += _err(
            "trainer.sync_ref_model = true with beta = 0: with beta = 0 TRL loads no reference model, so "
            "there is nothing to sync (the trainer raises). Set beta > 0 (e.g. 0.04) or sync_ref_model: false."
        )
    explicit = [k for k in REF_SYNC_KEYS if k in ctx.trainer]
    if explicit and not ctx.value("sync_ref_model"):
        out += _err(
            f"trainer.{', trainer.'.join(explicit)} set without sync_ref_model: they have no effect. "
            "Set sync_ref_model: true, or drop them."
        )
    return out


def rule_cannot_act(ctx: RunContext) -> list[Finding]:
    """Settings that cannot take effect in this run, each with what would make them act: a warning
    where the run still trains as written, an error where every such run would fail."""
    out: list[Finding] = []
    steps = ctx.value("max_steps")
    every = ctx.run.harness.checkpoint_steps
    if isinstance(steps, int) and steps > 0 and every > steps:
        out += _warn(
            f"harness.checkpoint_steps = {every} > trainer.max_steps = {steps}: no periodic checkpoint is "
            f"written, so a run killed without warning starts again from step 0. Set it to at most {steps}."
        )
    period = ctx.value("ref_model_sync_steps")
    if ctx.value("sync_ref_model") and ctx.value("beta") and isinstance(steps, int) and steps > 0:
        if isinstance(period, int) and period >= steps:
            out += _warn(
                f"trainer.ref_model_sync_steps = {period} >= trainer.max_steps = {steps}: the reference is "
                f"never synced within the run (TRL syncs after every {period}th step). Use a period below {steps}."
            )
        if ctx.value("ref_model_mixup_alpha") == 0:
            out += _warn(
                "trainer.ref_model_mixup_alpha = 0 with sync_ref_model: each sync keeps the reference as it "
                "is (alpha x policy + (1 - alpha) x reference). Use alpha > 0 (TRL's default is 0.6; 1 is a hard sync)."
            )
    out += _chat_template_missing(ctx)
    ex = ctx.executor
    if ex.name == "slurm" and ctx.run.harness.device == "cuda" and ex.gpus_per_node == 0:
        out += _err(
            "harness.device = 'cuda' with executor.gpus_per_node = 0: the jobs would get no GPU and every "
            "run would fail at start. Set executor.gpus_per_node (one per process: tasks_per_node)."
        )
    return out


def _chat_template_missing(ctx: RunContext) -> list[Finding]:
    """``task.template: chat`` with a model folder whose tokenizer has no chat template: every run
    would fail at its first prompt (:meth:`harness.models.tasks.Task.prompt_text`). A hub id is not
    checked (that needs the hub); ``auto`` falls back to bare prompts."""
    from pathlib import Path

    from harness.models.names import has_chat_template

    folder = Path(ctx.run.model).expanduser()
    if ctx.run.task.template != "chat" or ctx.run.model in EMBEDDED_MODEL_SECTIONS or not folder.is_dir():
        return []
    if has_chat_template(folder):
        return []
    return _err(
        f"task.template = 'chat' with model folder {ctx.run.model!r}, whose tokenizer has no chat template "
        "(no chat_template in tokenizer_config.json, no chat_template.jinja): every run would fail at its "
        "first prompt. Use template 'bare' (or 'auto', which picks bare here), or a chat model's folder."
    )


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
    return _err(
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
        return _err(
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
        return _warn(
            f"{names} varies, but loss_type {lt} has no hard clip and ignores it: these cells differ only in name."
        )
    if is_on_policy(ctx):
        return _warn(
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
        out += _warn(
            f"{shown} set with loss_type {plugin.name}: the plugin declares the loss fields it reads "
            f"({reads}; {plugin.module}), so this has no effect on its runs and cells that differ "
            "only here differ only in name. Drop it from these cells (in a grid of several losses, set "
            "it only in the sub-grids of the losses that read it)."
        )
    if plugin.on_policy_equivalent and is_on_policy(ctx) and _verdict(ctx, plugin).equivalent_here:
        out += _warn(
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
        return _warn("loss_type luspo with importance_sampling_level token: LUSPO's paper uses 'sequence'.")
    if lt == "vespo" and level != "token":
        return _warn("loss_type vespo with importance_sampling_level sequence: VESPO expects 'token'.")
    if level == "sequence" and lt in ("bnpo", "dr_grpo", "dapo", "cispo"):
        return _warn(
            f"importance_sampling_level sequence with loss_type {lt}: the loss sums per-token terms, weighting "
            "each sequence by its length; GSPO is loss_type grpo."
        )
    return []


def rule_seed(ctx: RunContext) -> list[Finding]:
    """The seed against the task's split: its training items must not reach the SFT warm start's
    generator seeds (:data:`harness.config.schema.SFT_SEED_BASE`)."""
    seed, train_size = ctx.run.seed, ctx.run.task.train_size
    top = SFT_SEED_BASE - train_size
    if not 0 <= seed <= top:
        return _err(
            f"seed = {seed!r} must lie in [0, {top}]: it also seeds the task's training split, whose "
            f"{train_size} prompts must not reach the SFT warm start's seeds ({SFT_SEED_BASE} and up)."
        )
    return []


#: report_to names and the module each integration needs (transformers' integrations).
_REPORTERS = {
    "wandb": "wandb",
    "tensorboard": "tensorboard",
    "mlflow": "mlflow",
    "comet_ml": "comet_ml",
    "trackio": "trackio",
    "clearml": "clearml",
    "neptune": "neptune",
    "dvclive": "dvclive",
    "swanlab": "swanlab",
}


def rule_trainer_features(ctx: RunContext) -> list[Finding]:
    """Settings TRL accepts that fail once the trainer starts: a TRL eval loop without an eval
    dataset, a scheduler without its arguments, reward weights that do not match the task's rewards."""
    out: list[Finding] = []
    strategy = ctx.value("eval_strategy")
    if strategy not in (None, "no"):
        out += _err(
            f"trainer.eval_strategy = {strategy!r}: the harness gives TRL no eval dataset; it evaluates "
            "held-out prompts itself every harness.eval_steps. Drop eval_strategy."
        )
    if ctx.value("lr_scheduler_type") == "cosine_with_min_lr":
        kwargs = ctx.value("lr_scheduler_kwargs") or {}
        if not isinstance(kwargs, dict) or not {"min_lr", "min_lr_rate"} & set(kwargs):
            out += _err(
                "trainer.lr_scheduler_type = 'cosine_with_min_lr' needs trainer.lr_scheduler_kwargs with "
                "min_lr or min_lr_rate (e.g. {min_lr_rate: 0.1}); transformers raises at the first step."
            )
    weights = ctx.value("reward_weights")
    rewards = list(ctx.run.task.rewards)
    if weights is not None and len(weights) != len(rewards):
        out += _err(
            f"trainer.reward_weights = {weights!r} has {len(weights)} weight(s) but task.rewards = {rewards!r} "
            f"has {len(rewards)} function(s); give one weight per reward."
        )
    return out


def _report_to_names(ctx: RunContext) -> Any:
    """``report_to`` as a list of names (a single string becomes one), or as written when it is not
    a string or a list (:func:`rule_packages` refuses that shape)."""
    report_to = ctx.value("report_to") or []
    return [report_to] if isinstance(report_to, str) else report_to


def rule_report_to(ctx: RunContext) -> list[Finding]:
    """``report_to`` names integrations transformers knows (it raises for another when the trainer is
    built, after the queue wait on a cluster)."""
    names = _report_to_names(ctx)
    if not isinstance(names, list | tuple) or not [n for n in names if n not in ("all", "none")]:
        return []  # rule_packages names the shape; nothing to look up (transformers stays unimported)
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    unknown = [
        n
        for n in names
        if isinstance(n, str) and n not in INTEGRATION_TO_CALLBACK and n not in ("all", "none")
    ]
    if not unknown:
        return []
    return _err(
        f"trainer.report_to names {', '.join(map(repr, unknown))}, which transformers does not know; "
        f"use {', '.join(sorted(INTEGRATION_TO_CALLBACK))}, all or none."
    )


def rule_packages(ctx: RunContext) -> list[Finding]:
    """Optional packages the settings need that this machine lacks (vLLM, liger-kernel, report_to
    integrations); on a cluster they are the job environment's business, so SLURM runs are not checked."""
    if ctx.executor.name == "slurm":
        return []
    import importlib.util

    needed = []  # (the setting, as written in a message; module; distribution)
    if ctx.value("use_vllm"):
        needed.append(("trainer.use_vllm = true", "vllm", "vllm"))
    if ctx.value("use_liger_kernel"):
        needed.append(("trainer.use_liger_kernel = true", "liger_kernel", "liger-kernel"))
    names = _report_to_names(ctx)
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        return _err(
            f"trainer.report_to = {ctx.value('report_to')!r}: name integrations as strings, e.g. [wandb]."
        )
    for name in names:
        if name in _REPORTERS:
            needed.append((f"trainer.report_to names {name!r}", _REPORTERS[name], _REPORTERS[name]))
    out: list[Finding] = []
    for setting, module, dist in needed:
        if importlib.util.find_spec(module) is None:
            out += _err(f"{setting} but {dist} is not installed here; install it or drop the setting.")
    return out


def rule_peft(ctx: RunContext) -> list[Finding]:
    """The ``peft:`` section (LoRA): what peft's ``LoraConfig`` or TRL would refuse only once the run
    starts (:func:`harness.config.lora.problems`), and peft itself where a local run needs it."""
    section = ctx.run.settings.get(lora.SECTION)
    if section is None:
        return []
    embedded = ctx.run.model in EMBEDDED_MODEL_SECTIONS
    return [Finding("error", m) for m in lora.problems(section, ctx.trainer, ctx.run.model, embedded)]


def rule_sharding(ctx: RunContext) -> list[Finding]:
    """``trainer.deepspeed`` and ``trainer.fsdp``: what transformers, DeepSpeed or accelerate would
    refuse or ignore only once the run starts (:mod:`harness.config.scale`)."""
    import importlib.util

    from harness.config import scale

    device = resolve_device(ctx.run.harness.device, ctx.executor)
    out = [Finding("error", m) for m in scale.fsdp_problems(ctx.trainer.get("fsdp"), device)]
    ds = ctx.config.get("deepspeed") if ctx.config is not None else None  # None: dropped as unreadable
    if ds is None or importlib.util.find_spec("deepspeed") is None:
        return out  # without deepspeed here, _trl_kwargs has said what it could
    problems = scale.deepspeed_problems(ds, ctx.config, ctx.executor.num_processes, device, None)
    return out + [Finding("error", m) for m in problems]


def rule_device(ctx: RunContext) -> list[Finding]:
    """A CUDA run must find a GPU where it executes; a SLURM job's node is not this machine."""
    if ctx.run.harness.device == "cuda" and ctx.executor.name != "slurm" and not cuda_available():
        return _err("harness.device = 'cuda' but this machine has no CUDA device; use 'cpu' or 'auto'.")
    return []


def rule_gpus_per_process(ctx: RunContext) -> list[Finding]:
    """One process per GPU: a run starts ``tasks_per_node`` processes per node and each trains on the
    GPU of its local rank, so GPUs beyond ``tasks_per_node`` sit idle; with one process, transformers
    spreads it over every visible GPU with ``DataParallel`` instead (TRL's batch checks see 1 process)."""
    ex = ctx.executor
    if ex.name != "slurm" or ex.gpus_per_node <= ex.tasks_per_node:  # fewer GPUs: the executor's error
        return []
    if ex.tasks_per_node == 1:
        happens = "one process per node sees them all (transformers then uses DataParallel, not DDP)"
    else:
        happens = f"{ex.tasks_per_node} processes per node use one each and the rest stay idle"
    return _warn(
        f"executor.gpus_per_node = {ex.gpus_per_node} with executor.tasks_per_node = {ex.tasks_per_node}: "
        f"{happens}. Set tasks_per_node = gpus_per_node for one process per GPU."
    )


def rule_tiny_template(ctx: RunContext) -> list[Finding]:
    """The embedded models' templates: ``tiny`` has no chat template; ``tiny-chat`` was warm-started
    on chat prompts only, so bare prompts are text it never saw (allowed, with a warning)."""
    if ctx.run.model == TINY and ctx.run.task.template == "chat":
        return _err(
            "task.template = 'chat' with model 'tiny': the tiny model's character tokenizer has no chat "
            "template; use 'bare' or 'auto', or a chat model such as 'tiny-chat'."
        )
    if ctx.run.model == TINY_CHAT and ctx.run.task.template == "bare":
        return _warn(
            "task.template = 'bare' with model 'tiny-chat': it was warm-started on chat prompts only, so "
            "bare prompts are unlike anything it learnt; use 'chat' or 'auto'."
        )
    if ctx.run.model == TINY_STEPS and ctx.run.task.template != "steps":
        return _err(
            f"task.template = {ctx.run.task.template!r} with model 'tiny-steps': it was warm-started on "
            "worked chains ('0-4=-4;-4-8=-12;#-12'), whose answer only the 'steps' template reads; set "
            "task.template: steps."
        )
    if ctx.run.model in (TINY, TINY_CHAT) and ctx.run.task.template == "steps":
        return _err(
            f"task.template = 'steps' with model {ctx.run.model!r}: it was warm-started on answers alone, "
            "not on worked chains; use model: tiny-steps, or the template 'auto'."
        )
    return []


def rule_context_length(ctx: RunContext) -> list[Finding]:
    """The embedded models' context, ``max_position_embeddings``: the warm start's longest sequence
    must fit it (else building the model fails at the start of every run), and the longest prompt
    plus the tokens generated (``max_completion_length``; ``harness.eval_max_new_tokens`` for the
    greedy eval) should (else generation reaches positions the model was not built for). Lengths
    from :func:`embedded_lengths`; the prompts are those of the training split of seed 0 and the
    eval split, in the run's template (other seeds draw other prompts of the same kind)."""
    spec = ctx.run.tiny
    if ctx.run.model not in (TINY, TINY_CHAT, TINY_STEPS) or spec is None or _cached_check_task(ctx.run.task):
        return []
    if ctx.run.model == TINY_STEPS:
        template = "steps"
    else:
        template = "bare" if ctx.run.model == TINY or ctx.run.task.template == "bare" else "chat"
    sft_prompt, longest, prompt = embedded_lengths(ctx.run.model, spec, ctx.run.task, template)
    section, context = spec.SECTION, spec.max_position_embeddings
    generated = {"trainer.max_completion_length": ctx.value("max_completion_length") or 0}
    if ctx.run.harness.eval_max_new_tokens is not None:  # else the eval generates as many
        generated["harness.eval_max_new_tokens"] = ctx.run.harness.eval_max_new_tokens
    need = max(longest, prompt + max(generated.values()))
    if longest > context:
        return _err(
            f"{section}.max_position_embeddings = {context}, but the warm start's sequences for this task "
            f"reach {longest} tokens (prompts up to {sft_prompt}): building model {ctx.run.model!r} would fail "
            f"at the start of every run. Raise {section}.max_position_embeddings to at least {need} (the "
            "prompts and the tokens generated included), or give the task shorter prompts."
        )
    over = [f"{key} = {n}" for key, n in generated.items() if prompt + n > context]
    if over:
        return _warn(
            f"{' and '.join(over)} after prompts of up to {prompt} tokens (model {ctx.run.model!r}, "
            f"{template} prompts of the training split of seed 0 and the eval split) reach position "
            f"{prompt + max(generated.values())}, past {section}.max_position_embeddings = {context}: "
            f"positions the model was not built for (its warm start's longest sequence is {longest}). "
            f"Generate at most {context - prompt} tokens, or raise {section}.max_position_embeddings to "
            f"{need} (more if other seeds draw longer prompts)."
        )
    return []


#: The fields of the embedded models' specs that change their SFT data or tokenizer (so the lengths).
_LENGTH_FIELDS = (
    "sft_examples",
    "seed",
    "label_noise",
    "format_noise",
    "vocab_size",
    "skip_noise",
    "repeat_noise",
    "redundant_noise",
)


@functools.lru_cache(maxsize=256)
def embedded_lengths(model: str, spec: Any, task: Any, template: str) -> tuple[int, int, int]:
    """``(longest SFT prompt, longest SFT sequence, longest prompt of a run's splits)`` in tokens of
    embedded ``model`` (tiny, tiny-chat) for ``task`` in ``template``
    (:func:`harness.models.tiny.sft_lengths`, :func:`harness.models.tiny_chat.sft_lengths`). Memoised in memory
    and on disk (:mod:`harness.config.verdicts`), keyed by what changes them (the build format, the spec's
    data fields, the task's dataset and split sizes, the template, the tokenizer and dataset
    libraries' versions): a second or a few once, nothing after, and nothing imported."""
    from harness.config import verdicts
    from harness.models import tiny as models
    from harness.models import tiny_chat, tiny_steps

    if model == TINY:
        fmt, compute = models.BUILD_FORMAT, lambda: list(models.sft_lengths(spec, task))
    elif model == TINY_STEPS:
        fmt, compute = tiny_steps.STEPS_BUILD_FORMAT, lambda: list(tiny_steps.sft_lengths(spec, task))
    else:
        fmt, compute = tiny_chat.CHAT_BUILD_FORMAT, lambda: list(tiny_chat.sft_lengths(spec, task, template))
    fields = {k: getattr(spec, k) for k in _LENGTH_FIELDS if hasattr(spec, k)}
    sizes = {"train_size": task.train_size, "eval_size": task.eval_size}
    value = verdicts.memo(
        "embedded-lengths",
        {"model": model, "format": fmt, "template": template,
         "key": canonical_json({"spec": fields, "task": {"name": task.name, "kwargs": dict(task.kwargs), **sizes}}),
         "versions": verdicts.versions("transformers", "tokenizers", "reasoning-gym")},
        compute,
        valid=lambda v: isinstance(v, list) and len(v) == 3 and all(isinstance(x, int) for x in v),
    )  # fmt: skip
    return value[0], value[1], value[2]


def rule_task_and_model(ctx: RunContext) -> list[Finding]:
    """reasoning-gym's verdict on the task's dataset and kwargs; the model names a folder that holds
    a model, the tiny model or a hub id."""
    from harness.models.names import check_model

    out = [f for p in _cached_check_task(ctx.run.task) for f in _err(f"task: {p}")]
    return out + [f for p in check_model(ctx.run.model) for f in _err(f"model: {p}")]


@functools.lru_cache(maxsize=256)
def _cached_check_task(spec) -> tuple[str, ...]:
    """``check_task`` once per distinct TaskSpec (hashable, frozen): a 1,000-seed grid checks once."""
    from harness.models.tasks import check_task

    return tuple(check_task(spec))


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
    rule_trainer_features,
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
    run: RunSpec, executor: ExecutorSettings, varying_keys: tuple[str, ...], clip_siblings: int = 1
) -> list[Finding]:
    """All findings for one run: TRL's ``GRPOConfig`` first, then every rule of :data:`RULES`."""
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
        findings += _err(f"TRL's GRPOConfig rejects these settings (on {where}): {verdict['error']}{fix}")
    ctx = RunContext(run, dict(run.trainer), verdict["values"], varying_keys, clip_siblings, executor)
    for rule in RULES:
        try:
            findings += rule(ctx)
        except Exception as e:  # a rule must never hide the others
            findings += _err(f"{rule.__name__} could not check this run: {type(e).__name__}: {e}")
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
            findings += _err(
                f"trainer.deepspeed = {ds!r} is a folder; give the path of a DeepSpeed JSON config file in it, "
                "or the config itself as a mapping."
            )
        elif not os.path.isfile(ds):  # transformers opens it as written: no ~ expansion
            findings += _err(
                f"trainer.deepspeed = {ds!r}: no such file"
                f"{'' if os.path.isabs(ds) else f' (relative to {os.getcwd()})'}; give the path of a "
                "DeepSpeed JSON config on a filesystem the jobs see, or the config itself as a mapping."
            )
        else:
            try:
                config = scale.deepspeed_config(ds)
            except (OSError, ValueError) as e:
                findings += _err(
                    f"trainer.deepspeed = {ds!r}: the file does not parse as JSON ({e}); fix the file."
                )
    else:
        config = ds
    if not findings:
        where = "trainer.deepspeed" if not isinstance(ds, str) else f"trainer.deepspeed = {ds!r}"
        findings += [Finding("error", m) for m in scale.shape_problems(where, config)]
    if findings or importlib.util.find_spec("deepspeed") is None:
        del kwargs["deepspeed"]  # TRL checks the rest without it
    if importlib.util.find_spec("deepspeed") is None and not elsewhere:
        findings += _err(
            f"trainer.deepspeed = {ds!r} but deepspeed is not installed here; install it "
            "(pip install deepspeed, or the package's deepspeed extra) or drop the setting."
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
    for run in plan.runs:
        executor = _run_executor(run, plan.grid.executor, executors, validation)
        if executor is not None:
            validation.findings += validate_run(run, executor, plan.varying_keys, siblings[run.run_id])
    validation.findings += _report_cannot_act(plan) + _unused_sections(plan)
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
    """The ``report:`` section's choices no run can fill: the greedy accuracy when no run evaluates
    (``harness.eval_steps = 0`` everywhere): as ``report.metric``, the score of every table, an
    error (the tables would be empty); as a panel of ``curves`` or ``metrics``, a warning. And a
    ``baseline`` of KEY=VALUE pairs that no cell has (:func:`_baseline_missing`), an error: the
    report would compare nothing with it."""
    from harness import layout
    from harness.config.findings import metric_warning

    report = plan.grid.report or {}
    out = _baseline_missing(plan, report.get("baseline"))
    for key in ("metric", "curves", "metrics"):
        names = report.get(key)
        for name in [names] if isinstance(names, str) else names or []:
            said = metric_warning(name) if isinstance(name, str) else None
            if said:
                out.append(Finding("warning", f"report.{key}: {said}"))
    if not plan.runs or any(run.harness.eval_steps > 0 for run in plan.runs):
        return out
    if report.get("metric") == layout.EVAL_ACCURACY:
        out.append(
            Finding(
                "error",
                f"report.metric = {layout.EVAL_ACCURACY}, but no run evaluates (harness.eval_steps = 0): every "
                "table of the report would be empty. Set harness.eval_steps > 0, or score on reward.",
            )
        )
    named = [k for k in ("curves", "metrics") if layout.EVAL_ACCURACY in (report.get(k) or [])]
    if named:
        keys = " and ".join(f"report.{k}" for k in named)
        out.append(
            Finding(
                "warning",
                f"{keys} name {layout.EVAL_ACCURACY}, but no run evaluates (harness.eval_steps = 0): its panels "
                "would be empty. Set harness.eval_steps > 0, or drop it from the report section.",
            )
        )
    return out


def _baseline_missing(plan: Plan, baseline: Any) -> list[Finding]:
    """``report.baseline`` as KEY=VALUE pairs that no run of the plan has (a variant label, without
    ``=``, is left to the report). A key is a run setting or the last part of one the grid varies
    (``max_digits``); a trainer field the runs leave unset takes TRL's default; values compare as
    text, or as numbers where both read as one."""
    from harness.config.spec import normalize_key

    if not isinstance(baseline, str) or "=" not in baseline or not plan.runs:
        return []
    pairs = [tuple(s.strip() for s in part.partition("=")[::2]) for part in baseline.split(",")]
    keys = {k.rsplit(".", 1)[-1]: k for k in plan.varying_keys}

    def value(run: RunSpec, key: str) -> Any:
        dotted = keys.get(key) or normalize_key(key)
        got = run.get(dotted, _UNSET)
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
