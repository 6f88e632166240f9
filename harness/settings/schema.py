"""The settings of a grid, section by section, as frozen typed dataclasses; no torch, TRL or project import.

Every section of a grid file has its dataclass here: ``task`` (:class:`TaskSpec`), ``tiny``
(:class:`TinyModelSpec`), ``tiny_chat`` (:class:`TinyChatModelSpec`), ``tiny_steps``
(:class:`TinyStepsModelSpec`), ``harness`` (:class:`HarnessSettings`) and ``executor``
(:class:`ExecutorSettings`). The ``trainer`` section stays a mapping of TRL ``GRPOConfig`` fields:
its types and rules are TRL's (:mod:`harness.trl_boundary`, :mod:`harness.config.validate`).

Each section checks its own fields where they are declared, as TRL's ``GRPOConfig.__post_init__``
does: a field made with :func:`checked` carries its rules, and a section's ``_relations`` holds the
rules between its own fields. Constructing a section with bad values raises :class:`SpecError`
listing every problem, each naming the key, the value and the fix. Rules between sections (the
seed against the task's split sizes, the tiny model's tokenizer against a chat template) and TRL's
semantics stay in :mod:`harness.config.validate`.

Beside the sections: the language of field types (:func:`describe_hint`, :func:`type_ok`), the
dotted-key helpers, :func:`canonical_json` and :func:`run_id_of`. A grid and its runs, built from
these sections, are :mod:`harness.settings.runs`.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import hashlib
import json
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

#: ``trainer.ref_model_sync_steps: epoch`` syncs the reference model once per pass over the training
#: prompts; :func:`harness.config.grid.steps_per_epoch` turns it into optimizer steps.
EPOCH = "epoch"
EXECUTORS = ("local", "debug", "slurm")
DEVICES = ("cpu", "cuda", "auto")
#: Prompt templates of a task (see :mod:`harness.models.tasks`).
TEMPLATES = ("auto", "bare", "chat", "steps")
#: The built-in reward functions (:mod:`harness.rewards`); a grid may also name a registered reward plugin.
REWARD_NAMES = ("correctness", "format", "soft_overlong")
#: What a ``task.rewards`` entry written as a mapping may hold beside its reward's own settings.
REWARD_ENTRY_KEYS = ("name", "weight")
#: The embedded default model, built by :mod:`harness.models.tiny`.
TINY = "tiny"
#: The second embedded default, a chat model (byte-level BPE, chat template), built by
#: :mod:`harness.models.tiny_chat`.
TINY_CHAT = "tiny-chat"
#: The reasoning testbed: a tiny model warm-started on worked chains of steps (``task.template:
#: steps``), built by :mod:`harness.models.tiny_steps`.
TINY_STEPS = "tiny-steps"
#: The embedded models and the section of a grid file that holds each one's settings.
EMBEDDED_MODEL_SECTIONS = {TINY: "tiny", TINY_CHAT: "tiny_chat", TINY_STEPS: "tiny_steps"}
#: Byte tokens of a byte-level BPE: every byte is a token before any merge.
BYTE_TOKENS = 256
#: Special tokens of the tiny chat model's tokenizer (pad, bos, the role markers <|im_start|>, <|im_end|>).
CHAT_SPECIAL_TOKENS = 4
#: Fixed generator seed of every eval split. Training seeds must stay below it minus train_size.
EVAL_SEED = 1 << 30
#: Generator seeds reserved for warm-start (SFT) data of the tiny model, between training and eval seeds.
SFT_SEED_BASE = 1 << 29
RUN_ID_LENGTH = 10


class SpecError(ValueError):
    """One or more problems with a grid file; ``problems`` lists each as a full sentence.

    ``partial`` is the grid of what passed the file's checks (the settings with problems left out at
    their defaults, their dotted keys in ``left_out``), or None: its cells can still be checked, so
    that one pass reports every problem (:func:`harness.config.spec.load_grid`)."""

    def __init__(
        self,
        problems: Sequence[str],
        source: str | Path | None = None,
        partial: Any = None,
        left_out: Iterable[str] = (),
    ):
        self.problems = list(dict.fromkeys(problems))  # an axis repeats a key's problem per value
        self.source = str(source) if source is not None else None
        self.partial = partial
        self.left_out = frozenset(left_out)
        head = f"{self.source}: " if self.source else ""
        n = len(self.problems)
        super().__init__(
            f"{head}{n} problem{'s' if n != 1 else ''}:\n" + "\n".join(f"  - {p}" for p in self.problems)
        )


# --- nested settings ----------------------------------------------------------------------------


def set_dotted(config: dict, key: str, value: Any) -> None:
    """Set ``config[a][b][c] = value`` for ``key`` "a.b.c", creating mappings on the way."""
    parts = key.split(".")
    node = config
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = copy_settings(value)


def get_dotted(config: Mapping, key: str, default: Any = None) -> Any:
    """``config[a][b][c]`` for ``key`` "a.b.c", or ``default`` where a part is missing."""
    node: Any = config
    for p in key.split("."):
        if not isinstance(node, Mapping) or p not in node:
            return default
        node = node[p]
    return node


def copy_settings(obj: Any) -> Any:
    """A copy of nested settings: mappings and lists copied all the way down, other values shared
    (strings and numbers are immutable; anything else is copied with :func:`copy.deepcopy`). Several
    times quicker than ``copy.deepcopy`` on the JSON-like data of a grid."""
    if isinstance(obj, dict):
        return {k: copy_settings(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [copy_settings(v) for v in obj]
    if obj is None or isinstance(obj, str | int | float):
        return obj
    return copy.deepcopy(obj)


def deep_merge(base: Mapping, top: Mapping) -> dict:
    """``top`` over ``base``, recursively for mappings; lists and scalars in ``top`` replace."""
    out = copy_settings(dict(base))
    for k, v in top.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy_settings(v)
    return out


def canonical_json(obj: Any) -> str:
    """Key-sorted compact JSON; floats written by ``repr`` so 1e-3 and 0.001 hash the same."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def run_id_of(settings: Mapping[str, Any]) -> str:
    """First :data:`RUN_ID_LENGTH` hex digits of SHA-256 over :func:`canonical_json` of ``settings``
    (without ``plugins``, the modules that define loss plugins: where a loss comes from is not what
    it is, so listing another module keeps every run's id)."""
    identity = {k: v for k, v in settings.items() if k != "plugins"}
    return hashlib.sha256(canonical_json(identity).encode()).hexdigest()[:RUN_ID_LENGTH]


