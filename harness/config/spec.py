"""Grid YAML files: loading (safe), ``include:``, ``-o key=value`` overrides, key and type checks.

A grid file has these top-level keys (all optional but ``name`` defaults to the file's stem)::

    include: base.yaml        # another grid file (path relative to this one), deep-merged under this one
    name: smoke               # results go to results/<name>/
    description: "..."        # one paragraph, shown by `plan`
    notes: "..."              # e.g. the settings to use at paper scale
    seed: 0                   # drives the trainer, the task's data and sampling
    task: {name, kwargs, template, train_size, eval_size, rewards}      # harness.config.schema.TaskSpec
    model: tiny               # "tiny", "tiny-chat", a local path, or a Hugging Face model id
    tiny: {...}               # harness.config.schema.TinyModelSpec fields (model: tiny)
    tiny_chat: {...}          # harness.config.schema.TinyChatModelSpec fields (model: tiny-chat)
    tiny_steps: {...}         # harness.config.schema.TinyStepsModelSpec fields (model: tiny-steps)
    trainer: {...}            # any TRL GRPOConfig field
    peft: {...}               # LoRA: any peft LoraConfig field (harness.config.lora); absent = every weight trains
    harness: {...}            # harness.config.schema.HarnessSettings fields
    executor: {...}           # harness.config.schema.ExecutorSettings fields
    grid: {key: [values]}     # product axes
    zip: [{key: [values], key2: [values]}]         # axes that move together
    subgrids: {name: {set: {...}, grid: {...}, zip: [...]}}   # union of named sub-grids
    profiles: {name: {key: value}}                  # named override sets, e.g. "paper"
    report: {hue, col, row, baseline, x, smoothing, metric, curves, metrics, target, lead, seeds}
                              # how the grid's report is laid out; no run setting (see REPORT_KEYS)
    findings: {id: {claim, paper, metric, window, direction, baseline, variant, ...}}
                              # papers' claims the runs test; no run setting (harness.config.findings)
    plugins: [mypackage.losses]   # modules of loss plugins (harness.losses), imported when loaded

Keys in ``grid``/``zip``/``set``/overrides are dotted paths (``trainer.loss_type``,
``task.kwargs.max_digits``, ``tiny.sft_steps``, ``seed``); a bare ``GRPOConfig`` field name stands
for ``trainer.<field>``.
"""

from __future__ import annotations

import contextvars
import copy
import difflib
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from harness.config import lora, report_section
from harness.config.schema import (
    EPOCH,
    Axis,
    ExecutorSettings,
    GridSpec,
    HarnessSettings,
    SpecError,
    SubGrid,
    TaskSpec,
    TinyChatModelSpec,
    TinyModelSpec,
    TinyStepsModelSpec,
    deep_merge,
    describe_fields,
    hint_name,
    set_dotted,
    type_ok,
)

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
SETTING_SECTIONS = ("task", "tiny", "tiny_chat", "tiny_steps", "trainer", "peft", "harness", "executor")
SCALAR_SETTINGS = ("seed", "model")


def _grpo_config_type() -> type:
    from harness.trl_boundary import grpo_config_type  # the boundary imports this module

    return grpo_config_type()


def section_type(section: str) -> type:
    """The dataclass whose fields a section's keys must name (importing TRL for ``trainer``)."""
    if section == "trainer":
        return _grpo_config_type()
    if section == lora.SECTION:
        return lora.lora_config_type()
    return {
        "task": TaskSpec,
        "tiny": TinyModelSpec,
        "tiny_chat": TinyChatModelSpec,
        "tiny_steps": TinyStepsModelSpec,
        "harness": HarnessSettings,
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
    "executor": "ExecutorSettings",
}


def section_fields(section: str) -> dict[str, Any]:
    """``{field name: described type}`` (:func:`harness.config.schema.describe_hint`) of a section's dataclass; the
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
        from harness.trl_boundary import grpo_config_fields  # the boundary imports this module

        return grpo_config_fields()
    return describe_fields(section_type(section))


def _float_only(desc: Any) -> bool:
    """A described type that takes floats but not ints (``float``, ``float | None``)."""
    if isinstance(desc, dict) and "union" in desc:
        return "float" in desc["union"] and "int" not in desc["union"]
    return desc == "float"


#: Sections whose whole numbers become floats where the field is a float (task kwargs are left as
#: written: they are the dataset's, whose types the harness does not know).
COERCED_SECTIONS = ("trainer", "peft", "tiny", "tiny_chat", "tiny_steps", "harness")


def coerce_number(key: str, value: Any) -> Any:
    """``value`` for dotted ``key``, an int turned into a float where the field is a float:
    ``epsilon: 1`` and ``epsilon: 1.0`` are one setting and must make one run id. Applied to every
    value when a grid is loaded (:func:`load_grid`), so expansion is pure."""
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


def _coerce_base(base: dict[str, Any]) -> None:
    """:func:`coerce_number` over the sections of a grid's shared settings, in place."""
    for section in COERCED_SECTIONS:
        values = base.get(section)
        if isinstance(values, dict):
            for k, v in values.items():
                values[k] = coerce_number(f"{section}.{k}", v)


def _suggest(word: str, options: Sequence[str]) -> str:
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
            f"{where}: unknown key '{key}'.{_suggest(head, options)} Keys start with one of "
            f"{', '.join(valid)}, or are a GRPOConfig field name{plugin}."
        )
    if len(parts) == 1:
        return f"{where}: '{key}' is a whole section, not one setting; name one of its keys ({key}.NAME)."
    if head == lora.SECTION and not lora.available():
        return (
            f"{where}: '{key}': the peft: section (LoRA) needs the peft package, which is not installed "
            "here; pip install 'grpo-harness[peft]', or drop the section to train every weight."
        )
    fields = section_fields(head)
    name = parts[1]
    if name not in fields:
        plugin = f" Nor is it a hyperparameter of a loss plugin that loss_type names{_note()}."
        return (
            f"{where}: unknown key '{key}': {SECTION_CLASS_NAMES[head]} has no field '{name}'."
            f"{_suggest(name, list(fields))}"
            + (plugin if head == "trainer" else f" Valid: {', '.join(_settable(head, fields))}.")
        )
    if len(parts) > 2 and not type_ok({}, fields[name]):
        return f"{where}: '{key}': '{head}.{name}' is not a mapping, it has no sub-keys."
    return None


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
    if isinstance(value, str) and type_ok(1.0, desc) and _is_number(value):
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
    if isinstance(value, str) and type_ok(1, desc) and _is_number(value) and float(value).is_integer():
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


