"""Dynamic sampling as numbers: which groups a generation batch keeps, which further prompts it
draws, and which rows it trains on. Pure functions over numpy arrays (the trainer,
:mod:`harness.train.trainer`, does the generating).

The rule is DAPO's (arXiv:2503.14476, §3.2, Eq. 11: keep a prompt only while
``0 < |{correct outputs}| < G``), generalised as verl's ``algorithm.filter_groups`` does it to
any metric: a group (one prompt's ``num_generations`` completions) is dropped when every value
of its metric is the same, and generation repeats until the batch holds as many kept groups as
it would without the filter, or ``max_gen_batches`` generation batches are spent. verl keeps a
group when ``np.std(values) > 0`` (or it has one completion); here the values are compared
exactly (``max == min``), which agrees with verl wherever ``np.std`` is exact and drops a group of
equal values that ``np.std`` rounds above 0 (``tests/test_dynamic_sampling.py`` checks both on the
same rewards).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Mixed into the generator seed of the further prompts, so that their stream is no other stream's.
PROMPT_STREAM = 0x5EED_D5


def kept_groups(values: np.ndarray, num_generations: int) -> np.ndarray:
    """Which groups to keep: those whose values are not all equal.

    Args:
        values: (N,) the metric of N completions, ``num_generations`` consecutive ones per prompt
            (TRL's order: each prompt repeated ``num_generations`` times); NaN = unscorable.
        num_generations: G, completions per prompt.

    Returns:
        (N / G,) bool: True where the group's non-NaN values are not all equal. A group whose
        values are all NaN, or one value and NaNs, is dropped (no advantage to learn from).

    Raises:
        ValueError: N is not a multiple of G.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size % num_generations:
        raise ValueError(f"{values.size} values do not split into groups of {num_generations}")
    groups = values.reshape(-1, num_generations)
    with np.errstate(invalid="ignore"):
        finite = ~np.isnan(groups)
        high = np.where(finite, groups, -np.inf).max(axis=1)
        low = np.where(finite, groups, np.inf).min(axis=1)
    return (finite.sum(axis=1) >= 2) & (high > low)


def further_prompts(
    seed: int, step: int, micro: int, round_: int, n_prompts: int, n_train: int
) -> np.ndarray:
    """Indices into the training split of the prompts of further generation batch ``round_`` (1 =
    the first beyond the sampler's own batch) of the generation at optimizer step ``step``,
    micro-batch ``micro`` of that step.

    A function of its arguments alone, so that every rank draws the same prompts and a resumed
    run the same as the uninterrupted one (no state to checkpoint). Drawn without replacement
    within a batch when the split is large enough, with replacement otherwise.

    Returns:
        (n_prompts,) int64 indices in ``[0, n_train)``.
    """
    rng = np.random.default_rng([PROMPT_STREAM, seed, step, micro, round_])
    return rng.choice(n_train, size=n_prompts, replace=n_prompts > n_train).astype(np.int64)


@dataclass(frozen=True)
class TrainedRows:
    """What a generation batch trains on (:func:`rows_to_train`).

    Attributes:
        rows: indices into the generated rows (all rounds, in order), groups whole and in order.
        groups_kept: groups that passed the filter (before any truncation).
        short: fewer groups passed than the batch holds without the filter.
        filled: rows of dropped groups added so that every rank's micro-batches have a row
            (only when fewer than one unit of kept rows exists; their advantage is 0).
    """

    rows: np.ndarray
    groups_kept: int
    short: bool
    filled: int


def rows_to_train(keep: np.ndarray, num_generations: int, target_rows: int, unit: int) -> TrainedRows:
    """The rows a generation batch trains on, given every generated group's verdict.

    Args:
        keep: (groups,) bool over every group generated this step, round after round.
        num_generations: G.
        target_rows: rows of the batch without the filter (TRL's generation batch, all ranks).
        unit: the row count must be a multiple of this (processes x ``steps_per_generation``: every
            rank's generation batch splits into equal micro-batches) and of G (TRL computes
            advantages over consecutive groups of G).

    Returns:
        The first ``target_rows`` kept rows; when fewer were kept, the most kept rows that make a
        multiple of ``lcm(G, unit)``, and when not even that many, the kept rows filled up to it
        with the first dropped groups.
    """
    rows_of = np.arange(keep.size * num_generations).reshape(-1, num_generations)
    kept_rows = rows_of[keep].ravel()
    if kept_rows.size >= target_rows:
        return TrainedRows(kept_rows[:target_rows], int(keep.sum()), False, 0)
    block = math.lcm(num_generations, unit)
    n = kept_rows.size // block * block
    if n > 0:
        return TrainedRows(kept_rows[:n], int(keep.sum()), True, 0)
    dropped_rows = rows_of[~keep].ravel()
    fill = dropped_rows[: block - kept_rows.size]
    return TrainedRows(np.concatenate([kept_rows, fill]), int(keep.sum()), True, int(fill.size))
