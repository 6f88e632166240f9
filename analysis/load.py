"""Load a grid's per-step metrics into one pandas frame, with each run's configuration joined.

The folder layout and column names are defined in :mod:`harness.layout`. Files are read with
pyarrow, one footer parse per file, and combined over one all-nullable schema built from every
file's schema: a metric that only some runs log (``kl`` when ``beta > 0``, ``vespo/phi_seq_mean``
for VESPO) is null in the others, whichever file is read first. Unreadable files are reported
and skipped, never fatal, because a results folder is often read while runs are still writing.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

from harness import layout

_Reader = pq.ParquetReader
_MAX_READERS = 4
_FLOAT64 = pa.float64()
_INT64 = pa.int64()

__all__ = [
    "LoadInfo",
    "Loaded",
    "load_results",
    "SkippedFileWarning",
    "flatten_config",
    "list_runs",
    "load",
    "read_grid",
    "seed_column",
]

#: Rendering of a missing config value wherever a label is needed (legends, table rows).
NONE_LABEL = "(none)"


#: Dotted config keys start with a settings section; metric names never do.
_SETTING_PREFIXES = ("task.", "tiny.", "trainer.", "harness.")


class SkippedFileWarning(UserWarning):
    """A metrics or config file could not be read and was left out of the frame."""


read_grid = layout.read_grid


def list_runs(grid_dir: str | Path) -> list[str]:
    """Run ids present under ``<grid_dir>/runs/``, sorted.

    Raises:
        FileNotFoundError: if ``<grid_dir>/runs`` does not exist.
    """
    runs_dir = Path(grid_dir) / layout.RUNS_DIR
    if not runs_dir.is_dir():
        raise FileNotFoundError(f"no '{layout.RUNS_DIR}' folder in {grid_dir}")
    return sorted(p.name for p in runs_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config to dotted keys: ``{"trainer": {"beta": 0.0}}`` → ``{"trainer.beta": 0.0}``.

    Lists and tuples become their JSON text (``[]`` → ``"[]"``) so that every value is a hashable
    scalar that can be compared across runs; empty mappings are dropped.
    """
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if type(value) is dict or isinstance(value, Mapping):
            out.update(flatten_config(value, prefix=f"{name}."))
        elif isinstance(value, (list, tuple)):
            out[name] = json.dumps(value, sort_keys=True, default=str)
        else:
            out[name] = value
    return out


def seed_column(df: pd.DataFrame) -> str | None:
    """Name of the column holding the seed (``seed``, else ``*.seed``), or None."""
    if "seed" in df.columns:
        return "seed"
    candidates = sorted(c for c in df.columns if isinstance(c, str) and c.endswith(".seed"))
    return candidates[0] if candidates else None


def _is_missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _is_constant(values: list[Any]) -> bool:
    """Same value (and type: 1, 1.0 and True differ) in every run, none missing."""
    if not values:
        return True
    v0 = values[0]
    if _is_missing(v0):
        return False
    t0 = type(v0)
    return all(type(v) is t0 and v == v0 for v in values)


def _config_column(values: list[Any], codes: np.ndarray) -> Any:
    """One config key over runs (``values[i]`` for run i) broadcast to rows by run ``codes``.

    Each column gets one dtype: bool, int64 (no gaps), float64 (numbers with gaps), or a
    categorical of strings (everything else, mixed types rendered with ``str``). Categoricals keep
    the broadcast to a million rows an index gather rather than a million string copies.
    """
    present = [v for v in values if not _is_missing(v)]
    gaps = len(present) < len(values)
    if present and all(isinstance(v, (bool, np.bool_)) for v in present):
        if not gaps:
            return np.asarray(values, dtype=bool)[codes]
        return pd.array([None if _is_missing(v) else bool(v) for v in values], dtype="boolean").take(codes)
    numeric = all(
        isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in present
    )
    if numeric:
        if not gaps and all(isinstance(v, (int, np.integer)) for v in present):
            return np.asarray(values, dtype=np.int64)[codes]
        return np.asarray([np.nan if _is_missing(v) else float(v) for v in values], dtype=np.float64)[codes]
    labels = [None if _is_missing(v) else (v if isinstance(v, str) else str(v)) for v in values]
    categories = sorted({v for v in labels if v is not None})
    index = {c: i for i, c in enumerate(categories)}
    run_codes = np.asarray([-1 if v is None else index[v] for v in labels], dtype=np.int32)
    return pd.Categorical.from_codes(run_codes[codes], categories=pd.Index(categories, dtype=object))


