"""Loss plugins: GRPO loss variants by name, beside TRL's built-in ``loss_type`` values.

A plugin is one function decorated with :func:`register_loss`. It receives TRL's quantities for
one micro-batch (:class:`harness.losses.compute.LossInputs`) and returns a per-token (B, T) or
per-sequence (B, 1) loss (:class:`harness.losses.compute.LossOutput`); it names one of TRL's
reductions (:data:`REDUCTIONS`) or supplies its own, and declares its hyperparameters
(:class:`Hyperparameter`), which a grid sets like ``GRPOConfig`` fields.

Where plugins come from (nothing else is imported):

* the modules a grid lists under its top-level ``plugins:`` key (:func:`import_modules`);
* Python entry points of the group :data:`ENTRY_POINT_GROUP`, loaded only for a ``loss_type`` that
  names one (:func:`from_entry_point`).

What TRL receives: a run's ``GRPOConfig`` keyword arguments are :func:`grpo_config_kwargs`; a plugin
run's get ``loss_type`` = the plugin's named reduction (``"grpo"`` for a plugin with its own
reduction) and none of the plugin's hyperparameters (:func:`grpo_config_settings`); the harness's trainer then runs the plugin through
:func:`harness.losses.compute.plugin_loss`. TRL's ``GRPOConfig`` and ``GRPOTrainer.__init__`` only
warn about a few ``loss_type`` values (luspo, vespo) and never reject one; giving them the
reduction's name keeps those warnings about the reduction actually used.

This module imports neither torch nor TRL.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import math
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import rewards
from harness.trl_boundary import (
    KNOWN_LOSS_TYPES,
    TRL_LOSS_READS,
    TRL_RATIO_CAPS,
    loss_fields,
    loss_types,
    specific_loss_fields,
)

#: TRL's reductions a plugin may name (``GRPOTrainer._compute_loss``'s aggregation branches):
#: grpo (per-sequence token mean, then the mean over sequences), bnpo (token mean over the local
#: batch), dr_grpo (token sum / (B * max_completion_length)), dapo (token sum / tokens in the
#: generation batch), luspo (per-sequence token sum, then the mean over sequences).
REDUCTIONS = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
#: The ``GRPOConfig`` fields that shape TRL's loss formulas and reach a plugin, derived from the
#: fields TRL's losses read (:func:`harness.trl_boundary.loss_fields`): ``epsilon`` and
#: ``epsilon_high`` (``LossInputs.epsilon_low`` / ``epsilon_high``), ``delta`` (``config.delta``),
#: ``importance_sampling_level`` (``LossInputs.log_importance_weights``), and SAPO's and VESPO's own
#: fields (``config.sapo_temperature_pos`` ..., ``config.vespo_k_pos`` ...). A plugin declares
#: which of them it reads (``register_loss(reads=...)``); the others then cannot change its runs.
LOSS_FIELDS = loss_fields()
#: The loss fields only one TRL loss reads (SAPO's temperatures, VESPO's k and lambda): set for a run
#: whose loss does not read them, they are refused (:func:`harness.config.rules_trainer.rule_loss_fields`).
SPECIFIC_LOSS_FIELDS = specific_loss_fields()
ENTRY_POINT_GROUP = "grpo_harness.losses"
#: The top-level grid key listing plugin modules; copied into each run's settings (not its id).
PLUGINS_KEY = "plugins"
_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}


class PluginError(ValueError):
    """A plugin that cannot be used as written; the message names the plugin and the fix."""


@dataclass(frozen=True)
class Hyperparameter:
    """One setting a plugin declares; a grid sets it in ``trainer:`` or as a bare-name axis.

    Attributes:
        name: the key (a ``GRPOConfig`` field name is refused: :func:`clash_problems`).
        type: ``bool``, ``int``, ``float`` or ``str`` (a float accepts whole numbers).
        default: the value when the grid leaves it out (not written into a run's settings).
        help: one line shown by ``plan`` and in messages (units, source).
        minimum, maximum: inclusive bounds, or None; ``exclusive_minimum`` / ``exclusive_maximum``
            make them strict.
        choices: the allowed values, or empty for any.
        off_policy_only: the value cannot change a step whose ratios are all exactly 1 (TRL reuses
            the current log-probs as the old ones on-policy): a clip range, a penalty on
            ``|log r|``. Validation then warns when the setting varies across on-policy cells.
    """

    name: str
    type: type
    default: Any
    help: str = ""
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    choices: tuple[Any, ...] = ()
    off_policy_only: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise PluginError(
                f"hyperparameter {self.name!r}: a name is an identifier (a grid key, trainer.<name>), "
                "e.g. my_loss_scale."
            )
        if self.type not in _TYPES:
            raise PluginError(f"hyperparameter {self.name!r}: type must be bool, int, float or str.")
        problem = self.problem(self.default)
        if problem:
            raise PluginError(f"hyperparameter {self.name!r}: its default {problem}")

    @property
    def desc(self) -> str:
        """The type in :func:`harness.settings.schema.describe_hint`'s grammar (what the grid's checks use)."""
        return _TYPES[self.type]

    def range_text(self) -> str:
        """The allowed values in words: ``> 0``, ``in [0, 1]``, ``one of 'a', 'b'``; "" when any."""
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        low = None if self.minimum is None else (">" if self.exclusive_minimum else ">=", self.minimum)
        high = None if self.maximum is None else ("<" if self.exclusive_maximum else "<=", self.maximum)
        return " and ".join(f"{b[0]} {b[1]:g}" for b in (low, high) if b is not None)

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not allowed ("= -1 must be > 0 (help)"), or None."""
        ok_type = isinstance(value, self.type) and not (self.type is not bool and isinstance(value, bool))
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            ok_type = True
        if not ok_type:
            return f"= {value!r} has type {type(value).__name__}; expected {self.desc}."
        if isinstance(value, float) and not math.isfinite(value):
            return f"= {value!r} must be finite."
        if self.choices and value not in self.choices:
            return f"= {value!r} must be {self.range_text()}."
        if self.type in (int, float) and not self._in_range(value):
            return f"= {value!r} must be {self.range_text()} ({self.help or 'declared range'})."
        return None

    def _in_range(self, v: float) -> bool:
        if self.minimum is not None and (v <= self.minimum if self.exclusive_minimum else v < self.minimum):
            return False
        return not (
            self.maximum is not None and (v >= self.maximum if self.exclusive_maximum else v > self.maximum)
        )


