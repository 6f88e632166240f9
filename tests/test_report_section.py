"""The top-level ``report:`` section of a grid file: how the report is laid out, never a run setting."""

import json
import math
from pathlib import Path

import pytest
import yaml

from harness import layout
from harness.config.grid import expand, plan_record
from harness.config.spec import load_grid
from harness.settings.schema import SpecError

BASE = {
    "name": "g",
    "task": {"name": "chain_sum", "kwargs": {"min_terms": 2, "max_terms": 2, "max_digits": 1}},
    "trainer": {"max_steps": 3, "per_device_train_batch_size": 8, "num_generations": 4},
    "grid": {"epsilon": [0.2, 0.3], "task.kwargs.max_digits": [1, 2]},
}


def write(tmp_path: Path, data: dict, name: str = "g.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def problems(path, overrides=(), profile=None) -> list[str]:
    with pytest.raises(SpecError) as e:
        load_grid(path, list(overrides), profile=profile)
    assert str(path) in str(e.value)
    return e.value.problems


def test_report_section_is_checked_and_normalised(tmp_path):
    report = {
        "hue": ["epsilon", "trainer.epsilon_high"],
        "col": "task.kwargs.max_digits",
        "row": "seed",
        "baseline": "epsilon=0.2 ,max_digits=1",
        "x": "tokens",
        "smoothing": {"window": 5},
        "metric": "eval/accuracy",
        "curves": ["reward", "eval/accuracy"],
        "metrics": ["kl", "clip_ratio/region_mean"],
        "target": 1,
        "lead": "final",
        "seeds": True,
    }
    grid = load_grid(write(tmp_path, {**BASE, "report": report}))
    assert grid.report == {
        "hue": ["trainer.epsilon", "trainer.epsilon_high"],
        "col": ["task.kwargs.max_digits"],
        "row": ["seed"],
        "baseline": "epsilon=0.2, max_digits=1",  # kept as written: it may be a variant's label
        "x": "tokens",
        "smoothing": {"window": 5},
        "metric": "eval/accuracy",
        "curves": ["reward", "eval/accuracy"],
        "metrics": ["kl", "clip_ratio/region_mean"],
        "target": 1.0,
        "lead": "final",
        "seeds": True,
    }
    assert json.loads(json.dumps(grid.report)) == grid.report
    for given, expected in [
        ("auto", "auto"),
        ("none", "none"),
        ({"ema": 1}, {"ema": 1.0}),
        ({"ema": 0.3}, {"ema": 0.3}),
    ]:
        grid = load_grid(write(tmp_path, {**BASE, "report": {"smoothing": given, "hue": "loss_type"}}))
        assert grid.report == {"hue": ["trainer.loss_type"], "smoothing": expected}
    assert load_grid(write(tmp_path, BASE)).report == {}
    assert load_grid(write(tmp_path, {**BASE, "report": None})).report == {}
    assert load_grid(write(tmp_path, {**BASE, "report": {"hue": None, "x": "step"}})).report == {"x": "step"}


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        ({"huee": "loss_type"}, ["report.huee", "unknown report key 'huee'", "'hue'", "Valid: hue, col"]),
        ({"hue": ["epsilon", "epsiln"]}, ["report.hue", "'epsiln'", "Did you mean 'epsilon'"]),
        ({"col": "trainer.max_stepz"}, ["report.col", "trainer.max_stepz", "'max_steps'"]),
        ({"hue": "executor.gpus_per_node"}, ["report.hue", "executor.gpus_per_node", "name a run setting"]),
        ({"hue": ["loss_type", "trainer.loss_type"]}, ["report.hue", "trainer.loss_type is given twice"]),
        ({"row": []}, ["report.row = []", "non-empty list", "null for none"]),
        ({"x": "epoch"}, ["report.x = 'epoch'", "step, tokens, time", "x: step"]),
        ({"smoothing": {"window": 0}}, ["report.smoothing.window = 0", "integer >= 1", "{window: 5}"]),
        ({"smoothing": {"window": 2.5}}, ["report.smoothing.window = 2.5", "integer >= 1"]),
        ({"smoothing": {"ema": 0}}, ["report.smoothing.ema = 0", "0 < A <= 1"]),
        ({"smoothing": {"ema": 1.5}}, ["report.smoothing.ema = 1.5", "0 < A <= 1"]),
        ({"smoothing": "heavy"}, ["report.smoothing = 'heavy'", "auto, none, {window: N}"]),
        ({"smoothing": {"window": 3, "ema": 0.5}}, ["report.smoothing = ", "auto, none"]),
        ({"target": math.nan}, ["report.target = nan", "finite number", "target: 0.9"]),
        ({"target": "high"}, ["report.target = 'high'", "finite number"]),
        ({"target": "1e-3"}, ["report.target = '1e-3'", "write it bare: target: 0.001"]),
        ({"target": True}, ["report.target = True", "finite number"]),
        ({"lead": "bogus"}, ["report.lead = 'bogus'", "curves, final", "lead: curves"]),
        ({"metrics": "reward"}, ["report.metrics = 'reward'", "list of metric names", "[reward]"]),
        ({"curves": ["reward", 3]}, ["report.curves = ['reward', 3]", "list of metric names"]),
        ({"curves": ["reward", "reward"]}, ["report.curves", "reward is listed more than once"]),
        ({"metric": ["reward"]}, ["report.metric = ['reward']", "a metric name"]),
        ({"seeds": "yes"}, ["report.seeds = 'yes'", "true or false"]),
        ({"baseline": 0.2}, ["report.baseline = 0.2", "non-empty string", "quoted"]),
        ({"baseline": "epsilon=0.2, =3"}, ["report.baseline", "'=3' is not KEY=VALUE"]),
        ({"baseline": "epsiln=0.2"}, ["report.baseline", "'epsiln'", "'epsilon'"]),
    ],
)
def test_each_bad_report_value_is_one_problem_naming_key_value_and_fix(tmp_path, report, expected):
    (msg,) = problems(write(tmp_path, {**BASE, "report": report}))
    for part in expected:
        assert part in msg, (part, msg)


