"""Step-by-step comparison of two runs' recorded metrics: the check that a run under DeepSpeed (or
on other hardware, another process count, a resumed attempt) recorded what the reference run did.

``grpo-harness compare RUN_A RUN_B`` prints, for every numeric column both runs record, the
largest absolute and relative difference over the steps both have, and the columns whose
difference exceeds ``|a - b| <= atol + rtol * |b|`` (numpy's ``allclose``; NaN equals NaN). Columns
that measure the machine, not the run (wall time, memory, concurrent runs), are left out. Exit
status 0 when every column agrees, 1 when one does not, 2 on bad input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Column prefixes that measure the machine rather than the run.
MACHINE_COLUMNS = ("time/", "step_time", "memory/", "machine/")
#: Defaults: float32 sums taken in another order (DeepSpeed's bucketed reductions, ZeRO-3's
#: layer-by-layer gathering) differ in the last bits, and the weights drift apart by that much each
#: step. Measured against DDP: 12 steps of tests/test_deepspeed.py's grid, grad_norm 1.3e-4 and the
#: w_seq statistics 1e-5 apart; 20 steps of ablations/base.yaml's shapes, grad_norm 2.1e-4 and
#: log_w_seq/min 4.8e-5. Sampled completions stay the same until a drifted logit flips a token;
#: from there the runs part for real (``steps`` limits the comparison to the steps before).
RTOL, ATOL = 1e-3, 1e-4


@dataclass(frozen=True)
class ColumnDiff:
    """One metric column of two runs: largest |a - b| and |a - b| / |b| over the common steps
    (NaN where both are NaN does not count), and whether every step is within tolerance."""

    column: str
    max_abs: float
    max_rel: float
    agrees: bool


def _metrics(run_dir: Path):
    from harness.layout import read_metrics

    table = read_metrics(run_dir)
    if table is None or not table.num_rows:
        raise ValueError(f"{run_dir}: no metrics recorded (is it results/<grid>/runs/<run_id>?)")
    return table.to_pandas().drop_duplicates("step", keep="last").set_index("step")


def compare_runs(
    a: Path, b: Path, rtol: float = RTOL, atol: float = ATOL, steps: int | None = None
) -> tuple[list[int], list[ColumnDiff]]:
    """The steps both runs recorded (up to ``steps`` when given) and the per-column differences
    over them (``a`` against ``b``).

    Raises:
        ValueError: a folder has no metrics, or the runs share no step.
    """
    import numpy as np
    import pandas as pd

    x, y = _metrics(Path(a)), _metrics(Path(b))
    limit = steps
    steps = sorted(s for s in set(x.index) & set(y.index) if limit is None or s <= limit)
    if not steps:
        raise ValueError(f"{a} and {b} share no step" + (f" up to {limit}" if limit is not None else ""))
    out = []
    for col in x.columns:
        if col.startswith(MACHINE_COLUMNS) or col not in y or not pd.api.types.is_numeric_dtype(x[col]):
            continue
        u, v = x.loc[steps, col].to_numpy(float), y.loc[steps, col].to_numpy(float)
        both = ~(np.isnan(u) & np.isnan(v))
        diff = np.abs(u - v)[both]
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = (diff / np.abs(v[both]))[diff > 0]
        out.append(
            ColumnDiff(
                col,
                float(np.nanmax(diff)) if diff.size else 0.0,
                float(np.nanmax(rel)) if rel.size else 0.0,
                bool(np.allclose(u, v, rtol=rtol, atol=atol, equal_nan=True)),
            )
        )
    return steps, out


def setting_differences(a: Path, b: Path) -> dict[str, tuple[Any, Any]]:
    """The settings (dotted keys of the runs' ``config.json``) in which the two runs differ."""
    from harness import layout

    def flat(node: Any, prefix: str = "") -> dict[str, Any]:
        if isinstance(node, dict) and node and prefix.count(".") < 2:  # section.key
            return {k: v for key, sub in node.items() for k, v in flat(sub, f"{prefix}{key}.").items()}
        return {prefix.rstrip("."): node}

    def config(run_dir: Path) -> dict[str, Any]:
        try:
            return flat(json.loads((run_dir / layout.CONFIG_FILE).read_text())["config"])
        except (OSError, ValueError, KeyError):
            return {}

    x, y = config(Path(a)), config(Path(b))
    return {k: (x.get(k), y.get(k)) for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)}


def format_comparison(
    a: Path, b: Path, rtol: float = RTOL, atol: float = ATOL, steps: int | None = None
) -> tuple[str, bool]:
    """The comparison as text, and whether every column agrees."""
    from tabulate import tabulate

    steps, diffs = compare_runs(a, b, rtol, atol, steps)
    lines = [f"A: {a}", f"B: {b}"]
    for key, (u, v) in setting_differences(a, b).items():
        lines.append(
            f"  differs: {key}: {json.dumps(u, default=str)} (A) vs {json.dumps(v, default=str)} (B)"
        )
    lines.append(
        f"{len(steps)} common steps ({steps[0]}-{steps[-1]}); tolerance |A - B| <= {atol:g} + {rtol:g} |B|"
    )
    rows = sorted(diffs, key=lambda d: (d.agrees, -d.max_abs))
    table = [[d.column, f"{d.max_abs:.3g}", f"{d.max_rel:.3g}", "yes" if d.agrees else "NO"] for d in rows]
    lines.append(tabulate(table, headers=["column", "max |A-B|", "max rel", "within"], tablefmt="simple"))
    bad = [d.column for d in diffs if not d.agrees]
    lines.append(
        f"{len(diffs) - len(bad)}/{len(diffs)} columns agree" + (f"; not: {', '.join(bad)}" if bad else "")
    )
    return "\n".join(lines), not bad
