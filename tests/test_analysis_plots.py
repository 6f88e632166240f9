"""analysis.curves plots and analysis.style: legends, missing data, fonts in saved PDFs."""

from __future__ import annotations

import contextlib
import re
import zlib

import numpy as np
import pytest
from analysis_helpers import synthetic_grid

from analysis import load, style
from analysis.curves import plot_curves
from analysis.dynamics import plot_panels
from analysis.wseq import plot_wseq

VARIANTS = ("grpo", "dapo", None)
LABELS = {"grpo", "dapo", "(none)"}


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    g = tmp_path_factory.mktemp("plots") / "grid"
    synthetic_grid(g, variants=VARIANTS, seeds=(0, 1, 2), steps=20, extra={"dapo": ["kl"]})
    return load(g)


def _legend_labels(fig) -> set[str]:
    return {t.get_text() for leg in fig.legends for t in leg.get_texts()}


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def _pdf_bytes_expanded(path) -> bytes:
    """The PDF with every Flate stream decompressed appended, so font dictionaries are searchable."""
    data = path.read_bytes()
    out = [data]
    for m in re.finditer(rb"stream\r?\n(.*?)endstream", data, re.S):
        with contextlib.suppress(zlib.error):
            out.append(zlib.decompress(m.group(1)))
    return b"\n".join(out)


@pytest.mark.parametrize(
    "draw",
    [
        lambda df: plot_curves(df, "reward"),
        lambda df: plot_curves(df, "reward", x="tokens", ci="bootstrap", n_boot=100),
        lambda df: plot_curves(df, "reward", x="time", smoothing={"ema": 0.3}, col="loss_type"),
        lambda df: plot_panels(df),
        lambda df: plot_panels(df, x="tokens", smoothing={"window": 3}),
        lambda df: plot_wseq(df),
    ],
    ids=["curve", "curve-tokens-bootstrap", "curve-time-faceted", "panels", "panels-tokens-smoothed", "wseq"],
)
def test_every_variant_in_legend(frame, draw):
    fig, axes = draw(frame)
    assert isinstance(axes, np.ndarray) and axes.ndim == 2
    # in the legend, or (w_seq: one panel per variant) as a panel's title
    assert _legend_labels(fig) | {ax.get_title() for ax in fig.axes} >= LABELS


def test_saved_pdf_has_no_type3_fonts(frame, tmp_path):
    fig, _ = plot_curves(frame, "reward")
    fig.suptitle("w_seq $\\log$ ratio")  # mathtext too
    paths = style.save(fig, tmp_path / "curve")
    assert [p.suffix for p in paths] == [".png", ".pdf"]
    assert all(p.stat().st_size > 0 for p in paths)
    pdf = _pdf_bytes_expanded(paths[1])
    assert b"/Type3" not in pdf
    assert b"/FontFile2" in pdf  # embedded TrueType (fonttype 42)


def test_plots_do_not_save(frame, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plot_curves(frame, "reward")
    plot_wseq(frame)
    assert list(tmp_path.iterdir()) == []


def test_all_missing_metric_in_a_facet(frame):
    # kl is logged by dapo only: the grpo and (none) facets have nothing to draw.
    fig, axes = plot_panels(frame, ["kl", "entropy"], col="loss_type")
    assert axes.shape == (2, 3)
    assert _texts(fig).count("no data") == 2
    fig, axes = plot_curves(frame, "kl", col="loss_type")
    assert _texts(fig).count("no data") == 2


def test_metric_missing_everywhere(frame):
    fig, axes = plot_panels(frame, ["vespo/phi_seq_mean", "entropy"])
    assert axes.size == 1  # skipped
    fig, axes = plot_panels(frame, ["vespo/phi_seq_mean"], skip_missing=False)
    assert "no data" in _texts(fig)
    fig, axes = plot_panels(frame, ["vespo/phi_seq_mean"])
    assert "no data" in _texts(fig)
    df = frame.copy()
    df["reward"] = np.nan
    fig, _ = plot_curves(df, "reward")
    assert "no data" in _texts(fig)


def test_wseq_exactly_one_and_extremes(frame):
    df = frame.copy()
    for c in ("w_seq/p05", "w_seq/p50", "w_seq/p95"):
        df[c] = 1.0
    fig, axes = plot_wseq(df)
    lo, hi = axes[0, 0].get_ylim()
    assert 0 < lo < 1 < hi and np.isfinite(hi)
    df["w_seq/p05"] = 0.0
    df["w_seq/p95"] = np.inf
    fig, axes = plot_wseq(df)
    lo, hi = axes[0, 0].get_ylim()
    assert 0 < lo < 1 < hi and np.isfinite(hi)
    fig, axes = plot_wseq(df.drop(columns=["w_seq/p05", "w_seq/p50", "w_seq/p95"]))
    assert "no data" in _texts(fig)


def test_colours_are_consistent(frame):
    colors = style.variant_colors(["dapo", "grpo", "(none)", "my_variant"])
    assert colors == style.variant_colors(["my_variant", "(none)", "grpo", "dapo"])
    assert colors["grpo"] == style.variant_colors(["grpo"])["grpo"]
    assert len(set(colors.values())) == 4
    fig, axes = plot_curves(frame, "reward", colors=colors)
    by_label = {line.get_label(): line.get_color() for line in axes[0, 0].get_lines()}
    for lab in LABELS:
        assert by_label[lab] == colors[lab]


def test_aggregate_ticks_stay_apart_for_close_scores(tmp_path):
    """Final scores 0.3490-0.3593 beside long variant names: the Mean and IQM panels carry at most
    four ticks, whose labels do not overlap once drawn."""
    import pandas as pd

    from analysis.finals import plot_aggregate

    values = [0.3593, 0.3490, 0.3541]
    table = pd.DataFrame({c: values for c in ("mean", "iqm")})
    table["p_improve"] = [float("nan"), 0.0, 0.0]
    for c in ("mean", "iqm", "p_improve"):
        table[f"{c}_lo"] = table[f"{c}_hi"] = float("nan")
    names = ["grpo", "my_reinforce, my_reinforce_scale=0.5", "my_reinforce, my_reinforce_scale=1"]
    fig, axes = plot_aggregate(
        table, metric="reward", names=names, colors=["C0", "C1", "C2"], baseline="grpo"
    )
    assert len(axes[0]) == 3
    seen = []  # the tick labels as the saved PNG draws them (style.save: 200 dpi, the style's fonts)

    def capture(event):
        for ax in axes[0]:
            lo, hi = ax.get_xlim()
            labels = [t for t in ax.get_xticklabels() if t.get_text() and lo <= t.get_position()[0] <= hi]
            seen.append([(t.get_text(), t.get_window_extent(event.renderer)) for t in labels])

    fig.canvas.mpl_connect("draw_event", capture)
    style.save(fig, tmp_path / "aggregate", formats=("png",))
    assert len(seen) >= 3
    for k, labels in enumerate(seen[-3:]):  # the last draw is the one written
        assert 2 <= len(labels) <= (4 if k < 2 else 5)
        boxes = sorted((box for _, box in labels), key=lambda b: b.x0)
        assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:], strict=False)), [text for text, _ in labels]
