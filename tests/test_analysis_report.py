"""analysis.report: the report folder of a synthetic grid, and the CLI hooks."""

from __future__ import annotations

import argparse
import dataclasses

import pandas as pd
import pytest
from analysis_helpers import config_for, md_rows, synthetic_grid, write_run

from analysis import report
from harness import layout


@pytest.fixture
def grid(tmp_path):
    g = tmp_path / "results" / "toy"
    synthetic_grid(g, variants=("grpo", "dapo", None), seeds=(0, 1), steps=20, extra={"dapo": ["kl"]})
    # An older run outside the current plan, with another learning rate.
    cfg = config_for("grpo", 0)
    cfg["trainer"]["learning_rate"] = 1e-5
    write_run(
        g,
        "old-grpo-lr",
        config=cfg,
        varying={"trainer.loss_type": "grpo", "seed": 0},
        columns={layout.STEP: [1, 2], "reward": [0.0, 0.1]},
    )
    return g


@pytest.mark.slow
def test_report_files_and_index(grid):
    out = report.make_report(grid, target=0.2)
    assert out == grid / layout.REPORT_DIR
    names = {p.name for p in out.iterdir()}
    for stem in ("reward_step", "dynamics_step", "w_seq"):
        assert {f"{stem}.png", f"{stem}.pdf"} <= names
    for stem in ("timing", "final_performance", "learning_check", "time_to_target"):
        assert {f"{stem}.md", f"{stem}.csv", f"{stem}.tex"} <= names
    index = (out / "index.md").read_text()
    for ref in (
        "reward_step.png",
        "dynamics_step.png",
        "w_seq.png",
        "Timing",
        "Final performance",
        "Learning check",
    ):
        assert ref in index
    assert "the 6 run(s) of grid.json" in index
    assert "(none)" in (out / "timing.md").read_text()
    assert "old-grpo-lr" not in (out / "learning_check.md").read_text()


@pytest.mark.slow
def test_report_all_runs_labels_by_difference(grid, capsys):
    out = report.make_report(grid, all_runs=True, x="tokens")
    text = (out / "learning_check.md").read_text()
    assert "old-grpo-lr" in text
    # the learning rate tells the old run apart; only the runs it splits carry it in their label
    variants = {row[1] for row in md_rows(text)}
    assert {"grpo, lr=1e-05", "grpo", "dapo"} <= variants
    assert "learning_rate=1e-05" in (out / "variants.md").read_text()
    assert (out / "reward_tokens.pdf").exists()


@pytest.mark.slow
def test_report_skipped_file_listed(grid):
    bad = layout.run_dir(grid, "grpo-s0") / layout.METRICS_DIR / layout.COMPACT_FILE
    bad.write_bytes(bad.read_bytes()[:100])
    out = report.make_report(grid)
    index = (out / "index.md").read_text()
    assert "Files not loaded" in index and str(bad) in index


@pytest.mark.slow
def test_cli_hooks(grid, capsys):
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    args = parser.parse_args([str(grid), "--baseline", "loss_type=dapo", "--x", "time", "--col", "loss_type"])
    assert report.main(args) == 0
    assert str(grid / layout.REPORT_DIR) in capsys.readouterr().out
    assert (grid / layout.REPORT_DIR / "reward_time.png").exists()
    args = parser.parse_args([str(grid), "--hue", "no_such_axis"])
    assert report.main(args) == 2
    assert "no_such_axis" in capsys.readouterr().err


def test_parse_baseline():
    assert report.parse_baseline("loss_type=grpo") == ("loss_type", "grpo")
    assert report.parse_baseline("grpo") == (None, "grpo")
    assert report.parse_baseline(None) == (None, None)


def test_report_before_any_metrics(tmp_path):
    g = tmp_path / "results" / "empty"
    write_run(g, "r0", config=config_for("grpo", 0), varying={"seed": 0})
    out = report.make_report(g)
    assert "No metrics yet" in (out / "index.md").read_text()


@pytest.mark.slow
def test_report_grid_without_loss_axis(tmp_path):
    g = tmp_path / "results" / "lr"
    for s in (0, 1):
        write_run(
            g,
            f"r{s}",
            config=config_for("grpo", s),
            varying={"seed": s},
            columns={layout.STEP: [1, 2, 3], "reward": [0.0, 0.5, 1.0]},
        )
    out = report.make_report(g)
    assert (out / "reward_step.png").exists()
    assert "Compared: loss_type (grpo)" in (out / "index.md").read_text()


@pytest.mark.slow
def test_report_without_a_baseline_run_omits_comparisons_and_says_why(tmp_path, capsys):
    g = tmp_path / "results" / "clip"
    for i, lt in enumerate(("dapo", "cispo")):
        for s in (0, 1):
            write_run(
                g,
                f"{lt}{s}",
                config=config_for(lt, s),
                varying={"loss_type": lt, "seed": s},
                columns={layout.STEP: [1, 2, 3], "reward": [0.0, 0.5, 1.0 - i / 4]},
            )
    out = report.make_report(g)  # default baseline loss_type=grpo: no such run
    index = (out / "index.md").read_text()
    assert "Note: no finished run has loss_type=grpo" in index and "--baseline KEY=VALUE" in index
    assert "vs None" not in index and "P(> None)" not in index and "speedup" not in index
    assert "report: no finished run has loss_type=grpo" in capsys.readouterr().err
    out = report.make_report(g, baseline="loss_type=dapo")
    index = (out / "index.md").read_text()
    assert "speedup vs dapo" in index and "P(> dapo" in index


