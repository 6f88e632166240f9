"""One row per run and the rows of each variant, as the tables need them: each row's run code,
rows ordered by run and step or grouped by variant, per-run sums, the run table with its variant
labels, and each variant's baseline value in its facet.

Pure: frames and arrays in, frames and arrays out. The tables (:mod:`analysis.timing`,
:mod:`analysis.scores`, :mod:`analysis.learning_check`, :mod:`analysis.time_to_target`) and the
report group their rows with these.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.aggregate import factorize_runs, variant_labels
from harness import layout

__all__ = [
    "baseline_has_own_panels",
    "baseline_mask",
    "baseline_values",
    "by_list",
    "by_run_and_step",
    "column_or_nan",
    "joined_keys",
    "key_dict",
    "per_run",
    "per_run_sum",
    "rows_by_group",
    "run_index",
    "variant_groups",
]


def by_list(by: str | Sequence[str] | None) -> list[str]:
    """The variant columns as a list: one name, several (duplicates dropped, order kept), or none."""
    if by is None:
        return []
    return [by] if isinstance(by, str) else list(dict.fromkeys(by))


def run_index(df: pd.DataFrame) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Each row's run code, the run ids (code order) and the first row of each run."""
    codes, names = factorize_runs(df[layout.RUN_ID])
    first = np.full(len(names), -1, dtype=np.int64)
    first[codes[::-1]] = np.arange(len(df) - 1, -1, -1)
    return codes, names, first


