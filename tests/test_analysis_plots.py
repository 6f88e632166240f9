"""analysis.curves plots and analysis.style: legends, missing data, fonts in saved PDFs."""

from __future__ import annotations

import contextlib
import re
import zlib

import numpy as np
import pytest
from analysis_helpers import synthetic_grid

from analysis import load, style
from analysis.curves import frame_curve_figure
from analysis.dynamics import frame_dynamics_figure
from analysis.panels import Facets
from analysis.wseq import frame_wseq_figure

VARIANTS = ("grpo", "dapo", None)
LABELS = {"grpo", "dapo", "(none)"}
BY_LOSS = Facets(hue="loss_type")


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
        lambda df: frame_curve_figure(df, "reward", BY_LOSS),
        lambda df: frame_curve_figure(df, "reward", BY_LOSS, x="tokens", ci="bootstrap", n_boot=100),
        lambda df: frame_curve_figure(
            df, "reward", Facets(hue="loss_type", col="loss_type"), x="time", smoothing={"ema": 0.3}
        ),
        lambda df: frame_dynamics_figure(df),
        lambda df: frame_dynamics_figure(df, x="tokens", smoothing={"window": 3}),
        lambda df: frame_wseq_figure(df),
    ],
    ids=["curve", "curve-tokens-bootstrap", "curve-time-faceted", "panels", "panels-tokens-smoothed", "wseq"],
)
def test_every_variant_in_legend(frame, draw):
    fig, axes = draw(frame)
    assert isinstance(axes, np.ndarray) and axes.ndim == 2
    # in the legend, or (w_seq: one panel per variant) as a panel's title
    assert _legend_labels(fig) | {ax.get_title() for ax in fig.axes} >= LABELS


def test_saved_pdf_has_no_type3_fonts(frame, tmp_path):
    fig, _ = frame_curve_figure(frame, "reward", BY_LOSS)
    fig.suptitle("w_seq $\\log$ ratio")  # mathtext too
    paths = style.save(fig, tmp_path / "curve")
    assert [p.suffix for p in paths] == [".png", ".pdf"]
    assert all(p.stat().st_size > 0 for p in paths)
    pdf = _pdf_bytes_expanded(paths[1])
    assert b"/Type3" not in pdf
    assert b"/FontFile2" in pdf  # embedded TrueType (fonttype 42)


