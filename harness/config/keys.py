"""The keys of a grid file and the types of their values, checked.

A run setting is a dotted key (``trainer.loss_type``, ``task.kwargs.max_digits``, ``seed``); a bare
``GRPOConfig`` field name stands for ``trainer.<field>`` (:func:`normalize_key`). Each section's
keys are the fields of its dataclass (:func:`section_fields`: :mod:`harness.settings.schema`'s
sections, TRL's ``GRPOConfig`` from :mod:`harness.trl_boundary` plus the loaded loss plugins'
hyperparameters, peft's ``LoraConfig``); :func:`check_key` and :func:`check_setting` say what is wrong
with a key or a value and how to write it; :func:`coerce_number` turns whole numbers into floats
where the field is a float, so that ``epsilon: 1`` and ``epsilon: 1.0`` are one run.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import functools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from harness.config import lora
from harness.config.yaml_files import yaml_floats
from harness.settings.schema import (
    EPOCH,
    DynamicSamplingSettings,
    ExecutorSettings,
    HarnessSettings,
    TaskSpec,
    TinyChatModelSpec,
    TinyModelSpec,
    TinyStepsModelSpec,
    describe_fields,
    hint_name,
    type_ok,
)
from harness.trl_boundary import grpo_config_fields, grpo_config_type

TOP_LEVEL_KEYS = (
    "include",
    "name",
    "description",
    "notes",
    "seed",
    "task",
    "model",
    "tiny",
    "tiny_chat",
    "tiny_steps",
    "trainer",
    "peft",
    "harness",
    "dynamic_sampling",
    "executor",
    "grid",
    "zip",
    "subgrids",
    "profiles",
    "report",
    "findings",
    "plugins",
)
#: Sections that hold run settings (what a dotted key may point into).
SETTING_SECTIONS = (
    "task", "tiny", "tiny_chat", "tiny_steps", "trainer", "peft", "harness", "dynamic_sampling", "executor",
)  # fmt: skip
SCALAR_SETTINGS = ("seed", "model")


def section_type(section: str) -> type:
    """The dataclass whose fields a section's keys must name (importing TRL for ``trainer``)."""
    if section == "trainer":
        return grpo_config_type()
    if section == lora.SECTION:
        return lora.lora_config_type()
    return {
        "task": TaskSpec,
        "tiny": TinyModelSpec,
        "tiny_chat": TinyChatModelSpec,
        "tiny_steps": TinyStepsModelSpec,
        "harness": HarnessSettings,
        "dynamic_sampling": DynamicSamplingSettings,
        "executor": ExecutorSettings,
    }[section]


SECTION_CLASS_NAMES = {
    "task": "TaskSpec",
    "tiny": "TinyModelSpec",
    "tiny_chat": "TinyChatModelSpec",
    "tiny_steps": "TinyStepsModelSpec",
    "trainer": "GRPOConfig",
    "peft": "LoraConfig",
    "harness": "HarnessSettings",
    "dynamic_sampling": "DynamicSamplingSettings",
    "executor": "ExecutorSettings",
}


def section_fields(section: str) -> dict[str, Any]:
    """``{field name: described type}`` (:func:`harness.settings.schema.describe_hint`) of a section's dataclass; the
    trainer's from :func:`harness.trl_boundary.grpo_config_fields`, with the hyperparameters of the
    loss plugins loaded (:func:`harness.losses.hyperparameter_fields`)."""
    fields = _section_fields(section)
    if section == "trainer":
        from harness.losses import hyperparameter_fields

        extra = hyperparameter_fields()
        return {**fields, **extra} if extra else fields
    return fields


@functools.cache
def _section_fields(section: str) -> dict[str, Any]:
    if section == "trainer":
        return grpo_config_fields()
    return describe_fields(section_type(section))


def _float_only(desc: Any) -> bool:
    """A described type that takes floats but not ints (``float``, ``float | None``)."""
    if isinstance(desc, dict) and "union" in desc:
        return "float" in desc["union"] and "int" not in desc["union"]
    return desc == "float"


#: Sections whose whole numbers become floats where the field is a float (task kwargs are left as
#: written: they are the dataset's, whose types the harness does not know).
COERCED_SECTIONS = ("trainer", "peft", "tiny", "tiny_chat", "tiny_steps", "harness", "dynamic_sampling")


def coerce_number(key: str, value: Any) -> Any:
    """``value`` for dotted ``key``, an int turned into a float where the field is a float:
    ``epsilon: 1`` and ``epsilon: 1.0`` are one setting and must make one run id. Applied to every
    value when a grid is loaded (:func:`harness.config.spec.load_grid`), so expansion is pure."""
    parts = key.split(".")
    if len(parts) != 2 or parts[0] not in COERCED_SECTIONS:
        return value
    if parts[0] == lora.SECTION and not lora.available():  # the key is refused, with the install command
        return value
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and _float_only(section_fields(parts[0]).get(parts[1]))
    ):
        try:
            return float(value)
        except OverflowError:  # beyond float's range: infinite, which the range rules refuse by name
            return math.inf if value > 0 else -math.inf
    return value


