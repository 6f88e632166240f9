"""The report counts only what it can stand behind: run states, learning signal, damaged files.

A results folder with finished runs of two variants plus one run of each kind that must not be
counted as a result: diverged at step 2, stopped at step 75 of 120, never had a learning signal
(finished), and a damaged ``config.json``.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd
import pytest
from analysis_helpers import write_grid, write_run

from analysis import report, states
from analysis.load import SkippedFileWarning, load
from harness import layout

STEPS = 120


def _config(loss_type: str, seed: int) -> dict:
    return {
        "task": {"name": "chain_sum"},
        "model": "tiny",
        "trainer": {"loss_type": loss_type, "seed": seed, "max_steps": STEPS, "num_iterations": 2},
    }


def _columns(steps: int, seed: int, slope: float, *, zero_std: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    step = np.arange(1, steps + 1)
    generates = step % 2 == 1  # TRL logs reward on the steps that generate (num_iterations = 2)
    reward = np.where(generates, 0.2 + slope * step + 0.02 * rng.standard_normal(steps), np.nan)
    return {
        layout.STEP: step,
        "reward": reward,
        "loss": rng.standard_normal(steps),
        "grad_norm": np.where(zero_std, 0.0, 1.0 + rng.random(steps)),
        "frac_reward_zero_std": np.where(generates, 1.0 if zero_std else 0.25, np.nan),
        layout.STEP_WALL_S: np.full(steps, 0.1),
        layout.TOKENS_GENERATED: np.where(generates, 100.0, 0.0),
        layout.OFF_POLICY: (~generates).astype(float),
        "w_seq/p05": np.where(generates, 1.0, 0.9),
        "w_seq/p50": np.ones(steps),
        "w_seq/p95": np.where(generates, 1.0, 1.1),
        "w_seq/min": np.where(generates, 1.0, 0.8),
        "w_seq/max": np.where(generates, 1.0, 1.2),
    }


@pytest.fixture
def broken(tmp_path):
    g = tmp_path / "results" / "mixed"
    ids = []
    for lt, slope in (("grpo", 0.001), ("dapo", 0.002)):
        for seed in (0, 1, 2):
            rid = f"{lt}-{seed}"
            write_run(
                g,
                rid,
                config=_config(lt, seed),
                varying={"trainer.loss_type": lt, "seed": seed},
                columns=_columns(STEPS, seed, slope),
            )
            ids.append(rid)
    diverged = _columns(2, 7, 0.001)
    diverged["loss"] = np.array([0.5, np.nan])
    write_run(
        g,
        "grpo-diverged",
        config=_config("grpo", 7),
        varying={"trainer.loss_type": "grpo", "seed": 7},
        columns=diverged,
        state="diverged",
        marker={"step": 2, "metric": "loss", "value": "nan"},
    )
    write_run(
        g,
        "dapo-stopped",
        config=_config("dapo", 8),
        varying={"trainer.loss_type": "dapo", "seed": 8},
        columns=_columns(75, 8, 0.002),
        state="stopped",
    )
    # Different prompts drawn at the start and the end make the reward move with no gradient at all.
    flat = _columns(STEPS, 9, 0.003, zero_std=True)
    write_run(
        g,
        "grpo-nosignal",
        config=_config("grpo", 9),
        varying={"trainer.loss_type": "grpo", "seed": 9},
        columns=flat,
    )
    write_run(
        g,
        "dapo-damaged",
        config=_config("dapo", 10),
        varying={"trainer.loss_type": "dapo", "seed": 10},
        columns=_columns(STEPS, 10, 0.002),
    )
    (layout.run_dir(g, "dapo-damaged") / layout.CONFIG_FILE).write_text('{"run_id": "dapo-dam')
    ids += ["grpo-diverged", "dapo-stopped", "grpo-nosignal", "dapo-damaged"]
    seeds = {"grpo-diverged": 7, "dapo-stopped": 8, "grpo-nosignal": 9, "dapo-damaged": 10}
    runs = {
        r: {"trainer.loss_type": r.split("-")[0], "seed": seeds[r] if r in seeds else int(r[-1])} for r in ids
    }
    write_grid(g, ids, ["trainer.loss_type", "seed"], name="mixed", runs=runs)
    return g


def _cli(grid, *extra) -> int:
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    return report.main(parser.parse_args([str(grid), *extra]))


def test_read_states_from_markers(broken):
    st = states.read_states(broken, ["grpo-0", "grpo-diverged", "dapo-stopped", "no-such-run"])
    assert list(st["state"]) == ["done", "diverged", "stopped", "pending"]
    assert st.loc["grpo-0", "marker_step"] == STEPS
    assert st.loc["grpo-diverged", "marker_step"] == 2
    assert st.loc["grpo-diverged", "diverged_metric"] == "loss"


def test_signal_flags(broken):
    # the folder's damaged run (a truncated config.json) is skipped with a warning that names it
    with pytest.warns(SkippedFileWarning, match=r"dapo-damaged/config\.json: JSONDecodeError"):
        frame = load(broken)
    flags = states.signal_flags(frame)
    assert flags.loc["grpo-nosignal", "zero_variance"] and flags.loc["grpo-nosignal", "zero_grad"]
    assert flags["no_signal"].sum() == 1


@pytest.mark.slow
def test_report_counts_finished_runs_and_lists_the_others(broken, capsys):
    assert _cli(broken) == 0
    out = broken / layout.REPORT_DIR
    index = (out / "index.md").read_text()
    assert "## Runs left out" in index
    assert "`grpo-diverged` (grpo): diverged at step 2 (loss)" in index
    assert "`dapo-stopped` (dapo): stopped at step 75 of 120 (killed or interrupted" in index
    # grid.json knows the damaged run's variant: it is listed, and counted as not finished, under it
    assert "`dapo-damaged` (dapo): damaged run file, left out" in index and "config.json" in index
    variants = pd.read_csv(out / "variants.csv").set_index("variant")
    assert variants.loc["dapo", "finished"] == 3 and variants.loc["dapo", "other"] == 2
    assert variants.loc["grpo", "finished"] == 4 and variants.loc["grpo", "other"] == 1
    # the finished runs only: 3 dapo; 3 grpo + the finished run without a learning signal
    final = pd.read_csv(out / "final_performance.csv").set_index("variant")
    assert final.loc["dapo", "runs"] == 3 and final.loc["grpo", "runs"] == 4
    timing = pd.read_csv(out / "timing.csv").set_index("variant")
    assert timing.loc["dapo", "runs"] == 3 and timing.loc["grpo", "runs"] == 4
    assert timing.loc["grpo", "steps"] == STEPS
    check = pd.read_csv(out / "learning_check_runs.csv").set_index(layout.RUN_ID)
    assert set(check.index) == {f"{lt}-{s}" for lt in ("grpo", "dapo") for s in range(3)} | {"grpo-nosignal"}
    assert check.loc["grpo-nosignal", "diff"] > 0.1  # it "rose", by drawing other prompts
    assert not check.loc["grpo-nosignal", "signal"]
    summary = pd.read_csv(out / "learning_check.csv").set_index("variant")
    assert summary.loc["grpo", "improved"] == 3 and summary.loc["grpo", "no_signal"] == 1
    assert "`grpo-nosignal` (grpo): no learning signal" in index


@pytest.mark.slow
def test_include_unfinished_adds_them_marked(broken):
    out = report.make_report(broken, include_unfinished=True)
    final = pd.read_csv(out / "final_performance.csv").set_index("variant")
    assert final.loc["dapo", "runs"] == 4 and final.loc["dapo", "not_finished"] == 1
    assert final.loc["grpo", "runs"] == 5 and final.loc["grpo", "not_finished"] == 1
    check = pd.read_csv(out / "learning_check_runs.csv").set_index(layout.RUN_ID)
    assert check.loc["dapo-stopped", "state"] == "stopped"
    assert "dapo-damaged" not in check.index  # a damaged run is never counted
    index = (out / "index.md").read_text()
    assert "2 run(s) that did not finish are included" in index
    assert "`dapo-damaged` (dapo): damaged run file, left out" in index
    assert (
        "`dapo-stopped` (dapo): stopped at step 75 of 120 (killed or interrupted; grpo-harness status "
        "says from which step running the grid again resumes it); included, marked" in index
    )
    assert "count finished runs only" not in index  # the intro says what --include-unfinished counts
    assert "4-5 run(s) per curve" in index and "finished run(s) per curve" not in index
    assert "Includes 2 run(s) that did not finish" in index  # final, aggregate and profile captions


@pytest.mark.slow
def test_include_unfinished_counts_each_timing_row_apart(broken):
    """With runs-at-once groups, the unfinished count is per row (variant and runs at once)."""
    import pyarrow.parquet as pq

    for rid, at_once in (("grpo-0", 1.0), ("grpo-diverged", 1.0), ("dapo-stopped", 3.0)):
        path = layout.run_dir(broken, rid) / layout.METRICS_DIR / layout.COMPACT_FILE
        t = pq.read_table(path).to_pandas()
        t[layout.CONCURRENT_RUNS] = at_once
        pq.write_table(__import__("pyarrow").Table.from_pandas(t, preserve_index=False), path)
    out = report.make_report(broken, include_unfinished=True)
    timing = pd.read_csv(out / "timing.csv")
    rows = {(r.variant, str(r[report.AT_ONCE])): (r.runs, r.not_finished) for _, r in timing.iterrows()}
    assert rows[("grpo", "1")] == (2, 1)  # grpo-0 and the diverged run
    assert rows[("grpo", "unknown")] == (3, 0)
    assert rows[("dapo", "3")] == (1, 1)
    assert rows[("dapo", "unknown")] == (3, 0)


def test_final_figure_marks_runs_that_did_not_finish(broken):
    df, st, info, _ = inputs = report.load_report_inputs(broken)
    settings = report.ReportSettings.merged(info.get("report"), include_unfinished=True)
    data = report.compute_report(inputs, settings)
    final = data.numbers("final")
    assert dict(final.scores["state"].value_counts()) == {"done": 7, "diverged": 1, "stopped": 1}
    from analysis import finals

    fig, axes = finals.final_figure(final.scores, final.table.frame, data.facets, metric="reward")
    assert len(axes[0, 0].collections) == 4  # grpo: finished, diverged; dapo: finished, unfinished
    texts = {t.get_text() for leg in fig.legends for t in leg.get_texts()}
    assert {"diverged run (included)", "run not finished (included)"} <= texts
    done = final.scores[final.scores["state"] == "done"]
    fig, axes = finals.final_figure(done, final.table.frame, data.facets, metric="reward")
    assert len(axes[0, 0].collections) == 2
    assert "diverged run (included)" not in {t.get_text() for leg in fig.legends for t in leg.get_texts()}


def test_diverged_run_is_marked_on_the_curve(broken):
    df, st, info, _ = inputs = report.load_report_inputs(broken)
    data = report.compute_report(inputs, report.ReportSettings.merged(info.get("report")))
    numbers = data.numbers("curves")
    marks = numbers.marks["reward"]
    assert len(marks.diverged) == 1 and marks.diverged[0].hue == "grpo" and marks.diverged[0].x == 2.0
    assert marks.runs is not None
    from analysis import curves

    fig, axes = curves.curve_figure(numbers.sets["reward"], data.facets, marks=marks)
    xs = [line for line in axes[0, 0].get_lines() if line.get_marker() == "x"]
    assert len(xs) == 1 and list(xs[0].get_xdata()) == [2.0]
    assert "diverged run" in {t.get_text() for leg in fig.legends for t in leg.get_texts()}


def test_a_grid_of_damaged_configs_only_still_writes_an_index(tmp_path):
    g = tmp_path / "results" / "bad"
    write_run(g, "r0", config=_config("grpo", 0), varying={}, columns=_columns(4, 0, 0.01))
    (layout.run_dir(g, "r0") / layout.CONFIG_FILE).write_text("[1, 2]")
    assert _cli(g) == 0
    index = (g / layout.REPORT_DIR / "index.md").read_text()
    assert "`r0`: damaged run file" in index and "not an object" in index


@pytest.mark.slow
def test_missing_steps_are_mentioned(broken):
    done = layout.run_dir(broken, "grpo-1") / layout.DONE_FILE
    done.write_text(json.dumps({"steps": STEPS, "missing_steps": [40, 41, 42]}))
    index = (report.make_report(broken) / "index.md").read_text()
    assert "`grpo-1` (grpo): 3 step(s) without metrics" in index


@pytest.mark.slow
def test_grid_report_section_lays_out_the_report_and_flags_override_it(broken):
    info = json.loads((broken / layout.GRID_FILE).read_text())
    info["report"] = {
        "hue": ["trainer.loss_type"],
        "col": ["trainer.num_iterations"],
        "smoothing": {"window": 3},
    }
    (broken / layout.GRID_FILE).write_text(json.dumps(info))
    index = (report.make_report(broken) / "index.md").read_text()
    assert "in panels by num_iterations" in index and "w = 3" in index
    index = (report.make_report(broken, smoothing="none", col=()) / "index.md").read_text()
    assert "in panels by" not in index and "Raw per-step values" in index


def test_seeds_draw_each_run_and_wseq_splits_by_reuse_index(broken):
    df, st, info, _ = inputs = report.load_report_inputs(broken)
    df[layout.REUSE_INDEX] = np.where(df[layout.STEP] % 2 == 0, 2.0, 1.0)
    settings = report.ReportSettings.merged(info.get("report"), seeds=True, wseq_split=layout.REUSE_INDEX)
    data = report.compute_report(inputs, settings)
    sets = data.numbers("curves").sets
    runs = sets["reward"].runs
    assert set(runs[layout.RUN_ID]) == {f"{lt}-{s}" for lt in ("grpo", "dapo") for s in range(3)} | {
        "grpo-nosignal"
    }
    from analysis import curves, wseq

    fig, axes = curves.curve_figure(sets["reward"], data.facets, seeds=True)
    faint = [line for line in axes[0, 0].get_lines() if line.get_alpha() == 0.35]
    assert len(faint) == 7
    bands = data.numbers("wseq").bands
    assert set(bands[layout.REUSE_INDEX]) == {"2"}  # only the off-policy (second) passes
    fig, _ = wseq.wseq_figure(bands, data.facets, split=layout.REUSE_INDEX)
    assert "reuse_index 2" in {t.get_text() for leg in fig.legends for t in leg.get_texts()}


def test_an_infinite_reward_stays_in_its_own_run(broken):
    path = layout.run_dir(broken, "grpo-0") / layout.METRICS_DIR / layout.COMPACT_FILE
    import pyarrow.parquet as pq

    t = pq.read_table(path).to_pandas()
    t.loc[t["step"] == 51, "reward"] = np.inf
    pq.write_table(__import__("pyarrow").Table.from_pandas(t, preserve_index=False), path)
    df, st, info, _ = inputs = report.load_report_inputs(broken)
    data = report.compute_report(inputs, report.ReportSettings.merged(info.get("report")))
    curve = data.numbers("curves").sets["reward"]
    mean = curve.mean
    for variant in ("grpo", "dapo"):  # every curve still has values after step 51
        assert mean[(mean["variant"] == variant) & (mean["x"] > 60)]["mean"].notna().all()
    assert "1 infinite value(s) of reward left out" in curve.caption


@pytest.mark.slow
@pytest.mark.parametrize(
    "marker, also_diverged, reason",
    [
        ({"steps": 60}, False, "its DONE marker says 60 of 120 steps"),
        ({"steps": 120}, True, "has both a DONE and a DIVERGED marker"),
    ],
)
def test_a_done_marker_that_disagrees_is_not_counted(broken, marker, also_diverged, reason):
    rdir = layout.run_dir(broken, "dapo-0")
    (rdir / layout.DONE_FILE).write_text(json.dumps(marker))
    if also_diverged:
        (rdir / layout.DIVERGED_FILE).write_text(json.dumps({"step": 3}))
    out = report.make_report(broken)
    assert f"`dapo-0` (dapo): done, but {reason}: not counted" in (out / "index.md").read_text()
    assert pd.read_csv(out / "final_performance.csv").set_index("variant").loc["dapo", "runs"] == 2


@pytest.mark.slow
def test_done_runs_whose_metrics_stop_early_or_lack_the_score_are_not_counted(broken):
    import pyarrow.parquet as pq

    short = layout.run_dir(broken, "dapo-1") / layout.METRICS_DIR / layout.COMPACT_FILE
    pq.write_table(pq.read_table(short).slice(0, 100), short)
    no_score = layout.run_dir(broken, "dapo-2") / layout.METRICS_DIR / layout.COMPACT_FILE
    pq.write_table(pq.read_table(no_score).drop(["reward"]), no_score)
    index = (report.make_report(broken) / "index.md").read_text()
    assert "`dapo-1` (dapo): done, but its metrics end at step 100 of 120: not counted" in index
    assert "`dapo-2` (dapo): done, but no reward logged: not counted" in index


@pytest.mark.slow
def test_a_config_whose_max_steps_is_not_a_number_does_not_stop_the_report(broken):
    cfg = layout.run_dir(broken, "dapo-stopped") / layout.CONFIG_FILE
    data = json.loads(cfg.read_text())
    data["config"]["trainer"]["max_steps"] = "lots"
    cfg.write_text(json.dumps(data))
    assert _cli(broken) == 0
    assert "`dapo-stopped` (dapo" in (broken / layout.REPORT_DIR / "index.md").read_text()


def test_a_bad_report_section_in_grid_json_is_named(broken, capsys):
    info = json.loads((broken / layout.GRID_FILE).read_text())
    info["report"] = {"hue": 5, "smoothing": "bogus", "colour": "red"}
    (broken / layout.GRID_FILE).write_text(json.dumps(info))
    assert _cli(broken) == 2
    err = capsys.readouterr().err
    assert (
        "report.hue = 5" in err
        and "report.smoothing = 'bogus'" in err
        and "report.colour: unknown report key" in err
    )


@pytest.mark.slow
def test_the_cache_sees_a_copy_that_keeps_size_and_mtime(broken):
    import os
    import shutil

    report.make_report(broken)
    path = layout.run_dir(broken, "dapo-0") / layout.METRICS_DIR / layout.COMPACT_FILE
    import pyarrow.parquet as pq

    t = pq.read_table(path).to_pandas()
    t["reward"] = t["reward"] + 1.0  # same size on disk, other numbers
    tmp = path.with_name("tmp.parquet")
    pq.write_table(__import__("pyarrow").Table.from_pandas(t, preserve_index=False), tmp)
    st = os.stat(path)
    shutil.copyfile(tmp, path)
    tmp.unlink()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # as cp -p or rsync -a would
    checks = pd.read_csv(report.make_report(broken) / "learning_check_runs.csv").set_index(layout.RUN_ID)
    assert checks.loc["dapo-0", "last"] > 1.0


@pytest.mark.parametrize(
    "args, says",
    [
        (["--baseline", "zzz"], "--baseline 'zzz' names no variant; give one of 'grpo', 'dapo'"),
        (["--baseline", "loss_type=foo"], "no run has it; loss_type is dapo, grpo in these runs"),
        (["--baseline", "nothing=1"], "'nothing' is not a setting of these runs"),
        (["--wseq-split", "foo"], "--wseq-split 'foo': no counted run recorded it"),
        (["--smooth", "window=0"], "the window is a number of logged points, an integer >= 1"),
        (["--smooth", "window=2.5"], "the window is a number of logged points, an integer >= 1"),
        (["--smooth", "ema=2"], "the EMA weight of the newest point is a number with 0 < A <= 1"),
        (["--smooth", "box"], "auto, none, window=N or ema=A"),
    ],
)
def test_a_command_line_setting_that_names_nothing_stops_before_writing(broken, capsys, args, says):
    assert _cli(broken, *args) == 2
    assert says in capsys.readouterr().err
    assert not (broken / layout.REPORT_DIR / "index.md").exists()


@pytest.mark.slow
def test_a_baseline_whose_runs_did_not_finish_is_a_note_not_an_error(broken, capsys):
    """A baseline some run has, but no finished run: the report is written and says why."""
    assert _cli(broken, "--baseline", "seed=7") == 0  # the diverged run's seed
    assert "no finished run has seed=7; no baseline" in (broken / layout.REPORT_DIR / "index.md").read_text()


def test_a_folder_that_is_not_a_grid_names_the_grids_near_it(broken, capsys):
    assert _cli(broken.parent) == 2
    assert f"has no 'runs' folder; grid results folders there: {broken}" in capsys.readouterr().err
    assert _cli(broken.parent / "mixd") == 2
    assert f"mixd does not exist; grid results folders there: {broken}" in capsys.readouterr().err


@pytest.mark.slow
def test_captions_count_the_points_cut_by_the_y_range(broken):
    """One wild reward drawn on the curve: the robust y-range cuts it, and the caption says so."""
    import re

    import pyarrow.parquet as pq

    def cut() -> int:
        index = (report.make_report(broken, smoothing="none") / "index.md").read_text()
        caption = index.split("## reward vs optimizer step", 1)[1].split("##", 1)[0]
        said = re.search(r"(\d+) point\(s\) of the lines or bands lie beyond it", caption)
        return int(said.group(1)) if said else 0

    before = cut()
    path = layout.run_dir(broken, "grpo-0") / layout.METRICS_DIR / layout.COMPACT_FILE
    t = pq.read_table(path).to_pandas()
    t.loc[t["step"] == 61, "reward"] = 40.0
    pq.write_table(__import__("pyarrow").Table.from_pandas(t, preserve_index=False), path)
    assert cut() > before  # the mean's point at step 61, and its band


def test_points_beyond_y_counts_data_points_only():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from analysis import style

    fig = Figure()
    ax = fig.subplots()
    ax.plot([0, 1, 2, 3], [0, 1, 2, 10])  # 10 is above
    ax.fill_between([0, 1, 2], [0, 0, 0], [1, 1, 5])  # 5 is above
    ax.axvline(1)  # axes coordinates: not data
    ax.set_ylim(-0.5, 3)
    assert style.points_beyond_y(fig) == {"": 2}
    ax.set_title("reward\n(off-policy)")
    assert style.points_beyond_y(fig) == {"reward (off-policy)": 2}
    ax.set_ylim(-0.5, 11)
    assert style.points_beyond_y(fig) == {}
