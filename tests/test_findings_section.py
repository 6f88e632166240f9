"""The top-level ``findings:`` section of a grid file: papers' claims the runs test, checked before
anything runs, recorded in grid.json, never a run setting."""

import json
from pathlib import Path

import pytest
import yaml

from analysis.settings import findings as section
from harness import cli
from harness.config import findings
from harness.config.grid import expand, plan_record
from harness.config.spec import load_grid
from harness.settings.schema import SpecError

BASE = {
    "name": "g",
    "task": {"name": "chain_sum", "kwargs": {"min_terms": 2, "max_terms": 2, "max_digits": 1}},
    "trainer": {"max_steps": 3, "per_device_train_batch_size": 8, "num_generations": 4},
    "grid": {"seed": [0, 1, 2], "epsilon_high": [0.2, 0.28], "num_iterations": [1, 4]},
}

F1 = {
    "claim": "Under off-policy updates, epsilon_high = 0.28 keeps token entropy higher than 0.2.",
    "paper": "DAPO, arXiv:2503.14476, §3.1 and Fig. 2",
    "metric": "entropy",
    "window": [0.5, 1.0],
    "direction": "higher",
    "baseline": {"epsilon_high": 0.2, "num_iterations": 4},
    "variant": {"epsilon_high": 0.28, "num_iterations": 4},
}


def write(tmp_path: Path, data: dict, name: str = "g.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as e:
        load_grid(path)
    assert str(path) in str(e.value)  # the file is named
    return e.value.problems


def test_a_finding_is_checked_and_normalised(tmp_path):
    finding = {**F1, "baseline": {"epsilon_high": 0.2, "trainer.num_iterations": 4}, "scaled": " 60  steps "}
    grid = load_grid(write(tmp_path, {**BASE, "findings": {"F1": finding}}))
    assert grid.findings == {
        "F1": {
            "claim": F1["claim"],
            "paper": F1["paper"],
            "metric": "entropy",
            "window": [0.5, 1.0],
            "direction": "higher",
            "baseline": {"trainer.epsilon_high": 0.2, "trainer.num_iterations": 4},
            "variant": {"trainer.epsilon_high": 0.28, "trainer.num_iterations": 4},
            "scaled": "60 steps",
            "off_policy_only": False,
        }
    }
    # an int in a float field is that float, as in the grid's axes (so it selects the run 1.0)
    grid = load_grid(write(tmp_path, {**BASE, "findings": {"F": {**F1, "variant": {"epsilon_high": 1}}}}))
    assert grid.findings["F"]["variant"] == {"trainer.epsilon_high": 1.0}
    assert type(grid.findings["F"]["variant"]["trainer.epsilon_high"]) is float
    assert load_grid(write(tmp_path, BASE)).findings == {}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"direciton": "higher"}, ["findings.F1: unknown key 'direciton'.", "Did you mean 'direction'?"]),
        ({"window": [0.8, 0.5]}, ["findings.F1.window = [0.8, 0.5]", "0 <= a < b <= 1", "e.g. [0.5, 1.0]"]),
        ({"window": [0.0, 1.5]}, ["findings.F1.window = [0.0, 1.5]", "0 <= a < b <= 1"]),
        ({"window": 0.5}, ["findings.F1.window = 0.5", "give [a, b]"]),
        ({"window": [0.2, 0.2]}, ["findings.F1.window = [0.2, 0.2]"]),
        ({"window": ["0.5", "1e0"]}, ["findings.F1.window = ['0.5', '1e0']", "an entry is text", "bare"]),
        ({"direction": "up"}, ["findings.F1.direction = 'up'", "higher or lower", "direction: higher"]),
        ({"claim": ""}, ["findings.F1.claim = ''", "non-empty text", "claim:"]),
        ({"metric": 3}, ["findings.F1.metric = 3", "non-empty text", "metric: entropy"]),
        (
            {"baseline": "epsilon_high=0.2"},
            ["findings.F1.baseline = 'epsilon_high=0.2'", "non-empty mapping"],
        ),
        ({"variant": {}}, ["findings.F1.variant = {}", "non-empty mapping"]),
        ({"variant": {"seed": 1}}, ["findings.F1.variant.seed", "seed cannot select", "drop it"]),
        (
            {"variant": {"epsilon_hgh": 0.28}},
            ["findings.F1.variant: unknown key 'epsilon_hgh'", "epsilon_high"],
        ),
        (
            {"variant": {"epsilon_high": "0.28"}},
            ["findings.F1.variant: trainer.epsilon_high = '0.28'", "bare"],
        ),
        (
            {"variant": {"executor.nodes": 2}},
            ["findings.F1.variant: 'executor.nodes'", "not one of its settings"],
        ),
        ({"scaled": 3}, ["findings.F1.scaled = 3", "free text"]),
        ({"off_policy_only": "yes"}, ["findings.F1.off_policy_only = 'yes'", "true or false"]),
    ],
)
def test_each_bad_value_is_one_problem_naming_key_value_and_fix(tmp_path, change, expected):
    found = problems(write(tmp_path, {**BASE, "findings": {"F1": {**F1, **change}}}))
    assert len(found) == 1, found
    for part in expected:
        assert part in found[0], found[0]


