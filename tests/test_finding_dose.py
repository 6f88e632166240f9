"""Dose-response findings: one setting at several values, judged by the least-squares slope of the
runs' window means on the value (analysis.finding_dose, analysis.power.slope_fit), checked when
the grid loads and at plan (analysis.settings.finding_dose), recorded in grid.json with each level's
run ids, and shown in the findings tables."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from analysis_helpers import md_rows, write_dose_grid
from scipy import stats as st

from analysis import finding_dose, report
from analysis import findings as fm
from analysis.load import load
from analysis.power import seeds_for_slope_power, slope_fit, slope_power
from harness import cli, layout
from harness.config.grid import expand, plan_record
from harness.config.spec import load_grid
from harness.settings.schema import SpecError

# --- the slope and its power -----------------------------------------------------------------------


def test_slope_fit_is_the_textbook_ols_slope_with_its_t_interval():
    x = np.array([0.2, 0.2, 0.28, 0.28, 0.4, 0.4, 0.8, 0.8])
    y = 0.1 * x + np.array([0.01, -0.02, 0.003, 0.01, -0.005, 0.02, 0.0, 0.004])
    fit = slope_fit(x, y)
    sxx = np.sum((x - x.mean()) ** 2)
    b = np.sum((x - x.mean()) * (y - y.mean())) / sxx
    s = math.sqrt(np.sum((y - (y.mean() - b * x.mean()) - b * x) ** 2) / (len(x) - 2))
    half = st.t.ppf(0.975, len(x) - 2) * s / math.sqrt(sxx)  # Draper & Smith §1.4
    assert (fit.slope, fit.lo, fit.hi) == pytest.approx((b, b - half, b + half), rel=1e-12)
    lr = st.linregress(x, y)
    assert (fit.slope, fit.se, fit.intercept) == pytest.approx((lr.slope, lr.stderr, lr.intercept), rel=1e-12)
    assert fit.dof == 6 and fit.resid_sd == pytest.approx(s)
    exact = slope_fit([1, 2, 3], [2, 4, 6])  # on the line: no test, the interval is the slope itself
    assert (
        exact.exact and (exact.slope, exact.lo, exact.hi) == pytest.approx((2, 2, 2)) and math.isnan(exact.t)
    )
    two = slope_fit([1, 2], [1, 3])  # a slope, but no residual degree of freedom
    assert two.slope == pytest.approx(2) and math.isnan(two.lo)
    assert math.isnan(slope_fit([1, 1, 1], [1, 2, 3]).slope)  # one value: no slope


def slope_power_by_hand(b: float, sd: float, levels: list[float], k: int) -> float:
    """Two-sided 5% t test of a zero slope, k runs per level: noncentral t, n - 2 dof (Dupont & Plummer)."""
    x = np.repeat(levels, k)
    dof = len(x) - 2
    nc = abs(b) * math.sqrt(np.sum((x - x.mean()) ** 2)) / sd
    crit = st.t.ppf(0.975, dof)
    return 1 - st.nct.cdf(crit, dof, nc) + st.nct.cdf(-crit, dof, nc)


def test_the_seeds_per_value_are_the_fewest_with_80_percent_power_for_the_slope():
    levels = [0.2, 0.28, 0.4, 0.8]
    assert slope_power(0.05, 0.02, levels, 3) == pytest.approx(
        slope_power_by_hand(0.05, 0.02, levels, 3), abs=1e-12
    )
    k = int(seeds_for_slope_power(0.02, 0.01, levels))
    assert slope_power_by_hand(0.02, 0.01, levels, k) >= 0.8 > slope_power_by_hand(0.02, 0.01, levels, k - 1)
    # two levels, k runs each: the slope's t test is the two-sample pooled t test, whose power is Cohen's
    d = 0.5  # difference of means / SD at levels 0 and 1
    two = slope_power(d, 1.0, [0.0, 1.0], 64)
    crit = st.t.ppf(0.975, 126)
    cohen = 1 - st.nct.cdf(crit, 126, d * math.sqrt(64 / 2)) + st.nct.cdf(-crit, 126, d * math.sqrt(64 / 2))
    assert two == pytest.approx(cohen, abs=1e-12)
    assert math.isnan(seeds_for_slope_power(0.0, 0.01, levels)) and math.isnan(
        seeds_for_slope_power(0.1, 0.0, levels)
    )


def test_dose_verdict_reproduced_opposite_not_resolved_and_not_enough_runs():
    x = [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
    up = [1.0, 1.1, 2.0, 2.1, 3.0, 3.1]
    out = finding_dose.dose_verdict(x, up, "higher")
    assert out["verdict"] == "reproduced" and out["effect"] == pytest.approx(1.0)
    assert (out["baseline_n"], out["baseline_mean"], out["variant_n"], out["variant_mean"]) == pytest.approx(
        (2, 1.05, 2, 3.05)
    )
    assert out["p_improve"] == 1.0 and out["p_value"] < 0.025
    assert finding_dose.dose_verdict(x, up, "lower")["verdict"] == "opposite"
    flat = finding_dose.dose_verdict(x, [1.0, 1.2, 1.1, 1.0, 1.2, 1.15], "higher")
    assert flat["verdict"] == "not resolved" and flat["seeds_80"] >= 2
    few = finding_dose.dose_verdict([1.0, 2.0], [1.0, 2.0], "higher")
    assert few["verdict"].startswith("not enough runs (2 at 2 value(s)")
    logged = finding_dose.dose_verdict(
        [1.0, 10.0, 100.0] * 2, [0, 1, 2, 0.1, 1.1, 2.1], "higher", scale="log"
    )
    assert logged["effect"] == pytest.approx(1 / math.log(10))  # per unit of ln(value)


# --- the findings table -----------------------------------------------------------------------------


def test_a_dose_finding_s_row_rests_on_the_slope_of_the_runs_window_means(tmp_path):
    g = tmp_path / "g"
    arms = write_dose_grid(g)
    table = report.findings_results(g)
    (r,) = table.frame.to_dict("records")
    window = fm.window_values(load(g), "entropy", (0.5, 1.0))  # the window mean per run, as for two arms
    xs = [float(lab) for lab, ids in arms.items() for _ in ids]
    ys = [window[rid] for ids in arms.values() for rid in ids]
    lr = st.linregress(xs, ys)
    half = st.t.ppf(0.975, len(xs) - 2) * lr.stderr
    assert (r["effect"], r["effect_lo"], r["effect_hi"]) == pytest.approx(
        (lr.slope, lr.slope - half, lr.slope + half)
    )
    assert r["verdict"] == "reproduced" and r["dose_runs"] == 12 and r["dose_levels"] == 4
    assert r["p_value"] == pytest.approx(lr.pvalue / 2)  # one-sided, on the claimed side
    assert (r["baseline_n"], r["variant_n"]) == (3, 3)  # the lowest and the highest value
    assert r["baseline"] == "num_iterations=4" and r["variant"] == "epsilon_high in [0.2, 0.28, 0.4, 0.8]"
    assert "Dose-response findings" in table.caption and "Dupont & Plummer 1998" in table.caption
    shown = fm.display_table(table).frame.iloc[0]
    assert shown["metric (window)"] == (
        "entropy (50-100% of steps): slope per unit of epsilon_high, epsilon_high = 0.2, 0.28, 0.4, 0.8; "
        "12 runs at 4 values"
    )


def test_a_dose_finding_on_the_log_scale_and_one_that_does_not_resolve(tmp_path, capsys):
    g = tmp_path / "g"
    write_dose_grid(g, values=(1e-5, 1e-4, 1e-3), seeds=2, scale="log", slope=0.01)
    (r,) = report.findings_results(g).frame.to_dict("records")
    assert r["effect"] == pytest.approx(0.01, abs=0.01) and r["dose_scale"] == "log"
    h = tmp_path / "h"
    write_dose_grid(h, seeds=2, slope=-0.05, noise=0.05)  # the seeds' offsets leave a slope of 0.039
    (r,) = report.findings_results(h).frame.to_dict("records")
    assert r["verdict"] == "not resolved" and r["seeds_80"] >= 2
    assert cli.main(["findings", str(h), "--markdown"]) == 0
    rows = md_rows(capsys.readouterr().out)
    assert rows[2][5] == f"not resolved ({int(r['seeds_80']):,} seeds/value for 80% power)"
    assert rows[2][2].startswith("entropy (50-100% of steps): slope per unit of epsilon_high")


def test_a_dose_finding_leaves_out_unfinished_runs_by_level(tmp_path):
    g = tmp_path / "g"
    arms = write_dose_grid(g, seeds=2)
    rid = arms["0.4"][1]
    (layout.run_dir(g, rid) / layout.DONE_FILE).unlink()  # stopped: not counted
    (r,) = report.findings_results(g).frame.to_dict("records")
    assert r["dose_runs"] == 7 and f"0.4 `{rid}`" in r["left_out"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"dose": {"key": "trainer.epsilon_high", "values": [0.2]}}, "dose"),
        ({"dose": {"key": "trainer.epsilon_high", "values": [-1.0, 1.0], "scale": "log"}}, "dose"),
        ({"arms": {"0.2": ["a"]}}, "arms"),
        ({"select": [1]}, "select"),
    ],
)
def test_read_findings_refuses_a_hand_edited_dose_record(tmp_path, change, named):
    g = tmp_path / "g"
    write_dose_grid(g, seeds=1)
    record = json.loads((g / "grid.json").read_text())["findings"]["D"]
    with pytest.raises(ValueError, match=rf"findings.D: {named} missing or malformed"):
        fm.read_findings({"D": {**record, **change}}, "grid.json")


# --- the grid file ---------------------------------------------------------------------------------

BASE = {
    "name": "g",
    "task": {"name": "chain_sum", "kwargs": {"min_terms": 2, "max_terms": 2, "max_digits": 1}},
    "trainer": {"max_steps": 3, "per_device_train_batch_size": 8, "num_generations": 4, "num_iterations": 4},
    "grid": {"seed": [0, 1], "epsilon_high": [0.2, 0.28, 0.4, 0.8]},
}
DOSE = {
    "claim": "Token entropy rises with the upper clip.",
    "paper": "DAPO, arXiv:2503.14476, §3.1",
    "metric": "entropy",
    "window": [0.5, 1.0],
    "direction": "higher",
    "dose": {"key": "epsilon_high", "values": [0.2, 0.28, 0.4, 0.8], "scale": "log"},
    "arms": {"num_iterations": 4},
}


def write(tmp_path: Path, finding: dict, **grid) -> Path:
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({**BASE, **grid, "findings": {"F1": finding}}, allow_unicode=True))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as e:
        load_grid(path)
    return e.value.problems


def test_a_dose_finding_is_checked_normalised_and_recorded_with_each_level_s_runs(tmp_path):
    grid = load_grid(
        write(tmp_path, {**DOSE, "dose": {"key": "epsilon_high", "values": [0.2, 0.28, 0.4, 0.8]}})
    )
    f = grid.findings["F1"]
    assert f["dose"] == {"key": "trainer.epsilon_high", "values": [0.2, 0.28, 0.4, 0.8], "scale": "linear"}
    assert f["select"] == {"trainer.num_iterations": 4} and "arms" not in f and "baseline" not in f
    plan = expand(grid)
    arms = plan_record(plan)["findings"]["F1"]["arms"]
    assert list(arms) == ["0.2", "0.28", "0.4", "0.8"] and all(len(ids) == 2 for ids in arms.values())
    by_id = {r.run_id: r for r in plan.runs}
    assert {by_id[r].get("trainer.epsilon_high") for r in arms["0.28"]} == {0.28}
    # an int value of a float field is that float, as on the grid's axes
    grid = load_grid(write(tmp_path, {**DOSE, "dose": {"key": "epsilon_high", "values": [1, 2]}}))
    assert [type(v) for v in grid.findings["F1"]["dose"]["values"]] == [float, float]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"dose": [0.2, 0.28]}, ["findings.F1.dose = [0.2, 0.28]", "e.g. dose: {key: epsilon_high"]),
        (
            {"dose": {"key": "epsilon_high", "values": [0.2, 0.4], "scal": "log"}},
            ["unknown key 'scal'", "'scale'"],
        ),
        ({"dose": {"values": [0.2, 0.4]}}, ["findings.F1.dose.key is not set", "key: epsilon_high"]),
        ({"dose": {"key": "seed", "values": [0, 1]}}, ["findings.F1.dose.key = 'seed'", "pooled"]),
        ({"dose": {"key": "epsilon_hgh", "values": [0.2, 0.4]}}, ["epsilon_hgh"]),
        (
            {"dose": {"key": "epsilon_high", "values": [0.2]}},
            ["findings.F1.dose.values = [0.2]", "at least two"],
        ),
        ({"dose": {"key": "epsilon_high", "values": [0.2, "0.4"]}}, ["dose.values[1] = '0.4'", "in quotes"]),
        ({"dose": {"key": "epsilon_high", "values": [0.2, 0.2]}}, ["dose.values[1] = 0.2 is given twice"]),
        (
            {"dose": {"key": "epsilon_high", "values": [0.2, float("inf")]}},
            ["dose.values[1] = inf", "finite"],
        ),
        ({"dose": {"key": "loss_type", "values": [1, 2]}}, ["loss_type"]),
        (
            {"dose": {"key": "epsilon_high", "values": [0.0, 0.4], "scale": "log"}},
            ["scale = log", "log of 0.0"],
        ),
        (
            {"dose": {"key": "epsilon_high", "values": [0.2, 0.4], "scale": "sqrt"}},
            ["scale = 'sqrt'", "linear"],
        ),
        (
            {"arms": {"epsilon_high": 0.2}},
            ["findings.F1.arms: epsilon_high is dose.key", "drop it from arms"],
        ),
        (
            {"baseline": {"epsilon_high": 0.2}},
            ["findings.F1.baseline: a dose-response finding", "drop baseline"],
        ),
        ({"measure": "from_start"}, ["findings.F1.measure = 'from_start'", "window mean"]),
        ({"target": 0.5}, ["findings.F1.target = 0.5", "to_target"]),
    ],
)
def test_each_bad_dose_key_is_one_problem_naming_key_value_and_fix(tmp_path, change, expected):
    found = problems(write(tmp_path, {**DOSE, **change}))
    text = " | ".join(found)
    for part in expected:
        assert part in text, (part, found)


def test_arms_or_dose_alone_say_what_the_other_is(tmp_path):
    no_dose = {k: v for k, v in DOSE.items() if k != "dose"}
    (p,) = problems(write(tmp_path, no_dose))
    assert (
        p.startswith("findings.F1.dose is not set: arms gives the settings that every level")
        and "baseline and variant" in p
    )
    no_arms = {k: v for k, v in DOSE.items() if k != "arms"}
    (p,) = problems(write(tmp_path, no_arms))
    assert p.startswith("findings.F1.arms is not set: give the settings that every level's runs share")


def test_plan_names_each_value_that_selects_no_run_and_prints_the_levels(tmp_path, capsys):
    bad = {**DOSE, "dose": {"key": "epsilon_high", "values": [0.2, 0.5, 0.8]}}
    assert cli.main(["plan", str(write(tmp_path, bad))]) == 2
    err = capsys.readouterr().err
    assert "findings.F1.dose.values[1]: no run of the grid has trainer.epsilon_high = 0.5" in err
    assert (
        "the grid has trainer.epsilon_high = 0.2, 0.28, 0.4, 0.8" in err
        and "add 0.5 to the grid's axes" in err
    )
    shared = {**DOSE, "arms": {"num_iterations": 2}}
    assert cli.main(["plan", str(write(tmp_path, shared))]) == 2
    err = capsys.readouterr().err
    assert err.count("findings.F1.arms: no run of the grid has trainer.num_iterations = 2") == 1
    assert cli.main(["plan", str(write(tmp_path, DOSE))]) == 0
    out = capsys.readouterr().out
    assert "slope of entropy over 50-100% of each run's steps on ln epsilon_high, higher expected" in out
    assert "arms num_iterations=4; runs per epsilon_high value: 0.2: 2, 0.28: 2, 0.4: 2, 0.8: 2" in out
    one_seed = write(
        tmp_path,
        {**DOSE, "dose": {"key": "epsilon_high", "values": [0.2, 0.8]}},
        grid={"seed": [0], "epsilon_high": [0.2, 0.8]},
    )
    assert cli.main(["plan", str(one_seed)]) == 0
    assert "a slope with fewer than 3 runs gets no verdict" in capsys.readouterr().out


def test_f1_re_stated_as_a_dose_response_finding_in_the_docs_plans_on_the_findings_grid(tmp_path, capsys):
    root = Path(__file__).resolve().parents[1]
    grid = yaml.safe_load((root / "ablations" / "findings.yaml").read_text())
    doc = (root / "docs" / "findings.md").read_text()
    example = yaml.safe_load(
        doc.split("### F1 as a dose-response finding")[1].split("```yaml")[1].split("```")[0]
    )
    grid["subgrids"]["f1_clip_higher"] = example["subgrids"]["f1_clip_higher"]
    grid["findings"]["F1_clip_higher"] = example["findings"]["F1_clip_higher"]
    path = tmp_path / "findings.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False, allow_unicode=True))
    assert cli.main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert "runs per epsilon_high value: 0.2: 2, 0.28: 2, 0.4: 2, 0.8: 2" in out  # F1's budget: 8 runs
