"""Verdicts on a grid's findings (analysis.findings), the power calculations behind them
(analysis.stats), the findings table of the report and the ``grpo-harness findings`` command."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from analysis_helpers import md_rows, write_run
from scipy import stats as st

from analysis import findings as fm
from analysis import report
from analysis.power import min_detectable_effect, pooled_sd, seeds_for_power, welch_interval
from analysis.tables import Table
from harness import cli, layout

# --- the statistics ---------------------------------------------------------------------------------


def test_welch_interval_is_scipy_s_and_the_textbook_formula():
    v = np.array([1.0, 2.0, 3.0, 4.5])
    b = np.array([0.0, 0.5, 1.2])
    diff, lo, hi = welch_interval(v, b)
    ci = st.ttest_ind(v, b, equal_var=False).confidence_interval(0.95)
    assert (lo, hi) == pytest.approx((ci.low, ci.high), abs=1e-12)
    # by hand: se and Welch-Satterthwaite dof
    a1, a2 = v.var(ddof=1) / 4, b.var(ddof=1) / 3
    se = math.sqrt(a1 + a2)
    dof = (a1 + a2) ** 2 / (a1**2 / 3 + a2**2 / 2)
    q = st.t.ppf(0.975, dof)
    assert diff == pytest.approx(2.625 - 1.7 / 3)
    assert (lo, hi) == pytest.approx((diff - q * se, diff + q * se), rel=1e-12)
    assert welch_interval([1.0, 1.0], [0.0, 0.0]) == (1.0, 1.0, 1.0)  # no spread: the difference
    d, lo, hi = welch_interval([1.0, np.nan, 2.0], [0.0])
    assert d == 1.5 and math.isnan(lo) and math.isnan(hi)


def power_by_hand(d: float, n: int) -> float:
    """Two-sided 5% two-sample t test power at effect size d, n per group (noncentral t)."""
    dof = 2 * n - 2
    crit = st.t.ppf(0.975, dof)
    nc = d * math.sqrt(n / 2)
    return 1 - st.nct.cdf(crit, dof, nc) + st.nct.cdf(-crit, dof, nc)


def test_min_detectable_effect_has_80_percent_power_at_n():
    x = min_detectable_effect(3, 1.0)
    assert power_by_hand(x, 3) == pytest.approx(0.80, abs=1e-3)
    assert x == pytest.approx(3.07, abs=0.01)  # Cohen's tables: d = 3.07 for n = 3 per group
    assert min_detectable_effect(3, 2.0) == pytest.approx(2 * x)  # scales with the SD
    assert power_by_hand(min_detectable_effect(10, 1.0), 10) == pytest.approx(0.80, abs=1e-3)
    assert math.isnan(min_detectable_effect(1, 1.0))
    assert min_detectable_effect(5, 0.0) == 0.0


def test_seeds_for_power_is_the_smallest_n_with_80_percent_power():
    assert seeds_for_power(0.5, 1.0) == 64  # the classic d = 0.5: 64 per group
    n = int(seeds_for_power(0.3, 0.25))  # d = 1.2
    assert power_by_hand(1.2, n) >= 0.8 > power_by_hand(1.2, n - 1)
    assert seeds_for_power(-0.3, 0.25) == n  # the sign does not matter
    assert seeds_for_power(10.0, 1.0) == 2
    assert math.isnan(seeds_for_power(0.0, 1.0))
    assert math.isnan(seeds_for_power(1.0, 0.0))
    assert seeds_for_power(1e-6, 1.0) == math.inf


def test_pooled_sd_by_hand():
    a, b = [1.0, 2.0, 3.0], [2.0, 4.0]
    assert pooled_sd(a, b) == pytest.approx(math.sqrt((2.0 + 2.0) / 3))
    assert pooled_sd([1.0], [5.0, np.nan, 7.0]) == pytest.approx(math.sqrt(2.0))
    assert math.isnan(pooled_sd([1.0], [2.0]))


# --- windows and verdicts -----------------------------------------------------------------------------


def test_window_values_average_a_fraction_of_each_run_s_logged_steps():
    df = pd.DataFrame(
        {
            layout.RUN_ID: ["a"] * 4 + ["b"] * 5,
            layout.STEP: [4, 3, 2, 1, 1, 2, 3, 4, 5],  # a's rows are not in step order
            "m": [40.0, 30.0, 20.0, 10.0, 1.0, np.nan, 3.0, 4.0, 5.0],
            layout.OFF_POLICY: [1, 0, 1, 0, 0, 1, 1, 0, 1],
        }
    )
    # a: positions 0..3 / 4 -> steps 3, 4 in [0.5, 1); b: positions 0..4 / 5 -> 0.6, 0.8 (steps 4, 5)
    assert fm.window_values(df, "m", (0.5, 1.0)).to_dict() == {"a": 35.0, "b": 4.5}
    # the whole run, NaN skipped; the first half: a steps 1-2, b steps 1-3 (positions 0, 0.2, 0.4)
    assert fm.window_values(df, "m", (0.0, 1.0)).to_dict() == {"a": 25.0, "b": 13.0 / 4}
    assert fm.window_values(df, "m", (0.0, 0.5)).to_dict() == {"a": 15.0, "b": 2.0}
    assert fm.window_values(df, "m", (0.0, 1.0), off_policy_only=True).to_dict() == {"a": 30.0, "b": 4.0}
    assert fm.window_values(df, "missing", (0.0, 1.0)).isna().all()
    with pytest.raises(ValueError, match="0 <= a < b <= 1"):
        fm.window_values(df, "m", (0.5, 0.5))


BASE3 = [1.0, 2.0, 3.0]


def test_verdict_reproduced_opposite_and_not_resolved():
    up = fm.verdict(BASE3, [11.0, 12.0, 13.0], "higher")
    assert up["verdict"] == "reproduced"
    assert up["effect"] == pytest.approx(10.0)
    ci = st.ttest_ind([11.0, 12.0, 13.0], BASE3, equal_var=False).confidence_interval(0.95)
    assert (up["effect_lo"], up["effect_hi"]) == pytest.approx((ci.low, ci.high))
    assert (up["p_improve"], up["p_improve_lo"], up["p_improve_hi"]) == (1.0, 1.0, 1.0)
    assert math.isnan(up["seeds_80"])
    assert up["baseline_n"] == up["variant_n"] == 3
    assert (up["baseline_mean"], up["variant_mean"]) == (2.0, 12.0)
    assert up["pooled_sd"] == pytest.approx(1.0)
    assert fm.verdict(BASE3, [11.0, 12.0, 13.0], "lower")["verdict"] == "opposite"
    down = fm.verdict(BASE3, [-9.0, -8.0, -7.0], "lower")
    assert down["verdict"] == "reproduced" and down["p_improve"] == 0.0


def test_not_resolved_gives_the_seeds_that_would_resolve_the_observed_effect():
    # effect 0.5 at pooled SD 1: d = 0.5, so 64 seeds per arm (power_by_hand checks the boundary)
    out = fm.verdict(BASE3, [1.5, 2.5, 3.5], "higher")
    assert out["verdict"] == "not resolved"
    assert out["effect"] == pytest.approx(0.5) and out["pooled_sd"] == pytest.approx(1.0)
    assert out["effect_lo"] < 0 < out["effect_hi"]
    assert out["seeds_80"] == 64
    assert power_by_hand(0.5, 64) >= 0.8 > power_by_hand(0.5, 63)
    # P(variant > baseline) = (1 win of 1.5 ... ) by hand: pairs (v > b) + ties / 2 over 9 pairs
    wins = sum((x > y) + 0.5 * (x == y) for x in (1.5, 2.5, 3.5) for y in BASE3)
    assert out["p_improve"] == pytest.approx(wins / 9)
    assert out["p_improve_lo"] <= out["p_improve"] <= out["p_improve_hi"]
    same = fm.verdict(BASE3, BASE3, "higher")  # no effect: no number of seeds resolves it
    assert same["verdict"] == "not resolved" and math.isnan(same["seeds_80"])


def test_an_arm_with_fewer_than_two_runs_gets_no_verdict():
    out = fm.verdict([1.0, np.nan], [2.0, 3.0, 4.0], "higher")
    assert out["verdict"] == "not enough runs (baseline 1, variant 3; 2 per arm needed)"
    assert out["effect"] == 2.0 and math.isnan(out["effect_lo"]) and math.isnan(out["p_improve_lo"])
    out = fm.verdict([], [2.0], "lower")
    assert out["verdict"].startswith("not enough runs (baseline 0, variant 1")
    assert math.isnan(out["effect"])
    with pytest.raises(ValueError, match="direction"):
        fm.verdict(BASE3, BASE3, "up")


def test_a_verdict_does_not_depend_on_the_bootstrap_seed():
    b, v = [0.1, 0.3, 0.2, 0.25], [0.3, 0.45, 0.2, 0.5]
    outs = [fm.verdict(b, v, "higher", seed=s) for s in range(4)]
    assert len({(o["verdict"], o["effect_lo"], o["effect_hi"]) for o in outs}) == 1


# --- the table and the report ---------------------------------------------------------------------


FINDING = {
    "claim": "clip-higher keeps entropy higher",
    "paper": "DAPO, arXiv:2503.14476, §3.1",
    "metric": "entropy",
    "window": [0.5, 1.0],
    "direction": "higher",
    "baseline": {"trainer.epsilon_high": 0.2},
    "variant": {"trainer.epsilon_high": 0.28},
    "scaled": "",
    "off_policy_only": False,
}


def write_findings_grid(grid_dir, findings=None, *, seeds=3, stopped=()):
    """Two arms (epsilon_high 0.2 / 0.28) x ``seeds`` runs of 20 steps; the variant's entropy is
    0.1 higher in the second half. Returns the run ids of each arm."""
    arms = {"baseline": [], "variant": []}
    runs = {}
    for arm, eh in (("baseline", 0.2), ("variant", 0.28)):
        for s in range(seeds):
            rid = f"{arm}-s{s}"
            step = np.arange(1, 21)
            cfg = {
                "task": {"name": "chain_sum"},
                "model": "tiny",
                "trainer": {"loss_type": "dapo", "seed": s},
            }
            cfg["trainer"].update({"epsilon_high": eh, "max_steps": 20})
            entropy = 1.0 - 0.01 * step + 0.01 * s + (0.1 * (step > 10) if arm == "variant" else 0.0)
            write_run(
                grid_dir,
                rid,
                config=cfg,
                varying={"trainer.epsilon_high": eh, "seed": s},
                columns={layout.STEP: step, "reward": 0.1 + 0.01 * step + 0.005 * s, "entropy": entropy},
                state="stopped" if rid in stopped else "done",
            )
            arms[arm].append(rid)
            runs[rid] = {"trainer.epsilon_high": eh, "seed": s}
    if findings is None:
        findings = {"F1": {**FINDING, "arms": arms}}
    record = {
        "name": grid_dir.name,
        "source": "g.yaml",
        "run_ids": [*arms["baseline"], *arms["variant"]],
        "varying": ["trainer.epsilon_high", "seed"],
        "runs": runs,
        "report": {"hue": ["trainer.epsilon_high"]},
        "findings": findings,
    }
    grid_dir.mkdir(parents=True, exist_ok=True)
    (grid_dir / layout.GRID_FILE).write_text(json.dumps(record))
    return arms


def test_findings_table_counts_finished_runs_of_each_arm(tmp_path):
    g = tmp_path / "g"
    arms = write_findings_grid(g, stopped=("variant-s2",))
    table = report.findings_results(g)
    (row,) = table.frame.to_dict("records")
    # second half (steps 11-20): baseline 1 - 0.01 * 15.5 + 0.01 s; the variant 0.1 higher
    assert (row["baseline_n"], row["variant_n"]) == (3, 2)  # the stopped run is not counted
    assert row["baseline_mean"] == pytest.approx(0.845 + 0.01)
    assert row["variant_mean"] == pytest.approx(0.945 + 0.005)
    assert row["effect"] == pytest.approx(0.095)
    assert row["verdict"] == "reproduced"
    assert row["finding"] == "F1" and row["baseline"] == "epsilon_high=0.2"
    assert "Welch" in table.caption and "undercovers" in table.caption
    assert "50,000 resamples" in table.caption
    assert arms["variant"][2] == "variant-s2"


def test_read_findings_names_each_damaged_entry(tmp_path):
    with pytest.raises(ValueError) as e:
        fm.read_findings({"A": {**FINDING, "window": [1, 0]}, "B": "x", "C": FINDING}, "g/grid.json")
    text = str(e.value)
    assert "g/grid.json: findings.A: window, arms missing or malformed" in text
    assert "g/grid.json: findings.B is str, not a mapping" in text
    assert "findings.C: arms" in text
    assert fm.read_findings(None, "x") == [] and fm.read_findings({}, "x") == []


@pytest.mark.slow
def test_report_shows_the_findings_near_the_top_in_three_formats(tmp_path):
    g = tmp_path / "g"
    write_findings_grid(g)
    out = report.make_report(g)
    index = (out / "index.md").read_text()
    assert "## Findings" in index
    assert index.index("## Findings") < index.index("![")  # before the first figure
    assert "Files: findings.md/.csv/.tex" in index
    rows = md_rows(index[index.index("## Findings") :])
    assert rows[0] == [
        "finding",
        "claim",
        "paper",
        "metric (window)",
        "baseline mean (n)",
        "variant mean (n)",
        "effect [95% CI]",
        "P(variant > baseline) [95% CI]",
        "verdict",
        "seeds for 80% power",
        "p (one-sided)",
        "Holm p",
        "Holm verdict",
    ]
    assert rows[2][0] == "F1" and rows[2][3] == "entropy (50-100% of steps)"
    assert rows[2][4] == "0.855 (3)" and rows[2][8] == "reproduced" and rows[2][9] == "—"
    assert rows[2][7] == "1 [1, 1]"
    csv = pd.read_csv(out / "findings.csv")
    assert csv.loc[0, "effect"] == pytest.approx(0.1)
    assert "\\begin{tabular}" in (out / "findings.tex").read_text()
    assert (out / "findings.md").read_text().startswith("Each finding")


@pytest.mark.slow
def test_report_without_findings_has_no_findings_section(tmp_path):
    g = tmp_path / "g"
    write_findings_grid(g, findings={})
    out = report.make_report(g)
    assert "## Findings" not in (out / "index.md").read_text()
    assert not (out / "findings.md").exists()


def test_findings_command_prints_the_compact_table(tmp_path, capsys):
    g1, g2 = tmp_path / "a", tmp_path / "b"
    write_findings_grid(g1)
    write_findings_grid(g2, {"F2": {**FINDING, "direction": "lower", "arms": write_findings_grid(g2)}})
    assert cli.main(["findings", str(g1), str(g2)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "claim",
        "paper",
        "metric",
        "effect",
        "[95%",
        "CI]",
        "P(>)",
        "[CI]",
        "verdict",
        "p",
        "(one-sided)",
        "Holm",
        "p",
        "Holm",
        "verdict",
    ]
    assert len(lines) == 3
    # the unadjusted verdict, then the p-value, the Holm p and the Holm verdict (each folder its own family)
    assert lines[1].rstrip().endswith("reproduced") and " reproduced " in lines[1]
    assert " opposite " in lines[2] and lines[2].rstrip().endswith("not reproduced")
    assert cli.main(["findings", str(g1), "--markdown"]) == 0
    rows = md_rows(capsys.readouterr().out)
    assert rows[0] == [
        "claim",
        "paper",
        "metric",
        "effect [95% CI]",
        "P(>) [CI]",
        "verdict",
        "p (one-sided)",
        "Holm p",
        "Holm verdict",
    ]
    assert rows[2][0] == "F1: clip-higher keeps entropy higher" and rows[2][5] == "reproduced"
    assert rows[2][6] == rows[2][7] == "0.000128" and rows[2][8] == "reproduced"  # a family of one


def test_findings_command_refuses_a_folder_without_findings(tmp_path, capsys):
    g = tmp_path / "g"
    write_findings_grid(g, findings={})
    assert cli.main(["findings", str(g)]) == 2
    err = capsys.readouterr().err
    assert f"{g / layout.GRID_FILE} records no findings: section" in err
    assert "grpo-harness run GRID.yaml" in err
    assert cli.main(["findings", str(tmp_path / "nothing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_not_resolved_shows_the_seeds_needed(tmp_path):
    frame = pd.DataFrame(
        [
            {
                "finding": "F",
                "claim": "c",
                "paper": "p",
                "scaled": "60 steps",
                "metric": "kl",
                "window_lo": 0.0,
                "window_hi": 1.0,
                "off_policy_only": True,
                "direction": "lower",
                **fm.verdict(BASE3, [1.5, 2.5, 3.5], "lower"),
            }
        ]
    )
    table = Table(frame, caption="the findings")
    shown_table = fm.display_table(table)
    assert shown_table.caption == "the findings"  # the caption stays with the text cells
    shown = shown_table.frame.iloc[0]
    assert shown["paper"] == "p; scaled: 60 steps"
    assert shown["metric (window)"] == "kl (0-100% of steps, off-policy)"
    assert shown["verdict"] == "not resolved" and shown["seeds for 80% power"] == "64"
    assert shown["baseline mean (n)"] == "2 (3)"
    compact = fm.compact_table(table).iloc[0]
    assert compact["verdict"] == "not resolved (64 seeds/arm for 80% power)"
    same = table.with_frame(frame.assign(**fm.verdict(BASE3, BASE3, "lower")))
    assert fm.compact_table(same).iloc[0]["verdict"] == "not resolved (the arms' means are equal)"
    assert fm.display_table(same).frame.iloc[0]["seeds for 80% power"] == "—"


# --- what a verdict leaves out, and why ---------------------------------------------------------------


def rewrite_run(grid_dir, rid, *, state="done", **columns):
    """Replace run ``rid`` of :func:`write_findings_grid` (its arm's config kept): 20 steps with the
    given ``columns`` (a column given as None is not written) and the end marker of ``state``."""
    import shutil

    rdir = layout.run_dir(grid_dir, rid)
    cfg = json.loads((rdir / layout.CONFIG_FILE).read_text())
    shutil.rmtree(rdir)
    step = np.arange(1, 21)
    cols = {layout.STEP: step, "reward": 0.1 + 0.01 * step, "entropy": 1.0 - 0.01 * step}
    cols.update({k: v for k, v in columns.items() if v is not None})
    for k in [k for k, v in columns.items() if v is None]:
        del cols[k]
    write_run(grid_dir, rid, config=cfg["config"], varying=cfg["varying"], columns=cols, state=state)


@pytest.mark.slow
def test_each_run_a_finding_leaves_out_is_named_with_why(tmp_path, capsys):
    g = tmp_path / "g"
    write_findings_grid(g, seeds=4, stopped=("variant-s3",))
    rewrite_run(g, "variant-s2", state="diverged")
    rewrite_run(g, "baseline-s3", entropy=None)  # never logs the metric
    rewrite_run(g, "variant-s1", entropy=[np.nan] * 20)  # logs it, never finite
    table = report.findings_results(g)
    (row,) = table.frame.to_dict("records")
    assert (row["baseline_n"], row["variant_n"]) == (3, 1)
    left = row["left_out"]
    assert "baseline `baseline-s3` (no finite entropy at any of its 20 logged step(s))" in left
    assert "variant `variant-s1` (no finite entropy at any of its 20 logged step(s))" in left
    assert "variant `variant-s2` (diverged at step 20 (loss))" in left
    assert "variant `variant-s3` (stopped at step 20 of 20" in left
    assert "(4 runs in all)" in table.caption  # runs with a value, not runs finished
    assert "listed under the table" in table.caption
    # the report shows the same under its findings table, in index.md and findings.md
    out = report.make_report(g)
    index = (out / "index.md").read_text()
    section = index[index.index("## Findings") : index.index("Files: findings")]
    (line,) = [x for x in section.splitlines() if x.startswith("F1: left out")]
    assert "`variant-s2` (diverged at step 20" in line and "`baseline-s3`" in line
    assert line in (out / "findings.md").read_text()
    assert pd.read_csv(out / "findings.csv").loc[0, "left_out"] == left
    # and the command prints it under its table
    assert cli.main(["findings", str(g)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1].startswith("F1: left out baseline `baseline-s3`")


def test_a_window_that_holds_no_logged_step_says_so():
    df = pd.DataFrame(
        {layout.RUN_ID: ["a", "b", "c", "d"], layout.STEP: [1, 1, 1, 1], "m": [1.0, 2.0, 3.0, 4.0]}
    )
    f = fm.Finding(
        id="F",
        claim="c",
        paper="p",
        metric="m",
        window=(0.5, 1.0),
        direction="higher",
        arms={"baseline": ("a", "b"), "variant": ("c", "d")},
    )
    (row,) = fm.findings_table(df, [f], finished=["a", "b", "c", "d"]).frame.to_dict("records")
    assert row["verdict"].startswith("not enough runs (baseline 0, variant 0")
    assert row["left_out"] == (
        "baseline `a`, `b` (its 1 logged step(s) put none in the window (50-100% of its steps)); "
        "variant `c`, `d` (its 1 logged step(s) put none in the window (50-100% of its steps))"
    )
    stats_ = fm.window_stats(df, "m", (0.5, 1.0))
    assert stats_["rows"].tolist() == [1, 1, 1, 1] and stats_["in_window"].tolist() == [0, 0, 0, 0]
    # an eval metric logged only outside the window; off-policy steps only where there are none
    df = pd.DataFrame(
        {
            layout.RUN_ID: ["a"] * 4 + ["b"] * 4,
            layout.STEP: [1, 2, 3, 4] * 2,
            "m": [1.0, np.nan, np.nan, np.nan, 1.0, 2.0, 3.0, 4.0],
            layout.OFF_POLICY: [0.0] * 8,
        }
    )
    g = fm.Finding(**{**f.__dict__, "arms": {"baseline": ("a",), "variant": ("b",)}, "off_policy_only": True})
    (row,) = fm.findings_table(df, [g], finished=["a", "b"]).frame.to_dict("records")
    assert (
        "baseline `a` (no finite m in the window (50-100% of its steps: 2 step(s)); it has one at 1 of its 4"
        in row["left_out"]
    )
    assert (
        "variant `b` (no off-policy step (off_policy == 1) with a finite m in the window" in row["left_out"]
    )


def test_a_metric_no_run_logs_is_named_with_the_closest_logged_name(tmp_path, capsys):
    g = tmp_path / "g"
    write_findings_grid(g, {"F1": {**FINDING, "metric": "entropyy", "arms": write_findings_grid(g)}})
    assert cli.main(["findings", str(g)]) == 0
    out = capsys.readouterr().out
    assert "not enough runs (baseline 0, variant 0" in out
    assert "No run logs entropyy: did you mean 'entropy'?" in out
    assert "baseline `baseline-s0`, `baseline-s1`, `baseline-s2` (no finite entropyy" in out


def test_findings_do_not_depend_on_the_report_s_score_metric(tmp_path, capsys):
    """A finding reads its own metric: runs that never logged the report's score metric (here the
    grid's report.metric) still count when they finished."""
    g = tmp_path / "g"
    write_findings_grid(g)
    record = json.loads((g / layout.GRID_FILE).read_text())
    record["report"]["metric"] = "eval/accuracy"  # no run logs it
    (g / layout.GRID_FILE).write_text(json.dumps(record))
    (row,) = report.findings_results(g).frame.to_dict("records")
    assert (row["baseline_n"], row["variant_n"], row["verdict"]) == (3, 3, "reproduced")
    assert row["left_out"] == ""
    assert cli.main(["findings", str(g)]) == 0
    assert capsys.readouterr().out.splitlines()[1].rstrip().endswith("reproduced")


def test_findings_command_names_a_missing_or_damaged_grid_json(tmp_path, capsys):
    g = tmp_path / "g"
    write_findings_grid(g)
    (g / layout.GRID_FILE).write_text("{not json")
    assert cli.main(["findings", str(g)]) == 2
    err = capsys.readouterr().err
    assert f"{g / layout.GRID_FILE}: not valid JSON" in err and "records no findings" not in err
    (g / layout.GRID_FILE).unlink()
    assert cli.main(["findings", str(g)]) == 2
    err = capsys.readouterr().err
    assert f"{g / layout.GRID_FILE} does not exist" in err and "records no findings" not in err


def test_findings_command_names_every_folder_it_cannot_read_and_prints_no_partial_table(tmp_path, capsys):
    good, old, none = tmp_path / "good", tmp_path / "old", tmp_path / "none"
    write_findings_grid(good)
    write_findings_grid(old, findings={})
    assert cli.main(["findings", str(good), str(old), str(none)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{old / layout.GRID_FILE} records no findings: section" in captured.err
    assert str(none) in captured.err and "does not exist" in captured.err


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"baseline": 3}, "baseline"),
        ({"variant": ["epsilon_high"]}, "variant"),
        ({"off_policy_only": "false"}, "off_policy_only"),
        ({"scaled": 5}, "scaled"),
        ({"claim": "  "}, "claim"),
    ],
)
def test_read_findings_refuses_a_hand_edited_field_it_would_misread(change, named):
    arms = {"baseline": ["a"], "variant": ["b"]}
    with pytest.raises(ValueError) as e:
        fm.read_findings({"F": {**FINDING, **change, "arms": arms}}, "g/grid.json")
    assert str(e.value) == f"g/grid.json: findings.F: {named} missing or malformed"