def test_each_missing_required_key_is_named_with_what_to_write(tmp_path):
    found = problems(write(tmp_path, {**BASE, "findings": {"F1": {"paper": "x"}}}))
    assert len(found) == 6, found
    for key, example in [
        ("claim", "claim:"),
        ("metric", "metric: entropy"),
        ("window", "window: [0.5, 1.0]"),
        ("direction", "higher or lower"),
        ("baseline", "baseline: {"),
        ("variant", "variant: {"),
    ]:
        (line,) = [p for p in found if p.startswith(f"findings.F1.{key} is not set")]
        assert example in line, line


def test_every_problem_of_every_finding_is_listed_at_once(tmp_path):
    data = {
        **BASE,
        "findings": {
            "A": {**F1, "direction": "up", "window": [1, 0]},
            "B": {**F1, "variant": {"seed": 0}},
            "C": "no",
        },
        "report": {"x": "steps"},
    }
    found = problems(write(tmp_path, data))
    assert len(found) == 5, found
    assert [p.split(" ")[0].split(":")[0] for p in found] == [
        "report.x",
        "findings.A.window",
        "findings.A.direction",
        "findings.B.variant.seed",
        "findings.C",
    ]
    found = problems(write(tmp_path, {**BASE, "findings": ["F1"]}))
    assert found == ["findings must be a mapping of finding id -> {claim, paper, ...}, got list ['F1']."]


def test_findings_are_no_run_setting(tmp_path):
    with_findings = load_grid(write(tmp_path, {**BASE, "findings": {"F1": F1}}))
    without = load_grid(write(tmp_path, BASE, "h.yaml"))
    assert [r.run_id for r in expand(with_findings).runs] == [r.run_id for r in expand(without).runs]
    assert all("findings" not in r.settings for r in expand(with_findings).runs)
    found = problems(write(tmp_path, {**BASE, "grid": {**BASE["grid"], "findings.F1.metric": ["kl"]}}))
    assert any("is not a run setting" in p and "findings: section" in p for p in found), found
    with pytest.raises(SpecError) as e:
        load_grid(write(tmp_path, BASE), ["findings.F1.metric=kl"])
    assert "findings.F1.metric" in str(e.value) and "not a run setting" in str(e.value)


def test_an_included_finding_is_replaced_whole(tmp_path):
    base = {**BASE, "findings": {"F1": {**F1, "scaled": "from the base"}, "F2": {**F1, "metric": "kl"}}}
    write(tmp_path, base, "base.yaml")
    top = {
        "include": "base.yaml",
        "name": "top",
        "findings": {"F1": {**F1, "variant": {"epsilon_high": 0.28}}},
    }
    grid = load_grid(write(tmp_path, top, "top.yaml"))
    assert list(grid.findings) == ["F1", "F2"]
    assert grid.findings["F1"]["variant"] == {"trainer.epsilon_high": 0.28}  # not merged key by key
    assert grid.findings["F1"]["scaled"] == ""
    assert grid.findings["F2"]["metric"] == "kl"


# --- arms against the runs --------------------------------------------------------------------------


def plan_of(tmp_path, finding_map, **extra):
    return expand(load_grid(write(tmp_path, {**BASE, **extra, "findings": finding_map})))


def test_arms_select_the_runs_whose_settings_equal_every_selector_key(tmp_path):
    plan = plan_of(tmp_path, {"F1": F1})
    base = section.arm_runs(plan.runs, plan.grid.findings["F1"]["baseline"])
    var = section.arm_runs(plan.runs, plan.grid.findings["F1"]["variant"])
    assert [r.varying for r in base] == [
        {"seed": s, "trainer.epsilon_high": 0.2, "trainer.num_iterations": 4} for s in (0, 1, 2)
    ]
    assert [r.varying for r in var] == [
        {"seed": s, "trainer.epsilon_high": 0.28, "trainer.num_iterations": 4} for s in (0, 1, 2)
    ]
    run = plan.runs[0]
    assert section.selects(run, {"trainer.epsilon_high": 0.2})
    assert not section.selects(run, {"trainer.epsilon_high": 0.28})
    assert section.selects(run, {"trainer.epsilon": None})  # a key the run leaves unset is null
    assert not section.selects(run, {"trainer.epsilon": 0.2})
    assert section.selects(run, {"task.kwargs.max_digits": 1})
    assert findings.plan_problems(plan) == []


