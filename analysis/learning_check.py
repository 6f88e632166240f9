"""The learning check: did each run learn at all? Its metric over the first vs the last part of
its logged steps (:func:`learning_check`), and per variant over seeds (:func:`learning_summary`);
a run without a learning signal never counts as improved.

Pure: a metrics frame in (from :func:`analysis.load.load`), :class:`analysis.tables.Table` out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis import stats
from analysis.grouping import by_list, by_run_and_step, key_dict, per_run, run_index, variant_groups
from analysis.load import seed_column
from analysis.states import signal_flags
from analysis.tables import Table
from harness import layout

__all__ = ["learning_check", "learning_summary"]


def learning_check(
    df: pd.DataFrame,
    metric: str = "reward",
    *,
    by: str | Sequence[str] = "loss_type",
    frac: float = 0.2,
    signal: pd.DataFrame | None = None,
) -> Table:
    """Did each run learn? Mean ``metric`` over its first vs its last ``frac`` of logged steps.

    Args:
        df: frame from :func:`analysis.load.load`.
        metric: the column compared.
        by: variant column(s) reported with each run.
        frac: fraction of each run's logged steps (at least one) in each window.
        signal: :func:`analysis.states.signal_flags` of ``df`` when already computed.

    Returns:
        A :class:`analysis.tables.Table` (its caption says how), one row per run: ``run_id``,
        ``*by``, ``seed`` (when a seed column exists), ``steps``, ``first``, ``last``, ``diff =
        last - first``, ``signal`` (False when the run never had a learning signal, see
        :func:`analysis.states.signal_flags`) and ``note`` (why not).

    Raises:
        KeyError: if ``metric`` or a ``by`` column is missing.
        ValueError: if ``frac`` is not in (0, 0.5].
    """
    if not 0.0 < frac <= 0.5:
        raise ValueError(f"frac must be in (0, 0.5], got {frac}")
    by = by_list(by)
    if metric not in df.columns:
        raise KeyError(f"metric {metric!r} not in frame")
    runs = per_run(df, by)
    codes, names, first_rows = run_index(df)
    seed = seed_column(df)
    if seed is not None and seed not in by:
        runs["seed"] = pd.Series(df[seed].to_numpy()[first_rows], index=names).reindex(runs.index).to_numpy()
    n_runs = len(names)
    y = df[metric].to_numpy(dtype=np.float64)
    keep = ~np.isnan(y)
    order = by_run_and_step(codes, df[layout.STEP].to_numpy(), keep)
    c, yv = codes[order], y[order]
    counts = np.bincount(c, minlength=n_runs)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    pos_in_run = np.arange(c.size) - np.repeat(starts, counts)
    k = np.maximum(1, np.ceil(frac * counts)).astype(np.int64)
    head = pos_in_run < k[c]
    tail = pos_in_run >= (counts - k)[c]
    with np.errstate(invalid="ignore", divide="ignore"):
        first = np.bincount(c[head], weights=yv[head], minlength=n_runs) / np.bincount(
            c[head], minlength=n_runs
        )
        last = np.bincount(c[tail], weights=yv[tail], minlength=n_runs) / np.bincount(
            c[tail], minlength=n_runs
        )
    pos = pd.Index(names).get_indexer(runs.index)
    runs["steps"] = np.where(counts > 0, counts, np.nan)[pos]
    runs["first"] = first[pos]
    runs["last"] = last[pos]
    runs["diff"] = runs["last"] - runs["first"]
    flags = (signal_flags(df) if signal is None else signal).reindex(runs.index)
    runs["signal"] = ~flags["no_signal"].fillna(False).astype(bool)
    runs["note"] = [
        "no learning signal: every group had zero reward variance (all advantages 0)"
        if zv
        else ("no learning signal: grad_norm 0 on every step" if zg else "")
        for zv, zg in zip(flags["zero_variance"].fillna(False), flags["zero_grad"].fillna(False), strict=True)
    ]
    return Table(
        runs.reset_index(),
        caption=f"Mean {metric} over the first vs the last {100 * frac:g}% of each run's logged steps; diff = last - first. "
        "A run without a learning signal (zero reward variance in every group, or a zero gradient on every "
        "step) never counts as improved: its change comes from which prompts were drawn.",
    )


def learning_summary(check: Table, *, by: str | Sequence[str] = "loss_type") -> Table:
    """Per variant, the learning check over seeds: mean first/last, mean and std of the difference.

    Args:
        check: output of :func:`learning_check`.
        by: the variant column(s) used there.

    Returns:
        A :class:`analysis.tables.Table` (the check's caption, extended), one row per variant:
        ``*by``, ``runs``, ``first``, ``last`` (means over runs), ``diff_mean``, ``diff_std``
        (ddof=1; NaN with one run), ``improved`` (runs with ``diff > 0`` that had a learning
        signal) and ``no_signal`` (runs that never had one).
    """
    by = by_list(by)
    rows = []
    for key, part in variant_groups(check.frame, by):
        d = part["diff"].to_numpy(dtype=np.float64)
        signal = part["signal"].to_numpy(dtype=bool) if "signal" in part else np.ones(len(part), dtype=bool)
        mean, std, _ = stats.nan_moments(d, axis=0)
        rows.append(
            {
                **key_dict(by, key),
                "runs": len(part),
                "first": part["first"].mean(),
                "last": part["last"].mean(),
                "diff_mean": float(mean),
                "diff_std": float(std),
                "improved": int(((d > 0) & signal).sum()),
                "no_signal": int((~signal).sum()),
            }
        )
    return Table(
        pd.DataFrame(rows),
        caption=check.caption + " Mean and std (ddof=1) of diff over runs.",
        display={
            "diff_mean": "diff mean",
            "diff_std": "diff std",
            "improved": "runs improved",
            "no_signal": "no learning signal",
        },
    )