def yaml_floats(text: str) -> list[str]:
    """Spellings of the number ``text`` that YAML reads as that float: the plain decimal, and the
    exponent form with a dot and a signed exponent (``1e4`` -> ``10000.0``, ``1.0e+4``); each one
    checked by parsing it."""
    number = float(text)
    candidates = [repr(number)]
    mantissa, sep, exponent = text.strip().lower().partition("e")
    if sep:
        mantissa = mantissa if "." in mantissa else mantissa + ".0"
        exponent = exponent if exponent[:1] in "+-" else "+" + exponent
        candidates.append(f"{mantissa}e{exponent}")
    good = []
    for c in candidates:
        try:
            parsed = load_yaml_text(c)
        except yaml.YAMLError:
            continue
        if isinstance(parsed, float) and parsed == number and c not in good:
            good.append(c)
    return good or [repr(number)]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _shown(text: str, width: int = 80) -> str:
    """``repr(text)``, cut to about ``width`` characters for a message."""
    return repr(text) if len(text) <= width else repr(text[:width]) + f" (+{len(text) - width} characters)"


def parse_override(text: str) -> tuple[str, Any]:
    """``"trainer.max_steps=50"`` -> ``("trainer.max_steps", 50)``; the value is parsed as YAML.

    Raises:
        SpecError: no ``=`` or an empty key.
    """
    if "=" not in text:
        raise SpecError([f"-o {_shown(text)}: an override is key=value, e.g. -o trainer.max_steps=50."])
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise SpecError([f"-o {_shown(text)}: the key before '=' is empty."])
    try:
        value = load_yaml_text(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise SpecError([f"-o {_shown(text)}: the value is not valid YAML ({yaml_problem(e)})."]) from e
    shape = structure_problem(value, f"-o {key}")
    if shape:
        raise SpecError([shape])
    bad_keys = _non_string_keys(value, key)
    if bad_keys:
        raise SpecError([f"-o {_shown(text)}: {bad_keys[0]}"])
    wrapped = {key: value}
    traps = _traps(wrapped)
    if traps:
        raise SpecError([f"-o {problem}" for _, problem in traps])
    return normalize_key(key), value


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that names a key twice (PyYAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *base": its keys may be overridden here
                continue
            if (
                isinstance(key_node, yaml.ScalarNode)
                and key_node.tag == "tag:yaml.org,2002:bool"
                and key_node.value.lower() not in ("true", "false")
            ):
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"the key {key_node.value!r} is read by YAML 1.1 as the boolean "
                    f"{self.construct_object(key_node)}; quote it ('{key_node.value}':) to use it as a name",
                    key_node.start_mark,
                )
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key; PyYAML reports it below
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {first.line + 1}): YAML would silently keep the last "
                    "value; keep one (to compare both, list them as an axis under 'grid')",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


class YamlTrap(str):
    """A number YAML 1.1 reads other than it looks (base 60 ``1:30:00`` = 5400, octal ``010`` = 8),
    kept as its text with ``problem`` (the fix); :func:`read_yaml` reports and drops it, so the rest
    of the file is still checked."""

    problem: str = ""


def _no_base_60(kind: str):
    """PyYAML's int or float constructor, trapping YAML 1.1's base-60 form (``1:30:00`` is 5400)
    and, for ints, its octal form (``010`` is 8) as a :class:`YamlTrap`."""
    base = yaml.SafeLoader.yaml_constructors[f"tag:yaml.org,2002:{kind}"]

    def construct(loader, node):
        value = base(loader, node)
        text = node.value
        if ":" in text:
            problem = (
                f"{text!r} is read by YAML 1.1 as the base-60 number {value}, not a time; write a plain "
                "number in the setting's unit (timeout_min: 90 for 1 h 30 min), or quote it if it is text"
            )
        elif kind == "int" and re.fullmatch(r"[-+]?0[0-7_]+", text):
            digits = text.lstrip("+-").lstrip("0_") or "0"
            problem = (
                f"{text!r} is read by YAML 1.1 as the octal number {value}; write {digits} without the "
                f"leading zero (or {value} if octal was meant), or quote it if it is text"
            )
        else:
            return value
        trap = YamlTrap(text)
        trap.problem = f"{problem} (line {node.start_mark.line + 1})"
        return trap

    return construct


def _traps(node: Any, where: str = "") -> list[tuple[str, str]]:
    """``(dotted key, problem)`` of every :class:`YamlTrap` in ``node``, each dropped from it."""
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for k in list(node):
            here = f"{where}.{k}" if where else str(k)
            if isinstance(node[k], YamlTrap):
                found.append((here, f"{here}: {node.pop(k).problem}."))
            else:
                found += _traps(node[k], here)
    elif isinstance(node, list):
        for i, v in enumerate(list(node)):
            if isinstance(v, YamlTrap):
                found.append((where, f"{where}[{i}]: {v.problem}."))
        node[:] = [v for v in node if not isinstance(v, YamlTrap)]
        for v in node:
            found += _traps(v, where)
    return found


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _no_base_60("int"))
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:float", _no_base_60("float"))


#: Limits on a grid's YAML: nesting depth, and values counted with every alias expanded.
MAX_DEPTH = 64
MAX_VALUES = 200_000


def structure_problem(node: Any, where: str = "the file") -> str | None:
    """Why YAML data cannot be a grid's settings: an alias inside its own anchor (a value that
    contains itself), nesting deeper than :data:`MAX_DEPTH`, or more than :data:`MAX_VALUES`
    values once aliases are expanded (an "alias bomb"); None when it is fine."""
    stack: list[tuple[Any, int, frozenset[int]]] = [(node, 0, frozenset())]
    seen = 0
    while stack:
        value, depth, path = stack.pop()
        if not isinstance(value, Mapping | list):
            continue
        if id(value) in path:
            return f"{where} holds a value that contains itself (a YAML alias inside its own anchor); write it out."
        if depth > MAX_DEPTH:
            return f"{where} nests deeper than {MAX_DEPTH} levels; settings are a few levels deep."
        children = list(value.values()) if isinstance(value, Mapping) else value
        seen += len(children)
        if seen > MAX_VALUES:
            return (
                f"{where} holds more than {MAX_VALUES:,} values once its YAML aliases are expanded; "
                "write the settings out instead of nesting aliases."
            )
        inner = path | {id(value)}
        stack.extend((child, depth + 1, inner) for child in children)
    return None


