"""Everything that knows TRL's insides, in one place.

The rest of the harness asks this module, never TRL directly, about: TRL's built-in losses (the
values TRL accepts for ``loss_type``, read from its field help, :func:`loss_types`; the fields each
reads, :data:`TRL_LOSS_READS`, which :func:`stated_loss_reads` reads from TRL's code; the names
figures and tables show, :func:`loss_names`; every other list of them derives from this record) and
``importance_sampling_level``; ``GRPOConfig``'s fields and defaults; the device a run executes on; TRL's verdict on a run's
``GRPOConfig`` keyword arguments (memoised on disk by :mod:`harness.verdicts`); and the
private names of ``GRPOTrainer`` that :class:`harness.train.trainer.HarnessGRPOTrainer` overrides or
reads (:data:`TRL_PRIVATE_NAMES`, checked against the installed TRL by :func:`missing_private_names`).

It knows nothing of loss plugins: a run's keyword arguments, a plugin's reduction in place of its
name, are :func:`harness.losses.grpo_config_kwargs`, which asks this module what TRL takes.

Importing this module imports neither torch nor TRL: each function imports what it needs. Its
record of the losses is plain data, which the analysis takes too (it never calls a function here
that asks TRL).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import os
import re
import sys
import warnings
from collections.abc import Mapping
from typing import Any

from harness.settings.schema import ExecutorSettings, canonical_json, describe_fields, is_desc

# --- TRL's built-in losses: the one record of them, which every other list derives from ------------------
#
# What TRL states about its losses is read from the installed TRL where it states it: the loss types
# from ``GRPOConfig.loss_type``'s field help (:func:`loss_types`), the fields each loss reads from the
# branches of ``GRPOTrainer._compute_loss`` (:func:`stated_loss_reads`). The constants below are the
# same facts as the TRL version the harness pins (1.16) states them, for what must be known without
# asking TRL: the analysis (which never imports it), the benchmark's table, the harness's own module
# constants. tests/test_structure.py holds them against the installed TRL, so a TRL that adds a loss
# fails there and names this record as the one place to add it; tests/test_loss_facts.py checks that
# a loss added here reaches every list derived from it.

#: TRL's ``GRPOConfig.loss_type`` values, in the order of the field's help.
KNOWN_LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
#: The loss-shaping ``GRPOConfig`` fields each TRL loss reads in ``GRPOTrainer._compute_loss``: the
#: clipped surrogates read the clip range and ``delta`` (``clamp(r, max=delta)``); cispo reads only
#: ``epsilon_high`` (``min(r, epsilon_high)``, which is ``epsilon`` when unset, TRL's ``__init__``);
#: sapo its temperatures; vespo its gamma weight's k and lambda. Every loss also reads
#: ``importance_sampling_level`` (the ratio's level).
TRL_LOSS_READS = {
    **{lt: ("epsilon", "epsilon_high", "delta") for lt in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")},
    "cispo": ("epsilon", "epsilon_high"),
    "sapo": ("sapo_temperature_pos", "sapo_temperature_neg"),
    "vespo": ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg"),
}
#: The TRL losses that cap the ratio at a field, not clip it to 1 +- a range: cispo's
#: ``min(r, epsilon_high)`` (MiniMax-M1, arXiv:2506.13585 eq. 4).
TRL_RATIO_CAPS = {"cispo": "epsilon_high"}
#: Losses a paper names that are a TRL loss type at other settings, as TRL documents them: GSPO
#: (arXiv:2507.18071) is ``loss_type: grpo`` with sequence-level importance sampling.
NAMED_LOSS_VARIANTS: dict[str, dict[str, str]] = {
    "gspo": {"loss_type": "grpo", "importance_sampling_level": "sequence"},
}


def loss_names() -> tuple[str, ...]:
    """The built-in losses by the names figures, tables and the benchmark show: TRL's loss types in
    :data:`KNOWN_LOSS_TYPES`'s order, then the named variants (:data:`NAMED_LOSS_VARIANTS`)."""
    return (*KNOWN_LOSS_TYPES, *NAMED_LOSS_VARIANTS)


