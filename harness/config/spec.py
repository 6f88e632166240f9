"""A grid file loaded into a :class:`harness.settings.runs.GridSpec`, every problem found in one pass.

:func:`load_grid` reads the file and its includes (:mod:`harness.config.yaml_files`), loads the loss
plugins it names (:mod:`harness.losses.loading`), applies a profile and ``-o`` overrides
(:mod:`harness.config.overrides`), checks every key and value (:mod:`harness.config.keys`), the
``report:`` section (:mod:`harness.config.report_check`) and the ``findings:`` section
(:mod:`harness.config.findings`), and builds the axes and sub-grids. On problems, the
:class:`harness.settings.schema.SpecError` lists them all and carries the grid of what passed.

A grid file has these top-level keys (all optional but ``name`` defaults to the file's stem)::

    include: base.yaml        # another grid file (path relative to this one), deep-merged under this one
    name: smoke               # results go to results/<name>/
    description: "..."        # one paragraph, shown by `plan`
    notes: "..."              # e.g. the settings to use at paper scale
    seed: 0                   # drives the trainer, the task's data and sampling
    task: {name, kwargs, template, train_size, eval_size, rewards}      # harness.settings.schema.TaskSpec
    model: tiny               # "tiny", "tiny-chat", a local path, or a Hugging Face model id
    tiny: {...}               # harness.settings.schema.TinyModelSpec fields (model: tiny)
    tiny_chat: {...}          # harness.settings.schema.TinyChatModelSpec fields (model: tiny-chat)
    tiny_steps: {...}         # harness.settings.schema.TinyStepsModelSpec fields (model: tiny-steps)
    trainer: {...}            # any TRL GRPOConfig field
    peft: {...}               # LoRA: any peft LoraConfig field (harness.config.lora); absent = every weight trains
    harness: {...}            # harness.settings.schema.HarnessSettings fields
    executor: {...}           # harness.settings.schema.ExecutorSettings fields
    grid: {key: [values]}     # product axes
    zip: [{key: [values], key2: [values]}]         # axes that move together
    subgrids: {name: {set: {...}, grid: {...}, zip: [...]}}   # union of named sub-grids
    profiles: {name: {key: value}}                  # named override sets, e.g. "paper"
    report: {hue, col, row, baseline, x, smoothing, metric, curves, metrics, target, lead, seeds}
                              # how the grid's report is laid out; no run setting (harness.config.report_check)
    findings: {id: {claim, paper, metric, window, direction, baseline, variant, ...}}
                              # papers' claims the runs test; no run setting (harness.config.findings)
    plugins: [mypackage.losses]   # modules of loss plugins (harness.losses), imported when loaded

Keys in ``grid``/``zip``/``set``/overrides are dotted paths (``trainer.loss_type``,
``task.kwargs.max_digits``, ``tiny.sft_steps``, ``seed``); a bare ``GRPOConfig`` field name stands
for ``trainer.<field>``.
"""

from __future__ import annotations

import copy
import difflib
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from analysis.settings.report import REPORT_KEYS
from harness.config import task_axis
from harness.config.keys import (
    SCALAR_SETTINGS,
    SETTING_SECTIONS,
    TOP_LEVEL_KEYS,
    check_setting,
    coerce_base,
    coerce_number,
    invisible,
    normalize_key,
    one_per_package,
    plugin_note,
    section_fields,
    shown_key,
    suggest,
)
from harness.config.overrides import apply_setting, given_settings, inner_keys, some_subgrids
from harness.config.report_check import check_report
from harness.config.yaml_files import non_string_keys, read_grid_yaml
from harness.settings.runs import Axis, GridSpec, SubGrid
from harness.settings.schema import ExecutorSettings, SpecError