def yaml_problem(e: yaml.YAMLError) -> str:
    """A YAML error in one line: where (line, column) and what, without PyYAML's stream name."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None)
    if mark is None or problem is None:
        return str(e)
    context = getattr(e, "context", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: {context + ', ' if context else ''}{problem}"


def load_yaml_text(text: str) -> Any:
    """``yaml.safe_load`` that rejects duplicate mapping keys (:class:`yaml.YAMLError` with line).

    Raises:
        yaml.YAMLError: bad YAML, a key given twice, or nesting so deep that PyYAML's parser
        (recursive) runs out of stack.
    """
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except RecursionError as e:
        raise yaml.YAMLError(f"nested deeper than Python can parse (more than {MAX_DEPTH} levels)") from e


#: Keys that describe one file and are not inherited through ``include:``.
OWN_KEYS = ("name", "description", "notes")


#: The problems of the :class:`YamlTrap` values :func:`read_yaml` dropped while one grid loads, and
#: their keys (set by :func:`load_grid`).
_YAML_TRAPS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("yaml_traps", default=None)
_YAML_LEFT_OUT: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar(
    "yaml_left_out", default=None
)


def read_yaml(path: Path, _seen: tuple[Path, ...] = ()) -> dict:
    """Read a grid file and everything it ``include:``s, merged (this file over its includes).

    Raises:
        SpecError: missing file, YAML syntax error, a non-mapping document, or an include cycle.
    """
    path = Path(path)
    if path.resolve() in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, path.resolve()))
        raise SpecError([f"include cycle: {chain}."], path)
    if path.is_dir():
        yamls = sorted(p.name for p in path.glob("*.yaml"))[:3]
        hint = f" (it holds {', '.join(yamls)})" if yamls else ""
        raise SpecError([f"{path} is a folder, not a grid file{hint}; give the grid's YAML file."], path)
    if not path.is_file():
        raise SpecError([f"no such grid file: {path}."], path)
    try:
        data = load_yaml_text(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise SpecError([f"not a UTF-8 text file ({e.reason} at byte {e.start})."], path) from e
    except yaml.YAMLError as e:
        raise SpecError([f"not valid YAML at {yaml_problem(e)}"], path) from e
    if data is None and not _seen:
        raise SpecError(
            ["the file is empty (or only comments): a grid needs at least task: {name: ...}."], path
        )
    data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise SpecError([f"a grid file must be a mapping of keys, got {type(data).__name__}."], path)
    shape = structure_problem(data)  # before any walk of the data: an alias may contain itself
    if shape:
        raise SpecError([shape], path)
    traps = _traps(data)
    said, keys = _YAML_TRAPS.get(), _YAML_LEFT_OUT.get()
    if traps and (said is None or keys is None):  # read outside load_grid: refuse at once
        raise SpecError([p for _, p in traps], path)
    if traps:
        said.extend(f"{path.name}: {p}" if _seen else p for _, p in traps)
        keys.update(normalize_key(k) for k, _ in traps)
    includes = data.get("include") or []
    includes = [includes] if isinstance(includes, str) else includes
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise SpecError(
            [f"include: {data.get('include')!r}: give a file name or a list of file names."], path
        )
    for inc in includes:
        if (path.parent / inc).is_dir():
            raise SpecError(
                [f"include: {inc!r}: {path.parent / inc} is a folder; include a grid file."], path
            )
        if not (path.parent / inc).is_file():
            raise SpecError([f"include: {inc!r}: no such file {path.parent / inc}."], path)
    merged: dict = {}
    for inc in includes:
        included = read_yaml(path.parent / inc, (*_seen, path.resolve()))
        # a file's identity is its own: an unnamed grid is named after its file, not after its base
        included = {k: v for k, v in included.items() if k not in OWN_KEYS}
        merged = _merge_files(merged, included)
    # Axes are not merged key by key with the included file's axes: a grid names its own axes.
    return _merge_files(merged, {k: v for k, v in data.items() if k != "include"})


def finding_origins(path: Path) -> dict[str, list[Path]]:
    """For each finding a grid file ends up with, the files that state it, in merge order: its
    included files that do, then the file itself if it does (the last one's finding is the one
    used: a finding is replaced whole). Files that cannot be read give nothing (:func:`read_yaml`
    has named them)."""
    path = Path(path)
    try:
        data = load_yaml_text(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    if not isinstance(data, Mapping):
        return {}
    includes = data.get("include") or []
    includes = [includes] if isinstance(includes, str) else includes
    out: dict[str, list[Path]] = {}
    for inc in includes if isinstance(includes, list) else []:
        if isinstance(inc, str) and (path.parent / inc).resolve() != path.resolve():
            for k, files in finding_origins(path.parent / inc).items():
                out[k] = [*out.get(k, []), *files]
    own = data.get("findings")
    if isinstance(own, Mapping):
        for k, v in own.items():
            if v is None and str(k) in out:
                del out[str(k)]
            else:
                out[str(k)] = [*out.get(str(k), []), path]
    elif "findings" in data:
        out = {}
    return out


def _merge_files(base: Mapping, top: Mapping) -> dict:
    """One grid file's keys over another's: :func:`deep_merge`, except that ``report.smoothing`` is
    one choice (``{window: n}`` or ``{ema: a}``) and replaces the other file's whole."""
    report, under = top.get("report"), base.get("report")
    if isinstance(report, Mapping) and "smoothing" in report and isinstance(under, Mapping):
        base = {**base, "report": {k: v for k, v in under.items() if k != "smoothing"}}
    findings, included = top.get("findings"), base.get("findings")
    if isinstance(findings, Mapping) and isinstance(included, Mapping):  # a finding is replaced whole
        base = {**base, "findings": {k: {} if k in findings else v for k, v in included.items()}}
        # ``F1: null`` drops an included finding (as null unsets an included report key)
        dropped = [k for k, v in findings.items() if v is None and k in included]
        if dropped:
            top = {**top, "findings": {k: v for k, v in findings.items() if k not in dropped}}
            base["findings"] = {k: v for k, v in base["findings"].items() if k not in dropped}
    return deep_merge(base, top)


def _given_twice(where: str, axes: Sequence[Axis]) -> list[str]:
    """Keys set more than once in one place (``loss_type`` and ``trainer.loss_type`` are one key):
    only one of the values could ever apply."""
    counts: dict[str, int] = {}
    for a in axes:
        counts[a.key] = counts.get(a.key, 0) + 1
    return [
        f"{where}: {key} is given {n} times (bare and dotted names are one key); only one could apply, "
        "so give it once (list every value in one axis)."
        for key, n in counts.items()
        if n > 1
    ]


def _axis_list(section: Any, where: str, problems: list[str]) -> tuple[Axis, ...]:
    if section is None:
        return ()
    if not isinstance(section, Mapping):
        problems.append(f"{where} must be a mapping of key: [values], got {type(section).__name__}.")
        return ()
    axes = []
    for raw_key, values in section.items():
        key = normalize_key(str(raw_key))
        if not isinstance(values, list) or not values:
            fix = (
                "give it at least one value, or remove the axis"
                if isinstance(values, list) or values in (None, "")
                else f"write {raw_key}: [{values!r}] for a single value, or move it out of the axes"
            )
            problems.append(
                f"{where}.{raw_key}: an axis takes a non-empty list of values, got {values!r}; {fix}."
            )
            continue
        for v in values:
            p = check_setting(key, v, f"{where}.{raw_key}")
            if p:
                problems.append(p)
        coerced = tuple(coerce_number(key, v) for v in values)
        axes.append(Axis(key, coerced, tuple(values) if _changed(coerced, values) else None))
    return tuple(axes)