def test_plots_do_not_save(frame, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    frame_curve_figure(frame, "reward", BY_LOSS)
    frame_wseq_figure(frame)
    assert list(tmp_path.iterdir()) == []


def test_all_missing_metric_in_a_facet(frame):
    # kl is logged by dapo only: the grpo and (none) facets have nothing to draw.
    fig, axes = frame_dynamics_figure(frame, ["kl", "entropy"], Facets(hue="loss_type", col="loss_type"))
    assert axes.shape == (2, 3)
    assert _texts(fig).count("no data") == 2
    fig, axes = frame_curve_figure(frame, "kl", Facets(hue="loss_type", col="loss_type"))
    assert _texts(fig).count("no data") == 2


def test_metric_missing_everywhere(frame):
    fig, axes = frame_dynamics_figure(frame, ["vespo/phi_seq_mean", "entropy"])
    assert axes.size == 1  # skipped
    fig, axes = frame_dynamics_figure(frame, ["vespo/phi_seq_mean"], skip_missing=False)
    assert "no data" in _texts(fig)
    fig, axes = frame_dynamics_figure(frame, ["vespo/phi_seq_mean"])
    assert "no data" in _texts(fig)
    df = frame.copy()
    df["reward"] = np.nan
    fig, _ = frame_curve_figure(df, "reward", BY_LOSS)
    assert "no data" in _texts(fig)


def test_wseq_exactly_one_and_extremes(frame):
    df = frame.copy()
    for c in ("w_seq/p05", "w_seq/p50", "w_seq/p95"):
        df[c] = 1.0
    fig, axes = frame_wseq_figure(df)
    lo, hi = axes[0, 0].get_ylim()
    assert 0 < lo < 1 < hi and np.isfinite(hi)
    df["w_seq/p05"] = 0.0
    df["w_seq/p95"] = np.inf
    fig, axes = frame_wseq_figure(df)
    lo, hi = axes[0, 0].get_ylim()
    assert 0 < lo < 1 < hi and np.isfinite(hi)
    fig, axes = frame_wseq_figure(df.drop(columns=["w_seq/p05", "w_seq/p50", "w_seq/p95"]))
    assert "no data" in _texts(fig)


def test_colours_are_consistent(frame):
    colors = style.variant_colors(["dapo", "grpo", "(none)", "my_variant"])
    assert colors == style.variant_colors(["my_variant", "(none)", "grpo", "dapo"])
    assert colors["grpo"] == style.variant_colors(["grpo"])["grpo"]
    assert len(set(colors.values())) == 4
    fig, axes = frame_curve_figure(frame, "reward", Facets(hue="loss_type", colors=colors))
    by_label = {line.get_label(): line.get_color() for line in axes[0, 0].get_lines()}
    for lab in LABELS:
        assert by_label[lab] == colors[lab]


def test_aggregate_ticks_stay_apart_for_close_scores(tmp_path):
    """Final scores 0.3490-0.3593 beside long variant names: the Mean and IQM panels carry at most
    four ticks, whose labels do not overlap once drawn."""
    import pandas as pd

    from analysis.finals import aggregate_figure

    values = [0.3593, 0.3490, 0.3541]
    table = pd.DataFrame({c: values for c in ("mean", "iqm")})
    table["p_improve"] = [float("nan"), 0.0, 0.0]
    for c in ("mean", "iqm", "p_improve"):
        table[f"{c}_lo"] = table[f"{c}_hi"] = float("nan")
    names = ["grpo", "my_reinforce, my_reinforce_scale=0.5", "my_reinforce, my_reinforce_scale=1"]
    fig, axes = aggregate_figure(
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


def test_each_plot_function_draws_one_panel_on_the_ax_it_is_given(frame):
    """As rliable's and openrlbenchmark's: the caller lays the axes out, a ``plot_*`` function draws
    one panel on the ``ax`` it is given (a :class:`Facets` saying which rows are the variants) and
    makes no figure of its own."""
    import pandas as pd
    from matplotlib.figure import Figure

    from analysis import aggregate, curves, dynamics, finals, scores, wseq

    two = frame[frame["loss_type"].isin(["grpo", "dapo"]).to_numpy()]
    facets = Facets(hue="loss_type")
    fig = Figure()
    axes = fig.subplots(1, 5)
    drawn = curves.plot_curves(axes[0], aggregate.curves(two, "reward", by=["loss_type"]), facets)
    assert sorted(drawn.labels) == ["dapo", "grpo"] and len(drawn.lines) == 2
    entropy = aggregate.curves(two, "entropy", by=["loss_type"])
    assert sorted(dynamics.plot_dynamics(axes[1], "entropy", entropy, facets).labels) == ["dapo", "grpo"]
    bands = wseq.wseq_bands(two, by=["loss_type"])
    assert wseq.plot_wseq(axes[2], bands, facets, "grpo").labels == ["grpo"]
    per_run = scores.final_scores(two, "reward")
    runs = two.drop_duplicates("run_id").set_index("run_id")
    sc = pd.DataFrame({"loss_type": runs["loss_type"].astype(str), "score": per_run.reindex(runs.index)})
    table = scores.final_performance_table(two, "reward", by=["loss_type"]).frame
    assert finals.plot_final(axes[3], sc, table, facets).kinds == {"done"}
    profile = finals.profile_frame(sc, ["loss_type"]).frame
    assert len(finals.plot_profile(axes[4], profile, facets).lines) == 2
    assert fig.axes == list(axes) and all(ax.lines or ax.collections for ax in axes)