# --- the language of field types ------------------------------------------------------------


def describe_hint(hint: Any) -> Any:
    """A type hint as JSON data, the form :func:`type_ok` checks against and the verdict memo stores.

    ``"any" | "none" | "bool" | "int" | "float" | "str" | "list" | "dict"``, or one of
    ``{"union": [...]}``, ``{"literal": [...]}``, ``{"enum": name}``, ``{"class": name}``.
    """
    if hint is Any or hint is object:
        return "any"
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return {"union": [describe_hint(h) for h in typing.get_args(hint)]}
    if origin is typing.Literal:
        return {"literal": list(typing.get_args(hint))}
    if hint is type(None) or hint is None:
        return "none"
    if hint in (list, tuple, set) or origin in (list, tuple, Sequence, set):
        return "list"
    if hint is dict or origin in (dict, Mapping):
        return "dict"
    if hint in (bool, int, float, str):
        return hint.__name__
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": hint.__name__}
    if isinstance(hint, type):
        return {"class": hint.__name__}
    return "any"


def type_ok(value: Any, desc: Any) -> bool:
    """Whether ``value`` fits a hint described by :func:`describe_hint` (containers one level deep).

    ``float`` accepts ints; ``int`` rejects bools; an enum accepts strings (TRL checks the member);
    other classes accept nothing a YAML file can hold.
    """
    if isinstance(desc, dict):
        if "union" in desc:
            return any(type_ok(value, d) for d in desc["union"])
        if "literal" in desc:
            return value in desc["literal"]
        if "enum" in desc:
            return isinstance(value, str | enum.Enum)
        return False
    return _SIMPLE_CHECKS[desc](value)


#: The simple described types and what each accepts.
_SIMPLE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "any": lambda v: True,
    "none": lambda v: v is None,
    "bool": lambda v: isinstance(v, bool),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "list": lambda v: isinstance(v, list | tuple),
    "dict": lambda v: isinstance(v, Mapping),
}


