"""The typed schema: each section checks its own fields, a run holds typed sections built from the
settings its id hashes, and expansion is pure (numbers are coerced when the grid is loaded)."""

from __future__ import annotations

import builtins
import dataclasses
import pickle

import pytest
import yaml

from harness.config.grid import expand
from harness.config.spec import load_grid
from harness.config.validate import validate_plan
from harness.settings import schema
from harness.settings.runs import RunSpec
from harness.settings.schema import (
    ExecutorSettings,
    HarnessSettings,
    SpecError,
    TaskSpec,
    TinyModelSpec,
    canonical_json,
    run_id_of,
)

SETTINGS = {
    "seed": 3,
    "model": "tiny",
    "task": {"name": "chain_sum", "kwargs": {"max_digits": 1}, "train_size": 64},
    "tiny": {"sft_steps": 5},
    "trainer": {"max_steps": 2, "loss_type": "dapo", "epsilon": 0.2, "seed": 3},
    "harness": {"eval_steps": 0},
}


def problems_of(cls, **values) -> list[str]:
    with pytest.raises(SpecError) as e:
        cls(**values)
    return e.value.problems


@pytest.mark.parametrize(
    ("cls", "values", "expected"),
    [
        (TaskSpec, {"name": "chain_sum", "train_size": 0}, ["task.train_size = 0 must be >= 1."]),
        (TaskSpec, {"name": "chain_sum", "template": "plain"}, ["task.template = 'plain' is not one of"]),
        (TaskSpec, {"name": "chain_sum", "kwargs": {"size": 4}}, ["task.kwargs = {'size': 4} must not set"]),
        (TaskSpec, {"name": " "}, ["task.name = ' ' must name a reasoning-gym dataset"]),
        (TinyModelSpec, {"num_layers": 0}, ["tiny.num_layers = 0 must be >= 1."]),
        (TinyModelSpec, {"sft_lr": float("nan")}, ["tiny.sft_lr = nan must be a finite number > 0."]),
        (
            TinyModelSpec,
            {"num_heads": 3},
            ["tiny.hidden_size = 128 must be a multiple of tiny.num_heads = 3."],
        ),
        (
            TinyModelSpec,
            {"num_kv_heads": 3},
            ["tiny.num_heads = 4 must be a multiple of tiny.num_kv_heads = 3."],
        ),
        (HarnessSettings, {"flush_every": 0}, ["harness.flush_every = 0 must be >= 1."]),
        (HarnessSettings, {"device": "gpu"}, ["harness.device = 'gpu' is not one of cpu, cuda, auto"]),
        (HarnessSettings, {"threads": 0}, ["harness.threads = 0 must be >= 1 (or unset)."]),
        (ExecutorSettings, {"timeout_min": 0}, ["executor.timeout_min = 0 must be > 0 minutes."]),
        (
            ExecutorSettings,
            {"setup": ["ok", 3]},
            ["executor.setup = ['ok', 3] must be a list of shell lines"],
        ),
        (
            ExecutorSettings,
            {"name": "cloud", "nodes": 0, "gpus_per_node": -1},
            ["executor.name = 'cloud'", "executor.nodes = 0", "executor.gpus_per_node = -1"],
        ),
    ],
)
def test_each_section_names_every_broken_field(cls, values, expected):
    problems = problems_of(cls, **values)
    assert len(problems) == len(expected), problems
    for got, want in zip(problems, expected, strict=True):
        assert got.startswith(want), (got, want)


def test_relations_wait_for_the_fields_they_combine():
    # num_heads = 0 is the field's own problem; the multiple-of rule would divide by it
    assert problems_of(TinyModelSpec, num_heads=0) == ["tiny.num_heads = 0 must be >= 1."]


def test_defaults_pass_their_own_rules():
    for cls in (TinyModelSpec, HarnessSettings, ExecutorSettings):
        assert cls().problems() == []
    assert TaskSpec("chain_sum").problems() == []


def test_every_checked_default_is_declared_beside_its_rule():
    """A rule sits on its field: no section keeps a separate list of checked names."""
    for cls in (TaskSpec, TinyModelSpec, HarnessSettings, ExecutorSettings):
        checked = [f.name for f in dataclasses.fields(cls) if f.metadata.get("checks")]
        assert checked, cls


def test_build_names_unknown_and_missing_keys():
    problems: list[str] = []
    assert TaskSpec.build({"kwargs": {}}, problems) is None
    assert problems == [
        "task.name is not set: name a reasoning-gym dataset, e.g. task: {name: chain_sum} "
        "(or include: ablations/base.yaml)."
    ]
    problems = []
    assert HarnessSettings.build({"eval_stepz": 1}, problems) is None
    assert problems[0].startswith("harness: unknown key 'eval_stepz'; HarnessSettings has eval_steps")


