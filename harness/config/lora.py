"""LoRA: the grid's ``peft:`` section, given to TRL's ``GRPOTrainer`` as its ``peft_config``.

The section's keys are the fields of peft's ``LoraConfig`` (``r``, ``lora_alpha``, ``lora_dropout``,
``target_modules``, ``bias``, ``use_rslora``, ...), checked and typed like the trainer's
``GRPOConfig`` fields, so a grid can have an axis over any of them (``grid: {peft.r: [4, 16]}``). A
grid without the section trains every weight, as before (its runs' ids do not change).

What TRL does with it (trl 1.16, ``GRPOTrainer.__init__``): wraps the model with
``peft.get_peft_model``, trains the adapter only, and takes as reference model the base model with
the adapters disabled (no second copy of the weights), so ``beta > 0`` costs no memory. It refuses
``sync_ref_model`` with a PEFT model when the trainer starts; :func:`problems` refuses it when the
grid is planned.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from harness.trl_boundary import error_line

#: The grid section.
SECTION = "peft"
#: ``LoraConfig`` fields the harness sets, and what to do instead.
HARNESS_OWNED = {
    "task_type": "the harness trains causal language models and sets task_type: CAUSAL_LM; drop it.",
    "peft_type": "the section is a LoraConfig, peft_type LORA; drop it.",
    "inference_mode": "a trained adapter is not in inference mode; drop it.",
    "base_model_name_or_path": "the base model is the grid's model: key; drop it.",
    "revision": "the base model is the grid's model: key; drop it.",
    "auto_mapping": "set by peft itself; drop it.",
    "peft_version": "set by peft itself; drop it.",
}
#: Linear layers of the embedded models (transformers' Qwen2), the names ``target_modules`` may use.
EMBEDDED_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")


def available() -> bool:
    """Whether peft can be imported here (without importing it)."""
    return importlib.util.find_spec("peft") is not None


def lora_config_type() -> type:
    """peft's ``LoraConfig`` class.

    Raises:
        ImportError: peft is not installed (``pip install 'grpo-harness[peft]'``).
    """
    from peft import LoraConfig

    return LoraConfig


def build_lora_config(settings: Mapping[str, Any]) -> Any:
    """``LoraConfig(task_type="CAUSAL_LM", **settings)``: a run's ``peft:`` section as peft's config.

    Raises:
        ImportError: peft is not installed.
        ValueError, TypeError: peft's own checks of the values (``LoraConfig.__post_init__``).
    """
    return lora_config_type()(task_type="CAUSAL_LM", **dict(settings))


def problems(section: Any, trainer: Mapping[str, Any], model: str, embedded: bool) -> list[str]:
    """What peft or TRL would refuse about a run's ``peft:`` section only once the run starts.

    Args:
        section: the run's ``peft`` settings (None: no LoRA, no problems).
        trainer: the run's GRPOConfig settings as written.
        model: the grid's ``model`` (for the messages).
        embedded: whether the model is built here (its module names are known: :data:`EMBEDDED_MODULES`).

    Returns:
        One message per problem, each naming the key, the value and the fix.
    """
    if section is None:
        return []
    if not isinstance(section, Mapping):
        return [
            f"peft = {section!r} must be a mapping of LoraConfig fields (peft: {{r: 8, lora_alpha: 16}})."
        ]
    out = []
    if trainer.get("sync_ref_model"):
        out.append(
            "peft: with trainer.sync_ref_model: true: TRL refuses a synced reference with a PEFT model "
            "when the run starts (the reference is the base model with the adapters off, there is no "
            "reference copy to sync); set trainer.sync_ref_model: false, or drop peft: to train every weight."
        )
    if not available():
        return out  # the section's keys were refused already, with the install command
    try:
        build_lora_config(section)
    except Exception as e:  # peft raises ValueError, TypeError and others: all are the grid's to fix
        out.append(f"peft: LoraConfig refuses {dict(section)!r}: {error_line(e)}")
        return out
    r, dropout = section.get("r"), section.get("lora_dropout")
    if isinstance(r, int) and not isinstance(r, bool) and r <= 0:  # peft refuses it only at wrapping
        out.append(f"peft.r = {r}: the LoRA rank must be a positive integer (e.g. 8).")
    if isinstance(dropout, int | float) and not 0 <= dropout < 1:
        out.append(f"peft.lora_dropout = {dropout}: a dropout probability is in [0, 1) (e.g. 0.05).")
    targets = section.get("target_modules")
    if embedded and isinstance(targets, str) and targets != "all-linear":
        # peft matches a string as a regex against each module's full name (re.fullmatch)
        import re

        names = [
            f"model.layers.0.{'self_attn' if m[0] in 'qkvo' else 'mlp'}.{m}" for m in EMBEDDED_MODULES[:-1]
        ]
        try:
            matched = [n for n in names if re.fullmatch(targets, n)]
        except re.error as e:
            matched, bad = [], f"is not a regular expression ({e})"
        else:
            bad = "matches no module"
        if not matched:
            out.append(
                f"peft.target_modules = {targets!r}: as a string peft reads it as a regular expression over "
                f"each module's full name (such as {names[0]!r}), and it {bad}; list names instead "
                f"({', '.join(EMBEDDED_MODULES[:-1])}) or write all-linear."
            )
    if embedded and isinstance(targets, list):
        unknown = [t for t in targets if t not in EMBEDDED_MODULES]
        if unknown:
            out.append(
                f"peft.target_modules = {targets!r}: {model!r} has no module named "
                f"{', '.join(map(repr, unknown))}; its linear layers are {', '.join(EMBEDDED_MODULES)} "
                "(or write all-linear)."
            )
    return out
