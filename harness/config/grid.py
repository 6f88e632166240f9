"""Grid expansion: a GridSpec becomes a list of runs, each with a stable run id.

Pure: no files are read or written and no library is asked; numbers were coerced to their fields'
types when the grid was loaded (:func:`harness.config.spec.load_grid`). The run id is a short hash of the
run's resolved settings (task, model, tiny or tiny_chat, trainer, harness, seed): the same settings
give the same id on any machine, and a changed override gives a new id, so old results stay apart
from new ones.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from harness.config import task_axis
from harness.settings.runs import Axis, GridSpec, RunSpec, SubGrid
from harness.settings.schema import (
    EMBEDDED_MODEL_SECTIONS,
    EPOCH,
    TINY,
    SpecError,
    TaskSpec,
    canonical_json,
    deep_merge,
    get_dotted,
    run_id_of,
    set_dotted,
)


@dataclass(frozen=True)
class Rejected:
    """A cell whose settings break a section's rules (:class:`harness.settings.schema.Section`): no run is
    made of it, and validation reports ``problems`` under its run id and values."""

    run_id: str
    varying: Mapping[str, Any]
    subgrid: str
    problems: tuple[str, ...]
    #: the cell with the refused settings left out (at their defaults), whose other settings can
    #: still be checked in the same pass; None when even that is refused
    stand_in: RunSpec | None = None
    #: the dotted keys left out of ``stand_in``
    left_out: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """The expanded grid: unique runs in order, the cells dropped as duplicates, and the cells
    rejected by their sections' rules."""

    grid: GridSpec
    runs: tuple[RunSpec, ...]
    duplicates: tuple[tuple[RunSpec, RunSpec], ...]  # (dropped cell, the run it duplicates)
    varying_keys: tuple[str, ...]
    rejected: tuple[Rejected, ...] = ()


Cell = dict[str, Any]  # dotted key -> value


def _axes_cells(axes: tuple[Axis, ...], zips: tuple[tuple[Axis, ...], ...]) -> Iterator[tuple[Cell, Cell]]:
    """Cartesian product of the product axes and the zipped groups (each group one factor), as
    ``(cell, the same cell as written)``."""
    factors: list[list[tuple[Cell, Cell]]] = [
        [({a.key: v}, {a.key: w}) for v, w in zip(a.values, a.as_written, strict=True)] for a in axes
    ]
    for group in zips:
        n = len(group[0].values)
        factors.append(
            [({a.key: a.values[i] for a in group}, {a.key: a.as_written[i] for a in group}) for i in range(n)]
        )
    for combo in itertools.product(*factors):
        cell: Cell = {}
        written: Cell = {}
        for part, part_written in combo:
            cell.update(part)
            written.update(part_written)
        yield cell, written


def cells(grid: GridSpec) -> Iterator[tuple[str, Cell, Cell]]:
    """Every cell as ``(subgrid name, {dotted key: value}, the same as written)``, before
    deduplication.

    Cells = union over sub-grids (a single empty one when the grid has none) of
    top-level axes x sub-grid axes, where a sub-grid's fixed settings and axes take precedence over
    the top-level axes on a shared key (the sub-grid is the more specific statement). A sub-grid
    with ``seeds: n`` takes the top-level cells of the first n seeds only (:func:`first_seeds`).
    """
    subgrids = grid.subgrids or (SubGrid(""),)
    for sub in subgrids:
        seeds = first_seeds(grid, sub.seeds)
        for top, top_written in _axes_cells(grid.axes, grid.zips):
            if seeds is not None and top.get("seed", grid.base.get("seed")) not in seeds:
                continue
            for inner, inner_written in _axes_cells(sub.axes, sub.zips):
                yield (
                    sub.name,
                    {**top, **dict(sub.settings), **inner},
                    {**top_written, **dict(sub.settings_as_written), **inner_written},
                )


def first_seeds(grid: GridSpec, n: int | None) -> tuple | None:
    """The first ``n`` values of the grid's top-level ``seed`` axis (of a zip that holds it, its first
    n distinct values; its one ``seed:`` where it has no axis), or None for ``n`` None: every seed. A ``-o grid.seed=[...]`` moves them with the
    axis."""
    if n is None:
        return None
    axis = next((a for a in grid.axes if a.key == "seed"), None)
    if axis is None:  # a seed that moves with other keys in a zip: its first n distinct values
        axis = next((a for group in grid.zips for a in group if a.key == "seed"), None)
    if axis is None:
        return (grid.base.get("seed"),)
    return tuple(dict.fromkeys(axis.values))[:n]


