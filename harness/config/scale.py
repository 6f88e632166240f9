"""Checks at plan of the settings that shard a run: ``trainer.deepspeed`` and ``trainer.fsdp``.

What transformers, DeepSpeed and accelerate refuse only when a run starts (after a queue wait on a
cluster) is refused here, before anything runs, by the same code where it can be called without a
model or a process group:

- transformers' ``HfTrainerDeepSpeedConfig`` fills the config's ``auto`` values from the trainer
  settings and lists every value given that disagrees with them (``trainer_config_process`` at
  ``GRPOConfig``, ``trainer_config_finalize`` at ``train()``), with the run's world size;
- DeepSpeed's ``DeepSpeedConfig`` parses the result (its pydantic models refuse an unknown ZeRO
  key or stage, named with the closest key the model has; its batch assertions);
- a top-level key DeepSpeed does not know, which it ignores without a word (``zero_optimisation``,
  ``train_micro_batch_size_per_gpus``), is refused with the closest key it knows: the keys its own
  parser reads (:func:`top_level_keys`), or a list of them where deepspeed is not installed (a
  login node that plans SLURM jobs);
- the ``optimizer`` block: a name DeepSpeed does not build, a torch optimizer ZeRO was not tested
  with, and on CPU an optimizer whose kernel DeepSpeed's CPU build lacks (its op builder is
  ``NotImplementedBuilder``), which the engine reports only when it builds the optimizer;
- ``trainer.fsdp`` on CPU: accelerate chooses FSDP only for a process group on GPUs or other
  accelerators (``AcceleratorState``: ``DistributedType.FSDP`` is set only from ``MULTI_GPU`` and
  its kin). Measured with accelerate 1.15 on two CPU processes: ``fsdp: "full_shard auto_wrap"``
  with ``fsdp_version: 2`` trains as plain DDP, with the same per-step metrics as the run without
  it to the last bit and whole-model checkpoints (``model.safetensors``, ``optimizer.pt``). A run
  that asks to be sharded and is not would mislead, so it is refused.
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
import logging
import math
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

#: DeepSpeed optimizer name (lower case) -> (op builder without offload, op builder with
#: ``offload_optimizer``); None: plain torch code (DeepSpeed's ``engine._configure_basic_optimizer``).
_OPTIMIZER_OPS = {
    "adam": ("FusedAdamBuilder", "CPUAdamBuilder"),
    "adamw": ("FusedAdamBuilder", "CPUAdamBuilder"),
    "lamb": ("FusedLambBuilder", "FusedLambBuilder"),
    "lion": ("FusedLionBuilder", "CPULionBuilder"),
    "adagrad": (None, "CPUAdagradBuilder"),
}


def quiet_cpu_fallback() -> None:
    """Drop DeepSpeed's note that it falls back to its CPU accelerator (logged when it is first
    imported on a machine without a GPU, as a login node is): at plan it says nothing about the grid.
    A filter on its logger, set before DeepSpeed creates it; every other record passes."""
    logger = logging.getLogger("DeepSpeed")
    if not any(isinstance(f, _CpuFallback) for f in logger.filters):
        logger.addFilter(_CpuFallback())


class _CpuFallback(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Setting accelerator to CPU")


def deepspeed_config(value: Any) -> dict:
    """The DeepSpeed config a ``trainer.deepspeed`` value names: the mapping itself (a copy) or the
    JSON file at that path. Raises OSError or ValueError as reading it does."""
    if isinstance(value, Mapping):
        return copy.deepcopy(dict(value))
    with open(value, encoding="utf-8") as f:
        return json.load(f)


class _Args(SimpleNamespace):
    """The trainer settings as transformers' DeepSpeed integration reads them, with the run's world
    size (a validating process is one process)."""

    def get_warmup_steps(self, num_training_steps: int) -> int:  # TrainingArguments.get_warmup_steps
        steps = self.warmup_steps
        return int(steps) if steps >= 1 else math.ceil(num_training_steps * steps)


def deepspeed_problems(
    value: Any, settings: Mapping[str, Any], num_processes: int, device: str, hidden_size: int | None
) -> list[str]:
    """What would stop a run with ``trainer.deepspeed = value`` when it starts, as messages naming
    the key, the value and the fix; empty when nothing does.

    Args:
        value: ``trainer.deepspeed`` as written (a mapping, or the path of a JSON file).
        settings: TRL's resolved ``GRPOConfig`` fields (JSON values).
        num_processes: the run's processes (``executor.nodes * tasks_per_node``).
        device: "cpu" or "cuda"; kernels are checked against DeepSpeed's CPU build on "cpu" only.
        hidden_size: the model's, for the ``auto`` bucket sizes; None when unknown (a Hub model not
            read at plan): then a stand-in is used, which only those ``auto`` values depend on.
    """
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    where = f"trainer.deepspeed = {value!r}" if not isinstance(value, Mapping) else "trainer.deepspeed"
    try:
        config = deepspeed_config(value)
    except (OSError, ValueError) as e:
        return [f"{where}: cannot be read ({e}); give a JSON file or the config as a mapping."]
    shape = shape_problems(where, config)
    if shape:
        return shape
    args = _Args(**{**settings, "world_size": num_processes})
    hf = HfTrainerDeepSpeedConfig(config)
    try:
        hf.trainer_config_process(args)
        model = SimpleNamespace(config=SimpleNamespace(hidden_size=hidden_size or 1024))
        hf.trainer_config_finalize(args, model, settings["max_steps"])
    except ValueError as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip().startswith("- ds ")]
        return [
            f"{where}: values that disagree with the trainer's settings ({num_processes} process(es)): "
            + "; ".join(line[2:] for line in lines or [str(e)])
            + ". Set them to 'auto' (transformers fills them from the trainer block) or to the trainer's values."
        ]
    out = _deepspeed_parse(where, hf.config)
    out += _optimizer_problems(where, hf.config, device)
    return out


#: Keys whose value is a number or "auto" (transformers compares a string "8" with 8 as a mismatch).
_NUMBER_KEYS = (
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "train_batch_size",
    "gradient_clipping",
)


def shape_problems(where: str, config: Any) -> list[str]:
    """What the config's shape gets wrong before its values are compared: not a mapping, a top-level
    key DeepSpeed does not know (:func:`unknown_key_problems`), no ``zero_optimization`` block
    (accelerate requires one), a ZeRO stage or a batch size written as a string (DeepSpeed reads
    ``"3"`` as 3 where accelerate and the harness do not: such a run shards its model but is not
    treated as ZeRO-3, and hangs)."""
    if not isinstance(config, Mapping):
        return [f"{where}: a DeepSpeed config is a JSON object (a mapping), not {type(config).__name__}."]
    out = unknown_key_problems(where, config)
    zero = config.get("zero_optimization")
    if zero is None:
        if not any(_closest_key(k) == "zero_optimization" for k in config if k not in top_level_keys()):
            out.append(
                f"{where}: no zero_optimization block; accelerate requires one, e.g. zero_optimization: {{stage: 2}}."
            )
        return out
    if not isinstance(zero, Mapping):
        return [*out, f"{where}: zero_optimization = {zero!r} must be a mapping, e.g. {{stage: 2}}."]
    stage = zero.get("stage", 0)
    if not isinstance(stage, int) or isinstance(stage, bool):
        out.append(
            f"{where}: zero_optimization.stage = {stage!r} must be the integer 0, 1, 2 or 3 (write it bare)."
        )
    for key in _NUMBER_KEYS:
        value = config.get(key)
        if isinstance(value, str) and value != "auto" or isinstance(value, bool):
            out.append(f"{where}: {key} = {value!r} must be a number or 'auto' (write numbers bare).")
    block = config.get("optimizer")
    if block is not None and (not isinstance(block, Mapping) or not isinstance(block.get("type", ""), str)):
        out.append(
            f"{where}: optimizer = {block!r} must be a mapping with a type name, e.g. {{type: AdamW}}."
        )
    return out


def unknown_key_problems(where: str, config: Mapping[str, Any]) -> list[str]:
    """One message per top-level key of ``config`` that DeepSpeed does not know (:func:`top_level_keys`),
    naming the key, its value and the closest key DeepSpeed knows: DeepSpeed ignores such a key
    without a word, so the setting would not apply."""
    out = []
    for key, value in config.items():
        if key in top_level_keys():
            continue
        near = _closest_key(key)
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        fix = (
            f"did you mean {near!r}? Rename it"
            + (" (accelerate requires a zero_optimization block)" if near == "zero_optimization" else "")
            if near
            else "drop it, or give it as DeepSpeed's documentation names it (https://www.deepspeed.ai/docs/config-json/)"
        )
        out.append(
            f"{where}: unknown key {key!r} = {shown}: DeepSpeed ignores a top-level key it does not know, so "
            f"this setting would not apply; {fix}."
        )
    return out


def _closest_key(key: Any) -> str | None:
    """The top-level key DeepSpeed knows that ``key`` is closest to (difflib), or None."""
    near = difflib.get_close_matches(str(key), sorted(top_level_keys()), n=1, cutoff=0.6)
    return near[0] if near else None


#: DeepSpeed's top-level config keys when deepspeed is not installed here: the keys that
#: ``DeepSpeedConfig`` of deepspeed 0.19.8 reads (:func:`_keys_deepspeed_reads`; removed features
#: included, which it refuses by name) and the two ``deepspeed.initialize`` reads beside them.
#: tests/test_scale.py checks that it holds every key the installed DeepSpeed reads.
FALLBACK_TOP_LEVEL_KEYS = frozenset(
    {
        "activation_checkpointing", "aio", "amp", "autotuning", "bf16", "bfloat16", "checkpoint", "comet",
        "comms_logger", "communication_data_type", "compile", "compression_training", "csv_monitor",
        "curriculum_learning", "data_efficiency", "data_parallel_size", "data_types", "dataloader_drop_last",
        "datastates_ckpt", "disable_allgather", "disable_python_gc", "dump_state", "eigenvalue", "elasticity",
        "expert_parallel", "flops_profiler", "fp16", "gradient_accumulation_steps", "gradient_allreduce_op",
        "gradient_clipping", "gradient_predivide_factor", "graph_harvesting", "hybrid_engine", "log_level",
        "managed_gradient_accumulation", "memory_breakdown", "nebula", "optimizer", "pipeline",
        "prescale_gradients", "progressive_layer_drop", "quantize_training", "scheduler",
        "seq_parallel_communication_data_type", "sequence_parallel_size", "sparse_attention",
        "sparse_gradients", "steps_per_print", "tensor_parallel", "tensorboard", "timers", "torch_autocast",
        "train_batch_size", "train_micro_batch_size_per_gpu", "use_data_before_expert_parallelism",
        "vocabulary_size", "wall_clock_breakdown", "wandb", "weight_quantization",
        "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "zero_optimization",
    }
)  # fmt: skip


@functools.cache
def top_level_keys() -> frozenset[str]:
    """The top-level keys of a DeepSpeed config: those the installed DeepSpeed's parser reads
    (:func:`_keys_deepspeed_reads`) with :data:`FALLBACK_TOP_LEVEL_KEYS`, or the fallback alone where
    deepspeed is not installed or cannot say. Memoised per process."""
    import importlib.util

    if importlib.util.find_spec("deepspeed") is None:
        return FALLBACK_TOP_LEVEL_KEYS
    try:
        return _keys_deepspeed_reads() | FALLBACK_TOP_LEVEL_KEYS
    except Exception:  # a DeepSpeed that does not build its config as this one does
        return FALLBACK_TOP_LEVEL_KEYS


class _Reading(dict):
    """A config that records every key looked up in it (``get``, ``[]``, ``in``, ``keys()``); its
    copies share the record."""

    def __init__(self, values: Mapping[str, Any], read: set[Any]) -> None:
        super().__init__(values)
        self.read = read

    def get(self, key: Any, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: Any) -> bool:
        self.read.add(key)
        return super().__contains__(key)

    def keys(self) -> Any:
        return _ReadingKeys(self)


class _ReadingKeys:
    """``_Reading.keys()``: membership recorded as a lookup."""

    def __init__(self, config: _Reading) -> None:
        self.config = config

    def __contains__(self, key: Any) -> bool:
        return key in self.config

    def __iter__(self) -> Any:
        return iter(dict.keys(self.config))

    def __len__(self) -> int:
        return len(dict.keys(self.config))


def _keys_deepspeed_reads() -> frozenset[str]:
    """The top-level keys DeepSpeed's ``DeepSpeedConfig`` looks up when it parses a config (each
    section's getter reads its own key: ``get_zero_config`` reads ``zero_optimization``, the monitors
    ``tensorboard``, ``wandb``, ...), recorded on a minimal config it accepts."""
    quiet_cpu_fallback()
    from deepspeed.runtime.config import DeepSpeedConfig

    read: set[Any] = set()
    DeepSpeedConfig(_Reading({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}, read))
    return frozenset(k for k in read if isinstance(k, str))


def _deepspeed_parse(where: str, config: dict) -> list[str]:
    """DeepSpeed's own parse of the filled config (its world size, 1 here, is not the run's: the
    batch total, already checked against the run's by transformers, is left for it to derive)."""
    import pydantic
    from deepspeed.runtime.config import DeepSpeedConfig

    parsed = {k: v for k, v in config.items() if k != "train_batch_size"}
    if "train_micro_batch_size_per_gpu" not in parsed:
        parsed = config
    try:
        DeepSpeedConfig(copy.deepcopy(parsed))
    except pydantic.ValidationError as e:
        return [_refused_line(where, e.title, err) for err in e.errors()]
    except (AssertionError, ValueError, KeyError, TypeError) as e:
        fix = ""
        if "train_micro_batch_size_per_gpu" in str(e):
            fix = (
                " Add train_micro_batch_size_per_gpu: auto and gradient_accumulation_steps: auto "
                "(transformers fills them from the trainer block)."
            )
        return [f"{where}: DeepSpeed refuses the config: {e}.{fix}"]
    return []