def coerce_base(base: dict[str, Any]) -> None:
    """:func:`coerce_number` over the sections of a grid's shared settings, in place."""
    for section in COERCED_SECTIONS:
        values = base.get(section)
        if isinstance(values, dict):
            for k, v in values.items():
                values[k] = coerce_number(f"{section}.{k}", v)


def suggest(word: str, options: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(options), n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def normalize_key(key: str) -> str:
    """Expand a bare GRPOConfig field name to ``trainer.<field>``; other keys are returned unchanged."""
    if "." in key or key in TOP_LEVEL_KEYS or key in SCALAR_SETTINGS:
        return key
    if key in section_fields("trainer"):
        return f"trainer.{key}"
    return key


#: GRPOConfig fields the harness sets for every run, and what to do instead.
HARNESS_OWNED = {
    "trainer.seed": "use the top-level seed (or a seed axis), which seeds the trainer, data and sampling.",
    "trainer.output_dir": "checkpoints go to runs/<run_id>/checkpoints; drop it.",
    **{f"{lora.SECTION}.{name}": why for name, why in lora.HARNESS_OWNED.items()},
}


#: Why a loss plugin's hyperparameter may be unknown while a grid is loaded (a plugin that did not
#: load, a loss_type naming none): :meth:`harness.losses.loading.GridPlugins.key_note`.
_PLUGIN_NOTE: contextvars.ContextVar[str] = contextvars.ContextVar("plugin_note", default="")


@contextlib.contextmanager
def plugin_note(note: str) -> Iterator[None]:
    """While a grid's keys are checked: why a loss plugin's hyperparameter may be unknown (``note``,
    added to the unknown-key messages; empty when every plugin named loaded)."""
    token = _PLUGIN_NOTE.set(note)
    try:
        yield
    finally:
        _PLUGIN_NOTE.reset(token)


def _note() -> str:
    note = _PLUGIN_NOTE.get()
    return f": {note}, so its hyperparameters are not known" if note else ""


def invisible(text: str) -> list[str]:
    """The invisible characters of ``text`` (format and control characters, spaces other than
    ' ': Unicode categories Cf, Cc, Zs, Zl, Zp), as ``U+200B ZERO WIDTH SPACE``."""
    import unicodedata

    odd = [
        c
        for c in dict.fromkeys(text)
        if unicodedata.category(c) in ("Cf", "Cc", "Zs", "Zl", "Zp") and c != " "
    ]
    return [f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}" for c in odd]


def shown_key(key: str) -> str:
    """``key`` quoted for a message, its invisible characters escaped (``'max_steps\\u200b'``) so that
    it does not look the same as the name it should be."""
    if not invisible(key):
        return f"'{key}'"
    return "'" + "".join(c if c == " " or c.isprintable() else f"\\u{ord(c):04x}" for c in key) + "'"


def check_key(key: str, where: str) -> str | None:
    """Problem with dotted ``key`` as the name of a run setting (unknown section or field, sub-keys
    of a single value, a whole section), or None. ``where`` names the place for the message."""
    odd = invisible(key)
    if odd:
        clean = "".join(c for c in key if c == " " or c.isprintable())
        return (
            f"{where}: key {shown_key(key)} holds the invisible character{'s' if len(odd) > 1 else ''} "
            f"{', '.join(odd)}; retype it as '{clean}'."
        )
    parts = key.split(".")
    head = parts[0]
    if head in SCALAR_SETTINGS:
        return f"{where}: '{key}': '{head}' takes a single value, not sub-keys." if len(parts) > 1 else None
    if head == "report":
        return (
            f"{where}: '{key}' lays out the report and is not a run setting; set it in the top-level "
            f"report: section (or with -o {key}=VALUE)."
        )
    if head == "findings":
        return (
            f"{where}: '{key}' states a paper's claim the runs test and is not a run setting; edit the "
            "top-level findings: section of the grid file."
        )
    if head not in SETTING_SECTIONS:
        valid = [*SCALAR_SETTINGS, *SETTING_SECTIONS]
        options = valid if len(parts) > 1 else [*valid, *section_fields("trainer")]
        plugin = (
            "" if len(parts) > 1 else f" or a hyperparameter of a loss plugin that loss_type names{_note()}"
        )
        return (
            f"{where}: unknown key '{key}'.{suggest(head, options)} Keys start with one of "
            f"{', '.join(valid)}, or are a GRPOConfig field name{plugin}."
        )
    if len(parts) == 1:
        return f"{where}: '{key}' is a whole section, not one setting; name one of its keys ({key}.NAME)."
    if head == lora.SECTION and not lora.available():
        return f"{where}: '{key}' {_NEEDS_PEFT}; {_PEFT_FIX}."
    fields = section_fields(head)
    name = parts[1]
    if name not in fields:
        plugin = f" Nor is it a hyperparameter of a loss plugin that loss_type names{_note()}."
        return (
            f"{where}: unknown key '{key}': {SECTION_CLASS_NAMES[head]} has no field '{name}'."
            f"{suggest(name, list(fields))}"
            + (plugin if head == "trainer" else f" Valid: {', '.join(_settable(head, fields))}.")
        )
    if len(parts) > 2 and not type_ok({}, fields[name]):
        return f"{where}: '{key}': '{head}.{name}' is not a mapping, it has no sub-keys."
    return None


#: What :func:`check_key` says of a ``peft.*`` key where peft is not installed, and the fix; the
#: keys are then one problem (:func:`one_per_package`).
_NEEDS_PEFT = "needs the peft package (the peft: section, LoRA), which is not installed here"
_PEFT_FIX = (
    "pip install 'grpo-harness[peft]' (or pip install peft), or drop the peft settings to train every weight"
)


def one_per_package(problems: Sequence[str]) -> list[str]:
    """``problems`` with the keys refused because peft is not installed (:func:`check_key`) said as
    one problem, in the place of the first: a missing package is one problem, however many keys,
    axes, sub-grids, selectors or overrides need it; the problem names them and where they are set."""
    marker = f" {_NEEDS_PEFT};"
    hits = [p for p in problems if marker in p]
    if not hits:
        return list(problems)
    places = [p.split(marker, 1)[0].rsplit(": ", 1) for p in hits]  # [where, "'key'"]
    keys = dict.fromkeys(key.strip("'") for _, key in places)
    wheres = dict.fromkeys(where for where, _ in places)
    merged = (
        f"{lora.SECTION}: the peft: section (LoRA) needs the peft package, which is not installed here, "
        f"and the grid sets {', '.join(keys)} (in {', '.join(wheres)}); {_PEFT_FIX}."
    )
    out = [p for p in problems if marker not in p]
    out.insert(problems.index(hits[0]), merged)
    return out


def _settable(section: str, fields: Mapping[str, Any]) -> list[str]:
    """A section's field names a grid may set (those the harness sets itself left out)."""
    return [name for name in fields if f"{section}.{name}" not in HARNESS_OWNED]


def check_setting(key: str, value: Any, where: str) -> str | None:
    """Problem with setting dotted ``key`` to ``value`` (unknown key, wrong type), or None.

    ``where`` names the place in the file (e.g. "grid", "-o") for the message.
    """
    parts = key.split(".")
    head = parts[0]
    if head in SETTING_SECTIONS and len(parts) == 1:
        # from an axis, a sub-grid's set or -o; the file's own sections come key by key
        return (
            f"{where}: '{key}' as a whole would replace every {key} setting of the grid, the included "
            f"ones too; set its keys one by one ({key}.NAME: value)."
        )
    problem = check_key(key, where)
    if problem:
        return problem
    if head in SCALAR_SETTINGS:
        if head == "seed" and not type_ok(value, "int"):
            return f"{where}: seed = {value!r} is a {type(value).__name__}; it must be an integer."
        if head == "model" and not isinstance(value, str):
            return f"{where}: model = {value!r} must be a string: 'tiny', 'tiny-chat', a local path or a model id."
        return None
    if len(parts) > 2:
        return None
    fields = section_fields(head)
    name = parts[1]
    if key in HARNESS_OWNED:
        return f"{where}: {key} is set by the harness; {HARNESS_OWNED[key]}"
    if key == "trainer.ref_model_sync_steps" and value == EPOCH:
        return None
    if not type_ok(value, fields[name]):
        return f"{where}: {key} = {value!r} {_type_fix(value, fields[name])}"
    return None


def _type_fix(value: Any, desc: Any) -> str:
    """What is wrong with ``value`` for a field of described type ``desc``, and how to write it."""
    if isinstance(value, str) and type_ok(1.0, desc) and is_number(value):
        number = float(value)
        if not math.isfinite(number):
            return "is a string; YAML writes infinity .inf and not-a-number .nan (a setting must be finite)."
        if "e" in value.lower():
            return (
                "is read by YAML as a string (YAML 1.1 reads an exponent float only with a dot and a "
                f"signed exponent); write {' or '.join(yaml_floats(value))}."
            )
        return f"is a string (quoted?); write the number bare: {value.strip()}."
    if isinstance(value, float) and type_ok(1, desc) and not type_ok(value, desc) and value.is_integer():
        return f"is a float; this field takes an integer: write {int(value)}."
    if isinstance(value, str) and type_ok(1, desc) and is_number(value) and float(value).is_integer():
        whole = float(value)
        if math.isfinite(whole):
            return f"is read by YAML as a string; this field takes an integer: write {int(whole)}."
    if isinstance(value, bool) and not type_ok(value, desc):
        return (
            f"is read by YAML 1.1 as the boolean {value} (from yes/no/on/off/true/false); expected "
            f"{hint_name(desc)}. Quote it if it is text ('no')."
        )
    return (
        f"has type {type(value).__name__}; expected {hint_name(desc)}. Fix the value (quote strings, "
        "write numbers bare)."
    )


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def run_setting_key(key: str, where: str) -> str | None:
    """Problem with ``key`` (dotted) as a setting the report compares or facets runs by, or None."""
    problem = check_key(key, where)
    if problem is None and key.startswith("executor."):
        problem = (
            f"{where}: '{key}': where a run executes is not one of its settings, so runs cannot be "
            "compared by it; name a run setting."
        )
    return problem