def test_report_that_is_not_a_mapping_is_one_clear_problem(tmp_path):
    (msg,) = problems(write(tmp_path, {**BASE, "report": ["hue", "loss_type"]}))
    assert msg.startswith("report must be a mapping of layout keys (hue, col, row") and "list" in msg


def test_every_report_problem_is_listed_with_the_others(tmp_path):
    data = {
        **BASE,
        "trainer": {**BASE["trainer"], "learning_rat": 1e-3},
        "report": {"x": "epoch", "lead": "bogus", "hue": "epsiln", "huee": 1},
    }
    msgs = problems(write(tmp_path, data))
    assert len(msgs) == 5
    for where in ("trainer.learning_rat", "report.x", "report.lead", "report.hue", "report.huee"):
        assert any(m.startswith(where) or f"'{where}'" in m for m in msgs), (where, msgs)


def test_report_keys_are_not_run_settings(tmp_path):
    (msg,) = problems(write(tmp_path, {**BASE, "grid": {"report.x": ["step", "tokens"]}}))
    assert "grid.report.x" in msg and "not a run setting" in msg and "report: section" in msg


def test_overrides_and_profiles_set_report_keys_checked_the_same_way(tmp_path):
    data = {
        **BASE,
        "report": {"hue": "epsilon", "x": "step"},
        "profiles": {
            "quick": {"report.hue": "loss_type", "seed": 1},
            "nested": {"report": {"lead": "final", "smoothing": {"ema": 0.5}}},
            "bad": {"report.hue": "loss_typ"},
        },
    }
    path = write(tmp_path, data)
    assert load_grid(path, ["report.x=tokens"]).report == {"hue": ["trainer.epsilon"], "x": "tokens"}
    grid = load_grid(path, [], profile="quick")
    assert grid.report == {"hue": ["trainer.loss_type"], "x": "step"}
    assert ("report.hue", "loss_type") in grid.profile_settings
    grid = load_grid(path, ["report.smoothing=none"], profile="nested")
    assert grid.report == {"hue": ["trainer.epsilon"], "x": "step", "smoothing": "none", "lead": "final"}
    (msg,) = problems(path, profile="bad")
    assert msg.startswith("profiles.bad.report.hue: unknown key 'loss_typ'") and "'loss_type'" in msg
    (msg,) = problems(path, ["report.target=.nan"])
    assert msg.startswith("-o report.target = nan") and "finite number" in msg
    (msg,) = problems(path, ["report.x=epoch"])
    assert msg.startswith("-o report.x = 'epoch'") and "-o report.x=step" in msg
    (msg,) = problems(path, ["report.colour=loss_type"])
    assert msg.startswith("-o report.colour: unknown report key 'colour'") and "Valid:" in msg
    (msg,) = problems(path, ["report.smoothing.window=3"])
    assert "no sub-keys" in msg and "report.smoothing={window: 5}" in msg
    (msg,) = problems(path, ["report=tokens"])
    assert msg.startswith("-o report = 'tokens'") and "report.KEY=VALUE" in msg


