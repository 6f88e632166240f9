"""The tables (analysis.timing, analysis.learning_check, analysis.time_to_target, analysis.scores)
on small frames with hand-computed values, and their rendering (analysis.tables)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from analysis_helpers import md_rows

from analysis import learning_check, scores, tables, time_to_target, timing
from harness import layout


def _frame(spec):
    """spec: {run_id: (loss_type, seed, {column: list})} → a frame shaped like analysis.load's."""
    parts = []
    for rid, (lt, seed, cols) in spec.items():
        n = len(next(iter(cols.values())))
        part = pd.DataFrame({"run_id": rid, "step": np.arange(1, n + 1), **cols})
        part["loss_type"] = lt
        part["seed"] = seed
        parts.append(part)
    df = pd.concat(parts, ignore_index=True)
    df["run_id"] = df["run_id"].astype("category")
    return df


@pytest.fixture
def timing_frame():
    return _frame(
        {
            "g0": ("grpo", 0, {layout.STEP_WALL_S: [2.0, 2.0], "step_time": [1.0, 3.0], layout.TOKENS_GENERATED: [100.0, 100.0], layout.TOKENS_TRAINED: [50.0, 50.0], layout.PEAK_MEMORY_MB: [10.0, 12.0]}),
            "g1": ("grpo", 1, {layout.STEP_WALL_S: [4.0, 4.0], "step_time": [2.0, 2.0], layout.TOKENS_GENERATED: [100.0, 100.0], layout.TOKENS_TRAINED: [50.0, 50.0], layout.PEAK_MEMORY_MB: [11.0, 11.0]}),
            "d0": ("dapo", 0, {layout.STEP_WALL_S: [1.0, 2.0], "step_time": [0.5, 0.5], layout.TOKENS_GENERATED: [30.0, 30.0], layout.TOKENS_TRAINED: [30.0, 30.0], layout.PEAK_MEMORY_MB: [20.0, 5.0]}),
        }
    )  # fmt: skip


def test_timing_table_by_hand(timing_frame):
    t = timing.timing_table(timing_frame).frame.set_index("loss_type")
    assert t.loc["grpo", "runs"] == 2
    assert t.loc["grpo", "s_per_step"] == pytest.approx(3.0)  # mean of 2 and 4
    assert t.loc["grpo", "total_s"] == pytest.approx(6.0)  # mean of 4 and 8
    assert t.loc["grpo", "trl_step_time_median_s"] == pytest.approx(2.0)  # median of 1, 3, 2, 2
    assert t.loc["grpo", "gen_tokens_per_s"] == pytest.approx((50.0 + 25.0) / 2)
    assert t.loc["grpo", "trained_tokens_per_s"] == pytest.approx((25.0 + 12.5) / 2)
    assert t.loc["grpo", "peak_memory_mb"] == 12.0
    assert t.loc["dapo", "s_per_step"] == pytest.approx(1.5)
    assert t.loc["dapo", "speedup"] == pytest.approx(2.0)
    assert t.loc["grpo", "speedup"] == pytest.approx(1.0)


def test_timing_table_without_baseline_or_columns(timing_frame):
    t = timing.timing_table(timing_frame, baseline="nope").frame
    assert t["speedup"].isna().all()
    t = timing.timing_table(timing_frame.drop(columns=[layout.TOKENS_TRAINED])).frame
    assert t["trained_tokens_per_s"].isna().all()


def test_learning_check_by_hand():
    df = _frame(
        {
            "a": ("grpo", 0, {"reward": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]}),
            "b": ("grpo", 1, {"reward": [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]}),
        }
    )
    check = learning_check.learning_check(df).frame.set_index("run_id")
    assert check.loc["a", "first"] == 0.5 and check.loc["a", "last"] == 8.5 and check.loc["a", "diff"] == 8.0
    assert check.loc["b", "diff"] == -1.0
    assert check.loc["a", "seed"] == 0
    s = learning_check.learning_summary(learning_check.learning_check(df)).frame.iloc[0]
    assert s["diff_mean"] == pytest.approx(3.5)
    assert s["diff_std"] == pytest.approx(math.sqrt(2 * 4.5**2))
    assert s["improved"] == 1 and s["runs"] == 2


