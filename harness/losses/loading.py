"""Loss plugins for a grid: loading them when the grid is loaded, and checking each run's use of them.

* :func:`load_grid_plugins` (called by :func:`harness.config.spec.load_grid` before any key is checked):
  imports the modules of the grid's ``plugins:`` list and the entry points named by the
  ``loss_type`` values the grid writes, so that their hyperparameters are known keys; refuses a
  hyperparameter that is also a ``GRPOConfig`` field.
* :func:`check_run` (called by :func:`harness.config.rules_trainer.rule_loss_type`): the run's ``loss_type``
  names a TRL loss or a plugin; the plugin's hyperparameters are in range and set only with it;
  the plugin returns the right shape and dtype on a tiny synthetic batch (:func:`probe_problem`),
  and what it declares about itself holds there (:mod:`harness.losses.declarations`).

Torch-free at import; the probe imports torch (only for a run that uses a plugin).
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness import losses
from harness.trl_boundary import grpo_config_fields, loss_types


def _loss_type_values(node: Any, where: str = "") -> list[tuple[str, str]]:
    """``(where, value)`` of every value the grid file gives ``loss_type`` (in ``trainer:``, axes,
    sub-grids, profiles); ``where`` is the dotted place, ``subgrids.pg.set.loss_type``."""
    found: list[tuple[str, str]] = []
    if isinstance(node, Mapping):
        for k, v in node.items():
            place = f"{where}.{k}" if where else str(k)
            if k in ("loss_type", "trainer.loss_type"):
                found += [(place, x) for x in (v if isinstance(v, list) else [v]) if isinstance(x, str)]
            found += _loss_type_values(v, place)
    elif isinstance(node, list):
        for v in node:
            found += _loss_type_values(v, where)
    return found


def _override_loss_types(overrides: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for text in overrides:
        key, _, value = text.partition("=")
        if key.strip() in ("loss_type", "trainer.loss_type", "grid.loss_type", "grid.trainer.loss_type"):
            values = [v.strip(" '\"") for v in value.strip("[] ").split(",") if v.strip()]
            out += [(f"-o {key.strip()}", v) for v in values]
    return out


@dataclass
class GridPlugins:
    """What loading a grid's loss plugins found (:func:`load_grid_plugins`).

    Attributes:
        problems: the import and declaration problems, each with its fix.
        unknown: ``(where, name)`` of each ``loss_type`` value naming neither a TRL loss type nor a
            plugin (``("subgrids.pg.set.loss_type", "pg_noclp")``); reported by :meth:`unknown_problems`.
        modules: the grid's ``plugins:`` list.
        failed: what did not load, in words (``plugin module 'x'``), for the unknown-key messages.
    """

    problems: list[str] = field(default_factory=list)
    unknown: list[tuple[str, str]] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def unknown_problems(self) -> list[str]:
        """One error per unknown ``loss_type`` value, listing TRL's loss types and the plugins."""
        return [_unknown_loss(name, self.modules, where, self.failed) for where, name in self.unknown]

    def key_note(self) -> str:
        """Why a plugin's hyperparameter may be an unknown key here ("" when every plugin loaded):
        ``'pg_noclp' names no plugin (the loss_type error above)``."""
        names = dict.fromkeys(name for _, name in self.unknown)
        parts = [f"{name!r} names no plugin (the loss_type error above)" for name in names]
        parts += [f"{what} did not load (above)" for what in self.failed]
        return "; ".join(parts)


def load_grid_plugins(
    config: Mapping[str, Any], overrides: Sequence[str] = (), profile: str | None = None
) -> GridPlugins:
    """Import what a grid's loss plugins need; what was found (:class:`GridPlugins`).

    Imports the modules of ``config["plugins"]`` and, for each ``loss_type`` value of the file or
    of ``-o`` overrides that is no TRL loss type and no plugin registered yet, the entry point of
    that name (not one into a module that already failed: its error is reported once). Nothing else
    is imported. A value naming nothing is kept in ``unknown`` (values of profiles other than
    ``profile`` only load their entry points).
    """
    modules = config.get(losses.PLUGINS_KEY) or []
    if isinstance(modules, str) or not isinstance(modules, list):
        problem = f"plugins = {modules!r}: give a list of module names, e.g. plugins: [mypackage.losses]."
        return GridPlugins([problem], failed=["the plugins: list"])
    failed: set[str] = set()
    out = GridPlugins(losses.import_modules(modules, failed), modules=[str(m) for m in modules])
    out.failed = [f"plugin module {m!r}" for m in sorted(failed)]
    builtin = set(loss_types())
    for where, name in [*_loss_type_values(config), *_override_loss_types(overrides)]:
        if name in builtin:
            continue
        if name not in losses.REGISTRY:
            problems = losses.from_entry_point(name, failed)
            out.problems += problems
            out.failed += [f"the entry point of loss_type {name!r}"] if problems else []
        other_profile = where.startswith("profiles.") and where.split(".")[1] != profile
        if name not in losses.REGISTRY and losses.entry_point(name) is None and not other_profile:
            out.unknown.append((where, name))
    fields = grpo_config_fields()
    for plugin in losses.REGISTRY.values():
        out.problems += losses.clash_problems(plugin, fields) + _shadow_problems(plugin)
    out.problems = list(dict.fromkeys(out.problems))
    out.failed = list(dict.fromkeys(out.failed))
    return out


