"""What state each run of a results folder is in, and whether it ever had a learning signal.

A report may only count a run as a result when the run finished: a run that diverged at step 2 has
no "final" reward, and one stopped at step 75 of 120 is not comparable with runs that trained all
120 steps. States are the harness's own vocabulary (``harness.layout.RUN_STATES``, as ``status``
shows them), read from the run's files without asking a scheduler:

========== ============================================================================
done       ``DONE`` exists: the run trained ``max_steps`` steps (``missing_steps`` lists
           steps whose metrics were set aside as unreadable)
diverged   ``DIVERGED`` exists: loss, reward or grad_norm became NaN/inf (at ``step``,
           in ``metric``)
failed     ``FAILED`` exists: the run raised
running    none of these, and the process named by its owner file is alive
stopped    none of these, started, nothing runs it: killed, preempted or interrupted at its
           last logged step of ``max_steps`` (resumable)
pending    not started
========== ============================================================================

A run whose ``config.json`` cannot be read is *damaged*: :func:`analysis.load.load` leaves it out
and names it; it never reaches this module.

"No learning signal" (:func:`signal_flags`) is a property of a run's metrics, independent of its
state: every group of completions had zero reward variance, so every advantage was 0 and the
policy gradient was zero (TRL's ``frac_reward_zero_std`` = 1 on every step that generated), or the
gradient norm was 0 on every step. Such a run can drift only through sampling noise and must never
count as "improved".
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.aggregate import factorize_runs
from harness import layout

__all__ = [
    "DONE",
    "DIVERGED",
    "FAILED",
    "PENDING",
    "RUNNING",
    "STOPPED",
    "STATES",
    "describe",
    "divergence_point",
    "read_states",
    "signal_flags",
]

DONE = layout.DONE
DIVERGED = layout.DIVERGED
FAILED = layout.FAILED
RUNNING = layout.RUNNING
STOPPED = layout.STOPPED
PENDING = layout.PENDING
#: Every state a run folder can be in without a scheduler's word, in the order a report lists them.
STATES = (DONE, DIVERGED, FAILED, STOPPED, RUNNING, PENDING)

#: Columns TRL (and the harness) log whose non-finite value stops a run, in the order they are checked.
DIVERGENCE_METRICS = ("loss", "reward", "grad_norm")

#: TRL's fraction of groups whose rewards all agree (advantage 0 for every completion of the group).
ZERO_STD = "frac_reward_zero_std"
GRAD_NORM = "grad_norm"


def _state_row(rdir: str) -> dict[str, Any]:
    """One run's row of :func:`read_states`: its state by :func:`harness.layout.files_state` (the
    one reader of a run's state), and what its marker says."""
    state = layout.files_state(rdir)
    row: dict[str, Any] = {
        "state": state,
        "marker_step": None,
        "diverged_metric": None,
        "missing_steps": 0,
        "error": "",
        "conflict": "",
    }
    marker = {DONE: layout.DONE_FILE, DIVERGED: layout.DIVERGED_FILE, FAILED: layout.FAILED_FILE}.get(state)
    info = (layout.read_json_object(os.path.join(rdir, marker)) or {}) if marker else {}
    if state == DONE:
        missing = info.get("missing_steps")
        row.update(
            marker_step=_int_or_none(info.get("steps")),
            missing_steps=len(missing) if isinstance(missing, list) else 0,
        )
        if os.path.exists(os.path.join(rdir, layout.DIVERGED_FILE)):  # a new attempt removes it first
            row["conflict"] = "has both a DONE and a DIVERGED marker"
    elif state == DIVERGED:
        metric = info.get("metric")
        row.update(
            marker_step=_int_or_none(info.get("step")),
            diverged_metric=metric if isinstance(metric, str) else None,
        )
    elif state == FAILED:
        error = info.get("error")
        row["error"] = error.splitlines()[0][:200] if isinstance(error, str) else ""
    return row