#: The loss-specific fields whose effect vanishes where every ratio is 1 (on-policy): VESPO's
#: (k, lambda), since phi(1) = e^lambda * 1^k * e^-lambda = 1 for every k and lambda (VESPO's gamma
#: weight); SAPO's temperatures, since its gate (4 / tau) sigmoid(tau (r - 1)) has slope 1 at r = 1
#: for every tau (TRL's sapo branch of ``_compute_loss``), so the gradient at r = 1 is GRPO's. (The
#: clip range and ``delta`` act only off-policy for every loss that reads them.)
TRL_OFF_POLICY_ONLY_FIELDS = (
    "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg",
    "sapo_temperature_pos", "sapo_temperature_neg",
)  # fmt: skip


def _fields_read_by(several: bool) -> tuple[str, ...]:
    """The fields of :data:`TRL_LOSS_READS` read by more than one loss (``several``) or by exactly
    one, in the table's order."""
    readers: dict[str, int] = {}
    for fields in TRL_LOSS_READS.values():
        for f in fields:
            readers[f] = readers.get(f, 0) + 1
    return tuple(f for f, n in readers.items() if (n > 1) == several)


def specific_loss_fields() -> tuple[str, ...]:
    """The loss fields only one TRL loss reads (SAPO's temperatures, VESPO's k and lambda): set for
    a run whose loss does not read them, they are refused
    (:func:`harness.config.rules_trainer.rule_loss_fields`)."""
    return _fields_read_by(several=False)


def loss_fields() -> tuple[str, ...]:
    """The ``GRPOConfig`` fields that shape TRL's loss formulas and reach a plugin: those several
    losses read (the clip range and ``delta``), ``importance_sampling_level``, then
    :func:`specific_loss_fields`. A plugin declares which of them it reads
    (``harness.losses.register_loss(reads=...)``)."""
    return (*_fields_read_by(several=True), "importance_sampling_level", *specific_loss_fields())


def stated_loss_reads() -> dict[str, tuple[str, ...]]:
    """``{loss type: the GRPOConfig fields its branch reads}``, as the installed TRL's
    ``GRPOTrainer._compute_loss`` states them: the ``if self.loss_type ...`` chain that computes
    ``per_token_loss``, each branch's ``self.args.<field>`` and the trainer attributes that
    ``GRPOTrainer.__init__`` sets from ``args`` (``self.epsilon_high`` reads ``epsilon_high`` and
    ``epsilon``), in :func:`loss_fields`' order, a field outside it last. Imports TRL.
    Empty when TRL's code has no such chain."""
    import inspect
    import textwrap

    from trl import GRPOTrainer

    def tree(function: Any) -> ast.AST:
        return ast.parse(textwrap.dedent(inspect.getsource(function)))

    from_args = _attributes_from_args(tree(GRPOTrainer.__init__))
    out: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(tree(GRPOTrainer._compute_loss)):
        if isinstance(node, ast.If) and _assigns(node, "per_token_loss") and _loss_types_tested(node.test):
            for loss_types_, body in _branches(node):
                read = {f for n in body for f in _fields_read(n, from_args)}
                order = {f: i for i, f in enumerate(loss_fields())}
                for lt in loss_types_:
                    out[lt] = tuple(sorted(read, key=lambda f: (order.get(f, len(order)), f)))
            break
    return out


def _attributes_from_args(init: ast.AST) -> dict[str, set[str]]:
    """``{attribute: the args fields it is set from}`` of ``self.<attribute> = ...args.<field>...``."""
    out: dict[str, set[str]] = {}
    for node in ast.walk(init):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    out.setdefault(target.attr, set()).update(_args_fields(node.value))
    return out


def _args_fields(node: ast.AST) -> set[str]:
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "args"
    }


def _fields_read(node: ast.AST, from_args: Mapping[str, set[str]]) -> set[str]:
    """The GRPOConfig fields a statement reads: ``self.args.<field>``, and the fields of a trainer
    attribute set from ``args``."""
    out = set()
    for n in ast.walk(node):
        if not isinstance(n, ast.Attribute):
            continue
        if isinstance(n.value, ast.Attribute) and n.value.attr == "args" and _is_self(n.value.value):
            out.add(n.attr)
        elif _is_self(n.value) and n.attr in from_args and n.attr != "loss_type":
            out |= from_args[n.attr]
    return out


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _assigns(node: ast.If, name: str) -> bool:
    return any(
        isinstance(t, ast.Name) and t.id == name
        for n in ast.walk(node)
        if isinstance(n, ast.Assign)
        for t in n.targets
    )