@dataclass(frozen=True)
class LossPlugin:
    """A registered loss: its function, reduction and hyperparameters.

    Attributes:
        name: the ``loss_type`` a grid writes.
        function: ``(LossInputs) -> LossOutput | Tensor`` (see :mod:`harness.losses.compute`).
        reduction: a name of :data:`REDUCTIONS`, or a callable
            ``(per_token_loss (B, T), mask (B, T), ReductionContext) -> scalar loss``.
        hyperparameters: the settings it reads from ``LossInputs.hparams``.
        module: the module that registered it.
        paper: where the formula comes from (shown by ``plan``).
        uses_importance_sampling_ratio: the function applies vLLM's importance-sampling ratio itself
            (as TRL's vespo does); otherwise the harness multiplies the loss by it, as TRL does.
        reads: which of :data:`LOSS_FIELDS` the function reads, or None when not declared (then
            any of them may matter). Declared, the others are known to have no effect on its runs,
            and validation warns when a grid sets or varies one (:func:`ignored_fields`).
        on_policy_equivalent: the TRL ``loss_type`` whose loss has the same gradient as this one
            when every ratio is exactly 1 (on-policy updates), or None. A GMPO or KL-Cov run is
            then a run of that loss (up to rounding), and validation says so for on-policy runs.
        ratio_cap: the field of ``reads`` the function uses as an absolute cap on the ratio
            (``min(r, epsilon_high)``, as CISPO), or None. Validation then refuses a cap below 1,
            which down-weights even on-policy tokens, as it does for TRL's cispo.
    """

    name: str
    function: Callable[..., Any]
    reduction: str | Callable[..., Any] = "grpo"
    hyperparameters: tuple[Hyperparameter, ...] = ()
    module: str = ""
    paper: str = ""
    uses_importance_sampling_ratio: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)
    reads: tuple[str, ...] | None = None
    on_policy_equivalent: str | None = None
    ratio_cap: str | None = None

    @property
    def trl_loss_type(self) -> str:
        """What ``GRPOConfig.loss_type`` receives for a run of this plugin."""
        return self.reduction if isinstance(self.reduction, str) else "grpo"

    @property
    def reduction_name(self) -> str:
        return (
            self.reduction
            if isinstance(self.reduction, str)
            else getattr(self.reduction, "__name__", "custom")
        )

    def defaults(self) -> dict[str, Any]:
        return {h.name: h.default for h in self.hyperparameters}


