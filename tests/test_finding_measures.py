"""Findings that measure something other than a window mean (analysis.finding_measures): the steps
or tokens until a target (to_target, with censored runs) and each run's end against its own start
(from_start, paired); their power, their rows in the findings tables, and their checks at load."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from analysis_helpers import md_rows, write_measures_grid
from scipy import stats as st

from analysis import finding_measures as fmx
from analysis import findings as fm
from analysis import report
from analysis.power import (
    one_sample_t_power,
    paired_interval,
    seeds_for_paired_power,
    seeds_for_power,
    welch_interval,
)
from harness import cli, layout

ACC = layout.EVAL_ACCURACY
TOTAL = layout.TOKENS_GENERATED_TOTAL


# --- the paired t test -------------------------------------------------------------------------------


def one_sample_power_by_hand(d: float, n: int) -> float:
    """Two-sided 5% one-sample t test power at d_z = d over n differences (noncentral t, n - 1 dof)."""
    crit = st.t.ppf(0.975, n - 1)
    nc = d * math.sqrt(n)
    return 1 - st.nct.cdf(crit, n - 1, nc) + st.nct.cdf(-crit, n - 1, nc)


def test_paired_interval_is_scipy_s_one_sample_t_interval():
    d = np.array([0.1, 0.2, 0.05, 0.3])
    mean, lo, hi = paired_interval(d)
    ci = st.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert mean == pytest.approx(0.1625)
    assert (lo, hi) == pytest.approx((ci.low, ci.high), abs=1e-12)
    half = st.t.ppf(0.975, 3) * d.std(ddof=1) / 2  # by hand: t_{0.975, 3} s / sqrt(4)
    assert (lo, hi) == pytest.approx((0.1625 - half, 0.1625 + half), rel=1e-12)
    assert paired_interval([0.2, 0.2, 0.2]) == (pytest.approx(0.2),) * 3  # no spread: the mean itself
    m, lo, hi = paired_interval([0.3, np.nan])
    assert m == 0.3 and math.isnan(lo) and math.isnan(hi)


def test_paired_power_and_seeds_are_the_one_sample_t_test_s():
    assert one_sample_t_power(0.5, 34) == pytest.approx(one_sample_power_by_hand(0.5, 34), abs=1e-12)
    assert seeds_for_paired_power(0.5, 1.0) == 34  # G*Power, difference from constant: d_z 0.5 -> 34
    n = int(seeds_for_paired_power(0.3, 0.25))  # d_z = 1.2
    assert one_sample_power_by_hand(1.2, n) >= 0.8 > one_sample_power_by_hand(1.2, n - 1)
    assert seeds_for_paired_power(-0.3, 0.25) == n
    assert seeds_for_power(0.5, 1.0) == 64  # the two-sample function is unchanged
    assert math.isnan(seeds_for_paired_power(0.0, 1.0)) and math.isnan(seeds_for_paired_power(1.0, 0.0))


def test_paired_verdict_by_hand():
    start = np.array([0.2, 0.3, 0.25, 0.1])
    d = np.array([0.1, 0.2, 0.05, 0.3])
    out = fmx.paired_verdict(start, start + d, "higher")
    ci = st.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert out["effect"] == pytest.approx(0.1625)
    assert (out["effect_lo"], out["effect_hi"]) == pytest.approx((ci.low, ci.high))
    assert out["verdict"] == "not resolved"  # lo < 0 at 4 runs
    assert out["pooled_sd"] == pytest.approx(d.std(ddof=1))
    assert out["seeds_80"] == seeds_for_paired_power(0.1625, d.std(ddof=1))
    assert (out["p_improve"], out["p_improve_lo"], out["p_improve_hi"]) == (1.0, 1.0, 1.0)
    assert (out["baseline_mean"], out["variant_mean"]) == pytest.approx((0.2125, 0.375))
    assert out["baseline_n"] == out["variant_n"] == 4
    # a tie is not above: differences 0.1, -0.05, 0, 0.2 -> P = 2 of 4
    mixed = fmx.paired_verdict(start, start + [0.1, -0.05, 0.0, 0.2], "higher")
    assert mixed["p_improve"] == 0.5
    assert 0.0 <= mixed["p_improve_lo"] <= 0.5 <= mixed["p_improve_hi"] <= 1.0
    up = fmx.paired_verdict(start, start + [0.31, 0.3, 0.29, 0.3], "higher")
    assert up["verdict"] == "reproduced" and math.isnan(up["seeds_80"])
    assert fmx.paired_verdict(start, start + [0.31, 0.3, 0.29, 0.3], "lower")["verdict"] == "opposite"
    few = fmx.paired_verdict([0.1, np.nan], [0.3, 0.4], "higher")
    assert few["verdict"] == "not enough runs (1 with a start and an end; 2 needed)"
    assert few["effect"] == pytest.approx(0.2) and math.isnan(few["effect_lo"])
    with pytest.raises(ValueError, match="differ in length"):
        fmx.paired_verdict([0.1], [0.1, 0.2], "higher")


# --- to_target: the first crossing -------------------------------------------------------------------


def eval_frame(curves: dict[str, list[float]], *, steps: int = 20, every: int = 5, per_step=None):
    """One run per entry, ``steps`` logged rows, the metric ``ACC`` (curve values) on every
    ``every``-th step and NaN between; ``tokens/generated_total`` = per_step[run] x step."""
    rows = []
    for rid, curve in curves.items():
        n = steps if isinstance(steps, int) else steps[rid]
        for step in range(1, n + 1):
            k = step // every - 1
            value = curve[k] if step % every == 0 and k < len(curve) else np.nan
            rows.append(
                {
                    layout.RUN_ID: rid,
                    layout.STEP: step,
                    ACC: value,
                    TOTAL: (per_step or {}).get(rid, 100) * step,
                }
            )
    return pd.DataFrame(rows).sample(frac=1.0, random_state=0)  # rows in no particular order


def test_crossing_stats_first_logged_row_at_or_above_the_target():
    df = eval_frame(
        {
            "a": [0.2, 0.5, 0.7, 0.8],  # first >= 0.6 at step 15
            "b": [0.1, 0.6, 0.4, 0.9],  # equal to the target counts: step 10, although it falls back
            "c": [0.1, 0.2, 0.3, 0.4],  # never: censored at its last logged step, 22 (no eval there)
            "d": [],  # never finite: no value
        },
        steps={"a": 20, "b": 20, "c": 22, "d": 20},
        per_step={"a": 100, "b": 150, "c": 50},
    )
    cs = fmx.crossing_stats(df, ACC, 0.6)
    assert cs["value"].to_dict() == {"a": 15.0, "b": 10.0, "c": 22.0, "d": pytest.approx(np.nan, nan_ok=True)}
    assert cs["censored"].tolist() == [False, False, True, False]
    assert cs["at_step"].tolist() == [15, 10, 22, 20]
    assert cs["rows"].tolist() == [20, 20, 22, 20] and cs["finite"].tolist() == [4, 4, 4, 0]
    tokens = fmx.crossing_stats(df, ACC, 0.6, x="tokens")
    assert tokens["value"].iloc[:3].tolist() == [1500.0, 1500.0, 1100.0]  # tokens at those steps
    df.loc[(df[layout.RUN_ID] == "a") & (df[layout.STEP] == 15), TOTAL] = np.nan
    assert math.isnan(fmx.crossing_stats(df, ACC, 0.6, x="tokens").at["a", "value"])
    assert fmx.crossing_stats(df, ACC, math.nan)["censored"].tolist() == [True, True, True, False]
    with pytest.raises(ValueError, match="x must be one of"):
        fmx.crossing_stats(df, ACC, 0.6, x="time")
    with pytest.raises(ValueError, match="target must be 'baseline' or a number"):
        fmx.to_target_values(df, ACC, None, "step", {"baseline": ["a"], "variant": ["b"]})


BASE_CURVES = {"b0": [0.3, 0.5, 0.6, 0.6], "b1": [0.4, 0.6, 0.7, 0.7], "b2": [0.5, 0.7, 0.8, 0.8]}
VAR_CURVES = {"v0": [0.7, 0.8, 0.8, 0.9], "v1": [0.6, 0.75, 0.8, 0.8], "v2": [0.5, 0.6, 0.72, 0.9]}
ARMS = {"baseline": ("b0", "b1", "b2"), "variant": ("v0", "v1", "v2")}


def target_finding(**change) -> fm.Finding:
    base = {
        "id": "T",
        "claim": "the variant reaches the baseline's final accuracy sooner",
        "paper": "p",
        "metric": ACC,
        "window": (0.75, 1.0),  # rows 16-20 of 20: the eval at step 20, each run's final level
        "direction": "lower",
        "baseline": {"trainer.loss_type": "grpo"},
        "variant": {"trainer.loss_type": "dapo"},
        "arms": ARMS,
        "measure": "to_target",
        "target": "baseline",
        "x": "step",
    }
    return fm.Finding(**{**base, **change})


def test_to_target_against_the_baseline_s_final_level_by_hand():
    df = eval_frame({**BASE_CURVES, **VAR_CURVES})
    table = fm.findings_table(df, [target_finding()], finished=[*ARMS["baseline"], *ARMS["variant"]])
    (row,) = table.frame.to_dict("records")
    assert row["target"] == pytest.approx(0.7) and row["target_runs"] == 3  # mean of 0.6, 0.7, 0.8
    # baseline: b0 never reaches 0.7 (censored at 20), b1 at 15, b2 at 10; variant 5, 10, 15
    diff, lo, hi = welch_interval(np.array([5.0, 10.0, 15.0]), np.array([20.0, 15.0, 10.0]))
    assert (row["baseline_mean"], row["variant_mean"], row["effect"]) == pytest.approx((15.0, 10.0, -5.0))
    assert (row["effect_lo"], row["effect_hi"]) == pytest.approx((lo, hi))
    assert row["verdict"] == "not resolved" and row["seeds_80"] == seeds_for_power(5.0, 5.0)
    assert (row["censored_baseline"], row["censored_variant"], row["x"]) == (1, 0, "step")
    assert row["left_out"] == "" and row["measure"] == "to_target" and row["baseline"] == "loss_type=grpo"
    assert row["note"] == (
        "target not reached (censored at the last logged step): baseline `b0` (20); their true values are at "
        "least these, so their arm's mean understates its time, and the true effect (variant - baseline) is "
        "at most the one shown"
    )
    shown = fm.display_table(table).frame.iloc[0]
    assert shown["metric (window)"] == (
        "eval/accuracy: steps to reach 0.7 (the baseline's mean over 75-100% of steps, 3 run(s)); not reached "
        "(censored at the last step): baseline 1 of 3, variant 0 of 3"
    )
    assert shown["baseline mean (n)"] == "15 (3)" and shown["seeds for 80% power"] == "17"
    assert "To-target findings" in table.caption and "censored" in table.caption
    assert "From-start" not in table.caption
    assert fm.note_lines(table)[0].startswith("T: target not reached (censored at the last logged step)")


def test_to_target_in_tokens_makes_a_variant_that_generates_more_pay():
    per_step = {**dict.fromkeys(BASE_CURVES, 100), **dict.fromkeys(VAR_CURVES, 300)}
    df = eval_frame({**BASE_CURVES, **VAR_CURVES}, per_step=per_step)
    f = target_finding(x="tokens", direction="lower")
    (row,) = fm.findings_table(df, [f], finished=[*ARMS["baseline"], *ARMS["variant"]]).frame.to_dict(
        "records"
    )
    # baseline 100 x (20, 15, 10) tokens; variant 300 x (5, 10, 15): fewer steps, more tokens
    assert (row["baseline_mean"], row["variant_mean"]) == pytest.approx((1500.0, 3000.0))
    diff, lo, hi = welch_interval(np.array([1500.0, 3000.0, 4500.0]), np.array([2000.0, 1500.0, 1000.0]))
    assert (row["effect"], row["effect_lo"], row["effect_hi"]) == pytest.approx((diff, lo, hi))
    assert (
        "generated tokens (tokens/generated_total) to reach 0.7"
        in fm.display_table(
            fm.findings_table(df, [f], finished=[*ARMS["baseline"], *ARMS["variant"]])
        ).frame.iloc[0]["metric (window)"]
    )
    assert "censored at the last logged tokens/generated_total value): baseline `b0` (2,000)" in row["note"]


def test_a_stated_target_and_the_runs_it_cannot_use():
    curves = {**BASE_CURVES, **VAR_CURVES, "b3": []}
    df = eval_frame(curves)
    df = df[~((df[layout.RUN_ID] == "v2") & (df[layout.STEP] == 20))].copy()  # v2 never reaches 0.9
    f = target_finding(
        target=0.75, window=None, arms={"baseline": ("b0", "b1", "b2", "b3"), "variant": ARMS["variant"]}
    )
    (row,) = fm.findings_table(df, [f], finished=[*curves]).frame.to_dict("records")
    # b0, b1 never reach 0.75 (censored at 20), b2 at 15; v0 10, v1 10, v2 never (censored at its last, 19)
    assert row["target"] == 0.75 and row["target_runs"] == 0 and math.isnan(row["window_lo"])
    assert (row["baseline_n"], row["variant_n"]) == (3, 3)
    assert (row["baseline_mean"], row["variant_mean"]) == pytest.approx((55 / 3, 13.0))
    assert (row["censored_baseline"], row["censored_variant"]) == (2, 1)
    assert row["left_out"] == "baseline `b3` (no finite eval/accuracy at any of its 20 logged step(s))"
    assert "(censored runs in both arms: the effect's bias has no known sign)" in row["note"]
    assert fmx.metric_text(row).startswith("eval/accuracy: steps to reach 0.75 (stated); not reached")


def test_a_verdict_that_censored_runs_could_undo_says_it_leans_on_them():
    # the variant's runs stop at step 10 (their max_steps); one never reaches the target
    df = eval_frame(
        {
            "b0": [0.1, 0.2, 0.9],
            "b1": [0.1, 0.1, 0.2, 0.9],
            "b2": [0.1, 0.2, 0.5, 0.9],
            "v0": [0.9],
            "v1": [0.1, 0.2],
            "v2": [0.9],
        },
        steps={"b0": 20, "b1": 20, "b2": 20, "v0": 10, "v1": 10, "v2": 10},
    )
    f = target_finding(target=0.8, window=None)
    (row,) = fm.findings_table(df, [f], finished=["b0", "b1", "b2", "v0", "v1", "v2"]).frame.to_dict(
        "records"
    )
    # baseline 15, 20, 20; variant 5, 10 (censored), 5
    assert (row["baseline_mean"], row["variant_mean"]) == pytest.approx((55 / 3, 20 / 3))
    diff, lo, hi = welch_interval(np.array([5.0, 10.0, 5.0]), np.array([15.0, 20.0, 20.0]))
    assert hi < 0 and row["verdict"] == "reproduced"
    assert (
        "variant `v1` (10)" in row["note"]
        and "the true effect (variant - baseline) is at least" in row["note"]
    )
    assert "the verdict leans on them" in row["note"]


def test_no_target_when_no_baseline_run_has_a_window_mean():
    df = eval_frame({"b0": [], "b1": [], "v0": [0.5], "v1": [0.6]})
    f = target_finding(arms={"baseline": ("b0", "b1"), "variant": ("v0", "v1")})
    (row,) = fm.findings_table(df, [f], finished=["b0", "b1", "v0", "v1"]).frame.to_dict("records")
    assert math.isnan(row["target"]) and row["verdict"].startswith("not enough runs (baseline 0, variant 0")
    assert (
        "variant `v0`, `v1` (no target: no baseline run has a finite eval/accuracy in the window)"
        in row["left_out"]
    )


# --- from_start: paired by run ----------------------------------------------------------------------


def start_finding(metric: str = "eval/pass@16", **change) -> fm.Finding:
    base = {
        "id": "S",
        "claim": "training raises pass@16 above the starting policy's",
        "paper": "p",
        "metric": metric,
        "window": (0.75, 1.0),
        "direction": "higher",
        "variant": {"trainer.loss_type": "grpo"},
        "arms": {
            "baseline": ("r0", "r1", "r2", "r3", "r4", "r5"),
            "variant": ("r0", "r1", "r2", "r3", "r4", "r5"),
        },
        "measure": "from_start",
    }
    return fm.Finding(**{**base, **change})


@pytest.mark.parametrize("metric", [ACC, "eval/pass@1", "eval/pass@16"])
def test_from_start_pairs_each_run_s_end_with_its_own_start(metric):
    ends = {"r0": 0.5, "r1": 0.6, "r2": 0.45, "r3": 0.7, "r4": 0.9, "r5": 0.8}
    df = eval_frame({r: [0.0, 0.1, 0.2, v] for r, v in ends.items()}).rename(columns={ACC: metric})
    starts = {
        "r0": {metric: 0.4, "eval/other": 0.0},
        "r1": {metric: 0.4},
        "r2": {metric: 0.4},
        "r3": {metric: 0.4},
        # r4: no eval_start.json; r5: one without this metric
        "r5": {"eval/other": 0.3},
    }
    table = fm.findings_table(df, [start_finding(metric)], finished=list(ends), starts=starts)
    (row,) = table.frame.to_dict("records")
    d = np.array([0.1, 0.2, 0.05, 0.3])
    ci = st.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert (row["baseline_n"], row["variant_n"]) == (4, 4)
    assert (row["baseline_mean"], row["variant_mean"]) == pytest.approx((0.4, 0.5625))
    assert (row["effect"], row["effect_lo"], row["effect_hi"]) == pytest.approx((0.1625, ci.low, ci.high))
    assert row["p_improve"] == 1.0 and row["verdict"] == "not resolved"
    assert row["seeds_80"] == seeds_for_paired_power(0.1625, d.std(ddof=1))
    assert row["baseline"] == "start" and row["measure"] == "from_start"
    assert row["left_out"] == (
        "variant `r4` (no readable eval_start.json: its starting policy was not evaluated); "
        f"variant `r5` (its eval_start.json has no finite {metric} (it has eval/other))"
    )
    shown = fm.display_table(table).frame.iloc[0]
    assert (
        shown["metric (window)"]
        == f"{metric}: end (mean over 75-100% of steps) minus start (eval_start.json), per run"
    )
    assert shown["baseline mean (n)"] == "0.4 (4)" and shown["variant mean (n)"] == "0.562 (4)"
    compact = fm.compact_table(table).iloc[0]
    assert compact["verdict"] == f"not resolved ({int(row['seeds_80'])} runs, paired, for 80% power)"
    assert "From-start findings" in table.caption and "one-sample Student t" in table.caption
    assert "(4 runs in all)" in table.caption


def test_from_start_with_every_run_moved_alike_says_no_test_stands_behind_it():
    df = eval_frame({r: [0.5] for r in ("r0", "r1", "r2")})
    f = start_finding(
        ACC, window=(0.0, 1.0), arms={"baseline": ("r0", "r1", "r2"), "variant": ("r0", "r1", "r2")}
    )
    starts = {r: {ACC: 0.25} for r in ("r0", "r1", "r2")}
    table = fm.findings_table(df, [f], finished=["r0", "r1", "r2"], starts=starts)
    (row,) = table.frame.to_dict("records")
    assert row["effect"] == row["effect_lo"] == row["effect_hi"] == 0.25 and row["verdict"] == "reproduced"
    assert row["note"].startswith("every run's end minus start is the same (no run-to-run spread)")


# --- one table of every kind ------------------------------------------------------------------------


WINDOW_F = fm.Finding(
    id="W",
    claim="c",
    paper="p",
    metric=ACC,
    window=(0.75, 1.0),
    direction="higher",
    baseline={"trainer.loss_type": "grpo"},
    variant={"trainer.loss_type": "dapo"},
    arms=ARMS,
)


def test_a_window_finding_s_row_is_the_same_beside_the_new_kinds():
    df = eval_frame({**BASE_CURVES, **VAR_CURVES})
    finished = [*ARMS["baseline"], *ARMS["variant"]]
    alone = fm.findings_table(df, [WINDOW_F], finished=finished)
    assert "measure" not in alone.frame.columns and "To-target" not in alone.caption
    mixed = fm.findings_table(df, [WINDOW_F, target_finding()], finished=finished)
    assert list(alone.frame.columns)[-3:] == ["p_value", "p_holm", "holm_verdict"]
    assert list(mixed.frame.columns) == [
        *alone.frame.columns[:-3],
        "measure",
        "target",
        "target_runs",
        "x",
        "censored_baseline",
        "censored_variant",
        "p_value",
        "p_holm",
        "holm_verdict",
    ]
    # the finding's own numbers are the same; only Holm's adjustment depends on the family beside it
    own = [c for c in alone.frame.columns if c not in ("p_holm", "holm_verdict")]
    assert mixed.frame.iloc[0][own].to_dict() == alone.frame.iloc[0][own].to_dict()
    holm_cells = ["Holm p", "Holm verdict"]
    shown = [fm.display_table(t).frame.drop(columns=holm_cells).iloc[0].to_dict() for t in (mixed, alone)]
    assert shown[0] == shown[1]
    assert (
        fm.compact_table(mixed).drop(columns=holm_cells).iloc[0].to_dict()
        == fm.compact_table(alone).drop(columns=holm_cells).iloc[0].to_dict()
    )
    unadjusted = alone.caption.split(" The columns after the verdict")[0]
    assert mixed.caption.startswith(unadjusted) and "(here m = 2)" in mixed.caption


# --- the recorded findings and the command -----------------------------------------------------------


def test_the_command_and_the_report_s_table_read_both_kinds_from_a_results_folder(tmp_path, capsys):
    g = tmp_path / "g"
    write_measures_grid(g)
    table = report.findings_results(g)
    t, s = table.frame.to_dict("records")
    # target: mean of grpo's finals (0.6, 0.6, 0.55) = 0.5833; grpo 15, 20, never (20); dapo 10, 10, 15
    assert t["target"] == pytest.approx(1.75 / 3) and t["censored_baseline"] == 1
    assert (t["baseline_mean"], t["variant_mean"]) == pytest.approx((55 / 3, 35 / 3))
    # from_start: dapo's finals 0.7, 0.7, 0.75 against 0.2 each
    assert (s["effect"], s["baseline_mean"], s["variant_n"]) == pytest.approx((0.5 + 0.05 / 3, 0.2, 3))
    ci = st.ttest_1samp([0.5, 0.5, 0.55], 0.0).confidence_interval(0.95)
    assert (s["effect_lo"], s["effect_hi"]) == pytest.approx((ci.low, ci.high))
    assert s["verdict"] == "reproduced" and s["left_out"] == ""
    assert "(6 runs in all)" in table.caption
    assert cli.main(["findings", str(g), "--markdown"]) == 0
    out = capsys.readouterr().out
    rows = md_rows(out)
    assert rows[0][:6] == ["claim", "paper", "metric", "effect [95% CI]", "P(>) [CI]", "verdict"]
    assert rows[2][2].startswith(
        "eval/accuracy: steps to reach 0.583 (the baseline's mean over 75-100% of steps"
    )
    assert (
        rows[3][2] == "eval/accuracy: end (mean over 75-100% of steps) minus start (eval_start.json), per run"
    )
    assert rows[3][5] == "reproduced"
    assert "T: target not reached (censored at the last logged step): baseline `grpo-s2` (20)" in out


@pytest.mark.slow
def test_the_report_writes_both_kinds_in_its_findings_files(tmp_path):
    g = tmp_path / "g"
    write_measures_grid(g)
    out = report.make_report(g)
    index = (out / "index.md").read_text()
    rows = md_rows(index[index.index("## Findings") :])
    assert [r[0] for r in rows[2:4]] == ["T", "S"] and rows[3][8] == "reproduced"
    csv = pd.read_csv(out / "findings.csv")
    assert csv["measure"].tolist() == ["to_target", "from_start"] and csv.loc[0, "censored_baseline"] == 1
    assert "To-target findings" in (out / "findings.md").read_text()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"measure": "fastest"}, "measure"),
        ({"target": "0.5"}, "target"),
        ({"x": "time"}, "x"),
        ({"baseline": "start"}, "baseline"),
        ({"window": None, "target": "baseline"}, "window"),
    ],
)
def test_read_findings_refuses_a_hand_edited_measure(tmp_path, change, named):
    g = tmp_path / "g"
    arms = write_measures_grid(g)
    record = json.loads((g / layout.GRID_FILE).read_text())["findings"]["T"]
    with pytest.raises(ValueError) as e:
        fm.read_findings({"T": {**record, **change, "arms": arms}}, "g/grid.json")
    assert str(e.value) == f"g/grid.json: findings.T: {named} missing or malformed"


def test_read_findings_reads_both_kinds_and_a_from_start_s_one_arm(tmp_path):
    g = tmp_path / "g"
    write_measures_grid(g)
    t, s = fm.read_findings(json.loads((g / layout.GRID_FILE).read_text())["findings"], "g")
    assert (t.measure, t.target, t.x, t.window) == ("to_target", "baseline", "step", (0.75, 1.0))
    assert (s.measure, s.baseline, s.arms["baseline"]) == ("from_start", {}, s.arms["variant"])
    stated = {**json.loads((g / layout.GRID_FILE).read_text())["findings"]["T"], "target": 1, "window": None}
    (f,) = fm.read_findings({"T": stated}, "g")
    assert f.target == 1.0 and type(f.target) is float and f.window is None


def test_read_start_evals_keeps_the_finite_eval_numbers(tmp_path):
    (tmp_path / layout.START_EVAL_FILE).write_text(
        json.dumps(
            {
                "step": 0,
                ACC: 0.25,
                "eval/pass@16": 0.5,
                "eval/pass@1": float("nan"),
                "eval/x": True,
                "seconds": 2,
            }
        )
    )
    assert layout.read_start_evals(tmp_path) == {ACC: 0.25, "eval/pass@16": 0.5}
    assert layout.read_start_evals(tmp_path / "none") == {}
    (tmp_path / layout.START_EVAL_FILE).write_text("[1]")
    assert layout.read_start_evals(tmp_path) == {}


def test_the_grid_check_and_the_analysis_name_the_same_measures():
    from analysis.settings import findings as section

    assert fmx.MEASURES is section.MEASURES
    assert fmx.X_UNITS is section.X_UNITS
    assert (fmx.START, fmx.BASELINE_TARGET) == (section.START, section.BASELINE_TARGET)