def is_desc(desc: Any) -> bool:
    """Whether ``desc`` is a described hint (:func:`describe_hint`'s grammar); checks memo entries."""
    if isinstance(desc, str):
        return desc in _SIMPLE_CHECKS
    if not isinstance(desc, dict) or len(desc) != 1:
        return False
    ((kind, arg),) = desc.items()
    if kind == "union":
        return isinstance(arg, list) and all(is_desc(d) for d in arg)
    if kind == "literal":
        return isinstance(arg, list)
    return kind in ("enum", "class") and isinstance(arg, str)


def hint_name(desc: Any) -> str:
    """A described hint as people write it: ``float``, ``str | None``, ``SchedulerType | str``."""
    if isinstance(desc, dict):
        if "union" in desc:
            return " | ".join(hint_name(d) for d in desc["union"])
        if "literal" in desc:
            return f"Literal[{', '.join(map(repr, desc['literal']))}]"
        return desc.get("enum") or desc["class"]
    return "None" if desc == "none" else desc


def describe_fields(cls: type) -> dict[str, Any]:
    """``{field name: described type}`` (:func:`describe_hint`) of a dataclass's init fields."""
    hints = typing.get_type_hints(cls)
    return {f.name: describe_hint(hints.get(f.name, Any)) for f in dataclasses.fields(cls) if f.init}


# --- sections that check their own fields -------------------------------------------------------

Check = tuple[Callable[[Any], bool], str]


def checked(
    default: Any = dataclasses.MISSING, *checks: Check, factory: Any = None, missing: str = ""
) -> Any:
    """A dataclass field with its rules beside it: each ``(ok, why)`` must hold, else the section
    reports ``"<section>.<field> = <value> <why>."``. ``missing`` says what to write when a field
    without a default is left out."""
    metadata = {"checks": checks, "missing": missing}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def at_least(low: float, unit: str = "", optional: bool = False) -> Check:
    """``value >= low`` (or None, when ``optional``), as a :func:`checked` rule."""
    why = f"must be >= {low}{' ' + unit if unit else ''}{' (or unset)' if optional else ''}"
    return (lambda v: (optional and v is None) or v >= low), why


def one_of(choices: Sequence[Any], optional: bool = False) -> Check:
    """``value in choices`` (or None, when ``optional``), as a :func:`checked` rule."""
    shown = ", ".join(str(c) for c in choices)
    return (lambda v: (optional and v is None) or v in choices), f"is not one of {shown}; use one of them"


class Section:
    """What every settings section shares: its rules run when it is constructed.

    Raises (from construction):
        SpecError: one problem per field that breaks its rules (the first rule it breaks), then the
        section's relations between fields when every field is fine.
    """

    SECTION: ClassVar[str] = ""

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise SpecError(problems)

    def problems(self) -> list[str]:
        """Every broken rule of this section, as sentences; empty when it is fine."""
        out = []
        for name, checks in _rules(type(self)):
            value = getattr(self, name)
            for ok, why in checks:
                try:
                    good = bool(ok(value))
                except TypeError:  # None or a string compared with a number
                    good = False
                if not good:
                    out.append(f"{self.SECTION}.{name} = {value!r} {why}.")
                    break
        return out or self._relations()

    def _relations(self) -> list[str]:
        """Rules between this section's own fields (checked once each field is fine)."""
        return []

    @classmethod
    def build(cls, values: Mapping[str, Any], problems: list[str]) -> Any:
        """The section from a grid's mapping of its keys, or None with the reasons added to
        ``problems`` (unknown keys, fields without a default left out, broken rules).

        Sections are immutable, so equal mappings share one instance (the runs of a grid mostly
        share their task, tiny model and harness settings).
        """
        if not isinstance(values, Mapping):
            problems.append(f"{cls.SECTION} = {values!r} must be a mapping of settings.")
            return None
        key = (cls, repr(values))  # repr tells JSON values apart (1, 1.0, True, "1") and is quick
        if key not in _BUILT:
            found: list[str] = []
            _BUILT[key] = (cls._build(values, found), tuple(found))
        section, found = _BUILT[key]
        problems += found
        return section

    @classmethod
    def _build(cls, values: Mapping[str, Any], problems: list[str]) -> Any:
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
        found = []
        for k in values:
            if k not in fields:
                found.append(f"{cls.SECTION}: unknown key '{k}'; {cls.__name__} has {', '.join(fields)}.")
        for name, f in fields.items():
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if required and name not in values:
                found.append(f"{cls.SECTION}.{name} is not set: {f.metadata.get('missing') or 'give it'}.")
        if found:
            problems += found
            return None
        try:
            return cls(**values)
        except SpecError as e:
            problems += e.problems
            return None