def _shadow_problems(plugin: losses.LossPlugin) -> list[str]:
    """A listed module's loss named like an installed entry point into another module: one
    ``loss_type`` would mean two functions, the one used depending on what was imported first."""
    ep = losses.entry_point(plugin.name)
    if ep is None or ep.module == plugin.module or plugin.module.startswith(ep.module + "."):
        return []
    dist = getattr(ep, "dist", None)
    package = f"the installed package {dist.metadata['Name']}" if dist is not None else "an installed package"
    return [
        f"plugins: module {plugin.module!r} registers loss {plugin.name!r}, a name {package} also gives a "
        f"loss (entry point {plugin.name} = {ep.value}); loss_type {plugin.name!r} would name two functions. "
        f"Rename yours (e.g. my_{plugin.name})."
    ]


def _unknown_loss(
    name: Any, modules: Iterable[str], where: str = "trainer.loss_type", failed: Sequence[str] = ()
) -> str:
    plugins = sorted({*losses.REGISTRY, *losses.entry_point_names()})
    listed = ", ".join(modules) or "none"
    close = difflib.get_close_matches(str(name), [*loss_types(), *plugins], n=2, cutoff=0.7)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    after = f" ({', '.join(failed)} did not load: see above.)" if failed else ""
    return (
        f"{where} = {name!r} is not a TRL loss type ({', '.join(loss_types())}; GSPO is grpo with "
        f"importance_sampling_level: sequence) nor a loss plugin ({', '.join(plugins) or 'none loaded'}; "
        f"plugin modules listed: {listed}).{hint} Fix the name, list the plugin's module under plugins:, or "
        f"install its package (entry point group {losses.ENTRY_POINT_GROUP}).{after}"
    )


def check_run(settings: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> list[str]:
    """Errors of one run's loss settings (``RunSpec.settings``); ``config`` is TRL's resolved
    ``GRPOConfig`` values when known (the probe's settings)."""
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
    if problem:
        return [problem]
    from harness.losses.declarations import declaration_problems

    return list(declaration_problems(plugin.name, config, losses.plugin_settings(plugin, trainer)))


@functools.lru_cache(maxsize=256)
def probe_problem(name: str, settings_json: str, level: str) -> str | None:
    """Why plugin ``name`` fails on a tiny synthetic batch (B=3, T=4, one empty row) with these
    settings, or None; memoised. Takes a few milliseconds once torch is imported."""
    from harness.losses.compute import probe

    return probe(losses.REGISTRY[name], json.loads(settings_json), level)


def changed_source_warnings(runs: Iterable[Any], grid_dir: Any, done: Iterable[str]) -> list[str]:
    """Warnings for the ``done`` runs (ids) of ``runs`` (``RunSpec``) that a ``run``/``submit``
    skips although their loss plugin's source changed since they trained: the ``sha256`` in their
    ``provenance.json`` (:func:`harness.losses.source_record`) differs from the current file's.
    One warning per plugin, naming its runs and the fix. A run without a record (trained before
    plugins were recorded) is left alone."""
    from harness import layout

    done = set(done)
    changed: dict[str, list[str]] = {}
    current: dict[str, dict[str, Any]] = {}
    for run in runs:
        name = (run.settings.get("trainer") or {}).get("loss_type")
        if run.run_id not in done or name not in losses.REGISTRY:
            continue
        recorded = _recorded_source(layout.run_dir(grid_dir, run.run_id))
        now = current.setdefault(name, losses.source_record(losses.REGISTRY[name]))
        if recorded and recorded.get("sha256") and recorded.get("sha256") != now["sha256"]:
            changed.setdefault(name, []).append(run.run_id)
    return [
        f"warning: loss plugin {name}'s source ({current[name]['file']}) changed since {len(ids)} done run(s) "
        f"trained with it: {', '.join(ids)}; they were skipped and keep the old code's results (run ids "
        "depend on the settings, not the code). To compare the versions, run into a new results folder "
        "(--results DIR) or under a new grid name (name:); to redo them, delete "
        + " ".join(str(layout.run_dir(grid_dir, i)) for i in ids)
        + "."
        for name, ids in changed.items()
    ]


def _recorded_source(run_dir: Any) -> dict[str, Any] | None:
    from harness import layout

    try:
        prov = json.loads((run_dir / layout.PROVENANCE_FILE).read_text())
    except (OSError, ValueError):
        return None
    record = prov.get("loss_plugin") if isinstance(prov, dict) else None
    return record if isinstance(record, dict) else None
