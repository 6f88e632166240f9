"""The ``report: progression:`` key: rows of runs, each adding one technique to the row above (DAPO's
Table 1), checked when the grid is loaded and planned, recorded in grid.json with each row's runs,
and tabulated by the report with hand-computed means, Welch intervals and P(>)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from analysis_helpers import eval_steps_run, md_rows, write_grid

from analysis import progression, report, stats
from harness import cli, layout
from harness.config.grid import expand, plan_record
from harness.config.report_check import progression_problems
from harness.config.spec import load_grid
from harness.settings.schema import SpecError

T2 = 4.302652729911275  # t_{0.975, 2}: 3 runs
T4 = 2.7764451051977987  # t_{0.975, 4}: Welch's df for two rows of 3 runs with equal spread

BASE = {
    "name": "g",
    "task": {"name": "chain_sum", "kwargs": {"min_terms": 2, "max_terms": 2, "max_digits": 1}},
    "trainer": {"max_steps": 3, "per_device_train_batch_size": 8, "num_generations": 4},
    "grid": {"seed": [0, 1]},
    "subgrids": {
        "a_naive": {"set": {"loss_type": "grpo"}},
        "b_clip": {"set": {"loss_type": "grpo", "epsilon_high": 0.28}},
        "c_token": {"set": {"loss_type": "dapo", "epsilon_high": 0.28}},
    },
}
ROWS = [
    {"label": "Naive GRPO", "select": {"subgrid": "a_naive"}},
    {"label": "+ Clip-Higher", "select": {"subgrid": "b_clip"}},
    {"label": "+ Token-level Loss", "select": {"subgrid": "c_token"}},
]


def write(tmp_path: Path, progression_: object, name: str = "g.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({**BASE, "report": {"progression": progression_}}, allow_unicode=True))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as e:
        load_grid(path)
    return e.value.problems


# --- the grid file ---------------------------------------------------------------------------------


def test_a_progression_is_checked_normalised_and_recorded_with_each_rows_runs(tmp_path):
    rows = [
        *ROWS[:2],
        {"label": "  + Token-level   Loss ", "select": {"loss_type": "dapo", "epsilon_high": 0.28}},
    ]
    grid = load_grid(write(tmp_path, {"rows": rows}))
    assert grid.report["progression"] == {
        "metric": "eval/accuracy",  # the default
        "rows": [
            {"label": "Naive GRPO", "select": {"subgrid": "a_naive"}},
            {"label": "+ Clip-Higher", "select": {"subgrid": "b_clip"}},
            {
                "label": "+ Token-level Loss",
                "select": {"trainer.loss_type": "dapo", "trainer.epsilon_high": 0.28},
            },
        ],
    }
    plan = expand(grid)
    assert progression_problems(plan) == []
    recorded = plan_record(plan)["report"]["progression"]
    by_id = {r.run_id: r for r in plan.runs}
    assert [sorted(by_id[r].subgrid for r in row["runs"]) for row in recorded["rows"]] == [
        ["a_naive", "a_naive"],
        ["b_clip", "b_clip"],
        ["c_token", "c_token"],
    ]
    settings = report.ReportSettings.merged(json.loads(json.dumps(plan_record(plan)["report"])))
    assert [r.label for r in settings.progression.rows] == [
        "Naive GRPO",
        "+ Clip-Higher",
        "+ Token-level Loss",
    ]
    assert [len(r.runs) for r in settings.progression.rows] == [2, 2, 2]
    assert load_grid(write(tmp_path, {"metric": "eval/pass@4", "rows": ROWS})).report["progression"][
        "metric"
    ] == ("eval/pass@4")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (
            {"rows": ROWS, "metrc": "reward"},
            "report.progression: unknown key 'metrc' (did you mean 'metric'?); a progression has metric and rows.",
        ),
        (
            {"rows": ROWS[:1]},
            "report.progression.rows has 1 row(s): each row is compared with the row above, so give at least 2, "
            "e.g. rows: [{label: Naive GRPO, select: {subgrid: naive}}, {label: + Clip-Higher, select: {subgrid: "
            "clip_higher}}].",
        ),
        (
            {"rows": [ROWS[0], {"label": "+ Clip-Higher", "selct": {"subgrid": "b_clip"}}]},
            "report.progression.rows[1]: unknown key 'selct' (did you mean 'select'?); a row has label and select.",
        ),
        (
            {"rows": [ROWS[0], {**ROWS[1], "label": "Naive GRPO"}]},
            "report.progression.rows: 2 rows are labelled 'Naive GRPO'; give each row its own label.",
        ),
        (
            {"rows": [ROWS[0], {"label": "+ Clip-Higher", "select": {"epsilon_hihg": 0.28}}]},
            "report.progression.rows[1].select: unknown key 'epsilon_hihg'",
        ),
        (
            {"rows": [ROWS[0], {"label": "+ seeds", "select": {"seed": 1}}]},
            "report.progression.rows[1].select.seed: a selector pools the runs of every seed, so seed cannot "
            "select one; drop it (the comparison is over the seeds).",
        ),
        (
            {"metric": "eval/pass@four", "rows": ROWS},
            "report.progression.metric: 'eval/pass@four' is no pass@k column: k is a positive integer, one of 1, "
            "2, 4, ... up to the samples per prompt n, or n itself; write e.g. eval/pass@4.",
        ),
        ("rows", "report.progression = 'rows': give a mapping {metric: NAME (default eval/accuracy), rows:"),
    ],
)
def test_each_bad_progression_is_refused_naming_the_key_the_value_and_the_fix(tmp_path, given, expected):
    found = problems(write(tmp_path, given))
    assert any(p.startswith(expected) for p in found), found


def test_every_problem_of_a_progression_is_listed_at_once(tmp_path):
    given = {"metrc": 1, "rows": [{"label": "", "select": {}}, {"label": "x", "select": {"subgrid": 3}}]}
    found = problems(write(tmp_path, given))
    assert len(found) == 4, found  # the unknown key, the label, the empty selector, the sub-grid name


def test_a_row_that_selects_no_run_and_rows_that_share_runs_are_named_at_plan(tmp_path):
    rows = [*ROWS[:2], {"label": "+ Token-level Loss", "select": {"subgrid": "c_tokn"}}]
    rows.append({"label": "+ again", "select": {"epsilon_high": 0.28, "loss_type": "grpo"}})
    plan = expand(load_grid(write(tmp_path, {"rows": rows})))
    no_run, shared = progression_problems(plan)
    assert no_run == (
        'report.progression.rows[2] (+ Token-level Loss).select.subgrid = "c_tokn": the grid has no sub-grid of '
        "that name; its sub-grids are a_naive, b_clip, c_token. Did you mean 'c_token'?"
    )
    assert shared.startswith(
        'report.progression.rows[1] (+ Clip-Higher: subgrid="b_clip") and rows[3] (+ again: epsilon_high=0.28, '
        'loss_type="grpo") select the same 2 run(s), e.g. run '
    )
    assert shared.endswith(
        "give the rows selectors that no run satisfies together, e.g. a sub-grid each (select: {subgrid: NAME})."
    )
    rows = [ROWS[0], {"label": "+ Clip-Higher", "select": {"epsilon_high": 0.3}}]
    (problem,) = progression_problems(expand(load_grid(write(tmp_path, {"rows": rows}))))
    assert problem.startswith(
        "report.progression.rows[1] (+ Clip-Higher).select: no run of the grid has trainer.epsilon_high = 0.3; "
        "the grid has trainer.epsilon_high = 0.28, unset"
    )


def test_plan_refuses_a_progression_row_without_runs_with_exit_2(tmp_path, capsys):
    rows = [ROWS[0], {"label": "+ Clip-Higher", "select": {"subgrid": "b_clp"}}]
    assert cli.main(["plan", str(write(tmp_path, {"rows": rows}))]) == 2
    err = capsys.readouterr().err
    assert 'report.progression.rows[1] (+ Clip-Higher).select.subgrid = "b_clp"' in err
    assert cli.main(["plan", str(write(tmp_path, {"rows": ROWS}, "ok.yaml"))]) == 0
    out = capsys.readouterr().out
    assert (
        'report progression (3 rows, final eval/accuracy):\n  Naive GRPO: subgrid="a_naive": 2 run(s)\n'
        in out
    )


# --- the numbers -----------------------------------------------------------------------------------


def test_progression_table_by_hand():
    """Rows of final scores a: 0.1, 0.2, 0.3; b: 0.3, 0.4, 0.5 (and a diverged run); c: one run, 0.6."""
    scores = pd.Series(
        {"a0": 0.1, "a1": 0.2, "a2": 0.3, "b0": 0.3, "b1": 0.4, "b2": 0.5, "b3": 0.9, "c0": 0.6}
    )
    rows = [("A", ["a0", "a1", "a2"]), ("B", ["b0", "b1", "b2", "b3"]), ("C", ["c0", "x9"])]
    finished = ["a0", "a1", "a2", "b0", "b1", "b2", "c0"]
    table = progression.progression_table(
        scores,
        rows,
        metric="eval/accuracy",
        finished=finished,
        unfinished={"b3": "diverged at step 7 (loss)"},
    )
    f = table.frame.set_index("row")
    assert f["runs"].tolist() == [3, 3, 1]
    half = T2 * 0.1 / math.sqrt(3)
    assert f.loc["A", ["mean", "mean_lo", "mean_hi"]].tolist() == pytest.approx([0.2, 0.2 - half, 0.2 + half])
    assert f.loc["B", ["mean", "mean_lo", "mean_hi"]].tolist() == pytest.approx([0.4, 0.4 - half, 0.4 + half])
    welch = T4 * math.sqrt(0.01 / 3 + 0.01 / 3)  # se² = s²/n + s²/n, df = 4
    assert f.loc["B", ["diff", "diff_lo", "diff_hi"]].tolist() == pytest.approx(
        [0.2, 0.2 - welch, 0.2 + welch]
    )
    assert f.loc["B", "p_above"] == pytest.approx(
        8.5 / 9
    )  # 0.3 ties 0.3 (a half), beats 0.1, 0.2; 0.4 and 0.5 beat all
    (replicates,) = stats.stratified_bootstrap_replicates(
        [stats.probability_of_improvement],
        np.array([0.3, 0.4, 0.5]),
        np.array([0.1, 0.2, 0.3]),
        reps=table.reps,
        seed=0,
    )
    lo, hi = stats.percentile_interval(replicates)
    assert (f.loc["B", "p_above_lo"], f.loc["B", "p_above_hi"]) == pytest.approx((lo, hi))
    assert table.reps == 50_000 and lo < 8.5 / 9 <= hi
    assert np.isnan(
        f.loc["A", ["diff", "p_above"]].to_numpy(dtype=float)
    ).all()  # the first row has no row above
    assert f.loc["C", "mean"] == pytest.approx(0.6) and np.isnan(f.loc["C", "mean_lo"])
    assert np.isnan(
        f.loc["C", ["diff", "diff_lo", "p_above"]].to_numpy(dtype=float)
    ).all()  # one run: no comparison
    assert table.left_out == (
        "B: `b3` (diverged at step 7 (loss)).",
        "C: `x9` (not among the runs read (not in grid.json's run_ids, or not given to this report)).",
    )
    assert table.notes == (
        "C: no comparison with the row above (3 and 1 run(s)): a row with fewer than 2 runs has no spread to "
        "test against; run at least 2 seeds per row.",
    )
    for text in ("final eval/accuracy: its last evaluation", "seeds: 3, 3, 1, row by row", "Student-t", "Welch",
                 "Mann-Whitney U / nm", "50,000 resamples"):  # fmt: skip
        assert text in table.caption, text


@pytest.fixture
def grid(tmp_path):
    """Rows a (final eval/accuracy 0.1, 0.2, 0.3), b (0.3, 0.4, 0.5, and a diverged run), c (one run,
    0.6, with dynamic sampling); an earlier eval at step 10 that the final score does not use."""
    g = tmp_path / "results" / "toy"
    finals = {"a": [0.1, 0.2, 0.3], "b": [0.3, 0.4, 0.5, 0.9], "c": [0.6]}
    loss = {"a": "grpo", "b": "dapo", "c": "cispo"}
    ids = {}
    for row, values in finals.items():
        for seed, value in enumerate(values):
            rid = f"{row}-{seed}"
            sampling = {
                layout.DS_GROUPS_DRAWN: [10.0, 14.0] * 10,
                layout.DS_GROUPS_KEPT: [8.0] * 20,
                layout.DS_GEN_BATCHES: [1.0, 2.0] * 10,
                layout.DS_COMPLETIONS_GENERATED: [64.0, 128.0] * 10,
                layout.DS_SHORT: [0.0] * 19 + [1.0],
            }
            eval_steps_run(
                g, rid, loss_type=loss[row], seed=seed, evals={10: {layout.EVAL_ACCURACY: 0.0}, 20: {layout.EVAL_ACCURACY: value}},
                columns=sampling if row == "c" else None, state="diverged" if rid == "b-3" else "done",
            )  # fmt: skip
            ids.setdefault(row, []).append(rid)
    all_ids = [r for v in ids.values() for r in v]
    write_grid(g, all_ids, ["trainer.loss_type", "seed"])
    info = json.loads((g / layout.GRID_FILE).read_text())
    labels = {"a": "Naive GRPO", "b": "+ Token-level Loss", "c": "+ Dynamic Sampling"}
    info["report"] = {
        "progression": {
            "metric": "eval/accuracy",
            "rows": [
                {"label": labels[k], "select": {"trainer.loss_type": loss[k]}, "runs": ids[k]}
                for k in ("a", "b", "c")
            ],
        }
    }
    (g / layout.GRID_FILE).write_text(json.dumps(info))
    return g


def test_the_report_tabulates_the_progression_near_the_top(grid):
    out = report.make_report(grid)
    index = (out / "index.md").read_text()
    assert index.index("## Runs left out") < index.index("## Progression: final eval/accuracy")
    assert index.index("## Progression: final eval/accuracy") < index.index("## reward vs optimizer step")
    for suffix in (".md", ".csv", ".tex"):
        assert (out / f"progression{suffix}").is_file()
    rows = md_rows((out / "progression.md").read_text())
    half, welch = T2 * 0.1 / math.sqrt(3), T4 * math.sqrt(0.02 / 3)
    assert rows[0] == ["", "runs (seeds)", "final eval/accuracy [95% CI]", "difference to row above [95% Welch CI]",
                       "P(> row above) [95% CI]"]  # fmt: skip
    assert rows[2][:4] == ["Naive GRPO", "3", f"0.2 [{0.2 - half:.3g}, {0.2 + half:.3g}]", "–"]
    assert rows[3][:4] == ["+ Token-level Loss", "3", f"0.4 [{0.4 - half:.3g}, {0.4 + half:.3g}]",
                           f"0.2 [{0.2 - welch:.3g}, {0.2 + welch:.3g}]"]  # fmt: skip
    assert rows[3][4].startswith("0.944 [")
    assert rows[4] == ["+ Dynamic Sampling", "1", "0.6", "–", "–"]
    assert "+ Token-level Loss: `b-3` (diverged at step 20 (loss))." in index
    assert (
        "+ Dynamic Sampling: dynamic sampling drew 12 groups per step to keep 8 (1.5 generation batches, 96 "
        "completions generated per step; means over its runs' 20 steps); 1 of those steps ran out of generation "
        "batches (dynamic_sampling/short)."
    ) in index
    csv = pd.read_csv(out / "progression.csv")
    assert csv["mean"].tolist() == pytest.approx([0.2, 0.4, 0.6])


def test_a_progression_without_recorded_runs_says_how_to_record_them(grid):
    info = json.loads((grid / layout.GRID_FILE).read_text())
    for row in info["report"]["progression"]["rows"]:
        del row["runs"]
    (grid / layout.GRID_FILE).write_text(json.dumps(info))
    settings = report.ReportSettings.merged(info["report"])
    data = report.compute_report(report.load_report_inputs(grid, settings=settings), settings)
    assert data.numbers("progression").table is None
    assert data.numbers("progression").lines == (
        "Note: grid.json does not record which runs each row of the report's progression selects, so its table "
        "is not made; record it with `grpo-harness run GRID.yaml` (done runs are skipped) or `grpo-harness submit`.",
    )


def test_a_damaged_recorded_progression_is_named(grid):
    info = json.loads((grid / layout.GRID_FILE).read_text())
    info["report"]["progression"]["rows"] = info["report"]["progression"]["rows"][:1]
    (grid / layout.GRID_FILE).write_text(json.dumps(info))
    with pytest.raises(report.ReportError, match=r"report.progression.rows has 1 row\(s\)"):
        report.make_report(grid)


def test_a_report_across_folders_leaves_the_progression_to_each_folders_own_report(grid, tmp_path):
    import shutil

    other = tmp_path / "other" / "toy"
    shutil.copytree(grid, other)
    out = report.make_report([grid, other], across="folder", out=tmp_path / "both")
    index = (out / "index.md").read_text()
    assert not (out / "progression.md").exists() and "## Progression" not in index
    assert (
        "Note: a progression (report: progression:) compares the runs of one grid: it is in each folder's own "
        f"report, `grpo-harness report {grid}`, `grpo-harness report {other}`."
    ) in index