_BUILT: dict[tuple[type, str], tuple[Any, tuple[str, ...]]] = {}


@functools.cache
def _rules(cls: type) -> tuple[tuple[str, tuple[Check, ...]], ...]:
    """``(field name, its rules)`` of a section class, for the fields that have rules."""
    return tuple((f.name, f.metadata["checks"]) for f in dataclasses.fields(cls) if f.metadata.get("checks"))


def _finite(v: Any) -> bool:
    return math.isfinite(v)


@dataclass(frozen=True)
class TaskSpec(Section):
    """Everything that defines a task (hashable, so it can key caches).

    Attributes:
        name: reasoning-gym dataset name, e.g. ``"chain_sum"``.
        kwargs: dataset config keyword args, e.g. ``{"min_terms": 2, "max_terms": 2, "max_digits": 1}``.
            ``seed`` and ``size`` are set by the harness and must not appear here.
        template: ``"bare"``, ``"chat"`` or ``"auto"`` (chat when the tokenizer has a chat template,
            else bare).
        train_size: number of training prompts (below :data:`SFT_SEED_BASE`).
        eval_size: number of held-out prompts for greedy eval.
        rewards: the reward functions, in the order TRL receives them: each a name (a built-in of
            :data:`REWARD_NAMES` or a registered reward plugin, :mod:`harness.rewards`) or a mapping
            ``{name: ..., weight: ..., <the reward's settings>}``; the weights become TRL's
            ``reward_weights`` (1.0 where an entry gives none).

    Whether reasoning-gym accepts ``name`` and ``kwargs`` is asked by :func:`harness.models.tasks.check_task`.
    """

    SECTION: ClassVar[str] = "task"

    name: str = checked(
        dataclasses.MISSING,
        (
            lambda v: isinstance(v, str) and bool(v.strip()),
            "must name a reasoning-gym dataset, e.g. chain_sum",
        ),
        missing="name a reasoning-gym dataset, e.g. task: {name: chain_sum} (or include: ablations/base.yaml)",
    )
    kwargs: Mapping[str, Any] = checked(
        None,
        (
            lambda v: not {"seed", "size"} & set(v),
            "must not set seed or size: the harness sets them per split; drop them",
        ),
        factory=dict,
    )
    template: str = checked("auto", one_of(TEMPLATES))
    train_size: int = checked(
        2000,
        at_least(1),
        (lambda v: v < SFT_SEED_BASE, f"must be < {SFT_SEED_BASE} (the SFT warm start's seeds start there)"),
    )
    eval_size: int = checked(200, at_least(1))
    rewards: tuple[Any, ...] = checked(
        ("correctness",),
        (lambda v: len(v) > 0, f"is empty; name one or more rewards, e.g. [{', '.join(REWARD_NAMES)}]"),
    )

    def _relations(self) -> list[str]:
        """Each ``rewards`` entry well formed (the reason, per entry), and each name given once."""
        out = []
        for i, entry in enumerate(self.rewards):
            problem = reward_entry_problem(entry)
            if problem:
                out.append(
                    f"task.rewards[{i}] = {entry!r}: {problem}. Write a reward's name, or a mapping "
                    "{name: ..., weight: ..., <its settings>}, e.g. [correctness, {name: soft_overlong, "
                    "weight: 1.0, soft_punish_cache: 16}]."
                )
        if out:
            return out
        names = [reward_entry_name(e) for e in self.rewards]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            out.append(
                f"task.rewards = {list(self.rewards)!r} repeats {', '.join(twice)}; give each reward once."
            )
        return out

    def __post_init__(self) -> None:
        if isinstance(self.rewards, list | str):  # YAML gives lists; the spec is hashable
            rewards = [self.rewards] if isinstance(self.rewards, str) else self.rewards
            object.__setattr__(self, "rewards", tuple(rewards))
        super().__post_init__()

    def __hash__(self) -> int:
        return hash(
            (self.name, json.dumps(dict(self.kwargs), sort_keys=True, default=str), self.template)
            + (self.train_size, self.eval_size, canonical_json(list(self.rewards)))
        )

    @property
    def reward_names(self) -> tuple[str, ...]:
        """The rewards' names, in the order TRL receives them (``rewards/<name>/mean`` in the record)."""
        return tuple(reward_entry_name(e) for e in self.rewards)

    @property
    def reward_weights(self) -> tuple[float, ...] | None:
        """Each reward's weight (1.0 where an entry gives none), or None when no entry gives one
        (TRL's ``reward_weights`` then stays as the trainer section sets it)."""
        if not any(isinstance(e, Mapping) and "weight" in e for e in self.rewards):
            return None
        return tuple(float(e.get("weight", 1.0)) if isinstance(e, Mapping) else 1.0 for e in self.rewards)

    def reward_settings(self, name: str) -> dict[str, Any]:
        """The settings an entry gives reward ``name`` (its keys but ``name`` and ``weight``)."""
        for e in self.rewards:
            if isinstance(e, Mapping) and e.get("name") == name:
                return {k: v for k, v in e.items() if k not in REWARD_ENTRY_KEYS}
        return {}


