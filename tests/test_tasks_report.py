"""The report of a grid over several tasks: a panel per task, the normalised scores aggregated over
tasks with intervals, profiles with bands, per-task tables, and a task whose runs all failed named."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest
from analysis_helpers import config_for, md_rows, write_grid, write_run

from analysis.report import compute_report, load_report_inputs, make_report
from analysis.report.sections import tasks as render_tasks
from analysis.settings.report import ReportSettings
from harness import layout

TASKS = ("chain_sum", "products")
#: The starting policy's greedy accuracy per task (every run of a task starts from the same model).
START = {"chain_sum": 0.5, "products": 0.2}


def _grid(grid_dir, *, failed_task: str | None = "basic_arithmetic", start_evals: bool = True):
    runs, ids = {}, []
    for task in (*TASKS, *([failed_task] if failed_task else [])):
        for loss in ("grpo", "dapo"):
            for seed in range(3):
                rid = f"{task[:3]}-{loss}-{seed}"
                rng = np.random.default_rng(zlib.crc32(rid.encode()))
                steps = np.arange(1, 21)
                gain = 0.2 if loss == "dapo" else 0.1
                acc = START[task] + gain + 0.03 * rng.standard_normal() if task in START else 0.0
                cols = {
                    layout.STEP: steps,
                    "reward": 0.3 + 0.01 * steps + 0.01 * rng.standard_normal(20),
                    layout.EVAL_ACCURACY: [acc if s in (10, 20) else None for s in steps],
                }
                varying = {"trainer.loss_type": loss, "task.name": task, "seed": seed}
                config = config_for(loss, seed, task=task)
                if task == failed_task:  # failed before its first step: no metrics
                    write_run(grid_dir, rid, config=config, varying=varying, state="failed")
                else:
                    rdir = write_run(grid_dir, rid, config=config, varying=varying, columns=cols)
                    if start_evals:
                        (rdir / layout.START_EVAL_FILE).write_text(
                            json.dumps({layout.STEP: 0, layout.EVAL_ACCURACY: START[task], "seconds": 1.0})
                        )
                runs[rid] = varying
                ids.append(rid)
    write_grid(grid_dir, ids, ["trainer.loss_type", "task.name", "seed"], runs=runs)
    return ids


def test_tasks_are_panels_and_the_report_aggregates_over_them(tmp_path):
    grid_dir = tmp_path / "toy"
    _grid(grid_dir)
    settings = ReportSettings.merged(None)
    data = compute_report(load_report_inputs(grid_dir, settings=settings), settings)
    assert data.settings.col == ("task.name",)  # tasks as panels, without a layout saying so
    assert data.facets.col_values == TASKS and data.facets.hue_order == ("grpo", "dapo")
    assert data.facets.baseline == "grpo"
    section = data.numbers("tasks")
    assert section.metric == layout.EVAL_ACCURACY and list(section.ranges) == list(TASKS)
    assert {t: r.low for t, r in section.ranges.items()} == START
    assert section.unfinished == {"basic_arithmetic": "6 run(s): 6 failed"}
    (group,) = section.groups
    agg = group.aggregate
    assert agg.tasks == TASKS and agg.baseline == "grpo"
    row = agg.aggregates.set_index("variant").loc["dapo"]
    assert row["runs"] == 6 and row["tasks"] == 2
    for name in ("median", "iqm", "mean", "optimality_gap", "p_improve"):
        assert row[f"{name}_lo"] <= row[name] <= row[f"{name}_hi"], name
    assert row["p_improve"] > 0.5  # dapo gains 0.2, grpo 0.1, noise 0.03

    out = make_report(grid_dir)
    index = (out / "index.md").read_text()
    assert "## Across tasks" in index
    assert (
        "chain_sum: low 0.5 (the starting policy's greedy eval before step 1, the same in all 6 runs)"
        in index
    )
    assert "high 1 (an accuracy is at most 1)" in index
    assert "basic_arithmetic (no finished run; 6 run(s): 6 failed)" in index
    for name in (
        "tasks_aggregate.png",
        "tasks_profile.png",
        "tasks_aggregate_table.csv",
        "tasks_per_task.csv",
    ):
        assert (out / name).is_file(), name
    table = md_rows((out / "tasks_aggregate_table.md").read_text())
    assert table[0][:4] == ["variant", "runs", "tasks", "median"] and table[0][-1] == "P(> grpo)"
    assert [r[0] for r in table[2:]] == ["grpo", "dapo"]
    per_task = md_rows((out / "tasks_per_task.md").read_text())
    assert [(r[0], r[1]) for r in per_task[2:]] == [(t, v) for t in TASKS for v in ("grpo", "dapo")]


def test_without_start_evals_the_scores_are_not_normalised_and_the_caption_says_so(tmp_path):
    grid_dir = tmp_path / "toy"
    _grid(grid_dir, failed_task=None, start_evals=False)
    settings = ReportSettings.merged(None)
    data = compute_report(load_report_inputs(grid_dir, settings=settings), settings)
    section = data.numbers("tasks")
    assert {r.low_from for r in section.ranges.values()} == {"default"}
    assert "low 0 (no start eval and none stated: raw scores)" in render_tasks.range_sentence(section)
    assert section.unfinished == {}


@pytest.mark.parametrize("col", [None, "loss_type"])
def test_one_task_has_no_section_and_a_taken_col_puts_the_tasks_in_rows(tmp_path, col):
    grid_dir = tmp_path / "toy"
    _grid(grid_dir, failed_task=None)
    settings = ReportSettings.merged(None, col=col, hue="seed" if col else None)
    data = compute_report(load_report_inputs(grid_dir, settings=settings), settings)
    if col:
        assert data.settings.row == ("task.name",) and data.facets.row_values == TASKS
        assert [g.name for g in data.numbers("tasks").groups] == [
            "grpo",
            "dapo",
        ]  # one aggregate per other panel
    one = tmp_path / "one"
    write_run(
        one,
        "r0",
        config=config_for("grpo", 0, task="chain_sum"),
        varying={"seed": 0},
        columns={layout.STEP: [1, 2], "reward": [0.1, 0.2], layout.EVAL_ACCURACY: [None, 0.5]},
    )
    settings = ReportSettings.merged(None)
    assert compute_report(load_report_inputs(one, settings=settings), settings).numbers("tasks") is None


def test_stated_ends_normalise_runs_without_a_start_eval_and_are_checked(tmp_path):
    from harness.config.report_check import check_report

    grid_dir = tmp_path / "toy"
    _grid(grid_dir, failed_task=None, start_evals=False)
    settings = ReportSettings.merged({"normalise": {"low": {"chain_sum": 0.1}, "high": 0.9}})
    data = compute_report(load_report_inputs(grid_dir, settings=settings), settings)
    ranges = data.numbers("tasks").ranges
    assert (ranges["chain_sum"].low, ranges["chain_sum"].low_from) == (0.1, "stated")
    assert (ranges["products"].low, ranges["products"].low_from) == (0.0, "default")
    assert {(r.high, r.high_from) for r in ranges.values()} == {(0.9, "stated")}
    text = render_tasks.range_sentence(data.numbers("tasks"))
    assert "chain_sum: low 0.1 (stated), high 0.9 (stated)" in text
    problems: list[str] = []
    assert check_report({"normalise": {"low": 0.5, "high": 0.5}}, problems) == {}
    assert check_report({"normalise": {"lo": 0.1}}, problems) == {}
    assert check_report({"normalise": {"high": {"chain_sum": "1"}}}, problems) == {}
    assert problems == [
        "report.normalise = {'low': 0.5, 'high': 0.5}: high 0.5 is not above low 0.5; the reference must exceed "
        "the start.",
        "report.normalise = {'lo': 0.1}: 'lo' is not an end of the range; give low and/or high.",
        "report.normalise = {'high': {'chain_sum': '1'}}: high = {'chain_sum': '1'}: give a finite number, or a "
        "mapping of task names to numbers (e.g. high: {chain_sum: 0.2}).",
    ]
    assert check_report({"normalise": {"high": 2}}, problems) == {"normalise": {"high": 2.0}}


def test_two_entries_of_one_dataset_are_two_tasks(tmp_path):
    grid_dir = tmp_path / "toy"
    tasks = [("products", 2), ("products", 3), ("basic_arithmetic", 2)]
    runs, ids = {}, []
    for name, terms in tasks:
        for loss in ("grpo", "dapo"):
            for seed in range(2):
                rid = f"{name[:3]}{terms}-{loss}-{seed}"
                config = config_for(loss, seed, task=name)
                config["task"]["kwargs"] = {"min_terms": terms, "max_terms": terms}
                varying = {
                    "trainer.loss_type": loss,
                    "seed": seed,
                    "task.name": name,
                    "task.kwargs": config["task"]["kwargs"],
                }
                runs[rid], ids = varying, [*ids, rid]
                if (name, terms, seed) == ("products", 3, 1):  # failed before its first step
                    write_run(grid_dir, rid, config=config, varying=varying, state="failed")
                    continue
                cols = {
                    layout.STEP: [1, 2],
                    "reward": [0.1, 0.2],
                    layout.EVAL_ACCURACY: [None, 0.4 + 0.1 * seed],
                }
                rdir = write_run(grid_dir, rid, config=config, varying=varying, columns=cols)
                (rdir / layout.START_EVAL_FILE).write_text(json.dumps({layout.EVAL_ACCURACY: 0.1 * terms}))
    write_grid(grid_dir, ids, ["trainer.loss_type", "seed", "task.name", "task.kwargs"], runs=runs)
    settings = ReportSettings.merged(None)
    data = compute_report(load_report_inputs(grid_dir, settings=settings), settings)
    assert data.settings.col[0] == "task.name" and len(data.facets.col_values) == 3  # a panel per task
    section = data.numbers("tasks")
    assert len(section.ranges) == 3
    assert sorted(r.low for r in section.ranges.values()) == pytest.approx([0.2, 0.2, 0.3])
    three = next(t for t, r in section.ranges.items() if r.low > 0.25)
    assert three.startswith("products") and "3" in three and three in data.facets.col_values
    (group,) = section.groups
    assert len(group.aggregate.tasks) == 3 and section.unfinished == {}