def test_time_to_target_by_hand():
    df = _frame(
        {
            "g0": ("grpo", 0, {"reward": [0.0, 0.5, 1.0, 1.0], layout.ELAPSED_S: [1.0, 2.0, 3.0, 4.0], layout.TOKENS_GENERATED_TOTAL: [10.0, 20.0, 30.0, 40.0]}),
            "g1": ("grpo", 1, {"reward": [0.0, 0.0, 0.0, 1.0], layout.ELAPSED_S: [1.0, 2.0, 3.0, 4.0], layout.TOKENS_GENERATED_TOTAL: [10.0, 20.0, 30.0, 40.0]}),
            "d0": ("dapo", 0, {"reward": [1.0, 1.0, 1.0, 1.0], layout.ELAPSED_S: [0.5, 1.0, 1.5, 2.0], layout.TOKENS_GENERATED_TOTAL: [10.0, 20.0, 30.0, 40.0]}),
            "d1": ("dapo", 1, {"reward": [0.0, 0.0, 0.0, 0.0], layout.ELAPSED_S: [0.5, 1.0, 1.5, 2.0], layout.TOKENS_GENERATED_TOTAL: [10.0, 20.0, 30.0, 40.0]}),
        }
    )  # fmt: skip
    t = time_to_target.time_to_target_table(df, 1.0).frame.set_index("loss_type")
    assert t.loc["grpo", "reached"] == 2 and t.loc["dapo", "reached"] == 1
    assert (
        t.loc["grpo", "steps"] == 3.5 and t.loc["grpo", "seconds"] == 3.5 and t.loc["grpo", "tokens"] == 35.0
    )
    assert t.loc["dapo", "steps"] == 1.0 and t.loc["dapo", "seconds"] == 0.5
    assert t.loc["dapo", "speedup_seconds"] == pytest.approx(7.0)
    assert t.loc["dapo", "speedup_steps"] == pytest.approx(3.5)


def test_final_performance_by_hand():
    spec = {}
    for k, v in enumerate([1.0, 2.0, 4.0]):
        spec[f"g{k}"] = ("grpo", k, {"reward": [0.0] * 9 + [v]})  # last 10% of 10 steps = last step
        spec[f"d{k}"] = ("dapo", k, {"reward": [0.0] * 9 + [v + 10]})
    t = scores.final_performance_table(_frame(spec), reps=200).frame.set_index("loss_type")
    assert t.loc["grpo", "mean"] == pytest.approx(7 / 3)
    assert t.loc["grpo", "iqm"] == pytest.approx(7 / 3)
    assert t.loc["grpo", "mean_lo"] <= 7 / 3 <= t.loc["grpo", "mean_hi"]
    assert t.loc["dapo", "p_improve"] == 1.0
    assert math.isnan(t.loc["grpo", "p_improve"])
    again = scores.final_performance_table(_frame(spec), reps=200).frame.set_index("loss_type")
    pd.testing.assert_frame_equal(t, again)
    t2 = scores.final_performance_table(_frame(spec), last_k=10, reps=50).frame.set_index("loss_type")
    assert t2.loc["grpo", "mean"] == pytest.approx(0.7 / 3)


def test_final_performance_eval_accuracy_uses_last_eval():
    df = _frame({"g0": ("grpo", 0, {layout.EVAL_ACCURACY: [0.1, None, 0.3, None]})})
    t = scores.final_performance_table(df, layout.EVAL_ACCURACY, reps=10).frame
    assert t.loc[0, "mean"] == pytest.approx(0.3)