def test_a_selector_that_matches_no_run_names_the_key_and_the_values_the_grid_has(tmp_path):
    plan = plan_of(tmp_path, {"F1": {**F1, "variant": {"epsilon_high": 0.3, "num_iterations": 4}}})
    assert findings.plan_problems(plan) == [
        "findings.F1.variant: no run of the grid has trainer.epsilon_high = 0.3; the grid has "
        "trainer.epsilon_high = 0.2, 0.28. Use one of those values, or add 0.3 to the grid's axes."
    ]
    plan = plan_of(tmp_path, {"F1": {**F1, "baseline": {"epsilon": 0.2}}})
    (problem,) = findings.plan_problems(plan)
    assert "trainer.epsilon = 0.2" in problem and "the grid has trainer.epsilon = unset" in problem


def test_a_combination_no_run_has_names_the_values_that_do_occur(tmp_path):
    zipped = {"grid": {"seed": [0, 1]}, "zip": [{"epsilon_high": [0.2, 0.28], "num_iterations": [1, 4]}]}
    plan = plan_of(tmp_path, {"F1": F1}, **zipped)  # baseline (0.2, mu 4) is not in the zip
    assert findings.plan_problems(plan) == [
        "findings.F1.baseline: no run has all of epsilon_high=0.2, num_iterations=4; the runs with "
        "epsilon_high=0.2 have trainer.num_iterations = 1. Pick values that occur together in the grid."
    ]


def test_arms_that_share_a_run_are_refused(tmp_path):
    plan = plan_of(
        tmp_path, {"F1": {**F1, "baseline": {"num_iterations": 4}, "variant": {"epsilon_high": 0.28}}}
    )
    (problem,) = findings.plan_problems(plan)
    assert problem.startswith(
        "findings.F1: baseline (num_iterations=4) and variant (epsilon_high=0.28) share 3 run(s)"
    )
    assert "a run cannot be compared with itself" in problem
    assert "give both arms the keys num_iterations, epsilon_high with a different value" in problem


def test_plan_lists_findings_and_refuses_bad_arms_with_exit_2(tmp_path, capsys):
    path = write(tmp_path, {**BASE, "findings": {"F1": F1}})
    assert cli.main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert "findings (1):" in out
    assert "  F1_clip" not in out and "  F1: Under off-policy updates" in out
    assert "entropy over 50-100% of each run's steps, higher expected" in out
    assert "baseline epsilon_high=0.2, num_iterations=4: 3 run(s); variant epsilon_high=0.28" in out
    bad = {
        "F1": {**F1, "variant": {"epsilon_high": 0.3}},
        "F2": {**F1, "baseline": {"num_iterations": 4}, "variant": {"epsilon_high": 0.28}},
    }
    path = write(tmp_path, {**BASE, "findings": bad}, "bad.yaml")
    assert cli.main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"error: {path}: 2 problems:" in err
    assert "findings.F1.variant: no run of the grid" in err and "findings.F2: baseline" in err


def test_grid_json_records_each_arm_s_run_ids(tmp_path):
    plan = plan_of(tmp_path, {"F1": F1})
    record = plan_record(plan)
    assert json.loads(json.dumps(record)) == record
    arms = record["findings"]["F1"]["arms"]
    by_id = {r.run_id: r for r in plan.runs}
    assert len(arms["baseline"]) == len(arms["variant"]) == 3
    assert {by_id[r].varying["trainer.epsilon_high"] for r in arms["baseline"]} == {0.2}
    assert {by_id[r].varying["trainer.epsilon_high"] for r in arms["variant"]} == {0.28}
    assert {by_id[r].varying["trainer.num_iterations"] for r in [*arms["baseline"], *arms["variant"]]} == {4}
    assert record["findings"]["F1"]["metric"] == "entropy"
    assert plan_record(plan_of(tmp_path, {}))["findings"] == {}