#: DeepSpeed's pydantic model -> the config key it parses (its errors locate keys within it)
_SECTIONS = {
    "DeepSpeedZeroConfig": "zero_optimization",
    "DeepSpeedZeroOffloadOptimizerConfig": "zero_optimization.offload_optimizer",
    "DeepSpeedZeroOffloadParamConfig": "zero_optimization.offload_param",
    "DeepSpeedFP16Config": "fp16",
    "DeepSpeedBF16Config": "bf16",
}


def _refused_line(where: str, model_name: str, error: Mapping[str, Any]) -> str:
    """One error of DeepSpeed's pydantic model ``model_name`` as a message: the dotted key, the
    value, pydantic's reason, and for an unknown key the closest one the model has."""
    section = _SECTIONS.get(model_name)
    loc = (section, *error["loc"]) if section else tuple(error["loc"])
    near = _closest_field(model_name, error)
    hint = f"; did you mean {_dotted((*loc[:-1], near))}? Rename it" if near else ""
    return f"{where}: DeepSpeed refuses {_dotted(loc)} = {error.get('input')!r}: {error['msg']}{hint}."


def _closest_field(model_name: str, error: Mapping[str, Any]) -> str | None:
    """For a key a DeepSpeed pydantic model refuses as unknown (``extra_forbidden``), the closest of
    the fields (and aliases) of the model it sits in; None for another error, or when none is close."""
    if error.get("type") != "extra_forbidden" or not error.get("loc"):
        return None
    from deepspeed.runtime.config_utils import DeepSpeedConfigModel

    models, model = [DeepSpeedConfigModel], None
    while models and model is None:  # the model the error names, among DeepSpeed's config models
        cls = models.pop()
        model = cls if cls.__name__ == model_name else None
        models += cls.__subclasses__()
    for part in error["loc"][:-1]:  # down to the model that holds the unknown key
        model = _field_model(model, str(part)) if model is not None else None
    if model is None:
        return None
    fields = model.model_fields
    names = [*fields, *(f.alias for f in fields.values() if f.alias)]
    near = difflib.get_close_matches(str(error["loc"][-1]), names, n=1, cutoff=0.6)
    return near[0] if near else None