def _loss_types_tested(test: ast.AST) -> tuple[str, ...]:
    """The loss types ``self.loss_type == "x"`` or ``self.loss_type in ["x", ...]`` tests; () else."""
    if not (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Attribute)
        and test.left.attr == "loss_type"
    ):
        return ()
    right = test.comparators[0]
    if isinstance(test.ops[0], ast.Eq) and isinstance(right, ast.Constant):
        return (right.value,)
    if isinstance(test.ops[0], ast.In) and isinstance(right, ast.List | ast.Tuple):
        return tuple(e.value for e in right.elts if isinstance(e, ast.Constant))
    return ()


def _branches(node: ast.If) -> list[tuple[tuple[str, ...], list[ast.stmt]]]:
    """The ``(loss types, body)`` of each branch of an ``if``/``elif`` chain on ``self.loss_type``."""
    out = []
    while isinstance(node, ast.If) and _loss_types_tested(node.test):
        out.append((_loss_types_tested(node.test), node.body))
        node = node.orelse[0] if len(node.orelse) == 1 else None
    return out


#: ``GRPOTrainer`` methods :class:`harness.train.trainer.HarnessGRPOTrainer` overrides (and calls through
#: ``super()``), and instance attributes the harness reads; all private to TRL, so an upgrade may
#: rename them. :func:`missing_private_names` says which the installed TRL lacks.
TRL_PRIVATE_METHODS = (
    "_compute_loss",
    "_get_per_token_logps_and_entropies",
    "_generate_and_score_completions",
    "_prepare_inputs",
)
TRL_PRIVATE_ATTRIBUTES = ("_step", "_logs")  # set in GRPOTrainer.__init__
TRL_PRIVATE_NAMES = (*TRL_PRIVATE_METHODS, *TRL_PRIVATE_ATTRIBUTES)


def grpo_config_type() -> type:
    """TRL's ``GRPOConfig`` class (importing TRL, torch and transformers on first use)."""
    from trl import GRPOConfig

    return GRPOConfig


