"""Profiles and ``-o key=value`` overrides, applied to a grid file's settings before they are checked.

A profile (``--profile NAME``, the file's ``profiles:`` section) and each ``-o`` set a run setting,
a ``report.KEY``, an own key (``name``) or ``grid.KEY`` (an axis's values). A key the grid varies is
replaced by the single value; a key that a zip axis or a sub-grid sets is refused, since a plain
value would not reach the cells that set it (:func:`inner_keys`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from analysis.settings.report import REPORT_KEYS
from harness.config import task_axis
from harness.config.keys import check_key, check_setting, normalize_key
from harness.config.yaml_files import (
    OWN_KEYS,
    load_yaml_text,
    non_string_keys,
    pop_traps,
    structure_problem,
    yaml_problem,
)
from harness.settings.schema import SpecError, set_dotted


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
    bad_keys = non_string_keys(value, key)
    if bad_keys:
        raise SpecError([f"-o {_shown(text)}: {bad_keys[0]}"])
    wrapped = {key: value}
    traps = pop_traps(wrapped)
    if traps:
        raise SpecError([f"-o {problem}" for _, problem in traps])
    return normalize_key(key), value


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


def given_settings(
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


def inner_keys(config: Mapping[str, Any]) -> dict[str, str]:
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


#: How :func:`inner_keys` begins the reason of a key that some sub-grids set, not all
SOME_SUBGRIDS = "set by sub-grid"


def some_subgrids(why: str) -> bool:
    """Whether an :func:`inner_keys` reason is "set by some sub-grids" (a profile may still set the
    base value the others take; an ``-o`` may not)."""
    return why.startswith(SOME_SUBGRIDS)


def apply_setting(
    config: dict[str, Any],
    key: str,
    value: Any,
    where: str,
    axis_keys: set[str],
    inner: Mapping[str, str],
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
        partial = some_subgrids(inner.get(axis, ""))
        if axis in inner and (where.startswith("-o ") or not partial):
            ignored = "would not reach the cells that set it" if partial else "would be ignored"
            problems.append(
                f"{where}: {axis} is {inner[axis]} in this grid, so a top-level axis {ignored}; "
                "edit the grid file (or a copy) instead."
            )
            return
        grid = {normalize_key(str(k)): v for k, v in (config.get("grid") or {}).items()}
        grid[axis] = value
        config["grid"] = grid
        axis_keys.add(axis)
        return
    p = check_setting(key, value, where) or task_axis.override_problem(
        key, where, task_axis.entries_in(config)
    )
    if p:
        problems.append(p)
        return
    partial = some_subgrids(inner.get(key, ""))
    if key in inner and (where.startswith("-o ") or not partial):
        # a profile is the grid author's: its value is the base the other sub-grids take, as the
        # file's own base is; an -o from the command line must reach every cell or be refused
        problems.append(
            f"{where}: {key} is {inner[key]} in this grid, so a plain override would not reach "
            "the cells that set it; edit the grid file (or a copy) instead."
        )
        return
    if key in axis_keys:
        config["grid"] = {k: v for k, v in config["grid"].items() if normalize_key(str(k)) != key}
    set_dotted(config, key, value)