def reward_entry_name(entry: Any) -> str:
    """The reward a ``task.rewards`` entry names: the entry itself, or its mapping's ``name``."""
    return str(entry.get("name")) if isinstance(entry, Mapping) else str(entry)


def _reads_as_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def reward_entry_problem(entry: Any) -> str | None:
    """Why a ``task.rewards`` entry is malformed (its shape only: whether the name is registered
    and its settings fit are :mod:`harness.config.rules_sampling`'s), or None."""
    if isinstance(entry, str):
        return None if entry.strip() else "an empty name"
    if not isinstance(entry, Mapping):
        return f"a {type(entry).__name__} is neither a reward's name nor a mapping"
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        return "the mapping has no name (name: correctness, ...)"
    weight = entry.get("weight", 1.0)
    if isinstance(weight, str) and _reads_as_float(weight):
        return (
            f"{name}'s weight {weight!r} is text (YAML 1.1 reads an exponent without a dot, 1e-3, as a "
            "string): write it with a dot, 1.0e-3, or as a decimal"
        )
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
        return f"{name}'s weight {weight!r} is not a finite number"
    for key, value in entry.items():
        if key not in REWARD_ENTRY_KEYS and not isinstance(value, str | int | float | bool):
            return f"{name}'s setting {key} = {value!r} is not a number, string or boolean"
    return None


@dataclass(frozen=True)
class TinyModelSpec(Section):
    """Everything that defines the tiny model; its fields (with the task's dataset) key the cache.

    Architecture (Qwen2; about 0.66M parameters at the defaults with a ~20-symbol vocabulary):
        hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size: as in ``Qwen2Config``.
        max_position_embeddings: context length in tokens (prompt + completion must fit).

    Warm start (TRL ``SFTTrainer``, completion-only loss, cosine schedule):
        sft_steps: optimizer steps.
        sft_lr: peak learning rate.
        sft_batch_size: sequences per step.
        sft_examples: prompt/answer pairs generated for SFT, each with its own noise draw (generator
            seeds disjoint from the training and eval splits of ``harness.models.tasks``).
        label_noise: fraction of SFT answers (integers only) replaced by answer ± 1 or ± 2, each of the
            four offsets equally likely; 0 = clean labels.
        seed: seed of initialisation, data order, label noise and SFT data generation.
    """

    SECTION: ClassVar[str] = "tiny"

    hidden_size: int = checked(128, at_least(1))
    num_layers: int = checked(4, at_least(1))
    num_heads: int = checked(4, at_least(1))
    num_kv_heads: int = checked(4, at_least(1))
    intermediate_size: int = checked(256, at_least(1))
    max_position_embeddings: int = checked(64, at_least(1))
    sft_steps: int = checked(600, at_least(1))
    sft_lr: float = checked(3e-3, (lambda v: v > 0 and _finite(v), "must be a finite number > 0"))
    sft_batch_size: int = checked(64, at_least(1))
    sft_examples: int = checked(4096, at_least(1))
    label_noise: float = checked(
        0.5, (lambda v: 0 <= v <= 1, "is a fraction of SFT answers: use a value in [0, 1]")
    )
    seed: int = checked(0, at_least(0))

    def _relations(self) -> list[str]:
        room = EVAL_SEED - SFT_SEED_BASE  # the SFT data's generator seeds: SFT_SEED_BASE + seed + i
        s = self.SECTION
        if self.seed + self.sft_examples > room:
            return [
                f"{s}.seed = {self.seed} with {s}.sft_examples = {self.sft_examples}: the warm start's data "
                f"would reach the eval split's seeds; keep seed + sft_examples <= {room}."
            ]
        if self.hidden_size % self.num_heads:
            return [
                f"{s}.hidden_size = {self.hidden_size} must be a multiple of {s}.num_heads = {self.num_heads}."
            ]
        if self.num_heads % self.num_kv_heads:
            return [
                f"{s}.num_heads = {self.num_heads} must be a multiple of {s}.num_kv_heads = {self.num_kv_heads}."
            ]
        return []