def steps_per_epoch(trainer: Mapping[str, Any], train_size: int, num_processes: int = 1) -> int:
    """Optimizer steps in one pass over the training prompts, under TRL's batching and repeats.

    One optimizer step trains on ``per_device_train_batch_size * num_processes *
    gradient_accumulation_steps`` completions, i.e. that many / ``num_generations`` prompts, and TRL's
    ``RepeatSampler`` shows every generation batch ``num_iterations`` times (``steps_per_generation``
    changes when prompts are generated, not how many steps a pass takes). So::

        steps = train_size * num_generations * num_iterations
                / (per_device_train_batch_size * num_processes * gradient_accumulation_steps)

    rounded to the nearest step, at least 1. Defaults are TRL's (8, 1, 1, 8).
    """
    g = trainer.get("num_generations") or 8
    mu = trainer.get("num_iterations") or 1
    bs = trainer.get("per_device_train_batch_size") or 8
    ga = trainer.get("gradient_accumulation_steps") or 1
    return max(1, round(train_size * g * mu / (bs * num_processes * ga)))


def resolve(base: Mapping[str, Any], cell: Mapping[str, Any], num_processes: int = 1) -> dict[str, Any]:
    """The base settings with a cell's dotted values set; ``seed`` also becomes ``trainer.seed``.

    A ``task`` axis's entry becomes the run's task section over the file's
    (:func:`harness.config.task_axis.resolved_task`), before the cell's other values.

    ``trainer.ref_model_sync_steps: epoch`` is resolved to :func:`steps_per_epoch` and the choice is
    recorded as ``harness.ref_model_sync_every = "epoch"``.
    """
    config = deep_merge(base, {})
    entry = cell.get(task_axis.TASK_AXIS)
    if isinstance(entry, Mapping):  # a task axis's entry first: a task.* axis beside it refines it
        config["task"] = task_axis.resolved_task(config.get("task"), entry)
    for key, value in cell.items():
        if key != task_axis.TASK_AXIS:
            set_dotted(config, key, value)
    config.setdefault("seed", 0)
    config.setdefault("model", TINY)
    for section in ("task", *EMBEDDED_MODEL_SECTIONS.values(), "trainer", "harness"):
        config.setdefault(section, {})
    config["trainer"]["seed"] = config["seed"]
    if config["trainer"].get("ref_model_sync_steps") == EPOCH:
        train_size = config["task"].get("train_size", TaskSpec.__dataclass_fields__["train_size"].default)
        config["trainer"]["ref_model_sync_steps"] = steps_per_epoch(
            config["trainer"], train_size, num_processes
        )
        config["harness"]["ref_model_sync_every"] = EPOCH
    for model, section in EMBEDDED_MODEL_SECTIONS.items():  # only the run's own embedded model's section
        if config["model"] != model:
            config.pop(section)
    return config


#: A section setting a section's own check names in its problem (``task.train_size = 0 ...``).
_SECTION_KEY = re.compile(
    r"\b(?:task|tiny|tiny_chat|tiny_steps|harness|dynamic_sampling|peft)\.[A-Za-z_][A-Za-z0-9_]*"
)


def _stand_in(
    grid: str, config: Mapping[str, Any], values: Mapping[str, Any], sub: str, problems: Sequence[str]
) -> tuple[RunSpec | None, tuple[str, ...]]:
    """A run of ``config`` with the settings its sections refused (the keys ``problems`` name) left
    out at their defaults, and those keys; ``(None, ())`` when none is named or three rounds do not
    give a run. Only validation uses it: its id is not the cell's."""
    settings = copy.deepcopy(dict(config))
    left_out: list[str] = []
    for _ in range(3):
        keys = sorted({m.group(0) for p in problems for m in _SECTION_KEY.finditer(p)} - set(left_out))
        if not keys:
            return None, ()
        for key in keys:
            head, name = key.split(".", 1)
            if isinstance(settings.get(head), dict):
                settings[head].pop(name, None)
        left_out += keys
        try:
            return RunSpec(grid=grid, settings=settings, varying=values, subgrid=sub), tuple(left_out)
        except SpecError as e:
            problems = e.problems
    return None, ()