def _changed(coerced: Sequence[Any], written: Sequence[Any]) -> bool:
    """Whether coercion changed any value (``1 == 1.0``, so compare types)."""
    return any(type(a) is not type(b) for a, b in zip(coerced, written, strict=True))


def _zip_list(section: Any, where: str, problems: list[str]) -> tuple[tuple[Axis, ...], ...]:
    if section is None:
        return ()
    groups = section if isinstance(section, list) else [section]
    out = []
    for i, group in enumerate(groups):
        axes = _axis_list(group, f"{where}[{i}]", problems)
        lengths = {a.key: len(a.values) for a in axes}
        if len(set(lengths.values())) > 1:
            problems.append(
                f"{where}[{i}]: zipped axes move together and need equal lengths, got "
                + ", ".join(f"{k} ({n})" for k, n in lengths.items())
                + "."
            )
            continue
        if axes:
            out.append(axes)
    return tuple(out)


def _check_section_keys(config: Mapping, problems: list[str]) -> None:
    for key, value in config.items():
        if key not in TOP_LEVEL_KEYS:
            problems.append(
                f"unknown top-level key '{key}'.{_suggest(key, TOP_LEVEL_KEYS)} "
                f"Valid: {', '.join(TOP_LEVEL_KEYS)}."
            )
            continue
        if key in SETTING_SECTIONS:
            if not isinstance(value, Mapping):
                problems.append(f"'{key}' must be a mapping of settings, got {value!r}.")
                continue
            for k, v in value.items():
                p = check_setting(f"{key}.{k}", v, key)
                if p:
                    problems.append(p)
        elif key in SCALAR_SETTINGS:
            p = check_setting(key, value, key)
            if p:
                problems.append(p)


def _non_string_keys(node: Any, where: str) -> list[str]:
    out = []
    if isinstance(node, Mapping):
        for k, v in node.items():
            here = f"{where}.{k}" if where else str(k)
            if not isinstance(k, str):
                out.append(
                    f"{where or 'top level'}: key {k!r} is not a string ({type(k).__name__}); keys are "
                    f"names, so quote it ('{k}': ...)."
                )
            out += _non_string_keys(v, here)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _non_string_keys(v, f"{where}[{i}]")
    return out


def _shape_problems(config: Mapping[str, Any]) -> list[str]:
    """Structure the rest of loading relies on: string keys, and the grid language's containers."""
    out = _non_string_keys(config, "")
    if out:
        return out

    def expect(value: Any, kind: type, where: str, what: str) -> bool:
        if value is None or isinstance(value, kind):
            return True
        out.append(f"{where} must be {what}, got {type(value).__name__} {value!r}.")
        return False

    def zip_groups(value: Any, where: str) -> None:
        if expect(value, list, where, "a list of mappings of key: [values] (axes that move together)"):
            for i, group in enumerate(value or []):
                if not isinstance(group, Mapping):
                    out.append(f"{where}[{i}] must be a mapping of key: [values], got {group!r}.")

    expect(config.get("grid"), Mapping, "grid", "a mapping of key: [values]")
    expect(config.get("report"), Mapping, "report", f"a mapping of layout keys ({', '.join(REPORT_KEYS)})")
    expect(config.get("findings"), Mapping, "findings", "a mapping of finding id -> {claim, paper, ...}")
    zip_groups(config.get("zip"), "zip")
    if expect(config.get("subgrids"), Mapping, "subgrids", "a mapping of sub-grid name -> {set, grid, zip}"):
        for name, sub in (config.get("subgrids") or {}).items():
            where = f"subgrids.{name}"
            if not isinstance(sub, Mapping):
                out.append(
                    f"{where} must be a mapping with set, grid and zip (write {{}} for none), got {sub!r}."
                )
                continue
            expect(sub.get("set"), Mapping, f"{where}.set", "a mapping of key: value")
            expect(sub.get("grid"), Mapping, f"{where}.grid", "a mapping of key: [values]")
            zip_groups(sub.get("zip"), f"{where}.zip")
    return out


#: Keys of the top-level ``report:`` section: how the grid's report is laid out (no run setting;
#: no run id depends on it). Every key is optional; null leaves a key unset (also an included one).
#: The schema is :class:`harness.config.report_section.ReportSettings`.
REPORT_KEYS = report_section.REPORT_KEYS
REPORT_X, REPORT_LEAD = report_section.REPORT_X, report_section.REPORT_LEAD
REPORT_SMOOTHING = report_section.REPORT_SMOOTHING


def _override_report(
    config: dict, key: str, value: Any, where: str, report_where: dict[str, str], problems: list[str]
) -> None:
    """Apply a profile's or ``-o``'s ``report.KEY`` (or a whole ``report`` mapping, key by key) to
    ``config``, remembering where each key was given; values are checked with the file's."""
    if key == "report":
        if not isinstance(value, Mapping):
            problems.append(
                f"{where} = {value!r}: report is a mapping of layout keys ({', '.join(REPORT_KEYS)}); "
                "set one with report.KEY=VALUE."
            )
            return
        items = [(str(k), v, f"{where}.{k}") for k, v in value.items()]
    else:
        name = key[len("report.") :]
        if "." in name:
            head = name.split(".")[0]
            problems.append(
                f"{where}: '{key}': report keys have no sub-keys; set report.{head} whole "
                "(e.g. report.smoothing={window: 5})."
            )
            return
        items = [(name, value, where)]
    section = dict(config.get("report") or {})
    for name, v, w in items:
        section[name] = copy.deepcopy(v)
        report_where[name] = w
    config["report"] = section


def _run_setting_key(key: str, where: str) -> str | None:
    """Problem with ``key`` (dotted) as a setting the report compares or facets runs by, or None."""
    problem = check_key(key, where)
    if problem is None and key.startswith("executor."):
        problem = (
            f"{where}: '{key}': where a run executes is not one of its settings, so runs cannot be "
            "compared by it; name a run setting."
        )
    return problem