def test_read_findings_refuses_arms_that_share_a_run():
    with pytest.raises(
        ValueError, match="findings.F: arms baseline and variant share run.s. a .a run cannot"
    ):
        fm.read_findings(
            {"F": {**FINDING, "arms": {"baseline": ["a", "b"], "variant": ["a"]}}}, "g/grid.json"
        )


def test_a_report_on_a_hand_edited_findings_record_is_an_error_not_a_traceback(tmp_path, capsys):
    g = tmp_path / "g"
    write_findings_grid(g, {"F1": {**FINDING, "baseline": 3, "arms": write_findings_grid(g)}})
    assert cli.main(["findings", str(g)]) == 2
    assert "findings.F1: baseline missing or malformed" in capsys.readouterr().err
    assert cli.main(["report", str(g)]) == 2
    assert "findings.F1: baseline missing or malformed" in capsys.readouterr().err


def test_arms_without_any_spread_get_a_note_not_just_a_zero_width_interval():
    b, v = [0.5, 0.5, 0.5], [0.6, 0.6, 0.6]
    df = pd.DataFrame(
        {
            layout.RUN_ID: ["a", "b", "c", "d", "e", "f"],
            layout.STEP: [1] * 6,
            "m": [*b, *v],
        }
    )
    f = fm.Finding(
        id="F",
        claim="c",
        paper="p",
        metric="m",
        window=(0.0, 1.0),
        direction="higher",
        arms={"baseline": ("a", "b", "c"), "variant": ("d", "e", "f")},
    )
    table = fm.findings_table(df, [f], finished=list("abcdef"))
    assert "no run-to-run spread" in table.frame.loc[0, "note"]
    assert fm.note_lines(table)[0].startswith("F: every run of each arm has the same value")