def test_an_arm_may_name_its_sub_grid(tmp_path):
    """Two arms whose settings differ only through a profile (a control at learning rate 0 beside
    the grid's own rate) are told apart by their sub-grid."""
    data = {
        **BASE,
        "grid": {"seed": [0, 1]},
        "subgrids": {"baseline": {"set": {"loss_type": "grpo"}}, "frozen": {"set": {"learning_rate": 0.0}}},
    }
    finding = {
        **F1,
        "baseline": {"subgrid": "baseline"},
        "variant": {"subgrid": "frozen", "learning_rate": 0.0},
    }
    plan = expand(load_grid(write(tmp_path, {**data, "findings": {"F": finding}})))
    f = plan.grid.findings["F"]
    assert [r.get("trainer.learning_rate") for r in section.arm_runs(plan.runs, f["variant"])] == [0.0, 0.0]
    assert [r.subgrid for r in section.arm_runs(plan.runs, f["baseline"])] == ["baseline", "baseline"]
    assert findings.plan_problems(plan) == []
    wrong = {**finding, "variant": {"subgrid": "frozn"}}
    plan = expand(load_grid(write(tmp_path, {**data, "findings": {"F": wrong}})))
    (problem,) = findings.plan_problems(plan)
    assert problem == (
        'findings.F.variant.subgrid = "frozn": the grid has no sub-grid of that name; its sub-grids are '
        "baseline, frozen. Did you mean 'frozen'?"
    )
    with pytest.raises(SpecError, match="give the name of one of the grid's sub-grids"):
        load_grid(write(tmp_path, {**data, "findings": {"F": {**finding, "variant": {"subgrid": 3}}}}))


# --- hostile input: what each message must say -----------------------------------------------------


def test_a_subgrid_selector_in_a_grid_without_sub_grids_says_there_are_none(tmp_path):
    plan = plan_of(tmp_path, {"F1": {**F1, "variant": {"subgrid": "clip", "epsilon_high": 0.28}}})
    (problem,) = findings.plan_problems(plan)
    assert problem.startswith('findings.F1.variant.subgrid = "clip": the grid has no sub-grids')
    assert "drop subgrid from the arm" in problem
    assert "grid's axes" not in problem and 'subgrid = ""' not in problem


def test_a_subgrid_whose_runs_an_earlier_sub_grid_makes_is_explained(tmp_path):
    data = {
        **BASE,
        "grid": {"seed": [0, 1]},
        "subgrids": {
            "both": {"grid": {"loss_type": ["grpo", "dapo"]}},
            "grpo": {"set": {"loss_type": "grpo"}},
        },
    }
    finding = {**F1, "baseline": {"subgrid": "grpo"}, "variant": {"loss_type": "dapo"}}
    plan = expand(load_grid(write(tmp_path, {**data, "findings": {"F": finding}})))
    (problem,) = findings.plan_problems(plan)
    assert (
        'findings.F.baseline.subgrid = "grpo": every cell of sub-grid grpo is also a run of sub-grid both'
        in problem
    )


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_selector_value_is_refused_when_the_grid_loads(tmp_path, bad):
    found = problems(write(tmp_path, {**BASE, "findings": {"F1": {**F1, "variant": {"epsilon_high": bad}}}}))
    assert len(found) == 1 and "findings.F1.variant: trainer.epsilon_high = " in found[0], found
    assert "finite" in found[0] and "grid's axes" not in found[0]


def test_a_selector_of_a_default_says_null_selects_the_runs_that_leave_it_unset(tmp_path):
    plan = plan_of(tmp_path, {"F1": {**F1, "baseline": {"loss_type": "dapo"}}})
    (problem,) = findings.plan_problems(plan)
    assert "the grid has trainer.loss_type = unset (null selects the runs that leave it unset" in problem


