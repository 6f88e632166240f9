"""Reward functions by name: the built-ins and a researcher's own, in the manner of loss plugins.

A reward is one function decorated with :func:`register_reward`. It is called as TRL calls a reward
function (``prompts``, ``completions``, ``completion_ids`` and every column of the training
dataset, such as ``entry``, plus TRL's ``trainer_state``, ``log_metric`` and ``log_extra``), with
three more keyword arguments from the harness: ``task`` (the run's
:class:`harness.models.tasks.Task`: ``task.score(text, entry)`` is the dataset's own scorer),
``max_completion_length`` (the trainer's, in tokens) and the reward's settings. It returns one
float per completion (None for a completion it cannot score, as TRL allows).

Its settings are its keyword-only parameters with defaults: ``def brevity(completions, *,
target_tokens: int = 32, **kwargs)`` has the setting ``target_tokens``, which a grid gives in
the reward's entry: ``task.rewards: [correctness, {name: brevity, weight: 0.1, target_tokens:
24}]``. A setting's type is its default's (a float setting takes whole numbers); ``check``, when
given, says what else is wrong with a run's settings (:class:`RewardPlugin`).

Where rewards come from (nothing else is imported):

* the built-ins, :mod:`harness.rewards.builtin` (``correctness``, ``format``, ``soft_overlong``);
* the modules a grid lists under its top-level ``plugins:`` key (the same list as loss plugins);
* Python entry points of the group :data:`ENTRY_POINT_GROUP`, loaded only for a name a grid uses.

This module imports nothing of the project, torch or TRL.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ENTRY_POINT_GROUP = "grpo_harness.rewards"
#: What the harness passes every reward beside TRL's arguments; not settings.
CONTEXT_ARGUMENTS = ("task", "max_completion_length")
#: TRL's reward-function arguments (``GRPOTrainer._calculate_rewards``) and the training set's
#: columns it passes (``harness.models.tasks.build_task``'s ``entry``); not settings either.
TRL_ARGUMENTS = (
    "prompts", "completions", "completion_ids", "trainer_state", "log_metric", "log_extra", "environments",
    "entry",
)  # fmt: skip
#: What a ``task.rewards`` entry holds beside the reward's settings (``harness.settings.schema``'s
#: ``REWARD_ENTRY_KEYS``): a setting of that name could never be given.
ENTRY_KEYS = ("name", "weight")
#: The built-ins' names (:mod:`harness.rewards.builtin`), which no plugin may take.
BUILTIN_NAMES = ("correctness", "format", "soft_overlong")
#: ``dynamic_sampling.metric: reward`` means the weighted sum of the rewards, so no reward is named so.
RESERVED_NAMES = ("reward",)


class RewardError(ValueError):
    """A reward that cannot be registered or used as written; the message names it and the fix."""


@dataclass(frozen=True)
class RewardPlugin:
    """A registered reward.

    Attributes:
        name: what a grid's ``task.rewards`` names; also TRL's name for it (``rewards/<name>/mean``
            and ``rewards/<name>/std`` in every metrics row).
        function: the reward (see the module's docstring for how it is called).
        settings: ``{setting: default}``, its keyword-only parameters with defaults.
        module: the module that registered it.
        paper: where the reward comes from (shown in messages and docs).
        check: ``(settings, max_completion_length) -> list[str]``, the problems of a run's settings
            beyond their types (a buffer longer than the completion budget), or None.
    """

    name: str
    function: Callable[..., Any]
    settings: Mapping[str, Any] = field(default_factory=dict)
    module: str = ""
    paper: str = ""
    check: Callable[[Mapping[str, Any], int], list[str]] | None = None

    def setting_problems(self, given: Mapping[str, Any], max_completion_length: int | None) -> list[str]:
        """What is wrong with the settings a ``task.rewards`` entry gives this reward: unknown keys
        (with the closest one), values of the wrong type, and what :attr:`check` says."""
        import difflib

        out = []
        for key, value in given.items():
            if key not in self.settings:
                close = difflib.get_close_matches(key, list(self.settings), n=1, cutoff=0.6)
                known = ", ".join(self.settings) or "none"
                hint = f" Did you mean {close[0]!r}?" if close else ""
                out.append(
                    f"task.rewards: {key!r} is not a setting of reward {self.name!r} (its settings: {known}).{hint}"
                )
            elif isinstance(value, float) and not math.isfinite(value):
                out.append(f"task.rewards: {self.name}'s {key} = {value!r} must be a finite number.")
            elif not _fits(value, self.settings[key]):
                out.append(
                    f"task.rewards: {self.name}'s {key} = {value!r} is a {type(value).__name__}; its default "
                    f"{self.settings[key]!r} is a {type(self.settings[key]).__name__}: give one of that type."
                )
        if out or self.check is None or max_completion_length is None:
            return out
        try:
            return list(self.check({**self.settings, **given}, max_completion_length))
        except Exception as e:  # the plugin's own check raised: say whose it is
            return [
                f"task.rewards: the check of reward {self.name!r} ({self.module}) raised {type(e).__name__}: {e}; "
                "fix the check (it returns a list of problems, one sentence each)."
            ]


def _fits(value: Any, default: Any) -> bool:
    if default is None:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, int | float) and math.isfinite(value)
    return isinstance(value, type(default))


#: name -> reward, filled by :func:`register_reward` as modules are imported.
REGISTRY: dict[str, RewardPlugin] = {}


def register_reward(
    name: str, *, paper: str = "", check: Callable[[Mapping[str, Any], int], list[str]] | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering a reward function under ``name``; the function is returned unchanged
    (with a ``reward_plugin`` attribute holding its :class:`RewardPlugin`).

    Raises:
        RewardError: ``name`` is not an identifier, is reserved (``reward``), is a built-in's or is
            taken by another function; the function takes no ``**kwargs`` (TRL passes more than any
            one reward reads); a keyword-only parameter has no default, or is named like an entry's
            ``name`` or ``weight``.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise RewardError(f"register_reward({name!r}): a reward name is an identifier, e.g. 'brevity'.")
    if name in RESERVED_NAMES:
        raise RewardError(
            f"register_reward({name!r}): 'reward' names the weighted sum of a run's rewards (dynamic_sampling.metric: "
            "reward); give the function another name."
        )

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        module = function.__module__
        if name in BUILTIN_NAMES and module != f"{__name__}.builtin":
            raise RewardError(
                f"register_reward({name!r}) in {module}: {name} is a built-in reward of harness.rewards; give "
                f"yours another name (e.g. my_{name})."
            )
        plugin = RewardPlugin(name, function, _settings_of(name, function), module, paper, check)
        old = REGISTRY.get(name)
        if old is not None and (old.module, old.function.__qualname__) != (
            plugin.module,
            function.__qualname__,
        ):
            raise RewardError(
                f"register_reward({name!r}): {old.module}.{old.function.__qualname__} already registers "
                f"a reward of that name; give {plugin.module}.{function.__qualname__} another."
            )
        REGISTRY[name] = plugin
        function.reward_plugin = plugin  # type: ignore[attr-defined]
        return function

    return decorate


def _settings_of(name: str, function: Callable[..., Any]) -> dict[str, Any]:
    """The keyword-only parameters of ``function`` with their defaults (its settings)."""
    params = inspect.signature(function).parameters.values()
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        raise RewardError(
            f"register_reward({name!r}): {function.__qualname__} takes no **kwargs; TRL calls a reward with "
            "every column of the training set and its own arguments (trainer_state, log_metric, ...): "
            "end its parameters with **kwargs."
        )
    out = {}
    for p in params:
        if p.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        if p.name in CONTEXT_ARGUMENTS or p.name in TRL_ARGUMENTS:
            continue  # what the harness or TRL passes, taken by name
        if p.name in ENTRY_KEYS:
            raise RewardError(
                f"register_reward({name!r}): a setting cannot be called {p.name!r}, which a task.rewards entry "
                "holds for itself; rename the parameter."
            )
        if p.default is inspect.Parameter.empty:
            raise RewardError(
                f"register_reward({name!r}): keyword-only parameter {p.name!r} has no default; a setting "
                f"needs one (e.g. {p.name}: int = 32), which a grid overrides in the reward's entry."
            )
        out[p.name] = p.default
    return out


def entry_point(name: str) -> importlib.metadata.EntryPoint | None:
    """The installed entry point ``name`` of :data:`ENTRY_POINT_GROUP`, not loaded; None when none."""
    found = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    return found[0] if found else None


def entry_point_names() -> list[str]:
    """Names of the installed entry points of :data:`ENTRY_POINT_GROUP` (nothing is imported)."""
    return sorted({ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)})


def registers_from(module: str) -> bool:
    """Whether ``module`` (or a module inside it) registered a reward."""
    return any(p.module == module or p.module.startswith(module + ".") for p in REGISTRY.values())


def find(name: str) -> tuple[RewardPlugin | None, list[str]]:
    """The reward called ``name`` (built-ins and imported plugin modules first, then an installed
    entry point of that name); and the problems met loading the entry point."""
    from harness.rewards import builtin  # noqa: F401  (registers the built-ins)

    if name in REGISTRY:
        return REGISTRY[name], []
    ep = entry_point(name)
    if ep is None:
        return None, []
    try:
        obj = ep.load()
    except BaseException as e:  # a plugin must never end `plan` silently
        return None, [
            f"task.rewards: entry point {ep.value} ({ENTRY_POINT_GROUP}) raised {type(e).__name__}: {e}; "
            "fix the module or reinstall its package."
        ]
    plugin = getattr(obj, "reward_plugin", None)
    if not isinstance(plugin, RewardPlugin) or plugin.name != name:
        return None, [
            f"task.rewards: entry point {name} = {ep.value} is not a function decorated with "
            f"@register_reward({name!r}); decorate it, or name the entry point after its reward."
        ]
    return plugin, []


def unknown_problem(name: str, modules: Sequence[str]) -> str:
    """The error for a ``task.rewards`` name that names no reward, with the closest names."""
    import difflib

    from harness.rewards import builtin  # noqa: F401

    known = sorted({*REGISTRY, *entry_point_names()})
    close = difflib.get_close_matches(name, known, n=2, cutoff=0.6)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    listed = ", ".join(modules) or "none"
    return (
        f"task.rewards names {name!r}, which is no reward: the known ones are {', '.join(known)} "
        f"(plugin modules listed: {listed}).{hint} Fix the name, or list the module that registers it under "
        f"plugins: (decorated with @register_reward), or install its package (entry point group "
        f"{ENTRY_POINT_GROUP})."
    )


class BoundReward:
    """A registered reward bound to a run (its task, completion budget and settings): the callable
    TRL receives, named after the reward, so that TRL logs ``rewards/<name>/mean`` and ``/std``.
    A class rather than a closure, so that it pickles."""

    def __init__(self, plugin: RewardPlugin, task: Any, max_completion_length: int, settings: Mapping):
        self.plugin = plugin
        self.__name__ = plugin.name
        self.context = {"task": task, "max_completion_length": max_completion_length}
        self.settings = {**plugin.settings, **settings}

    def __call__(self, prompts=None, completions=None, **kwargs) -> list[float | None]:
        return self.plugin.function(
            prompts=prompts, completions=completions, **kwargs, **self.context, **self.settings
        )


def reward_funcs(task: Any, max_completion_length: int, modules: Sequence[str] = ()) -> list[BoundReward]:
    """TRL's ``reward_funcs`` for a built task (:class:`harness.models.tasks.Task`), one per entry of
    ``task.spec.rewards``, in that order; ``modules`` (the grid's ``plugins:``) are imported first.

    Raises:
        RewardError: a name that names no reward (validation refuses it before a run starts).
        ImportError: a module that does not import (the same).
    """
    import importlib

    for module in modules:
        importlib.import_module(module)
    out = []
    for name in task.spec.reward_names:
        plugin, problems = find(name)
        if plugin is None:
            raise RewardError("; ".join(problems) or unknown_problem(name, modules))
        out.append(BoundReward(plugin, task, max_completion_length, task.spec.reward_settings(name)))
    return out