def test_variant_colours_stay_distinct_up_to_fifteen():
    from analysis import style

    labels = [f"epsilon={e}, num_iterations={m}" for e in (0.1, 0.2, 0.3) for m in (1, 2, 4, 8, 16)]
    colours = style.variant_colors(labels)
    assert len(set(colours.values())) == 15


@pytest.mark.slow
def test_a_new_report_replaces_the_previous_one(grid):
    out = report.make_report(grid)
    stale = out / "final_performance_old_metric.md"
    stale.write_text("from an earlier report")
    notes = out / "notes.txt"
    notes.write_text("mine")
    report.make_report(grid)
    assert not stale.exists() and notes.read_text() == "mine"


def test_report_refuses_a_nan_target_and_names_a_missing_baseline_label(grid, capsys):
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    assert report.main(parser.parse_args([str(grid), "--target", "nan"])) == 2
    assert "--target = nan: the target is a finite number" in capsys.readouterr().err
    with pytest.raises(report.ReportError, match="--baseline 'bogus' names no variant; give one of"):
        report.make_report(grid, baseline="bogus")
    # the same baseline from the grid file's report: section is a note, and the report is written
    df, st, info, _ = inputs = report.load_report_inputs(grid)
    data = report.compute_report(inputs, report.ReportSettings.merged({"baseline": "bogus"}))
    assert data.facets.baseline is None and any(
        "no finished variant is labelled 'bogus'" in x for x in data.lines
    )


def test_plugin_metrics_join_the_dynamics_figure_ratio_ones_off_policy(tmp_path):
    """A loss plugin's ``<name>/...`` columns are drawn without a ``report: metrics:`` entry; one named
    ``<name>/ratio...`` (the naming rule) only over off-policy steps, like TRL's clip_ratio."""
    from analysis_helpers import write_grid

    from analysis import offpolicy

    g = tmp_path / "results" / "toy"
    steps = list(range(1, 9))
    base = {layout.STEP: steps, "reward": [0.1] * 8, "entropy": [1.0] * 8, layout.OFF_POLICY: [0.0, 1.0] * 4}
    ids = []
    for seed in (0, 1):
        for lt in ("grpo", "my_pg"):
            extra = {"my_pg/ratio_mean": [1.0, 3.0] * 4, "my_pg/logp": [-2.0] * 8} if lt == "my_pg" else {}
            rid = f"{lt}-{seed}"
            write_run(
                g, rid, config=config_for(lt, seed), varying={"trainer.loss_type": lt, "seed": seed},
                columns={**base, **extra},
            )  # fmt: skip
            ids.append(rid)
    write_grid(g, ids, ["trainer.loss_type", "seed"])
    settings = report.ReportSettings(hue=("trainer.loss_type",), metrics=("entropy",), smoothing="none")
    df, st, _, _ = inputs = report.load_report_inputs(g, settings=settings)
    assert {"my_pg/ratio_mean", "my_pg/logp"} <= set(df.columns)
    data = report.compute_report(inputs, settings)
    curves = data.numbers("dynamics").curves
    assert list(curves) == ["entropy", "my_pg/logp", "my_pg/ratio_mean"]
    assert offpolicy.is_ratio_metric("my_pg/ratio_mean") and offpolicy.is_ratio_metric("gmpo/clip_ratio/high")
    assert not offpolicy.is_ratio_metric("my_pg/logp") and not offpolicy.is_ratio_metric(
        "completions/clipped_ratio"
    )
    ratio = curves["my_pg/ratio_mean"]
    drawn = ratio.mean.dropna(subset=["mean"])
    assert drawn["x"].tolist() == [2.0, 4.0, 6.0, 8.0]  # the on-policy steps' exact 1s are not drawn
    assert drawn["mean"].eq(3.0).all()


def test_trl_loss_types_agree_with_the_boundary():
    from harness.trl_boundary import KNOWN_LOSS_TYPES

    assert frozenset(KNOWN_LOSS_TYPES) == report.TRL_LOSS_TYPES


def test_unlisted_plugin_metrics_sit_beside_their_plugins_listed_ones():
    listed = ["eval/accuracy", "gmpo/clip_ratio/high", "gmpo/ratio_mean", "kl_cov/selected_frac", "entropy"]
    found = ["gmpo/clip_ratio/high", "gmpo/clip_ratio/low", "gmpo/ratio_mean", "kl_cov/cov_mean",
             "kl_cov/selected_frac", "my_pg/logp"]  # fmt: skip
    assert report.merge_plugin_metrics(listed, found) == [
        "eval/accuracy", "gmpo/clip_ratio/high", "gmpo/clip_ratio/low", "gmpo/ratio_mean",
        "kl_cov/cov_mean", "kl_cov/selected_frac", "entropy", "my_pg/logp",
    ]  # fmt: skip
    assert report.merge_plugin_metrics([], found) == found


def test_compute_report_changes_none_of_its_inputs_and_builds_a_frozen_record(grid):
    """A layout key no run sets is an all-missing column of the report's own frame, not of the
    loaded one; the unfinished runs' marks and the runs at once are added to copies."""
    settings = report.ReportSettings(
        hue=("trainer.loss_type",), col=("trainer.sync_ref_model",), include_unfinished=True, target=0.2
    )
    inputs = report.load_report_inputs(grid, settings=settings)
    frame, states = inputs.frame.copy(), inputs.states.copy()
    data = report.compute_report(inputs, settings)
    pd.testing.assert_frame_equal(inputs.frame, frame)
    pd.testing.assert_frame_equal(inputs.states, states)
    assert data.facets.col == report.PANEL and data.facets.col_values == (
        "(none)",
    )  # every run has it missing
    final = data.numbers("final").table
    assert "not_finished" in final.frame.columns and final.display["not_finished"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        data.title = "other"