def _processes(grid: GridSpec, cell: Cell) -> int:
    """Processes of a cell's run: the grid's ``nodes * tasks_per_node``, with the cell's own
    ``executor.*`` values where it sets them."""
    nodes = cell.get("executor.nodes", grid.executor.nodes)
    per_node = cell.get("executor.tasks_per_node", grid.executor.tasks_per_node)
    ok = all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in (nodes, per_node))
    return nodes * per_node if ok else grid.executor.num_processes


def _varying_keys(resolved: Sequence[tuple[str, Cell, Cell, dict]]) -> tuple[str, ...]:
    """The dotted keys of the cells whose resolved value differs between cells (where a run
    executes is not one of its settings, so ``executor.*`` keys are left out)."""
    keys: list[str] = []
    for _, cell, _, _ in resolved:
        for k in cell:
            if k not in keys and not k.startswith("executor."):
                keys.append(k)
    varying = [k for k in keys if len({canonical_json(get_dotted(c, k)) for *_, c in resolved}) > 1]
    if task_axis.TASK_AXIS in varying:  # the task fields that differ, never the whole section
        at = varying.index(task_axis.TASK_AXIS)
        fields = task_axis.varying_fields([c.get("task") or {} for *_, c in resolved])
        varying[at : at + 1] = [f for f in fields if f not in varying]
    return tuple(varying)


def expand(grid: GridSpec) -> Plan:
    """Expand a grid into unique runs (pure: no I/O).

    Two cells that resolve to the same settings are one run; the later is reported in
    ``Plan.duplicates`` as (dropped, kept), each with ``varying`` set to its cell as written. A cell
    whose settings break a section's rules is reported in ``Plan.rejected``. ``varying_keys`` are
    the dotted keys whose value differs between runs.
    """
    resolved = [
        (sub, cell, written, resolve(grid.base, cell, _processes(grid, cell)))
        for sub, cell, written in cells(grid)
    ]
    varying = _varying_keys(resolved)
    runs: list[RunSpec] = []
    dups: list[tuple[RunSpec, RunSpec]] = []
    rejected: dict[str, Rejected] = {}
    seen: dict[str, tuple[RunSpec, Cell]] = {}
    for sub, _, written, config in resolved:
        executor = config.pop("executor", {})  # where a run executes is not what it is
        values = {k: get_dotted(config, k) for k in varying}
        try:
            run = RunSpec(grid=grid.name, settings=config, varying=values, subgrid=sub, executor=executor)
        except SpecError as e:
            rid = run_id_of(config)
            if rid not in rejected:
                stand_in, left_out = _stand_in(grid.name, config, values, sub, e.problems)
                rejected[rid] = Rejected(rid, values, sub, tuple(e.problems), stand_in, left_out)
            continue
        if run.run_id in seen:  # shown with the values as written: that is where they differ
            kept, kept_written = seen[run.run_id]
            dups.append((replace(run, varying=written), replace(kept, varying=kept_written)))
            continue
        seen[run.run_id] = (run, written)
        runs.append(run)
    return Plan(grid, tuple(runs), tuple(dups), varying, tuple(rejected.values()))


def plan_record(plan: Plan) -> dict[str, Any]:
    """What ``grid.json`` records of a plan (:func:`harness.layout.write_grid`): the grid as last
    specified, so the report covers exactly these runs, its ``report:`` layout (``{}`` when it
    has none), so the report needs no YAML, and its ``findings:`` with each arm's run ids
    (:func:`analysis.settings.findings.record`); a progression's rows get their run ids too
    (:func:`harness.config.report_check.report_record`)."""
    from analysis.settings.findings import record
    from harness.config.report_check import report_record

    return {
        "name": plan.grid.name,
        "source": str(plan.grid.source),
        "profile": plan.grid.profile,
        "overrides": list(plan.grid.overrides),
        "run_ids": [r.run_id for r in plan.runs],
        "varying": list(plan.varying_keys),
        "runs": {r.run_id: {k: r.varying.get(k) for k in plan.varying_keys} for r in plan.runs},
        "report": report_record(plan),
        "findings": record(plan),
    }
