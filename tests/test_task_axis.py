"""The task axis: several tasks in one grid, each task's settings given where it is named."""

from pathlib import Path

import pytest
import yaml

from harness.config.grid import expand, plan_record
from harness.config.spec import load_grid
from harness.settings.schema import SpecError

BASE = {
    "name": "g",
    "task": {
        "name": "chain_sum",
        "kwargs": {"min_terms": 2, "max_terms": 2, "max_digits": 1},
        "train_size": 500,
    },
    "trainer": {"max_steps": 3, "per_device_train_batch_size": 8, "num_generations": 4},
}
PRODUCTS = {"name": "products", "kwargs": {"min_terms": 2, "max_terms": 2, "max_digits": 1}, "eval_size": 100}


def write(tmp_path: Path, data: dict, name: str = "g.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def problems(path: Path, *overrides: str) -> list[str]:
    with pytest.raises(SpecError) as e:
        load_grid(path, list(overrides))
    assert str(path) in str(e.value)  # every message comes under the file's name
    return e.value.problems


def test_each_entry_is_a_task_over_the_files_task_section(tmp_path):
    grid = {"loss_type": ["grpo", "dapo"], "task": ["basic_arithmetic", PRODUCTS]}
    plan = expand(load_grid(write(tmp_path, {**BASE, "grid": grid})))
    tasks = {(r.settings["trainer"]["loss_type"], r.task.name): r.settings["task"] for r in plan.runs}
    assert len(plan.runs) == 4
    # a name alone: its dataset's default kwargs (chain_sum's kwargs are not basic_arithmetic's)
    assert tasks[("grpo", "basic_arithmetic")] == {"name": "basic_arithmetic", "train_size": 500}
    # an entry's own fields over the file's: eval_size its own, train_size the file's
    assert tasks[("dapo", "products")] == {**PRODUCTS, "train_size": 500}
    assert plan.varying_keys == ("trainer.loss_type", "task.name", "task.kwargs", "task.eval_size")
    record = plan_record(plan)
    assert {tuple(v) for v in record["runs"].values()} == {tuple(plan.varying_keys)}
    assert sorted({v["task.name"] for v in record["runs"].values()}) == ["basic_arithmetic", "products"]


def test_a_run_of_an_entry_is_the_run_of_that_task_written_in_the_file(tmp_path):
    axis = expand(
        load_grid(write(tmp_path, {**BASE, "grid": {"seed": [0, 1], "task": [PRODUCTS, "chain_sum"]}}))
    )
    one = {**BASE, "task": {**PRODUCTS, "train_size": 500}, "grid": {"seed": [0, 1]}}
    plain = expand(load_grid(write(tmp_path, one, "plain.yaml")))
    products = [r.run_id for r in axis.runs if r.task.name == "products"]
    assert products == [r.run_id for r in plain.runs]


def test_the_axis_works_in_zips_and_subgrids_and_beside_other_task_fields(tmp_path):
    data = {
        **BASE,
        "zip": [{"task": ["chain_sum", PRODUCTS], "learning_rate": [1e-4, 2e-4]}],
        "subgrids": {"small": {"grid": {"task.train_size": [100]}}, "big": {}},
    }
    plan = expand(load_grid(write(tmp_path, data)))
    got = sorted((r.task.name, r.task.train_size, r.settings["trainer"]["learning_rate"]) for r in plan.runs)
    assert got == [
        ("chain_sum", 100, 1e-4),
        ("chain_sum", 500, 1e-4),
        ("products", 100, 2e-4),
        ("products", 500, 2e-4),
    ]


def test_bad_entries_name_the_place_the_value_and_the_fix(tmp_path):
    entries = [
        {"name": "products", "kwarg": {"max_digits": 1}},
        {"kwargs": {"max_digits": 1}},
        {"name": "chain_sum", "train_size": "100"},
        3,
        "chain_sum",
        "chain_sum",
    ]
    msgs = problems(write(tmp_path, {**BASE, "grid": {"task": entries, "task.kwargs.max_digits": [1, 2]}}))
    assert any(m.startswith("grid.task[0].kwarg: not a task setting.") and "'kwargs'" in m for m in msgs), (
        msgs
    )
    assert any(
        m.startswith("grid.task[1] = {'kwargs'") and "add name: (e.g. name: chain_sum)" in m for m in msgs
    )
    assert any("grid.task[2]: task.train_size = '100'" in m and "write 100." in m for m in msgs)
    assert any(m.startswith("grid.task[3] = 3: a task entry is a dataset's name or a mapping") for m in msgs)
    assert any("the task 'chain_sum' is given twice with the same settings" in m for m in msgs)
    assert any(
        m.startswith("grid.task.kwargs.max_digits: the task axis gives kwargs in its entries")
        and "set it in the entry of the task it belongs to" in m
        for m in msgs
    ), msgs
    sub = {**BASE, "grid": {"task": [PRODUCTS]}, "subgrids": {"a": {"set": {"task.eval_size": 50}}}}
    (msg,) = problems(write(tmp_path, sub, "sub.yaml"))
    assert msg.startswith("subgrids.a.task.eval_size: the task axis gives eval_size in its entries")


def test_overrides_must_reach_every_task(tmp_path):
    path = write(tmp_path, {**BASE, "grid": {"task": ["chain_sum", PRODUCTS]}})
    (msg,) = problems(path, "task.kwargs.max_digits=2")
    assert msg.startswith("-o task.kwargs.max_digits: task.kwargs.max_digits: this grid has a task axis")
    (msg,) = problems(path, "task.eval_size=50")
    assert "the task axis's entries 'products' set eval_size themselves" in msg
    plan = expand(load_grid(path, ["task.train_size=300"]))  # no entry sets it: every task takes it
    assert {r.task.train_size for r in plan.runs} == {300}
    plan = expand(load_grid(path, ["grid.task=[chain_sum]"]))
    assert [r.settings["task"] for r in plan.runs] == [{"name": "chain_sum", "train_size": 500}]