#: name -> plugin, filled by :func:`register_loss` as plugin modules are imported.
REGISTRY: dict[str, LossPlugin] = {}


def register_loss(
    name: str,
    *,
    reduction: str | Callable[..., Any] = "grpo",
    hyperparameters: Sequence[Hyperparameter] = (),
    paper: str = "",
    uses_importance_sampling_ratio: bool = False,
    reads: Sequence[str] | None = None,
    on_policy_equivalent: str | None = None,
    ratio_cap: str | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering a loss function under ``name``; the function is returned unchanged
    (with a ``loss_plugin`` attribute holding its :class:`LossPlugin`). The keywords are the
    attributes of :class:`LossPlugin`.

    Raises:
        PluginError: ``name`` is a TRL built-in or already taken by another function, the
            reduction is unknown, two hyperparameters share a name, ``reads`` names a field not in
            :data:`LOSS_FIELDS`, ``on_policy_equivalent`` is not a TRL loss type, or
            ``ratio_cap`` is not ``epsilon`` or ``epsilon_high``, or not among ``reads``.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise PluginError(f"register_loss({name!r}): a loss name is an identifier, e.g. 'reinforce'.")
    if name in KNOWN_LOSS_TYPES:
        raise PluginError(
            f"register_loss({name!r}): {name} is TRL's own loss_type; give the plugin another name."
        )
    if isinstance(reduction, str) and reduction not in REDUCTIONS:
        raise PluginError(
            f"register_loss({name!r}, reduction={reduction!r}): use one of {', '.join(REDUCTIONS)} or a callable."
        )
    names = [h.name for h in hyperparameters]
    if len(set(names)) != len(names):
        raise PluginError(f"register_loss({name!r}): a hyperparameter name is declared twice: {names}.")
    reads = _declared_reads(name, reads)
    if on_policy_equivalent is not None and on_policy_equivalent not in KNOWN_LOSS_TYPES:
        raise PluginError(
            f"register_loss({name!r}, on_policy_equivalent={on_policy_equivalent!r}): name one of TRL's "
            f"loss types ({', '.join(KNOWN_LOSS_TYPES)}), or leave it None."
        )

    _check_ratio_cap(name, ratio_cap, reads)

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        plugin = LossPlugin(
            name, function, reduction, tuple(hyperparameters), function.__module__, paper,
            uses_importance_sampling_ratio, reads=reads, on_policy_equivalent=on_policy_equivalent,
            ratio_cap=ratio_cap,
        )  # fmt: skip
        old = REGISTRY.get(name)
        if old is not None and (old.module, old.function.__qualname__) != (
            plugin.module,
            function.__qualname__,
        ):
            raise PluginError(
                f"loss {name!r} is registered twice: by {old.module}.{old.function.__qualname__} and by "
                f"{plugin.module}.{function.__qualname__}; rename one."
            )
        REGISTRY[name] = plugin
        function.loss_plugin = plugin
        return function

    return decorate


def _check_ratio_cap(name: str, ratio_cap: str | None, reads: tuple[str, ...] | None) -> None:
    if ratio_cap is None:
        return
    if ratio_cap not in ("epsilon", "epsilon_high"):
        raise PluginError(
            f"register_loss({name!r}, ratio_cap={ratio_cap!r}): the cap is 'epsilon_high' (as CISPO's "
            "min(r, epsilon_high)) or 'epsilon', or None."
        )
    if reads is not None and ratio_cap not in reads:
        raise PluginError(
            f"register_loss({name!r}, ratio_cap={ratio_cap!r}): the cap is a field the loss reads; add "
            f"{ratio_cap!r} to reads=."
        )


def _declared_reads(name: str, reads: Sequence[str] | None) -> tuple[str, ...] | None:
    if reads is None:
        return None
    if isinstance(reads, str) or not all(isinstance(r, str) for r in reads):
        raise PluginError(
            f"register_loss({name!r}, reads={reads!r}): give a list of field names, e.g. ['epsilon']."
        )
    unknown = [r for r in reads if r not in LOSS_FIELDS]
    if unknown:
        raise PluginError(
            f"register_loss({name!r}, reads={list(reads)!r}): {', '.join(map(repr, unknown))} is not one of "
            f"the loss fields a plugin can read ({', '.join(LOSS_FIELDS)}); list only those (beta, the "
            "masks and the reduction's fields are applied by the harness whatever the plugin reads)."
        )
    return tuple(dict.fromkeys(reads))


def loss_reads(loss_type: Any) -> tuple[str, ...] | None:
    """The fields of :data:`LOSS_FIELDS` a run of ``loss_type`` reads: TRL's for a built-in
    (:data:`harness.trl_boundary.TRL_LOSS_READS`, with ``importance_sampling_level``), a registered
    plugin's declared ``reads``; None where that is not known (an undeclared plugin, a name that is
    neither)."""
    if loss_type in TRL_LOSS_READS:
        return (*TRL_LOSS_READS[loss_type], "importance_sampling_level")
    plugin = REGISTRY.get(loss_type) if isinstance(loss_type, str) else None
    return plugin.reads if plugin is not None else None


def ratio_cap(loss_type: Any) -> str | None:
    """The field a run of ``loss_type`` caps the ratio at (``min(r, field)``): TRL's cispo's
    ``epsilon_high`` (:data:`harness.trl_boundary.TRL_RATIO_CAPS`) or a plugin's declared
    ``ratio_cap``; None for a clip range or no ratio limit."""
    if loss_type in TRL_RATIO_CAPS:
        return TRL_RATIO_CAPS[loss_type]
    plugin = REGISTRY.get(loss_type) if isinstance(loss_type, str) else None
    return plugin.ratio_cap if plugin is not None else None


def ignored_fields(plugin: LossPlugin) -> tuple[str, ...]:
    """The fields of :data:`LOSS_FIELDS` that ``plugin`` declares it does not read (empty when it
    declares nothing: then any may matter)."""
    if plugin.reads is None:
        return ()
    return tuple(f for f in LOSS_FIELDS if f not in plugin.reads)


def off_policy_only_names() -> set[str]:
    """Names of the registered plugins' hyperparameters declared ``off_policy_only``."""
    return {h.name for p in REGISTRY.values() for h in p.hyperparameters if h.off_policy_only}


def _where(e: BaseException, module: str | None = None) -> str:
    """`` (file:line)`` of the line that raised ``e``: the deepest frame in ``module``'s top-level
    package where one is, since a library may wrap what the plugin called (wandb, once a run has
    started, replaces ``sys.exit`` with its own), else the deepest frame; empty without a traceback."""
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return ""
    folders = _module_folders(module) if module else []
    own = [f for f in frames if any(Path(f.filename).resolve().is_relative_to(d) for d in folders)]
    frame = (own or frames)[-1]
    return f" ({frame.filename}:{frame.lineno})"


def _module_folders(module: str) -> list[Path]:
    """The folders of ``module``'s top-level package (a single-file module: its file), resolved;
    empty when it cannot be found."""
    try:
        spec = importlib.util.find_spec(module.lstrip(".").split(".", 1)[0])
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(d).resolve() for d in spec.submodule_search_locations]
    return [Path(spec.origin).resolve()] if spec.origin else []