@dataclass(frozen=True)
class TinyChatModelSpec(TinyModelSpec):
    """Everything that defines the tiny chat model (``model: tiny-chat``); the grid's ``tiny_chat`` section.

    The fields of :class:`TinyModelSpec` with the same meaning (other defaults: prompts are
    chat-templated conversations, about 50 tokens), and:

        vocab_size: tokens of the byte-level BPE tokenizer: the 256 byte tokens, the 4 special tokens
            (pad, bos, ``<|im_start|>``, ``<|im_end|>``) and the merges learnt on the task's texts
            (fewer when the texts run out of pairs to merge).
        format_noise: fraction of SFT answers written without the ``<answer>`` tags or with a
            malformed tag, one of four ways (drawn independently of ``label_noise``); 0 = every answer
            well formed. At 0.8 the tagged answer is as likely as each malformed way, which is what
            lets GRPO raise greedy accuracy along with the reward.

    Built by :mod:`harness.models.tiny_chat`.
    """

    SECTION: ClassVar[str] = "tiny_chat"

    vocab_size: int = checked(
        512,
        (
            lambda v: v > BYTE_TOKENS + CHAT_SPECIAL_TOKENS,
            f"must be > {BYTE_TOKENS + CHAT_SPECIAL_TOKENS}: the tokenizer holds {BYTE_TOKENS} byte tokens "
            f"and {CHAT_SPECIAL_TOKENS} special tokens before any merge",
        ),
        (lambda v: v <= 65536, "must be <= 65536 (a tiny model's vocabulary)"),
    )
    hidden_size: int = checked(64, at_least(1))
    num_layers: int = checked(2, at_least(1))
    num_heads: int = checked(4, at_least(1))
    num_kv_heads: int = checked(2, at_least(1))
    intermediate_size: int = checked(128, at_least(1))
    max_position_embeddings: int = checked(128, at_least(1))
    sft_steps: int = checked(600, at_least(1))
    format_noise: float = checked(
        0.8, (lambda v: 0 <= v <= 1, "is a fraction of SFT answers: use a value in [0, 1]")
    )


def _fraction(what: str) -> Check:
    return (lambda v: 0 <= v <= 1, f"is a fraction of {what}: use a value in [0, 1]")


@dataclass(frozen=True)
class TinyStepsModelSpec(TinyModelSpec):
    """Everything that defines the reasoning testbed (``model: tiny-steps``); the grid's ``tiny_steps``
    section.

    The fields of :class:`TinyModelSpec` with the same meaning (other defaults: completions are
    worked chains of tens of tokens), except that ``label_noise`` is the fraction of SFT chains in
    which one step's result is off by ±1 or ±2 and the chain goes on from the wrong value. Three
    more kinds of error, each drawn independently per chain, make length and correctness move apart:

        skip_noise: fraction of chains that leave one term out (one step shorter, wrong unless the
            term is 0).
        repeat_noise: fraction of chains that apply one term again, 1 to 3 extra times (as many steps
            longer, wrong unless the term is 0).
        redundant_noise: fraction of chains that write one step twice (one step longer, still right).

    Built by :mod:`harness.models.tiny_steps`.
    """

    SECTION: ClassVar[str] = "tiny_steps"

    max_position_embeddings: int = checked(128, at_least(1))
    sft_steps: int = checked(1500, at_least(1))
    sft_examples: int = checked(8192, at_least(1))
    label_noise: float = checked(0.2, _fraction("SFT chains"))
    skip_noise: float = checked(0.2, _fraction("SFT chains"))
    repeat_noise: float = checked(0.2, _fraction("SFT chains"))
    redundant_noise: float = checked(0.15, _fraction("SFT chains"))


