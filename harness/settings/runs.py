"""A grid and its runs as frozen typed values: the axes and sub-grids of a loaded grid file
(:class:`GridSpec`), and one run (:class:`RunSpec`: its settings as the grid states them, sparse
JSON data whose canonical JSON the run id hashes, and the typed sections built from them).

Imports nothing of the project but :mod:`harness.settings.schema` (the sections), and no torch, TRL
or transformers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harness.settings.schema import (
    EMBEDDED_MODEL_SECTIONS,
    EMBEDDED_SPECS,
    TINY,
    DynamicSamplingSettings,
    ExecutorSettings,
    HarnessSettings,
    SpecError,
    TaskSpec,
    TinyModelSpec,
    copy_settings,
    get_dotted,
    run_id_of,
    set_dotted,
)


@dataclass(frozen=True)
class Axis:
    """One grid axis: a dotted key and the values it takes (numbers coerced to the field's type);
    ``written`` holds the values as the file wrote them where coercion changed one (else None)."""

    key: str
    values: tuple[Any, ...]
    written: tuple[Any, ...] | None = None

    @property
    def as_written(self) -> tuple[Any, ...]:
        """The values as the file wrote them (``1`` where :attr:`values` holds ``1.0``)."""
        return self.values if self.written is None else self.written


@dataclass(frozen=True)
class SubGrid:
    """A named part of the grid: fixed settings plus its own product and zipped axes, on every seed of
    the grid's ``seed`` axis or (``seeds``) on its first ``seeds`` values.

    ``settings`` are coerced like axis values; ``written`` holds them as written where that differs.
    """

    name: str
    settings: tuple[tuple[str, Any], ...] = ()
    axes: tuple[Axis, ...] = ()
    zips: tuple[tuple[Axis, ...], ...] = ()
    written: tuple[tuple[str, Any], ...] | None = None
    seeds: int | None = None  # runs on the first ``seeds`` values of the grid's seed axis only

    @property
    def settings_as_written(self) -> tuple[tuple[str, Any], ...]:
        """:attr:`settings` as the file wrote them."""
        return self.settings if self.written is None else self.written


@dataclass(frozen=True)
class GridSpec:
    """A grid file, loaded, merged and checked; expanded into runs by :func:`harness.config.grid.expand`.

    ``base`` holds the settings shared by every run (sections task/tiny/trainer/harness plus
    ``seed`` and ``model``) as a nested mapping, numbers already coerced to their fields' types; it is
    copied, never mutated, by expansion.
    """

    name: str
    source: Path
    base: Mapping[str, Any]
    axes: tuple[Axis, ...]
    zips: tuple[tuple[Axis, ...], ...]
    subgrids: tuple[SubGrid, ...]
    executor: ExecutorSettings
    description: str = ""
    notes: str = ""
    overrides: tuple[str, ...] = ()
    profile: str | None = None
    profile_settings: tuple[tuple[str, Any], ...] = ()  # the profile's (key, value) overrides, in order
    report: Mapping[str, Any] = field(default_factory=dict)  # the checked report: section (REPORT_KEYS)
    findings: Mapping[str, Any] = field(
        default_factory=dict
    )  # the checked findings: (analysis.settings.findings)


@dataclass(frozen=True)
class RunSpec:
    """One run of a grid: its settings as stated and the typed sections built from them.

    Attributes:
        grid: the grid's name.
        settings: the resolved settings as the grid states them (keys left out take their defaults):
            ``seed``, ``model``, ``task``, ``tiny`` or ``tiny_chat`` (only for that embedded model),
            ``trainer`` (GRPOConfig keyword arguments, ``seed`` among them) and ``harness``; JSON data.
            The run id hashes it, so it is never changed in place: :meth:`with_settings` makes another run.
        varying: the values of this run on the grid's varying keys (dotted key -> value).
        subgrid: name of the sub-grid it came from ("" when the grid has none).
        executor: executor settings this run sets itself (``executor.*`` keys in axes or a sub-grid's
            ``set``, e.g. more GPUs for a bigger model); not part of the run id. SLURM submits runs
            with different resources as separate arrays.
        run_id: :func:`run_id_of` ``settings``.
        seed, model, task, tiny, trainer, harness, dynamic_sampling: the typed sections (``tiny`` is the embedded
            model's spec: a :class:`TinyModelSpec` from the ``tiny`` section for ``model: tiny``, a
            :class:`TinyChatModelSpec` from ``tiny_chat`` for ``model: tiny-chat``, else None;
            ``trainer`` a read-only mapping of GRPOConfig fields as written).

    Raises (from construction):
        SpecError: every problem of every section (see :class:`Section`).
    """

    grid: str
    settings: Mapping[str, Any]
    varying: Mapping[str, Any] = field(default_factory=dict)
    subgrid: str = ""
    executor: Mapping[str, Any] = field(default_factory=dict)
    run_id: str = field(init=False)
    seed: int = field(init=False)
    model: str = field(init=False)
    task: TaskSpec = field(init=False)
    tiny: TinyModelSpec | None = field(init=False)  # a TinyChatModelSpec for tiny-chat
    trainer: Mapping[str, Any] = field(init=False, repr=False)
    harness: HarnessSettings = field(init=False)
    dynamic_sampling: DynamicSamplingSettings = field(init=False)

    def __post_init__(self) -> None:
        settings = copy_settings(dict(self.settings))
        problems: list[str] = []
        seed = settings.get("seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool):
            problems.append(f"seed = {seed!r} is a {type(seed).__name__}; it must be an integer.")
        model = settings.get("model", TINY)
        if not isinstance(model, str) or not model.strip():
            problems.append(
                f"model = {model!r} must be a string: 'tiny', 'tiny-chat', a local path or a model id."
            )
        trainer = settings.get("trainer", {})
        if not isinstance(trainer, Mapping):
            problems.append(f"trainer = {trainer!r} must be a mapping of GRPOConfig fields.")
        task = TaskSpec.build(settings.get("task", {}), problems)
        tiny = None
        if model in EMBEDDED_MODEL_SECTIONS:
            section = EMBEDDED_MODEL_SECTIONS[model]
            tiny = EMBEDDED_SPECS[section].build(settings.get(section, {}), problems)
        harness = HarnessSettings.build(settings.get("harness", {}), problems)
        sampling = DynamicSamplingSettings.build(settings.get(DynamicSamplingSettings.SECTION, {}), problems)
        if problems:
            raise SpecError(problems)
        for name, value in (
            ("settings", settings),
            ("run_id", run_id_of(settings)),
            ("seed", seed),
            ("model", model),
            ("task", task),
            ("tiny", tiny),
            ("trainer", MappingProxyType(trainer)),
            ("harness", harness),
            ("dynamic_sampling", sampling),
        ):
            object.__setattr__(self, name, value)

    def __reduce__(self):  # rebuilt from its settings (a mapping proxy does not pickle)
        return (RunSpec, (self.grid, self.settings, dict(self.varying), self.subgrid, dict(self.executor)))

    def get(self, key: str, default: Any = None) -> Any:
        """A dotted setting of this run as stated, e.g. ``run.get("trainer.loss_type")``."""
        return get_dotted(self.settings, key, default)

    def to_json(self) -> dict[str, Any]:
        """A copy of :attr:`settings` (what ``config.json`` records and the run id hashes)."""
        return copy_settings(dict(self.settings))

    def with_settings(self, values: Mapping[str, Any]) -> RunSpec:
        """Another run: this one's settings with dotted ``values`` set (a new run id).

        A ``seed`` also sets ``trainer.seed``, as grid expansion does.

        Raises:
            SpecError: the new settings break a section's rules.
        """
        settings = self.to_json()
        for key, value in values.items():
            set_dotted(settings, key, value)
        if "seed" in values:
            set_dotted(settings, "trainer.seed", values["seed"])
        return dataclasses.replace(self, settings=settings)

    def executor_settings(self, grid_executor: ExecutorSettings) -> ExecutorSettings:
        """The grid's executor block updated by this run's own ``executor.*`` settings.

        Raises:
            SpecError: the run's executor settings break the executor's rules.
        """
        return dataclasses.replace(grid_executor, **dict(self.executor)) if self.executor else grid_executor