def import_modules(modules: Iterable[str], failed: set[str] | None = None) -> list[str]:
    """Import each named plugin module (registering its losses); the problems, each with its fix.

    ``failed``, when given, receives the names of the modules that did not import (so that an entry
    point into one of them is not imported, and reported, a second time: :func:`from_entry_point`).
    """
    problems = []
    for module in modules:
        if not isinstance(module, str) or not module.strip():
            problems.append(
                f"plugins: {module!r} is not a module name; write e.g. plugins: [mypackage.losses]."
            )
            continue
        problem = _import_problem(module)
        if problem:
            problems.append(problem)
            if failed is not None:
                failed.add(module)
    return problems


def _import_problem(module: str) -> str | None:
    if "/" in module or "\\" in module or module.endswith(".py"):
        return (
            f"plugins: {module!r} is a file path; list the module's import name instead (my_losses for "
            "my_losses.py or my_losses/__init__.py) and put the folder holding it on PYTHONPATH."
        )
    if module.startswith("."):
        return (
            f"plugins: {module!r} is a relative module name; list the module's absolute import name "
            f"({module.lstrip('.')} if its folder is on PYTHONPATH)."
        )
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and (module == e.name or module.startswith(e.name + ".")):
            return (
                f"plugins: module {module!r} not found; install its package (pip install -e PATH) or "
                "put the folder holding it on PYTHONPATH."
            )
        return f"plugins: importing {module!r} failed: {e}{_where(e, module)}; install {e.name}."
    except SystemExit as e:  # sys.exit() at import would end `plan` silently with its status
        return (
            f"plugins: importing {module!r} called sys.exit({e.code!r}){_where(e, module)}; a plugin module must "
            "not exit when imported (guard script code with if __name__ == '__main__':)."
        )
    except BaseException as e:  # the plugin's own code raised (KeyboardInterrupt too): say it, hide nothing
        said = f": {e}" if str(e) else ""
        return f"plugins: importing {module!r} raised {type(e).__name__}{said}{_where(e, module)}; fix the module."
    if not any(p.module == module or p.module.startswith(module + ".") for p in REGISTRY.values()):
        if rewards.registers_from(module):
            return None
        return (
            f"plugins: module {module!r} registers no loss and no reward; decorate its functions with "
            "@register_loss (harness.losses) or @register_reward (harness.rewards), or drop it from plugins:."
        )
    return None