def test_run_ids_and_run_configs_do_not_depend_on_the_report_section(tmp_path):
    plain = expand(load_grid(write(tmp_path, BASE, "plain.yaml")))
    report = {"hue": ["epsilon"], "col": "task.kwargs.max_digits", "x": "tokens", "target": 0.5}
    laid_out = expand(load_grid(write(tmp_path, {**BASE, "report": report}, "laid_out.yaml")))
    assert len(plain.runs) == 4
    assert [r.run_id for r in laid_out.runs] == [r.run_id for r in plain.runs]
    assert [r.settings for r in laid_out.runs] == [r.settings for r in plain.runs]
    assert all("report" not in r.settings for r in laid_out.runs)
    assert laid_out.varying_keys == plain.varying_keys


def test_grid_file_records_the_report_layout(tmp_path):
    report = {"hue": "epsilon", "smoothing": {"window": 3}, "curves": ["reward"]}
    plan = expand(load_grid(write(tmp_path, {**BASE, "report": report}), ["report.x=time"]))
    layout.write_grid(tmp_path / "out", plan_record(plan))
    written = json.loads((tmp_path / "out" / "grid.json").read_text())
    assert written["report"] == {
        "hue": ["trainer.epsilon"],
        "x": "time",
        "smoothing": {"window": 3},
        "curves": ["reward"],
    }
    assert written["run_ids"] == [r.run_id for r in plan.runs]
    layout.write_grid(tmp_path / "plain", plan_record(expand(load_grid(write(tmp_path, BASE, "plain.yaml")))))
    assert json.loads((tmp_path / "plain" / "grid.json").read_text())["report"] == {}


def test_include_inherits_the_report_section_and_overrides_key_by_key(tmp_path):
    base_report = {"hue": "epsilon", "x": "tokens", "smoothing": {"window": 5}, "target": 0.5}
    write(tmp_path, {**BASE, "report": base_report}, "base.yaml")
    child = write(tmp_path, {"include": "base.yaml", "name": "child", "report": {"x": "time"}}, "child.yaml")
    grid = load_grid(child)
    assert grid.report == {"hue": ["trainer.epsilon"], "x": "time", "smoothing": {"window": 5}, "target": 0.5}
    # smoothing is one choice: the including file's replaces the included one, not merged with it
    data = {"include": "base.yaml", "report": {"smoothing": {"ema": 0.2}, "target": None}}
    grid = load_grid(write(tmp_path, data, "ema.yaml"))
    assert grid.report == {"hue": ["trainer.epsilon"], "x": "tokens", "smoothing": {"ema": 0.2}}
