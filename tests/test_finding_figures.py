"""One figure per finding (analysis.finding_figures): its arms or dose levels alone on its metric,
the window shaded, an eval metric's start at step 0, the verdict in the title; saved by the report
as finding_<id>.png/.pdf and linked under the findings table."""

from __future__ import annotations

import math

import numpy as np
import pytest
from analysis_helpers import write_dose_grid, write_measures_grid

from analysis import finding_figures as ffm
from analysis import report
from analysis.load import load
from analysis.report.inputs import grid_findings, start_metrics
from harness import layout


def figure_of(grid_dir, fid):
    """The figure's numbers of finding ``fid`` of a results folder, and its findings row."""
    table = report.findings_results(grid_dir)
    findings = grid_findings(grid_dir)
    df = load(grid_dir)
    f = next(f for f in findings if f.id == fid)
    row = table.frame.set_index("finding").loc[fid].to_dict()
    runs = [r for ids in f.arms.values() for r in ids]
    return ffm.finding_numbers(df, f, row, runs, start_metrics(grid_dir, runs), smoothing=None), row


def test_an_eval_metric_s_curves_start_at_step_0_with_the_runs_start(tmp_path):
    g = tmp_path / "g"
    write_measures_grid(g)
    ff, row = figure_of(g, "T")
    assert ff.labels == ("baseline: loss_type=grpo", "variant: loss_type=dapo") and ff.start
    first = ff.curves.mean.sort_values("x").groupby("arm", observed=True).head(1)
    assert first["x"].tolist() == [0.0, 0.0] and first["mean"].tolist() == pytest.approx([0.2, 0.2])
    # the window, 75-100% of 20 logged steps: rows 15..19, steps 16..20
    assert ff.span == (16.0, 20.0) and ff.target == pytest.approx(row["target"])
    assert ff.verdict == "reproduced" and ff.effect.startswith("-6.67 [")
    ff, _ = figure_of(g, "S")
    assert ff.labels == ("runs: loss_type=dapo",) and ff.curves.mean["x"].min() == 0.0
    assert math.isnan(ff.target)


def test_a_dose_finding_s_figure_has_its_levels_and_its_runs_against_the_value(tmp_path):
    g = tmp_path / "g"
    arms = write_dose_grid(g, seeds=2)
    ff, row = figure_of(g, "D")
    assert ff.labels == tuple(f"epsilon_high={v}" for v in arms) and not ff.start  # entropy: no start
    assert len(ff.dose) == 8 and sorted(ff.dose["x"].unique()) == [0.2, 0.28, 0.4, 0.8]
    intercept, slope = ff.fit
    assert slope == pytest.approx(row["effect"])
    colors = list(ff.colors.values())
    assert len(set(colors)) == 4  # a sequential map, low to high
    fig, axes = ffm.finding_figure(ff)
    title = fig._suptitle.get_text().replace("\u00a0", " ")  # the interval is held on one line
    assert axes.shape == (1, 2) and title.startswith(
        f"D: reproduced; slope {ff.effect} per unit of epsilon_high"
    )
    texts = {t.get_text() for t in fig.legends[0].get_texts()}
    assert texts >= {*ff.labels, "window (50-100% of steps)"}


def test_a_long_claim_is_broken_to_the_figure_s_width(tmp_path):
    g = tmp_path / "g"
    write_measures_grid(g)
    ff, _ = figure_of(g, "S")
    long = ffm.FindingFigure(**{**ff.__dict__, "claim": "word " * 60})
    fig, axes = ffm.finding_figure(long)
    renderer = fig.canvas.get_renderer()
    fig.canvas.draw()
    title = fig._suptitle
    assert title.get_text().count("\n") >= 3
    assert title.get_window_extent(renderer).width <= fig.bbox.width
    assert axes.shape == (1, 1)


@pytest.mark.slow
def test_the_report_saves_one_figure_per_finding_and_links_them_under_the_table(tmp_path):
    g = tmp_path / "g"
    write_measures_grid(g)
    out = report.make_report(g)
    index = (out / "index.md").read_text()
    findings = index[index.index("## Findings") :]
    assert "- T: [finding_T.png](finding_T.png), [finding_T.pdf](finding_T.pdf) (reproduced)" in findings
    for fid in ("T", "S"):
        assert (out / f"finding_{fid}.png").stat().st_size > 0 and (out / f"finding_{fid}.pdf").is_file()
    assert findings.index("finding_T.png") < findings.index(
        "\n## ", 3
    )  # under the table, before what follows
    assert np.isfinite(layout.read_start_evals(layout.run_dir(g, "dapo-s0"))[layout.EVAL_ACCURACY])
