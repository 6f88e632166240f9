"""Checks at plan of the settings that shard a run: ``trainer.deepspeed`` and ``trainer.fsdp``.

What transformers, DeepSpeed and accelerate refuse only when a run starts (after a queue wait on a
cluster) is refused here, before anything runs, by the same code where it can be called without a
model or a process group:

- transformers' ``HfTrainerDeepSpeedConfig`` fills the config's ``auto`` values from the trainer
  settings and lists every value given that disagrees with them (``trainer_config_process`` at
  ``GRPOConfig``, ``trainer_config_finalize`` at ``train()``), with the run's world size;
- DeepSpeed's ``DeepSpeedConfig`` parses the result (its pydantic models refuse an unknown ZeRO
  key or stage; its batch assertions);
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
    """What the config's shape gets wrong before its values are compared: not a mapping, no
    ``zero_optimization`` block (accelerate requires one; a misspelt key is named), a ZeRO stage or a
    batch size written as a string (DeepSpeed reads ``"3"`` as 3 where accelerate and the harness do
    not: such a run shards its model but is not treated as ZeRO-3, and hangs)."""
    import difflib

    if not isinstance(config, Mapping):
        return [f"{where}: a DeepSpeed config is a JSON object (a mapping), not {type(config).__name__}."]
    zero = config.get("zero_optimization")
    if zero is None:
        near = difflib.get_close_matches("zero_optimization", [str(k) for k in config], n=1, cutoff=0.75)
        hint = f" ({near[0]!r} is not it: the key is spelt zero_optimization)" if near else ""
        return [
            f"{where}: no zero_optimization block{hint}; accelerate requires one, e.g. zero_optimization: {{stage: 2}}."
        ]
    if not isinstance(zero, Mapping):
        return [f"{where}: zero_optimization = {zero!r} must be a mapping, e.g. {{stage: 2}}."]
    out = []
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
        section = _SECTIONS.get(e.title)
        return [
            f"{where}: DeepSpeed refuses {_dotted((section, *err['loc']) if section else err['loc'])} = "
            f"{err.get('input')!r}: {err['msg']}."
            for err in e.errors()
        ]
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
}


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