def _report_setting_keys(value: Any, where: str, problems: list[str]) -> list[str] | None:
    """``hue``/``col``/``row``: a setting key or a list of them, as dotted keys."""
    raw = [value] if isinstance(value, str) else value
    if not isinstance(raw, list) or not raw or not all(isinstance(k, str) and k.strip() for k in raw):
        problems.append(
            f"{where} = {value!r}: give a setting key or a non-empty list of them, written like grid "
            "keys (epsilon, task.kwargs.max_digits, seed), e.g. [epsilon, epsilon_high]; null for none."
        )
        return None
    keys: list[str] = []
    ok = True
    for k in raw:
        key = normalize_key(k.strip())
        problem = _run_setting_key(key, where)
        if problem is None and key in keys:
            problem = f"{where}: {key} is given twice (bare and dotted names are one key); give it once."
        if problem:
            problems.append(problem)
            ok = False
        else:
            keys.append(key)
    return keys if ok else None


def _report_baseline(value: Any, where: str, problems: list[str], grid_keys: Sequence[str]) -> str | None:
    """``baseline``: a variant label, or KEY=VALUE pairs joined by commas (spacing normalised).

    Keys are written like grid keys, or by the last part of a key the grid varies (as variant labels
    name it: ``max_digits=1``); they are kept as written, since the text may be a variant's label.
    """
    fix = (
        "write KEY=VALUE, several joined by commas ('epsilon=0.2, epsilon_high=0.2'), or a variant "
        "label (quoted when YAML would read it as a number)"
    )
    if not isinstance(value, str) or not value.strip():
        problems.append(f"{where} = {value!r}: the baseline is a non-empty string; {fix}.")
        return None
    text = value.strip()
    if "=" not in text:
        return text
    short = {k.rsplit(".", 1)[-1] for k in grid_keys}
    parts = []
    ok = True
    for part in text.split(","):
        k, sep, v = (s.strip() for s in part.partition("="))
        if not sep or not k or not v:
            problems.append(f"{where} = {value!r}: {part.strip()!r} is not KEY=VALUE; {fix}.")
            ok = False
            continue
        problem = None if k in short else _run_setting_key(normalize_key(k), where)
        if normalize_key(k) in (normalize_key(p.split("=", 1)[0]) for p in parts):
            problem = f"{where} = {value!r}: {k} is given twice; a baseline names one value per key."
        elif k == "seed":
            problem = (
                f"{where} = {value!r}: seed cannot name the baseline: a variant pools its seeds (each seed "
                "is one run of its interval); name the settings the variants differ in."
            )
        if problem:
            problems.append(problem)
            ok = False
        parts.append(f"{k}={v}")
    return ", ".join(parts) if ok else None


def _report_smoothing(value: Any, where: str, problems: list[str]) -> Any:
    """``smoothing``: :func:`harness.config.report_section.parse_smoothing`'s setting, or None (a problem)."""
    try:
        return report_section.parse_smoothing(value)
    except report_section.SmoothingError as e:
        part = f".{e.part}" if e.part else ""
        problems.append(f"{where}{part} = {e.value!r}: {e}")
        return None


def _report_target(value: Any, where: str, problems: list[str]) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str) and _is_number(value) and math.isfinite(float(value)):
        fix = f"write it bare: target: {float(value)!r}"
    else:
        fix = "write e.g. target: 0.9 (the metric value runs must reach), or leave it out"
    problems.append(f"{where} = {value!r}: the target is a finite number; {fix}.")
    return None


def _report_names(value: Any, where: str, problems: list[str], many: bool) -> Any:
    """``metric`` (``many`` False): a metric name; ``curves``/``metrics``: a list of them."""
    if not many:
        if isinstance(value, str) and value.strip():
            return value.strip()
        problems.append(f"{where} = {value!r}: give a metric name, e.g. reward or eval/accuracy.")
        return None
    if not isinstance(value, list) or not all(isinstance(m, str) and m.strip() for m in value):
        example = f"[{value}]" if isinstance(value, str) else "[reward, eval/accuracy]"
        problems.append(f"{where} = {value!r}: give a list of metric names, e.g. {example}.")
        return None
    names = [m.strip() for m in value]
    twice = sorted({m for m in names if names.count(m) > 1})
    if twice:
        problems.append(f"{where}: {', '.join(twice)} is listed more than once; list each metric once.")
        return None
    return names


def _report_choice(value: Any, where: str, problems: list[str], choices: Sequence[str], what: str) -> Any:
    if isinstance(value, str) and value in choices:
        return value
    name = where.rsplit(".", 1)[-1]
    example = f"-o report.{name}={choices[0]}" if where.startswith("-o") else f"{name}: {choices[0]}"
    problems.append(f"{where} = {value!r}: {what} is one of {', '.join(choices)}; write e.g. {example}.")
    return None


def check_report(
    section: Any,
    problems: list[str],
    given_at: Mapping[str, str] | None = None,
    grid_keys: Sequence[str] = (),
) -> dict[str, Any]:
    """The ``report:`` section checked and normalised, as JSON data; problems go to ``problems``.

    ``hue``/``col``/``row`` become lists of dotted setting keys; ``smoothing`` one of "auto", "none",
    ``{"window": n}``, ``{"ema": a}``; ``target`` a float; other keys as given. Keys left out or null
    are absent. ``given_at`` names where a key was set when not in the file (``-o report.x``,
    ``profiles.quick.report.hue``); ``grid_keys`` are the grid's varying keys (a baseline may name
    them by their last part, as variant labels do).
    """
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        problems.append(
            f"report = {section!r}: report is a mapping of layout keys ({', '.join(REPORT_KEYS)}), "
            "e.g. report: {hue: loss_type, x: tokens}."
        )
        return {}
    given_at = given_at or {}
    out: dict[str, Any] = {}
    for name, value in section.items():
        where = given_at.get(name, f"report.{name}")
        if name not in REPORT_KEYS:
            problems.append(
                f"{where}: unknown report key '{name}'.{_suggest(str(name), REPORT_KEYS)} "
                f"Valid: {', '.join(REPORT_KEYS)}."
            )
            continue
        if value is None:
            continue
        checked = _REPORT_CHECKS[name](value, where, problems, grid_keys)
        if checked is not None:
            out[name] = checked
    return {k: out[k] for k in REPORT_KEYS if k in out}


def _report_seeds(value: Any, where: str, problems: list[str]) -> bool | None:
    if isinstance(value, bool):
        return value
    problems.append(f"{where} = {value!r}: seeds is true or false (draw each run faintly).")
    return None


