"""The sampled eval and ESS/N in the report: pass@k against k (figure and table, numbers checked
by hand), ``eval/pass@k`` and ``eval/sampled_accuracy`` as the report's metric, and the ESS/N
panel of the dynamics figure."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from analysis_helpers import eval_steps_run, md_rows, write_grid, write_start_eval

from analysis import dynamics, labels, limits, pass_at_k, report, scores, tables
from analysis.load import load_results
from harness import layout

T2 = 4.302652729911275  # t_{0.975, 2}: the 95% Student-t quantile of 3 runs
KS = (1, 2, 4)


def _pass(base: float) -> dict[str, float]:
    """pass@1, pass@2, pass@4 that rise by 0.1 per doubling of k from ``base``."""
    return {f"{layout.PASS_AT_PREFIX}{k}": base + 0.1 * i for i, k in enumerate(KS)}


@pytest.fixture
def sampled(tmp_path):
    """grpo: 3 seeds, end pass@1 0.2/0.3/0.4 at step 20 (step 10 is an earlier eval), start pass@1
    0.1/0.15/0.2; dapo: one seed, end pass@1 0.5; gspo: one seed that diverged (left out)."""
    g = tmp_path / "results" / "toy"
    ids = []
    harness = {"eval_steps": 10, "sampled_eval_n": 4, "sampled_eval_temperature": 0.7}
    for seed, (start, end) in enumerate([(0.1, 0.2), (0.15, 0.3), (0.2, 0.4)]):
        rid = f"grpo-{seed}"
        evals = {
            10: {**_pass(0.05), layout.SAMPLED_ACCURACY: 0.05},
            20: {**_pass(end), layout.SAMPLED_ACCURACY: end},
        }
        eval_steps_run(g, rid, loss_type="grpo", seed=seed, evals=evals, harness=harness)
        write_start_eval(g, rid, {layout.EVAL_ACCURACY: 0.1, **_pass(start)})
        ids.append(rid)
    eval_steps_run(g, "dapo-0", loss_type="dapo", seed=0, evals={20: _pass(0.5)}, harness=harness)
    write_start_eval(g, "dapo-0", _pass(0.1))
    eval_steps_run(g, "gspo-0", loss_type="gspo", seed=0, evals={10: _pass(0.9)}, steps=10, state="diverged")
    write_grid(g, [*ids, "dapo-0", "gspo-0"], ["trainer.loss_type", "seed"])
    return g


def test_pass_at_k_names_and_the_start_file(tmp_path):
    assert layout.pass_at_k("eval/pass@16") == 16 and layout.pass_at_k("eval/pass@1") == 1
    for name in ("eval/pass@0", "eval/pass@k", "eval/pass@01", "eval/pass@-2", "eval/pass@", "eval/accuracy"):
        assert layout.pass_at_k(name) is None, name
    assert layout.is_eval_metric("eval/pass@8") and layout.is_eval_metric(layout.SAMPLED_ACCURACY)
    assert layout.is_eval_metric(layout.EVAL_ACCURACY) and not layout.is_eval_metric("reward")
    run = tmp_path / "run"
    run.mkdir()
    (run / layout.START_EVAL_FILE).write_text(
        '{"step": 0, "eval/accuracy": 0.25, "eval/pass@2": 0.5, "eval/sampled_accuracy": NaN, "seconds": 3}'
    )
    assert layout.read_start_evals(run) == {"eval/accuracy": 0.25, "eval/pass@2": 0.5}
    assert layout.read_start_eval(run) == 0.25
    assert pass_at_k.pass_at_k_columns(["eval/pass@16", "reward", "eval/pass@2", "eval/pass@x"]) == [
        "eval/pass@2",
        "eval/pass@16",
    ]


def test_the_report_reads_every_pass_at_k_column_by_its_prefix(sampled):
    frame = load_results(sampled, columns=["reward", layout.PASS_AT_PREFIX]).frame
    assert [c for c in frame.columns if c.startswith("eval/")] == [f"eval/pass@{k}" for k in KS]


def test_pass_at_k_points_are_the_mean_over_seeds_with_a_student_t_interval(sampled):
    settings = report.ReportSettings(hue=("trainer.loss_type",))
    inputs = report.load_report_inputs(sampled, settings=settings)
    data = report.compute_report(inputs, settings)
    numbers = data.numbers("pass_at_k")
    f = numbers.points.frame
    assert numbers.points.ks == KS
    grpo_end = f[(f["variant"] == "grpo") & (f["when"] == "end")].set_index("k")
    half = T2 * 0.1 / math.sqrt(3)  # pass@1 at the end: 0.2, 0.3, 0.4 (sd 0.1), the step-10 eval not used
    assert grpo_end.loc[1, "mean"] == pytest.approx(0.3)
    assert (grpo_end.loc[1, "lo"], grpo_end.loc[1, "hi"]) == pytest.approx((0.3 - half, 0.3 + half))
    assert grpo_end.loc[4, "mean"] == pytest.approx(0.5) and grpo_end["runs"].tolist() == [3, 3, 3]
    grpo_start = f[(f["variant"] == "grpo") & (f["when"] == "start")].set_index("k")
    half = T2 * 0.05 / math.sqrt(3)  # pass@1 at the start: 0.1, 0.15, 0.2
    assert (grpo_start.loc[1, "mean"], grpo_start.loc[1, "lo"]) == pytest.approx((0.15, 0.15 - half))
    one = f[f["variant"] == "dapo"]  # one run: its value, no interval (the caption says 1 run)
    assert one["runs"].eq(1).all() and one["lo"].isna().all() and one["hi"].isna().all()
    assert one.loc[one["when"] == "end", "mean"].tolist() == pytest.approx([0.5, 0.6, 0.7])
    assert "gspo" not in set(f["variant"])  # diverged: left out, as everywhere in the report
    caption = numbers.table.caption
    for text in (
        "arXiv:2107.03374, Eq. 1",
        "n = 4 sampled",
        "temperature 0.7",
        "step 20",
        "Runs per point: start 1-3, end 1-3.",
        "A hollow marker: a point of one run",
        "t = 4.30 for 3 runs",
    ):
        assert text in caption, text
    rows = md_rows(tables.to_markdown(numbers.table))
    assert rows[0] == [
        "variant", "k", "runs (start)", "pass@k at start [95% CI]", "runs (end)", "pass@k at end [95% CI]",
    ]  # fmt: skip
    assert [r[:2] for r in rows[2:]] == [
        ["grpo", "1"],
        ["grpo", "2"],
        ["grpo", "4"],
        ["dapo", "1"],
        ["dapo", "2"],
        ["dapo", "4"],
    ]
    assert rows[5][5] == "0.5"  # dapo's pass@1: one run, no interval


def test_pass_at_k_figure_on_a_log2_axis_with_start_dashed_and_the_legend_below(sampled):
    settings = report.ReportSettings(hue=("trainer.loss_type",))
    data = report.compute_report(report.load_report_inputs(sampled, settings=settings), settings)
    fig, axes = pass_at_k.pass_at_k_figure(data.numbers("pass_at_k").points, data.facets)
    ax = axes[0, 0]
    fig.canvas.draw()
    assert ax.get_xscale() == "log" and list(ax.get_xticks()) == [1, 2, 4]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4"]
    assert ax.get_ylabel() == "pass@k (sampled eval)" and ax.get_xlabel() == "k (log2 scale)"
    lines = [line for line in ax.get_lines() if line.get_linestyle() != "None"]  # the markers apart
    assert sorted(line.get_linestyle() for line in lines) == ["-", "-", "--", "--"]  # start and end of each
    hollow = [
        line for line in ax.get_lines() if line.get_markerfacecolor() == "white" and len(line.get_xdata())
    ]
    assert [list(line.get_xdata()) for line in hollow] == [
        [1, 2, 4],
        [1, 2, 4],
    ]  # dapo's one run, both points
    (legend,) = fig.legends
    assert legend.get_window_extent().y1 < ax.get_window_extent().y0  # under the panel, never over the data
    assert [t.get_text() for t in legend.get_texts()] == [
        "grpo",
        "dapo",
        "start (before step 1)",
        "end (step 20)",
    ]


def test_the_report_writes_the_pass_at_k_figure_and_table(sampled):
    out = report.make_report(sampled, hue="loss_type")
    for name in (
        "pass_at_k.png",
        "pass_at_k.pdf",
        "pass_at_k_table.md",
        "pass_at_k_table.csv",
        "pass_at_k_table.tex",
    ):
        assert (out / name).is_file(), name
    index = (out / "index.md").read_text()
    assert "## pass@k against k" in index and "![pass@k](pass_at_k.png)" in index
    csv = pd.read_csv(out / "pass_at_k_table.csv")
    assert list(csv.columns) == [
        "variant", "k", "runs_start", "start", "start_lo", "start_hi", "runs_end", "end", "end_lo", "end_hi",
    ]  # fmt: skip


@pytest.mark.parametrize("metric", ["eval/pass@4", layout.SAMPLED_ACCURACY])
def test_a_sampled_eval_metric_is_scored_on_its_last_evaluation(sampled, metric):
    settings = report.ReportSettings(hue=("trainer.loss_type",), metric=metric)
    inputs = report.load_report_inputs(sampled, settings=settings)
    final = scores.final_scores(inputs.frame, metric)
    last = {"eval/pass@4": [0.4, 0.5, 0.6], layout.SAMPLED_ACCURACY: [0.2, 0.3, 0.4]}[metric]
    assert final[["grpo-0", "grpo-1", "grpo-2"]].tolist() == pytest.approx(last)  # not a mean with step 10
    data = report.compute_report(inputs, settings)
    final = data.numbers("final").table
    assert f"Final {metric} per run (last evaluation)" in final.caption
    grpo = final.frame.set_index("variant").loc["grpo"]
    assert grpo["mean"] == pytest.approx(np.mean(last))


def test_metric_labels_and_ranges_of_the_new_columns():
    assert labels.metric_label(layout.WSEQ_ESS_FRAC) == "ESS/N of w_seq"
    assert labels.metric_label("eval/pass@8") == "eval pass@8 (sampled)"
    assert labels.metric_label(layout.SAMPLED_ACCURACY) == "eval accuracy (sampled)"
    assert limits.fixed_limits(layout.WSEQ_ESS_FRAC) == pytest.approx((-0.03, 1.03))
    assert limits.fixed_limits("entropy") is None
    assert limits.clamp_limits((0.0, 1.5), "eval/pass@2", np.array([0.5, 0.9]))[1] == pytest.approx(1.045)


def test_ess_joins_the_dynamics_figure_over_off_policy_steps_on_a_zero_to_one_axis(tmp_path):
    g = tmp_path / "results" / "toy"
    ids = []
    for seed in (0, 1):
        rid = f"grpo-{seed}"
        cols = {
            layout.OFF_POLICY: [0.0, 1.0] * 5,
            layout.WSEQ_ESS_FRAC: [1.0, 0.9 + 0.02 * seed] * 5,
            "entropy": [1.0] * 10,
        }
        eval_steps_run(g, rid, loss_type="grpo", seed=seed, evals={}, steps=10, columns=cols)
        ids.append(rid)
    write_grid(g, ids, ["trainer.loss_type", "seed"])
    settings = report.ReportSettings(hue=("trainer.loss_type",), smoothing="none")
    data = report.compute_report(report.load_report_inputs(g, settings=settings), settings)
    dyn = data.numbers("dynamics")
    assert list(dyn.curves) == ["entropy", layout.WSEQ_ESS_FRAC]
    drawn = dyn.curves[layout.WSEQ_ESS_FRAC].mean.dropna(subset=["mean"])
    assert drawn["x"].tolist() == [2.0, 4.0, 6.0, 8.0, 10.0]  # the on-policy steps' exact 1s are not drawn
    assert drawn["mean"].to_numpy() == pytest.approx(np.full(5, 0.91))
    assert layout.WSEQ_ESS_FRAC not in dyn.missing
    fig, axes = dynamics.dynamics_figure(dyn.curves, data.facets)
    ess = axes.ravel()[1]
    assert ess.get_title() == "ESS/N of w_seq\n(off-policy steps)"
    assert ess.get_ylim() == pytest.approx((-0.03, 1.03))


def test_ess_missing_from_older_runs_is_not_noted_unless_asked_for(sampled):
    settings = report.ReportSettings(hue=("trainer.loss_type",))
    data = report.compute_report(report.load_report_inputs(sampled, settings=settings), settings)
    dyn = data.numbers("dynamics")
    assert layout.WSEQ_ESS_FRAC not in dyn.curves and layout.WSEQ_ESS_FRAC not in dyn.missing
    asked = report.ReportSettings(hue=("trainer.loss_type",), metrics=("entropy", layout.WSEQ_ESS_FRAC))
    data = report.compute_report(report.load_report_inputs(sampled, settings=asked), asked)
    assert data.numbers("dynamics").missing == ("entropy", layout.WSEQ_ESS_FRAC)
