"""Family-wise control over a grid's findings: each finding's one-sided p-value in the paper's
direction (the t statistic its interval uses), Holm's step-down adjustment over the grid's
findings, and the Holm verdict beside the unadjusted one (analysis.power, analysis.findings)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from analysis import finding_dose, finding_measures
from analysis import findings as fm
from analysis.power import holm, one_sided_p, paired_interval, paired_p, slope_fit, welch_interval, welch_p
from harness import layout

# --- Holm's adjustment, by hand -----------------------------------------------------------------------


def test_holm_by_hand():
    # sorted: 0.005 x 4 = 0.02; 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04 -> max(0.06, 0.04) = 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.02]) == pytest.approx([0.02])  # a family of one: unchanged
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([0.01, 0.01, 0.04]) == pytest.approx([0.03, 0.03, 0.04])  # ties
    out = holm([0.01, math.nan, 0.04])  # a finding without a p-value is no member of the family
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.04)
    assert holm([]).size == 0 and np.isnan(holm([math.nan])).all()


# --- each p-value comes from the t statistic its interval uses ------------------------------------------


def test_welch_p_is_the_one_sided_welch_t_test_and_agrees_with_the_interval():
    v, b = np.array([1.0, 2.0, 3.0, 4.5]), np.array([0.5, 1.0, 1.2, 2.0, 1.1])
    se = math.sqrt(v.var(ddof=1) / 4 + b.var(ddof=1) / 5)
    nu = se**4 / ((v.var(ddof=1) / 4) ** 2 / 3 + (b.var(ddof=1) / 5) ** 2 / 4)  # Welch-Satterthwaite
    t = (v.mean() - b.mean()) / se
    assert welch_p(v, b, "higher") == pytest.approx(st.t.sf(t, nu), rel=1e-10)
    assert welch_p(v, b, "lower") == pytest.approx(st.t.cdf(t, nu), rel=1e-10)
    assert math.isnan(welch_p([1.0], b, "higher")) and math.isnan(welch_p([1.0, 1.0], [2.0, 2.0], "lower"))
    rng = np.random.default_rng(3)
    for _ in range(200):  # reproduced (the 95% interval above 0) exactly when p < 0.025
        v, b = rng.normal(0.5, 1.0, 4), rng.normal(0.0, 1.0, 4)
        _, lo, _ = welch_interval(v, b)
        assert (lo > 0) == (welch_p(v, b, "higher") < 0.025)


def test_paired_and_slope_p_agree_with_their_intervals():
    rng = np.random.default_rng(4)
    for _ in range(200):
        d = rng.normal(0.3, 1.0, 5)
        _, lo, hi = paired_interval(d)
        assert (hi < 0) == (paired_p(d, "lower") < 0.025)
        assert paired_p(d, "higher") == pytest.approx(st.ttest_1samp(d, 0.0, alternative="greater").pvalue)
        x = np.repeat([0.2, 0.28, 0.4, 0.8], 2)
        y = 0.3 * x + rng.normal(0, 0.1, 8)
        fit = slope_fit(x, y)
        p = one_sided_p(fit.t, fit.dof, "higher")
        assert (fit.lo > 0) == (p < 0.025)
        assert p == pytest.approx(st.linregress(x, y, alternative="greater").pvalue, rel=1e-9)
    assert math.isnan(paired_p([0.2, 0.2, 0.2], "higher"))
    out = finding_dose.dose_verdict([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], "higher")  # on the line: no test
    assert out["verdict"] == "reproduced" and math.isnan(out["p_value"])


def test_each_verdict_carries_its_p_value():
    b, v = [1.0, 1.2, 0.9], [1.5, 1.7, 1.6]
    assert fm.verdict(b, v, "higher")["p_value"] == pytest.approx(welch_p(v, b, "higher"))
    paired = finding_measures.paired_verdict([0.1, 0.2, 0.1], [0.5, 0.4, 0.6], "higher")
    assert paired["p_value"] == pytest.approx(
        st.ttest_1samp([0.4, 0.2, 0.5], 0.0, alternative="greater").pvalue
    )
    assert math.isnan(fm.verdict([1.0], v, "higher")["p_value"])  # not enough runs: no test


# --- the Holm columns of the findings table ---------------------------------------------------------


def frame_of(arms: dict[str, list[float]]) -> pd.DataFrame:
    """One row per run (``run_id``, ``step``, ``m``): each run's single value of ``m``."""
    rows = [{layout.RUN_ID: rid, layout.STEP: 1, "m": value} for rid, value in arms.items()]
    return pd.DataFrame(rows)