def _field_model(model: type, name: str) -> type | None:
    """The pydantic model of field ``name`` (or the field of that alias) of ``model``
    (``Optional[Model]`` included); None when it is no model."""
    import typing

    import pydantic

    field = model.model_fields.get(name) or next(
        (f for f in model.model_fields.values() if f.alias == name), None
    )
    todo = [field.annotation] if field is not None else []
    while todo:
        hint = todo.pop()
        if isinstance(hint, type) and issubclass(hint, pydantic.BaseModel):
            return hint
        todo += typing.get_args(hint)
    return None


def _dotted(loc: tuple) -> str:
    return ".".join(str(part) for part in loc) or "(the config)"


def _optimizer_problems(where: str, config: dict, device: str) -> list[str]:
    """The ``optimizer`` block: a name DeepSpeed builds (its own, or a ``torch.optim`` class), one
    ZeRO accepts, and on CPU one whose kernel DeepSpeed's CPU build has."""
    block = config.get("optimizer")
    if not isinstance(block, Mapping) or block.get("type") is None:
        return []
    import torch
    from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS

    name = str(block["type"])
    own = name.lower() in DEEPSPEED_OPTIMIZERS
    fix = (
        "name one of "
        + ", ".join(DEEPSPEED_OPTIMIZERS)
        + ", or drop the block to use the trainer's (trainer.optim)"
    )
    if not own and getattr(torch.optim, name, None) is None:
        return [f"{where}: optimizer.type = {name!r} is not an optimizer DeepSpeed builds; {fix}."]
    zero = (config.get("zero_optimization") or {}).get("stage", 0)
    if not own and zero and not config.get("zero_allow_untested_optimizer"):
        from deepspeed.runtime.zero.utils import ZERO_SUPPORTED_OPTIMIZERS

        if getattr(torch.optim, name) not in ZERO_SUPPORTED_OPTIMIZERS:
            return [
                f"{where}: optimizer.type = {name!r} (torch.optim) with ZeRO stage {zero}: DeepSpeed refuses an "
                "optimizer ZeRO was not tested with; set zero_allow_untested_optimizer: true or " + fix + "."
            ]
    if device != "cpu" or name.lower() not in _OPTIMIZER_OPS:
        return []
    zero_block = config.get("zero_optimization") or {}
    offload = (zero_block.get("offload_optimizer") or {}).get("device") in ("cpu", "nvme")
    op = _OPTIMIZER_OPS[name.lower()][offload]
    if op is None or block.get("params", {}).get("torch_adam"):
        return []
    from deepspeed.accelerator import get_accelerator
    from deepspeed.ops.op_builder.cpu.no_impl import NotImplementedBuilder

    if isinstance(get_accelerator().create_op_builder(op), NotImplementedBuilder):
        return [
            f"{where}: optimizer.type = {name!r} needs DeepSpeed's {op} kernel, which its CPU build lacks; "
            "on CPU use Adam or AdamW (or Lion/Adagrad with zero_optimization.offload_optimizer), or drop "
            "the block to use the trainer's optimizer."
        ]
    return []


def fsdp_problems(value: Any, device: str) -> list[str]:
    """``trainer.fsdp`` on CPU, where accelerate trains the run as DDP (see the module's note)."""
    if not value or device != "cpu":
        return []
    return [
        f"trainer.fsdp = {value!r} on cpu: accelerate shards with FSDP only on GPUs (and other "
        "accelerators); on CPU it would train the run unsharded, as plain DDP. To shard on CPU use "
        "trainer.deepspeed with zero_optimization.stage 3; for FSDP run on GPUs (harness.device: cuda)."
    ]