# --- the power line ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_power_line_resolves_among_the_variants_with_seeds_when_one_has_a_single_run(tmp_path):
    from analysis_helpers import synthetic_grid

    g = tmp_path / "toy"
    synthetic_grid(g, variants=("grpo", "dapo", "bnpo"), seeds=(0, 1, 2), steps=20)
    for rid in ("bnpo-s1", "bnpo-s2"):
        (layout.run_dir(g, rid) / layout.DONE_FILE).unlink()
    index = (report.make_report(g) / "index.md").read_text()
    (line,) = [x for x in index.splitlines() if x.startswith("With ")]
    assert line.startswith("With 1-3 seeds per variant, no difference involving bnpo can be resolved")
    assert "among the other 2 variants (3 seeds each), differences in final reward smaller than" in line
    assert "no difference in final reward can be resolved" not in line


@pytest.mark.slow
def test_power_line_says_when_it_counts_unfinished_runs(tmp_path):
    g = tmp_path / "g"
    write_findings_grid(g, stopped=("variant-s1", "variant-s2"))

    def power_line(index: str) -> str:
        final = index[index.index("## Final performance") : index.index("## Learning check")]
        (line,) = [x for x in final.splitlines() if x.startswith("With ")]
        return line

    line = power_line((report.make_report(g, include_unfinished=True) / "index.md").read_text())
    assert line.startswith("With 3 seeds per variant")
    assert line.endswith(
        "The seeds count 2 unfinished run(s) (--include-unfinished), each scored where it stopped; finished "
        "runs alone may resolve less."
    )
    assert "unfinished" not in power_line((report.make_report(g) / "index.md").read_text())


