"""The report's bootstrap: resamples and their Monte Carlo error, the probability of improvement
on every replicate, the performance profile's band, and the power line under the final table."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from analysis_helpers import synthetic_grid
from matplotlib.collections import PolyCollection
from scipy import stats as st

from analysis import finals, report, scores, stats, tables
from analysis.load import load
from analysis.panels import Facets
from analysis.power import min_detectable_effect, pooled_sd
from harness import layout


def frame_of(scores: dict[tuple[str, str], list[float]]) -> pd.DataFrame:
    """One logged step per run: ``{(variant, task): [final score per run]}``."""
    rows = [
        {layout.RUN_ID: f"{v}-{t}-{k}", layout.STEP: 1, "reward": s, "loss_type": v, "task.name": t}
        for (v, t), values in scores.items()
        for k, s in enumerate(values)
    ]
    return pd.DataFrame(rows)


def fixed_matrix() -> pd.DataFrame:
    """Two variants x 4 tasks x 10 runs (80 runs: 50,000 resamples), scores ~ N(0.4 + 0.1 task, 0.3)."""
    rng = np.random.default_rng(0)
    return frame_of(
        {
            (v, f"task{t}"): list(np.clip(0.4 + shift + 0.1 * t + 0.3 * rng.standard_normal(10), -1, 2))
            for v, shift in (("grpo", 0.0), ("dapo", 0.05))
            for t in range(4)
        }
    )


def endpoint_spread(df: pd.DataFrame, reps: int | None) -> float:
    """The largest move of any interval endpoint of the final-performance table over seeds 0-4."""
    ends = []
    for seed in range(5):
        table = scores.final_performance_table(
            df, "reward", by="loss_type", baseline="grpo", seed=seed, reps=reps
        ).frame
        ends.append(table[[c for c in table.columns if c.endswith(("_lo", "_hi"))]].to_numpy(dtype=float))
    ends = np.array(ends)
    finite = np.isfinite(ends).all(axis=0)
    return float(np.max(np.ptp(ends, axis=0)[finite]))


@pytest.mark.slow
def test_report_interval_endpoints_move_less_than_0_005_across_bootstrap_seeds():
    df = fixed_matrix()
    table = scores.final_performance_table(df, "reward", by="loss_type", baseline="grpo")
    assert table.reps == 50_000 == scores.REPORT_REPS
    assert "50,000 resamples" in table.caption
    assert endpoint_spread(df, None) < 0.005
    assert endpoint_spread(df, 2000) > 0.005  # what 2,000 resamples did on the same matrix


def test_resamples_fall_with_the_runs_and_the_caption_says_so():
    assert scores.bootstrap_reps(80) == 50_000
    assert scores.bootstrap_reps(1000) == 4000
    assert scores.bootstrap_reps(100_000) == 2000
    rng = np.random.default_rng(1)
    df = frame_of({("grpo", "t"): list(rng.random(60)), ("dapo", "t"): list(rng.random(60))})
    table = scores.final_performance_table(df, "reward", by="loss_type", baseline="grpo")
    assert table.reps == 4_000_000 // 120
    caption = table.caption
    assert "33,333 resamples" in caption and "fewer than rliable's 50,000" in caption
    assert f"Monte Carlo error of the endpoints at most {table.mc_error:.2g}" in caption
    assert 0 < table.mc_error < 0.01


def test_monte_carlo_error_of_a_percentile_matches_its_asymptotic_value():
    # iid N(0, 1) "replicates": the SE of the 2.5% quantile of B draws is sqrt(p (1-p) / B) / phi(z_p)
    values = np.random.default_rng(3).standard_normal(50_000)
    expected = math.sqrt(0.025 * 0.975 / 50_000) / st.norm.pdf(st.norm.ppf(0.025))
    assert stats.percentile_mc_error(values) == pytest.approx(expected, rel=0.5)
    assert math.isnan(stats.percentile_mc_error(values[:5]))


def test_probability_of_improvement_on_every_replicate_counts_ties_as_half():
    x = np.array([[0.1, 0.5], [0.3, 0.5], [0.3, np.nan], [0.9, 0.2]])
    y = np.array([[0.3, 0.5], [0.1, 0.4], [0.3, 0.2]])
    cx = stats._draw_counts(x, np.random.default_rng(0), 300)
    cy = stats._draw_counts(y, np.random.default_rng(1), 300)
    fast = stats._poi_counts(cx, cy)
    slow = [
        stats.probability_of_improvement(stats._replicate(x, cx, k), stats._replicate(y, cy, k))
        for k in range(300)
    ]
    np.testing.assert_allclose(fast, slow, atol=1e-12)


# --- the performance profile's band --------------------------------------------------------------


def test_profile_band_is_the_percentile_interval_of_resampled_profiles():
    scores = np.array([[0.1, 0.7], [0.4, 0.2], [0.4, np.nan], [0.8, 0.5]])
    taus = np.linspace(0, 1, 21)
    profile, lo, hi = stats.performance_profile_ci(scores, taus, reps=400, seed=5)
    np.testing.assert_array_equal(profile, stats.performance_profile(scores, taus))
    counts = stats._draw_counts(scores, np.random.default_rng(5), 400)  # the same draws
    resampled = np.array(
        [stats.performance_profile(stats._replicate(scores, counts, k), taus) for k in range(400)]
    )
    np.testing.assert_allclose(lo, np.quantile(resampled, 0.025, axis=0), atol=1e-12)
    np.testing.assert_allclose(hi, np.quantile(resampled, 0.975, axis=0), atol=1e-12)
    assert np.all(lo <= profile + 1e-12) and np.all(profile <= hi + 1e-12)
    # by hand at tau = 0.45 (between 0.4 and 0.5): 3 of 7 scores are above; a resample can hold
    # anything from none to all of them, so the band is wide
    k = int(np.argmin(np.abs(taus - 0.45)))
    assert profile[k] == pytest.approx(3 / 7)
    one = stats.performance_profile_ci(np.array([0.3]), taus, reps=50)
    assert np.isnan(one[1]).all() and np.isnan(one[2]).all()


def test_profile_figure_draws_each_variant_s_band(tmp_path):
    scores = pd.DataFrame({"score": [0.1, 0.3, 0.5, 0.6, 0.7, 0.9, 0.2], "v": ["a"] * 3 + ["b"] * 3 + ["c"]})
    result = finals.profile_frame(scores, ["v"], reps=500)
    profile = result.frame
    assert {"lo", "hi"} <= set(profile.columns) and result.reps == 500
    assert profile.loc[profile["v"] == "c", ["lo", "hi"]].isna().all(axis=None)  # one run: no band
    fig, axes = finals.profile_figure(profile, Facets(hue="v"), metric="reward")
    bands = [c for c in axes[0, 0].collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2  # a and b; c has one run
    colors = {line.get_color() for line in axes[0, 0].get_lines()}
    assert {tuple(np.round(b.get_facecolor()[0][:3], 3)) for b in bands} <= {
        tuple(np.round(np.array([int(c[i : i + 2], 16) for i in (1, 3, 5)]) / 255, 3)) for c in colors
    }


# --- the power line --------------------------------------------------------------------------------


def test_resolvable_differences_per_panel_by_hand():
    frame = pd.DataFrame(
        {
            "score": [1.0, 2.0, 3.0, 2.0, 4.0, 6.0, 0.0, 1.0, 5.0],
            "variant": ["a", "a", "a", "b", "b", "b", "a", "a", "b"],
            "panel": ["p"] * 6 + ["q"] * 3,
        }
    )
    resolvable = scores.resolvable_differences(frame, "variant", ["panel"])
    p, q = resolvable.frame.to_dict("records")
    # panel p: SDs 1 and 2 with 3 runs each: pooled sqrt((2 * 1 + 2 * 4) / 4)
    assert (p["n_min"], p["n_max"], p["variants"]) == (3, 3, 2)
    assert p["pooled_sd"] == pytest.approx(math.sqrt(2.5))
    assert p["resolvable"] == pytest.approx(min_detectable_effect(3, math.sqrt(2.5)))
    # panel q: b has one run, so nothing is resolvable; a alone gives the spread
    assert (q["n_min"], q["n_max"]) == (1, 2) and q["pooled_sd"] == pytest.approx(math.sqrt(0.5))
    assert math.isnan(q["resolvable"])
    assert (resolvable.power, resolvable.alpha) == (0.8, 0.05)
    overall = scores.resolvable_differences(frame.iloc[:6], "variant").frame
    assert list(overall.columns) == ["variants", "n_min", "n_max", "pooled_sd", "resolvable"]


@pytest.mark.slow
def test_every_report_has_the_power_line_under_the_final_table(tmp_path):
    g = tmp_path / "toy"
    synthetic_grid(g, variants=("grpo", "dapo"), seeds=(0, 1, 2), steps=20)
    out = report.make_report(g)
    index = (out / "index.md").read_text()
    final = index[index.index("## Final performance") : index.index("## Learning check")]
    (line,) = [x for x in final.splitlines() if x.startswith("With ")]
    assert line.startswith("With 3 seeds per variant, differences in final reward smaller than ")
    assert line.endswith("(80% power, two-sided 5% t test, pooled SD " + line.split("pooled SD ")[1])
    assert "over the variants' final scores" in line
    # s and X recomputed from the per-run final scores: X has 80% power at 3 seeds per variant
    finals_ = scores.final_scores(load(g), "reward")
    by_variant = [finals_[finals_.index.str.startswith(v)].to_numpy() for v in ("grpo-", "dapo-")]
    sd = pooled_sd(*by_variant)
    x = min_detectable_effect(3, sd)
    assert f"pooled SD {tables.fmt(sd)} over" in line and f"smaller than {tables.fmt(x)} cannot" in line
    crit, nc = st.t.ppf(0.975, 4), (x / sd) * math.sqrt(3 / 2)
    assert st.nct.sf(crit, 4, nc) + st.nct.cdf(-crit, 4, nc) == pytest.approx(0.8, abs=1e-3)
    assert line in (out / "final_performance.md").read_text()


def test_power_line_per_panel_and_for_single_seeds():
    frame = pd.DataFrame(
        [
            {"panel": "μ=1", "variants": 2, "n_min": 3, "n_max": 3, "pooled_sd": 1.0, "resolvable": 3.07},
            {"panel": "μ=2", "variants": 2, "n_min": 1, "n_max": 2, "pooled_sd": 0.5, "resolvable": math.nan},
            {"panel": "μ=4", "variants": 2, "n_min": 2, "n_max": 2, "pooled_sd": 0.0, "resolvable": 0.0},
        ]
    )
    facets = Facets(col="panel")
    resolvable = scores.Resolvable(frame, power=0.9, alpha=0.01)
    with pytest.raises(dataclasses.FrozenInstanceError):
        facets.col = "other"  # built once by compute_report, read by the drawing
    lines = report.power_lines(resolvable, None, facets, "reward")
    assert lines[0].endswith("(90% power, two-sided 1% t test, pooled SD 1 over the variants' final scores).")
    assert lines[2] == (
        "Panel μ=4: with 2 seeds per variant, final reward does not vary within any variant (pooled SD 0), so a "
        "t test gives no resolution limit."
    )
    resolvable = scores.Resolvable(frame)  # 80% power, 5% level
    assert report.power_lines(resolvable, None, facets, "reward")[:2] == [
        "Panel μ=1: with 3 seeds per variant, differences in final reward smaller than 3.07 cannot be resolved "
        "(80% power, two-sided 5% t test, pooled SD 1 over the variants' final scores).",
        "Panel μ=2: with 1-2 seeds per variant, no difference in final reward can be resolved: a variant with "
        "one run has no spread to test against (run at least 2 seeds).",
    ]
