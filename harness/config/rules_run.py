"""Validation rules between a run's sections, on its model and on where it executes.

Settings that cannot take effect (a checkpoint period past the last step, a reference sync never
reached, a chat template the model lacks), the seed against the task's split, the embedded models'
templates and context length, the task and model names, LoRA and sharding, optional packages,
``report_to``, the device and the GPUs per process. Each rule is ``(RunContext) -> list[Finding]``
(:mod:`harness.config.rules_base`), listed in :data:`harness.config.validate.RULES`.
"""

from __future__ import annotations

import functools
from typing import Any

from harness.config import lora
from harness.config.rules_base import Finding, RunContext, err, warn
from harness.settings.schema import (
    EMBEDDED_MODEL_SECTIONS,
    SFT_SEED_BASE,
    TINY,
    TINY_CHAT,
    TINY_STEPS,
    canonical_json,
)
from harness.trl_boundary import (
    cuda_available,
    resolve_device,
)


def rule_cannot_act(ctx: RunContext) -> list[Finding]:
    """Settings that cannot take effect in this run, each with what would make them act: a warning
    where the run still trains as written, an error where every such run would fail."""
    out: list[Finding] = []
    steps = ctx.value("max_steps")
    every = ctx.run.harness.checkpoint_steps
    if isinstance(steps, int) and steps > 0 and every > steps:
        out += warn(
            f"harness.checkpoint_steps = {every} > trainer.max_steps = {steps}: no periodic checkpoint is "
            f"written, so a run killed without warning starts again from step 0. Set it to at most {steps}."
        )
    period = ctx.value("ref_model_sync_steps")
    if ctx.value("sync_ref_model") and ctx.value("beta") and isinstance(steps, int) and steps > 0:
        if isinstance(period, int) and period >= steps:
            out += warn(
                f"trainer.ref_model_sync_steps = {period} >= trainer.max_steps = {steps}: the reference is "
                f"never synced within the run (TRL syncs after every {period}th step). Use a period below {steps}."
            )
        if ctx.value("ref_model_mixup_alpha") == 0:
            out += warn(
                "trainer.ref_model_mixup_alpha = 0 with sync_ref_model: each sync keeps the reference as it "
                "is (alpha x policy + (1 - alpha) x reference). Use alpha > 0 (TRL's default is 0.6; 1 is a hard sync)."
            )
    out += _chat_template_missing(ctx)
    ex = ctx.executor
    if ex.name == "slurm" and ctx.run.harness.device == "cuda" and ex.gpus_per_node == 0:
        out += err(
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
    return err(
        f"task.template = 'chat' with model folder {ctx.run.model!r}, whose tokenizer has no chat template "
        "(no chat_template in tokenizer_config.json, no chat_template.jinja): every run would fail at its "
        "first prompt. Use template 'bare' (or 'auto', which picks bare here), or a chat model's folder."
    )


def rule_sampled_eval(ctx: RunContext) -> list[Finding]:
    """The sampled eval (``harness.sampled_eval_*``): it runs at the greedy eval's steps, so not
    without them, and on prompts of the eval split, so on no more than it has."""
    h, eval_size = ctx.run.harness, ctx.run.task.eval_size
    out: list[Finding] = []
    if h.sampled_eval_n > 0 and h.eval_steps == 0:
        out += err(
            f"harness.sampled_eval_n = {h.sampled_eval_n} with harness.eval_steps = 0: the sampled eval "
            "runs at the greedy eval's steps, and this run has none, so nothing would be sampled. Set "
            "harness.eval_steps > 0, or drop harness.sampled_eval_n."
        )
    written = {
        k
        for k in ctx.run.settings.get("harness") or {}
        if k.startswith("sampled_eval_") and k != "sampled_eval_n"
    }
    if h.sampled_eval_n == 0 and written:
        out += warn(
            f"harness.{', harness.'.join(sorted(written))} set with harness.sampled_eval_n = 0: the sampled eval "
            f"is off in this run, so {'they have' if len(written) > 1 else 'it has'} no effect. Set "
            "harness.sampled_eval_n > 0, or drop them."
        )
    if h.sampled_eval_prompts is not None and h.sampled_eval_prompts > eval_size:
        out += err(
            f"harness.sampled_eval_prompts = {h.sampled_eval_prompts} > task.eval_size = {eval_size}: the "
            f"eval split has {eval_size} prompts. Set harness.sampled_eval_prompts to at most {eval_size} "
            "(or leave it unset for all of them), or raise task.eval_size."
        )
    return out


def rule_seed(ctx: RunContext) -> list[Finding]:
    """The seed against the task's split: its training items must not reach the SFT warm start's
    generator seeds (:data:`harness.settings.schema.SFT_SEED_BASE`)."""
    seed, train_size = ctx.run.seed, ctx.run.task.train_size
    top = SFT_SEED_BASE - train_size
    if not 0 <= seed <= top:
        return err(
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
    return err(
        f"trainer.report_to names {', '.join(map(repr, unknown))}, which transformers does not know; "
        f"use {', '.join(sorted(INTEGRATION_TO_CALLBACK))}, all or none."
    )


#: Trackers the package's ``trackers`` extra installs (pyproject.toml).
_TRACKERS_EXTRA = ("wandb", "trackio", "tensorboard")


def rule_packages(ctx: RunContext) -> list[Finding]:
    """Optional packages the settings need that this machine lacks (vLLM, liger-kernel, report_to
    integrations), each with its install command; on a cluster they are the job environment's
    business, so SLURM runs are not checked. A message names the setting and the package, not the
    run, so every run that lacks a package shares one (a grid lists it once, with its runs)."""
    if ctx.executor.name == "slurm":
        return []
    import importlib.util

    needed = []  # (the setting, as written in a message; module; distribution; the install command)
    if ctx.value("use_vllm"):
        needed.append(("trainer.use_vllm = true", "vllm", "vllm", "pip install vllm"))
    if ctx.value("use_liger_kernel"):
        needed.append(
            ("trainer.use_liger_kernel = true", "liger_kernel", "liger-kernel", "pip install liger-kernel")
        )
    names = _report_to_names(ctx)
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        return err(
            f"trainer.report_to = {ctx.value('report_to')!r}: name integrations as strings, e.g. [wandb]."
        )
    for name in dict.fromkeys(names):
        if name in _REPORTERS:
            dist = _REPORTERS[name]
            how = f"pip install {dist}"
            if dist in _TRACKERS_EXTRA:
                how = f"pip install 'grpo-harness[trackers]' (or {how})"
            needed.append((f"trainer.report_to names {name!r}", dist, dist, how))
    out: list[Finding] = []
    for setting, module, dist, how in needed:
        if importlib.util.find_spec(module) is None:
            out += err(f"{setting} but {dist} is not installed here; {how}, or drop the setting.")
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
        return err("harness.device = 'cuda' but this machine has no CUDA device; use 'cpu' or 'auto'.")
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
    return warn(
        f"executor.gpus_per_node = {ex.gpus_per_node} with executor.tasks_per_node = {ex.tasks_per_node}: "
        f"{happens}. Set tasks_per_node = gpus_per_node for one process per GPU."
    )


def rule_tiny_template(ctx: RunContext) -> list[Finding]:
    """The embedded models' templates: ``tiny`` has no chat template; ``tiny-chat`` was warm-started
    on chat prompts only, so bare prompts are text it never saw (allowed, with a warning)."""
    if ctx.run.model == TINY and ctx.run.task.template == "chat":
        return err(
            "task.template = 'chat' with model 'tiny': the tiny model's character tokenizer has no chat "
            "template; use 'bare' or 'auto', or a chat model such as 'tiny-chat'."
        )
    if ctx.run.model == TINY_CHAT and ctx.run.task.template == "bare":
        return warn(
            "task.template = 'bare' with model 'tiny-chat': it was warm-started on chat prompts only, so "
            "bare prompts are unlike anything it learnt; use 'chat' or 'auto'."
        )
    if ctx.run.model == TINY_STEPS and ctx.run.task.template != "steps":
        return err(
            f"task.template = {ctx.run.task.template!r} with model 'tiny-steps': it was warm-started on "
            "worked chains ('0-4=-4;-4-8=-12;#-12'), whose answer only the 'steps' template reads; set "
            "task.template: steps."
        )
    if ctx.run.model in (TINY, TINY_CHAT) and ctx.run.task.template == "steps":
        return err(
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
        return err(
            f"{section}.max_position_embeddings = {context}, but the warm start's sequences for this task "
            f"reach {longest} tokens (prompts up to {sft_prompt}): building model {ctx.run.model!r} would fail "
            f"at the start of every run. Raise {section}.max_position_embeddings to at least {need} (the "
            "prompts and the tokens generated included), or give the task shorter prompts."
        )
    over = [f"{key} = {n}" for key, n in generated.items() if prompt + n > context]
    if over:
        return warn(
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
    and on disk (:mod:`harness.verdicts`), keyed by what changes them (the build format, the spec's
    data fields, the task's dataset and split sizes, the template, the tokenizer and dataset
    libraries' versions): a second or a few once, nothing after, and nothing imported."""
    from harness import verdicts
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

    out = [f for p in _cached_check_task(ctx.run.task) for f in err(f"task: {p}")]
    return out + [f for p in check_model(ctx.run.model) for f in err(f"model: {p}")]


@functools.lru_cache(maxsize=256)
def _cached_check_task(spec) -> tuple[str, ...]:
    """``check_task`` once per distinct TaskSpec (hashable, frozen): a 1,000-seed grid checks once."""
    from harness.models.tasks import check_task

    return tuple(check_task(spec))