def test_rendering(timing_frame, tmp_path):
    table = timing.timing_table(timing_frame)
    t = table.frame
    md = tables.to_markdown(table)
    header, align, *rows = md_rows(md)
    assert header[:3] == ["loss_type", "runs", "steps"] and "s/step" in header
    assert align[0] == ":" + "-" * (len(align[0]) - 1) and all(a.endswith(":") for a in align[1:])
    assert [r[0] for r in rows] == list(t["loss_type"])
    assert (
        rows[0][1] == str(t.loc[0, "runs"])
        and rows[0][header.index("s/step")] == f"{t.loc[0, 's_per_step']:.3g}"
    )
    tex = tables.to_latex(table, caption="50% of runs_x")
    assert "\\toprule" in tex and "\\midrule" in tex and "\\bottomrule" in tex
    assert "50\\% of runs\\_x" in tex and "\\begin{tabular}{l" + "r" * (len(header) - 1) + "}" in tex
    assert "loss\\_type & runs & steps" in tex and f"\n{rows[0][0]} & {rows[0][1]} & " in tex
    paths = tables.write_table(table, tmp_path / "timing")
    assert [p.name for p in paths] == ["timing.md", "timing.csv", "timing.tex"]
    back = pd.read_csv(paths[1])
    assert back["s_per_step"].tolist() == pytest.approx(t["s_per_step"].tolist())


def test_interval_columns_render_as_brackets():
    t = pd.DataFrame({"v": ["a"], "mean": [1.0], "mean_lo": [0.5], "mean_hi": [1.5]})
    assert md_rows(tables.to_markdown(t))[2] == ["a", "1 [0.5, 1.5]"]


def test_cells_are_escaped_and_missing_values_are_dashes():
    t = tables.Table(
        pd.DataFrame({"v": ["a|b_c", "t~u^v<w>&%"], "mean": [1234.5, float("nan")], "ok": [True, False]}),
        display={"mean": "mean (s)"},
    )
    header, align, *rows = md_rows(tables.to_markdown(t))
    assert header == ["v", "mean (s)", "ok"]
    assert [a[0] + a[-1] for a in align] == [":-", "-:", ":-"]
    assert rows == [["a\\|b_c", "1,234", "True"], ["t~u^v<w>&%", "–", "False"]]
    tex = tables.to_latex(t, label="tab:x")
    assert "a|b\\_c & 1,234 & True \\\\" in tex
    assert (
        "t\\textasciitilde{}u\\textasciicircum{}v\\textless{}w\\textgreater{}\\&\\% & -- & False \\\\" in tex
    )
    assert "\\label{tab:x}" in tex and "–" not in tex


def test_a_table_without_rows_keeps_its_header_and_alignment():
    t = pd.DataFrame({"v": pd.Series([], dtype=object), "mean": pd.Series([], dtype=float)})
    header, align, *rows = md_rows(tables.to_markdown(t))
    assert header == ["v", "mean"] and [a[0] + a[-1] for a in align] == [":-", "-:"] and rows == []
    assert "v & mean \\\\\n\\midrule\n\\bottomrule" in tables.to_latex(t)


def test_a_table_record_keeps_its_headers_read_only_and_beside_the_frame(tmp_path):
    frame = pd.DataFrame({"v": ["a"], "mean": [1.0]})
    t = tables.Table(frame, caption="Means.", display={"mean": "mean (s)"})
    with pytest.raises(TypeError):
        t.display["v"] = "variant"  # type: ignore[index]
    more = t.with_headers({"v": "variant"})
    assert dict(t.display) == {"mean": "mean (s)"} and dict(more.display) == {
        "mean": "mean (s)",
        "v": "variant",
    }
    assert more.frame is frame and more.caption == "Means." and not frame.attrs
    md, csv, tex = tables.write_table(more, tmp_path / "t")
    assert md.read_text().startswith("Means.\n\n| variant ") and "\\caption{Means.}" in tex.read_text()
    assert csv.read_text().splitlines()[0] == "v,mean"  # the CSV keeps the frame's own names
    plain = tables.write_table(frame, tmp_path / "p")[0].read_text()
    assert plain.startswith("| v ")  # a plain frame: no caption, its own headers
