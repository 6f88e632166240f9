"""Scores over several tasks (analysis.tasks, analysis.stats): normalisation, the aggregates over
tasks x runs, their stratified-bootstrap intervals and the profiles, against values computed by
hand and rliable's conventions (Agarwal et al. 2021; rliable itself does not import under pandas 3,
so its formulas are written out here)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import stats, tasks

# 4 runs x 3 tasks. Task means 0.3, 0.5, 0.85; the 12 scores sorted are
# 0, .2, .2, .4, .4, .5, .6, .6, .7, .8, 1, 1.2.
M = np.array(
    [
        [0.0, 0.5, 1.0],
        [0.2, 0.6, 1.2],
        [0.4, 0.7, 0.8],
        [0.6, 0.2, 0.4],
    ]
)


def test_normalisation_by_hand():
    scores = np.array([[0.5, 0.3], [0.9, 0.6], [np.nan, 0.2]])
    out = tasks.normalise(scores, low=[0.1, 0.2], high=[1.0, 0.7])
    expected = np.array([[0.4 / 0.9, 0.1 / 0.5], [0.8 / 0.9, 0.4 / 0.5], [np.nan, 0.0]])
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    assert tasks.normalise(np.array([0.05]), 0.1, 1.0)[0] == pytest.approx(-0.05 / 0.9)  # below the start
    with pytest.raises(ValueError, match="task column 1: high 0.2 is not above low 0.2"):
        tasks.normalise(scores, low=[0.1, 0.2], high=[1.0, 0.2])


def test_task_ranges_say_where_each_end_comes_from():
    r = tasks.task_ranges(
        ["a", "b", "c", "d"],
        {"a": [0.25, 0.25, np.nan], "d": [0.2, 0.3]},
        stated_low={"b": 0.1},
        stated_high={"d": 0.9},
    )
    assert (r["a"].low, r["a"].low_from, r["a"].measured, r["a"].spread) == (0.25, "start eval", 2, 0.0)
    assert (r["a"].high, r["a"].high_from) == (1.0, "bound")
    assert (r["b"].low, r["b"].low_from) == (0.1, "stated")
    assert (r["c"].low, r["c"].low_from) == (0.0, "default")
    assert r["d"].low == pytest.approx(0.25) and r["d"].spread == pytest.approx(0.1)
    assert (r["d"].high, r["d"].high_from) == (0.9, "stated")
    assert tasks.task_ranges(["x"], {}, bounded=False)["x"].high_from == "default"
    assert not tasks.TaskRange("x", 1.0, 1.0, "start eval", "bound").usable  # already perfect


def test_aggregates_by_hand_and_rliables_formulas():
    assert stats.mean_score(M) == pytest.approx((0.3 + 0.5 + 0.85) / 3)
    assert stats.median_score(M) == pytest.approx(0.5)
    assert stats.iqm(M) == pytest.approx((0.4 + 0.4 + 0.5 + 0.6 + 0.6 + 0.7) / 6)
    assert stats.optimality_gap(M) == pytest.approx(1 - 6.4 / 12)
    assert stats.optimality_gap(M, gamma=0.5) == pytest.approx(0.5 - np.minimum(M, 0.5).mean())
    # rliable's metrics written out: aggregate_mean, _median, _iqm (scipy's trim_mean), _optimality_gap
    from scipy.stats import trim_mean

    np.testing.assert_allclose(
        tasks.aggregate_metrics(M),
        [
            np.median(M.mean(axis=0)),
            trim_mean(M, 0.25, axis=None),
            M.mean(axis=0).mean(),
            1 - np.minimum(M, 1).mean(),
        ],
        rtol=1e-12,
    )
    # P(X > Y): Mann-Whitney U / nm per task (ties half), averaged over tasks; equal columns 0.5
    x = np.array([[1.0, 0.5], [3.0, 0.5]])
    y = np.array([[2.0, 0.5], [0.0, 0.5]])
    assert stats.probability_of_improvement(x, y) == pytest.approx((3 / 4 + 0.5) / 2)
    # with a missing run (NaN) per task, each task's statistics take its present runs
    ragged = np.array([[0.2, 0.8], [0.4, np.nan]])
    assert stats.mean_score(ragged) == pytest.approx((0.3 + 0.8) / 2)
    assert stats.median_score(ragged) == pytest.approx(0.55)
    assert stats.optimality_gap(ragged) == pytest.approx(1 - 0.55)


def test_interval_estimates_take_and_return_rliables_shapes():
    rng = np.random.default_rng(0)
    score_dict = {"grpo": rng.uniform(size=(5, 3)), "dapo": rng.uniform(size=(4, 3))}
    points, intervals = tasks.get_interval_estimates(score_dict, tasks.aggregate_metrics, reps=2000)
    for key, m in score_dict.items():
        assert points[key].shape == (4,) and intervals[key].shape == (2, 4)
        np.testing.assert_allclose(points[key], tasks.aggregate_metrics(m))
        assert np.all(intervals[key][0] <= points[key] + 1e-12) and np.all(
            points[key] <= intervals[key][1] + 1e-12
        )
    # the batched path equals calling the statistic on every replicate
    slow_points, slow = tasks.get_interval_estimates(
        score_dict, lambda s: tasks.aggregate_metrics(s), reps=200, seed=3
    )
    _, fast = tasks.get_interval_estimates(score_dict, tasks.aggregate_metrics, reps=200, seed=3)
    for key in score_dict:
        np.testing.assert_allclose(slow[key], fast[key], atol=1e-12)
    # a scalar statistic: k = 1; a pair of matrices: P(X > Y), resampled independently
    p, i = tasks.get_interval_estimates({"g": M}, stats.iqm, reps=300)
    assert p["g"].shape == (1,) and i["g"].shape == (2, 1)
    p, i = tasks.get_interval_estimates(
        {"dapo,grpo": (score_dict["dapo"], score_dict["grpo"])}, stats.probability_of_improvement, reps=300
    )
    assert p["dapo,grpo"][0] == pytest.approx(
        stats.probability_of_improvement(score_dict["dapo"], score_dict["grpo"])
    )
    assert 0.0 <= i["dapo,grpo"][0, 0] <= i["dapo,grpo"][1, 0] <= 1.0
    # one run per task: every replicate is the data itself, so the interval is the point (as rliable)
    p, i = tasks.get_interval_estimates({"one": M[:1]}, tasks.aggregate_metrics, reps=50)
    np.testing.assert_allclose(i["one"], np.vstack([p["one"], p["one"]]))


def test_the_bootstrap_is_stratified_by_task():
    # every task's runs agree: resampling runs within a task cannot move any task's mean, so the
    # mean's and median's intervals are single points; a bootstrap that pooled the tasks' runs
    # would draw 0.2s and 0.8s in other proportions and give a wide interval
    flat = np.array([[0.2, 0.8], [0.2, 0.8], [0.2, 0.8]])
    points, intervals = tasks.get_interval_estimates({"v": flat}, tasks.aggregate_metrics, reps=2000)
    median, _, mean, _ = range(4)
    assert intervals["v"][0, mean] == intervals["v"][1, mean] == pytest.approx(0.5)
    assert intervals["v"][0, median] == intervals["v"][1, median] == pytest.approx(0.5)


def test_performance_profiles_by_hand():
    m = np.array([[0.1, 0.6], [0.4, 0.9]])
    profiles, cis = tasks.create_performance_profile({"v": m}, [0.0, 0.5, 0.95])
    np.testing.assert_allclose(profiles["v"], [1.0, 0.5, 0.0])  # share of all 4 runs x tasks > tau
    assert cis["v"].shape == (2, 3)
    assert cis["v"][0, 0] == cis["v"][1, 0] == 1.0  # every resample is above 0
    # both runs of task 0 are below 0.5 and both of task 1 above: a resample within each task draws
    # two of each, so the profile at 0.5 is 0.5 in every resample (a bootstrap that pooled the
    # tasks' runs would draw other mixtures and give a band)
    assert cis["v"][0, 1] == cis["v"][1, 1] == 0.5


def _runs(matrices: dict[str, np.ndarray], task_names: list[str]) -> pd.DataFrame:
    rows = []
    for v, m in matrices.items():
        for j, t in enumerate(task_names):
            rows += [{"variant": v, "task": t, "score": s} for s in m[:, j] if np.isfinite(s)]
    return pd.DataFrame(rows)


def test_the_aggregate_over_one_task_is_that_tasks_statistics():
    rng = np.random.default_rng(1)
    col = {"grpo": rng.uniform(0.2, 0.9, size=(4, 1)), "dapo": rng.uniform(0.2, 0.9, size=(5, 1))}
    ranges = tasks.task_ranges(["only"], {"only": [0.2]})
    agg = tasks.aggregate_over_tasks(
        _runs(col, ["only"]), variant="variant", task="task", ranges=ranges, baseline="grpo", reps=4000
    )
    for v in ("grpo", "dapo"):
        a = agg.aggregates.set_index("variant").loc[v]
        t = agg.per_task.set_index("variant").loc[v]
        for name, col_name in (("mean", "normalised"), ("iqm", "iqm"), ("p_improve", "p_improve")):
            for suffix in ("", "_lo", "_hi"):
                assert a[name + suffix] == pytest.approx(t[col_name + suffix], nan_ok=True), (v, name, suffix)
        assert a["median"] == pytest.approx(a["mean"])  # the median of one task's mean is that mean
        z = (col[v] - 0.2) / 0.8
        assert (a["mean"], a["mean_lo"], a["mean_hi"]) == pytest.approx(
            stats.stratified_bootstrap_ci(stats.mean_score, z, reps=4000, seed=0)
        )
    assert np.isnan(agg.aggregates.set_index("variant").loc["grpo", "p_improve"])  # the baseline itself


def test_the_aggregate_over_tasks_by_hand_and_tasks_left_out():
    g = np.array([[0.5, 0.6], [0.7, 0.8]])  # raw scores, tasks a and b
    d = np.array([[0.9, 1.0], [0.7, 0.8]])
    raw = _runs({"grpo": g, "dapo": d}, ["a", "b"])
    raw = pd.concat([raw, pd.DataFrame([{"variant": "grpo", "task": "c", "score": 0.9}])])
    ranges = tasks.task_ranges(["a", "b", "c"], {"a": [0.5, 0.5], "b": [0.6], "c": [0.5]})
    agg = tasks.aggregate_over_tasks(
        raw, variant="variant", task="task", ranges=ranges, baseline="grpo", reps=2000
    )
    assert agg.tasks == ("a", "b") and agg.left_out == {"c": "no scored run of dapo"}
    # normalised: a on [0.5, 1], b on [0.6, 1]
    np.testing.assert_allclose(agg.matrices["grpo"], [[0.0, 0.0], [0.4, 0.5]])
    np.testing.assert_allclose(agg.matrices["dapo"], [[0.8, 1.0], [0.4, 0.5]])
    row = agg.aggregates.set_index("variant").loc["dapo"]
    assert row["mean"] == pytest.approx((0.6 + 0.75) / 2)
    assert row["median"] == pytest.approx((0.6 + 0.75) / 2)
    assert row["iqm"] == pytest.approx((0.5 + 0.8) / 2)  # 0.4, 0.5, 0.8, 1.0 trimmed by one each end
    assert row["optimality_gap"] == pytest.approx(1 - (0.8 + 1.0 + 0.4 + 0.5) / 4)
    # P(dapo > grpo): task a: 0.8 beats 0 and 0.4, 0.4 beats 0 and ties 0.4 -> 3.5/4; task b alike
    assert row["p_improve"] == pytest.approx(3.5 / 4)
    assert row["runs"] == 4 and row["tasks"] == 2
    per = agg.per_task.set_index(["task", "variant"])
    assert per.loc[("b", "dapo"), "low"] == 0.6 and per.loc[("b", "dapo"), "raw"] == pytest.approx(0.9)
    assert set(agg.profile["variant"]) == {"grpo", "dapo"} and agg.profile["runs"].eq(4).all()
    # a task whose start is already perfect cannot be normalised, and says so
    ranges = tasks.task_ranges(["a", "b"], {"a": [1.0], "b": [0.6]})
    agg = tasks.aggregate_over_tasks(raw, variant="variant", task="task", ranges=ranges)
    assert agg.tasks == ("b",) and "not above its low 1" in agg.left_out["a"]