@dataclass(frozen=True)
class HarnessSettings(Section):
    """How the harness observes a run (none of this changes what TRL computes).

    Attributes:
        eval_steps: greedy eval accuracy on the held-out split every this many optimizer steps
            (and at the last step); 0 turns it off.
        eval_max_new_tokens: token budget of the greedy eval; None = the trainer's max_completion_length.
        sampled_eval_n: samples per prompt of the sampled eval, run beside the greedy eval at its steps
            (and before the first step); it records pass@k for k = 1, 2, 4, ... up to n and the mean
            score of the samples; 0 turns it off.
        sampled_eval_temperature: the sampled eval's temperature (> 0, finite); top_p 1 and no top_k,
            so the temperature alone shapes the distribution.
        sampled_eval_prompts: the sampled eval takes the first this many prompts of the eval split;
            None = all ``task.eval_size`` of them.
        samples_steps: every this many steps, ``samples_n`` sampled completions go to samples.jsonl; 0 = off.
        samples_n: completions written each time.
        flush_every: metric rows buffered before a parquet part is written (a kill loses at most this many).
        checkpoint_steps: trainer checkpoint every this many steps (0 = only on preemption); sets
            GRPOConfig ``save_steps`` unless the trainer block sets it.
        keep_checkpoints: complete checkpoints kept; older ones are pruned once a new one is complete
            (:mod:`harness.train.checkpoints`), unless the trainer block sets ``save_total_limit``.
        device: "cpu", "cuda" or "auto" (cuda when the executing machine has it); decides
            ``use_cpu`` and the ``bf16`` default used to validate and run.
        threads: torch threads per process; None = the executor's ``threads_per_run``.
        ref_model_sync_every: set by the harness to "epoch" when ``trainer.ref_model_sync_steps: epoch``
            was resolved to a step count (recorded in the run config; not for writing by hand).
    """

    SECTION: ClassVar[str] = "harness"

    eval_steps: int = checked(25, at_least(0))
    eval_max_new_tokens: int | None = checked(None, at_least(1, "token", optional=True))
    sampled_eval_n: int = checked(0, at_least(0, "samples per prompt"))
    sampled_eval_temperature: float = checked(
        1.0, (lambda v: v > 0 and _finite(v), "must be a finite number > 0; the greedy eval is temperature 0")
    )
    sampled_eval_prompts: int | None = checked(None, at_least(1, "prompt", optional=True))
    samples_steps: int = checked(25, at_least(0))
    samples_n: int = checked(4, at_least(0))
    flush_every: int = checked(5, at_least(1))
    checkpoint_steps: int = checked(50, at_least(0))
    keep_checkpoints: int = checked(2, at_least(1))
    device: str = checked("auto", one_of(DEVICES))
    threads: int | None = checked(None, at_least(1, optional=True))
    ref_model_sync_every: str | None = checked(None, one_of((EPOCH,), optional=True))


#: What dynamic sampling filters on by default: the reward TRL computes advantages from (the
#: weighted sum of the reward functions); a reward's name filters on that reward alone.
DYNAMIC_SAMPLING_REWARD = "reward"


@dataclass(frozen=True)
class DynamicSamplingSettings(Section):
    """Dynamic sampling (DAPO, arXiv:2503.14476, §3.2; verl's ``algorithm.filter_groups``): the
    grid's ``dynamic_sampling`` section. Changes what a run trains on, so it is part of the run's
    identity (a grid that leaves the section out keeps its run ids).

    Attributes:
        enable: drop every group (a prompt's ``num_generations`` completions) whose metric values
            are all equal, and generate from further prompts of the training split until the
            generation batch holds as many kept groups as it would without the filter.
        metric: ``"reward"`` (the weighted sum TRL computes advantages from) or the name of one of
            the run's ``task.rewards`` (verl's ``metric``: ``acc``, ``score``, ...).
        max_gen_batches: generation batches per generation at most, the first included (verl's
            ``max_num_gen_batches``); when they are spent the step trains on what was kept and its
            row says it ran short (``dynamic_sampling/short``).
    """

    SECTION: ClassVar[str] = "dynamic_sampling"

    enable: bool = False
    metric: str = checked(
        DYNAMIC_SAMPLING_REWARD,
        (
            lambda v: isinstance(v, str) and bool(v.strip()),
            "must be 'reward' or the name of one of task.rewards",
        ),
    )
    max_gen_batches: int = checked(10, at_least(1, "generation batch"))


