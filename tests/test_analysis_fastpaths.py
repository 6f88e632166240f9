"""The report's shortcuts give the numbers of the plain computation: the (runs, steps) matrix path
against the per-run path, a selection of rows shared by several metrics, shared bootstrap draws,
per-size t quantiles, rows grouped by variant without a sort, and joined group keys."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from analysis import aggregate, grouping, smoothing, stats
from harness import layout


def _long(n_runs: int, n_steps: int, seed: int = 0) -> pd.DataFrame:
    """``n_runs`` runs logged on every step, two variants, a metric with values on even steps only."""
    rng = np.random.default_rng(seed)
    rid = np.repeat([f"r{k:03d}" for k in range(n_runs)], n_steps)
    step = np.tile(np.arange(1, n_steps + 1), n_runs)
    df = pd.DataFrame(
        {
            layout.RUN_ID: pd.Categorical(rid),
            layout.STEP: step,
            "reward": rng.random(n_runs * n_steps),
            "clip_ratio/region_mean": np.where(step % 2 == 0, rng.random(n_runs * n_steps), np.nan),
            "loss_type": np.repeat(np.where(np.arange(n_runs) % 2 == 0, "grpo", "dapo"), n_steps),
        }
    )
    return df


def _by_hand(df: pd.DataFrame, metric: str, window: int, rows: np.ndarray | None = None) -> pd.DataFrame:
    """Each run's kept points smoothed by a trailing mean on its own, then mean and t band per step."""
    parts = []
    for _, part in df.groupby(layout.RUN_ID, observed=True):
        keep = part[metric].notna().to_numpy()
        if rows is not None:
            keep = keep & rows[part.index.to_numpy()]
        p = part[keep]
        y = p[metric].rolling(window, min_periods=1).mean()
        parts.append(pd.DataFrame({"loss_type": p["loss_type"], "x": p[layout.STEP].astype(float), "y": y}))
    long = pd.concat(parts)
    g = long.groupby(["loss_type", "x"])["y"].agg(["mean", "std", "count"]).reset_index()
    half = sps.t.ppf(0.975, g["count"] - 1) * g["std"] / np.sqrt(g["count"])
    g["lo"], g["hi"] = g["mean"] - half, g["mean"] + half
    return g


@pytest.mark.parametrize("n_runs", [6, 200])  # int8 and int16 run codes: code x steps passes 127
def test_matrix_and_row_paths_match_a_hand_computation(n_runs):
    df = _long(n_runs, 30)
    ix = aggregate.frame_index(df, ["loss_type"])
    assert ix.complete  # every run has every step: the (runs, steps) matrix path
    for metric in ("reward", "clip_ratio/region_mean"):  # matrix path, then the row-plan path
        c = aggregate.curves(df, metric, by=["loss_type"], smoothing={"window": 4}, index=ix)
        want = _by_hand(df, metric, 4)
        got = c.mean.assign(loss_type=c.mean["loss_type"].astype(str))
        merged = want.merge(got, on=["loss_type", "x"], suffixes=("_want", ""))
        assert len(merged) == len(want) == len(got)
        for col in ("mean", "lo", "hi"):
            assert np.allclose(merged[col], merged[f"{col}_want"]), (metric, col)


def test_metrics_on_the_same_rows_share_one_plan_and_stay_exact():
    df = _long(8, 40, seed=1)
    df["other"] = df["clip_ratio/region_mean"] * 3.0
    ix = aggregate.frame_index(df, ["loss_type"])
    off = (df[layout.STEP] % 4 != 1).to_numpy()
    a = aggregate.curves(df, "clip_ratio/region_mean", by=["loss_type"], smoothing="auto", rows=off, index=ix)
    b = aggregate.curves(df, "other", by=["loss_type"], smoothing="auto", rows=off, index=ix)
    assert len(ix._plans) == 1  # the second metric found the first one's selection
    assert np.allclose(b.mean["mean"], 3.0 * a.mean["mean"])
    n_points = int(
        np.median(df[df["clip_ratio/region_mean"].notna() & off].groupby(layout.RUN_ID, observed=True).size())
    )
    want = _by_hand(df, "clip_ratio/region_mean", smoothing.auto_window(n_points), rows=off)
    assert np.allclose(
        a.mean["mean"].to_numpy(), want.sort_values(["loss_type", "x"], key=_order)["mean"].to_numpy()
    )


def _order(s: pd.Series) -> pd.Series:
    return s.map({"dapo": 0, "grpo": 1}) if s.name == "loss_type" else s


def test_values_given_apart_from_the_frame_give_the_column_numbers():
    df = _long(4, 20)
    ix = aggregate.frame_index(df, ["loss_type"])
    a = aggregate.curves(df, "reward", by=["loss_type"], index=ix)
    b = aggregate.curves(df, "anything", by=["loss_type"], index=ix, values=df["reward"].to_numpy())
    assert np.array_equal(a.mean["mean"], b.mean["mean"])
    with pytest.raises(ValueError, match="values"):
        aggregate.curves(df, "anything", by=["loss_type"], index=ix, values=np.zeros(3))


def test_shared_bootstrap_draws_give_each_statistic_its_own_interval():
    rng = np.random.default_rng(3)
    x, y = rng.random((9, 2)), rng.random((7, 2))
    together = stats.stratified_bootstrap_cis([stats.mean_score, stats.iqm], x, reps=500, seed=4)
    apart = [stats.stratified_bootstrap_ci(f, x, reps=500, seed=4) for f in (stats.mean_score, stats.iqm)]
    assert together == apart
    poi = stats.stratified_bootstrap_cis([stats.probability_of_improvement], x, y, reps=300, seed=2)[0]
    assert poi == stats.stratified_bootstrap_ci(stats.probability_of_improvement, x, y, reps=300, seed=2)


def test_t_interval_per_sample_size_matches_scipy():
    mean = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    std = np.array([1.0, 2.0, 0.5, 1.0, 1.0])
    n = np.array([1, 2, 5, 5, 30])
    lo, hi = stats.t_interval_from_moments(mean, std, n)
    half = sps.t.ppf(0.975, n[1:] - 1) * std[1:] / np.sqrt(n[1:])
    assert np.isnan(lo[0]) and np.isnan(hi[0])
    assert np.allclose(lo[1:], mean[1:] - half) and np.allclose(hi[1:], mean[1:] + half)


@pytest.mark.parametrize("shuffled", [False, True])
def test_rows_by_group_holds_each_groups_rows(shuffled):
    rng = np.random.default_rng(5)
    for _ in range(100):
        lengths = rng.integers(0, 6, rng.integers(1, 9))
        codes = np.concatenate([np.full(k, c) for c, k in enumerate(lengths)]).astype(np.int8)
        if shuffled:
            codes = rng.permutation(codes)
        group_of_run = rng.integers(-1, 3, lengths.size)
        rows, bounds = grouping.rows_by_group(codes, group_of_run)
        for g in range(int(group_of_run.max()) + 1):
            want = np.flatnonzero(group_of_run[codes] == g) if codes.size else np.zeros(0, int)
            assert sorted(rows[bounds[g] : bounds[g + 1]]) == list(want)
        assert bounds[-1] == rows.size


def test_joined_keys():
    frame = pd.DataFrame({"a": ["x", "y"], "b": [1, 2.5]})
    assert list(grouping.joined_keys(frame, ["a"])) == ["x", "y"]
    assert list(grouping.joined_keys(frame, ["a", "b"])) == ["x\x1f1.0", "y\x1f2.5"]
    assert list(grouping.joined_keys(frame, [])) == ["", ""]
