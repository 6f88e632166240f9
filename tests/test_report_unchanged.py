"""A results folder recorded before ESS/N, the sampled eval (pass@k) and dynamic sampling existed
gets the report it got before them: the same index.md, byte for byte (tests/data holds the one
the report wrote before these columns were read), the same files, and the same dynamics figure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from analysis_helpers import synthetic_grid
from matplotlib.backends.backend_agg import FigureCanvasAgg

from analysis import dynamics, report, style
from analysis.settings.report import DYNAMICS_METRICS, RECENT_DYNAMICS
from harness import layout

DATA = Path(__file__).resolve().parent / "data"
#: The files the report of :func:`_old_grid` wrote before the new columns were read.
FILES = [
    "aggregate.pdf", "aggregate.png", "dynamics_step.pdf", "dynamics_step.png", "final.pdf", "final.png",
    "final_performance.csv", "final_performance.md", "final_performance.tex", "index.md", "learning_check.csv",
    "learning_check.md", "learning_check.tex", "learning_check_runs.csv", "performance_profile.pdf",
    "performance_profile.png", "reward_step.pdf", "reward_step.png", "timing.csv", "timing.md", "timing.tex",
    "variants.csv", "variants.md", "variants.tex", "w_seq.pdf", "w_seq.png",
]  # fmt: skip


def _old_grid(tmp_path: Path) -> Path:
    g = tmp_path / "results" / "toy"
    synthetic_grid(
        g, variants=("grpo", "dapo"), seeds=(0, 1), steps=12, extra={"dapo": ["kl", "clip_ratio/region_mean"]}
    )
    return g


def _pixels(fig) -> np.ndarray:
    canvas = FigureCanvasAgg(fig)
    with style.context():
        canvas.draw()
    return np.asarray(canvas.buffer_rgba())


def test_a_folder_without_the_new_columns_gets_the_same_report(tmp_path):
    out = report.make_report(_old_grid(tmp_path))
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == FILES
    assert (out / "index.md").read_text() == (DATA / "report_index_without_new_columns.md").read_text()


def test_its_dynamics_figure_is_the_one_drawn_from_the_panels_before_ess(tmp_path):
    """ESS/N joined the default panels; on runs that did not record it the figure is, pixel for
    pixel, the one drawn from the panel list without it."""
    settings = report.ReportSettings(hue=("trainer.loss_type",))
    inputs = report.load_report_inputs(_old_grid(tmp_path), settings=settings)
    data = report.compute_report(inputs, settings)
    before = [m for m in DYNAMICS_METRICS if m not in RECENT_DYNAMICS]
    assert layout.WSEQ_ESS_FRAC in DYNAMICS_METRICS and layout.WSEQ_ESS_FRAC not in before
    curves = data.numbers("dynamics").curves
    assert list(curves) == [m for m in before if m in curves]
    frame = inputs.frame

    def logged(metrics):
        return [m for m in metrics if m in frame.columns and frame[m].notna().any()]

    now, _ = dynamics.dynamics_figure(curves, data.facets, metrics=logged(DYNAMICS_METRICS))
    then, _ = dynamics.dynamics_figure(curves, data.facets, metrics=logged(before))
    assert np.array_equal(_pixels(now), _pixels(then))