class DamagedConfig(ValueError):
    """A run's ``config.json`` is not the JSON object the harness writes."""


def _read_config(path: str) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """Flattened config, flattened varying values and grid name of one ``config.json``.

    Raises:
        OSError: the file cannot be read.
        ValueError: not JSON, or not UTF-8.
        DamagedConfig: JSON of the wrong shape (not an object; ``config`` or ``varying`` not an
            object; a section of ``config`` that the harness writes as an object is not one).
    """
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise DamagedConfig(f"a JSON {type(data).__name__}, not an object")
    cfg = data.get("config")
    varying = data.get("varying") or {}
    if not isinstance(cfg, Mapping):
        raise DamagedConfig(f"'config' is {type(cfg).__name__}, not an object")
    if not isinstance(varying, Mapping):
        raise DamagedConfig(f"'varying' is {type(varying).__name__}, not an object")
    for section in ("task", "tiny", "tiny_chat", "tiny_steps", "trainer", "harness"):
        if section in cfg and not isinstance(cfg[section], Mapping):
            raise DamagedConfig(f"'config.{section}' is {type(cfg[section]).__name__}, not an object")
    flat = flatten_config(cfg)
    varying_flat = {}
    for k, v in varying.items():
        varying_flat[k] = (
            json.dumps(v, sort_keys=True, default=str) if isinstance(v, (list, tuple, dict)) else v
        )
    return flat, varying_flat, data.get("grid")


#: How a wanted column that stands for every column it starts ends: ``pg_noclip/`` (a plugin's
#: metrics), ``eval/pass@`` (pass@k for every k recorded).
PREFIX_ENDS = ("/", "@")


def _expand_prefixes(want: Sequence[str], names: Sequence[str]) -> list[str]:
    """``want`` with each entry ending in one of :data:`PREFIX_ENDS` (``pg_noclip/``,
    ``eval/pass@``) replaced by the ``names`` it starts."""
    out: list[str] = []
    for w in want:
        out += [n for n in names if n.startswith(w)] if w.endswith(PREFIX_ENDS) else [w]
    return out


def _read_table(path: str, want: Sequence[str] | None) -> pa.Table:
    # The footer parse dominates for small files, so it happens once per file, through the bare
    # reader: ParquetFile's nested-path index and pre-buffering cost more than they save here.
    reader = _Reader()
    with pa.OSFile(path) as source:
        reader.open(source, pre_buffer=False)
        names = reader.schema_arrow.names
        if layout.STEP not in names:
            raise ValueError(f"no '{layout.STEP}' column")
        wanted = names if want is None else _expand_prefixes(want, names)
        index = {n: i for i, n in enumerate(names)}
        cols = [layout.STEP, *(c for c in wanted if c in index and c not in (layout.RUN_ID, layout.STEP))]
        return reader.read_all(column_indices=[index[c] for c in dict.fromkeys(cols)], use_threads=False)


def _normalise(table: pa.Table, path: str, skipped: list[tuple[str, str]]) -> pa.Table:
    """Cast to the frame's schema: ``step`` int64, every metric float64; drop rows without a step."""
    types = table.schema.types
    names = table.column_names
    if (
        all(t == _FLOAT64 for n, t in zip(names, types, strict=True) if n != layout.STEP)
        and table.schema.field(layout.STEP).type == _INT64
        and not table.column(layout.STEP).null_count
    ):
        return table
    fields = []
    arrays = []
    for name, col in zip(table.column_names, table.columns, strict=True):
        t = col.type
        if name == layout.STEP:
            target = pa.int64()
        elif any(
            check(t)
            for check in (
                pa.types.is_floating,
                pa.types.is_integer,
                pa.types.is_boolean,
                pa.types.is_null,
                pa.types.is_decimal,
            )
        ):
            target = pa.float64()
        else:
            skipped.append((path, f"column {name!r} has non-numeric type {t}; column dropped"))
            continue
        arrays.append(col if t == target else col.cast(target))
        fields.append(pa.field(name, target, nullable=True))
    out = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    if out.column(layout.STEP).null_count:
        out = out.filter(out.column(layout.STEP).is_valid())
    return out