def finding(fid: str, baseline: list[str], variant: list[str], direction: str = "higher") -> fm.Finding:
    return fm.Finding(
        id=fid,
        claim=f"claim {fid}",
        paper="p",
        metric="m",
        window=(0.0, 1.0),
        direction=direction,
        baseline={"k": 0},
        variant={"k": 1},
        arms={"baseline": tuple(baseline), "variant": tuple(variant)},
    )


def four_findings() -> tuple[pd.DataFrame, list[fm.Finding]]:
    """Four two-arm findings of 4 runs per arm with effects from clear to none, and one whose
    variant has a single run (no p-value)."""
    base = [0.0, 0.1, -0.1, 0.05]
    values, findings = {}, []
    for fid, shift in (("A", 1.0), ("B", 0.02), ("C", 0.12), ("D", 0.05)):
        b_ids, v_ids = [f"{fid}b{i}" for i in range(4)], [f"{fid}v{i}" for i in range(4)]
        values.update({r: x for r, x in zip(b_ids, base, strict=True)})
        values.update({r: base[i] + shift + 0.03 * i for i, r in enumerate(v_ids)})
        findings.append(finding(fid, b_ids, v_ids))
    values.update({"Eb0": 0.0, "Eb1": 0.1, "Ev0": 5.0})
    findings.append(finding("E", ["Eb0", "Eb1"], ["Ev0"]))
    return frame_of(values), findings


def test_the_holm_columns_adjust_the_grid_s_p_values_and_leave_the_verdicts_as_they_were():
    df, findings = four_findings()
    table = fm.findings_table(df, findings, finished=list(df[layout.RUN_ID]))
    t = table.frame.set_index("finding")
    p = t["p_value"]
    assert math.isnan(p["E"]) and t.loc["E", "verdict"].startswith("not enough runs")
    # by hand: the four p-values sorted, times 4, 3, 2, 1, made non-decreasing
    order = p.drop("E").sort_values()
    expected, running = {}, 0.0
    for i, (fid, value) in enumerate(order.items()):
        running = max(running, min(1.0, (4 - i) * value))
        expected[fid] = running
    assert t["p_holm"].drop("E").to_dict() == pytest.approx(expected)
    assert math.isnan(t.loc["E", "p_holm"]) and t.loc["E", "holm_verdict"] == ""
    for fid in "ABCD":  # reproduced under Holm: Holm p < 0.05 and the unadjusted verdict reproduced
        want = (
            "reproduced"
            if t.loc[fid, "p_holm"] < 0.05 and t.loc[fid, "verdict"] == "reproduced"
            else "not reproduced"
        )
        assert t.loc[fid, "holm_verdict"] == want
        alone = fm.findings_table(df, [f for f in findings if f.id == fid], finished=list(df[layout.RUN_ID]))
        assert (
            alone.frame.loc[0, "verdict"] == t.loc[fid, "verdict"]
        )  # the unadjusted verdict is the finding's own
        assert alone.frame.loc[0, "p_value"] == pytest.approx(p[fid])
    # C: p = 0.019, reproduced on its own; second smallest of four, so Holm p = 3 x 0.019 = 0.058: withdrawn
    assert t.loc["C", "verdict"] == "reproduced" and t.loc["C", "p_holm"] == pytest.approx(3 * p["C"])
    assert t.loc["C", "holm_verdict"] == "not reproduced" and t.loc["A", "holm_verdict"] == "reproduced"
    assert "Holm's (1979) step-down adjustment" in table.caption and "(here m = 4)" in table.caption
    shown = fm.display_table(table).frame.set_index("finding")
    assert list(shown.columns[-3:]) == ["p (one-sided)", "Holm p", "Holm verdict"]
    assert shown.loc["E", "Holm verdict"] == "–" and shown.loc["E", "Holm p"] == "–"


def test_holm_never_reproduces_what_the_unadjusted_verdict_does_not():
    # a family of one whose p is between 0.025 and 0.05: Holm's 5% passes, the two-sided interval does not
    rng = np.random.default_rng(0)
    for _ in range(500):
        b, v = rng.normal(0, 1, 4), rng.normal(1.2, 1, 4)
        p = welch_p(v, b, "higher")
        if 0.025 < p < 0.05:
            break
    values = {**{f"b{i}": x for i, x in enumerate(b)}, **{f"v{i}": x for i, x in enumerate(v)}}
    df = frame_of(values)
    f = finding("F", [f"b{i}" for i in range(4)], [f"v{i}" for i in range(4)])
    (r,) = fm.findings_table(df, [f], finished=list(values)).frame.to_dict("records")
    assert (
        0.025 < r["p_holm"] < 0.05
        and r["verdict"] == "not resolved"
        and r["holm_verdict"] == "not reproduced"
    )
