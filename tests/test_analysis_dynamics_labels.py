"""The training-dynamics figure with panels per staleness (the vespo grid's layout): the y labels of
neighbouring rows must not run into each other ("completion length (tokens)" into "eval accuracy
(greedy)", as they did)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import dynamics, style
from analysis.panels import Facets
from harness import layout

METRICS = ["vespo/phi_seq_mean", "entropy", layout.EVAL_ACCURACY, "completions/mean_length"]


def vespo_like_frame(steps: int = 12) -> pd.DataFrame:
    """4 (k, lambda) variants x 3 staleness panels x 2 seeds, the vespo report's dynamics metrics."""
    parts = []
    variants = ["k/λ +2/3 −3/2", "k/λ +4/6 −6/4", "k/λ +1/1.5 −1.5/1", "k/λ +4/6 −3/2"]
    panels = ["spg=1, μ=1", "spg=1, μ=2", "spg=2, μ=2"]
    rng = np.random.default_rng(0)
    step = np.arange(1, steps + 1)
    for v in variants:
        for p in panels:
            for s in (0, 1):
                parts.append(
                    pd.DataFrame(
                        {
                            layout.RUN_ID: f"{v}-{p}-{s}",
                            layout.STEP: step,
                            "variant": v,
                            "panel": p,
                            "vespo/phi_seq_mean": 1.0 - 0.01 * rng.random(steps),
                            "entropy": 1.0 - 0.02 * step,
                            layout.EVAL_ACCURACY: np.where(step % 4 == 0, 0.1 + 0.01 * step, np.nan),
                            "completions/mean_length": 20.0 + step + rng.standard_normal(steps),
                            layout.OFF_POLICY: np.ones(steps) if p != panels[0] else np.zeros(steps),
                        }
                    )
                )
    df = pd.concat(parts, ignore_index=True)
    df["variant"] = pd.Categorical(df["variant"], categories=variants, ordered=True)
    df["panel"] = pd.Categorical(df["panel"], categories=panels, ordered=True)
    return df


@pytest.mark.slow
def test_dynamics_y_labels_of_neighbouring_rows_do_not_overlap(tmp_path):
    fig, axes = dynamics.frame_dynamics_figure(
        vespo_like_frame(), METRICS, Facets(hue="variant", col="panel")
    )
    assert axes.shape == (4, 3)
    seen = []  # the first column's y labels as the saved PNG draws them (style.save: 200 dpi)

    def capture(event):
        seen.append(
            [
                (ax.yaxis.label.get_text(), ax.yaxis.label.get_window_extent(event.renderer))
                for ax in axes[:, 0]
            ]
        )

    fig.canvas.mpl_connect("draw_event", capture)
    style.save(fig, tmp_path / "dynamics", formats=("png",))
    labels = seen[-1]  # the last draw is the one written
    texts = [" ".join(t.split()) for t, _ in labels]
    assert texts == [
        "VESPO phi_seq (mean) (off-policy steps)",
        "token entropy (nats)",
        "eval accuracy (greedy)",
        "completion length (tokens)",
    ]
    boxes = [box for _, box in labels]  # rows top to bottom: each label must end above the next one
    for upper, lower, (a, b) in zip(boxes, boxes[1:], zip(texts, texts[1:], strict=False), strict=False):
        assert upper.y0 > lower.y1, (a, b, upper, lower)
    # and each label stays within its own row's share of the figure
    heights = [box.height for box in boxes]
    assert max(heights) < fig.bbox.height / 4 * 0.8 * 200 / fig.dpi