#: How each ``report:`` key is checked: ``(value, where, problems, grid keys) -> value or None``.
_REPORT_CHECKS: dict[str, Callable[[Any, str, list[str], Sequence[str]], Any]] = {
    "hue": lambda v, w, p, g: _report_setting_keys(v, w, p),
    "col": lambda v, w, p, g: _report_setting_keys(v, w, p),
    "row": lambda v, w, p, g: _report_setting_keys(v, w, p),
    "baseline": _report_baseline,
    "x": lambda v, w, p, g: _report_choice(v, w, p, REPORT_X, "the x axis"),
    "lead": lambda v, w, p, g: _report_choice(v, w, p, REPORT_LEAD, "the figure shown first"),
    "smoothing": lambda v, w, p, g: _report_smoothing(v, w, p),
    "metric": lambda v, w, p, g: _report_names(v, w, p, many=False),
    "curves": lambda v, w, p, g: _report_names(v, w, p, many=True),
    "metrics": lambda v, w, p, g: _report_names(v, w, p, many=True),
    "target": lambda v, w, p, g: _report_target(v, w, p),
    "seeds": lambda v, w, p, g: _report_seeds(v, w, p),
}


def load_grid(path: str | Path, overrides: Sequence[str] = (), profile: str | None = None) -> GridSpec:
    """Load a grid file, apply a profile and ``-o`` overrides, and check every key and type.

    An override of a key that is a grid axis replaces the axis by that single value.

    Raises:
        SpecError: listing every problem found (unknown keys with close matches, wrong types,
        malformed axes, unknown profile), naming the file.
    """
    path = Path(path)
    traps, trapped = _YAML_TRAPS.set([]), _YAML_LEFT_OUT.set(set())
    try:
        config = read_yaml(path)
        shape = [*(_YAML_TRAPS.get() or []), *_shape_problems(config)]
        left_out = set(_YAML_LEFT_OUT.get() or ())
    finally:
        _YAML_TRAPS.reset(traps)
        _YAML_LEFT_OUT.reset(trapped)
    if shape:  # the rest is checked on what has the expected shape: every problem in one pass
        config = _pruned(config)
    from harness.losses.loading import load_grid_plugins

    plugins = load_grid_plugins(config, overrides, profile)
    token = _PLUGIN_NOTE.set(plugins.key_note())
    try:
        grid = _checked_grid(path, config, overrides, profile, plugins)
    except SpecError as e:
        if shape:
            raise SpecError(
                [*shape, *e.problems], path, partial=e.partial, left_out=e.left_out | left_out
            ) from None
        raise
    finally:
        _PLUGIN_NOTE.reset(token)
    if shape:
        raise SpecError(shape, path, partial=grid, left_out=left_out)
    return grid


def _pruned(node: Any, where: str = "") -> Any:
    """``node`` without what :func:`_shape_problems` refuses (keys that are not strings, containers
    of the wrong kind), so that the rest of the file is still checked and each problem said once."""
    containers = {"grid": Mapping, "report": Mapping, "findings": Mapping, "subgrids": Mapping, "zip": list}
    containers.update({"set": Mapping} if where.startswith("subgrids.") else {})
    if isinstance(node, list):
        return [_pruned(v, where) for v in node if where not in ("zip", "") or isinstance(v, Mapping)]
    if not isinstance(node, Mapping):
        return node
    out = {}
    for k, v in node.items():
        if not isinstance(k, str):
            continue
        kind = containers.get(k) if where == "" or where.startswith("subgrids.") else None
        if kind is not None and v is not None and not isinstance(v, kind):
            continue
        inner = f"subgrids.{k}" if where == "subgrids" else (k if where == "" else f"{where}.{k}")
        if where == "subgrids" and not isinstance(v, Mapping):
            continue
        out[k] = _pruned(v, "zip" if k == "zip" else inner)
    return out


def _checked_grid(
    path: Path,
    config: dict,
    overrides: Sequence[str],
    profile: str | None,
    plugins: Any,
    salvage: bool = True,
) -> GridSpec:
    """:func:`load_grid` after the loss plugins are loaded: every key and type checked. On problems,
    the :class:`SpecError` carries the grid of what passed (``partial``, :func:`_partial_grid`) so
    that its cells are checked in the same pass. A ``loss_type`` naming nothing is reported here only
    when there is no such grid (else each cell reports it, :func:`harness.config.validate.rule_loss_type`)."""
    problems: list[str] = list(plugins.problems)
    pairs = _given_settings(config, overrides, profile, problems, path)
    axis_keys = {normalize_key(str(k)) for k in (config.get("grid") or {})}
    inner_keys = _inner_keys(config)
    for k in axis_keys & {k for k, why in inner_keys.items() if not _some_subgrids(why)}:
        problems.append(f"grid.{k}: {k} is also {inner_keys[k]}; give each key one place in the grid.")
    report_where: dict[str, str] = {}  # report key -> where its value was last given (a profile, -o)
    for key, value, given in pairs:
        where = f"-o {key}" if given == "-o" else given
        _apply_setting(config, key, value, where, axis_keys, inner_keys, report_where, problems)
    problems += _name_problems(config.get("name", path.stem))
    _check_section_keys(config, problems)
    axes = _axis_list(config.get("grid"), "grid", problems)
    zips = _zip_list(config.get("zip"), "zip", problems)
    subgrids = _subgrids(config.get("subgrids") or {}, problems)
    problems += _given_twice("grid and zip", [*axes, *(a for group in zips for a in group)])
    grid_keys = [a.key for a in (*axes, *(a for g in zips for a in g))]
    for sub in subgrids:
        given = [Axis(k, ()) for k, _ in sub.settings] + [*sub.axes, *(a for g in sub.zips for a in g)]
        problems += _given_twice(f"subgrids.{sub.name}", given)
        grid_keys += [a.key for a in given]
    report = check_report(config.get("report"), problems, report_where, grid_keys)
    from harness.config.findings import check_findings

    findings = check_findings(config.get("findings"), problems, path)
    raw = config.get("executor") if isinstance(config.get("executor"), Mapping) else {}
    typed = {k: v for k, v in raw.items() if check_setting(f"executor.{k}", v, "executor") is None}
    executor = ExecutorSettings.build(typed, problems)  # keys refused for their type are said above
    if problems:
        at = len(plugins.problems)
        left_out: set[str] = set()
        partial = _partial_grid(path, config, plugins, problems, left_out) if salvage else None
        problems[at:at] = plugins.unknown_problems()
        raise SpecError(problems, path, partial=partial, left_out=left_out)
    base = {k: copy.deepcopy(config[k]) for k in (*SETTING_SECTIONS, *SCALAR_SETTINGS) if k in config}
    if config.get("plugins"):  # each run imports them again where it trains (not in the run id)
        base["plugins"] = list(config["plugins"])
    base.pop("executor", None)
    _coerce_base(base)
    return GridSpec(
        name=str(config.get("name") or path.stem),
        source=path,
        base=base,
        axes=axes,
        zips=zips,
        subgrids=tuple(subgrids),
        executor=executor,
        description=str(config.get("description") or ""),
        notes=str(config.get("notes") or ""),
        overrides=tuple(overrides),
        profile=profile,
        profile_settings=tuple((k, v) for k, v, given in pairs if given != "-o"),
        report=report,
        findings=findings,
    )


