"""Grid expansion: a GridSpec becomes a list of runs, each with a stable run id.

No files are read or written here except through :func:`harness.spec.coerce_numbers`, which asks
GRPOConfig's field types (from the verdict memo, else from TRL). The run id is a short hash of the
run's resolved settings (task, model, tiny, trainer, harness, seed): the same settings give the
same id on any machine, and a changed override gives a new id, so old results stay apart from new
ones.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from harness.spec import (
    EPOCH,
    Axis,
    ExecutorSettings,
    GridSpec,
    SubGrid,
    coerce_numbers,
    deep_merge,
    get_dotted,
    set_dotted,
)

RUN_ID_LENGTH = 10


@dataclass(frozen=True)
class RunSpec:
    """One run of a grid.

    Attributes:
        run_id: short hash of ``config`` (see :func:`run_id_of`).
        grid: the grid's name.
        config: the resolved nested settings: ``task``, ``model``, ``tiny``, ``trainer`` (GRPOConfig
            keyword arguments), ``harness``, ``seed``; JSON-serialisable.
        varying: the values of this run on the grid's varying keys (dotted key -> value).
        subgrid: name of the sub-grid it came from ("" when the grid has none).
        executor: executor settings this run sets itself (``executor.*`` keys in axes or a sub-grid's
            ``set``, e.g. more GPUs for a bigger model); not part of the run id. SLURM submits runs
            with different resources as separate arrays.
    """

    run_id: str
    grid: str
    config: Mapping[str, Any]
    varying: Mapping[str, Any]
    subgrid: str = ""
    executor: Mapping[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        """A dotted setting of this run, e.g. ``run.get("trainer.loss_type")``."""
        return get_dotted(self.config, key, default)

    def executor_settings(self, grid_executor: ExecutorSettings) -> ExecutorSettings:
        """The grid's executor block updated by this run's own ``executor.*`` settings."""
        return replace(grid_executor, **dict(self.executor)) if self.executor else grid_executor


@dataclass(frozen=True)
class Plan:
    """The expanded grid: unique runs in order, plus the cells dropped as duplicates."""

    grid: GridSpec
    runs: tuple[RunSpec, ...]
    duplicates: tuple[tuple[RunSpec, RunSpec], ...]  # (dropped cell, the run it duplicates)
    varying_keys: tuple[str, ...]


def canonical_json(obj: Any) -> str:
    """Key-sorted compact JSON; floats written by ``repr`` so 1e-3 and 0.001 hash the same."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def run_id_of(config: Mapping[str, Any]) -> str:
    """First :data:`RUN_ID_LENGTH` hex digits of SHA-256 over :func:`canonical_json` of ``config``."""
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()[:RUN_ID_LENGTH]


def _axes_cells(axes: tuple[Axis, ...], zips: tuple[tuple[Axis, ...], ...]) -> Iterator[dict[str, Any]]:
    """Cartesian product of the product axes and the zipped groups (each group one factor)."""
    factors: list[list[dict[str, Any]]] = [[{a.key: v} for v in a.values] for a in axes]
    for group in zips:
        n = len(group[0].values)
        factors.append([{a.key: a.values[i] for a in group} for i in range(n)])
    for combo in itertools.product(*factors):
        cell: dict[str, Any] = {}
        for part in combo:
            cell.update(part)
        yield cell


def cells(grid: GridSpec) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every cell as ``(subgrid name, {dotted key: value})``, before deduplication.

    Cells = union over sub-grids (a single empty one when the grid has none) of
    top-level axes x sub-grid axes, where a sub-grid's fixed settings and axes take precedence over
    the top-level axes on a shared key (the sub-grid is the more specific statement).
    """
    subgrids = grid.subgrids or (SubGrid(""),)
    for sub in subgrids:
        for top in _axes_cells(grid.axes, grid.zips):
            for inner in _axes_cells(sub.axes, sub.zips):
                yield sub.name, {**top, **dict(sub.settings), **inner}


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

    ``trainer.ref_model_sync_steps: epoch`` is resolved to :func:`steps_per_epoch` and the choice is
    recorded as ``harness.ref_model_sync_every = "epoch"``.
    """
    config = deep_merge(base, {})
    for key, value in cell.items():
        set_dotted(config, key, value)
    config.setdefault("seed", 0)
    config.setdefault("model", "tiny")
    for section in ("task", "tiny", "trainer", "harness"):
        config.setdefault(section, {})
    config["trainer"]["seed"] = config["seed"]
    coerce_numbers(config)
    if config["trainer"].get("ref_model_sync_steps") == EPOCH:
        from harness.tasks import TaskSpec

        train_size = config["task"].get("train_size", TaskSpec.__dataclass_fields__["train_size"].default)
        config["trainer"]["ref_model_sync_steps"] = steps_per_epoch(
            config["trainer"], train_size, num_processes
        )
        config["harness"]["ref_model_sync_every"] = EPOCH
    if config["model"] != "tiny":
        config.pop("tiny")
    return config


def expand(grid: GridSpec) -> Plan:
    """Expand a grid into unique runs (pure: no I/O).

    Two cells that resolve to the same settings are one run; the later is reported in
    ``Plan.duplicates`` as (dropped, kept), each with ``varying`` set to its cell as written. ``varying_keys`` are the dotted keys whose value differs between runs.
    """
    runs: list[RunSpec] = []
    dups: list[tuple[RunSpec, RunSpec]] = []
    seen: dict[str, RunSpec] = {}
    raw: list[tuple[str, dict, dict]] = []
    nproc = grid.executor.nodes * grid.executor.tasks_per_node
    for sub, cell in cells(grid):
        raw.append((sub, cell, resolve(grid.base, cell, nproc)))
    keys: list[str] = []
    for _, cell, _ in raw:
        for k in cell:
            if k not in keys:
                keys.append(k)
    varying = tuple(k for k in keys if len({canonical_json(get_dotted(c, k)) for _, _, c in raw}) > 1)
    varying = tuple(k for k in varying if not k.startswith("executor."))
    written: dict[str, dict] = {}
    for sub, cell, config in raw:
        executor = config.pop("executor", {})  # where a run executes is not what it is
        rid = run_id_of(config)
        run = RunSpec(
            run_id=rid,
            grid=grid.name,
            config=config,
            varying={k: get_dotted(config, k) for k in varying if not k.startswith("executor.")},
            subgrid=sub,
            executor=executor,
        )
        if rid in seen:  # shown with the values as written: that is where they differ
            dups.append((replace(run, varying=dict(cell)), replace(seen[rid], varying=written[rid])))
            continue
        seen[rid] = run
        written[rid] = dict(cell)
        runs.append(run)
    return Plan(grid=grid, runs=tuple(runs), duplicates=tuple(dups), varying_keys=varying)