@dataclass(frozen=True)
class ExecutorSettings(Section):
    """Where runs execute (submitit). Not part of a run's identity: moving a grid keeps its run ids.

    Attributes:
        name: "local" (submitit's local executor, one process per run), "debug" (in-process) or "slurm".
        max_parallel: runs at once locally; None = cores // threads_per_run (at least 1).
        threads_per_run: torch threads each run uses.
        timeout_min: wall-clock limit per run, minutes.
        partition, account, qos, constraint: SLURM placement.
        nodes, tasks_per_node, gpus_per_node, cpus_per_task, mem_gb: SLURM resources per run
            (mem_gb in GiB).
        array_parallelism: SLURM array throttle (runs of one array at once).
        additional_parameters: extra sbatch parameters (submitit's ``slurm_additional_parameters``).
        setup: shell lines run before each job (``module load ...``, activating an environment).
    """

    SECTION: ClassVar[str] = "executor"

    name: str = checked("local", one_of(EXECUTORS))
    max_parallel: int | None = checked(None, at_least(1, optional=True))
    threads_per_run: int = checked(1, at_least(1))
    timeout_min: int = checked(60, (lambda v: v > 0, "must be > 0 minutes"))
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    nodes: int = checked(1, at_least(1))
    tasks_per_node: int = checked(1, at_least(1))
    gpus_per_node: int = checked(0, at_least(0))
    cpus_per_task: int | None = checked(None, at_least(1, optional=True))
    mem_gb: float | None = checked(
        None, (lambda v: v is None or (v > 0 and _finite(v)), "must be a finite number > 0")
    )
    array_parallelism: int = checked(256, at_least(1))
    additional_parameters: dict[str, Any] = field(default_factory=dict)
    setup: list[str] = checked(
        None,
        (lambda v: all(isinstance(line, str) for line in v), "must be a list of shell lines (strings)"),
        factory=list,
    )

    @property
    def num_processes(self) -> int:
        """Processes one run has: ``nodes * tasks_per_node``."""
        return self.nodes * self.tasks_per_node

    def _relations(self) -> list[str]:
        """Process counts an executor cannot give a run, refused rather than run with fewer."""
        out = []
        if self.nodes > 1 and self.name != "slurm":
            out.append(
                f"executor.nodes = {self.nodes} with executor.name = {self.name!r}: only SLURM runs a job on "
                "several machines; set executor.name: slurm, or drop executor.nodes."
            )
        if self.tasks_per_node > 1 and self.name == "debug":
            out.append(
                f"executor.tasks_per_node = {self.tasks_per_node} with executor.name = 'debug': the debug "
                "executor trains in this one process; use executor.name: local for several processes."
            )
        if 0 < self.gpus_per_node < self.tasks_per_node:
            out.append(
                f"executor.gpus_per_node = {self.gpus_per_node} with executor.tasks_per_node = "
                f"{self.tasks_per_node}: local rank{'s' if self.tasks_per_node - self.gpus_per_node > 1 else ''} "
                f"{self.gpus_per_node}{'-' + str(self.tasks_per_node - 1) if self.tasks_per_node - self.gpus_per_node > 1 else ''} would "
                "have no GPU; set tasks_per_node <= gpus_per_node (one process per GPU)."
            )
        return out


#: The section class of each embedded model's section (:data:`EMBEDDED_MODEL_SECTIONS`).
EMBEDDED_SPECS: dict[str, type[TinyModelSpec]] = {
    "tiny": TinyModelSpec,
    "tiny_chat": TinyChatModelSpec,
    "tiny_steps": TinyStepsModelSpec,
}