def by_run_and_step(codes: np.ndarray, steps: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Indices of the ``keep`` rows ordered by (run code, step); no sort when they already are
    (frames from :func:`analysis.load.load` come sorted by run and step)."""
    rows = np.flatnonzero(keep)
    c, st = codes[rows], steps[rows]
    if rows.size < 2:
        return rows
    dc, ds = np.diff(c), np.diff(st)
    if np.all((dc > 0) | ((dc == 0) & (ds > 0))):
        return rows
    return rows[np.lexsort((st, c))]


def joined_keys(frame: pd.DataFrame, cols: Sequence[str]) -> np.ndarray:
    """Each row's values of ``cols`` as one string (joined by ``\\x1f``), to group by several
    columns at once; shape ``(len(frame),)``, dtype object (``""`` for every row without columns)."""
    if not cols:
        return np.full(len(frame), "", dtype=object)
    parts = [frame[c].astype(str).to_numpy(dtype=object) for c in cols]
    if len(parts) == 1:
        return parts[0]
    return np.array(["\x1f".join(t) for t in zip(*parts, strict=True)], dtype=object)


def per_run_sum(codes: np.ndarray, n: int, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per run: the sum of the non-NaN values of ``v`` and how many there are."""
    nan = np.isnan(v)
    if not nan.any():  # the common case: no selection of rows needed
        return np.bincount(codes, weights=v, minlength=n), np.bincount(codes, minlength=n).astype(np.float64)
    return (
        np.bincount(codes, weights=np.where(nan, 0.0, v), minlength=n),
        np.bincount(codes, weights=(~nan).astype(np.float64), minlength=n),
    )


def rows_by_group(codes: np.ndarray, group_of_run: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row positions ordered by the group of their run (``group_of_run[code]``, -1: none), and the
    bounds of each group ``g`` in that order (``bounds[g]:bounds[g + 1]``); rows keep their order
    within a group.

    When each run's rows are one contiguous block (as :func:`analysis.load.load` returns them) the
    blocks are reordered as wholes; otherwise the rows are sorted.
    """
    n_groups = int(group_of_run.max()) + 1 if group_of_run.size else 0
    if codes.size == 0:
        return np.zeros(0, np.int64), np.zeros(n_groups + 1, np.int64)
    edges = np.flatnonzero(codes[1:] != codes[:-1]) + 1
    starts = np.r_[0, edges]
    block_codes = codes[starts]
    if np.unique(block_codes).size == block_codes.size:  # one block per run
        ends = np.r_[edges, codes.size]
        g = group_of_run[block_codes]
        keep = np.flatnonzero(g >= 0)
        order_b = keep[np.argsort(g[keep], kind="stable")]
        lengths = (ends - starts)[order_b]
        # the rows of the chosen blocks, block after block: output position i of block b holds
        # row starts[b] + (i - heads[b])
        heads = np.r_[0, np.cumsum(lengths)[:-1]]
        rows = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts[order_b] - heads, lengths)
        per_group = np.bincount(g[order_b], weights=lengths, minlength=n_groups).astype(np.int64)
    else:
        row_group = group_of_run[codes]
        keep = np.flatnonzero(row_group >= 0)
        rows = keep[np.argsort(row_group[keep], kind="stable")]
        per_group = np.bincount(row_group[keep], minlength=n_groups)
    return rows, np.r_[0, np.cumsum(per_group)]


def per_run(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """One row per run, indexed by run id (sorted), with its variant labels (``by`` columns as
    display strings)."""
    missing = [c for c in by if c not in df.columns]
    if missing:
        raise KeyError(f"columns not in frame: {missing}")
    _, names, first = run_index(df)
    order = np.argsort(np.asarray(names, dtype=object), kind="stable")
    runs = pd.DataFrame(index=pd.Index([names[k] for k in order], name=layout.RUN_ID, dtype=object))
    for c in by:
        # Config values are constant within a run, so the run's first row carries them.
        values = df[c].iloc[first[order]].reset_index(drop=True)
        if not (isinstance(values.dtype, pd.CategoricalDtype) and values.cat.ordered):
            values = pd.Series(values.astype(object).to_numpy())  # else labels keep their given order
        runs[c] = variant_labels(values)
    return runs


def baseline_mask(runs: pd.DataFrame, by: list[str], baseline: Any) -> np.ndarray | None:
    """Which per-run rows belong to the baseline variant (matched on the first ``by`` column)."""
    if baseline is None or not by:
        return None
    return (runs[by[0]].astype(str) == str(baseline)).to_numpy()


def variant_groups(runs: pd.DataFrame, by: list[str]) -> Iterator[tuple[Any, pd.DataFrame]]:
    """``(key, rows)`` per variant of ``runs`` (one row per run, :func:`per_run`), in label order:
    the key is a ``by`` value, or a tuple of them for several columns; ``((), runs)`` without ``by``."""
    if not by:
        yield (), runs
        return
    yield from runs.groupby(by, observed=True, sort=True)


def key_dict(by: list[str], key: Any) -> dict[str, Any]:
    """``{column: value}`` of a group key of :func:`variant_groups` (one value or a tuple)."""
    key = key if isinstance(key, tuple) else (key,)
    return dict(zip(by, key, strict=True))


def column_or_nan(df: pd.DataFrame, name: str) -> pd.Series:
    """Column ``name`` of ``df``, or an all-NaN Series on ``df``'s index when it has none."""
    return df[name] if name in df.columns else pd.Series(np.nan, index=df.index)


def baseline_values(
    table: pd.DataFrame, by: list[str], baseline: Any, column: str, same: Sequence[str] = ()
) -> np.ndarray:
    """Per row of ``table``: ``column`` of the baseline variant in the same facet (``by[1:]``).

    Variants are compared with the baseline where everything else is equal: with facets (say
    ``num_iterations``) a row's reference is the baseline's row with the same facet values; a
    facet without the baseline is compared with the baseline's rows that agree with it on the
    ``same`` columns only when the baseline sits in panels of its own; otherwise it gets NaN.
    """
    out = np.full(len(table), np.nan)
    if baseline is None or not by or table.empty:
        return out
    is_base = (table[by[0]].astype(str) == str(baseline)).to_numpy()
    facets = by[1:]
    if not facets:
        hit = table.loc[is_base, column]
        out[:] = float(hit.mean()) if len(hit) else np.nan
        return out
    key = joined_keys(table, facets)
    ref = {k: float(v) for k, v in zip(key[is_base], table.loc[is_base, column], strict=True)}
    if not baseline_has_own_panels(key, is_base):
        return np.array([ref.get(k, np.nan) for k in key], dtype=np.float64)
    # The baseline is a panel of its own (as "no sync" beside sync periods): every other panel is
    # compared with it, among rows that agree on the ``same`` columns.
    same = [c for c in same if c in facets]
    skey = joined_keys(table, same) if same else np.zeros(len(table), dtype=object)
    pooled = {k: float(table.loc[is_base & (skey == k), column].mean()) for k in set(skey[is_base])}
    return np.array(
        [ref.get(k, pooled.get(sk, np.nan)) for k, sk in zip(key, skey, strict=True)], dtype=np.float64
    )


def baseline_has_own_panels(panel: np.ndarray, is_base: np.ndarray) -> bool:
    """Whether the baseline sits in panels of its own (no other variant shares one with it): only
    then is a panel compared with it across panels; a baseline missing from one panel is never
    borrowed from another."""
    if not is_base.any():
        return False
    return not (set(panel[is_base]) & set(panel[~is_base]))