def _read_run(run_dir: str, want: Sequence[str] | None) -> tuple[list[pa.Table], list[tuple[str, str]]]:
    """A run's metric tables (:func:`_normalise`d) and the files skipped, ``(path, reason)``."""
    skipped: list[tuple[str, str]] = []
    tables = []
    for i, path in enumerate(layout.metric_paths(run_dir)):
        table = _read_metrics_file(path, want, skipped)
        if table is not None:
            tables.append(table)
        elif i == 0 and os.path.basename(path) == layout.COMPACT_FILE:
            # A damaged compacted file may still have its parts beside it (compaction removes them
            # only after the rename); reading them beats losing the run.
            parts = (
                _read_metrics_file(part, want, skipped) for part in layout.part_paths(os.path.dirname(path))
            )
            tables.extend(t for t in parts if t is not None)
    return tables, skipped


def _read_metrics_file(
    path: str, want: Sequence[str] | None, skipped: list[tuple[str, str]]
) -> pa.Table | None:
    """One metrics file's table (:func:`_normalise`d), or None when it cannot be read (the reason
    added to ``skipped``)."""
    try:
        return _normalise(_read_table(path, want), path, skipped)
    except (pa.ArrowException, OSError, ValueError) as e:
        skipped.append((path, f"{type(e).__name__}: {e}"))
        return None


def _read_runs(
    grid_dir: Path, ids: Sequence[str], want: Sequence[str] | None
) -> list[tuple[list[pa.Table], list[tuple[str, str]]]]:
    runs_dir = os.path.join(grid_dir, layout.RUNS_DIR)
    dirs = [os.path.join(runs_dir, rid) for rid in ids]
    workers = min(_MAX_READERS, os.cpu_count() or 1, max(1, len(dirs) // 32))
    if workers <= 1:
        return [_read_run(d, want) for d in dirs]
    # The parquet footer parse and column decode release the GIL, so threads scale with cores.
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda d: _read_run(d, want), dirs, chunksize=8))


def _order_rows(codes: np.ndarray, steps: np.ndarray) -> np.ndarray | None:
    """Row order that sorts by (run, step) keeping the last of repeated steps; None if already so."""
    if codes.size < 2:
        return None
    dc = np.diff(codes)
    ds = np.diff(steps)
    if np.all((dc > 0) | ((dc == 0) & (ds > 0))):
        return None
    position = np.arange(codes.size)
    order = np.lexsort((position, steps, codes))
    c, s = codes[order], steps[order]
    # Within a repeated (run, step) the stable sort keeps file order, so the last one is the newest.
    last = np.ones(order.size, dtype=bool)
    last[:-1] = (c[1:] != c[:-1]) | (s[1:] != s[:-1])
    return order[last]


