"""Off-policy steps and the metrics that only move on them.

An importance-ratio metric (w_seq, clip fractions, ``phi_seq``, a plugin's ``<name>/ratio...``)
is identically 1 or 0 on a step whose old log-probs came from the current policy, so the curves,
the dynamics panels, the w_seq figure and the findings read such a metric over off-policy steps
only (:func:`off_policy_rows`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness import layout

__all__ = ["PLUGIN_RATIO_PARTS", "RATIO_PREFIXES", "is_ratio_metric", "off_policy_rows"]


#: Metrics that depend on the importance ratio between the current and the old policy. They are
#: identically 1 (ratios) or 0 (clip fractions) on a step whose old log-probs came from the current
#: policy, so they are only drawn over off-policy steps (:func:`off_policy_rows`).
RATIO_PREFIXES: tuple[str, ...] = (
    layout.WSEQ_PREFIX,
    layout.LOG_WSEQ_PREFIX,
    layout.SSEQ_PREFIX,
    "clip_ratio/",
    "cispo_clip_ratio",
    "vespo/phi_seq",
)


#: A loss plugin's metric ``<loss name>/<what>`` whose ``<what>`` starts with one of these is an
#: importance-ratio metric too (``pg_noclip/ratio_mean``, ``gmpo/clip_ratio/high``): the naming
#: rule by which a plugin declares a metric off-policy-only (docs/plugins.md).
PLUGIN_RATIO_PARTS: tuple[str, ...] = ("ratio", "clip_ratio")


def is_ratio_metric(metric: str) -> bool:
    """Whether ``metric`` only moves on off-policy steps (see :data:`RATIO_PREFIXES` and
    :data:`PLUGIN_RATIO_PARTS`)."""
    head, _, rest = metric.partition("/")
    return metric.startswith(RATIO_PREFIXES) or bool(head and rest.startswith(PLUGIN_RATIO_PARTS))


def off_policy_rows(df: pd.DataFrame) -> tuple[np.ndarray, str]:
    """Which rows are steps whose old log-probs came from an earlier policy.

    The harness records ``off_policy`` per step at run time (TRL's own choice of old log-probs,
    observed). For runs recorded without that column the step is taken as off-policy unless its
    ``w_seq`` is exactly 1 for every completion (``w_seq/min == w_seq/max == 1``), which happens
    only when TRL reuses the current log-probs as the old ones.

    Args:
        df: frame from :func:`analysis.load.load`.

    Returns:
        ``(mask, how)``: bool array of shape ``(len(df),)``, and ``"recorded"``, ``"inferred"``,
        ``"mixed"`` (some runs each way) or ``"unknown"`` (no column to tell: every row True).
    """
    n = len(df)
    recorded = (
        df[layout.OFF_POLICY].to_numpy(dtype=np.float64)
        if layout.OFF_POLICY in df.columns
        else np.full(n, np.nan)
    )
    have = ~np.isnan(recorded)
    mask = recorded > 0.5
    how = "recorded" if have.all() and n else ""
    if not have.all():
        if "w_seq/min" in df.columns and "w_seq/max" in df.columns:
            lo = df["w_seq/min"].to_numpy(dtype=np.float64)
            hi = df["w_seq/max"].to_numpy(dtype=np.float64)
            inferred = ~((lo == 1.0) & (hi == 1.0))
            known = ~np.isnan(lo)
            mask = np.where(have, mask, np.where(known, inferred, True))
            how = "mixed" if have.any() else "inferred"
        else:
            mask = np.where(have, mask, True)
            how = "mixed" if have.any() else "unknown"
    return mask, how