def _in_failed(module: str, failed: Iterable[str]) -> bool:
    """Whether importing ``module`` re-runs one of the ``failed`` modules (it or a package above it)."""
    return any(module == m or module.startswith(m + ".") for m in failed)


def entry_point(name: str) -> importlib.metadata.EntryPoint | None:
    """The installed entry point ``name`` of :data:`ENTRY_POINT_GROUP`, not loaded; None when none."""
    found = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    return found[0] if found else None


def from_entry_point(name: str, failed: Iterable[str] = ()) -> list[str]:
    """Load the entry point ``name`` of :data:`ENTRY_POINT_GROUP`, if one is installed (importing its
    module only); the problems. Nothing happens when no entry point has that name, or when its
    module is among ``failed`` (modules whose import problem is already reported)."""
    ep = entry_point(name)
    if ep is None or _in_failed(ep.module, failed):
        return []
    try:
        obj = ep.load()
    except BaseException as e:  # SystemExit too: a plugin must never end `plan` silently
        return [
            f"loss_type {name!r}: entry point {ep.value} ({ENTRY_POINT_GROUP}) raised {type(e).__name__}: "
            f"{e}{_where(e, ep.module)}; fix the module or reinstall its package."
        ]
    plugin = getattr(obj, "loss_plugin", obj)
    if not isinstance(plugin, LossPlugin):
        return [
            f"entry point {name} = {ep.value}: not a function decorated with @register_loss; decorate it."
        ]
    if plugin.name != name:
        return [
            f"entry point {name} = {ep.value} registers the loss {plugin.name!r}; name the entry point "
            f"{plugin.name!r} in the package's pyproject.toml."
        ]
    return []


def find(name: str, modules: Sequence[str] = ()) -> tuple[LossPlugin | None, list[str]]:
    """The plugin called ``name``: from the named modules, else from an entry point; and the
    problems met on the way (a module that would not import, reported once)."""
    failed: set[str] = set()
    problems = import_modules(modules, failed)  # imported once: Python keeps the module
    if name not in REGISTRY:
        problems += from_entry_point(name, failed)
    return REGISTRY.get(name), problems


def entry_point_names() -> list[str]:
    """Names of the installed entry points of :data:`ENTRY_POINT_GROUP` (nothing is imported)."""
    return sorted({ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)})


