"""The ready multi-task grid, ablations/tasks.yaml: it plans, and its quick profile runs through the
CLI into a report with a panel per task, normalised aggregates with intervals and profiles with
bands."""

import json

import pytest
from analysis_helpers import md_rows
from helpers import FAST_TINY, REPO, cli

from harness import layout
from harness.config.grid import expand
from harness.config.spec import load_grid

DATASETS = ["basic_arithmetic", "products"]
#: The tasks as the report labels them: products twice, told apart by its number of factors
TASKS = ["basic_arithmetic, max_terms=2", "products, max_terms=2", "products, max_terms=3"]


def test_the_tasks_grid_plans_three_tasks_per_loss_and_seed():
    plan = expand(load_grid(REPO / "ablations" / "tasks.yaml"))
    assert sorted({r.task.name for r in plan.runs}) == DATASETS
    assert len({(r.task.name, r.task.kwargs["max_terms"]) for r in plan.runs}) == 3
    assert {r.settings["trainer"]["loss_type"] for r in plan.runs} == {"grpo", "dapo"}
    assert len(plan.runs) == 2 * 3 * len({r.seed for r in plan.runs})
    assert plan.varying_keys[:2] == ("trainer.loss_type", "seed") and "task.name" in plan.varying_keys
    assert all(r.harness.eval_steps > 0 for r in plan.runs)  # the start eval is the normalisation's low


@pytest.mark.slow
def test_the_tasks_grid_runs_into_a_report_across_tasks(tmp_path, model_cache):
    results = tmp_path / "results"
    fast = [f"-otiny.{k}={v}" for k, v in FAST_TINY.items()]
    cli(
        "run",
        "ablations/tasks.yaml",
        "--profile",
        "quick",
        "--results",
        str(results),
        *fast,
        "-otask.train_size=256",
        "-otask.eval_size=32",
        "-otrainer.max_steps=4",
        "-oharness.eval_steps=2",
        timeout=1800,
    )
    grid = results / "tasks"
    runs = sorted((grid / layout.RUNS_DIR).iterdir())
    assert len(runs) == 2 * 3 * 2  # quick: 2 seeds
    for d in runs:
        assert (d / layout.DONE_FILE).exists(), d
        assert layout.read_start_eval(d) is not None, d  # measured once, before step 1
    report = grid / layout.REPORT_DIR
    index = (report / "index.md").read_text()
    assert "in panels by task / max_terms" in index  # a panel per task in every faceted figure
    assert "## Across tasks" in index and "(the starting policy's greedy eval before step 1" in index
    for name in ("tasks_aggregate.png", "tasks_profile.png", "final.png"):
        assert (report / name).is_file(), name
    table = md_rows((report / "tasks_aggregate_table.md").read_text())
    assert table[0][:7] == ["variant", "runs", "tasks", "median", "IQM", "mean", "optimality gap"]
    assert [r[0] for r in table[2:]] == ["grpo", "dapo"]
    for row in table[2:]:
        assert row[1:3] == ["6", "3"]
        assert all(" [" in cell for cell in row[3:7]), row  # every aggregate with its interval
    assert "Shaded: its band, 95% percentile intervals of the stratified bootstrap" in index
    per_task = md_rows((report / "tasks_per_task.md").read_text())
    assert sorted({r[0] for r in per_task[2:]}) == TASKS
    config = json.loads((runs[0] / layout.CONFIG_FILE).read_text())
    assert config["varying"]["task.name"] in DATASETS