def test_an_arm_emptied_by_a_profile_or_override_names_it(tmp_path, capsys):
    data = {**BASE, "profiles": {"quick": {"num_iterations": 1, "max_steps": 2}}}
    path = write(tmp_path, {**data, "findings": {"F1": F1}})
    assert cli.main(["plan", str(path), "--profile", "quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("--profile quick (trainer.num_iterations=1) applies before the arms select runs") == 2, (
        err
    )
    assert "max_steps" not in err  # only the setting an arm selects by is named
    assert cli.main(["plan", str(path), "-o", "grid.epsilon_high=[0.2]"]) == 2
    err = capsys.readouterr().err
    assert "findings.F1.variant: no run of the grid has trainer.epsilon_high = 0.28" in err
    assert "(-o grid.epsilon_high=[0.2] applies before the arms select runs" in err
    assert cli.main(["plan", str(path), "-o", "findings.F1.window=[0,1]"]) == 2
    assert "edit the top-level findings: section" in capsys.readouterr().err


def test_plan_warns_when_an_arm_has_fewer_than_two_runs(tmp_path, capsys):
    path = write(tmp_path, {**BASE, "grid": {**BASE["grid"], "seed": [0]}, "findings": {"F1": F1}})
    assert cli.main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert "baseline epsilon_high=0.2, num_iterations=4: 1 run(s)" in out
    assert "warning: an arm with fewer than 2 runs gets no verdict" in out
    assert cli.main(["plan", str(write(tmp_path, {**BASE, "findings": {"F1": F1}}, "ok.yaml"))]) == 0
    assert "fewer than 2 runs" not in capsys.readouterr().out


def test_a_finding_of_an_included_file_is_named_there_and_null_drops_it(tmp_path, capsys):
    shared = {k: v for k, v in BASE.items() if k not in ("grid", "name")}
    write(tmp_path, {**shared, "findings": {"F1": F1, "F2": {**F1, "metric": "kl"}}}, "base.yaml")
    other_axes = {
        "include": "base.yaml",
        "name": "top",
        "grid": {"seed": [0, 1], "loss_type": ["grpo", "dapo"]},
    }
    path = write(tmp_path, other_axes, "top.yaml")
    assert cli.main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"(findings.F1 comes from the included file {tmp_path / 'base.yaml'}: fix it there" in err
    assert "or drop it from this grid with findings: {F1: null}" in err
    dropped = write(tmp_path, {**other_axes, "findings": {"F1": None, "F2": None}}, "top2.yaml")
    assert load_grid(dropped).findings == {}
    assert cli.main(["plan", str(dropped)]) == 0
    # null with nothing to drop: the usual problem, saying what null does
    found = problems(write(tmp_path, {**BASE, "findings": {"F1": None}}, "lone.yaml"))
    assert len(found) == 1 and "null drops a finding of an included file" in found[0], found
    # a partial finding over an included one is replaced whole: the problem says so
    partial = write(
        tmp_path, {"include": "base.yaml", "name": "p", "findings": {"F1": {"window": [0, 1]}}}, "p.yaml"
    )
    found = problems(partial)
    assert found and all("replaces the one of the included file" in p for p in found), found


def test_plan_warns_of_a_metric_name_close_to_a_known_one(tmp_path):
    assert findings.metric_warning("completions/mean_length_incorrect") is None
    assert findings.metric_warning("entropy") is None
    assert findings.metric_warning("gmpo/ratio_mean") is None  # a plugin's: unknown, not close
    warning = findings.metric_warning("completions/mean_lenght_incorrect")
    assert "did you mean 'completions/mean_length_incorrect'" in warning
    plan = plan_of(tmp_path, {"F1": {**F1, "metric": "entropyy"}})
    assert any("did you mean 'entropy'" in line for line in findings.plan_lines(plan))


# --- measure: to_target and from_start --------------------------------------------------------------

T1 = {
    **F1,
    "claim": "With epsilon_high = 0.28 the reward reaches the baseline's final level in fewer steps.",
    "metric": "eval/accuracy",
    "window": [0.9, 1.0],
    "direction": "lower",
    "measure": "to_target",
    "target": "baseline",
}
S1 = {
    **F1,
    "claim": "Training raises eval accuracy above the starting policy's.",
    "metric": "eval/pass@16",
    "direction": "higher",
    "measure": "from_start",
    "baseline": "start",
}


def test_the_new_measures_are_checked_and_normalised(tmp_path):
    grid = load_grid(write(tmp_path, {**BASE, "findings": {"T": T1, "S": S1}}))
    t, s = grid.findings["T"], grid.findings["S"]
    assert list(t) == [*section.FINDING_KEYS[:9], "measure", "target", "x"]
    assert (t["measure"], t["target"], t["x"], t["window"]) == ("to_target", "baseline", "step", [0.9, 1.0])
    assert (s["measure"], s["baseline"], s["metric"]) == ("from_start", "start", "eval/pass@16")
    assert "target" not in s and "x" not in s
    stated = {**T1, "target": 1, "x": "tokens"}
    del stated["window"]
    grid = load_grid(write(tmp_path, {**BASE, "findings": {"T": stated}}))
    assert grid.findings["T"]["target"] == 1.0 and type(grid.findings["T"]["target"]) is float
    assert "window" not in grid.findings["T"] and grid.findings["T"]["x"] == "tokens"
    # measure: window written out is today's finding, key for key
    plain = load_grid(write(tmp_path, {**BASE, "findings": {"F1": {**F1, "measure": "window"}}}))
    assert plain.findings == load_grid(write(tmp_path, {**BASE, "findings": {"F1": F1}})).findings


def _without(d: dict, key: str) -> dict:
    return {k: v for k, v in d.items() if k != key}


@pytest.mark.parametrize(
    ("finding", "expected"),
    [
        (
            {**T1, "measure": "fastest"},
            ["findings.F1.measure = 'fastest'", "window (the default", "to_target", "from_start"],
        ),
        ({**T1, "measure": "to_targt"}, ["findings.F1.measure = 'to_targt'", "Did you mean 'to_target'"]),
        ({**T1, "target": "0.6"}, ["findings.F1.target = '0.6'", "baseline", "write it bare"]),
        ({**T1, "target": True}, ["findings.F1.target = True", "a finite number"]),
        (_without(T1, "target"), ["findings.F1.target is not set", "target: baseline", "target: 0.6"]),
        ({**T1, "x": "time"}, ["findings.F1.x = 'time'", "step", "tokens", "x: tokens"]),
        ({**T1, "target": 0.6}, ["findings.F1.window = [0.9, 1.0]", "no window is read", "target: baseline"]),
        (_without(T1, "window"), ["findings.F1.window is not set: with target: baseline", "[0.9, 1.0]"]),
        ({**T1, "baseline": "start"}, ["findings.F1.baseline = 'start'", "add measure: from_start"]),
        ({**T1, "off_policy_only": True}, ["findings.F1.off_policy_only = true", "only measure: window"]),
        ({**F1, "target": 0.6}, ["findings.F1.target = 0.6", "only with measure: to_target", "drop it"]),
        ({**F1, "x": "tokens"}, ["findings.F1.x = 'tokens'", "only with measure: to_target"]),
        ({**F1, "baseline": "start"}, ["findings.F1.baseline = 'start'", "from_start only"]),
        (
            {**S1, "baseline": {"epsilon_high": 0.2}},
            [
                "findings.F1.baseline = {'epsilon_high': 0.2}",
                "its own starting policy",
                "write baseline: start",
            ],
        ),
        (
            _without(S1, "baseline"),
            ["findings.F1.baseline is not set: with measure: from_start", "baseline: start"],
        ),
        (
            {**S1, "metric": "reward"},
            ["findings.F1.metric = 'reward'", "eval/ metrics only", "eval/accuracy"],
        ),
        ({**S1, "target": "baseline"}, ["findings.F1.target = 'baseline'", "only with measure: to_target"]),
        ({**S1, "off_policy_only": True}, ["findings.F1.off_policy_only = true", "drop it"]),
        (_without(S1, "window"), ["findings.F1.window is not set", "window: [0.5, 1.0]"]),
    ],
)
def test_each_bad_measure_key_is_one_problem_naming_key_value_and_fix(tmp_path, finding, expected):
    found = problems(write(tmp_path, {**BASE, "findings": {"F1": finding}}))
    assert len(found) == 1, found
    for part in expected:
        assert part in found[0], found[0]


def test_every_problem_of_a_new_measure_is_listed_at_once(tmp_path):
    bad = {**T1, "target": "high", "x": "seconds", "baseline": "start", "off_policy_only": True}
    found = problems(
        write(tmp_path, {**BASE, "findings": {"T": bad, "S": {**S1, "metric": "kl", "x": "step"}}})
    )
    assert [p.split(" ")[0] for p in found] == [
        "findings.S.x",  # the file's order (write() sorts the keys)
        "findings.S.metric",
        "findings.T.target",
        "findings.T.x",
        "findings.T.baseline",
        "findings.T.off_policy_only",
    ], found
    assert "write it bare" not in found[2]  # "high" is no number in quotes


def test_a_from_start_finding_has_one_arm_at_plan_and_in_grid_json(tmp_path, capsys):
    plan = plan_of(tmp_path, {"S": S1, "T": T1})
    assert findings.plan_problems(plan) == []
    record = plan_record(plan)["findings"]
    variant = [r.run_id for r in section.arm_runs(plan.runs, plan.grid.findings["S"]["variant"])]
    assert len(variant) == 3 and record["S"]["arms"] == {"baseline": variant, "variant": variant}
    assert record["S"]["baseline"] == "start" and record["T"]["target"] == "baseline"
    assert record["T"]["arms"]["baseline"] != record["T"]["arms"]["variant"]
    lines = findings.plan_lines(plan)
    assert (
        "    eval/pass@16 over 50-100% of each run's steps minus its own start (eval_start.json), higher "
        "expected; variant epsilon_high=0.28, num_iterations=4: 3 run(s)"
    ) in lines
    assert any(
        line.startswith(
            "    steps until eval/accuracy first reaches the baseline's mean over 90-100% of its runs'"
        )
        and "censored at its last step), lower expected; baseline epsilon_high=0.2" in line
        for line in lines
    ), lines
    # an empty variant arm is still named; a baseline of runs is not looked for
    plan = plan_of(tmp_path, {"S": {**S1, "variant": {"epsilon_high": 0.3}}})
    (problem,) = findings.plan_problems(plan)
    assert problem.startswith("findings.S.variant: no run of the grid has trainer.epsilon_high = 0.3")
    path = write(tmp_path, {**BASE, "harness": {"sampled_eval_n": 16}, "findings": {"S": S1}}, "s.yaml")
    assert cli.main(["plan", str(path)]) == 0
    assert "minus its own start" in capsys.readouterr().out


def test_plan_warns_when_runs_a_new_measure_reads_do_not_evaluate(tmp_path):
    plan = plan_of(tmp_path, {"S": S1, "T": T1}, harness={"eval_steps": 0})
    warnings = [line for line in findings.plan_lines(plan) if "harness.eval_steps = 0" in line]
    assert warnings == [
        "    warning: 3 of the finding's 3 run(s) set harness.eval_steps = 0, so they write no eval_start.json "
        "and no eval/ metric and will have no value; set harness.eval_steps > 0 for them.",
        "    warning: 6 of the finding's 6 run(s) set harness.eval_steps = 0, so they write no eval/ metric and "
        "will have no value; set harness.eval_steps > 0 for them.",
    ]
    assert not any(
        "eval_steps" in line for line in findings.plan_lines(plan_of(tmp_path, {"S": S1, "T": T1}))
    )


# --- arms whose runs can never give the finding a value -------------------------------------------


def _value_errors(plan) -> list[str]:
    """The errors of the plan's validation that name a finding (harness.config.finding_values)."""
    from harness.config.validate import validate_plan

    return [f.message for f in validate_plan(plan).errors if f.message.startswith("findings.")]


OFF = {**F1, "off_policy_only": True}


def test_off_policy_only_on_arms_whose_runs_are_all_on_policy_is_refused(tmp_path, capsys):
    on = {
        "baseline": {"epsilon_high": 0.2, "num_iterations": 1},
        "variant": {"epsilon_high": 0.28, "num_iterations": 1},
    }
    plan = plan_of(tmp_path, {"F1": {**OFF, **on}})
    (error,) = _value_errors(plan)
    assert error.startswith(
        "findings.F1.baseline (epsilon_high=0.2, num_iterations=1) and findings.F1.variant (epsilon_high=0.28, "
        "num_iterations=1): no run of these arms can give the finding a value, so it can have no verdict: "
        "off_policy_only = true counts only the steps with off_policy == 1, and every run is on-policy "
        "(trainer.gradient_accumulation_steps = 1, trainer.steps_per_generation = 1, trainer.num_iterations = 1: "
    ), error
    assert "TRL reuses the current log-probs as the old ones and no step is off-policy" in error
    assert error.endswith(
        "give them off-policy steps (e.g. num_iterations: 2, which makes steps_per_generation x "
        "num_iterations exceed gradient_accumulation_steps), or drop off_policy_only."
    )
    path = write(tmp_path, {**BASE, "findings": {"F1": {**OFF, **on}}})
    assert cli.main(["plan", str(path)]) == 2
    assert (
        "findings.F1.baseline (epsilon_high=0.2, num_iterations=1) and findings.F1.variant"
        in capsys.readouterr().err
    )
    # one arm on-policy: that arm alone is named; off-policy arms (num_iterations 4) are accepted
    plan = plan_of(tmp_path, {"F1": {**OFF, "baseline": on["baseline"]}})
    (error,) = _value_errors(plan)
    assert error.startswith(
        "findings.F1.baseline (epsilon_high=0.2, num_iterations=1): no run of the arm can"
    )
    assert _value_errors(plan_of(tmp_path, {"F1": OFF})) == []
    assert _value_errors(plan_of(tmp_path, {"F1": {**F1, **on}})) == []  # every row counts


def test_a_refused_num_iterations_at_its_default_is_not_blamed_on_the_finding(tmp_path, capsys):
    """num_iterations written as text is refused and left out at TRL's 1: the cells are checked
    without it, and the on-policy runs that default makes are not said to be the finding's fault."""
    data = {**BASE, "grid": {"seed": [0, 1], "epsilon_high": [0.2, 0.28]}}
    data["trainer"] = {**BASE["trainer"], "num_iterations": "4"}
    arms = {"baseline": {"epsilon_high": 0.2}, "variant": {"epsilon_high": 0.28}}
    path = write(tmp_path, {**data, "findings": {"F1": {**OFF, **arms}}})
    assert cli.main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert "trainer.num_iterations = '4' is read by YAML as a string" in err and "1 problem" in err, err
    assert "off_policy_only" not in err


def test_off_policy_follows_trls_rule_not_num_iterations_alone(tmp_path):
    """gradient_accumulation_steps % (steps_per_generation x num_iterations): with 4 accumulation
    steps and 1 step per generation, 2 iterations are still on-policy; steps_per_generation above
    the accumulation makes 1 iteration off-policy."""
    grid = {"grid": {"seed": [0, 1], "epsilon_high": [0.2, 0.28]}}
    arms = {"baseline": {"epsilon_high": 0.2}, "variant": {"epsilon_high": 0.28}}
    trainer = {
        **BASE["trainer"],
        "gradient_accumulation_steps": 4,
        "steps_per_generation": 1,
        "num_iterations": 2,
    }
    (error,) = _value_errors(plan_of(tmp_path, {"F1": {**OFF, **arms}}, **grid, trainer=trainer))
    assert (
        "trainer.gradient_accumulation_steps = 4, trainer.steps_per_generation = 1, trainer.num_iterations = 2"
        in error
    )
    assert "e.g. num_iterations: 5" in error
    trainer = {**BASE["trainer"], "gradient_accumulation_steps": 2, "steps_per_generation": 4}
    assert _value_errors(plan_of(tmp_path, {"F1": {**OFF, **arms}}, **grid, trainer=trainer)) == []


def test_a_dose_level_whose_runs_are_on_policy_is_named_by_its_value(tmp_path):
    dose = {
        **{k: F1[k] for k in ("claim", "paper", "metric", "window", "direction")},
        "dose": {"key": "num_iterations", "values": [1, 4]},
        "arms": {"epsilon_high": 0.2},
        "off_policy_only": True,
    }
    (error,) = _value_errors(plan_of(tmp_path, {"D": dose}))
    assert error.startswith(
        "findings.D.dose.values[0] (epsilon_high=0.2, num_iterations=1): no run of the arm"
    )
    assert "off_policy_only = true" in error


@pytest.mark.parametrize(
    ("finding", "extra", "said"),
    [
        (
            {**F1, "metric": "eval/accuracy"},
            {"harness": {"eval_steps": 0}},
            "metric eval/accuracy is logged at the eval steps only, and every run sets harness.eval_steps = 0; "
            "set harness.eval_steps > 0 for them, or read a metric every step logs (e.g. reward).",
        ),
        (
            {**S1, "metric": "eval/accuracy"},
            {"harness": {"eval_steps": 0}},
            "metric eval/accuracy is logged at the eval steps only (as is a from_start finding's start, "
            "eval_start.json, written only where a run evaluates), and every run sets harness.eval_steps = 0; "
            "set harness.eval_steps > 0 for them.",
        ),
        (
            S1,
            {"harness": {"eval_steps": 2}},
            "no run records metric eval/pass@16: the sampled eval is off in every one (harness.sampled_eval_n = "
            "0, or harness.eval_steps = 0). Set harness.sampled_eval_n > 0",
        ),
        (
            {**F1, "metric": "dynamic_sampling/groups_kept"},
            {},
            "metric dynamic_sampling/groups_kept is logged only by runs with dynamic sampling on, and every run "
            "has dynamic_sampling.enable = false; set dynamic_sampling.enable: true for them, or read another metric.",
        ),
        (
            {**F1, "metric": "rewards/format/mean"},
            {},
            "metric rewards/format/mean is logged only by runs whose task.rewards name format, and every run names "
            "[correctness]; add format to their task.rewards",
        ),
    ],
    ids=["eval-off", "from-start-eval-off", "sampled-off", "dynamic-sampling-off", "reward-absent"],
)
def test_a_metric_the_arms_runs_never_log_is_refused(tmp_path, finding, extra, said):
    (error,) = _value_errors(plan_of(tmp_path, {"F": finding}, **extra))
    arms = "findings.F.variant (" if finding.get("measure") == "from_start" else "findings.F.baseline ("
    assert error.startswith(arms) and "can give the finding a value, so it can have no verdict: " in error
    assert said in error, error


def test_an_arm_some_of_whose_runs_evaluate_is_only_warned_about(tmp_path):
    """One arm without eval is refused alone; an arm with one evaluating run keeps its plan warning."""
    sub = {
        "off": {"set": {"harness.eval_steps": 0, "epsilon_high": 0.2}, "grid": {"seed": [0, 1]}},
        "on": {"set": {"epsilon_high": 0.28}, "grid": {"seed": [0, 1]}},
        "mixed": {"set": {"epsilon_high": 0.3}, "zip": [{"seed": [0, 1], "harness.eval_steps": [0, 5]}]},
    }
    grid = {k: v for k, v in BASE.items() if k != "grid"}
    path = write(
        tmp_path,
        {
            **grid,
            "subgrids": sub,
            "findings": {
                "A": {
                    **F1,
                    "metric": "eval/accuracy",
                    "baseline": {"subgrid": "off"},
                    "variant": {"subgrid": "on"},
                },
                "B": {
                    **F1,
                    "metric": "eval/accuracy",
                    "baseline": {"subgrid": "mixed"},
                    "variant": {"subgrid": "on"},
                },
            },
        },
    )
    plan = expand(load_grid(path))
    (error,) = _value_errors(plan)
    assert error.startswith(
        'findings.A.baseline (subgrid="off"): no run of the arm can give the finding a value'
    )
    assert "every run sets harness.eval_steps = 0" in error
    warnings = [line for line in findings.plan_lines(plan) if "harness.eval_steps = 0" in line]
    assert len(warnings) == 2 and "1 of the finding's 4 run(s)" in warnings[1]