def hyperparameter(name: str) -> tuple[LossPlugin, Hyperparameter] | None:
    """The registered plugin declaring hyperparameter ``name``, and the declaration."""
    for plugin in REGISTRY.values():
        for h in plugin.hyperparameters:
            if h.name == name:
                return plugin, h
    return None


def hyperparameter_fields() -> dict[str, str]:
    """``{name: described type}`` of every registered plugin's hyperparameters."""
    return {h.name: h.desc for p in REGISTRY.values() for h in p.hyperparameters}


def clash_problems(plugin: LossPlugin, grpo_fields: Iterable[str]) -> list[str]:
    """A hyperparameter named like a ``GRPOConfig`` field or like another registered plugin's."""
    fields = set(grpo_fields)
    out = [
        f"plugin {plugin.name!r} ({plugin.module}) declares hyperparameter {h.name!r}, which is a GRPOConfig "
        f"field; rename it (e.g. {plugin.name}_{h.name}) or read inputs.config.{h.name} (LossInputs.config) instead."
        for h in plugin.hyperparameters
        if h.name in fields
    ]
    for h in plugin.hyperparameters:
        found = hyperparameter(h.name)
        if found is not None and found[0].name != plugin.name:  # one key would set both
            out.append(
                f"plugins {found[0].name!r} ({found[0].module}) and {plugin.name!r} ({plugin.module}) both "
                f"declare hyperparameter {h.name!r}; rename one (prefix it with its loss's name)."
            )
    return out


def grpo_config_settings(trainer: Mapping[str, Any]) -> dict[str, Any]:
    """``trainer`` as ``GRPOConfig`` takes it: a plugin's ``loss_type`` replaced by its reduction's
    (:attr:`LossPlugin.trl_loss_type`), every registered plugin's hyperparameters left out."""
    hyper = hyperparameter_fields()
    out = {k: v for k, v in trainer.items() if k not in hyper}
    plugin = REGISTRY.get(out.get("loss_type"))
    if plugin is not None:
        out["loss_type"] = plugin.trl_loss_type
    return out


def plugin_settings(plugin: LossPlugin, trainer: Mapping[str, Any]) -> dict[str, Any]:
    """The plugin's hyperparameter values for a run: its defaults, updated by the run's settings."""
    return {**plugin.defaults(), **{k: trainer[k] for k in plugin.defaults() if k in trainer}}


def for_run(settings: Mapping[str, Any]) -> tuple[LossPlugin | None, dict[str, Any]]:
    """The plugin and hyperparameters of a run's settings (``RunSpec.settings``); ``(None, {})``
    for a built-in loss.

    Raises:
        PluginError: the run names a plugin that cannot be found or imported.
    """
    trainer = settings.get("trainer") or {}
    name = trainer.get("loss_type")
    if name is None or name in loss_types():
        return None, {}
    plugin, problems = find(name, settings.get(PLUGINS_KEY) or ())
    if plugin is None:
        raise PluginError("; ".join(problems) or f"loss_type {name!r} names no TRL loss type and no plugin.")
    return plugin, plugin_settings(plugin, trainer)


def grpo_config_kwargs(run: Any, device: str, output_dir: str) -> dict[str, Any]:
    """Keyword arguments for TRL's ``GRPOConfig`` for ``run`` (a :class:`harness.settings.runs.RunSpec`)
    on ``device`` ("cpu" or "cuda").

    Harness defaults, each overridable in the grid's ``trainer`` block: ``logging_steps=1`` (one row per
    optimizer step), ``report_to="none"``, ``bf16=False`` on CPU (TRL defaults it to True), a checkpoint
    every ``harness.checkpoint_steps``, ``disable_tqdm=True``. No ``save_total_limit``: the harness
    prunes to ``harness.keep_checkpoints`` once a new checkpoint is complete (:mod:`harness.train.checkpoints`).
    Weights given in ``task.rewards`` become ``reward_weights``.
    A loss plugin's run gives ``GRPOConfig`` the plugin's reduction as ``loss_type`` and none of its
    hyperparameters (:func:`grpo_config_settings`); its module is imported first when the run names it
    (:func:`for_run`).
    """
    h = run.harness
    kwargs: dict[str, Any] = {
        "logging_steps": 1,
        "report_to": "none",
        "disable_tqdm": True,
        "save_strategy": "steps" if h.checkpoint_steps > 0 else "no",
        "dataloader_num_workers": 0,
    }
    if h.checkpoint_steps > 0:
        kwargs["save_steps"] = h.checkpoint_steps
    if device == "cpu":
        kwargs["use_cpu"] = True
        kwargs["bf16"] = False
    kwargs.update(run.trainer)
    weights = run.task.reward_weights  # task.rewards' weights are TRL's reward_weights
    if weights is not None and "reward_weights" not in run.trainer:
        kwargs["reward_weights"] = list(weights)
    if kwargs.get("loss_type", "grpo") not in loss_types():  # a loss plugin: GRPOConfig gets its reduction
        with contextlib.suppress(ValueError):  # an unknown name is validation's to report
            for_run(run.settings)
    kwargs = grpo_config_settings(kwargs)
    kwargs["output_dir"] = output_dir
    kwargs["seed"] = run.seed
    return kwargs