def test_a_run_holds_typed_sections_and_hashes_its_settings():
    run = RunSpec(grid="g", settings=SETTINGS)
    assert run.run_id == run_id_of(SETTINGS)
    assert canonical_json(run.to_json()) == canonical_json(SETTINGS)
    assert run.task == TaskSpec("chain_sum", {"max_digits": 1}, train_size=64)
    assert run.tiny == TinyModelSpec(sft_steps=5)
    assert run.harness == HarnessSettings(eval_steps=0)
    assert run.seed == 3 and run.model == "tiny"
    assert run.trainer["loss_type"] == "dapo"
    with pytest.raises(TypeError):
        run.trainer["loss_type"] = "grpo"  # read-only
    assert run.get("task.kwargs.max_digits") == 1


def test_a_run_does_not_share_its_settings_with_the_caller():
    settings = yaml.safe_load(yaml.safe_dump(SETTINGS))
    run = RunSpec(grid="g", settings=settings)
    settings["trainer"]["loss_type"] = "grpo"
    assert run.trainer["loss_type"] == "dapo" and run.run_id == run_id_of(SETTINGS)


def test_with_settings_makes_another_run():
    run = RunSpec(grid="g", settings=SETTINGS)
    other = run.with_settings({"harness.eval_steps": 5, "seed": 4})
    assert other.harness.eval_steps == 5 and other.seed == 4 and other.trainer["seed"] == 4
    assert other.run_id != run.run_id and run.harness.eval_steps == 0
    with pytest.raises(SpecError, match=r"harness\.eval_steps = -1 must be >= 0"):
        run.with_settings({"harness.eval_steps": -1})


def test_a_run_pickles_whole():
    run = RunSpec(grid="g", settings=SETTINGS, varying={"trainer.loss_type": "dapo"}, executor={"nodes": 2})
    back = pickle.loads(pickle.dumps(run))
    assert back == run and back.run_id == run.run_id and dict(back.trainer) == dict(run.trainer)


def test_no_tiny_section_for_another_model():
    settings = {k: v for k, v in SETTINGS.items() if k != "tiny"} | {"model": "org/name"}
    assert RunSpec(grid="g", settings=settings).tiny is None


def test_every_problem_of_every_section_at_once():
    bad = {
        **SETTINGS,
        "seed": "x",
        "task": {"name": "chain_sum", "eval_size": 0},
        "harness": {"samples_n": -1},
    }
    with pytest.raises(SpecError) as e:
        RunSpec(grid="g", settings=bad)
    assert [p.split(" ")[0] for p in e.value.problems] == ["seed", "task.eval_size", "harness.samples_n"]


def _write(tmp_path, data) -> str:
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


BASE = {
    "name": "g",
    "task": {"name": "chain_sum", "kwargs": {"max_digits": 1}},
    "harness": {"device": "cpu"},
    "trainer": {"max_steps": 3, "per_device_train_batch_size": 8, "num_generations": 4},
}


def test_a_cell_its_sections_refuse_is_reported_under_its_values(tmp_path):
    plan = expand(load_grid(_write(tmp_path, {**BASE, "grid": {"tiny.num_heads": [3, 4], "seed": [0, 1]}})))
    assert len(plan.runs) == 2 and {r.tiny.num_heads for r in plan.runs} == {4}
    assert len(plan.rejected) == 2
    report = validate_plan(plan)
    bad = [e for e in report.errors if "multiple of tiny.num_heads = 3" in e.message]
    assert {e.where for e in bad} == {"seed=0, num_heads=3", "seed=1, num_heads=3"}
    assert all(e.run_id for e in bad)


def test_a_runs_own_executor_settings_are_checked(tmp_path):
    data = {**BASE, "zip": [{"executor.mem_gb": [4, -1], "seed": [0, 1]}]}
    report = validate_plan(expand(load_grid(_write(tmp_path, data))))
    assert [e.message for e in report.errors] == ["executor.mem_gb = -1 must be a finite number > 0."]


def test_numbers_are_coerced_when_the_grid_loads(tmp_path):
    data = {**BASE, "trainer": {**BASE["trainer"], "learning_rate": 1}, "grid": {"epsilon": [1, 0.5]}}
    grid = load_grid(_write(tmp_path, data), ["tiny.sft_lr=1"])
    assert isinstance(grid.base["trainer"]["learning_rate"], float)
    assert isinstance(grid.base["tiny"]["sft_lr"], float)
    (axis,) = grid.axes
    assert axis.values == (1.0, 0.5) and isinstance(axis.values[0], float) and axis.as_written == (1, 0.5)
    assert isinstance(grid.base["trainer"]["max_steps"], int)


def test_expansion_is_pure(tmp_path, monkeypatch):
    """Once loaded, a grid expands with no file opened and no library asked."""
    grid = load_grid(_write(tmp_path, {**BASE, "grid": {"epsilon": [1, 0.5], "seed": [0, 1]}}))
    expected = expand(grid)

    def refuse(*args, **kwargs):
        raise AssertionError(f"expansion opened {args[:1]}")

    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(builtins, "__import__", refuse)
    again = expand(grid)
    assert [r.run_id for r in again.runs] == [r.run_id for r in expected.runs]


def test_schema_constants_are_one_copy():
    from harness.models import names, tasks

    assert names.TINY is schema.TINY and tasks.TEMPLATES is schema.TEMPLATES
    assert tasks.SFT_SEED_BASE is schema.SFT_SEED_BASE and tasks.EVAL_SEED is schema.EVAL_SEED