def _grpo_config_facts() -> dict[str, Any]:
    """GRPOConfig's field types and JSON defaults, from the verdict memo (TRL is imported on a miss)."""
    from harness import verdicts

    def ask() -> dict[str, Any]:
        cls = grpo_config_type()
        defaults = verdicts.jsonable_items(
            (f.name, f.default if f.default is not dataclasses.MISSING else f.default_factory())
            for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        return {"types": describe_fields(cls), "defaults": defaults, "loss_types": _declared_loss_types(cls)}

    def valid(facts: Any) -> bool:
        return (
            isinstance(facts, dict)
            and isinstance(facts.get("types"), dict)
            and isinstance(facts.get("defaults"), dict)
            and isinstance(facts.get("loss_types"), list)
            and all(isinstance(n, str) for n in facts["loss_types"])
            and {"loss_type", "max_steps", "num_generations", "learning_rate"} <= set(facts["types"])
            and all(is_desc(d) for d in facts["types"].values())
        )

    key = verdicts.versions(*verdicts.TRL_STACK)
    return verdicts.memo("grpo-config-fields", key, ask, valid)


#: GRPOConfig fields whose declared type is narrower than what TRL accepts (its field help and
#: ``__post_init__``): ``scale_rewards`` takes True/False for "group"/"none".
TRAINER_TYPE_FIXES = {"scale_rewards": {"union": ["str", "bool"]}}


@functools.cache
def grpo_config_fields() -> dict[str, Any]:
    """``{field: described type}`` of TRL's ``GRPOConfig`` (:func:`harness.settings.schema.describe_hint`'s
    grammar), with :data:`TRAINER_TYPE_FIXES` applied; memoised on disk per TRL stack version."""
    types = dict(_grpo_config_facts()["types"])
    types.update({k: v for k, v in TRAINER_TYPE_FIXES.items() if k in types})
    return types


def _declared_loss_types(cls: type) -> list[str]:
    """The loss types ``GRPOConfig.loss_type``'s field help declares ("Supported values are 'grpo',
    ..., and 'vespo'."), in its order; empty when the help has no such sentence."""
    field = cls.__dataclass_fields__.get("loss_type")
    text = field.metadata.get("help", "") if field is not None else ""
    found = re.search(r"Supported values are ([^.]*)\.", text)
    return re.findall(r"'(\w+)'", found.group(1)) if found else []


@functools.cache
def loss_types() -> tuple[str, ...]:
    """The values the installed TRL takes for ``loss_type``, read from ``GRPOConfig``'s field help
    (memoised with its field types); :data:`KNOWN_LOSS_TYPES` when the help lists none."""
    return tuple(_grpo_config_facts()["loss_types"]) or KNOWN_LOSS_TYPES


@functools.cache
def grpo_config_defaults() -> dict[str, Any]:
    """``{field: default}`` of TRL's ``GRPOConfig`` for the fields whose default is JSON data."""
    return _grpo_config_facts()["defaults"]


def missing_private_names() -> list[str]:
    """The names of :data:`TRL_PRIVATE_NAMES` the installed TRL's ``GRPOTrainer`` lacks (methods
    looked up on the class, attributes found as ``self.<name> =`` in its ``__init__`` source)."""
    import inspect

    from trl import GRPOTrainer

    init = inspect.getsource(GRPOTrainer.__init__)
    missing = [n for n in TRL_PRIVATE_METHODS if not callable(getattr(GRPOTrainer, n, None))]
    missing += [n for n in TRL_PRIVATE_ATTRIBUTES if f"self.{n} =" not in init]
    return missing


def reuses_current_logps(value: Any) -> bool:
    """TRL's condition for using the current log-probs as the old ones (every ratio exactly 1):
    ``gradient_accumulation_steps % (steps_per_generation * num_iterations) == 0`` and no vLLM
    importance-sampling correction (TRL ``GRPOTrainer._generate_and_score_completions``).

    Args:
        value: ``name -> GRPOConfig`` value (a callable, or a mapping; None reads as the default).
    """
    get = value if callable(value) else value.get
    ga = get("gradient_accumulation_steps") or 1
    spg = get("steps_per_generation") or ga
    mu = get("num_iterations") or 1
    vllm_is = bool(get("use_vllm")) and bool(get("vllm_importance_sampling_correction"))
    return ga % (spg * mu) == 0 and not vllm_is


def resolve_device(device: str, executor: ExecutorSettings) -> str:
    """The device a run will execute on: "cpu" or "cuda".

    "auto" means cuda for a SLURM executor with GPUs per node > 0, else cuda when this machine has it.
    """
    if device != "auto":
        return device
    if executor.name == "slurm":
        return "cuda" if executor.gpus_per_node > 0 else "cpu"
    return "cuda" if cuda_available() else "cpu"


#: A GPU driver's files on Linux (NVIDIA; AMD ROCm, which torch also calls cuda; WSL).
_GPU_DRIVER_FILES = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


@functools.cache
def cuda_available() -> bool:
    """``torch.cuda.is_available()``, without importing torch (~1.7 s) on a Linux or macOS machine
    that has no GPU driver at all, where the answer can only be False."""
    if sys.platform == "darwin" or (
        sys.platform.startswith("linux") and not any(os.path.exists(p) for p in _GPU_DRIVER_FILES)
    ):
        return False
    import torch

    return torch.cuda.is_available()


def build_grpo_config(
    kwargs: Mapping[str, Any], device: str, elsewhere: bool = False, num_processes: int = 1
):
    """``GRPOConfig(**kwargs)`` as it would be on ``device``; TRL's exceptions propagate.

    For a CUDA run that executes elsewhere (``elsewhere=True``: a SLURM job validated on the login
    node), or on a machine without CUDA, TRL's "no bf16 on this GPU" check is told the GPU has bf16.
    ``num_processes`` > 1 validates as the run's processes will see it: TRL's checks of the global
    batch (``generation_batch_size``, the eval batch) use the world size, which a single validating
    process would give as 1. Only for validation: a running process has its real world size.
    """
    cls = grpo_config_type()
    patches: list[contextlib.AbstractContextManager] = []
    if device == "cuda":
        import torch

        if elsewhere or not torch.cuda.is_available():  # noqa: SIM102 (torch imported only for cuda)
            from unittest import mock  # imports asyncio (30 ms): only for a CUDA run or processes > 1

            patches.append(
                mock.patch("transformers.training_args.is_torch_bf16_gpu_available", return_value=True)
            )
    if num_processes > 1:
        from unittest import mock

        from transformers import TrainingArguments

        world = mock.PropertyMock(return_value=num_processes)
        patches.append(mock.patch.object(TrainingArguments, "world_size", new_callable=lambda: world))
    with contextlib.ExitStack() as stack, warnings.catch_warnings():
        for p in patches:
            stack.enter_context(p)
        warnings.simplefilter("ignore")
        return cls(**kwargs)


def error_line(e: BaseException) -> str:
    """A library's refusal in one line: the first line of its message, or the exception's type name
    when the message is empty."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def grpo_config_verdict(
    kwargs: Mapping[str, Any], device: str, elsewhere: bool = False, num_processes: int = 1
) -> dict[str, Any]:
    """TRL's verdict on ``GRPOConfig(**kwargs)`` as JSON data, memoised on disk (:mod:`harness.verdicts`).

    Returns ``{"values": {field: resolved value}, "error": None}`` (fields whose value has no JSON form
    are left out) or ``{"values": None, "error": TRL's first error line}``. The memo is keyed by the
    kwargs, device and the versions of trl, transformers, accelerate and torch; a CUDA run on this
    machine (not ``elsewhere``) depends on its GPU and is never memoised.
    """
    from harness import verdicts

    def ask() -> dict[str, Any]:
        try:
            config = build_grpo_config(kwargs, device, elsewhere, num_processes)
        except Exception as e:  # TRL raises ValueError, TypeError and others; all are the user's to fix
            return {"values": None, "error": error_line(e)}
        values = verdicts.jsonable_items(
            (f.name, getattr(config, f.name)) for f in dataclasses.fields(config)
        )
        return {"values": values, "error": None}

    if device == "cuda" and not elsewhere:
        return ask()
    try:
        settings = verdicts.jsonable(dict(kwargs))
    except verdicts.NotJSON:  # e.g. a YAML date: ask TRL every time
        return ask()
    key = {
        **verdicts.versions(*verdicts.TRL_STACK),
        "device": device,
        **({"num_processes": num_processes} if num_processes > 1 else {}),
        "kwargs": settings,
    }
    return verdicts.memo("grpo-config", key, ask, _is_verdict)


def _is_verdict(v: Any) -> bool:
    """Whether a memo entry has one of :func:`grpo_config_verdict`'s two shapes."""
    if not isinstance(v, dict) or set(v) != {"values", "error"}:
        return False
    values, error = v["values"], v["error"]
    if values is None:
        return isinstance(error, str)
    return (
        error is None
        and isinstance(values, dict)
        and {"loss_type", "max_steps", "num_generations"} <= set(values)
    )


# GRPOConfig never creates its output_dir; a fixed name keeps identical cells identical.
VALIDATION_DIR = "grpo-harness-validation"
_CONFIG_CACHE: dict[str, dict[str, Any]] = {}


def checked_grpo_config(
    kwargs: Mapping[str, Any], device: str, elsewhere: bool, num_processes: int = 1
) -> dict[str, Any]:
    """:func:`grpo_config_verdict` for ``kwargs`` with the seed set to 0: cells that differ only in the
    seed share one verdict (a 1,000-seed grid asks TRL once, or reads one memo entry)."""
    key = canonical_json(
        {**kwargs, "seed": None, "device": device, "elsewhere": elsewhere, "np": num_processes}
    )
    if key not in _CONFIG_CACHE:
        _CONFIG_CACHE[key] = grpo_config_verdict({**kwargs, "seed": 0}, device, elsewhere, num_processes)
    return _CONFIG_CACHE[key]