def source_record(plugin: LossPlugin) -> dict[str, Any]:
    """Which code a plugin run uses, for its ``provenance.json`` (``loss_plugin``): ``name``,
    ``module``, ``file`` (the module's source file) and ``sha256`` (of that file's bytes; None when
    it cannot be read), plus ``distribution`` and ``version`` when an installed entry point of
    :data:`ENTRY_POINT_GROUP` points into that module. Only the module defining the function is
    hashed, not modules it imports."""
    import hashlib
    import sys
    from pathlib import Path

    module = sys.modules.get(plugin.module)
    file = getattr(module, "__file__", None)
    digest = None
    if file:
        try:
            digest = hashlib.sha256(Path(file).read_bytes()).hexdigest()
        except OSError:
            digest = None
    record: dict[str, Any] = {"name": plugin.name, "module": plugin.module, "file": file, "sha256": digest}
    ep = entry_point(plugin.name)
    dist = getattr(ep, "dist", None) if ep is not None and ep.module == plugin.module else None
    if dist is not None:
        record["distribution"], record["version"] = dist.metadata["Name"], dist.version
    return record


def plan_lines(runs: Iterable[Any]) -> list[str]:
    """What ``plan`` says of the loss plugins a plan's runs use: each plugin's module, reduction and
    source, and each hyperparameter with its type, default, range, help and the values in the plan."""
    used: dict[str, list[Mapping[str, Any]]] = {}
    for run in runs:
        trainer = run.settings.get("trainer") or {}
        if trainer.get("loss_type") in REGISTRY:
            used.setdefault(trainer["loss_type"], []).append(trainer)
    lines = []
    for name, trainers in used.items():
        p = REGISTRY[name]
        source = f"; {p.paper}" if p.paper else ""
        lines.append(
            f"loss plugin {name} ({p.module}, reduction {p.reduction_name}{source}), {len(trainers)} run(s):"
        )
        for h in p.hyperparameters:
            values = sorted({json.dumps(t.get(h.name, h.default)) for t in trainers})
            bounds = f", {h.range_text()}" if h.range_text() else ""
            off = " (off-policy only)" if h.off_policy_only else ""
            lines.append(
                f"  {h.name}: {h.desc} = {h.default!r}{bounds}{off}: {h.help} [here: {', '.join(values)}]"
            )
        if not p.hyperparameters:
            lines.append("  (no hyperparameters)")
        lines += _declaration_lines(p)
    return lines


def _declaration_lines(p: LossPlugin) -> list[str]:
    if p.reads is None:
        lines = [f"  reads: undeclared (any of {', '.join(LOSS_FIELDS)} may matter)"]
    elif not p.reads:
        lines = [f"  reads: none of {', '.join(LOSS_FIELDS)} (they have no effect on its runs)"]
    else:
        ignored = f"; ignores {', '.join(ignored_fields(p))}" if ignored_fields(p) else ""
        lines = [f"  reads: {', '.join(p.reads)}{ignored}"]
    if p.on_policy_equivalent:
        lines.append(
            f"  on-policy equivalent: {p.on_policy_equivalent} (declared; validation says so of each on-policy "
            "run where the check at its settings confirms it)"
        )
    return lines
