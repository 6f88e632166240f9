"""Pure pieces of the report pinned by hand: smoothing rule, bands over smoothed runs, off-policy
rows, robust limits, performance profiles, labels, timing like with like, baselines per panel."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis import aggregate, labels, limits, offpolicy, scores, smoothing, stats, timing
from harness import layout


def _frame(values: dict[str, list[float]], **extra) -> pd.DataFrame:
    """Runs as columns of a long frame: ``{run_id: [y at step 1, 2, ...]}``."""
    parts = []
    for rid, ys in values.items():
        part = pd.DataFrame({layout.RUN_ID: rid, layout.STEP: np.arange(1, len(ys) + 1), "reward": ys})
        for k, v in extra.items():
            part[k] = v[rid] if isinstance(v, dict) else v
        parts.append(part)
    df = pd.concat(parts, ignore_index=True)
    df[layout.RUN_ID] = df[layout.RUN_ID].astype("category")
    return df


def test_auto_window_is_a_tenth_of_the_points():
    assert [smoothing.auto_window(n) for n in (1, 9, 10, 11, 225, 1000)] == [1, 1, 1, 2, 23, 100]


def test_smooth_runs_never_reaches_into_the_previous_run():
    y = np.array([1.0, 2.0, 3.0, 10.0, 20.0, 30.0, 40.0])
    out = smoothing.smooth_runs(y, np.array([0, 3]), window=2)
    assert np.allclose(out, [1.0, 1.5, 2.5, 10.0, 15.0, 25.0, 35.0])
    ema = smoothing.smooth_runs(y, np.array([0, 3]), ema=0.5)
    assert np.allclose(ema, [1.0, 1.5, 2.25, 10.0, 15.0, 22.5, 31.25])


def test_band_is_over_seeds_of_the_smoothed_runs():
    # two runs, window 2: smoothed a = [0, 1, 3], b = [2, 3, 5]
    df = _frame({"a": [0.0, 2.0, 4.0], "b": [2.0, 4.0, 6.0]}, loss_type="grpo")
    c = aggregate.curves(df, "reward", by=["loss_type"], smoothing={"window": 2})
    assert list(c.mean["mean"]) == [1.0, 2.0, 4.0]
    half = 12.706204736174707 * math.sqrt(2.0) / math.sqrt(2)  # t_{0.975,1} * std / sqrt(n), std = sqrt(2)
    assert np.allclose(c.mean["hi"] - c.mean["mean"], half)
    assert "2 run(s) per curve (t = 12.71 for 2 runs" in c.caption


def test_auto_smoothing_is_stated_in_the_caption():
    df = _frame({"a": list(np.linspace(0, 1, 40)), "b": list(np.linspace(0, 1, 40))}, loss_type="grpo")
    c = aggregate.curves(df, "reward", by=["loss_type"], smoothing="auto")
    assert list(c.smoothing["window"]) == [4, 4] and c.points == 40
    assert "w = ⌈n/10⌉ of its own n logged points (w = 4 for n = 40)" in c.caption
    # the last point of the smoothed curve is the mean of the last 10% of the run: the final score
    assert c.mean["mean"].iloc[-1] == pytest.approx(np.mean(np.linspace(0, 1, 40)[-4:]))


def test_median_center_for_ratios():
    df = _frame({"a": [1.0, 1.0], "b": [2.0, 2.0], "c": [10.0, 10.0]}, loss_type="x")
    c = aggregate.curves(df, "reward", by=["loss_type"], center="median")
    assert list(c.mean["mean"]) == [2.0, 2.0] and c.mean["lo"].isna().all()


def test_off_policy_rows_recorded_inferred_mixed():
    recorded = _frame({"a": [0.1, 0.2]}, **{layout.OFF_POLICY: [0.0, 1.0]})
    assert list(offpolicy.off_policy_rows(recorded)[0]) == [False, True]
    assert offpolicy.off_policy_rows(recorded)[1] == "recorded"
    old = _frame({"a": [0.1, 0.2]}, **{"w_seq/min": [1.0, 0.9], "w_seq/max": [1.0, 1.1]})
    assert list(offpolicy.off_policy_rows(old)[0]) == [False, True]
    assert offpolicy.off_policy_rows(old)[1] == "inferred"
    both = pd.concat([recorded, old], ignore_index=True)
    mask, how = offpolicy.off_policy_rows(both.assign(**{"w_seq/min": 1.0, "w_seq/max": 1.0}))
    assert how == "mixed" and list(mask[:2]) == [False, True]
    assert offpolicy.off_policy_rows(_frame({"a": [0.1]}))[1] == "unknown"


def test_robust_limits_ignore_one_outlier_and_clamp_to_the_metric_range():
    v = np.r_[np.linspace(0.2, 0.4, 1000), 50.0]
    lo, hi = limits.robust_limits(v)
    assert 0.18 < lo < 0.2 and 0.4 < hi < 0.42
    assert limits.robust_limits(np.array([np.nan])) is None
    lo, hi = limits.robust_limits(np.array([1.0, 1.0]))
    assert lo < 1.0 < hi
    assert limits.clamp_limits((-0.5, 1.5), "eval/accuracy", np.array([0.2, 0.8])) == (-0.06, 1.06)
    assert limits.clamp_limits((-0.5, 1.5), "loss", np.array([-0.2, 0.8])) == (-0.5, 1.5)


def test_performance_profile_by_hand():
    scores = np.array([[0.1], [0.5], [np.nan], [0.9]])
    got = stats.performance_profile(scores, np.array([0.0, 0.1, 0.5, 0.95]))
    assert np.allclose(got, [1.0, 2 / 3, 1 / 3, 0.0])


def test_labels_named_variants_and_order():
    runs = pd.DataFrame(
        {
            "trainer.loss_type": ["grpo", "dapo", "grpo", "luspo"],
            "trainer.importance_sampling_level": [None, None, "sequence", "sequence"],
            "trainer.epsilon": [None, None, 3e-4, 3e-4],
        }
    )
    lab, added = labels.label_runs(
        runs, ["trainer.loss_type"], ["trainer.epsilon", "trainer.importance_sampling_level"]
    )
    assert list(lab) == ["grpo", "dapo", "gspo", "luspo"]  # only the clashing grpo runs get told apart
    assert added == ["trainer.importance_sampling_level"]
    mu = pd.DataFrame(
        {"trainer.num_iterations": [10, 2, 4], "trainer.gradient_accumulation_steps": [None, None, 4]}
    )
    lab, _ = labels.label_runs(mu, ["trainer.gradient_accumulation_steps", "trainer.num_iterations"])
    assert list(lab.categories) == ["μ=2", "μ=10", "GA=4, μ=4"]
    eps = pd.DataFrame({"trainer.epsilon": [0.2, 0.2], "trainer.epsilon_high": [0.28, 0.2]})
    assert list(labels.label_runs(eps, list(eps.columns))[0].categories) == ["ε 0.2/0.2", "ε 0.2/0.28"]
    sync = pd.DataFrame(
        {
            "trainer.sync_ref_model": [False, True],
            "trainer.ref_model_sync_steps": [None, 50],
            "harness.ref_model_sync_every": [None, "epoch"],
        }
    )
    assert list(labels.label_runs(sync, list(sync.columns))[0]) == ["no sync", "sync every 50 (epoch)"]


def test_timing_compares_runs_executed_alike():
    df = _frame(
        {"a": [0.1] * 4, "b": [0.1] * 4, "c": [0.1] * 4},
        loss_type={"a": "grpo", "b": "dapo", "c": "grpo"},
        at_once={"a": "1", "b": "1", "c": "2"},
        **{layout.STEP_WALL_S: {"a": 1.0, "b": 0.5, "c": 2.0}},
    )
    t = timing.timing_table(df, by=["loss_type", "at_once"], baseline="grpo", same=["at_once"])
    t = t.frame.set_index(["loss_type", "at_once"])
    assert t.loc[("grpo", "1"), "s_per_step"] == 1.0 and t.loc[("grpo", "2"), "s_per_step"] == 2.0
    assert t.loc[("dapo", "1"), "speedup"] == 2.0  # against grpo run alone, not against the shared run
    assert t.loc[("grpo", "2"), "speedup"] == 1.0
    # a variant that ran alone where the baseline never did has no speedup: no like to compare with
    alone = df[df[layout.RUN_ID] != "a"].copy()
    alone[layout.RUN_ID] = alone[layout.RUN_ID].cat.remove_unused_categories()
    t = timing.timing_table(alone, by=["loss_type", "at_once"], baseline="grpo", same=["at_once"])
    assert np.isnan(t.frame.set_index(["loss_type", "at_once"]).loc[("dapo", "1"), "speedup"])


def test_probability_of_improvement_within_each_panel():
    rows = {}
    for mu, base, better in ((1, 0.5, 0.5), (2, 0.2, 0.8)):
        for s in range(3):
            rows[f"b{mu}{s}"] = ("base", mu, [base + 0.01 * s])
            rows[f"v{mu}{s}"] = ("var", mu, [better + 0.01 * s])
    df = _frame(
        {k: v[2] for k, v in rows.items()},
        hue={k: v[0] for k, v in rows.items()},
        mu={k: v[1] for k, v in rows.items()},
    )
    t = scores.final_performance_table(df, "reward", by=["hue", "mu"], baseline="base", reps=200)
    t = t.frame.set_index(["hue", "mu"])
    assert t.loc[("var", "1"), "p_improve"] == pytest.approx(0.5)  # identical scores in panel mu=1
    assert t.loc[("var", "2"), "p_improve"] == 1.0


@pytest.mark.parametrize("smoothing", [None, {"window": 3}, {"ema": 0.4}])
def test_complete_grid_fast_path_equals_the_general_path(smoothing):
    rng = np.random.default_rng(0)
    df = _frame(
        {r: list(rng.random(20)) for r in ("a", "b", "c", "d")},
        loss_type={"a": "x", "b": "x", "c": "y", "d": "y"},
    )
    ix = aggregate.frame_index(df, ["loss_type"], "step")
    assert ix.complete
    fast = aggregate.curves(df, "reward", by=["loss_type"], smoothing=smoothing, index=ix).mean
    # one missing row makes the grid incomplete: the general path, same numbers elsewhere
    holes = df.copy()
    holes.loc[5, "reward"] = np.nan
    slow = aggregate.curves(holes, "reward", by=["loss_type"], smoothing=smoothing).mean
    keep = (slow["loss_type"] == "y").to_numpy()  # group y has no hole
    assert np.allclose(fast[keep][["mean", "lo", "hi"]], slow[keep][["mean", "lo", "hi"]])
    reordered = df.iloc[::-1].reset_index(drop=True)
    assert not aggregate.frame_index(reordered, ["loss_type"], "step").complete
    back = aggregate.curves(reordered, "reward", by=["loss_type"], smoothing=smoothing).mean
    assert np.allclose(fast[["mean", "lo", "hi"]], back[["mean", "lo", "hi"]], equal_nan=True)


def test_auto_window_is_each_runs_own():
    # 40 points and 10 points: windows 4 and 1; each curve's last point is that run's final score
    df = _frame(
        {"a": list(np.linspace(0, 1, 40)), "b": list(np.linspace(0, 1, 10))}, loss_type={"a": "x", "b": "y"}
    )
    c = aggregate.curves(df, "reward", by=["loss_type"], smoothing="auto")
    assert list(c.smoothing["window"]) == [4, 1]
    last = c.mean.groupby("loss_type", observed=True)["mean"].last()
    finals = scores.final_scores(df, "reward")
    assert last["x"] == pytest.approx(finals["a"]) and last["y"] == pytest.approx(finals["b"])
    assert "(w = 1-4 for n = 10-40)" in c.caption


def test_a_baseline_is_borrowed_across_panels_only_from_a_panel_of_its_own():
    def grid(base_panels):
        rows = {}
        for mu in (1, 2):
            for s in range(2):
                rows[f"v{mu}{s}"] = ("var", f"μ={mu}", 0.5 + 0.1 * s)
        for s in range(2):
            rows[f"b{s}"] = ("base", base_panels, 0.2 + 0.1 * s)
        return _frame(
            {k: [v[2]] for k, v in rows.items()},
            hue={k: v[0] for k, v in rows.items()},
            panel={k: v[1] for k, v in rows.items()},
            **{layout.STEP_WALL_S: {k: 1.0 if v[0] == "base" else 0.5 for k, v in rows.items()}},
        )

    # baseline only in panel μ=1, which it shares: panel μ=2 has no baseline, and borrows none
    shared = scores.final_performance_table(
        grid("μ=1"), "reward", by=["hue", "panel"], baseline="base", reps=100
    )
    shared = shared.frame.set_index(["hue", "panel"])
    assert shared.loc[("var", "μ=1"), "p_improve"] == 1.0 and np.isnan(
        shared.loc[("var", "μ=2"), "p_improve"]
    )
    costs = timing.timing_table(grid("μ=1"), by=["hue", "panel"], baseline="base").frame
    costs = costs.set_index(["hue", "panel"])
    assert costs.loc[("var", "μ=1"), "speedup"] == 2.0 and np.isnan(costs.loc[("var", "μ=2"), "speedup"])
    # baseline in a panel of its own ("no sync"): every panel is compared with it
    own = scores.final_performance_table(
        grid("no sync"), "reward", by=["hue", "panel"], baseline="base", reps=100
    ).frame
    assert (own.set_index(["hue", "panel"]).loc["var", "p_improve"] == 1.0).all()
