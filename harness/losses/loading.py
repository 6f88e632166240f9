"""Loss plugins for a grid: loading them when the grid is loaded, and checking each run's use of them.

* :func:`load_grid_plugins` (called by :func:`harness.spec.load_grid` before any key is checked):
  imports the modules of the grid's ``plugins:`` list and the entry points named by the
  ``loss_type`` values the grid writes, so that their hyperparameters are known keys; refuses a
  hyperparameter that is also a ``GRPOConfig`` field.
* :func:`check_run` (called by :func:`harness.validate.rule_loss_type`): the run's ``loss_type``
  names a TRL loss or a plugin; the plugin's hyperparameters are in range and set only with it;
  the plugin returns the right shape and dtype on a tiny synthetic batch (:func:`probe_problem`).

Torch-free at import; the probe imports torch (only for a run that uses a plugin).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness import losses


def _loss_type_values(node: Any) -> list[str]:
    """Every value the grid file gives ``loss_type`` (in ``trainer:``, axes, sub-grids, profiles)."""
    found: list[str] = []
    stack = [node]
    while stack:
        value = stack.pop()
        if isinstance(value, Mapping):
            for k, v in value.items():
                if k in ("loss_type", "trainer.loss_type"):
                    found += [x for x in (v if isinstance(v, list) else [v]) if isinstance(x, str)]
                stack.append(v)
        elif isinstance(value, list):
            stack.extend(value)
    return found


def _override_loss_types(overrides: Sequence[str]) -> list[str]:
    out = []
    for text in overrides:
        key, _, value = text.partition("=")
        if key.strip() in ("loss_type", "trainer.loss_type", "grid.loss_type", "grid.trainer.loss_type"):
            out += [v.strip(" '\"") for v in value.strip("[] ").split(",") if v.strip()]
    return out


def load_grid_plugins(config: Mapping[str, Any], overrides: Sequence[str] = ()) -> list[str]:
    """Import what a grid's loss plugins need; the problems (empty when all is well).

    Imports the modules of ``config["plugins"]`` and, for each ``loss_type`` value of the file or
    of ``-o`` overrides that is no TRL loss type and no plugin registered yet, the entry point of
    that name. Nothing else is imported.
    """
    from harness.trl_boundary import grpo_config_fields, loss_types

    modules = config.get(losses.PLUGINS_KEY) or []
    if isinstance(modules, str) or not isinstance(modules, list):
        return [f"plugins = {modules!r}: give a list of module names, e.g. plugins: [mypackage.losses]."]
    problems = losses.import_modules(modules)
    builtin = set(loss_types())
    for name in dict.fromkeys([*_loss_type_values(config), *_override_loss_types(overrides)]):
        if name not in builtin and name not in losses.REGISTRY:
            problems += losses.from_entry_point(name)
    fields = grpo_config_fields()
    for plugin in losses.REGISTRY.values():
        problems += losses.clash_problems(plugin, fields)
    return list(dict.fromkeys(problems))


def _unknown_loss(name: Any, modules: Iterable[str]) -> str:
    from harness.trl_boundary import loss_types

    plugins = sorted({*losses.REGISTRY, *losses.entry_point_names()})
    listed = ", ".join(modules) or "none"
    return (
        f"trainer.loss_type = {name!r} is not a TRL loss type ({', '.join(loss_types())}; GSPO is grpo with "
        f"importance_sampling_level: sequence) nor a loss plugin ({', '.join(plugins) or 'none loaded'}; "
        f"plugin modules listed: {listed}). Fix the name, list the plugin's module under plugins:, or install "
        f"its package (entry point group {losses.ENTRY_POINT_GROUP})."
    )


def check_run(settings: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> list[str]:
    """Errors of one run's loss settings (``RunSpec.settings``); ``config`` is TRL's resolved
    ``GRPOConfig`` values when known (the probe's settings)."""
    from harness.trl_boundary import loss_types

    trainer = settings.get("trainer") or {}
    name = trainer.get("loss_type", "dapo" if config is None else config.get("loss_type"))
    modules = settings.get(losses.PLUGINS_KEY) or []
    plugin = None
    if name not in loss_types():
        plugin, problems = losses.find(name, modules)
        if plugin is None:
            return [*problems, _unknown_loss(name, modules)]
    out = []
    for key, value in trainer.items():
        owner = losses.hyperparameter(key)
        if owner is None or owner[0] is plugin:
            continue
        out.append(
            f"trainer.{key} = {value!r} is a hyperparameter of loss plugin {owner[0].name!r}, but loss_type = "
            f"{name!r} does not read it; set it only with loss_type: {owner[0].name} (e.g. in a sub-grid)."
        )
    if plugin is None:
        return out
    for h in plugin.hyperparameters:
        problem = h.problem(trainer.get(h.name, h.default))
        if problem:
            out.append(
                f"trainer.{h.name} {problem} Fix it in the grid (default {h.default!r}; {plugin.name})."
            )
    if out:
        return out
    level = (config or {}).get("importance_sampling_level") or trainer.get(
        "importance_sampling_level", "token"
    )
    settings_json = json.dumps({**dict(config or {}), **dict(trainer)}, sort_keys=True, default=str)
    problem = probe_problem(plugin.name, settings_json, level)
    return [problem] if problem else []


@functools.lru_cache(maxsize=256)
def probe_problem(name: str, settings_json: str, level: str) -> str | None:
    """Why plugin ``name`` fails on a tiny synthetic batch (B=3, T=4, one empty row) with these
    settings, or None; memoised. Takes a few milliseconds once torch is imported."""
    from harness.losses.compute import probe

    return probe(losses.REGISTRY[name], json.loads(settings_json), level)