@dataclass(frozen=True)
class LoadInfo:
    """What :func:`load_results` found besides the metrics.

    Attributes:
        skipped: ``(path, reason)`` of each file not loaded.
        missing_runs: requested run ids without a run folder.
        damaged_runs: ``{run_id: reason}``: runs whose ``config.json`` cannot be read or is not the
            object the harness writes (with ``config`` they are left out of the frame, since their
            metrics cannot be attributed to a variant).
        metric_columns: the metric columns of the frame.
        config_columns: the config columns joined to the frame.
        constant_config: ``{dotted key: value}`` of config keys equal in every run and not joined.
        varying: the dotted keys the grid varies.
        aliases: ``{alias: dotted key}`` (``loss_type`` for ``trainer.loss_type``).
    """

    skipped: tuple[tuple[str, str], ...] = ()
    missing_runs: tuple[str, ...] = ()
    damaged_runs: Mapping[str, str] = field(default_factory=dict)
    metric_columns: tuple[str, ...] = ()
    config_columns: tuple[str, ...] = ()
    constant_config: Mapping[str, Any] = field(default_factory=dict)
    varying: tuple[str, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The fields as JSON data (tuples as lists), for the cache."""
        return {f.name: _json_ready(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LoadInfo:
        """:meth:`as_json`'s data back as a record (unknown keys ignored: an older cache)."""
        names = {f.name for f in fields(cls)}
        given = {k: v for k, v in data.items() if k in names}
        for k in ("missing_runs", "metric_columns", "config_columns", "varying"):
            if k in given:
                given[k] = tuple(given[k])
        if "skipped" in given:
            given["skipped"] = tuple(tuple(x) for x in given["skipped"])
        return cls(**given)


def _json_ready(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_json_ready(x) for x in v]
    if isinstance(v, Mapping):
        return dict(v)
    return v


@dataclass(frozen=True)
class Loaded:
    """:func:`load_results`' answer: the metrics frame and, beside it, what loading it found.

    Attributes:
        frame: :func:`load`'s frame.
        info: :class:`LoadInfo`.
    """

    frame: pd.DataFrame
    info: LoadInfo


def load(
    results_dir: str | Path,
    run_ids: Iterable[str] | None = None,
    *,
    columns: Sequence[str] | None = None,
    config: bool = True,
    cache_dir: str | Path | None = None,
) -> pd.DataFrame:
    """:func:`load_results`' frame alone (same arguments, same frame, same warnings and errors)."""
    return load_results(results_dir, run_ids, columns=columns, config=config, cache_dir=cache_dir).frame


def load_results(
    results_dir: str | Path,
    run_ids: Iterable[str] | None = None,
    *,
    columns: Sequence[str] | None = None,
    config: bool = True,
    cache_dir: str | Path | None = None,
) -> Loaded:
    """All runs' per-step metrics as one frame, one row per (run, optimizer step), and what
    loading them found (:class:`LoadInfo`).

    Args:
        results_dir: a grid's results folder (``results/<grid>``, holding ``runs/``).
        run_ids: runs to load; default every run folder present. Unknown ids are warned about and
            listed in ``info.missing_runs``.
        columns: columns to read besides ``run_id`` and ``step``; default all. Metric names are
            read from the parquet files (much faster than reading every column); a requested
            metric that no file has comes back as an all-NaN column, so downstream code can rely
            on its presence (a requested config key that no run sets does not). With ``columns`` given, only the config keys that differ between the
            loaded runs, the grid's varying keys and config keys named in ``columns`` are joined;
            the values of the constant ones are in ``info.constant_config``.
        config: join each run's configuration as columns.
        cache_dir: keep the loaded frame there (one Arrow file per set of inputs, see
            :func:`cache_key`) and reuse it while no run's files changed: a report re-run on
            finished results reads one file instead of a thousand. None: no cache. A folder that
            cannot be written only costs the speed-up.

    Returns:
        :class:`Loaded`: ``frame`` sorted by (run, step) with columns

        * ``run_id``: categorical of strings (the run folder's name);
        * ``step``: int64, optimizer step (1-based);
        * metrics: float64, NaN where a run did not log that metric at that step;
        * config (when ``config``): the resolved config flattened to dotted keys
          (``trainer.loss_type``, ``task.name``, ...), each ``varying`` key of ``config.json`` (e.g.
          ``seed``), ``grid``, and a short alias for each dotted varying key whose last component
          is unambiguous (``loss_type`` for ``trainer.loss_type``). One dtype per column: bool,
          int64, float64, or a categorical of strings; missing values are NaN.

        ``info``: :class:`LoadInfo`. Repeated steps within a run (a
        resumed run that re-logged them) keep the last row written.

    Raises:
        FileNotFoundError: if ``results_dir`` has no ``runs/`` folder.

    Warns:
        SkippedFileWarning: once per unreadable file (truncated parquet, bad JSON, no ``step``
            column), naming the file and the reason.
    """
    grid_dir = Path(results_dir)
    ids, missing = _present_ids(grid_dir, run_ids)
    if cache_dir is not None:
        return _load_cached(grid_dir, ids, missing, Path(cache_dir), columns=columns, config=config)

    skipped: list[tuple[str, str]] = []
    damaged: dict[str, str] = {}
    cfg = collect_config(grid_dir, ids, skipped, damaged) if config else None
    if damaged:
        # Metrics of a run whose settings cannot be read cannot be attributed to a variant.
        keep = [i for i, rid in enumerate(ids) if rid not in damaged]
        ids = [ids[i] for i in keep]
        cfg = RunConfigs([cfg.rows[i] for i in keep], cfg.keys, cfg.varying)
    requested_cols = (
        None
        if columns is None
        else [c for c in dict.fromkeys(columns) if c not in (layout.RUN_ID, layout.STEP)]
    )
    want = requested_cols
    if requested_cols is not None and cfg is not None:
        config_names = set(cfg.keys) | set(_alias_candidates(cfg.varying, cfg.keys))
        want = [c for c in requested_cols if c not in config_names]

    tables: list[pa.Table] = []
    owners: list[int] = []
    for i, (run_tables, run_skipped) in enumerate(_read_runs(grid_dir, ids, want)):
        skipped.extend(run_skipped)
        tables.extend(run_tables)
        owners.extend([i] * len(run_tables))
    data, metric_names = _metric_data(tables, owners, ids, want)

    config_cols: list[str] = []
    aliases: dict[str, str] = {}
    constant: dict[str, Any] = {}
    if cfg is not None:
        config_cols, aliases, constant = join_config(cfg, data[layout.RUN_ID].codes, data, requested_cols)

    for path, reason in skipped:
        warnings.warn(f"skipped {path}: {reason}", SkippedFileWarning, stacklevel=2)

    info = LoadInfo(
        skipped=tuple(tuple(x) for x in skipped),
        missing_runs=tuple(missing),
        damaged_runs=damaged,
        metric_columns=tuple(metric_names),
        config_columns=tuple(config_cols),
        constant_config=constant,
        varying=() if cfg is None else tuple(cfg.varying),
        aliases=aliases,
    )
    return Loaded(pd.DataFrame(data, copy=False), info)


def _present_ids(grid_dir: Path, run_ids: Iterable[str] | None) -> tuple[list[str], list[str]]:
    """The run ids to load (``run_ids`` deduplicated, or every run folder) and the requested ones
    without a folder, warned about for :func:`load`'s caller."""
    available = list_runs(grid_dir)
    if run_ids is None:
        return available, []
    requested = list(dict.fromkeys(str(r) for r in run_ids))
    present = set(available)
    missing = [r for r in requested if r not in present]
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        warnings.warn(f"{len(missing)} requested run(s) not found in {grid_dir}: {shown}", stacklevel=3)
    return [r for r in requested if r in present], missing


def _load_cached(
    grid_dir: Path,
    ids: list[str],
    missing: list[str],
    cache_dir: Path,
    *,
    columns: Sequence[str] | None,
    config: bool,
) -> Loaded:
    """:func:`load_results` through the cache in ``cache_dir``: the cached frame for these inputs
    (its skipped files warned about again), else the frame loaded and cached."""
    key = cache_key(grid_dir, ids, columns, config)
    cached = _read_cached(cache_dir, key)
    if cached is not None:
        for path, reason in cached.info.skipped:
            warnings.warn(f"skipped {path}: {reason}", SkippedFileWarning, stacklevel=3)
        return Loaded(cached.frame, replace(cached.info, missing_runs=tuple(missing)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = load_results(grid_dir, ids, columns=columns, config=config)
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    _write_cached(cache_dir, key, loaded)
    return Loaded(loaded.frame, replace(loaded.info, missing_runs=tuple(missing)))


def _metric_data(
    tables: Sequence[pa.Table], owners: Sequence[int], ids: Sequence[str], want: Sequence[str] | None
) -> tuple[dict[str, Any], list[str]]:
    """The ``run_id``, ``step`` and metric columns of :func:`load`'s frame from the runs' tables.

    Args:
        tables: the metric tables read (:func:`_normalise`d); ``owners[k]`` is the position in
            ``ids`` of the run ``tables[k]`` belongs to.
        want: the metrics asked for (None: every column found); one ending in "/" or "@"
            (:data:`PREFIX_ENDS`) stands for every column found that starts with it (none: no
            column).

    Returns:
        ``({column: (rows,) values}, metric names)``, rows sorted by (run, step), the last of a
        repeated step kept; a wanted metric no table has is all-NaN (a setting, none at all).
    """
    if tables:
        combined = pa.concat_tables(tables, promote_options="default")
        lengths = np.fromiter((t.num_rows for t in tables), dtype=np.int64, count=len(tables))
        codes = np.repeat(np.asarray(owners, dtype=np.int32), lengths)
        steps = combined.column(layout.STEP).to_numpy()
    else:
        combined = None
        codes = np.zeros(0, dtype=np.int32)
        steps = np.zeros(0, dtype=np.int64)
    found = [] if combined is None else [c for c in combined.column_names if c != layout.STEP]
    metric_names = sorted(found) if want is None else _expand_prefixes(want, sorted(found))

    order = _order_rows(codes, steps)
    if order is not None:
        codes, steps = codes[order], steps[order]
    data: dict[str, Any] = {
        layout.RUN_ID: pd.Categorical.from_codes(codes, categories=pd.Index(ids, dtype=object)),
        layout.STEP: steps.astype(np.int64, copy=False),
    }
    for name in metric_names:
        if combined is not None and name in combined.column_names:
            values = combined.column(name).to_numpy()
            data[name] = values if order is None else values[order]
        elif not name.startswith(_SETTING_PREFIXES):  # a setting no run has is no column at all
            data[name] = np.full(codes.size, np.nan)
    return data, [m for m in metric_names if m in data]


#: Bumped whenever what :func:`load` returns for the same files changes, so older caches are ignored.
CACHE_FORMAT = 2
_CACHE_KEEP = 2  # cache files kept per folder (the most recently written)


def cache_key(grid_dir: Path, ids: Sequence[str], columns: Sequence[str] | None, config: bool) -> str:
    """Hash of everything a loaded frame depends on: the loader's format, the arguments, and the
    name, size, modification and status-change times (ns) and inode of every run's ``config.json``
    and metrics file.

    Writers replace files by renaming a new one into place, so any change to a run's files
    changes its size or modification time, and with it the key. Costs one ``stat`` per file.
    """
    h = hashlib.sha256(
        json.dumps([CACHE_FORMAT, list(ids), None if columns is None else list(columns), config]).encode()
    )
    runs_dir = os.path.join(os.fspath(grid_dir), layout.RUNS_DIR)
    for rid in ids:
        rdir = os.path.join(runs_dir, rid)
        for path in (os.path.join(rdir, layout.CONFIG_FILE), *layout.metric_paths(rdir)):
            try:
                st = os.stat(path)
                # ctime and inode too: a copy that restores the mtime (cp -p, rsync -a) changes them
                h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\n".encode())
            except OSError:
                h.update(f"{path}\0-\n".encode())
    return h.hexdigest()[:24]


#: The key of a cached frame's :class:`LoadInfo` in its Arrow schema's metadata.
_CACHE_INFO = b"grpo_harness_attrs"


def _read_cached(folder: Path, key: str) -> Loaded | None:
    # Arrow IPC, uncompressed and memory-mapped: reading is a mapping, not a decode.
    path = folder / f"frame-{key}.arrow"
    try:
        table = feather.read_table(path, memory_map=True)
        info = json.loads((table.schema.metadata or {}).get(_CACHE_INFO, b"{}"))
        df = table.to_pandas()
    except (OSError, ValueError, pa.ArrowException):
        return None
    for name in df.columns:  # categories come back as Arrow strings; the loader gives Python ones
        col = df[name]
        if isinstance(col.dtype, pd.CategoricalDtype):
            cats = pd.Index(list(col.cat.categories), dtype=object)
            df[name] = pd.Categorical.from_codes(
                col.cat.codes.to_numpy(), categories=cats, ordered=col.cat.ordered
            )
    return Loaded(df, LoadInfo.from_json(info))


def _write_cached(folder: Path, key: str, loaded: Loaded) -> None:
    """Write the frame atomically; never raises (a cache that cannot be written is no cache)."""

    try:
        folder.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pandas(loaded.frame, preserve_index=False)
        info = {k: v for k, v in loaded.info.as_json().items() if k != "missing_runs"}
        table = table.replace_schema_metadata(
            {**(table.schema.metadata or {}), _CACHE_INFO: json.dumps(info, default=str).encode()}
        )
        with layout.atomic_path(folder / f"frame-{key}.arrow", prefix=".frame-") as tmp:
            feather.write_feather(table, tmp, compression="uncompressed")
        old = sorted(folder.glob("frame-*.arrow"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for stale in old[_CACHE_KEEP:]:
            stale.unlink(missing_ok=True)
    except (OSError, ValueError, TypeError, pa.ArrowException):
        return


@dataclass(frozen=True)
class RunConfigs:
    """Per-run flattened configs (:func:`collect_config`).

    Attributes:
        rows: ``rows[i]``: run i's ``{dotted key: value}`` (empty for a damaged config).
        keys: the union of the rows' keys, in first-seen order.
        varying: the keys the grid varies (``grid.json``'s and each run's own).
    """

    rows: list[dict[str, Any]]
    keys: list[str]
    varying: list[str]


def collect_config(
    grid_dir: Path, ids: list[str], skipped: list[tuple[str, str]], damaged: dict[str, str]
) -> RunConfigs:
    """Each run's ``config.json`` flattened (:func:`flatten_config`), its varying values added,
    in the order of ``ids``. A file that cannot be read is appended to ``skipped`` as ``(path,
    reason)`` and to ``damaged`` as ``{run_id: reason}``, and gives an empty row; a damaged
    ``grid.json`` is appended to ``skipped`` too."""
    rows: list[dict[str, Any]] = []
    varying: dict[str, None] = {}
    try:
        grid_info = read_grid(grid_dir)
    except ValueError as e:
        grid_info = None
        skipped.append((str(grid_dir / layout.GRID_FILE), str(e)))
    if grid_info:
        varying.update(dict.fromkeys(str(k) for k in grid_info.get("varying") or []))
    runs_dir = os.path.join(grid_dir, layout.RUNS_DIR)
    for rid in ids:
        path = os.path.join(runs_dir, rid, layout.CONFIG_FILE)
        try:
            flat, run_varying, grid = _read_config(path)
        except (OSError, ValueError, AttributeError, TypeError) as e:
            reason = f"{type(e).__name__}: {e}"
            skipped.append((str(path), reason + "; run left out"))
            damaged[rid] = f"{path}: {reason}"
            rows.append({})
            continue
        row = dict(flat)
        for k, v in run_varying.items():
            varying.setdefault(k, None)
            # A varying key that is not a config path (e.g. a top-level "seed") still becomes a column.
            row.setdefault(k, v)
        if grid is not None:
            row.setdefault("grid", grid)
        rows.append(row)
    keys: dict[str, None] = {}
    for row in rows:
        keys.update(dict.fromkeys(row))
    return RunConfigs(rows, list(keys), list(varying))


def _alias_candidates(varying: Sequence[str], keys: Sequence[str]) -> dict[str, str]:
    present = set(keys)
    dotted = [k for k in varying if "." in k and k in present]
    last = [k.rsplit(".", 1)[1] for k in dotted]
    return {short: key for key, short in zip(dotted, last, strict=True) if last.count(short) == 1}


def join_config(
    cfg: RunConfigs,
    codes: np.ndarray,
    data: dict[str, Any],
    requested: Sequence[str] | None,
) -> tuple[list[str], dict[str, str], dict[str, Any]]:
    """The configs joined onto a frame's columns: each key a column of ``data`` (in place), its
    value per row from the row's run (``codes``: run position per row, shape ``(rows,)``), named
    ``config.<key>`` when a metric has the name; with ``requested`` (the columns asked for), a key
    that no one asked for and that is the same in every run is kept aside as constant. A varying
    key's last component becomes an alias column when it names one key only.

    Returns:
        ``(config column names, {alias: dotted key}, {constant key: value})``.
    """
    candidates = _alias_candidates(cfg.varying, cfg.keys)
    named = set() if requested is None else {candidates.get(c, c) for c in requested}
    taken = set(data)
    names: list[str] = []
    constant: dict[str, Any] = {}
    for key in cfg.keys:
        values = [row.get(key) for row in cfg.rows]
        if requested is not None and key not in named and key not in cfg.varying and _is_constant(values):
            constant[key] = values[0] if values else None
            continue
        name = key if key not in taken else f"config.{key}"
        data[name] = _config_column(values, codes)
        taken.add(name)
        names.append(name)
    aliases: dict[str, str] = {}
    for short, key in candidates.items():
        if key in data and short not in taken and short not in (layout.RUN_ID, layout.STEP):
            data[short] = data[key]
            taken.add(short)
            aliases[short] = key
    return names, aliases, constant