def _given_settings(
    config: Mapping[str, Any], overrides: Sequence[str], profile: str | None, problems: list[str], path: Path
) -> list[tuple[str, Any, str]]:
    """``(key, value, where it was given)`` of the profile's settings, then the ``-o`` overrides
    (a ``profiles`` section that is not a mapping of mappings is a problem; its mappings still apply)."""
    profiles = config.get("profiles") or {}
    if not isinstance(profiles, Mapping):
        problems.append(
            f"profiles = {profiles!r}: give a mapping of profile name -> {{key: value}} overrides."
        )
        profiles = {}
    for name, settings in profiles.items():
        if not isinstance(settings, Mapping):
            problems.append(
                f"profiles.{name} = {settings!r}: a profile is a mapping of key: value overrides, "
                "e.g. {trainer.max_steps: 50}."
            )
    profiles = {k: v for k, v in profiles.items() if isinstance(v, Mapping)}
    for name, settings in profiles.items():  # an unselected profile's typo would wait for its day
        if name != profile:
            problems += [p for k in settings if (p := _profile_key_problem(normalize_key(str(k)), name))]
    pairs: list[tuple[str, Any, str]] = []
    if profile is not None:
        if profile not in profiles:
            problems.append(
                f"--profile {profile}: no such profile; this file has {', '.join(profiles) or 'none'}."
            )
        else:
            pairs += [(normalize_key(k), v, f"profiles.{profile}.{k}") for k, v in profiles[profile].items()]
    for text in overrides:
        try:
            pairs.append((*parse_override(text), "-o"))
        except SpecError as e:
            problems += e.problems
    return pairs


def _profile_key_problem(key: str, name: str) -> str | None:
    """An unknown key in profile ``name`` (one not selected now: its values are checked when it is)."""
    if key in OWN_KEYS or key == "report" or key.startswith(("report.", "grid.")):
        return None
    return check_key(key, f"profiles.{name}")


def _inner_keys(config: Mapping[str, Any]) -> dict[str, str]:
    """Keys a plain value cannot reach everywhere, with why: top-level zip axes, and keys a sub-grid
    sets itself (a profile or ``-o`` would change the other cells and not its own, so it is refused
    naming the sub-grids)."""
    inner: dict[str, str] = {}
    for group in config.get("zip") or []:
        for k in group if isinstance(group, Mapping) else []:
            inner[normalize_key(str(k))] = "a zip axis"
    per_sub: dict[str, set[str]] = {}
    for name, sub in (config.get("subgrids") or {}).items():
        if not isinstance(sub, Mapping):
            continue
        keys = set()
        for part in ("set", "grid"):
            if isinstance(sub.get(part), Mapping):
                keys |= {normalize_key(str(k)) for k in sub[part]}
        for group in sub.get("zip") or []:
            keys |= {normalize_key(str(k)) for k in (group if isinstance(group, Mapping) else [])}
        per_sub[str(name)] = keys
    for k in set.union(*per_sub.values()) if per_sub else ():
        names = [name for name, keys in per_sub.items() if k in keys]
        if len(names) == len(per_sub):
            inner.setdefault(k, "set by every sub-grid")
        else:  # the sub-grids that set it would keep their own value: refused rather than half-applied
            inner.setdefault(k, f"{SOME_SUBGRIDS}{'s' if len(names) > 1 else ''} {', '.join(names)}")
    return inner


#: How :func:`_inner_keys` begins the reason of a key that some sub-grids set, not all
SOME_SUBGRIDS = "set by sub-grid"


def _some_subgrids(why: str) -> bool:
    """Whether an :func:`_inner_keys` reason is "set by some sub-grids" (a profile may still set the
    base value the others take; an ``-o`` may not)."""
    return why.startswith(SOME_SUBGRIDS)


def _apply_setting(
    config: dict[str, Any],
    key: str,
    value: Any,
    where: str,
    axis_keys: set[str],
    inner_keys: Mapping[str, str],
    report_where: dict[str, str],
    problems: list[str],
) -> None:
    """Apply one profile setting or ``-o`` override to ``config`` (a ``report`` key, an own key such
    as ``name``, ``grid.<axis>`` replacing an axis's values, or a setting that replaces an axis of
    the same key), or add why it cannot be to ``problems``."""
    if key == "report" or key.startswith("report."):
        _override_report(config, key, value, where, report_where, problems)
        return
    if key in OWN_KEYS:
        config[key] = value
        return
    if key.startswith("grid."):  # -o grid.seed=[0,1]: replace (or add) a product axis's values
        axis = normalize_key(key[len("grid.") :])
        partial = _some_subgrids(inner_keys.get(axis, ""))
        if axis in inner_keys and (where.startswith("-o ") or not partial):
            ignored = "would not reach the cells that set it" if partial else "would be ignored"
            problems.append(
                f"{where}: {axis} is {inner_keys[axis]} in this grid, so a top-level axis {ignored}; "
                "edit the grid file (or a copy) instead."
            )
            return
        grid = {normalize_key(str(k)): v for k, v in (config.get("grid") or {}).items()}
        grid[axis] = value
        config["grid"] = grid
        axis_keys.add(axis)
        return
    p = check_setting(key, value, where)
    if p:
        problems.append(p)
        return
    partial = _some_subgrids(inner_keys.get(key, ""))
    if key in inner_keys and (where.startswith("-o ") or not partial):
        # a profile is the grid author's: its value is the base the other sub-grids take, as the
        # file's own base is; an -o from the command line must reach every cell or be refused
        problems.append(
            f"{where}: {key} is {inner_keys[key]} in this grid, so a plain override would not reach "
            "the cells that set it; edit the grid file (or a copy) instead."
        )
        return
    if key in axis_keys:
        config["grid"] = {k: v for k, v in config["grid"].items() if normalize_key(str(k)) != key}
    set_dotted(config, key, value)


def _partial_grid(
    path: Path, config: Mapping[str, Any], plugins: Any, problems: Sequence[str], left_out: set[str]
) -> GridSpec | None:
    """The grid of what in ``config`` (profile and ``-o`` applied) passes the file's checks, the
    rest left out at its defaults (:func:`_usable`, which adds their keys to ``left_out``; the
    executor, report and findings sections too where ``problems`` name them); None when even that
    is refused."""
    from dataclasses import replace

    try:
        usable = _usable(config, left_out)
        for section in ("executor", "report", "findings"):
            if section in config and not any(p.startswith(section) for p in problems):
                usable[section] = copy.deepcopy(config[section])
            elif section in ("report", "findings") and isinstance(config.get(section), Mapping):
                # the entries no problem names: a report's baseline, the findings whose arms can be checked
                usable[section] = {
                    k: copy.deepcopy(v)
                    for k, v in config[section].items()
                    if not any(
                        p.startswith((f"{section}.{k} ", f"{section}.{k}:", f"{section}.{k}."))
                        for p in problems
                    )
                }
        return _checked_grid(path, usable, (), None, replace(plugins, problems=[], unknown=[]), salvage=False)
    except Exception:  # the file's own problems are reported either way; its cells wait for them
        return None