def _int_or_none(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        return int(v)
    return None


def read_states(grid_dir: str | Path, run_ids: Sequence[str]) -> pd.DataFrame:
    """Each run's end state from its marker files (no metrics are read).

    Args:
        grid_dir: a grid's results folder (``results/<grid>``).
        run_ids: the runs to describe.

    Returns:
        One row per run, indexed by ``run_id`` (in the given order), with columns ``state`` (one
        of :data:`STATES`), ``marker_step`` (Int64: DONE's ``steps`` or DIVERGED's ``step``; NA
        otherwise), ``diverged_metric`` (str or None, when DIVERGED names it), ``missing_steps``
        (int: steps DONE lists as missing), ``error`` (FAILED's error line, or "") and
        ``conflict`` (markers that contradict each other, or "").

    A marker that exists but cannot be parsed still sets the state (its fields are then NA): a
    DONE file is only written once the run finished.
    """
    runs_dir = os.path.join(os.fspath(grid_dir), layout.RUNS_DIR)
    rows = [_state_row(os.path.join(runs_dir, rid)) for rid in run_ids]
    out = pd.DataFrame(rows, index=pd.Index(list(run_ids), name=layout.RUN_ID, dtype=object))
    if out.empty:
        out = pd.DataFrame(
            columns=["state", "marker_step", "diverged_metric", "missing_steps", "error", "conflict"]
        )
        out.index.name = layout.RUN_ID
    out["marker_step"] = out["marker_step"].astype("Int64")
    out["missing_steps"] = out["missing_steps"].astype(np.int64)
    return out


def signal_flags(df: pd.DataFrame) -> pd.DataFrame:
    """Per run: whether it ever had a learning signal.

    Args:
        df: frame from :func:`analysis.load.load` (``run_id``, ``step`` and any of
            ``frac_reward_zero_std`` and ``grad_norm``).

    Returns:
        One row per run present in ``df`` (indexed by ``run_id``) with bool columns
        ``zero_variance`` (``frac_reward_zero_std`` logged on at least one step and equal to 1 on
        every step where it is logged: all advantages 0), ``zero_grad`` (``grad_norm`` logged and
        0 on every logged step) and ``no_signal`` (either).
    """
    ids = df[layout.RUN_ID]
    codes, names = factorize_runs(ids)
    n_runs = len(names)
    out = pd.DataFrame(index=pd.Index([str(n) for n in names], name=layout.RUN_ID, dtype=object))

    def all_equal(column: str, value: float) -> np.ndarray:
        if column not in df.columns or n_runs == 0:
            return np.zeros(n_runs, dtype=bool)
        v = df[column].to_numpy(dtype=np.float64)
        logged = np.bincount(codes[~np.isnan(v)], minlength=n_runs)
        other = np.bincount(codes[(v != value) & ~np.isnan(v)], minlength=n_runs)
        return (logged > 0) & (other == 0)

    out["zero_variance"] = all_equal(ZERO_STD, 1.0)
    out["zero_grad"] = all_equal(GRAD_NORM, 0.0)
    out["no_signal"] = out["zero_variance"] | out["zero_grad"]
    return out


def divergence_point(df: pd.DataFrame, run_id: str, step: int | None, metric: str | None) -> tuple[int, str]:
    """Where a diverged run went non-finite: ``(step, metric)``.

    The DIVERGED marker names the step (and, for runs recorded since it does, the metric). Without
    the metric the first of :data:`DIVERGENCE_METRICS` that is non-finite at that step is named;
    without a step, the first step where any of them is non-finite (else the last logged step).

    Args:
        df: frame from :func:`analysis.load.load`.
        run_id: the run.
        step: the marker's step, or None.
        metric: the marker's metric, or None.

    Returns:
        ``(step, metric)``; ``metric`` is ``"loss, reward or grad_norm"`` when it cannot be told.
    """
    rows = df[(df[layout.RUN_ID] == run_id).to_numpy()]
    cols = [c for c in DIVERGENCE_METRICS if c in rows.columns]
    steps = rows[layout.STEP].to_numpy()
    # loss and grad_norm are logged on every step, so NaN there is the divergence; reward is NaN on
    # steps that do not generate, so only an infinite reward counts
    bad = {
        c: np.isinf(v) if c == "reward" else ~np.isfinite(v)
        for c in cols
        for v in [rows[c].to_numpy(dtype=np.float64)]
    }
    if step is None:
        hit = [int(steps[np.flatnonzero(b)[0]]) for b in bad.values() if b.any()]
        step = min(hit) if hit else (int(steps.max()) if steps.size else 0)
    if metric is None:
        at = steps == step
        metric = next((c for c in cols if bad[c][at].any()), "loss, reward or grad_norm")
    return int(step), metric


def describe(state: str, *, step: int | None, max_steps: int | None, metric: str | None = None) -> str:
    """One phrase for a run that a table leaves out, e.g. ``"diverged at step 2 (loss)"``.

    Args:
        state: one of :data:`STATES`.
        step: the step it reached (diverged: where it went non-finite).
        max_steps: the run's planned steps, or None when unknown.
        metric: for a diverged run, the metric that went non-finite.
    """
    if state == DIVERGED:
        return f"diverged at step {step}" + (f" ({metric})" if metric else "")
    of = f" of {max_steps}" if max_steps is not None else ""
    if state == FAILED:
        return f"failed at step {step}{of}" if step is not None else "failed before its first step"
    if state == RUNNING:
        return f"running, at step {step}{of}" if step is not None else "running, no step logged yet"
    if state == STOPPED:
        if step is None:
            return "stopped before its first step"
        return (
            f"stopped at step {step}{of} (killed or interrupted; grpo-harness status says from which "
            "step running the grid again resumes it)"
        )
    if state == PENDING:
        return "not started"
    return f"done, {step} steps"