def load_grid(path: str | Path, overrides: Sequence[str] = (), profile: str | None = None) -> GridSpec:
    """Load a grid file, apply a profile and ``-o`` overrides, and check every key and type.

    An override of a key that is a grid axis replaces the axis by that single value.

    Raises:
        SpecError: listing every problem found (unknown keys with close matches, wrong types,
        malformed axes, unknown profile), naming the file.
    """
    path = Path(path)
    config, trap_problems, trap_keys = read_grid_yaml(path)
    shape = [*trap_problems, *_shape_problems(config)]
    left_out = {normalize_key(k) for k in trap_keys}
    if shape:  # the rest is checked on what has the expected shape: every problem in one pass
        config = _pruned(config)
    from harness.losses.loading import load_grid_plugins

    plugins = load_grid_plugins(config, overrides, profile)
    with plugin_note(plugins.key_note()):
        try:
            grid = _checked_grid(path, config, overrides, profile, plugins)
        except SpecError as e:
            if shape:
                raise SpecError(
                    [*shape, *e.problems], path, partial=e.partial, left_out=e.left_out | left_out
                ) from None
            raise
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
    when there is no such grid (else each cell reports it, :func:`harness.config.rules_trainer.rule_loss_type`)."""
    problems: list[str] = list(plugins.problems)
    pairs = given_settings(config, overrides, profile, problems, path)
    axis_keys = {normalize_key(str(k)) for k in (config.get("grid") or {})}
    inner = inner_keys(config)
    for k in axis_keys & {k for k, why in inner.items() if not some_subgrids(why)}:
        problems.append(f"grid.{k}: {k} is also {inner[k]}; give each key one place in the grid.")
    report_where: dict[str, str] = {}  # report key -> where its value was last given (a profile, -o)
    for key, value, given in pairs:
        where = f"-o {key}" if given == "-o" else given
        apply_setting(config, key, value, where, axis_keys, inner, report_where, problems)
    problems += _name_problems(config.get("name", path.stem))
    _check_section_keys(config, problems)
    axes = _axis_list(config.get("grid"), "grid", problems)
    zips = _zip_list(config.get("zip"), "zip", problems)
    subgrids = _subgrids(config.get("subgrids") or {}, problems)
    problems += _given_twice("grid and zip", [*axes, *(a for group in zips for a in group)])
    grid_keys = [a.key for a in (*axes, *(a for g in zips for a in g))]
    top_keys = list(grid_keys)
    for sub in subgrids:
        given = [Axis(k, ()) for k, _ in sub.settings] + [*sub.axes, *(a for g in sub.zips for a in g)]
        problems += _given_twice(f"subgrids.{sub.name}", given)
        grid_keys += [a.key for a in given]
    problems += _task_axis_conflicts(axes, zips, subgrids, top_keys)
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
        raise SpecError(one_per_package(problems), path, partial=partial, left_out=left_out)
    base = {k: copy.deepcopy(config[k]) for k in (*SETTING_SECTIONS, *SCALAR_SETTINGS) if k in config}
    if config.get("plugins"):  # each run imports them again where it trains (not in the run id)
        base["plugins"] = list(config["plugins"])
    base.pop("executor", None)
    coerce_base(base)
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


def _task_axis_conflicts(
    axes: Sequence[Axis], zips: Sequence[Sequence[Axis]], subgrids: Sequence[SubGrid], top_keys: Sequence[str]
) -> list[str]:
    """Keys beside a ``task`` axis that its entries own (:func:`harness.config.task_axis.axis_conflicts`):
    the top level's keys against every entry (they meet every sub-grid's cells), a sub-grid's
    against the top level's entries and its own."""

    def task_entries(place: Sequence[Axis]) -> list[dict]:
        return [e for a in place if a.key == task_axis.TASK_AXIS for e in a.values]

    top = task_entries([*axes, *(a for g in zips for a in g)])
    subs = {sub.name: task_entries([*sub.axes, *(a for g in sub.zips for a in g)]) for sub in subgrids}
    out = task_axis.axis_conflicts("grid", top_keys, [*top, *(e for v in subs.values() for e in v)])
    for sub in subgrids:
        keys = [k for k, _ in sub.settings] + [a.key for a in (*sub.axes, *(a for g in sub.zips for a in g))]
        out += task_axis.axis_conflicts(f"subgrids.{sub.name}", keys, [*top, *subs[sub.name]])
    return out


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
        if key == task_axis.TASK_AXIS:  # a task per entry, its own settings beside its name
            axes.append(Axis(key, task_axis.entries(values, f"{where}.{raw_key}", problems)))
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
                f"unknown top-level key '{key}'.{suggest(key, TOP_LEVEL_KEYS)} "
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


def _shape_problems(config: Mapping[str, Any]) -> list[str]:
    """Structure the rest of loading relies on: string keys, and the grid language's containers."""
    out = non_string_keys(config, "")
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
    if expect(
        config.get("subgrids"), Mapping, "subgrids", "a mapping of sub-grid name -> {set, grid, zip, seeds}"
    ):
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
        **(
            {"seeds": sub["seeds"]}
            if isinstance(sub.get("seeds"), int) and not isinstance(sub["seeds"], bool) and sub["seeds"] >= 1
            else {}
        ),
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
            if k not in ("set", "grid", "zip", "seeds"):
                problems.append(f"{where}: unknown key '{k}'; a sub-grid has set, grid, zip and seeds.")
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
                _subgrid_seeds(sub, where, problems),
            )
        )
    return subgrids


def _subgrid_seeds(sub: Mapping[str, Any], where: str, problems: list[str]) -> int | None:
    """A sub-grid's ``seeds:`` (how many of the grid's seeds it runs on), checked; None when unset.
    A seed axis of its own would choose seeds twice, and is refused beside it."""
    n = sub.get("seeds")
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        problems.append(
            f"{where}.seeds = {n!r}: write how many of the grid's seeds the sub-grid runs on, a whole "
            "number >= 1 (its first n values: seeds: 2 with grid: {seed: [4, 5, 6, 7]} runs 4 and 5)."
        )
        return None
    own = [k for part in ("set", "grid") for k in (sub.get(part) or {}) if normalize_key(str(k)) == "seed"]
    own += [
        k
        for g in sub.get("zip") or []
        if isinstance(g, Mapping)
        for k in g
        if normalize_key(str(k)) == "seed"
    ]
    if own:
        problems.append(
            f"{where}: seeds = {n} and a seed of its own both choose its seeds; keep seeds (it follows the "
            "grid's seed axis, and -o grid.seed=[...] with it) or the seed setting, not both."
        )
    return n