def _usable(config: Mapping[str, Any], left_out: set[str]) -> dict[str, Any]:
    """A copy of ``config`` with only the settings and axis values that pass :func:`check_setting`
    and name a loss that loaded; an unusable name, executor, report or findings section left out.
    The dotted keys of the settings left out are added to ``left_out``."""
    keep = functools.partial(_usable_setting, left_out=left_out)
    out = {k: v for k, value in config.items() if (v := _usable_entry(k, value, keep)) is not None}
    if "name" in config:
        out["name"] = config["name"] if not _name_problems(config["name"]) else "unnamed"
    return out


def _usable_entry(key: str, value: Any, keep: Callable[[str, Any], bool]) -> Any:
    """The usable part of the top-level entry ``key: value`` (:func:`_usable`), or None."""
    if key in SETTING_SECTIONS and key != "executor" and isinstance(value, Mapping):
        return {k: copy.deepcopy(v) for k, v in value.items() if keep(f"{key}.{k}", v)}
    if key in SCALAR_SETTINGS:
        return value if keep(key, value) else None
    if key in ("grid", "zip"):
        return _usable_axes(value, keep) if key == "grid" else _usable_zips(value, keep)
    if key == "subgrids" and isinstance(value, Mapping):
        return {name: sub for name, raw in value.items() if (sub := _usable_subgrid(raw, keep))}
    return value if key in ("description", "notes", "plugins") else None


def _usable_setting(key: str, value: Any, left_out: set[str]) -> bool:
    """Whether ``key: value`` passes :func:`check_setting` and, for ``loss_type``, names a loss that
    loaded; else ``key`` is added to ``left_out``."""
    from harness import losses
    from harness.trl_boundary import loss_types

    is_loss = key in ("loss_type", "trainer.loss_type")
    known = isinstance(value, str) and (value in loss_types() or value in losses.REGISTRY)
    if check_setting(key, value, "") is not None or (is_loss and not known):
        left_out.update((key, *_meant(key)))
        return False
    return True


def _meant(key: str) -> list[str]:
    """The settings a refused ``key`` may have meant (its invisible characters dropped, the close
    matches of an unknown field): the cells' errors about their defaults are then not shown."""
    clean = "".join(c for c in key if c == " " or c.isprintable())
    head, _, name = clean.partition(".")
    if head not in SETTING_SECTIONS or not name or "." in name:
        return [clean]
    try:
        fields = list(section_fields(head))
    except Exception:  # a section whose fields cannot be listed here (peft without the package)
        return [clean]
    return [clean, *(f"{head}.{m}" for m in difflib.get_close_matches(name, fields, n=3, cutoff=0.6))]


def _usable_axes(section: Any, keep: Callable[[str, Any], bool]) -> dict[str, list]:
    if not isinstance(section, Mapping):
        return {}
    lists = {k: values for k, values in section.items() if isinstance(values, list)}
    kept = {k: [v for v in values if keep(normalize_key(str(k)), v)] for k, values in lists.items()}
    return {k: values for k, values in kept.items() if values}


def _usable_zips(section: Any, keep: Callable[[str, Any], bool]) -> list[dict]:
    """The zip groups all of whose values are usable (a group left partly would pair values anew)."""
    groups = section if isinstance(section, list) else [section] if section else []
    return [g for g in groups if isinstance(g, Mapping) and g and _usable_axes(g, keep) == dict(g)]


def _usable_subgrid(sub: Any, keep: Callable[[str, Any], bool]) -> dict | None:
    """A sub-grid's usable settings and axes; None when it is unreadable or sets a ``loss_type``
    that did not load (its other settings would be that plugin's unknown keys)."""
    settings = sub.get("set") if isinstance(sub, Mapping) else None
    settings = settings if isinstance(settings, Mapping) else {}
    losses_set = [v for k, v in settings.items() if normalize_key(str(k)) == "trainer.loss_type"]
    if not isinstance(sub, Mapping) or any(not keep("trainer.loss_type", v) for v in losses_set):
        return None
    good = {k: v for k, v in settings.items() if keep(normalize_key(str(k)), v)}
    return {
        "set": good,
        "grid": _usable_axes(sub.get("grid"), keep),
        "zip": _usable_zips(sub.get("zip"), keep),
    }


def _name_problems(name: Any) -> list[str]:
    """Why ``name`` cannot name a results folder (empty when it can)."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        return [
            f"name = {name!r}: results go to results/<name>/, so use letters, digits, '.', '_' and '-' "
            "only (in the file, a profile or -o name=...)."
        ]
    if len(name) > MAX_NAME:
        return [
            f"name = {name[:40]!r}... is {len(name)} characters: results go to results/<name>/, and a "
            f"folder name has at most 255 bytes on most file systems (less with its runs' paths under "
            f"it); use at most {MAX_NAME} characters."
        ]
    return []


#: Longest grid name: a results folder's own name, with room left for the files written under it
MAX_NAME = 128


def _subgrids(section: Mapping[str, Any], problems: list[str]) -> list[SubGrid]:
    """The ``subgrids:`` section, one :class:`SubGrid` each, every setting and axis checked."""
    subgrids = []
    for name, sub in section.items():
        where = f"subgrids.{name}"
        if invisible(str(name)):
            problems.append(
                f"subgrids: the name {shown_key(str(name))} holds {', '.join(invisible(str(name)))}; retype it "
                "(sub-grid names label the report's variants and the findings' arms)."
            )
        if not isinstance(sub, Mapping):
            problems.append(f"{where} must be a mapping with set/grid/zip.")
            continue
        for k in sub:
            if k not in ("set", "grid", "zip"):
                problems.append(f"{where}: unknown key '{k}'; a sub-grid has set, grid and zip.")
        written = []
        for k, v in (sub.get("set") or {}).items():
            key = normalize_key(str(k))
            p = check_setting(key, v, f"{where}.set")
            if p:
                problems.append(p)
            written.append((key, v))
        settings = tuple((k, coerce_number(k, v)) for k, v in written)
        subgrids.append(
            SubGrid(
                str(name),
                settings,
                _axis_list(sub.get("grid"), f"{where}.grid", problems),
                _zip_list(sub.get("zip"), f"{where}.zip", problems),
                tuple(written) if _changed([v for _, v in settings], [v for _, v in written]) else None,
            )
        )
    return subgrids
