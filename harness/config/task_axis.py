"""The ``task`` axis: a grid over several tasks, each task's own settings given where it is named.

::

    task: {train_size: 2000, eval_size: 200}       # the base of every entry
    grid:
      loss_type: [grpo, dapo]
      task:
        - chain_sum                                  # a dataset's name alone: its default kwargs
        - {name: products, kwargs: {min_terms: 2, max_terms: 2, max_digits: 1}}
        - {name: basic_arithmetic, kwargs: {operators: ["+", "-"]}, eval_size: 100}

An entry is a task section (the fields of :class:`harness.settings.schema.TaskSpec`: ``name``,
``kwargs``, ``template``, ``train_size``, ``eval_size``, ``rewards``) or a dataset's name, which
stands for ``{name: NAME}``. The file's ``task:`` section is the base of every entry: a field the
entry leaves out takes the file's value, except ``kwargs``, which belong to the dataset the entry
names: an entry without ``kwargs`` takes its dataset's defaults, never another dataset's. The axis
may be a product axis (``grid:``), part of a ``zip:`` group or a sub-grid's axis.

A cell's run holds the resolved task section (:func:`resolved_task`), so a run on a task of an
entry has exactly the settings, and the run id, it would have with that task written in the file's
``task:`` section. Each planned run's varying values name ``task.name`` and the other task fields
that differ between entries (never the whole section).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from harness.config.keys import check_setting, coerce_number, section_fields, suggest
from harness.settings.schema import canonical_json

#: The axis key.
TASK_AXIS = "task"
#: Fields an entry owns outright (never taken from the file's ``task:`` section).
OWN_FIELDS = ("name", "kwargs")


def entries(values: Sequence[Any], where: str, problems: list[str]) -> tuple[dict[str, Any], ...]:
    """The entries of a ``task`` axis as task sections (``{"name": ..., ...}``, numbers coerced to
    their fields' types), each problem added to ``problems`` with its place (``where[i]``), the value
    and the fix. An entry with a problem is left out of the axis."""
    fields = list(section_fields(TASK_AXIS))
    out = []
    for i, value in enumerate(values):
        at = f"{where}[{i}]"
        if isinstance(value, str) and value.strip():
            out.append({"name": value})
            continue
        if not isinstance(value, Mapping):
            problems.append(
                f"{at} = {value!r}: a task entry is a dataset's name or a mapping of task settings; write "
                "e.g. - chain_sum or - {name: chain_sum, kwargs: {max_digits: 1}, eval_size: 100}."
            )
            continue
        entry_problems = []
        if "name" not in value:
            entry_problems.append(
                f"{at} = {dict(value)!r}: the entry names no dataset; add name: (e.g. name: chain_sum), "
                "the task's settings are given where the task is named."
            )
        for key, v in value.items():
            if key not in fields:
                entry_problems.append(
                    f"{at}.{key}: not a task setting.{suggest(str(key), fields)} An entry takes "
                    f"{', '.join(fields)}."
                )
                continue
            p = check_setting(f"{TASK_AXIS}.{key}", v, at)
            if p:
                entry_problems.append(p)
        problems += entry_problems
        if not entry_problems:
            out.append({str(k): coerce_number(f"{TASK_AXIS}.{k}", v) for k, v in value.items()})
    names = [e["name"] for e in out]
    for name in dict.fromkeys(n for n in names if names.count(n) > 1):
        same = [e for e in out if e["name"] == name]
        if any(e == same[0] for e in same[1:]):
            problems.append(
                f"{where}: the task {name!r} is given twice with the same settings; give each task once."
            )
    return tuple(out)


def resolved_task(base: Mapping[str, Any] | None, entry: Mapping[str, Any]) -> dict[str, Any]:
    """A cell's task section: the file's ``task:`` section (``base``) without its ``name`` and
    ``kwargs``, then the entry's fields over it."""
    task = {k: copy.deepcopy(v) for k, v in (base or {}).items() if k not in OWN_FIELDS}
    task.update(copy.deepcopy(dict(entry)))
    return task


def axis_conflicts(where: str, keys: Sequence[str], task_entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """Problems of other keys beside a ``task`` axis in one place (``where``: ``grid``, a zip group,
    a sub-grid): ``task.name`` and ``task.kwargs...`` belong to the entries, and another field may
    be an axis of its own only when no entry sets it."""
    if not task_entries:
        return []
    out = []
    set_by_entries = {k for e in task_entries for k in e}
    for key in keys:
        if not key.startswith(f"{TASK_AXIS}."):
            continue
        field = key.split(".")[1]
        if field in OWN_FIELDS or field in set_by_entries:
            out.append(
                f"{where}.{key}: the task axis gives {field} in its entries; set it in the entry of the task "
                f"it belongs to (e.g. - {{name: chain_sum, {field}: ...}}), not as {key}."
            )
    return out


def override_problem(key: str, where: str, task_entries: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a profile's or ``-o``'s ``task.*`` setting cannot reach every cell of a grid with a task
    axis (None when it can): a task's name and kwargs are its entry's, and a field some entry sets
    would not reach that entry's cells."""
    if not key.startswith(f"{TASK_AXIS}.") or not task_entries:
        return None
    field = key.split(".")[1]
    if field in OWN_FIELDS:
        return (
            f"{where}: {key}: this grid has a task axis, whose entries give each task's {field}; "
            "edit the entry in the grid file (or a copy) instead."
        )
    setting = [e["name"] for e in task_entries if field in e]
    if setting:
        return (
            f"{where}: {key}: the task axis's entries {', '.join(map(repr, setting))} set {field} themselves, "
            "so a plain override would not reach their cells; edit the grid file (or a copy) instead."
        )
    return None


def entries_in(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The entries of every ``task`` axis of a grid file's ``config`` (``grid:``, ``zip:``,
    ``subgrids:``) as written, a name as ``{"name": NAME}``; what is not an entry is left out."""
    places: list[Any] = [config.get("grid")]
    places += list(config.get("zip") or []) if isinstance(config.get("zip"), list) else []
    for sub in (config.get("subgrids") or {}).values() if isinstance(config.get("subgrids"), Mapping) else ():
        if isinstance(sub, Mapping):
            places += [sub.get("grid"), *(sub.get("zip") or [] if isinstance(sub.get("zip"), list) else [])]
    out = []
    for place in places:
        values = place.get(TASK_AXIS) if isinstance(place, Mapping) else None
        for v in values if isinstance(values, list) else []:
            if isinstance(v, str):
                out.append({"name": v})
            elif isinstance(v, Mapping):
                out.append(dict(v))
    return out


def varying_fields(values: Sequence[Mapping[str, Any]]) -> list[str]:
    """The dotted keys under ``task`` whose values differ between resolved task sections: ``task.name``
    and ``task.kwargs`` first, then the other fields in order of appearance."""
    fields: list[str] = []
    for task in values:
        for k in task:
            if k not in fields:
                fields.append(k)
    fields.sort(key=lambda f: {"name": 0, "kwargs": 1}.get(f, 2))
    return [f"{TASK_AXIS}.{f}" for f in fields if len({canonical_json(t.get(f)) for t in values}) > 1]


__all__ = [
    "OWN_FIELDS",
    "TASK_AXIS",
    "axis_conflicts",
    "entries",
    "entries_in",
    "override_problem",
    "resolved_task",
    "varying_fields",
]
