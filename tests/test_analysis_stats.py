"""analysis.stats and the curve aggregation, on hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis import stats
from analysis.aggregate import aggregate, curves, variant_labels
from analysis.smoothing import smooth
from harness import layout

# Student-t 0.975 quantile with 2 degrees of freedom. For df = 2 the quantile has the closed form
# (2p - 1) * sqrt(2 / (4p(1 - p))) = 0.95 * sqrt(2 / 0.0975) = 4.3026527297494638...; the often
# tabulated 4.302652729911275 is off in the tenth digit, so both are checked at their precision.
T_975_2 = 0.95 * math.sqrt(2 / 0.0975)
T_975_2_TABLE = 4.302652729911275


def test_t_quantile_constant():
    assert math.isclose(T_975_2, T_975_2_TABLE, rel_tol=1e-10)


def test_t_interval_three_seeds_by_hand():
    x = np.array([1.0, 2.0, 4.0])
    mean, lo, hi = stats.t_interval(x)
    # mean 7/3; sample variance ((4/3)^2 + (1/3)^2 + (5/3)^2) / 2 = 7/3; se = sqrt(7/3) / sqrt(3)
    half = T_975_2 * math.sqrt(7 / 3) / math.sqrt(3)
    assert mean == pytest.approx(7 / 3, abs=1e-12)
    assert lo == pytest.approx(7 / 3 - half, abs=1e-12)
    assert hi == pytest.approx(7 / 3 + half, abs=1e-12)


def test_t_interval_nan_and_single_sample():
    x = np.array([[1.0, np.nan, 3.0], [5.0, np.nan, np.nan], [np.nan, np.nan, np.nan]])
    mean, lo, hi = stats.t_interval(x, axis=1)
    assert mean[0] == 2.0 and mean[1] == 5.0 and np.isnan(mean[2])
    assert np.isnan(lo[1]) and np.isnan(hi[1])
    t1 = 12.706204736174698  # t_{0.975, 1}
    assert hi[0] == pytest.approx(2.0 + t1 * math.sqrt(2) / math.sqrt(2), abs=1e-9)


def test_t_interval_rejects_bad_confidence():
    with pytest.raises(ValueError):
        stats.t_interval(np.ones(3), confidence=1.5)


def test_iqm_by_hand():
    assert stats.iqm(np.array([1.0, 2.0, 4.0])) == pytest.approx(7 / 3)  # nothing trimmed below 4 runs
    # 8 values: int(0.25 * 8) = 2 trimmed each end, leaving 3, 4, 5, 6.
    assert stats.iqm(np.array([[1.0, 2.0], [3.0, 4.0], [100.0, 5.0], [6.0, 7.0]])) == pytest.approx(4.5)
    assert stats.iqm(np.array([[1.0, np.nan], [3.0, 2.0]])) == pytest.approx(2.0)
    assert math.isnan(stats.iqm(np.array([np.nan])))


def test_mean_score_averages_tasks():
    scores = np.array([[1.0, 10.0], [3.0, np.nan]])
    assert stats.mean_score(scores) == pytest.approx((2.0 + 10.0) / 2)


def test_probability_of_improvement_by_hand():
    assert stats.probability_of_improvement(np.array([1.0, 2.0, 3.0]), np.array([0.0, 0.0])) == 1.0
    assert stats.probability_of_improvement(np.array([1.0, 1.0]), np.array([1.0, 1.0])) == 0.5
    # 3 > 2 twice, 1 < 2 twice: U = 2 of 4 pairs.
    assert stats.probability_of_improvement(np.array([1.0, 3.0]), np.array([2.0, 2.0])) == 0.5
    # ties count one half: (1 + 0.5 + 0 + 0.5) / 4
    assert stats.probability_of_improvement(np.array([2.0, 1.0]), np.array([1.0, 2.0])) == 0.5
    x = np.array([[1.0, 0.0], [1.0, 0.0]])
    y = np.array([[0.0, 1.0], [0.0, 1.0]])
    assert stats.probability_of_improvement(x, y) == 0.5  # task 1: 1.0, task 2: 0.0
    with pytest.raises(ValueError):
        stats.probability_of_improvement(np.ones((2, 2)), np.ones((2, 3)))


def test_stratified_bootstrap_is_seeded_and_covers_estimate():
    rng = np.random.default_rng(1)
    scores = rng.normal(size=(5, 3))
    a = stats.stratified_bootstrap_ci(stats.iqm, scores, reps=300, seed=7)
    b = stats.stratified_bootstrap_ci(stats.iqm, scores, reps=300, seed=7)
    c = stats.stratified_bootstrap_ci(stats.iqm, scores, reps=300, seed=8)
    assert a == b
    assert a != c
    est, lo, hi = a
    assert est == pytest.approx(stats.iqm(scores))
    assert lo <= est <= hi


def test_stratified_bootstrap_never_draws_missing_runs():
    scores = np.array([[1.0, 5.0], [1.0, np.nan], [1.0, np.nan]])
    est, lo, hi = stats.stratified_bootstrap_ci(stats.mean_score, scores, reps=200, seed=0)
    assert (est, lo, hi) == (3.0, 3.0, 3.0)


def test_stratified_bootstrap_two_matrices():
    x = np.array([3.0, 4.0, 5.0])
    y = np.array([0.0, 1.0, 2.0])
    p, lo, hi = stats.stratified_bootstrap_ci(stats.probability_of_improvement, x, y, reps=200, seed=0)
    assert (p, lo, hi) == (1.0, 1.0, 1.0)


def test_bootstrap_mean_interval_seeded_and_covering():
    v = np.array([[1.0, 2.0, 4.0], [1.0, 2.0, np.nan], [3.0, np.nan, np.nan]])
    lo1, hi1 = stats.bootstrap_mean_interval(v, reps=500, seed=3)
    lo2, hi2 = stats.bootstrap_mean_interval(v, reps=500, seed=3)
    np.testing.assert_array_equal(lo1, lo2)
    np.testing.assert_array_equal(hi1, hi2)
    assert lo1[0] <= 7 / 3 <= hi1[0]
    assert 1.0 <= lo1[1] <= 1.5 <= hi1[1] <= 2.0
    assert np.isnan(lo1[2]) and np.isnan(hi1[2])


def _toy_frame():
    """3 seeds × 2 steps of one variant, plus a variant with a missing (None) loss type."""
    rows = []
    values = {0: [1.0, 10.0], 1: [2.0, 20.0], 2: [4.0, 40.0]}
    for seed, ys in values.items():
        for step, y in zip((1, 2), ys, strict=True):
            rows.append({"run_id": f"g{seed}", "step": step, "reward": y, "loss_type": "grpo"})
            rows.append({"run_id": f"n{seed}", "step": step, "reward": y + 1, "loss_type": None})
    df = pd.DataFrame(rows)
    df["run_id"] = df["run_id"].astype("category")
    return df


def test_aggregate_t_band_by_hand():
    agg = aggregate(_toy_frame(), "reward", by=["loss_type"])
    assert list(agg["loss_type"].cat.categories) == ["grpo", "(none)"]
    g1 = agg[(agg.loss_type == "grpo") & (agg.x == 1)].iloc[0]
    half = T_975_2 * math.sqrt(7 / 3) / math.sqrt(3)
    assert g1["mean"] == pytest.approx(7 / 3, abs=1e-12)
    assert g1["lo"] == pytest.approx(7 / 3 - half, abs=1e-12)
    assert g1["hi"] == pytest.approx(7 / 3 + half, abs=1e-12)
    assert g1["n"] == 3
    n2 = agg[(agg.loss_type == "(none)") & (agg.x == 2)].iloc[0]
    assert n2["mean"] == pytest.approx(70 / 3 + 1)
    assert "Student-t" in curves(_toy_frame(), "reward", by=["loss_type"]).caption


def test_aggregate_bootstrap_seeded_and_covering():
    df = _toy_frame()
    a = aggregate(df, "reward", by=["loss_type"], ci="bootstrap", n_boot=400, seed=5)
    b = aggregate(df, "reward", by=["loss_type"], ci="bootstrap", n_boot=400, seed=5)
    pd.testing.assert_frame_equal(a, b)
    assert ((a["lo"] <= a["mean"]) & (a["mean"] <= a["hi"])).all()
    assert "bootstrap" in curves(df, "reward", by=["loss_type"], ci="bootstrap", n_boot=400, seed=5).caption


def test_aggregate_interpolates_on_tokens():
    rows = []
    for seed, scale in enumerate((1.0, 2.0)):
        for step in (1, 2, 3):
            rows.append(
                {
                    "run_id": f"r{seed}",
                    "step": step,
                    "reward": float(step),
                    layout.TOKENS_GENERATED_TOTAL: 100.0 * step * scale,
                    "loss_type": "grpo",
                }
            )
    df = pd.DataFrame(rows)
    agg = aggregate(df, "reward", x="tokens", by=["loss_type"], grid_points=6)
    # only the range both runs reached (200 to 300 tokens), so every point is a mean over both
    assert agg["x"].tolist() == pytest.approx([200.0, 220.0, 240.0, 260.0, 280.0, 300.0])
    assert agg["n"].tolist() == [2] * 6
    at300 = agg.iloc[-1]
    # run 0 reaches 300 tokens at step 3; run 1 is at step 1.5 there.
    assert at300["mean"] == pytest.approx((3.0 + 1.5) / 2)
    assert agg.iloc[0]["mean"] == pytest.approx((2.0 + 1.0) / 2)


def test_smooth_by_hand():
    y = np.array([0.0, 1.0, 1.0])
    np.testing.assert_allclose(smooth(y, ema=0.5), [0.0, 0.5, 0.75])
    np.testing.assert_allclose(smooth(y, window=2), [0.0, 0.5, 1.0])
    np.testing.assert_allclose(smooth(np.stack([y, 2 * y], axis=1), ema=0.5)[:, 1], [0.0, 1.0, 1.5])
    with pytest.raises(ValueError):
        smooth(y, ema=0.5, window=2)


def test_variant_labels_order_and_missing():
    labels = variant_labels(pd.Series([1e-5, None, 1e-6, 1e-5]))
    assert list(labels.categories) == ["1e-06", "1e-05", "(none)"]
    assert list(labels) == ["1e-05", "(none)", "1e-06", "1e-05"]