def test_an_arm_with_one_run_shows_no_effect_only_the_means(tmp_path, capsys):
    g = tmp_path / "g"
    write_findings_grid(g, stopped=("variant-s1", "variant-s2"))
    table = report.findings_results(g)
    assert table.frame.loc[0, "effect"] == pytest.approx(0.945 - 0.855)  # the CSV keeps the number
    shown = fm.display_table(table).frame.iloc[0]
    assert shown["variant mean (n)"] == "0.945 (1)"
    assert shown["effect [95% CI]"] == "–" and shown["P(variant > baseline) [95% CI]"] == "–"
    compact = fm.compact_table(table).iloc[0]
    assert compact["effect [95% CI]"] == "–" and compact["P(>) [CI]"] == "–"
    assert compact["verdict"].startswith("not enough runs (baseline 3, variant 1")


def test_a_report_with_no_finished_run_still_shows_each_finding_and_why(tmp_path):
    g = tmp_path / "g"
    arms = write_findings_grid(g, seeds=2, stopped=("baseline-s0", "baseline-s1", "variant-s0", "variant-s1"))
    index = (report.make_report(g) / "index.md").read_text()
    assert "nothing to plot" in index and "## Findings" in index
    section = index[index.index("## Findings") :]
    assert "not enough runs (baseline 0, variant 0" in section
    assert "F1: left out baseline `baseline-s0`, `baseline-s1` (stopped at step 20 of 20" in section
    # no run started at all: the same, each run "not started"
    h = tmp_path / "h"
    write_findings_grid(h, seeds=2)
    import shutil

    shutil.rmtree(h / layout.RUNS_DIR)
    (h / layout.RUNS_DIR).mkdir()
    index = (report.make_report(h) / "index.md").read_text()
    assert "## Findings" in index and "(no run folder yet (not started))" in index
    assert arms["baseline"] == ["baseline-s0", "baseline-s1"]
